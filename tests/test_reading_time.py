"""The header card's reading time is measured from the page's running text (book/_ext/reading_time.py).

One in-process Sphinx build (myst-nb, sphinx-design, sphinxcontrib-bibtex and the real
extension; a few seconds, nothing executed) of small notebook pages, each a header card, the
same prose and one more block. A block that is not running text leaves the page's count at
the prose's; the card shows round(words / 200) minutes; a chapter the extension cannot fill
is a warning, which the book's ``-W`` build turns into a failure.
"""

from __future__ import annotations

import importlib.util
import json
import pathlib
import re
import sys
from io import StringIO

import pytest
from bs4 import BeautifulSoup
from sphinx.application import Sphinx
from sphinx.util.docutils import docutils_namespace

ROOT = pathlib.Path(__file__).resolve().parents[1]
EXT = ROOT / "book/_ext"
spec = importlib.util.spec_from_file_location("reading_time", EXT / "reading_time.py")
reading_time = importlib.util.module_from_spec(spec)
sys.modules[spec.name] = reading_time  # so that Sphinx loads this copy
spec.loader.exec_module(reading_time)

CONF = f"""
import sys
sys.path.insert(0, {str(EXT)!r})
extensions = ["myst_nb", "sphinx_design", "sphinxcontrib.bibtex", "reading_time"]
myst_enable_extensions = ["colon_fence", "dollarmath", "amsmath", "deflist"]
nb_execution_mode = "off"
bibtex_bibfiles = ["references.bib"]
bibtex_reference_style = "author_year"
exclude_patterns = ["_build"]
reading_time_pages = r"chapter_.*"
"""

BIB = """@article{vaswani2017attention,
  author = {Ashish Vaswani and Noam Shazeer},
  title = {Attention Is All You Need in a Title of Many Words},
  journal = {Advances in Neural Information Processing Systems},
  year = {2017}
}
"""

CARD = """::::{grid} 2 2 4 4
:class-container: header-card

:::{grid-item}
:class: header-card-item
Level

Introductory
:::

:::{grid-item}
:class: header-card-item
%s
:::
::::
"""
READING = "Reading\n\nabout — min"

# The running text: 13 + 8 + 6 + 4 = 31 words. Inline math is one word; the in-text citation
# reads "Vaswani and Shazeer (2017)", four; "RMSNorm's", "pre-norm" and "0.125" one each.
PROSE = """## A heading of several words that is not counted

The model reads {cite:t}`vaswani2017attention` and RMSNorm's pre-norm value, 0.125 — here.

- A list item counts.
- Another one: $x + y$ too.

::::{tab-set}
:::{tab-item} A tab label
Text in a tab panel counts.
:::
::::

Term
: A definition counts too.
"""
PROSE_WORDS = 31

HIDDEN = "word " * 40
# Blocks that are not running text (but the open boxes), each with 40 words or more.
NOT_RUNNING = {
    "table": f"| Claim | Seed 1 |\n|---|---|\n| {HIDDEN} | 0.5 |\n",
    "captioned_table": f"```{{list-table}} {HIDDEN}\n:header-rows: 1\n\n* - Claim\n  - Seed 1\n"
                       f"* - {HIDDEN}\n  - 0.5\n```\n",
    "admonition": f"```{{admonition}} Predict first\n:class: tip\n\n{HIDDEN}\n```\n",
    "note": f"```{{note}}\n{HIDDEN}\n```\n",
    "dropdown": f":::{{dropdown}} Answer\n{HIDDEN}\n:::\n",
    "sidebar": f"```{{sidebar}} A side note\n{HIDDEN}\n```\n",
    "topic": f"```{{topic}} A topic\n{HIDDEN}\n```\n",
    "figure": f"```{{figure}} fig.png\n:alt: {HIDDEN}\n\n**Figure 1.1.** {HIDDEN}\n\nA legend: {HIDDEN}\n```\n",
    "math_block": "$$\n" + " + ".join(["a"] * 40) + "\n$$\n",
    "code_fence": f"```python\n{HIDDEN}\n```\n",
    "bibliography": "```{bibliography}\n:filter: docname in docnames\n```\n",
    "footnote": f"A footnote reference[^a] here.\n\n[^a]: {HIDDEN}\n",
}
# "footnote" adds its four-word sentence; the reference mark is not a word. An open box is read
# like the prose around it ("Predict first", the recap), so its words count; its title does not.
EXTRA_WORDS = {"footnote": 4, "admonition": 40, "note": 40}


