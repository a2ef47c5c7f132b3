"""A chapter's "Across three seeds" section: the table, what it rests on,
and the claims.

Every chapter that checks its findings across seeds calls
:func:`seed_section` once, after its experiment, with the values it glued
and the sentences it claims. The function:

- glues this run's fingerprint and machine, with the table's rows and the
  claims, so that a seed run (:mod:`mlexp.seedruns`) or the build's own run
  (``seedruns harvest``) can be stored with its numbers; in a seed run it
  stops there and returns ``None``;
- in a build, reads ``<chapter>.seeds.json`` and keeps the stored runs of
  this build's kind of arithmetic (:mod:`mlexp.precision`: float32 on every
  device, so a GPU build is judged against runs made on a CPU; runs of
  another kind, from before that rule, differ by more than rounding and are
  never mixed in);
- puts this page's run in the table as the entry of its own seed offset, so
  one seed never shows two numbers, and the mean and standard deviation
  include it;
- says, in the table's caption, which machines made the stored runs and
  this one, and how far this build lies from the stored run of its offset
  against the spread between seeds: within the spread is the normal case on
  another machine, beyond it is said plainly in a warning;
- warns, naming what changed, when the stored runs were made with other
  code, library, corpus or PyTorch (stale data, which the Seed runs workflow
  refreshes);
- checks every claim against this page's run and every current stored run of
  its kind, raising :class:`~mlexp.seedstats.ClaimContradicted` (which fails
  the build) otherwise; before it checks, it glues how each claim fared in
  each run (:data:`CHECK_KEY`) for the book's evidence page
  (:mod:`mlexp.evidencepage`).

The rule that compares this build with the stored runs is :func:`assess`,
which the evidence page applies to the same data.
"""

from __future__ import annotations

import dataclasses
import json
import pathlib
from collections.abc import Callable, Mapping

import torch

from . import provenance, seedstats
from .pages import glue
from .seeds import in_seed_run, seed_offset
from .train import default_device

__all__ = [
    "Assessment",
    "SeedSection",
    "assess",
    "changed_ingredients",
    "claim_results",
    "load_stored_runs",
    "machine_names",
    "seed_section",
    "timing_note",
    "machine_of",
    "CHECK_KEY",
    "PROVENANCE_KEY",
]

#: The glue key under which a seed run hands its provenance to the runner.
PROVENANCE_KEY = "seed_provenance"
#: The glue key under which a build records how each claim fared in each
#: run, for the book's evidence page (only builds glue it, not seed runs).
CHECK_KEY = "seed_check"

KIND_NAMES = {
    "fp32": "float32",
    "cuda-bf16": "CUDA GPU, bfloat16",
}
#: Kinds that older runs recorded under another name.
_SAME_KIND = {"cpu-fp32": "fp32"}

Claims = Mapping[str, Callable[[Mapping[str, float]], bool]]


@dataclasses.dataclass
class SeedSection:
    """What the section shows: the runs by offset (this page's included) and
    its Markdown."""

    runs: dict[int, dict[str, float]]
    markdown: str
    # the stored runs were made with this build's code, library and data
    current: bool


def load_stored_runs(notebook: str) -> list[dict]:
    """The runs in ``<chapter>.seeds.json``, beside the chapter or from the
    repository."""
    data_file = pathlib.Path(notebook).with_suffix("").name + ".seeds.json"
    repo_path = (
        str(pathlib.PurePosixPath(notebook).with_suffix("")) + ".seeds.json"
    )
    return seedstats.load_seed_data(data_file, repo_path)["runs"]


def machine_of(run: dict) -> dict:
    """A stored run's machine; older runs recorded none, and called float32
    on a CPU ``cpu-fp32``."""
    machine = run.get("provenance", {}).get("machine")
    if not isinstance(machine, dict):
        return {}
    kind = machine.get("kind")
    return {**machine, "kind": _SAME_KIND.get(kind, kind)}


def machine_names(runs: list[dict]) -> str:
    """The machines that made ``runs``, in words ("A and B")."""
    names = sorted(
        {machine_of(r).get("name", "an unrecorded machine") for r in runs}
    )
    return " and ".join(names)


