"""What a chapter page needs from its notebook: glued values that the prose
can quote.

``glue`` hands a value to myst-nb, which the book's markdown then reads with
``{glue:text}`` or ``{glue:md}``. Numbers are converted to plain Python ints
and floats first (a NumPy or tensor scalar would not take a format spec).
Outside the book's build, on Colab say, myst-nb may be missing: then gluing
does nothing.
"""

from __future__ import annotations

import numbers

__all__ = ["glue", "glue_md", "plain"]


def plain(value):
    """A tensor, NumPy or Python scalar as a plain ``int`` or ``float``;
    anything else unchanged."""
    if hasattr(value, "item") and getattr(value, "ndim", 0) == 0:
        value = value.item()
    if isinstance(value, bool):
        return value
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real):
        return float(value)
    return value


def glue(name: str, value, display: bool = False) -> None:
    """Glue ``value`` under ``name`` for the page's prose, as a plain Python
    value."""
    try:
        from myst_nb import glue as myst_glue
    except ImportError:
        return
    myst_glue(name, plain(value), display=display)


def glue_md(name: str, text: str) -> None:
    """Glue a snippet of Markdown, rendered where the page says
    ``{glue:md}`name```."""
    from IPython.display import Markdown

    glue(name, Markdown(text))
