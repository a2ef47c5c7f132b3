"""The book's evidence at a glance: every claim a chapter checks across
seeds, and how it held, read from the data a build already has.

A chapter's build records (with ``myst_nb.glue``, in the
``<chapter>.glue.json`` that myst-nb writes beside the executed notebook)
what its seed section compared: the fingerprint and machine of its run,
the rows of its seed table and its claims
(:data:`~mlexp.evidence.seedtable.PROVENANCE_KEY`), and how each claim
fared in each run (:data:`~mlexp.evidence.seedtable.CHECK_KEY`). Together
with the chapter's stored runs (``<chapter>.seeds.json``) that is all the
page needs; it judges staleness and drift with
:func:`mlexp.evidence.seedtable.assess`, the rule the chapter's own seed
section applies, so the page and the chapter cannot
disagree.

This module builds plain data (:class:`ChapterEvidence`); the book's
Sphinx extension (``book/_ext/evidence_summary.py``) lays it out.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import pathlib
from collections.abc import Iterable, Mapping, Sequence

from . import seedruns, seedtable

__all__ = [
    "ChapterEvidence",
    "ClaimEvidence",
    "StoredRun",
    "chapter_evidence",
    "read_glue",
    "read_glue_outputs",
    "top_line",
]

#: The label of this build's run in a claim's results.
THIS_BUILD = "this build"


@dataclasses.dataclass
class ClaimEvidence:
    """One sentence a chapter checks, and how it fared in each run."""

    sentence: str
    # by run: a stored offset ("0", "1", ...) or THIS_BUILD; True, False,
    # or None where the run could not be tested
    results: dict[str, bool | None]
    # the stored offsets the build checks the claim against (none while the
    # chapter's seed data is stale)
    checked: list[str]
    # the evidence level the prose gives it, and the anchor where the
    # chapter makes it, where the prose marks it with {claim}
    tag: str | None = None
    anchor: str | None = None

    @property
    def recorded(self) -> bool:
        """The build recorded this claim's results (builds before the
        record existed did not)."""
        return THIS_BUILD in self.results

    @property
    def held(self) -> bool | None:
        """Held in this build and in every run it was checked against;
        ``None`` when not recorded."""
        if not self.recorded:
            return None
        return all(
            self.results.get(run) is True
            for run in [*self.checked, THIS_BUILD]
        )


@dataclasses.dataclass
class StoredRun:
    """A stored seed run, as the page lists it."""

    offset: int
    machine: str
    kind: str
    date: str
    run_seconds: float | None
    # of this build's kind of arithmetic, with every row of the table
    compared: bool


@dataclasses.dataclass
class ChapterEvidence:
    """What the page shows for one chapter."""

    docname: str
    claims: list[ClaimEvidence]
    stored: list[StoredRun]
    assessment: seedtable.Assessment
    rows: dict[str, str]
    # this build's run of the chapter: how long it took, and the day it was
    # made (earlier than the build when it came from the execution cache)
    exec_seconds: float | None = None
    exec_date: str | None = None
    # where the page's run came from (book/_ext/execution_fingerprint.py):
    # "source" is "build" (this build executed it), "cache" (an earlier
    # build) or "record" (the book's execution record), with
    # the "machine", "date", "commit" and "execution_seconds" it was made
    # with; None where the build did not say
    origin: Mapping[str, object] | None = None

    @property
    def current(self) -> bool:
        return self.assessment.current

    @property
    def status(self) -> str:
        """``current``, ``stale`` or ``no runs`` (none of this kind)."""
        if not self.assessment.own:
            return "no runs"
        return "current" if self.current else "stale"

    @property
    def reason(self) -> str:
        """Why the chapter's seed data is current or not, in words."""
        a = self.assessment
        if not a.own:
            kind = seedtable.KIND_NAMES.get(a.kind, a.kind)
            return (
                f"no stored seed runs of this build's kind ({kind}); "
                "the claims are checked against this build alone"
            )
        if a.stale_because:
            label = {key: name for name, key in self.rows.items()}
            moved = f" ({a.moved_rows(label)})" if a.moved else ""
            return (
                f"{'; '.join(a.stale_because)}{moved}; the claims are "
                "checked against this build alone until the seeds are rerun"
            )
        if a.changed:
            return (
                f"{seedtable.in_words(a.changed)} changed since the stored "
                "runs were made, and this build reproduces them"
            )
        return (
            "the stored runs were made with this build's code, library, "
            "corpus and PyTorch"
        )

    @property
    def drift(self) -> str:
        """How closely this build reproduced the stored run of its offset,
        beside the seeds' largest standard deviation."""
        a = self.assessment
        if a.drift is None or a.spread is None:
            return f"no stored run with seed offset {a.offset}"
        label = {key: name for name, key in self.rows.items()}
        (drift, drift_key), (spread, spread_key) = a.drift, a.spread
        return (
            f"{drift:.3f} ({label.get(drift_key, drift_key)}; tolerance "
            f"{seedtable.REPRODUCTION_TOLERANCE}), against a seed standard "
            f"deviation of up to {spread:.3f} "
            f"({label.get(spread_key, spread_key)})"
        )

    @property
    def made(self) -> str:
        """Where and when the page's run was made, and whether this build
        made it or took it from the execution cache or record, in words
        ("" when the build did not say)."""
        origin = self.origin
        if not origin:
            return ""
        day = _day(origin.get("date"))
        machine = origin.get("machine") or "an unrecorded machine"
        seconds = origin.get("execution_seconds")
        took = (
            f", in {_duration(float(seconds))}"
            if seconds is not None
            else ""
        )
        if origin.get("source") == "record":
            commit = origin.get("commit")
            at = (
                f"; recorded at commit {str(commit)[:10]}" if commit else ""
            )
            return (
                f"taken from the book's execution record, not executed by "
                f"this build: made on {machine} on {day}{took}{at}"
            )
        if origin.get("source") == "cache":
            return (
                f"taken from the execution cache: made by an "
                f"earlier build on {machine} on {day}{took}"
            )
        return f"made by this build on {machine} on {day}{took}"

    @property
    def runs(self) -> list[str]:
        """The run labels of the claims' results, stored offsets first."""
        labels = sorted(
            {r for c in self.claims for r in c.results if r != THIS_BUILD},
            key=int,
        )
        return [*labels, THIS_BUILD]


