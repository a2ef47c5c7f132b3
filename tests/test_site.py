"""The built site: glued numbers resolved, tabs, badges, alt text, launch links, no broken links.

Reads the HTML that the README's build command writes to _build/html (or $MLEXP_SITE).
"""

import json
import os
import pathlib
import re
import urllib.parse

import pytest
import yaml
from bs4 import BeautifulSoup

ROOT = pathlib.Path(__file__).resolve().parents[1]
SITE = pathlib.Path(os.environ.get("MLEXP_SITE", ROOT / "_build" / "html"))
CONFIG = yaml.safe_load((ROOT / "_config.yml").read_text())
CHAPTER = "part1/chapter01"
NUMBER = re.compile(r"\d[\d,]*\.\d+|\d{1,3}(?:,\d{3})+")


@pytest.fixture(scope="module")
def pages() -> dict[str, BeautifulSoup]:
    if not (SITE / "index.html").is_file():
        pytest.fail(f"no built site at {SITE}; build it first (README, command 1)")
    return {
        str(p.relative_to(SITE).with_suffix("")): BeautifulSoup(p.read_text(encoding="utf-8"), "html.parser")
        for p in SITE.rglob("*.html")
        if "_static" not in p.parts and "_sources" not in p.parts
    }


@pytest.fixture(scope="module")
def chapter(pages) -> BeautifulSoup:
    return pages[CHAPTER]


def article_text(page: BeautifulSoup) -> str:
    return page.select_one("article").get_text(" ", strip=True)


def test_every_glued_value_resolved(chapter):
    """Each {glue:text} of the notebook's prose became a non-empty pasted value on the page."""
    cells = json.loads((ROOT / "book" / f"{CHAPTER}.ipynb").read_text())["cells"]
    prose = "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "markdown")
    pasted = [span.get_text(strip=True) for span in chapter.select("article span.pasted-text")]
    assert len(pasted) == prose.count("{glue:text}") and all(pasted), pasted
    text = article_text(chapter)
    assert "??" not in text and "{glue" not in text
    assert not chapter.select(".problematic, .system-message")
    card = chapter.select_one(".header-card").get_text(" ", strip=True)
    assert re.search(r"Hands-on \d+ min, measured on (CPU|.*GPU|NVIDIA)", card), card


def test_three_tabs_with_their_numbers(chapter):
    labels = [label.get_text(strip=True) for label in chapter.select(".sd-tab-set > label")]
    assert labels == ["1 · Into vectors", "2 · One block", "3 · Two ends"]
    panels = chapter.select(".sd-tab-set > .sd-tab-content")
    numbers = [NUMBER.findall(panel.get_text(" ")) for panel in panels]
    assert len(numbers[0]) >= 3, numbers[0]  # RoPE dot product, loss without RoPE, full model
    assert len(numbers[1]) >= 3, numbers[1]  # without attention, without residual, full model
    assert "803,712" in numbers[2] and "802,826" in numbers[2]
    for panel in panels:
        image = panel.select_one("img")
        assert image is not None and image.get("alt"), "each panel shows a zoomed figure with alt text"


def test_the_page_numbers_are_this_runs(chapter):
    """The prose quotes the executed cells: the RoPE value in the panel is the printed one."""
    printed = re.search(r"distance 2\): dot = (-?\d+\.\d{4})", article_text(chapter)).group(1)
    assert printed in chapter.select(".sd-tab-set > .sd-tab-content")[0].get_text(" ")


def test_evidence_badges(chapter):
    badges = chapter.select("a.evidence-badge")
    levels = {next(c for c in b["class"] if c.startswith("evidence-") and c != "evidence-badge") for b in badges}
    assert levels == {"evidence-established", "evidence-likely", "evidence-speculative"}
    for badge in badges:
        assert badge.get("title") and badge["href"].startswith("../evidence.html#evidence-")


def test_every_image_has_alt_text(pages):
    for name, page in pages.items():
        for image in page.select("article img"):
            assert image.get("alt", "").strip(), f"{name}: image {image.get('src')} has no alt text"


def test_predict_first_and_questions_in_dropdowns(chapter):
    titles = [d.select_one("summary").get_text(" ", strip=True) for d in chapter.select("details.sd-dropdown")]
    assert "Show what happened" in titles and titles.count("Answer") == 3
    answer = chapter.select("details.sd-dropdown")[0].get_text(" ", strip=True)
    assert "hurts" in answer and len(NUMBER.findall(answer)) >= 3


def test_seed_table_has_every_variant(chapter):
    section = chapter.select_one("section#across-three-seeds")
    rows = [tr.select("td") for tr in section.select("table tbody tr")]
    assert [r[0].get_text(strip=True) for r in rows] == [
        "full model", "no position", "no attention", "no feed-forward", "no normalization", "no residual"]
    assert all("±" in r[2].get_text() and r[3].get_text().count("/") == 2 for r in rows)
    # One number per seed: this page's run (offset 0) is the first of the seeds' entries.
    for r in rows:
        assert r[1].get_text(strip=True) == r[3].get_text(strip=True).split(" / ")[0]


def launch_urls(notebook: str) -> dict[str, str]:
    repo = CONFIG["repository"]
    owner_repo = urllib.parse.urlparse(repo["url"]).path.strip("/")
    path = f"{repo['path_to_book']}/{notebook}.ipynb"
    return {
        "colab": f"https://colab.research.google.com/github/{owner_repo}/blob/{repo['branch']}/{path}",
        "binder": f"https://mybinder.org/v2/gh/{owner_repo}/{repo['branch']}?urlpath=tree/{path}",
    }