def notebook(*cells: dict) -> str:
    return json.dumps({"cells": list(cells), "metadata": {"kernelspec": {
        "name": "python3", "display_name": "Python 3", "language": "python"}},
        "nbformat": 4, "nbformat_minor": 5})


def markdown(source: str, n: int = 0) -> dict:
    return {"cell_type": "markdown", "id": f"m{n}", "metadata": {}, "source": source}


def code_cell(source: str, outputs: list[dict]) -> dict:
    return {"cell_type": "code", "id": "c0", "metadata": {}, "execution_count": 1,
            "source": source, "outputs": outputs}


CODE = code_cell(f"print('{HIDDEN}')", [
    {"output_type": "stream", "name": "stdout", "text": HIDDEN},
    {"output_type": "display_data", "metadata": {}, "data": {"text/markdown": f"Markdown {HIDDEN}",
                                                             "text/plain": "x"}},
])
# A glued value ("seven words glued into the running text here") is counted where it is pasted.
GLUE = code_cell("glue('phrase', ...)", [{
    "output_type": "display_data", "data": {"text/plain": "'seven words glued into the running text here'"},
    "metadata": {"scrapbook": {"name": "phrase", "mime_prefix": ""}}}])


def chapter(*blocks: str, card: str = CARD % READING) -> str:
    return notebook(markdown("# A chapter\n\n" + card), markdown(PROSE, 1),
                    *(markdown(block, 2 + i) for i, block in enumerate(blocks)))


def words(n: int) -> str:
    """A paragraph of ``n`` words."""
    return "\n".join(" ".join(["word"] * min(10, n - i)) for i in range(0, n, 10)) + "\n"


PAGES = {
    "chapter_prose": chapter(),
    **{f"chapter_{kind}": chapter(block) for kind, block in NOT_RUNNING.items()},
    "chapter_code": notebook(markdown("# A chapter\n\n" + CARD % READING), markdown(PROSE, 1), CODE),
    "chapter_glue": notebook(markdown("# A chapter\n\n" + CARD % READING), markdown(PROSE, 1), GLUE,
                             markdown("Pasted: {glue:text}`phrase`.", 2)),
    # 650 words: 3.25 minutes; 750 words: 3.75 minutes; 250: 1.25.
    **{f"chapter_{n}": chapter(words(n - PROSE_WORDS)) for n in (250, 650, 750)},
    "chapter_typed": chapter(card=CARD % "Reading\n\nabout 20 min"),
    "chapter_no_reading": chapter(card=CARD % "Hands-on\n\n5 min"),
    "chapter_no_card": notebook(markdown("# A chapter\n\n" + PROSE)),
    "chapter_two_readings": chapter(card=CARD % READING + "\n" + CARD % READING),
    "about": notebook(markdown("# A page that is not a chapter\n\n" + PROSE)),
}
BAD = {"chapter_typed", "chapter_no_reading", "chapter_no_card", "chapter_two_readings"}


@pytest.fixture(scope="module")
def book(tmp_path_factory) -> dict:
    """Build the pages; return each page's counted words and HTML, and the warnings."""
    src = tmp_path_factory.mktemp("reading")
    (src / "conf.py").write_text(CONF)
    (src / "references.bib").write_text(BIB)
    (src / "fig.png").write_bytes(b"")
    (src / "index.md").write_text("# Book\n\n```{toctree}\n" + "\n".join(PAGES) + "\n```\n")
    for name, text in PAGES.items():
        (src / f"{name}.ipynb").write_text(text)
    counted, warnings = {}, StringIO()
    with docutils_namespace():
        app = Sphinx(srcdir=src, confdir=src, outdir=src / "_build/html",
                     doctreedir=src / "_build/doctrees", buildername="html", status=None,
                     warning=warnings, freshenv=True)
        app.connect("doctree-resolved",
                    lambda app, doctree, docname: counted.__setitem__(docname, reading_time.running_words(doctree)))
        app.build()
        as_read = {name: reading_time.running_words(app.env.get_doctree(name)) for name in PAGES}
    html = {name: BeautifulSoup((src / f"_build/html/{name}.html").read_text(), "html.parser")
            for name in PAGES}
    return {"words": counted, "as_read": as_read, "html": html, "warnings": warnings.getvalue()}