def changed_ingredients(
    here: Mapping[str, str], runs: list[dict]
) -> list[str]:
    """Ingredients whose hash differs between this build and any of
    ``runs``, in a stale-data warning's words."""
    changed = []
    for ingredient, words in provenance.INGREDIENTS.items():
        theirs = {
            r.get("provenance", {}).get("fingerprint", {}).get(ingredient)
            for r in runs
        }
        if here[ingredient] == "unknown":  # a copy opened on Colab
            continue
        if theirs != {here[ingredient]}:
            if ingredient == "torch":
                old = ", ".join(sorted(str(t) for t in theirs))
                words = f"{words} ({old} then, {here['torch']} now)"
            changed.append(words)
    return changed


def _no_runs_of_this_kind(
    kind: str, this_name: str, others: list[dict]
) -> str:
    text = (
        f"This page was built on {this_name}, and no seed runs from this "
        f"kind of machine ({KIND_NAMES.get(kind, kind)}) are stored yet, "
        "so the table shows this page's run alone."
    )
    recorded = [
        r for r in others if machine_of(r).get("kind") in KIND_NAMES
    ]
    if recorded:
        kinds = sorted(
            {KIND_NAMES[machine_of(r)["kind"]] for r in recorded}
        )
        text += (
            f" The stored runs were made on {machine_names(recorded)} "
            f"({'; '.join(kinds)}) and are not mixed with this page's "
            "numbers."
        )
    return text + (
        " A maintainer adds them by starting the Seed runs workflow on a "
        "machine of this kind."
    )


def _table(
    rows: Mapping[str, str],
    runs: Mapping[int, Mapping[str, float]],
    offset: int,
) -> str:
    offsets = sorted(runs)
    n = len(offsets)
    seeds = f"{n} seed{'s' if n > 1 else ''}"
    header = (
        f"| Run | This page (seed offset {offset}) | Mean ± sd, {seeds} | "
        f"Seeds {' / '.join(map(str, offsets))} |"
    )
    lines = [header, "|---|---|---|---|"]
    for label, key in rows.items():
        column = [runs[o][key] for o in offsets]
        mean, sd = seedstats.mean_sd(column)
        spread = f"{mean:.3f} ± {sd:.3f}" if n > 1 else "—"
        each = " / ".join(f"{v:.3f}" for v in column)
        lines.append(
            f"| {label} | {runs[offset][key]:.3f} | {spread} | {each} |"
        )
    return "\n".join(lines)


def _admonition(kind: str, css_class: str, text: str) -> str:
    return f"\n\n```{{{kind}}}\n:class: {css_class}\n{text}\n```"


@dataclasses.dataclass
class Assessment:
    """How this build's run stands against a chapter's stored runs: what
    the seed section shows and checks, and the evidence page reports.

    ``own`` are the stored runs of this build's kind of arithmetic that the
    table compares with (or, when they lack a row, the runs of this kind
    whose machines a warning names); ``changed`` names what differs since
    they were made; ``drift`` and ``spread`` are ``(value, key)`` of this
    build's largest distance from the stored run of its offset and of the
    largest seed-to-seed standard deviation, where both exist.
    """

    kind: str
    this_name: str
    offset: int
    keys: list[str]
    own: list[dict]
    others: list[dict]
    # the stored runs' values, by offset, and the runs with this page's run
    # as its offset's entry
    stored_values: dict[int, dict[str, float]]
    runs: dict[int, dict[str, float]]
    changed: list[str]
    drift: tuple[float, str] | None
    spread: tuple[float, str] | None

    @property
    def current(self) -> bool:
        """The stored runs were made with this build's code, library and
        data."""
        return bool(self.own) and not self.changed

    @property
    def checked(self) -> list[int]:
        """The stored offsets whose runs the claims are checked against
        besides this build's: none while the data is stale."""
        if not self.current:
            return []
        return sorted(o for o in self.runs if o != self.offset)

    @property
    def before(self) -> dict[str, float] | None:
        """The stored run of this build's offset, if there is one."""
        return self.stored_values.get(self.offset)


