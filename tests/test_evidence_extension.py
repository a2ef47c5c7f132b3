"""Tests for the ``{evidence}`level``` role (book/_ext/evidence.py) and its CSS.

Each test builds a throwaway Sphinx project in a temp dir with the book's real
legend page (book/evidence.md), so a broken legend or a bad link fails here
before it fails the full book build. Builds run in-process with ``-W``
semantics (``warningiserror=True``); the whole file takes a few seconds.
"""

from __future__ import annotations

import json
import posixpath
import re
import shutil
from html.parser import HTMLParser
from io import StringIO
from pathlib import Path

import pytest
from sphinx.application import Sphinx
from sphinx.errors import SphinxWarning
from sphinx.util.docutils import docutils_namespace

ROOT = Path(__file__).resolve().parents[1]
BOOK = ROOT / "book"
EXT_DIR = BOOK / "_ext"
LEVELS = {
    "established": "Replicated widely, across many papers and scales.",
    "likely": "Good evidence, but open questions remain.",
    "speculative": "A plausible story without decisive tests.",
}

CONF = f"""
import sys
sys.path.insert(0, {str(EXT_DIR)!r})
extensions = ["myst_nb", "evidence"]
nb_execution_mode = "off"
exclude_patterns = ["_build"]
"""

INDEX = """# Test book

```{toctree}
evidence
sub/page
sub/deeper/notebook
```
"""

PAGE = """# A page one folder down

Widely seen {evidence}`established`, probably true {evidence}`likely`,
and a guess {evidence}`speculative`.
"""


def notebook(markdown: str) -> str:
    """Minimal nbformat-4 notebook with one markdown cell (no kernel needed)."""
    return json.dumps(
        {
            "cells": [{"cell_type": "markdown", "id": "c0", "metadata": {}, "source": markdown}],
            "metadata": {},
            "nbformat": 4,
            "nbformat_minor": 5,
        }
    )


def make_project(root: Path, page: str = PAGE) -> Path:
    """Write the tiny project: legend at the top, pages one and two folders deep."""
    (root / "sub" / "deeper").mkdir(parents=True)
    (root / "conf.py").write_text(CONF)
    (root / "index.md").write_text(INDEX)
    shutil.copy(BOOK / "evidence.md", root / "evidence.md")
    (root / "sub" / "page.md").write_text(page)
    (root / "sub" / "deeper" / "notebook.ipynb").write_text(
        notebook("# Notebook two folders down\n\nA notebook claim {evidence}`likely`.")
    )
    return root


def build(src: Path, builder: str = "html") -> tuple[Path, str]:
    """Build like ``sphinx-build -W``; return the output dir and the warning text."""
    out = src / "_build" / builder
    warnings = StringIO()
    # docutils keeps node/role registrations global; the namespace undoes them
    # so several in-process builds don't warn "already registered" under -W.
    with docutils_namespace():
        app = Sphinx(
            srcdir=src,
            confdir=src,
            outdir=out,
            doctreedir=src / "_build" / "doctrees",
            buildername=builder,
            status=None,
            warning=warnings,
            warningiserror=True,
            freshenv=True,
        )
        app.build()
    return out, warnings.getvalue()


class BadgeParser(HTMLParser):
    """Collect badge anchors (attrs + text) and every element id on a page."""

    def __init__(self) -> None:
        super().__init__()
        self.badges: list[dict[str, str]] = []
        self.ids: set[str] = set()
        self._current: dict[str, str] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: v or "" for k, v in attrs}
        if "id" in a:
            self.ids.add(a["id"])
        if tag == "a" and "evidence-badge" in a.get("class", "").split():
            self._current = {**a, "text": ""}
            self.badges.append(self._current)

    def handle_data(self, data: str) -> None:
        if self._current is not None:
            self._current["text"] += data

    def handle_endtag(self, tag: str) -> None:
        if tag == "a":
            self._current = None


def parse(path: Path) -> BadgeParser:
    parser = BadgeParser()
    parser.feed(path.read_text(encoding="utf-8"))
    return parser


@pytest.fixture(scope="module")
def html_out(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out, warnings = build(make_project(tmp_path_factory.mktemp("evidence")))
    assert warnings == ""
    return out


@pytest.mark.parametrize(
    ("page", "expected"),
    [("sub/page.html", ["established", "likely", "speculative"]), ("sub/deeper/notebook.html", ["likely"])],
)
def test_badges_link_to_legend_anchors(html_out: Path, page: str, expected: list[str]) -> None:
    """Badges carry the right class/title/aria-label and their hrefs hit real legend ids."""
    badges = parse(html_out / page).badges
    assert [b["text"] for b in badges] == expected
    legend_ids = parse(html_out / "evidence.html").ids
    for badge, level in zip(badges, expected):
        assert badge["class"].split() == ["evidence-badge", f"evidence-{level}"]
        assert badge["title"] == LEVELS[level]
        assert badge["aria-label"] == f"evidence: {level}. {LEVELS[level]}"
        path, _, anchor = badge["href"].partition("#")
        assert posixpath.normpath(posixpath.join(posixpath.dirname(page), path)) == "evidence.html"
        assert anchor == f"evidence-{level}" and anchor in legend_ids


def test_legend_page_shows_each_badge(html_out: Path) -> None:
    """The legend itself displays every badge, so readers see what they look like."""
    legend = parse(html_out / "evidence.html")
    assert [b["text"] for b in legend.badges] == list(LEVELS)
    assert all(b["href"].startswith("#") for b in legend.badges)


def test_unknown_level_fails_strict_build(tmp_path: Path) -> None:
    """A typo must stop a -W build and say what was wrong and what is allowed."""
    src = make_project(tmp_path, page="# Bad\n\nHmm {evidence}`maybe`.\n")
    with pytest.raises(SphinxWarning) as err:
        build(src)
    message = str(err.value)
    assert "'maybe'" in message and "sub/page" in message
    assert "established, likely, speculative" in message


def test_text_builder_degrades_to_plain_text(tmp_path: Path) -> None:
    """Non-HTML builders get ``[level]`` and no warnings."""
    out, warnings = build(make_project(tmp_path), builder="text")
    assert warnings == ""
    text = (out / "sub" / "page.txt").read_text(encoding="utf-8")
    assert "[established]" in text and "[likely]" in text and "[speculative]" in text


def _luminance(hex_colour: str) -> float:
    """WCAG relative luminance of ``#rrggbb``."""
    channels = [int(hex_colour[i : i + 2], 16) / 255 for i in (1, 3, 5)]
    r, g, b = (c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4 for c in channels)
    return 0.2126 * r + 0.7152 * g + 0.0722 * b


def test_badge_colours_meet_wcag_aa() -> None:
    """Every light and dark badge colour pair in custom.css has contrast >= 4.5:1."""
    css = (BOOK / "_static" / "custom.css").read_text(encoding="utf-8")
    pairs = re.findall(
        r"(html\[data-theme=\"dark\"\] )?\.evidence-(\w+)\s*\{\s*--ev-bg:\s*(#[0-9a-f]{6});\s*--ev-fg:\s*(#[0-9a-f]{6});",
        css,
        flags=re.I,
    )
    assert sorted((bool(dark), level) for dark, level, _, _ in pairs) == sorted(
        (dark, level) for dark in (False, True) for level in LEVELS
    )
    for dark, level, bg, fg in pairs:
        hi, lo = sorted((_luminance(bg), _luminance(fg)), reverse=True)
        assert (hi + 0.05) / (lo + 0.05) >= 4.5, (level, "dark" if dark else "light", bg, fg)
