"""The seed table prints each kind of row as a reader reads it: counts as integers, yes/no rows
as counts of seeds, paired differences with their own spread."""

import json

import pytest
import torch

import mlexp
from mlexp.evidence import provenance

ROWS = {
    "validation loss, A": "loss_a",
    "validation loss, B": "loss_b",
    "cache bytes per token": "cache",
    "same tokens with and without the cache?": "same",
}
STORED = {
    1: {"loss_a": 1.80, "loss_b": 1.90, "cache": 4096.0, "same": 1.0},
    2: {"loss_a": 1.70, "loss_b": 1.85, "cache": 4096.0, "same": 1.0},
}
THIS = {"loss_a": 1.75, "loss_b": 1.80, "cache": 4096.0, "same": 1.0}


def store_runs(folder, monkeypatch, stored: dict[int, dict[str, float]]) -> None:
    """A chapter's folder with ``stored`` as its seed runs, made with this build's code, and the
    kernel in it as a build (not a seed run) sees it."""
    monkeypatch.chdir(folder)
    monkeypatch.delenv("MLEXP_SEED_RUN", raising=False)
    monkeypatch.delenv("MLEXP_SEED_OFFSET", raising=False)
    here = {"fingerprint": provenance.fingerprint("chapter.ipynb"),
            "machine": provenance.machine(torch.device("cpu"))}
    runs = [{"offset": o, "values": v, "provenance": here} for o, v in stored.items()]
    (folder / "chapter.seeds.json").write_text(json.dumps({"runs": runs}))


@pytest.fixture
def chapter(tmp_path, monkeypatch):
    store_runs(tmp_path, monkeypatch, STORED)
    return tmp_path


def rows_of(markdown: str) -> dict[str, list[str]]:
    lines = [line for line in markdown.splitlines() if line.startswith("| ")][1:]
    cells = [[c.strip() for c in line.strip("|").split("|")] for line in lines]
    return {row[0]: row[1:] for row in cells}


def test_counts_yes_no_rows_and_paired_differences(chapter):
    seeds = mlexp.seed_section("book/part1/chapter.ipynb", ROWS, THIS,
                               differences={"B minus A": ("loss_b", "loss_a")})
    table = rows_of(seeds.markdown)
    assert table["validation loss, A"] == ["1.750", "1.750 ± 0.050", "1.750 / 1.800 / 1.700"]
    # not "4096.000 ± 0.000"
    assert table["cache bytes per token"] == ["4,096", "4,096 in every seed", "4,096 / 4,096 / 4,096"]
    assert table["same tokens with and without the cache?"] == ["yes", "yes in 3 of 3", "yes / yes / yes"]
    # within each run: +0.050, +0.100, +0.150; their spread, not each loss's
    assert table["B minus A"] == ["+0.050", "+0.100 ± 0.050", "+0.050 / +0.100 / +0.150"]


def test_a_no_is_counted_not_averaged(chapter):
    seeds = mlexp.seed_section("book/part1/chapter.ipynb", ROWS, {**THIS, "same": 0.0})
    assert rows_of(seeds.markdown)["same tokens with and without the cache?"] == [
        "no", "yes in 2 of 3", "no / yes / yes"]


def test_counts_that_differ_between_seeds_keep_their_spread(chapter):
    seeds = mlexp.seed_section("book/part1/chapter.ipynb", ROWS, {**THIS, "cache": 2048.0})
    assert rows_of(seeds.markdown)["cache bytes per token"] == [
        "2,048", "3,413.3 ± 1,182.4", "2,048 / 4,096 / 4,096"]


def test_what_changed_reads_as_a_sentence():
    from mlexp.evidence.seedtable import in_words

    assert in_words(["the code"]) == "the code"
    assert in_words(["the code", "the library"]) == "the code and the library"
    assert in_words(["a", "b", "c"]) == "a, b and c"


MACHINERY = ["reproduc", "tolerance", "offset", "stored", "AVX", "EPYC", "decimals", "build"]


def test_the_caption_says_in_plain_words_that_the_seeds_agree(chapter):
    """One line a reader can take in: which seeds, which is this page's, that every claim holds
    in each, and where to read how that is checked; no machinery (machines, tolerances,
    reproduction) in it: that is the evidence page's."""
    caption = mlexp.seed_section("book/part1/chapter.ipynb", ROWS, THIS).markdown.splitlines()[0]
    assert caption.startswith("```{table} Seeds 0, 1 and 2, where seed 0 is this page's run: "
                              "every claim this page checks holds in each of them.")
    assert "{doc}`the evidence at a glance </evidence-at-a-glance>`" in caption
    assert not [word for word in MACHINERY if word in caption]