def assess(
    here: Mapping[str, Mapping],
    rows: Mapping[str, str],
    current: Mapping[str, float],
    stored: list[dict],
    offset: int,
) -> Assessment:
    """Compare this build's run with the stored runs: the seed section's
    rule, in one place.

    ``here`` holds this build's ``fingerprint`` and ``machine``
    (:mod:`mlexp.provenance`), ``rows`` maps row labels to glue keys,
    ``current`` holds this build's values, ``stored`` the runs of
    ``<chapter>.seeds.json`` and ``offset`` this build's seed offset.
    """
    keys = list(rows.values())
    kind = here["machine"]["kind"]
    same_kind = [r for r in stored if machine_of(r).get("kind") == kind]
    others = [r for r in stored if r not in same_kind]
    # Runs made before a row was added to the table cannot fill it: stale.
    own = [r for r in same_kind if set(keys) <= set(r["values"])]
    lacking = len(own) < len(same_kind)
    stored_values = {
        int(r["offset"]): {k: float(r["values"][k]) for k in keys}
        for r in own
    }
    # This page's run is its own offset's entry: one number per seed.
    runs = {**stored_values, offset: {k: float(current[k]) for k in keys}}
    changed = changed_ingredients(here["fingerprint"], own) if own else []
    if lacking:
        changed.append("the rows of the seed table")
        own = own or same_kind  # whose machines the warning names
    before = stored_values.get(offset)
    drift = spread = None
    if before is not None:
        drift = seedstats.largest_drift(current, before, keys)
        spread = seedstats.largest_spread(stored_values, keys)
    return Assessment(
        kind=kind,
        this_name=here["machine"]["name"],
        offset=offset,
        keys=keys,
        own=own,
        others=others,
        stored_values=stored_values,
        runs=runs,
        changed=changed,
        drift=drift,
        spread=spread,
    )


def claim_results(
    claims: Claims, assessment: Assessment
) -> dict[str, dict[str, bool | None]]:
    """How each claim fares in each stored run of this build's kind and in
    this build: ``{claim: {"0": True, ..., "this build": True}}``.

    A stored run is tested on its own numbers, also where the table shows
    this build's run in its place and where the data is stale (which the
    checks then leave out, see :attr:`Assessment.checked`); ``None`` where a
    claim cannot be evaluated on a run.
    """
    build = assessment.runs[assessment.offset]
    results: dict[str, dict[str, bool | None]] = {}
    for claim, holds in claims.items():
        row: dict[str, bool | None] = {}
        for o, values in sorted(assessment.stored_values.items()):
            try:
                row[str(o)] = bool(holds(values))
            except (KeyError, TypeError, ValueError):
                row[str(o)] = None
        row["this build"] = bool(holds(build))
        results[claim] = row
    return results


