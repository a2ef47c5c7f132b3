"""Checks on the hand-written SVG figures in book/_static/figures.

Fast and stdlib-only: every figure must be well-formed XML, scale through a
viewBox, carry <title> and <desc> for screen readers, start with an opaque
white background (so it stays legible on a dark site theme) and stay small.
"""
import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

FIGURES = Path(__file__).resolve().parents[1] / "book" / "_static" / "figures"
SVGS = sorted(FIGURES.rglob("*.svg"))
SVG_NS = "{http://www.w3.org/2000/svg}"
MAX_BYTES = 50 * 1024
NOT_DRAWN = {"title", "desc", "defs", "style", "metadata"}
WHITE = {"#fff", "#ffffff", "white", "rgb(255,255,255)"}


def local(tag):
    return tag.split("}", 1)[-1]


def attr(el, name):
    """A presentation attribute, letting an inline style override it."""
    style = el.get("style", "")
    m = re.search(rf"(?:^|;)\s*{re.escape(name)}\s*:\s*([^;]+)", style)
    return m.group(1).strip() if m else el.get(name)


def number(value, default=0.0):
    if value is None:
        return default
    return float(re.sub(r"(px)$", "", value.strip()))


def root_of(path):
    return ET.parse(path).getroot()


def test_there_are_figures():
    assert SVGS, f"no SVG files found under {FIGURES}"


@pytest.mark.parametrize("path", SVGS, ids=lambda p: p.name)
def test_svg_is_small(path):
    assert path.stat().st_size < MAX_BYTES


@pytest.mark.parametrize("path", SVGS, ids=lambda p: p.name)
def test_svg_parses_and_is_svg(path):
    root = root_of(path)
    assert root.tag == SVG_NS + "svg"


@pytest.mark.parametrize("path", SVGS, ids=lambda p: p.name)
def test_svg_has_viewbox(path):
    vb = root_of(path).get("viewBox")
    assert vb is not None, "missing viewBox"
    parts = [float(v) for v in vb.replace(",", " ").split()]
    assert len(parts) == 4 and parts[2] > 0 and parts[3] > 0


@pytest.mark.parametrize("path", SVGS, ids=lambda p: p.name)
def test_svg_has_title_and_desc(path):
    root = root_of(path)
    for name in ("title", "desc"):
        el = root.find(SVG_NS + name)
        assert el is not None, f"missing <{name}>"
        assert (el.text or "").strip(), f"empty <{name}>"


@pytest.mark.parametrize("path", SVGS, ids=lambda p: p.name)
def test_svg_starts_with_opaque_white_background(path):
    root = root_of(path)
    drawn = [el for el in root if local(el.tag) not in NOT_DRAWN]
    assert drawn, "nothing is drawn"
    bg = drawn[0]
    assert local(bg.tag) == "rect", f"first drawn element is <{local(bg.tag)}>"
    fill = (attr(bg, "fill") or "").replace(" ", "").lower()
    assert fill in WHITE, f"background fill is {fill!r}"
    for name in ("opacity", "fill-opacity"):
        assert number(attr(bg, name), 1.0) >= 1.0, f"background {name} < 1"
    assert bg.get("transform") is None

    min_x, min_y, width, height = (
        float(v) for v in root.get("viewBox").replace(",", " ").split())
    for pos, name, origin, size in (("x", "width", min_x, width),
                                    ("y", "height", min_y, height)):
        start = number(bg.get(pos))
        assert start <= origin, f"background {pos} leaves a gap"
        value = bg.get(name, "").strip()
        if value == "100%":
            continue
        assert start + number(value) >= origin + size, f"background {name} too small"
