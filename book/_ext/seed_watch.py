"""Say in the build log when a page's stored seed runs no longer match its own run.

A chapter marks its seed table with the class ``stale-seed-data`` when this build does not
reproduce the stored run of its seed offset (a changed experiment), or the corpus or the
table's rows changed. The page shows that warning to readers; this extension repeats it, with
the rows that moved, in the build log. It is a notice, not a
Sphinx warning: a build on different hardware must still publish.
"""

from __future__ import annotations

from docutils import nodes
from sphinx.application import Sphinx
from sphinx.util import logging
from sphinx.util.console import colorize

logger = logging.getLogger(__name__)


def report_stale(app: Sphinx, doctree: nodes.document, docname: str) -> None:
    for node in doctree.findall(nodes.Element):
        if "stale-seed-data" in node.get("classes", []):
            text = " ".join(node.astext().split())
            logger.info(colorize("red", f"STALE SEED DATA in {docname}: {text}"))


def setup(app: Sphinx) -> dict:
    app.connect("doctree-resolved", report_stale)
    return {"version": "1.0", "parallel_read_safe": True, "parallel_write_safe": True}
