"""The book's writing rules (../shared/WRITING.md), held on the built pages.

A chapter's running text is what a reader reads top to bottom: its paragraphs, not code and
outputs, tables, figures, folded notes, references or the header card (the same text the
card's reading time counts, book/_ext/reading_time.py). On it:

- the card's reading time stays within the chapter's budget;
- no sentence carries more than three measured numbers (a number with a decimal point, a
  percentage or a ratio; years, chapter and step numbers and other whole counts aside):
  more belong in a table;
- no glued measured value is stated more than twice outside tables and the seed section: a
  result is said where it is measured, and named elsewhere;
- no book machinery (stored runs, tolerances, seed offsets, fingerprints, instruction sets,
  caches) sits in the prose; the evidence page explains it;

and in the notebook a Colab reader opens, the cells the site hides hold at most a quarter of
the code lines.

A chapter that does not meet a rule yet is listed in ``NOT_YET`` under it, as a strict xfail:
the entry must go when the chapter is rewritten, and no chapter may be added.

Reads the HTML that the README's build command writes to _build/html (or $MLEXP_SITE).
"""

import collections
import json
import os
import pathlib
import re

import pytest
import yaml
from bs4 import BeautifulSoup, Tag

ROOT = pathlib.Path(__file__).resolve().parents[1]
SITE = pathlib.Path(os.environ.get("MLEXP_SITE", ROOT / "_build" / "html"))
CHAPTERS = [c["file"] for part in yaml.safe_load((ROOT / "_toc.yml").read_text())["parts"]
            for c in part["chapters"] if (ROOT / "book" / f"{c['file']}.ipynb").is_file()]

# Minutes of running text at 200 words a minute: the introductory chapter, then the others.
BUDGET = {"part1/chapter01": 20}
DEFAULT_BUDGET = 25
MAX_NUMBERS_PER_SENTENCE = 3
MAX_MENTIONS = 2
MAX_HIDDEN_SHARE = 0.25

# The chapters the writing issues (#43: Chapters 1 to 3; #45: 4 to 7) have yet to bring under
# each rule: a strict xfail each, so a chapter that passes must leave the list.
NOT_YET = {
    "budget": set(),
    "numbers": set(),
    "repeats": set(),
    "machinery": set(),
    "hidden": {"part1/chapter04", "part1/chapter05", "part1/chapter06", "part1/chapter07"},
}

# Not running text: code cells and their outputs, tables, figures, folded and side notes,
# references, the header card.
SKIPPED_TAGS = {"table", "figure", "aside", "pre", "details", "script", "style"}
SKIPPED_CLASSES = {"cell", "header-card", "sd-dropdown", "dropdown", "toggle", "toggle-hidden",
                   "sidebar", "margin", "topic", "footnote", "citation", "bibliography",
                   "footnote-list"}
SEED_SECTION = "across-three-seeds"
# A measured number: decimals (1.738, −0.025), percentages (93%), ratios (2.3×).
MEASURED = re.compile(r"\d*\.\d+|\d+(?:\.\d+)?\s?%|\d+(?:\.\d+)?×")
SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z(“\"'])")
MACHINERY = re.compile(
    r"stored runs?\b|\btolerance|seed offsets?|\boffsets? \d|fingerprint|instruction sets?"
    r"|\bAVX|execution (?:cache|record)|\bcached run|jupyter.cache|build cache",
    re.IGNORECASE,
)
HIDING_TAGS = {"remove-cell", "remove-input", "hide-input", "hide-cell"}


def chapter_params(rule: str) -> list:
    return [pytest.param(c, marks=pytest.mark.xfail(strict=True, reason=f"{c} is not yet "
                                                    f"rewritten to this rule ({rule})"))
            if c in NOT_YET[rule] else c for c in CHAPTERS]


def page(name: str) -> BeautifulSoup:
    path = SITE / f"{name}.html"
    if not path.is_file():
        pytest.fail(f"no built page at {path}; build the site first (README, command 1)")
    return BeautifulSoup(path.read_text(encoding="utf-8"), "html.parser")


def _skipped(tag: Tag) -> bool:
    return tag.name in SKIPPED_TAGS or bool(SKIPPED_CLASSES.intersection(tag.get("class") or []))


def running_paragraphs(name: str, seed_section: bool = True) -> list[Tag]:
    """The paragraphs of the chapter's running text, in order; without those of the seed
    section when ``seed_section`` is false."""
    article = page(name).select_one("article") or page(name)
    found = []
    for p in article.find_all("p"):
        parents = list(p.parents)
        if any(_skipped(t) for t in [p, *parents] if isinstance(t, Tag)):
            continue
        if not seed_section and any(t.get("id") == SEED_SECTION for t in parents):
            continue
        found.append(p)
    return found


def _text(p: Tag) -> str:
    """A paragraph's words, without the evidence badges that follow a claim (a badge is a tag,
    not a word of the sentence)."""
    return " ".join(
        " ".join(piece.split()) for piece in p.find_all(string=True)
        if not any("evidence-badge" in (t.get("class") or []) for t in piece.parents)
    )


