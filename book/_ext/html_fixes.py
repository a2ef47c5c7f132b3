"""Small repairs to the HTML that the theme and Sphinx produce, found by the browser tests.

- Sphinx 7.4 emits an inline script twice when an extension adds it after setup
  (fixed upstream in sphinx-doc/sphinx#13402, which Jupyter Book 1 cannot use yet); the
  second copy throws "Identifier ... has already been declared" in the console.
- myst-nb's fold of a hidden code cell names its toggle "Toggle hidden content" while it shows
  "Show code cell source"; axe requires the visible text in the accessible name, so the
  summary keeps its visible text as its name.
- myst-nb's ``coalesce_streams`` (``nb_merge_streams``) appends every later stream of a cell to
  the first one in place and returns a new list. The page is right, but the executed notebook
  the site offers for download (``_build/jupyter_execute``) keeps the grown first stream beside
  the others, so a cell that printed in several writes (a slow loop) shows its lines twice there,
  and on any page rendered from that file. Merging copies leaves the notebook as it ran.
- docutils marks bibliography entries with the deprecated ARIA role ``doc-biblioentry``
  inside a ``role="list"``, which screen readers (and axe) reject; they are list items.
"""

from __future__ import annotations

import copy

from myst_nb.core import render as myst_render
from sphinx.application import Sphinx

_coalesce_in_place = myst_render.coalesce_streams


def coalesce_copies(outputs: list) -> list:
    """myst-nb's merge of a cell's stream outputs, on copies, so that merging twice is merging
    once."""
    return _coalesce_in_place(copy.deepcopy(outputs))


def _unique_scripts(scripts: list) -> list:
    seen, unique = set(), []
    for script in scripts:
        # The copies differ only in how "no file" is spelled (None or ""), so compare what the
        # page would contain: the file name, if any, and the attributes (an inline body).
        key = (str(getattr(script, "filename", script) or ""),
               tuple(sorted((k, str(v)) for k, v in getattr(script, "attributes", {}).items())))
        if key not in seen:
            seen.add(key)
            unique.append(script)
    return unique


def repair_page(app: Sphinx, pagename: str, templatename: str, context: dict, doctree) -> None:
    if "script_files" in context:
        context["script_files"] = _unique_scripts(context["script_files"])
    if "body" in context:
        context["body"] = context["body"].replace('role="doc-biblioentry"', 'role="listitem"')
        context["body"] = context["body"].replace(
            '<summary aria-label="Toggle hidden content">', "<summary>")


def setup(app: Sphinx) -> dict:
    myst_render.coalesce_streams = coalesce_copies
    app.connect("html-page-context", repair_page, priority=900)  # after every other handler
    return {"version": "1.0", "parallel_read_safe": True, "parallel_write_safe": True}
