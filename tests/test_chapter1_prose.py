"""Chapter 1's prose against its own code and its own lists, read from the built page.

Slips a review found: the page said the Vision Transformer's blocks were unchanged except for
the mask while the code also switches RoPE off, and a count announced before a list did not
match the list. The tests read the HTML the README's build command writes
(_build/html, or $MLEXP_SITE) and skip when the chapter has not been built.
"""

import pathlib
import re

import pytest
from bs4 import BeautifulSoup
from test_site import CHAPTER, SITE, article_text

NUMBER_WORDS = {"one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7}
# The switches a Block passes on to its Attention: the ones that differ between the two models.
SWITCHES = ("causal", "rope")


@pytest.fixture(scope="module")
def chapter() -> BeautifulSoup:
    page = SITE / f"{CHAPTER}.html"
    if not page.is_file():
        pytest.skip(f"no built page at {page}; build the book first (README, command 1)")
    return BeautifulSoup(page.read_text(encoding="utf-8"), "html.parser")


def flat(text: str) -> str:
    return " ".join(text.split())


def sentences(text: str) -> list[str]:
    return re.split(r"(?<=[.!?])\s+", flat(text))


def says_switched_off(text: str, what: str) -> bool:
    """Some sentence of ``text`` names ``what`` and says it is off, dropped or absent."""
    off = re.compile(r"\b(?:off|without|drop\w*|remov\w*|no)\b", re.I)
    return any(what in s and off.search(s) for s in sentences(text))


def test_vit_text_names_every_switch_the_code_turns_off(chapter):
    """The code builds the image model's blocks with the causal mask and RoPE off; the tab "Two
    ends" and the caption of Figure 1.1 must say both, not "unchanged except for the mask"."""
    from mlexp.transformer import Residual, TransformerLM, VisionTransformer

    lm = TransformerLM(65, dim=128, n_layers=4, n_heads=4)
    vit = VisionTransformer(n_classes=10)
    lm_switches = {s: {getattr(b.attn, s) for b in lm.blocks} for s in SWITCHES}
    vit_switches = {s: {getattr(b.attn, s) for b in vit.blocks} for s in SWITCHES}
    assert lm_switches == {"causal": {True}, "rope": {True}}
    assert vit_switches == {"causal": {False}, "rope": {False}}
    # Nothing else in a block differs: the same layers in the same order, residuals on in both.
    layers = [type(m).__name__ for m in lm.blocks[0].modules()]
    assert layers == [type(m).__name__ for m in vit.blocks[0].modules()]
    assert all(
        isinstance(c, Residual) for b in [*lm.blocks, *vit.blocks] for c in (b.connect1, b.connect2)
    )

    two_ends = chapter.select(".sd-tab-set > .sd-tab-content")[2].get_text(" ")
    caption = chapter.select_one("figure#fig-two-models figcaption").get_text(" ")
    for where, text in (("tab 3", two_ends), ("Figure 1.1's caption", caption)):
        assert says_switched_off(text, "mask"), f"{where} does not say the causal mask is off"
        assert says_switched_off(text, "RoPE"), f"{where} does not say RoPE is off: {flat(text)}"
    page = flat(article_text(chapter))
    assert not re.search(r"unchanged except (?:that )?the causal mask", page)
    assert "Only the bottom and top of the columns differ" not in page


def test_figures_of_both_models_show_rope_switched_off(chapter):
    """Figure 1.1 and its zoom on the two ends draw the image model too: their text (title,
    description read by screen readers, labels) says RoPE is off as well as the mask, and no
    longer calls the blocks identical."""
    page_dir = SITE / pathlib.Path(CHAPTER).parent
    both = {}
    for img in chapter.select("article img[src$='.svg']"):
        svg = BeautifulSoup((page_dir / img["src"]).read_text(encoding="utf-8"), "html.parser")
        text = flat(svg.get_text(" "))
        if "Vision Transformer" in text:
            both[img["src"]] = text
    assert len(both) >= 2, f"expected Figure 1.1 and 1.1c to draw both models, found {list(both)}"
    for src, text in both.items():
        assert says_switched_off(text, "RoPE"), f"{src} does not say the image model drops RoPE"
        assert "identical" not in text, f"{src} still calls the blocks identical"


def announced_count(clause: str) -> int | None:
    """The first number in ``clause`` that does not count seeds, as a digit or a word."""
    for m in re.finditer(r"\b(\d+|[a-z]+)\b(?!\s+seeds?\b)", clause.lower()):
        word = m.group(1)
        if word.isdigit():
            return int(word)
        if word in NUMBER_WORDS:
            return NUMBER_WORDS[word]
    return None


def test_recap_counts_the_parts_its_table_lists(chapter):
    """The recap asks for "the six parts" of the lineage table: the count it announces is the
    number of rows of that table (the one with a "Covered in" column), not a number typed apart
    from the list it counts."""
    tables = [t for t in chapter.select("article table")
              if any("Covered in" in th.get_text() for th in t.select("th"))]
    assert len(tables) == 1, f"expected one lineage table, found {len(tables)}"
    rows = tables[0].select("tbody tr")
    recap = next((a for a in chapter.select("article .admonition")
                  if "You should now be able to" in a.get_text()), None)
    assert recap is not None, "no recap box"
    item = next((flat(li.get_text(" ")) for li in recap.select("li") if " parts " in li.get_text()), None)
    assert item is not None, "the recap no longer asks for the parts"
    count = announced_count(item)
    assert count == len(rows), f"the recap announces {count} parts, the table lists {len(rows)}: {item!r}"
