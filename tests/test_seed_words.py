"""The sentences chapters say about their seed runs: a gap's sign, spread and verdict, and the
summary when the stored runs are stale or missing."""

import pytest

from mlexp.evidence.seedtable import SeedSection
from mlexp.evidence.seedwords import SeedWords, beyond_spread

RUNS = {
    0: {"a": 1.70, "b": 1.80, "c": 1.79},
    1: {"a": 1.72, "b": 1.83, "c": 1.84},
    2: {"a": 1.69, "b": 1.78, "c": 1.77},
}


def words(current: bool = True, runs=RUNS) -> SeedWords:
    return SeedWords(SeedSection(runs=runs, markdown="", current=current), runs[0])


@pytest.mark.parametrize(
    "differences, beyond",
    [
        ([-0.10, -0.11, -0.09], True),  # one sign, mean 10 sd
        ([-0.10, 0.01, -0.09], False),  # the sign changes
        ([-0.01, -0.20, -0.01], False),  # one sign, but mean under 2 sd
        ([-0.10], False),  # one run says nothing about the spread
    ],
)
def test_beyond_spread_needs_one_sign_and_a_mean_over_twice_its_sd(differences, beyond):
    assert beyond_spread(differences) is beyond


def test_gap_gives_mean_sd_count_and_verdict():
    w = words()
    assert w.gap("a", "b") == "-0.100 ± 0.010, beyond the seed spread"
    # c - b: -0.01, +0.01, -0.01: lower in 2 of 3, within
    assert w.gap("c", "b", lower="C") == "-0.003 ± 0.012, C lower in 2 of 3, within the seed spread"


def test_a_gap_just_past_the_line_says_so():
    """-0.020 ± 0.010 is past twice its sd by a hair: "beyond" alone reads as firmer than it is."""
    runs = {0: {"a": 0.972, "b": 1.0}, 1: {"a": 0.977, "b": 1.0}, 2: {"a": 0.991, "b": 1.0}}
    assert words(runs=runs).gap("a", "b") == "-0.020 ± 0.010, only just beyond the seed spread"


def test_stale_runs_leave_only_this_pages_run():
    w = words(current=False)
    assert w.n == 1 and w.runs == {0: RUNS[0]}
    assert w.gap("a", "b") == "-0.100"
    assert w.of_n == "of 1 run"
    assert "stale" in w.lead and "stale" in w.summary(5)


def test_summary_counts_claims_and_seeds():
    assert words().summary(7).startswith("Each of the 7 claims marked above as checked held in all 3 seeds.")
    assert "a rough rule with 3 seeds" in words().summary(7)
    assert words().summary(2, "Nothing more.").endswith("seeds. Nothing more.")
    single = words(runs={0: RUNS[0]})
    assert not single.stale and single.n == 1
    assert "single run" in single.summary(7)


def test_held_counts_runs():
    assert words().held(lambda v: v["c"] < v["b"]) == 2


def test_beyond_reads_the_runs_difference():
    assert words().beyond("a", "b") and not words().beyond("c", "b")
