"""The header card's reading time, measured from the built page at 200 words a minute.

A chapter's header card is a sphinx-design grid (``:class-container: header-card``) whose
items (``:class: header-card-item``) are a label paragraph and a value paragraph. The source
never types the reading time: the "Reading" item's value is the marker ``about — min``, which
is what a build without this extension would show. When a page's doctree is resolved (glued
values pasted, citations resolved), this extension counts the words of its running text and
writes ``about N min``, N = round(words / 200) and at least 1, in place of the marker.

Running text is the prose a reader reads from top to bottom: the paragraphs of the page,
including those in lists, block quotes, definition lists and tab panels, with glued values and
in-text citations as they appear (a formula set inline counts as one word). Not counted:
headings; code cells and their outputs; tables (the seed table among them) and their
captions; figures and their captions; math blocks and literal blocks; dropdowns and other
folded or side notes; the bibliography and footnotes; raw HTML; and the header card itself.
Open boxes ("Predict first", the recap, a key equation's words) are read like the prose
around them, so they count.

A page whose name matches ``reading_time_pages`` (a regular expression, by default every
``part<N>/chapter<M>``) or that has a header card must end up with exactly one card and one
"Reading" item; anything else is a warning, which ``-W`` turns into a failed build. A Reading
item that holds anything but the marker (a typed number) is a warning too, and its text is
replaced by the measured time, so a page never shows a typed number.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

from docutils import nodes
from sphinx.application import Sphinx
from sphinx.util import logging

logger = logging.getLogger(__name__)

WORDS_PER_MINUTE = 200
LABEL = "Reading"
MARKER = "about — min"
CARD_CLASS = "header-card"
ITEM_CLASS = "header-card-item"

# A word: letters or digits, joined by inner apostrophes, hyphens, points, commas or slashes
# ("RMSNorm's", "pre-norm", "0.123", "1,280", "and/or" are one word each). Punctuation that
# stands alone ("—", "·", "(") is not a word.
WORD = re.compile(r"\w+(?:[-'’.,/]\w+)*")

# Only paragraphs count, so headings, code, math blocks, captions and raw HTML, which hold
# none, never do. Subtrees that hold paragraphs but are not running text, by node type ...
SKIPPED_NODES: tuple[type[nodes.Node], ...] = (
    nodes.table,            # tables, the seed table among them
    nodes.figure,           # figures and glued figures, with their captions and legends
    nodes.sidebar,          # margin notes
    nodes.topic,
    nodes.citation,         # the bibliography's entries
    nodes.footnote,
    nodes.system_message,
)
# ... and by class: the header card, sphinx-design's dropdowns (in the HTML builder, where
# they are folded), sphinx-togglebutton's folded content.
SKIPPED_CLASSES = {CARD_CLASS, "sd-dropdown", "dropdown", "toggle"}


def _skipped(node: nodes.Element) -> bool:
    if isinstance(node, SKIPPED_NODES):
        return True
    if str(node.get("nb_element", "")).startswith("cell_code"):  # a code cell and its outputs
        return True
    if node.get("design_component") == "dropdown":  # a dropdown before its HTML transform
        return True
    return bool(SKIPPED_CLASSES.intersection(node.get("classes", [])))


def running_paragraphs(node: nodes.Element) -> Iterator[nodes.paragraph]:
    """The paragraphs of the running text under ``node``, in document order."""
    if _skipped(node):
        return
    if isinstance(node, nodes.paragraph):
        yield node
        return
    for child in node.children:
        if isinstance(child, nodes.Element):
            yield from running_paragraphs(child)


def _words_in(node: nodes.Node) -> int:
    if isinstance(node, nodes.Text):
        return len(WORD.findall(node.astext()))
    if isinstance(node, nodes.math):  # an inline formula is read as about one word
        return 1
    if isinstance(node, (nodes.raw, nodes.footnote_reference, nodes.problematic, nodes.system_message)):
        return 0
    return sum(_words_in(child) for child in node.children)


def running_words(doctree: nodes.Element) -> int:
    """The number of words of running text in ``doctree`` (see the module's docstring)."""
    return sum(_words_in(paragraph) for paragraph in running_paragraphs(doctree))


def reading_minutes(words: int) -> int:
    """Minutes to read ``words`` words at 200 a minute, at least one."""
    return max(1, round(words / WORDS_PER_MINUTE))


def _is(node: nodes.Node, cls: str) -> bool:
    return isinstance(node, nodes.Element) and cls in node.get("classes", [])


def _label(item: nodes.Element) -> str | None:
    """The text of a card item's first paragraph, its label."""
    first = next(iter(item.findall(nodes.paragraph)), None)
    return first.astext().strip() if first is not None else None


def fill_reading_time(app: Sphinx, doctree: nodes.document, docname: str) -> None:
    """Write the measured reading time into the page's header card, or warn why it cannot."""
    cards = list(doctree.findall(lambda n: _is(n, CARD_CLASS)))
    is_chapter = re.fullmatch(app.config.reading_time_pages, docname) is not None
    if not cards:
        if is_chapter:
            logger.warning(f"{docname} has no header card (a grid with :class-container: "
                           f"{CARD_CLASS}), so its reading time cannot be filled",
                           location=docname, type="reading_time", subtype="card")
        return
    if len(cards) > 1:
        logger.warning(f"{docname} has {len(cards)} header cards; its reading time fills one only, "
                       "so the page must have one", location=cards[1], type="reading_time",
                       subtype="card")
        return
    items = [item for item in cards[0].findall(lambda n: _is(n, ITEM_CLASS))
             if _label(item) == LABEL]
    if len(items) != 1:
        logger.warning(f"{docname}'s header card has {len(items)} '{LABEL}' items; it needs one, "
                       f"a label paragraph '{LABEL}' and a value paragraph '{MARKER}', which the "
                       "build fills with the measured reading time", location=cards[0],
                       type="reading_time", subtype="item")
        return
    paragraphs = list(items[0].findall(nodes.paragraph))
    words = running_words(doctree)
    filled = nodes.Text(f"about {reading_minutes(words)} min")
    if len(paragraphs) != 2 or " ".join(paragraphs[1].astext().split()) != MARKER:
        value = " ".join(p.astext() for p in paragraphs[1:]) or "nothing"
        logger.warning(f"{docname}'s header card says '{LABEL}: {value}'; the reading time is "
                       f"measured, never typed: its value must be the marker '{MARKER}' "
                       f"(the page now shows the measured {filled})", location=items[0],
                       type="reading_time", subtype="typed")
        for extra in paragraphs[2:]:
            extra.parent.remove(extra)
        if len(paragraphs) == 1:
            items[0] += nodes.paragraph()
            paragraphs.append(items[0].children[-1])
    del paragraphs[1][:]
    paragraphs[1] += filled
    logger.info(f"{docname}: {words} words of running text, {filled}")


def setup(app: Sphinx) -> dict:
    app.add_config_value("reading_time_pages", r"part\d+/chapter\d+", "env", [str])
    # Late, so that text other handlers add to the page at this event is counted.
    app.connect("doctree-resolved", fill_reading_time, priority=900)
    return {"version": "1.0", "parallel_read_safe": True, "parallel_write_safe": True}
