"""Reading seed runs: spread, rankings that hold, stale data, and claims checked against them.

Everything here works on plain dicts, ``{offset: {glue key: value}}``, so a chapter can
build its seed table and check its sentences from ``<chapter>.seeds.json`` plus its own
run, and the tests can do the same on a small fixture.
"""

from __future__ import annotations

import json
import math
import pathlib
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping, Sequence

__all__ = [
    "ClaimContradicted",
    "load_seed_runs",
    "mean_sd",
    "ranking",
    "flipped_pairs",
    "lower_in_every_run",
    "stale_keys",
    "check_claim",
]

REPOSITORY_RAW = "https://raw.githubusercontent.com/daiyip/ml-explained/main/"

Runs = Mapping[int, Mapping[str, float]]


class ClaimContradicted(AssertionError):
    """A sentence of the chapter says something its own seed runs do not show."""


def load_seed_runs(filename: str, repo_path: str) -> dict[int, dict[str, object]]:
    """The values of each seed offset, from ``filename`` in the working directory.

    A chapter executes in its own folder, where the data file lives beside it. Outside a
    checkout (Colab) the same file is read from the repository's ``main`` branch.
    """
    local = pathlib.Path(filename)
    if local.is_file():
        data = json.loads(local.read_text())
    else:
        url = REPOSITORY_RAW + repo_path
        try:
            with urllib.request.urlopen(url, timeout=30) as response:
                data = json.loads(response.read())
        except (urllib.error.URLError, TimeoutError) as err:
            raise FileNotFoundError(f"no {filename} here and could not fetch {url} ({err})") from err
    return {int(run["offset"]): run["values"] for run in data["runs"]}


def mean_sd(values: Sequence[float]) -> tuple[float, float]:
    """Mean and sample standard deviation (n - 1); the sd of a single value is 0."""
    n = len(values)
    mean = sum(values) / n
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1)) if n > 1 else 0.0
    return mean, sd


def ranking(values: Mapping[str, float], keys: Sequence[str]) -> list[str]:
    """``keys`` from the highest value to the lowest (for losses: most harmful first)."""
    return sorted(keys, key=lambda k: values[k], reverse=True)


def flipped_pairs(runs: Runs, keys: Sequence[str]) -> list[tuple[str, str]]:
    """Pairs of ``keys`` whose order is not the same in every run (empty: the ranking held)."""
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


def stale_keys(current: Mapping[str, float], stored: Mapping[str, float], keys: Sequence[str], tol: float) -> list[str]:
    """Keys whose value in this run differs from the stored run of the same offset by more than ``tol``."""
    return [k for k in keys if k not in stored or abs(float(current[k]) - float(stored[k])) > tol]


def check_claim(claim: str, holds: Callable[[Mapping[str, float]], bool], runs: Runs) -> None:
    """Raise :class:`ClaimContradicted`, naming the claim, unless it holds in every run."""
    failing = [r for r in runs if not holds(runs[r])]
    if failing:
        raise ClaimContradicted(f"the chapter claims {claim!r}, but these runs contradict it: {failing}")
