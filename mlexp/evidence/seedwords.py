"""Sentences about a chapter's seed runs that every chapter says alike.

Several chapters compare two models across seeds ("SwiGLU minus ReLU
-0.026 ± 0.013, lower in 3 of 3, within the seed spread") and close their
seed section with the same summary. Said in one place, the rule behind
"beyond the seed spread" reads the same on every page, and a chapter's own
cell keeps only what it alone says.

Stale stored runs are not evidence: then only this page's run counts, and
the words say so.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from .seedstats import mean_sd
from .seedtable import SeedSection

__all__ = ["SeedWords", "beyond_spread"]

#: How the seed section's last rows are read, for the summary.
RULE = (
    "The differences between models are in the table's last rows; one is "
    "beyond the seed spread when its sign holds in every seed and its mean "
    "exceeds twice its standard deviation, a rough rule with {n} seeds."
)


#: Under this many standard deviations a gap past the rule's two is said
#: to be "only just beyond" the seed spread.
JUST = 2.5


def beyond_spread(differences: list[float]) -> bool:
    """Whether a difference is beyond the seed spread: the same sign in
    every run and a mean more than twice its standard deviation.

    Three seeds cannot test more than this: the rule only keeps a page from
    reading a gap that changes sign, or is small against its own scatter,
    as a finding.
    """
    if len(differences) < 2:
        return False
    m, s = mean_sd(differences)
    one_sign = all(x < 0 for x in differences) or all(
        x > 0 for x in differences
    )
    return one_sign and abs(m) > 2 * s


class SeedWords:
    """The runs a chapter's prose may quote, and its sentences about them.

    ``section`` is what :func:`mlexp.seed_section` returned and ``current``
    this page's values of the same keys.
    """

    def __init__(self, section: SeedSection, current: Mapping[str, float]):
        self.stale = not section.current and len(section.runs) > 1
        self.runs: dict[int, Mapping[str, float]] = (
            dict(section.runs) if section.current else {0: current}
        )
        self.n = len(self.runs)

    @property
    def of_n(self) -> str:
        """``of 3 seeds``, or ``of 1 run`` while only this page counts."""
        return f"of {self.n} {'run' if self.n == 1 else 'seeds'}"

    @property
    def lead(self) -> str:
        """How a sentence about the runs begins."""
        if self.stale:
            return "The stored runs are stale, so in this page's run alone"
        if self.n == 1:
            return "In this page's run, the only one so far"
        return f"Across the {self.n} seeds (mean ± standard deviation)"

    def held(self, test: Callable[[Mapping[str, float]], bool]) -> int:
        """In how many of the runs ``test`` held."""
        return sum(bool(test(v)) for v in self.runs.values())

    def beyond(self, a: str, b: str) -> bool:
        """Whether key ``a`` minus key ``b`` is beyond the seed spread."""
        return beyond_spread([v[a] - v[b] for v in self.runs.values()])

    def gap(self, a: str, b: str, lower: str | None = None) -> str:
        """Key ``a`` minus key ``b``: mean ± sd across the runs and whether
        it is beyond the seed spread; with ``lower``, the name of ``a`` and
        in how many runs it ended lower. With one run, its difference."""
        d = [v[a] - v[b] for v in self.runs.values()]
        if self.n == 1:
            return f"{d[0]:+.3f}"
        m, s = mean_sd(d)
        where = "within"
        if self.beyond(a, b):
            # past the line, but not by much: a reader should know
            where = "only just beyond" if abs(m) < JUST * s else "beyond"
        count = (
            f"{lower} lower in {sum(x < 0 for x in d)} of {self.n}, "
            if lower
            else ""
        )
        return f"{m:+.3f} ± {s:.3f}, {count}{where} the seed spread"

    def summary(self, claims: int, more: str | None = None) -> str:
        """The seed section's last paragraph: whether the ``claims`` held
        in every seed, then ``more`` (by default, how to read the
        differences between models)."""
        if self.stale:
            return (
                "The stored runs are stale (see the note above), so only "
                "this page's run has been checked."
            )
        if self.n == 1:
            return (
                "With a single run, no difference on this page can yet be "
                "told apart from seed-to-seed noise."
            )
        return (
            f"Each of the {claims} claims marked above as checked held in "
            f"all {self.n} seeds. "
            + (RULE.format(n=self.n) if more is None else more)
        ).strip()