def test_launch_buttons_open_this_notebook_on_main(chapter):
    hrefs = {a["href"] for a in chapter.select("a[href]")}
    expected = launch_urls(CHAPTER)
    assert expected == {
        "colab": "https://colab.research.google.com/github/daiyip/ml-explained/blob/main/book/part1/chapter01.ipynb",
        "binder": "https://mybinder.org/v2/gh/daiyip/ml-explained/main?urlpath=tree/book/part1/chapter01.ipynb",
    }
    assert set(expected.values()) <= hrefs
    assert (ROOT / "book" / f"{CHAPTER}.ipynb").is_file()


def test_edit_and_source_links_point_at_the_file(chapter):
    hrefs = {a["href"] for a in chapter.select("a[href]")}
    assert f"https://github.com/daiyip/ml-explained/edit/main/book/{CHAPTER}.ipynb" in hrefs
    assert f"../_sources/{CHAPTER}.ipynb" in hrefs


def test_titles_descriptions_favicon_logo_404(pages):
    for name in ("intro", CHAPTER, "evidence"):
        head = pages[name].head
        assert head.title and head.title.get_text(strip=True), name
        description = head.select_one('meta[name="description"]')
        assert description and len(description["content"]) > 40, f"{name} has no description"
        assert head.select_one('link[rel="icon"]'), f"{name} has no favicon"
        assert pages[name].select_one("img.logo__image"), f"{name} has no logo"
    assert "404" in pages


def test_no_broken_internal_links_or_anchors(pages):
    ids = {name: {tag["id"] for tag in page.select("[id]")} for name, page in pages.items()}
    broken = []
    for name, page in pages.items():
        if name == "404":  # its links are absolute to the published prefix
            continue
        for tag in page.select("a[href], img[src], link[href], script[src]"):
            url = tag.get("href") or tag.get("src")
            parts = urllib.parse.urlparse(url)
            if parts.scheme or url.startswith(("mailto:", "//")):
                continue
            target = (SITE / name).parent / urllib.parse.unquote(parts.path) if parts.path else SITE / f"{name}.html"
            if parts.path and not target.exists():
                broken.append(f"{name}: {url}")
            elif parts.fragment and target.suffix == ".html":
                key = str(target.resolve().relative_to(SITE.resolve()).with_suffix(""))
                if parts.fragment not in ids.get(key, set()):
                    broken.append(f"{name}: {url} (no such anchor)")
    assert not broken, "\n".join(broken)


def test_figure_caption_carries_one_number(chapter):
    """Sphinx's own "Fig. 1" must not precede the chapter's "Figure 1.1"."""
    caption = chapter.select_one("figure#fig-two-models figcaption").get_text(" ", strip=True)
    assert caption.startswith("Figure 1.1.") and "Fig." not in caption, caption
    assert "Fig. " not in article_text(chapter)


def test_parameter_shares_are_computed_within_the_blocks(chapter):
    """The shares the prose quotes "inside the blocks" use the blocks' parameters as the denominator."""
    import mlexp.transformer

    model = mlexp.transformer.TransformerLM(65, dim=128, n_layers=4, n_heads=4)
    blocks = {n: p.numel() for n, p in model.named_parameters() if n.startswith("blocks.")}
    in_blocks = sum(blocks.values())
    ffn = sum(v for n, v in blocks.items() if ".ffn." in n) / in_blocks
    attention = sum(v for n, v in blocks.items() if ".attn." in n) / in_blocks
    sentence = re.search(r"Of the ([\d,]+) parameters inside the blocks, the feed-forward layers hold "
                         r"([\d.]+)% and attention ([\d.]+)%", article_text(chapter))
    assert sentence, "the sentence on the parameter shares is gone"
    assert sentence.group(1) == f"{in_blocks:,}"
    assert sentence.group(2) == f"{ffn:.1%}"[:-1] and sentence.group(3) == f"{attention:.1%}"[:-1]


def test_vit_is_dated_the_same_way_everywhere(chapter):
    """arXiv 2020, ICLR 2021: the evolution table says both, the citations say 2021."""
    row = next(tr for tr in chapter.select("table tr") if "Vision Transformer" in tr.get_text())
    assert "arXiv 2020" in row.get_text() and "ICLR 2021" in row.get_text()
    text = article_text(chapter)
    assert "Dosovitskiy et al., 2020" not in text and "Dosovitskiy et al., 2021" in text


DOUBLED_AUTHOR = re.compile(r"\b([A-Z][\w-]+)(?: et al\.| and [A-Z][\w-]+)?\s*[\[(]\s*\1\b")


@pytest.mark.parametrize("name", ["intro", CHAPTER])
def test_no_citation_names_its_authors_twice(pages, name):
    """"Haviv et al. [Haviv et al., 2022]": a sentence that names the authors uses {cite:t}."""
    doubled = [m.group(0) for m in DOUBLED_AUTHOR.finditer(article_text(pages[name]))]
    assert not doubled, doubled


def test_the_seed_section_says_where_its_numbers_were_made(chapter):
    section = chapter.select_one("section#across-three-seeds").get_text(" ", strip=True)
    assert "The stored runs were made on" in section or "no seed runs of its kind" in section
    assert "this page was built on" in section.lower()
