"""Reading seed runs: spread, rankings that hold, drift, and claims checked
against them.

Everything here works on plain dicts, ``{offset: {glue key: value}}``, so a
chapter can build its seed table and check its sentences from
``<chapter>.seeds.json`` plus its own run, and the tests can do the same on
a small fixture.
"""

from __future__ import annotations

import json
import math
import os
import pathlib
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping, Sequence

__all__ = [
    "ClaimContradicted",
    "load_seed_data",
    "mean_sd",
    "ranking",
    "flipped_pairs",
    "lower_in_every_run",
    "largest_drift",
    "largest_spread",
    "check_claim",
]

#: Where the repository's files are read from outside a checkout (Colab);
#: ``$MLEXP_REPOSITORY_RAW`` points elsewhere (a fork, or a test's server).
REPOSITORY_RAW = (
    "https://raw.githubusercontent.com/daiyip/ml-explained/main/"
)

Runs = Mapping[int, Mapping[str, float]]


class ClaimContradicted(AssertionError):
    """A sentence of the chapter says something its own seed runs do not
    show."""


def load_seed_data(filename: str, repo_path: str) -> dict:
    """A chapter's stored seed runs, from ``filename`` in the working
    directory.

    A chapter executes in its own folder, where the data file lives beside
    it. Outside a checkout (Colab) the same file is read from the
    repository's ``main`` branch.
    """
    local = pathlib.Path(filename)
    if local.is_file():
        return json.loads(local.read_text())
    url = os.environ.get("MLEXP_REPOSITORY_RAW", REPOSITORY_RAW) + repo_path
    try:
        with urllib.request.urlopen(url, timeout=30) as response:
            return json.loads(response.read())
    except OSError as err:  # URLError, timeouts and socket errors alike
        raise FileNotFoundError(
            f"no {filename} here and could not fetch {url} ({err}); run "
            "the "
            "chapter from a checkout, or make its seed runs (see the "
            "README)"
        ) from err


def mean_sd(values: Sequence[float]) -> tuple[float, float]:
    """Mean and sample standard deviation (n - 1); the sd of a single value
    is 0."""
    n = len(values)
    mean = sum(values) / n
    sd = (
        math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))
        if n > 1
        else 0.0
    )
    return mean, sd


def ranking(values: Mapping[str, float], keys: Sequence[str]) -> list[str]:
    """``keys`` from the highest value to the lowest (for losses: most
    harmful first)."""
    return sorted(keys, key=lambda k: values[k], reverse=True)


def flipped_pairs(runs: Runs, keys: Sequence[str]) -> list[tuple[str, str]]:
    """Pairs of ``keys`` whose order is not the same in every run (empty:
    the ranking held)."""
    flipped = []
    for i, a in enumerate(keys):
        for b in keys[i + 1 :]:
            signs = {runs[r][a] > runs[r][b] for r in runs}
            if len(signs) > 1:
                flipped.append((a, b))
    return flipped


def lower_in_every_run(runs: Runs, lower: str, than: str) -> bool:
    """True when ``runs[r][lower] < runs[r][than]`` holds for every run."""
    return all(runs[r][lower] < runs[r][than] for r in runs)


def largest_drift(
    current: Mapping[str, float],
    stored: Mapping[str, float],
    keys: Sequence[str],
) -> tuple[float, str]:
    """How far this run is from a stored run of the same seed: the largest
    gap, and its key."""
    return max((abs(float(current[k]) - float(stored[k])), k) for k in keys)


def largest_spread(runs: Runs, keys: Sequence[str]) -> tuple[float, str]:
    """The largest seed-to-seed standard deviation over ``keys``, and its
    key."""
    return max((mean_sd([runs[r][k] for r in runs])[1], k) for k in keys)


def check_claim(
    claim: str, holds: Callable[[Mapping[str, float]], bool], runs: Runs
) -> None:
    """Raise :class:`ClaimContradicted`, naming the claim, unless it holds
    in every run."""
    failing = [r for r in runs if not holds(runs[r])]
    if failing:
        raise ClaimContradicted(
            f"the chapter claims {claim!r}, but these runs contradict "
            f"it: {failing}"
        )