def _day(when: object) -> str:
    try:
        return datetime.datetime.fromisoformat(str(when)).date().isoformat()
    except ValueError:
        return "an unrecorded date"


def _duration(seconds: float) -> str:
    return (
        f"{seconds:.0f} s" if seconds < 120 else f"{seconds / 60:.1f} min"
    )


def read_glue(path: str | pathlib.Path) -> dict[str, object]:
    """The values a chapter glued, from myst-nb's ``<name>.glue.json``
    (``{}`` when the build wrote none)."""
    path = pathlib.Path(path)
    if not path.is_file():
        return {}
    return read_glue_outputs(
        json.loads(path.read_text(encoding="utf-8")).values()
    )


def read_glue_outputs(outputs: Iterable[dict]) -> dict[str, object]:
    """The glued numbers and strings among a notebook's outputs."""
    return seedruns.harvest_glue(
        {"cells": [{"cell_type": "code", "outputs": list(outputs)}]}
    )


def _stored_run(run: dict, compared: bool) -> StoredRun:
    machine = seedtable.machine_of(run)
    kind = machine.get("kind", "unknown")
    date = str(run.get("provenance", {}).get("date", ""))
    try:
        date = datetime.datetime.fromisoformat(date).date().isoformat()
    except ValueError:
        pass
    seconds = run.get("provenance", {}).get("run_seconds")
    return StoredRun(
        offset=int(run["offset"]),
        machine=machine.get("name", "an unrecorded machine"),
        kind=seedtable.KIND_NAMES.get(kind, kind),
        date=date or "not recorded",
        run_seconds=float(seconds) if seconds is not None else None,
        compared=compared,
    )


