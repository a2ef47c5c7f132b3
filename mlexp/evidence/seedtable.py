"""A chapter's "Across three seeds" section: the table, what it rests on,
and the claims.

Every chapter that checks its findings across seeds calls
:func:`seed_section` once, after its experiment, with the values it glued
and the sentences it claims. The function:

- glues this run's fingerprint and machine, with the table's rows and the
  claims, so that a seed run (:mod:`mlexp.evidence.seedruns`) or the
  build's own run (``seedruns harvest``) can be stored with its numbers; in
  a seed run it stops there and returns ``None``;
- in a build, reads ``<chapter>.seeds.json`` and keeps the stored runs of
  this build's kind of arithmetic (:mod:`mlexp.training.precision`: float32
  on every device, so a GPU build is judged against runs made on a CPU;
  runs of another kind, from before that rule, are never mixed in);
- puts this page's run in the table as the entry of its own seed offset, so
  one seed never shows two numbers, and the mean and standard deviation
  include it;
- decides whether the stored runs are current with :func:`assess`: they
  are while this build reproduces the stored run of its own seed offset
  (see :data:`REPRODUCTION_TOLERANCE`), whatever code produced it;
- says, in one plain line under the table, whether the other seeds agree
  with this page's run on every claim, and links the evidence page, which
  says which machines made the runs, what changed since (code cells,
  library, PyTorch) and how closely this build reproduced them, and for
  stale data the rows that moved (the Seed runs workflow refreshes it);
  a stale table carries the class ``stale-seed-data`` for the build log;
- checks every claim against this page's run and every current stored run of
  its kind, raising :class:`~mlexp.evidence.seedstats.ClaimContradicted`
  (which fails the build) otherwise; before it checks, it glues how each
  claim fared in each run (:data:`CHECK_KEY`) for the book's evidence page
  (:mod:`mlexp.evidence.evidencepage`).

**Current by reproduction.** Seed data is evidence about an experiment, not
about the files that ran it. A hash of the code changes with every edit,
also one that leaves every number as it was (a renamed variable, a moved
module, a faster implementation of the same arithmetic); rerunning three
seeds of every chapter after each of them would make the evidence cost more
than the book. So the fingerprint (:mod:`mlexp.evidence.provenance`) is a
record, and the test is the numbers: the build has just rerun the
experiment with its own seed offset, and when that run lands within
:data:`REPRODUCTION_TOLERANCE` of the stored run of the same offset on
every row of the table, the experiment is the one the stored runs
measured. A change of the experiment (its steps, data, model or recipe)
moves its numbers by far more and makes the data stale. Two things stale
the data whatever the numbers: another corpus, and other rows in the
table (a stored run cannot fill a row it never had).
"""

from __future__ import annotations

import dataclasses
import json
import pathlib
from collections.abc import Callable, Collection, Mapping, Sequence

import torch

from ..training.seeds import in_seed_run, seed_offset
from ..training.train import default_device
from . import provenance, seedstats
from .pages import glue