def sentences(name: str) -> list[str]:
    text = " ".join(" ".join(_text(p).split()) for p in running_paragraphs(name))
    return SENTENCE_END.split(text)


def reading_minutes(name: str) -> int:
    card = page(name).select_one(".header-card")
    items = [" ".join(i.get_text(" ").split()) for i in card.select(".header-card-item")]
    (reading,) = [i for i in items if i.startswith("Reading")]
    return int(re.search(r"about (\d+) min", reading).group(1))


@pytest.mark.parametrize("name", chapter_params("budget"))
def test_the_running_text_fits_the_chapters_reading_budget(name):
    budget = BUDGET.get(name, DEFAULT_BUDGET)
    minutes = reading_minutes(name)
    assert minutes <= budget, f"{name} reads in about {minutes} min; its budget is {budget}"


@pytest.mark.parametrize("name", chapter_params("numbers"))
def test_no_sentence_carries_more_than_three_measured_numbers(name):
    crowded = [s for s in sentences(name) if len(MEASURED.findall(s)) > MAX_NUMBERS_PER_SENTENCE]
    assert not crowded, f"{len(crowded)} sentences of {name} carry more than " \
        f"{MAX_NUMBERS_PER_SENTENCE} numbers: put them in a table. First: {crowded[0]!r}"


@pytest.mark.parametrize("name", chapter_params("repeats"))
def test_each_glued_result_is_stated_at_most_twice(name):
    mentions = collections.Counter(
        span.get_text().strip()
        for p in running_paragraphs(name, seed_section=False)
        for span in p.select("span.pasted-text")
        if MEASURED.search(span.get_text())
    )
    repeated = {value: n for value, n in mentions.items() if n > MAX_MENTIONS}
    assert not repeated, f"{name} states these glued values more than {MAX_MENTIONS} times " \
        f"in its running text (value: times): {repeated}; say a result where it is measured"


@pytest.mark.parametrize("name", chapter_params("machinery"))
def test_no_book_machinery_in_the_prose(name):
    found = [s for s in sentences(name) if MACHINERY.search(s)]
    assert not found, f"{len(found)} sentences of {name} speak of the book's machinery " \
        f"(the evidence page explains it). First: {found[0]!r}"


def hidden_share(name: str) -> tuple[int, int]:
    """Non-blank code lines in cells the site hides or folds, and in all code cells."""
    cells = json.loads((ROOT / "book" / f"{name}.ipynb").read_text())["cells"]
    hidden = total = 0
    for cell in cells:
        if cell["cell_type"] != "code":
            continue
        lines = sum(1 for line in "".join(cell["source"]).splitlines() if line.strip())
        total += lines
        if HIDING_TAGS.intersection(cell.get("metadata", {}).get("tags", [])):
            hidden += lines
    return hidden, total


@pytest.mark.parametrize("name", chapter_params("hidden"))
def test_the_cells_the_site_hides_hold_at_most_a_quarter_of_the_code(name):
    hidden, total = hidden_share(name)
    assert hidden <= MAX_HIDDEN_SHARE * total, f"{name}'s hidden cells hold {hidden} of its " \
        f"{total} code lines ({hidden / total:.0%}); a Colab reader sees them all: write the " \
        "sentences in the markdown and move drawing into figure helpers"


def test_the_rules_see_running_text_and_count_what_they_should():
    """The measures themselves, on a page made for them: a table, a code cell, a folded note
    and the seed section are not running text; numbers, repeats and machinery are found."""
    html = BeautifulSoup("""<article>
      <div class="header-card"><p>Reading about 3 min 1.5</p></div>
      <p>Loss fell to <span class="pasted-text">1.738</span> after 400 steps in 2024.<span
         class="evidence-badge">likely</span></p>
      <p>It was 1.1, 2.2, 3.3 and 4.4 in turn. See <span class="pasted-text">1.738</span>.</p>
      <table><tr><td><p>9.9 9.9 9.9 9.9</p></td></tr></table>
      <div class="cell"><p>the stored run</p></div>
      <details class="sd-dropdown"><p>tolerance</p></details>
      <section id="across-three-seeds"><p>Mean <span class="pasted-text">1.738</span>.</p></section>
      <p>Again <span class="pasted-text">1.738</span>, within the tolerance of the stored run.</p>
    </article>""", "html.parser")
    global page
    real, page = page, lambda name: html
    try:
        paragraphs = running_paragraphs("x")
        assert len(paragraphs) == 4 and len(running_paragraphs("x", seed_section=False)) == 3
        found = sentences("x")
        assert [len(MEASURED.findall(s)) for s in found] == [1, 4, 1, 1, 1]
        assert [s for s in found if MACHINERY.search(s)] == \
            ["Again 1.738 , within the tolerance of the stored run."]
        spans = [s.get_text() for p in running_paragraphs("x", False) for s in p.select(".pasted-text")]
        assert spans.count("1.738") == 3  # the seed section's mention is not counted
    finally:
        page = real