def chapter_evidence(
    docname: str,
    glued: Mapping[str, object],
    stored: Sequence[dict],
    exec_seconds: float | None = None,
    markers: Mapping[str, Mapping[str, str]] | None = None,
    exec_date: str | None = None,
    origin: Mapping[str, object] | None = None,
) -> ChapterEvidence | None:
    """A chapter's evidence from what its build glued and its stored runs;
    ``None`` for a page without a seed section.

    ``markers`` maps a claim's sentence to the ``tag`` and ``anchor`` the
    prose gives it (``book/_ext/evidence_summary.py`` collects them).
    ``origin`` says where the page's run came from (see
    :attr:`ChapterEvidence.origin`).
    """
    if seedtable.PROVENANCE_KEY not in glued:
        return None
    recorded = json.loads(str(glued[seedtable.PROVENANCE_KEY]))
    rows = dict(recorded["rows"])
    check = (
        json.loads(str(glued[seedtable.CHECK_KEY]))
        if seedtable.CHECK_KEY in glued
        else None
    )
    if check is not None:
        values = {k: float(v) for k, v in check["values"].items()}
        offset = int(check["offset"])
    else:  # a build from before the check was recorded: its glued rows
        values = {k: float(glued[k]) for k in rows.values() if k in glued}
        offset = 0
    here = {
        "fingerprint": recorded["fingerprint"],
        "machine": recorded["machine"],
    }
    assessment = seedtable.assess(
        here, rows, values, list(stored), offset, recorded.get("timed", ())
    )
    compared = {id(r) for r in assessment.own}
    markers = markers or {}
    claims = []
    for sentence in recorded.get("claims", []):
        results = dict((check or {}).get("claims", {}).get(sentence, {}))
        mark = markers.get(sentence, {})
        claims.append(
            ClaimEvidence(
                sentence=sentence,
                results=results,
                checked=[str(o) for o in (check or {}).get("checked", [])],
                tag=mark.get("tag"),
                anchor=mark.get("anchor"),
            )
        )
    return ChapterEvidence(
        docname=docname,
        claims=claims,
        stored=sorted(
            (_stored_run(r, id(r) in compared) for r in stored),
            key=lambda s: (s.kind, s.offset),
        ),
        assessment=assessment,
        rows=rows,
        exec_seconds=exec_seconds,
        exec_date=exec_date,
        origin=origin,
    )


def top_line(chapters: Sequence[ChapterEvidence]) -> str:
    """The book-level line: claims checked and held, chapters current."""
    claims = [c for ch in chapters for c in ch.claims]
    recorded = [c for c in claims if c.recorded]
    held = sum(c.held is True for c in recorded)
    current = sum(ch.current for ch in chapters)
    n = len(chapters)
    text = (
        f"{len(recorded)} claim{'s' if len(recorded) != 1 else ''} checked "
        f"in this build, {held} held in every run checked; "
        f"{current} of {n} chapter{'s' if n != 1 else ''} "
        f"{'has' if n == 1 else 'have'} current seed data."
    )
    sources = [ch.origin.get("source") for ch in chapters if ch.origin]
    if sources:
        made = sources.count("build")
        taken = sources.count("record")
        cached = sources.count("cache")
        chapters_word = "chapters" if made != 1 else "chapter"
        parts = [f"{made} {chapters_word} executed by this build"]
        if taken:
            parts.append(f"{taken} taken from the book's execution record")
        if cached:
            parts.append(f"{cached} from the execution cache")
        text += " Runs: " + ", ".join(parts) + "."
    if len(recorded) < len(claims):
        text += (
            f" {len(claims) - len(recorded)} claims were not recorded by "
            "this build (a chapter built before the record existed)."
        )
    return text