__all__ = [
    "REPRODUCTION_TOLERANCE",
    "Assessment",
    "SeedSection",
    "assess",
    "changed_ingredients",
    "in_words",
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
#: The glue key under which a run hands the runner its value of every row,
#: so that a row computed inside the seed cell is stored like a glued one.
VALUES_KEY = "seed_values"
#: The glue key under which a build records how each claim fared in each
#: run, for the book's evidence page (only builds glue it, not seed runs).
CHECK_KEY = "seed_check"

#: How far, on any row, this build's run may lie from the stored run of its
#: seed offset and still reproduce it. It must absorb the drift between
#: machines running the same code (other instruction sets take other kernel
#: paths and change the last digits of a training run) and stay well below
#: the seeds' own spread, so that a change of the experiment (its steps,
#: data, model or recipe) moves a run beyond it. The measurements it rests
#: on are in the README ("Seed runs") and ``benchmarks/drift.py``. Rows are
#: losses in nats, bits per character, fractions and ratios of order one,
#: and exact counts, so one absolute bound serves them all.
REPRODUCTION_TOLERANCE = 0.01

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


def in_words(items: list[str]) -> str:
    """A list as a sentence says it: "a", "a and b", "a, b and c"."""
    if len(items) < 2:
        return "".join(items)
    return f"{', '.join(items[:-1])} and {items[-1]}"


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


def _numbers(
    values: list[float], signed: bool = False
) -> Callable[[float], str]:
    """How a row prints its values: as integers where every value is a
    whole number (a count of bytes, say), else to three decimals; with a
    sign for a difference."""
    sign = "+" if signed else ""
    if all(float(v).is_integer() for v in values):
        return lambda v: f"{v:{sign},.0f}"
    return lambda v: f"{v:{sign}.3f}"


def _row(
    label: str,
    column: list[float],
    this: float,
    signed: bool = False,
    names: Sequence[str] | None = None,
) -> list[str]:
    """One row's cells after its label: this page's value, the summary
    over seeds, each seed's value.

    A row with ``names`` holds codes (0, 1, 2, ...) of outcomes: the mean
    of codes means nothing, so it shows the names and counts each across
    the seeds. A label ending in "?" asks a yes/no question (values 1 and
    0), counted likewise; a row whose every value is a whole number (a
    count of bytes, say) is printed as integers; the rest as mean ± sd to
    three decimals.
    """
    n = len(column)
    number = _numbers(column, signed)
    if names is not None:

        def name(v: float) -> str:
            if not (float(v).is_integer() and 0 <= v < len(names)):
                raise ValueError(
                    f"row {label!r} holds {v}, not a code of "
                    f"{list(names)}: store 0 for {names[0]!r}, 1 for the "
                    "next name, and so on"
                )
            return names[int(v)]

        counts = [(c, sum(name(v) == c for v in column)) for c in names]
        seen = [(c, k) for c, k in counts if k]
        if n == 1:
            summary = "—"
        elif len(seen) == 1:
            summary = f"{seen[0][0]} in every seed"
        else:
            summary = ", ".join(f"{c} in {k} of {n}" for c, k in seen)
        return [name(this), summary, " / ".join(name(v) for v in column)]
    if label.endswith("?"):
        word = {1.0: "yes", 0.0: "no"}
        yes = sum(v == 1.0 for v in column)
        return [
            word.get(this, number(this)),
            f"yes in {yes} of {n}" if n > 1 else "—",
            " / ".join(word.get(v, number(v)) for v in column),
        ]
    mean, sd = seedstats.mean_sd(column)
    if n == 1:
        summary = "—"
    elif all(float(v).is_integer() for v in column):
        summary = (
            f"{mean:,.0f} in every seed"
            if len(set(column)) == 1
            else f"{mean:,.1f} ± {sd:,.1f}"
        )
    else:
        summary = f"{number(mean)} ± {sd:.3f}"
    return [number(this), summary, " / ".join(number(v) for v in column)]


def _table(
    rows: Mapping[str, str],
    runs: Mapping[int, Mapping[str, float]],
    offset: int,
    differences: Mapping[str, tuple[str, str]],
    coded: Mapping[str, Sequence[str]],
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
        cells = _row(label, column, runs[offset][key], names=coded.get(key))
        lines.append(f"| {label} | {' | '.join(cells)} |")
    # A difference is taken within each run, so its spread is the one a
    # claim about the difference must clear.
    for label, (a, b) in differences.items():
        column = [runs[o][a] - runs[o][b] for o in offsets]
        this = runs[offset][a] - runs[offset][b]
        cells = _row(label, column, this, signed=True)
        lines.append(f"| {label} | {' | '.join(cells)} |")
    return "\n".join(lines)


@dataclasses.dataclass
class Assessment:
    """How this build's run stands against a chapter's stored runs: what
    the seed section shows and checks, and the evidence page reports.

    ``own`` are the stored runs of this build's kind of arithmetic that the
    table compares with (or, when they lack a row, the runs of this kind
    whose machines a warning names); ``changed`` names what differs since
    they were made (a record: see the module's docstring); ``moved`` lists
    ``(key, stored, this build)`` for each row on which this build does not
    reproduce the stored run of its offset; ``drift`` and ``spread`` are
    ``(value, key)`` of this build's largest distance from that run and of
    the largest seed-to-seed standard deviation, where both exist.
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
    moved: list[tuple[str, float, float]]
    stale_because: list[str]
    drift: tuple[float, str] | None
    spread: tuple[float, str] | None

    @property
    def current(self) -> bool:
        """The stored runs measured the experiment this build ran: same
        corpus and rows, and this build reproduces its offset's run."""
        return bool(self.own) and not self.stale_because

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

    def moved_rows(self, label: Mapping[str, str]) -> str:
        """The rows that did not reproduce, with both values, in words."""
        parts = []
        for key, then, now in self.moved:
            number = _numbers([then, now])
            parts.append(
                f"{label.get(key, key)} moved by {abs(now - then):.3f} "
                f"({number(then)} stored, {number(now)} now)"
            )
        return "; ".join(parts)


def assess(
    here: Mapping[str, Mapping],
    rows: Mapping[str, str],
    current: Mapping[str, float],
    stored: list[dict],
    offset: int,
    timed: Collection[str] = (),
) -> Assessment:
    """Compare this build's run with the stored runs: the seed section's
    rule, in one place.

    ``here`` holds this build's ``fingerprint`` and ``machine``
    (:mod:`mlexp.evidence.provenance`), ``rows`` maps row labels to glue
    keys, ``current`` holds this build's values, ``stored`` the runs of
    ``<chapter>.seeds.json`` and ``offset`` this build's seed offset.
    ``timed`` are the keys of rows measured in wall-clock time: they are
    shown and counted, but no run reproduces them, so the reproduction
    check, the drift and the spread leave them out.
    """
    keys = list(rows.values())
    unknown = sorted(set(timed) - set(keys))
    if unknown:
        raise ValueError(
            f"timed rows {unknown} are not among the table's keys; pass "
            "the glue keys of rows in `rows` that hold timings"
        )
    reproducible = [k for k in keys if k not in timed]
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
    stale_because = []
    if lacking:
        stale_because.append("the rows of the seed table changed")
        own = own or same_kind  # whose machines the warning names
    if provenance.INGREDIENTS["corpus"] in changed:
        stale_because.append("the corpus changed")
    before = stored_values.get(offset)
    drift = spread = None
    moved: list[tuple[str, float, float]] = []
    if before is not None:
        drift = seedstats.largest_drift(current, before, reproducible)
        spread = seedstats.largest_spread(stored_values, reproducible)
        moved = [
            (k, before[k], float(current[k]))
            for k in reproducible
            if abs(float(current[k]) - before[k]) > REPRODUCTION_TOLERANCE
        ]
        if moved:
            stale_because.append(
                "this build does not reproduce the stored run with seed "
                f"offset {offset}"
            )
    elif changed and own:
        stale_because.append(
            f"{in_words(changed)} changed and no stored run has seed "
            f"offset {offset} to reproduce"
        )
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
        moved=moved,
        stale_because=stale_because,
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
    differences: Mapping[str, tuple[str, str]] | None = None,
    timed: Collection[str] = (),
    coded: Mapping[str, Sequence[str]] | None = None,
) -> SeedSection | None:
    """Build a chapter's seed table and check its claims; ``None`` in a seed
    run.

    ``notebook`` is the chapter's path in the repository
    (``book/part1/chapter01.ipynb``); the kernel runs in its folder, where
    ``<chapter>.seeds.json`` lives. ``rows`` maps each row label to a glue
    key, ``current`` holds this page's value of every key, and ``claims``
    maps each sentence the chapter states to a test of one run's values.

    ``differences`` maps a row label to two keys ``(a, b)``: a paired row
    showing a - b within each run (a removal minus the full model, say),
    with its mean and standard deviation over seeds. It is computed from
    the rows' values, so stored runs fill it without a rerun.

    ``timed`` lists the keys of rows that are wall-clock timings. They vary
    from run to run on one machine, so the check that this build reproduces
    its offset's stored run leaves them out, and the caption says so.

    ``coded`` maps the keys of rows that hold codes of outcomes (0 for the
    first name, 1 for the next, ...) to those names, so that the table
    shows "trained in 2 of 3, diverged in 1 of 3", not a mean of codes.
    """
    coded = dict(coded or {})
    unknown = sorted(set(coded) - set(rows.values()))
    if unknown:
        raise ValueError(
            f"coded rows {unknown} are not among the table's keys; pass "
            "the glue keys of rows in `rows` that hold codes of outcomes"
        )
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
    # offset's (python -m mlexp.evidence.seedruns harvest). The modules the
    # kernel loaded tell the build's execution cache which library edits
    # should run the chapter again (book/_ext/execution_fingerprint.py).
    recorded = {
        **here,
        "rows": dict(rows),
        "claims": list(claims or {}),
        "timed": sorted(timed),
        "modules": provenance.loaded_modules(),
    }
    glue(PROVENANCE_KEY, json.dumps(recorded, sort_keys=True))
    glue(
        VALUES_KEY,
        json.dumps({key: float(current[key]) for key in rows.values()}),
    )
    if in_seed_run():
        return None

    offset = seed_offset()
    try:
        stored = load_stored_runs(notebook)
    except FileNotFoundError:  # a new chapter, before its first seed runs
        stored = []
    a = assess(here, rows, current, stored, offset, timed)
    table = _table(rows, a.runs, offset, differences or {}, coded)
    # One plain line under the table: whether the other seeds agree with
    # this page's run. Which machines made the runs, what changed since and
    # how closely this build reproduced them is the evidence page's
    # business (mlexp.evidence.evidencepage), not the reader's.
    css_class = "seed-table"
    if not a.own:
        caption = (
            "No seed runs of this kind of machine "
            f"({KIND_NAMES.get(a.kind, a.kind)}) are stored yet, so the "
            "table shows this page's run alone and the claims are checked "
            "against it."
        )
        css_class += " seed-drift"
    elif a.stale_because:
        others = [str(o) for o in sorted(a.runs) if o != offset]
        pooled = (
            f" to pool it with seeds {in_words(others)}" if others else ""
        )
        caption = (
            f"Seed {offset} is this page's run. It does not match the "
            f"stored run of seed {offset} closely enough{pooled}, so the "
            "claims are checked against this page's run alone."
        )
        css_class += " stale-seed-data"
    else:
        seeds = in_words([str(o) for o in sorted(a.runs)])
        caption = (
            f"Seeds {seeds}, where seed {offset} is this page's run: every "
            "claim this page checks holds in each of them."
        )
        if timed:
            caption += (
                " Timings vary from run to run, so they are shown but not "
                "compared."
            )
    caption += (
        " How the seeds are run and checked: "
        "{doc}`the evidence at a glance </evidence-at-a-glance>`."
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
    markdown = f"```{{table}} {caption}\n:class: {css_class}\n{table}\n```"
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