def test_stale_seeds_are_said_plainly_and_marked_for_the_build_log(tmp_path, monkeypatch):
    store_runs(tmp_path, monkeypatch, {0: THIS, **STORED})
    markdown = mlexp.seed_section("book/part1/chapter.ipynb", ROWS, {**THIS, "loss_a": 1.60}).markdown
    caption = markdown.splitlines()[0]
    assert "so the claims are checked against this page's run alone" in caption
    assert "seeds 1 and 2" in caption and "evidence-at-a-glance" in caption
    assert markdown.splitlines()[1] == ":class: seed-table stale-seed-data"


def test_timings_are_shown_but_left_out_of_the_reproduction_check(tmp_path, monkeypatch):
    """A step's time moves by milliseconds between two runs of the same code on one machine: a
    row of timings must not make the stored runs stale, while a loss that moves still does."""
    stored = {0: {"loss_a": 1.80, "ms": 212.7}, 1: {"loss_a": 1.70, "ms": 220.4}}
    store_runs(tmp_path, monkeypatch, stored)
    rows = {"validation loss, A": "loss_a", "ms per step": "ms"}
    slower = {"loss_a": 1.80, "ms": 230.1}

    untimed = mlexp.seed_section("book/part1/chapter.ipynb", rows, slower)
    assert not untimed.current and "stale-seed-data" in untimed.markdown

    seeds = mlexp.seed_section("book/part1/chapter.ipynb", rows, slower, timed=["ms"])
    assert seeds.current
    caption = seeds.markdown.splitlines()[0]
    assert "every claim this page checks holds" in caption
    assert "Timings vary from run to run, so they are shown but not compared." in caption
    assert rows_of(seeds.markdown)["ms per step"][0] == "230.100"

    moved = mlexp.seed_section("book/part1/chapter.ipynb", rows, {**slower, "loss_a": 1.85},
                               timed=["ms"])
    assert not moved.current


def test_a_timed_key_must_be_a_row(chapter):
    with pytest.raises(ValueError, match="not among the table's keys"):
        mlexp.seed_section("book/part1/chapter.ipynb", ROWS, THIS, timed=["ms"])


def test_without_a_stored_run_of_its_offset_the_caption_names_this_pages_column(tmp_path, monkeypatch):
    store_runs(tmp_path, monkeypatch, {1: STORED[1], 2: STORED[2]})
    caption = mlexp.seed_section("book/part1/chapter.ipynb", ROWS, THIS).markdown.splitlines()[0]
    assert "Seeds 0, 1 and 2, where seed 0 is this page's run" in caption
    assert "reproduce" not in caption


def test_a_row_of_outcome_codes_shows_their_names_counted(tmp_path, monkeypatch):
    """"1.0 ± 1.7" for codes 3 / 0 / 0 is a mean of categories: the row names each outcome and
    counts it across the seeds."""
    stored = {0: {"loss": 1.9, "fate": 3.0}, 1: {"loss": 1.8, "fate": 0.0}, 2: {"loss": 1.7, "fate": 0.0}}
    store_runs(tmp_path, monkeypatch, stored)
    rows = {"validation loss": "loss", "outcome": "fate"}
    names = ["trained", "collapsed", "stalled", "diverged"]
    seeds = mlexp.seed_section("book/part1/chapter.ipynb", rows, stored[0], coded={"fate": names})
    assert rows_of(seeds.markdown)["outcome"] == [
        "diverged", "trained in 2 of 3, diverged in 1 of 3", "diverged / trained / trained"]
    same = {o: {**v, "fate": 1.0} for o, v in stored.items()}
    store_runs(tmp_path, monkeypatch, same)
    seeds = mlexp.seed_section("book/part1/chapter.ipynb", rows, same[0], coded={"fate": names})
    assert rows_of(seeds.markdown)["outcome"][1] == "collapsed in every seed"


def test_coded_rows_must_be_rows_and_hold_codes(tmp_path, monkeypatch):
    stored = {0: {"loss": 1.9, "fate": 0.5}}
    store_runs(tmp_path, monkeypatch, stored)
    rows = {"validation loss": "loss", "outcome": "fate"}
    with pytest.raises(ValueError, match="not among the table's keys"):
        mlexp.seed_section("book/part1/chapter.ipynb", rows, stored[0], coded={"fates": ["a", "b"]})
    with pytest.raises(ValueError, match="not a code of"):
        mlexp.seed_section("book/part1/chapter.ipynb", rows, stored[0], coded={"fate": ["a", "b"]})
