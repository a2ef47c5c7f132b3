"""Say in the build log when a page's stored seed runs no longer match its own run.

A chapter marks its seed table with the class ``stale-seed-data`` when this build does not
reproduce the stored run of its seed offset (a changed experiment), or the corpus or the
table's rows changed. The page shows that warning to readers; this extension repeats it, with
the rows that moved, in the build log. It is a notice, not a
Sphinx warning: a build on different hardware must still publish.
"""

from __future__ import annotations

import re

from docutils import nodes
from myst_nb.ext.glue import directives as glue_directives
from sphinx.application import Sphinx
from sphinx.util import logging
from sphinx.util.console import colorize

logger = logging.getLogger(__name__)


def report_stale(app: Sphinx, doctree: nodes.document, docname: str) -> None:
    for node in doctree.findall(nodes.Element):
        if "stale-seed-data" in node.get("classes", []):
            text = " ".join(node.astext().split())
            logger.info(colorize("red", f"STALE SEED DATA in {docname}: {text}"))


# A backtick fence's info string may not hold a backtick (CommonMark), so a seed table whose
# caption carries a role (the link to the evidence page) must open with a colon fence. Runs
# recorded before mlexp wrote it so glued a backtick fence; they are rewritten here, at build
# time, so that the recorded runs stay valid. (Drop this once every chapter's record is newer.)
_BACKTICK_TABLE = re.compile(r"\A```\{table\}([^\n]*`[^\n]*)\n(.*)\n```\s*\Z", re.S)


def colon_fenced(markdown: str) -> str:
    """``markdown`` with a backtick-fenced table whose caption holds a backtick rewritten to a
    colon fence; anything else unchanged."""
    match = _BACKTICK_TABLE.match(markdown)
    if not match:
        return markdown
    return f":::{{table}}{match.group(1)}\n{match.group(2)}\n:::"


def _retrieve_fixed(document, key):
    result = _retrieve(document, key)
    text = result.data.get("text/markdown")
    if isinstance(text, str):
        result.data["text/markdown"] = colon_fenced(text)
    return result


_retrieve = glue_directives.retrieve_glue_data


def setup(app: Sphinx) -> dict:
    glue_directives.retrieve_glue_data = _retrieve_fixed
    app.connect("doctree-resolved", report_stale)
    return {"version": "1.0", "parallel_read_safe": True, "parallel_write_safe": True}