def seed_section(
    notebook: str,
    rows: Mapping[str, str],
    current: Mapping[str, float],
    claims: Claims | None = None,
    device: str | torch.device | None = None,
) -> SeedSection | None:
    """Build a chapter's seed table and check its claims; ``None`` in a seed
    run.

    ``notebook`` is the chapter's path in the repository
    (``book/part1/chapter01.ipynb``); the kernel runs in its folder, where
    ``<chapter>.seeds.json`` lives. ``rows`` maps each row label to a glue
    key, ``current`` holds this page's value of every key, and ``claims``
    maps each sentence the chapter states to a test of one run's values.
    """
    device = default_device(device)
    local = pathlib.Path(notebook).name
    here = {
        "fingerprint": provenance.fingerprint(local),
        "machine": provenance.machine(device),
    }
    # What the numbers depend on and where they were made, with the table's
    # rows and the claims, so that tools outside the chapter compare what
    # the page compares. A seed run stores it; a build's executed notebook
    # keeps it too, so that the build's own run can be stored as its
    # offset's (python -m mlexp.seedruns harvest).
    recorded = {**here, "rows": dict(rows), "claims": list(claims or {})}
    glue(PROVENANCE_KEY, json.dumps(recorded, sort_keys=True))
    if in_seed_run():
        return None

    offset = seed_offset()
    try:
        stored = load_stored_runs(notebook)
    except FileNotFoundError:  # a new chapter, before its first seed runs
        stored = []
    a = assess(here, rows, current, stored, offset)
    this_name, own, changed = a.this_name, a.own, a.changed
    table = _table(rows, a.runs, offset)
    # Which machines made the numbers goes in the table's caption; what a
    # reader must act on (no comparable runs, stale data, drift beyond the
    # seeds' spread) in an admonition below it.
    caption = f"This page built on {this_name}."
    note = ""

    if not own:
        note = _admonition(
            "note",
            "seed-drift",
            _no_runs_of_this_kind(a.kind, this_name, a.others),
        )
    elif changed:
        note = _admonition(
            "warning",
            "stale-seed-data",
            f"The stored seed runs are stale: {', '.join(changed)} changed "
            f"since they were made (on {machine_names(own)}), so their "
            "numbers may not match this page's. Rerun the seeds (the Seed "
            "runs workflow, or see the README) to refresh them.",
        )
    elif a.before is None:
        caption = (
            f"Stored runs made on {machine_names(own)}; this page built on "
            f"{this_name} with seed offset {offset}, which has no stored "
            "run."
        )
    else:
        label = {key: name for name, key in rows.items()}
        drift, drift_key = a.drift
        spread, spread_key = a.spread
        made_on = machine_names(own)
        where = (
            f"Stored runs and this page made on {made_on}."
            if made_on == this_name
            else f"Stored runs made on {made_on}; this page built on "
            f"{this_name}."
        )
        gap = (
            f"This build matches the stored run with seed offset {offset} "
            "to three decimals"
            if drift < 0.0005
            else f"This build is at most {drift:.3f} from the stored run "
            f"with seed offset {offset} ({label[drift_key]})"
        )
        spread_words = (
            f"the seeds' standard deviation is up to {spread:.3f} "
            f"({label[spread_key]})"
        )
        if drift <= spread:
            caption = f"{where} {gap}; {spread_words}."
        else:
            caption = where
            note = _admonition(
                "warning",
                "seed-drift",
                f"{gap}, more than the seeds differ from each other "
                f"({spread_words}). The two machines' arithmetic differs "
                "by more than a change of seed would; read the mean and "
                "spread with that in mind, and rerun the seeds on this "
                "machine to compare like with like.",
            )

    # How each claim fared in each run, recorded for the book's evidence
    # page before the checks, so that the record of a failing build says
    # which run contradicted which claim.
    results = claim_results(claims or {}, a)
    glue(
        CHECK_KEY,
        json.dumps(
            {
                "offset": offset,
                "values": a.runs[offset],
                "checked": a.checked,
                "claims": results,
            },
            sort_keys=True,
        ),
    )
    # Claims hold in this page's run and in every stored run made with the
    # same code.
    checked = {o: a.runs[o] for o in a.checked}
    for claim, holds in (claims or {}).items():
        seedstats.check_claim(
            claim, holds, {**checked, "this build": a.runs[offset]}
        )
    markdown = f"```{{table}} {caption}\n{table}\n```{note}"
    return SeedSection(runs=a.runs, markdown=markdown, current=a.current)


def _duration(seconds: float) -> str:
    return (
        f"{seconds:.0f} seconds"
        if seconds < 120
        else f"{seconds / 60:.1f} minutes"
    )


def timing_note(notebook: str, key: str, seconds: float, lead: str) -> str:
    """A sentence for the prose before a long cell: how long it took on the
    machine that built the page, and on a GPU where a stored seed run
    measured it.

    ``seconds`` is this build's time, glued under ``key``; a stored run
    made on a GPU (its capability reads ``sm_...``) that glued the same key
    adds its time. ``lead`` starts the sentence ("The next cell trains
    for").
    """
    text = (
        f"{lead} {_duration(seconds)} on the machine that built this page."
    )
    try:
        stored = load_stored_runs(notebook)
    except FileNotFoundError:
        return text
    on_gpu = [
        r
        for r in stored
        if str(machine_of(r).get("capability", "")).startswith("sm_")
        and key in r["values"]
    ]
    if on_gpu:
        run = on_gpu[0]
        return (
            f"{text} On {machine_of(run)['name']} it took "
            f"{_duration(float(run['values'][key]))}."
        )
    return text