def card_text(page: BeautifulSoup) -> str:
    card = page.select_one(".header-card")
    return card.get_text(" ", strip=True) if card else ""


def test_the_prose_counts_in_lists_tabs_definitions_and_citations(book):
    """Paragraphs anywhere in the prose count, headings and the card do not."""
    assert book["words"]["chapter_prose"] == PROSE_WORDS
    assert book["words"]["about"] == PROSE_WORDS


def test_a_glued_value_counts_where_it_is_pasted(book):
    assert "seven words glued into the running text here" in book["html"]["chapter_glue"].get_text()
    assert book["words"]["chapter_glue"] == PROSE_WORDS + 1 + 8  # "Pasted:" and the value


@pytest.mark.parametrize("kind", [*NOT_RUNNING, "code"])
def test_what_is_not_running_text_is_not_counted(book, kind):
    """Code, its outputs, tables and their captions, dropdowns, figures and their captions,
    math blocks, the bibliography and footnotes add nothing; an open box adds its words."""
    page = book["html"][f"chapter_{kind}"]
    assert "word word word" in page.get_text() or kind in {"math_block", "bibliography"}
    if kind == "bibliography":
        assert "attention is all you need" in page.get_text().lower()
    assert book["words"][f"chapter_{kind}"] == PROSE_WORDS + EXTRA_WORDS.get(kind, 0)


def test_a_dropdown_is_not_counted_before_it_is_rendered_either(book):
    """In the doctree as read (before sphinx-design makes a dropdown a folded HTML element),
    a dropdown is not running text either."""
    assert book["as_read"]["chapter_dropdown"] == book["as_read"]["chapter_prose"]


@pytest.mark.parametrize("words, minutes", [(250, 1), (650, 3), (750, 4), (PROSE_WORDS, 1)])
def test_the_card_shows_words_over_200_rounded(book, words, minutes):
    name = f"chapter_{words}" if words != PROSE_WORDS else "chapter_prose"
    assert book["words"][name] == words
    card = card_text(book["html"][name])
    assert f"Reading about {minutes} min" in card, card
    assert "—" not in card


def test_every_good_page_builds_without_a_warning(book):
    """Warnings name only the pages that cannot be filled, never a good one."""
    # Sphinx's own notice when another test in this process built a book first is not ours
    ours = [line for line in book["warnings"].splitlines()
            if "WARNING" in line and "is already registered" not in line]
    assert len(ours) == len(BAD), book["warnings"]
    for name in set(PAGES) - BAD:
        assert f"{name}.ipynb" not in book["warnings"], book["warnings"]


def test_a_typed_reading_time_is_a_warning_and_never_shown(book):
    assert re.search(r"chapter_typed.*header card says 'Reading: about 20 min'.*measured, never typed",
                     book["warnings"]), book["warnings"]
    card = card_text(book["html"]["chapter_typed"])
    assert "20" not in card and "Reading about 1 min" in card, card


def test_a_card_without_a_reading_item_is_a_warning(book):
    assert re.search(r"chapter_no_reading.*header card has 0 'Reading' items", book["warnings"]), book["warnings"]
    assert re.search(r"chapter_two_readings.*has 2 header cards", book["warnings"]), book["warnings"]


def test_a_chapter_without_a_card_is_a_warning(book):
    """A chapter page (reading_time_pages) must have a card; another page need not."""
    assert re.search(r"chapter_no_card.*has no header card", book["warnings"]), book["warnings"]
    assert "about.ipynb" not in book["warnings"]


def test_every_chapter_of_the_book_has_the_marker_not_a_number():
    """The book's chapters leave the reading time to the build: each card's Reading item holds
    the marker, in the same words everywhere."""
    chapters = sorted((ROOT / "book").glob("part*/chapter*.ipynb"))
    assert chapters
    for path in chapters:
        first = "".join(json.loads(path.read_text())["cells"][0]["source"])
        item = re.search(r":class: header-card-item\nReading\n\n(.*)\n:::", first)
        assert item and item.group(1) == reading_time.MARKER, (path.name, item and item.group(1))
