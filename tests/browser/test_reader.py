"""What a reader sees: the built intro and Chapter 1 pages, opened in Chromium.

The source-level tests check what the book says; these check that it reaches the reader:
tabs and dropdowns open, glued numbers show, images load and stay legible in the dark
theme, the page fits a phone, axe-core finds no serious accessibility problem, and the
page stays light. Run them after a build (see conftest.py for the set-up):

    MLEXP_SITE=_build/html python -m pytest tests/browser -q

Screenshots and page-weight.txt land in tests/browser/artifacts/ ($MLEXP_ARTIFACTS).
"""

from __future__ import annotations

import collections
import gzip
import json
import pathlib
import re

import pytest
import yaml

ROOT = pathlib.Path(__file__).resolve().parents[2]

INTRO = "intro.html"
# Every chapter of the table of contents; a test that takes `chapter` runs on each.
CHAPTERS = [
    f"{c['file']}.html"
    for part in yaml.safe_load((ROOT / "_toc.yml").read_text())["parts"]
    for c in part["chapters"]
    if (ROOT / "book" / f"{c['file']}.ipynb").is_file()
]
# The generated page of every claim the chapters check (book/_ext/evidence_summary.py).
EVIDENCE_PAGE = "evidence-at-a-glance.html"
DROPDOWNS = ["Show what happened", "Answer", "Answer", "Answer"]
EVIDENCE_LEVELS = ["established", "likely", "speculative"]

# What a glued value looks like when it did not resolve.
UNRESOLVED = ["??", "No key", "{glue", "glue:text", "glue:md"]
# Elements allowed to be wider than a phone screen: they scroll inside themselves.
SCROLLS_ITSELF = ", ".join([
    "pre", ".highlight", "table", ".table-wrapper", ".pst-scrollable-table-container",
    ".cell_output", ".output", ".MathJax", "mjx-container",
])
PAGE_WEIGHT_LIMIT = 3_000_000  # bytes on the wire (gzip), see test_page_weight
WCAG_AA_TEXT = 4.5


# ---------------------------------------------------------------- helpers


def open_page(page, path):
    """Go to a page and wait until a reader would see it finished: load, fonts, MathJax."""
    page.goto(path, wait_until="load")
    page.evaluate(
        """async () => {
            await document.fonts.ready;
            if (window.MathJax && MathJax.startup && MathJax.startup.promise) await MathJax.startup.promise;
        }"""
    )


def switch_to_dark(page):
    """Click the header's theme button (light -> dark -> auto) until the dark theme is on."""
    button = page.locator("button.theme-switch-button").first
    for _ in range(3):
        if page.locator('html[data-theme="dark"]').count():
            break
        button.click()
    assert page.locator('html[data-theme="dark"]').count(), "the theme button never turned on the dark theme"


def tab_label(page, title):
    return page.locator(".sd-tab-set label.sd-tab-label", has_text=title)


def show_tab(page, title):
    """Click a tab and wait out the labels' colour transition (sphinx-design's is 250 ms), so
    that a check of colours, such as axe's contrast rule, sees the settled ones: a label caught
    mid-way from the active colour to the inactive one failed the contrast check at random."""
    tab_label(page, title).click()
    page.wait_for_function(SETTLED)


# No CSS transition of the page still running.
SETTLED = "() => document.getAnimations().every(a => !(a instanceof CSSTransition) || a.playState !== 'running')"


def tab_panel(page, title):
    """The panel a tab label controls (sphinx-design links them with aria-controls)."""
    panel_id = tab_label(page, title).get_attribute("aria-controls")
    return page.locator(f"#{panel_id}")


@pytest.fixture(params=CHAPTERS)
def chapter(request) -> str:
    return request.param


def stem(page_path: str) -> str:
    """A file-name prefix for a page's screenshots: part1/chapter01.html -> chapter01."""
    return page_path.rsplit("/", 1)[-1].removesuffix(".html")


def chapter_markdown(chapter: str) -> str:
    source = ROOT / "book" / chapter.replace(".html", ".ipynb")
    cells = json.loads(source.read_text(encoding="utf-8"))["cells"]
    return "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "markdown")


def tabs_of(chapter: str) -> list[str]:
    """The labels of the chapter's three tabs, as its source writes them."""
    return re.findall(r"\{tab-item\} (.+)", chapter_markdown(chapter))


def glue_roles_per_tab(chapter: str, role: str = "glue:text") -> dict[str, int]:
    """How many values of a glue role each tab's source holds, so a lost one is noticed."""
    text = chapter_markdown(chapter)
    counts = {}
    for title in tabs_of(chapter):
        start = text.index(f"{{tab-item}} {title}")
        end = text.find("{tab-item}", start + 1)
        end = text.find("::::", start) if end == -1 else end
        counts[title] = text[start:end].count(f"{{{role}}}")
    return counts


def load_all_images(page) -> list[dict]:
    """Scroll every <img> into view (they may lazy-load), wait for it, report what loaded."""
    return page.evaluate(
        """async () => {
            const imgs = [...document.images];
            for (const img of imgs) {
                img.scrollIntoView({block: 'center'});
                await new Promise(r => requestAnimationFrame(r));
            }
            await Promise.all(imgs.map(img => img.complete ? null : new Promise(r => {
                img.addEventListener('load', r, {once: true});
                img.addEventListener('error', r, {once: true});
                setTimeout(r, 5000);
            })));
            window.scrollTo(0, 0);
            return imgs.map(img => ({
                src: img.getAttribute('src'), alt: img.getAttribute('alt'),
                naturalWidth: img.naturalWidth, complete: img.complete,
            }));
        }"""
    )


# In-page helpers: colour maths (a canvas turns any CSS colour, oklch or color() included,
# into RGBA) and describe(el) for readable failure messages.
HELPERS_JS = r"""
const _ctx = document.createElement('canvas').getContext('2d', {willReadFrequently: true});
function rgba(css) {
    _ctx.clearRect(0, 0, 1, 1);
    _ctx.fillStyle = 'rgba(0,0,0,0)';
    _ctx.fillStyle = css;
    _ctx.fillRect(0, 0, 1, 1);
    const d = _ctx.getImageData(0, 0, 1, 1).data;
    return [d[0], d[1], d[2], d[3] / 255];
}
function over(top, bottom) {          // alpha-composite top onto an opaque bottom
    const a = top[3];
    return [0, 1, 2].map(i => top[i] * a + bottom[i] * (1 - a)).concat(1);
}
function luminance(c) {               // WCAG relative luminance
    const lin = c.slice(0, 3).map(v => { v /= 255; return v <= 0.03928 ? v / 12.92 : ((v + 0.055) / 1.055) ** 2.4; });
    return 0.2126 * lin[0] + 0.7152 * lin[1] + 0.0722 * lin[2];
}
function contrast(a, b) {
    const [hi, lo] = [luminance(a), luminance(b)].sort((x, y) => y - x);
    return (hi + 0.05) / (lo + 0.05);
}
function backgroundBehind(el) {       // walk up until the layers add up to an opaque colour
    const layers = [];
    for (let e = el; e; e = e.parentElement) {
        const c = rgba(getComputedStyle(e).backgroundColor);
        if (c[3] > 0) layers.push(c);
        if (c[3] >= 1) break;
    }
    let result = [255, 255, 255, 1];  // the canvas behind <html> is white
    for (const layer of layers.reverse()) result = over(layer, result);
    return result;
}
function filtered(c, filter) {        // apply the brightness/contrast/invert of a CSS filter
    let [r, g, b] = c.slice(0, 3).map(v => v / 255);
    for (const [, fn, arg] of (filter || '').matchAll(/(brightness|contrast|invert)\(([\d.]+%?)\)/g)) {
        const x = arg.endsWith('%') ? parseFloat(arg) / 100 : parseFloat(arg);
        const f = {brightness: v => v * x, contrast: v => (v - 0.5) * x + 0.5, invert: v => v + (1 - 2 * v) * x}[fn];
        [r, g, b] = [r, g, b].map(v => Math.min(1, Math.max(0, f(v))));
    }
    return [r * 255, g * 255, b * 255, c[3]];
}
function describe(el) {
    const id = el.id ? '#' + el.id : '';
    const cls = el.classList.length ? '.' + [...el.classList].slice(0, 2).join('.') : '';
    return el.tagName.toLowerCase() + id + cls;
}
"""


def open_every_fold(page):
    """Open every dropdown and folded cell, and wait until anything they animate has finished,
    so that what is checked is what a reader sees once it is open (not a fade half-way)."""
    page.evaluate(
        """async () => {
            document.querySelectorAll('details').forEach(d => d.open = true);
            await Promise.all(document.getAnimations().map(a => a.finished));
        }"""
    )


def with_helpers(body: str) -> str:
    """A page function whose body can use the HELPERS_JS functions."""
    return "() => {" + HELPERS_JS + body + "}"


def run_axe(page, axe_source, selector="document") -> list[dict]:
    """Inject axe-core into the page and return its violations, trimmed for a readable report."""
    if not page.evaluate("() => typeof window.axe !== 'undefined'"):
        page.add_script_tag(content=axe_source)
    return page.evaluate(
        """async (selector) => {
            const context = selector === 'document' ? document : document.querySelector(selector);
            const result = await axe.run(context, {resultTypes: ['violations']});
            return result.violations.map(v => ({
                id: v.id, impact: v.impact, help: v.help, helpUrl: v.helpUrl, count: v.nodes.length,
                targets: v.nodes.slice(0, 4).map(n => n.target.join(' ')),
                html: v.nodes.slice(0, 2).map(n => n.html.slice(0, 200)),
                summary: (v.nodes[0] && v.nodes[0].failureSummary || '').slice(0, 300),
            }));
        }""",
        selector,
    )


def format_violations(violations) -> str:
    return "\n".join(
        f"- {v['id']} ({v['impact']}, {v['count']} nodes{', tab ' + v['tab'] if 'tab' in v else ''}): "
        f"{v['help']} <{v['helpUrl']}>\n"
        f"    targets: {v['targets']}\n    html: {v['html']}\n    {v['summary']}"
        for v in violations
    )


def save_shot(target, artifacts, name, **options):
    """Screenshot a page or an element into the artifact folder."""
    target.screenshot(path=str(artifacts / name), animations="disabled", **options)


# ---------------------------------------------------------------- 1. tabs


def test_each_tab_shows_its_panel_with_glued_numbers(chapter, page, artifacts):
    """The three tabs under Figure 1.1 are how a reader reaches the per-part explanations;
    each must switch, show only its own panel, and carry its measured numbers."""
    open_page(page, chapter)
    expected_glue = glue_roles_per_tab(chapter)
    # a value glued as markdown ({glue:md}, words and number together) renders without a
    # wrapper of its own, so it counts for the source but is found only by its lack of markers
    expected_md = glue_roles_per_tab(chapter, "glue:md")
    for title in tabs_of(chapter):
        tab_label(page, title).click()
        panel = tab_panel(page, title)
        assert panel.is_visible(), f"tab {title!r}: its panel stays hidden after a click"
        for other in tabs_of(chapter):
            if other != title:
                assert not tab_panel(page, other).is_visible(), f"tab {title!r}: panel of {other!r} still shows"

        text = panel.inner_text()
        assert expected_glue[title] + expected_md[title], f"tab {title!r}: its source glues no measured value"
        for marker in UNRESOLVED:
            assert marker not in text, f"tab {title!r}: unresolved glue ({marker!r}) in:\n{text}"
        assert panel.locator(".problematic, .system-message").count() == 0, f"tab {title!r}: a build error is rendered"
        values = panel.locator(".pasted-text").all_inner_texts()
        assert len(values) == expected_glue[title], (
            f"tab {title!r}: {len(values)} glued values shown, the source has {expected_glue[title]}: {values}"
        )
        for value in values:
            assert re.fullmatch(r"[-+]?[\d,]+(\.\d+)?([eE][-+]?\d+)?%?", value.strip()), f"tab {title!r}: glued {value!r} is no number"

        image = panel.locator("img").first
        assert image.is_visible(), f"tab {title!r}: its figure is not visible"
        assert image.evaluate("img => img.complete && img.naturalWidth > 0"), f"tab {title!r}: its figure did not load"
        save_shot(page.locator(".sd-tab-set").first, artifacts, f"{stem(chapter)}-tab-{tabs_of(chapter).index(title) + 1}.png")


def test_no_empty_glued_values_or_paragraphs(chapter, page):
    """A glue key missing at build time renders as nothing at all: an empty value, or an
    empty paragraph where a {glue:md} line stood. (tests/test_site.py counts the roles.)"""
    open_page(page, chapter)
    empty_values = page.evaluate(
        """() => [...document.querySelectorAll('article .pasted-text')]
                .filter(v => !v.textContent.trim()).map(v => (v.closest('section[id]') || {}).id || '?')"""
    )
    empty_paragraphs = page.evaluate(
        """() => [...document.querySelectorAll('article p')]
                .filter(p => !p.textContent.trim() && !p.querySelector('img, svg, math, mjx-container'))
                .map(p => (p.closest('section[id]') || {}).id || '?')"""
    )
    assert not empty_values, f"empty glued values in sections {empty_values}"
    assert not empty_paragraphs, f"empty paragraphs (an unresolved {{glue:md}}?) in sections {empty_paragraphs}"


# ---------------------------------------------------------------- header card


def header_card_rows(page) -> list[int]:
    """How many items the chapter's header card puts on each visual row."""
    tops = page.locator(".header-card .header-card-item").evaluate_all(
        "items => items.map(i => Math.round(i.getBoundingClientRect().top))"
    )
    return [tops.count(t) for t in sorted(set(tops))]


def test_header_card_lays_out_in_a_row(chapter, page):
    """The card under the title (level, reading time, hands-on time, prerequisites) is one row
    of four on a desktop; squeezed into one column it becomes a tall strip of single words."""
    open_page(page, chapter)
    assert header_card_rows(page) == [4], f"header card rows on a desktop: {header_card_rows(page)}"


# ---------------------------------------------------------------- 2. dropdowns


def test_dropdowns_open_on_click(chapter, page):
    """'Show what happened' and the three answers (and any other dropdown) must start closed,
    so the reader predicts before seeing the result, and open on a click."""
    open_page(page, chapter)
    dropdowns = page.locator("article details.sd-dropdown")
    titles = [t.strip() for t in dropdowns.locator("summary").all_inner_texts()]
    missing = collections.Counter(DROPDOWNS) - collections.Counter(titles)
    assert not missing, f"dropdowns missing from the page: {dict(missing)} (found {titles})"
    for i in range(dropdowns.count()):
        details = dropdowns.nth(i)
        content = details.locator(".sd-summary-content")
        assert not details.evaluate("d => d.open"), f"dropdown {i} ({titles[i]!r}) starts open"
        assert not content.is_visible(), f"dropdown {i} ({titles[i]!r}) shows its content while closed"
        details.locator("summary").click()
        assert details.evaluate("d => d.open"), f"dropdown {i} ({titles[i]!r}) did not open on click"
        assert content.is_visible(), f"dropdown {i} ({titles[i]!r}) opened but its content is hidden"
        assert content.inner_text().strip(), f"dropdown {i} ({titles[i]!r}) is empty"


def test_folded_code_opens_without_motion_when_the_reader_asks(chapter, page):
    """The browser context asks for reduced motion; a folded cell (a figure's drawing code)
    then opens at once, with its code at full contrast, instead of fading in."""
    open_page(page, chapter)
    folds = page.locator("article div.cell details.hide")
    assert folds.count(), "the chapter has no folded code cell (hide-input)"
    fold = folds.first
    fold.locator("summary").click()
    running = fold.evaluate(
        "d => [...d.querySelectorAll('*')].flatMap(e => e.getAnimations()).length")
    assert running == 0, f"{running} animations run when a folded cell opens under reduced motion"
    opacities = fold.evaluate(
        "d => [...d.querySelectorAll(':scope > summary ~ *')].map(e => getComputedStyle(e).opacity)")
    assert opacities and all(float(o) == 1.0 for o in opacities), f"folded code opened at opacity {opacities}"


# ---------------------------------------------------------------- 3. images, requests, console


@pytest.mark.parametrize("path", [INTRO, *CHAPTERS, EVIDENCE_PAGE])
def test_page_loads_cleanly(page, page_log, artifacts, path):
    """Every image loads and has alt text; no request fails; the console stays free of errors."""
    open_page(page, path)
    images = load_all_images(page)
    page.wait_for_load_state("networkidle")
    if path in CHAPTERS:
        save_shot(page, artifacts, f"{stem(path)}-light-full.png", full_page=True)

    broken = [img["src"] for img in images if not img["naturalWidth"]]
    no_alt = [img["src"] for img in images if not (img["alt"] or "").strip()]
    problems = []
    if broken:
        problems.append(f"images that did not load: {broken}")
    if no_alt:
        problems.append(f"images without alt text: {no_alt}")
    if page_log.failed_requests:
        problems.append(f"failed requests: {page_log.failed_requests}")
    if page_log.blocked_external:
        problems.append(f"off-site requests (the site must carry what it needs): {page_log.blocked_external}")
    if page_log.console_errors:
        problems.append(f"console errors: {page_log.console_errors}")
    if page_log.page_errors:
        problems.append(f"uncaught page errors: {page_log.page_errors}")
    assert not problems, f"{path}:\n" + "\n".join(problems)
    assert images, f"{path}: no images at all?"


def test_output_images_have_descriptive_alt(chapter, page):
    """myst-nb falls back to the image's file path as alt text for plots a cell draws; a
    screen reader then reads out a hash. Set the text in the cell's metadata instead:
    {"mystnb": {"image": {"alt": "..."}}}."""
    open_page(page, chapter)
    images = page.evaluate("() => [...document.images].map(i => [i.getAttribute('src'), i.getAttribute('alt') || ''])")
    path_as_alt = [src for src, alt in images if alt.strip() == src or alt.endswith((".svg", ".png"))]
    assert not path_as_alt, f"images whose alt text is just their file path: {path_as_alt}"


# ---------------------------------------------------------------- 4. evidence badges


def test_evidence_badges_explain_and_link_to_the_legend(chapter, page):
    """Badges rate how well each claim is supported; a reader must see them, get the meaning
    on hover, and land on the matching legend entry on click."""
    open_page(page, chapter)
    badges = page.locator("a.evidence-badge")
    assert badges.count(), "no evidence badges on the chapter page"
    for badge in badges.all():
        assert (badge.get_attribute("title") or "").strip(), f"badge {badge.inner_text()!r} has no tooltip"
    for level in EVIDENCE_LEVELS:
        visible = [b for b in page.locator(f"a.evidence-badge.evidence-{level}").all() if b.is_visible()]
        assert visible, f"no visible {level!r} badge on the chapter page"

    for level in EVIDENCE_LEVELS:
        open_page(page, chapter)
        badge = next(b for b in page.locator(f"a.evidence-badge.evidence-{level}").all() if b.is_visible())
        badge.click()
        page.wait_for_url(f"**/evidence.html#evidence-{level}")
        anchor = page.locator(f"#evidence-{level}")
        assert anchor.count() == 1, f"legend page has no #evidence-{level}"
        # The anchor is an empty <span> before the entry's heading; the heading must be on screen.
        on_screen = anchor.evaluate(
            """el => { const entry = el.nextElementSibling || el;
                       const r = entry.getBoundingClientRect();
                       return r.height > 0 && r.top >= 0 && r.top < innerHeight; }"""
        )
        assert on_screen, f"after the click, the legend entry for {level!r} is not on screen"


# ---------------------------------------------------------------- 5. dark theme


def test_dark_theme_keeps_figures_and_text_legible(chapter, page, artifacts):
    """Figures are drawn for white paper, so in the dark theme they need a light backing;
    body text must keep WCAG AA contrast (4.5:1) against whatever it sits on."""
    open_page(page, chapter)
    switch_to_dark(page)
    load_all_images(page)
    save_shot(page, artifacts, f"{stem(chapter)}-dark-full.png", full_page=True)

    figures = page.evaluate(with_helpers("""
        return [...document.querySelectorAll('article img')].filter(img => img.getClientRects().length).map(img => {
            const own = rgba(getComputedStyle(img).backgroundColor);
            const wrapper = img.closest('figure, .cell_output, .output, .sd-tab-content');
            const filter = getComputedStyle(img).filter;  // the theme dims dark-mode images
            const bg = filtered(own[3] >= 1 ? own : backgroundBehind(wrapper || img), filter);
            return {src: img.getAttribute('src'), luminance: Math.round(luminance(bg) * 1000) / 1000,
                    bg: bg.slice(0, 3).map(Math.round), filter};
        });"""))
    assert figures, "no visible figures in the dark theme"
    dim = [f for f in figures if f["luminance"] <= 0.8]
    assert not dim, f"figures on a dark backing in the dark theme (luminance <= 0.8): {dim}"

    paragraphs = page.evaluate(with_helpers("""
        return [...document.querySelectorAll('article p')]
            .filter(p => p.getClientRects().length && p.textContent.trim())
            .map(p => {
                const ratio = contrast(rgba(getComputedStyle(p).color), backgroundBehind(p));
                return {where: describe(p.parentElement) + ' > p', text: p.textContent.trim().slice(0, 50),
                        ratio: Math.round(ratio * 100) / 100};
            });"""))
    assert len(paragraphs) > 20, f"only {len(paragraphs)} paragraphs measured"
    low = sorted((p for p in paragraphs if p["ratio"] < WCAG_AA_TEXT), key=lambda p: p["ratio"])
    assert not low, f"paragraphs under {WCAG_AA_TEXT}:1 contrast in the dark theme: {low[:5]}"


# ---------------------------------------------------------------- 6. phone


def test_phone_layout_fits_and_tabs_switch(chapter, phone_page, artifacts):
    """On a 390 px phone the page must not scroll sideways; only code, tables, outputs and
    maths may be wider than the screen, since they scroll inside themselves."""
    page = phone_page
    open_page(page, chapter)
    load_all_images(page)
    save_shot(page, artifacts, f"{stem(chapter)}-phone.png", full_page=True)

    # The phone's width, not window.innerWidth: a mobile browser widens its layout viewport,
    # and innerWidth with it, to fit content that is too wide, so innerWidth always "fits".
    screen = page.viewport_size["width"]
    widths = page.evaluate("() => [document.documentElement.scrollWidth, window.innerWidth]")
    assert max(widths) <= screen + 1, (
        f"the page scrolls sideways on a {screen} px phone: scrollWidth {widths[0]}, "
        f"layout viewport {widths[1]}")
    too_wide = page.evaluate(with_helpers("""
        const allowed = ALLOWED;
        const out = [];
        for (const el of document.querySelectorAll('.bd-header *, .bd-main *')) {
            if (el.closest(allowed)) continue;
            const r = el.getBoundingClientRect();
            if (!r.width || !r.height || getComputedStyle(el).visibility === 'hidden') continue;
            if (r.right > SCREEN + 1 || r.left < -1)
                out.push({el: describe(el), left: Math.round(r.left), right: Math.round(r.right)});
        }
        return out.slice(0, 10);""".replace("ALLOWED", json.dumps(SCROLLS_ITSELF))
        .replace("SCREEN", str(screen))))
    assert not too_wide, f"elements wider than the {screen} px screen: {too_wide}"

    assert header_card_rows(page) == [2, 2], f"header card rows on a phone: {header_card_rows(page)}"
    for title in tabs_of(chapter):
        tab_label(page, title).tap()
        assert tab_panel(page, title).is_visible(), f"on a phone, tapping {title!r} does not show its panel"


# ---------------------------------------------------------------- 7. accessibility


@pytest.mark.parametrize("theme", ["light", "dark"])
@pytest.mark.parametrize("path", [INTRO, *CHAPTERS, EVIDENCE_PAGE])
def test_axe_finds_no_serious_violations(page, axe_source, artifacts, path, theme):
    """axe-core's automated WCAG checks, with the chapter's dropdowns open and each tab shown,
    so the hidden content is audited too. Every finding is saved; serious/critical fail."""
    open_page(page, path)
    if theme == "dark":
        switch_to_dark(page)
    open_every_fold(page)
    violations = run_axe(page, axe_source)
    if path in CHAPTERS:
        for title in tabs_of(path)[1:]:
            show_tab(page, title)
            violations += [dict(v, tab=title) for v in run_axe(page, axe_source, ".sd-tab-set")]
    name = f"axe-{path.replace('/', '-').removesuffix('.html')}-{theme}.json"
    (artifacts / name).write_text(json.dumps(violations, indent=2), encoding="utf-8")
    serious = [v for v in violations if v["impact"] in ("serious", "critical")]
    assert not serious, f"axe on {path} ({theme} theme):\n{format_violations(serious)}"


def test_a_shown_tab_leaves_no_colour_transition_running(page):
    """What the contrast check relies on: after show_tab, the labels' colours have settled."""
    open_page(page, CHAPTERS[0])
    show_tab(page, tabs_of(CHAPTERS[0])[1])
    assert page.evaluate(SETTLED)


# ---------------------------------------------------------------- 8. page weight


def test_page_weight(chapter, page, artifacts, record_property):
    """Everything a first visit downloads (HTML, CSS, JS, fonts, figures, MathJax) stays
    under 3 MB on the wire. The test server sends files uncompressed, but GitHub Pages
    compresses text, so the budget applies to each body gzip-compressed (level 6);
    the uncompressed total is recorded too."""
    responses = []
    page.on("response", lambda response: responses.append(response))
    open_page(page, chapter)
    load_all_images(page)
    page.wait_for_load_state("networkidle")

    assets = []
    for response in responses:
        try:
            body = response.body()
        except Exception:  # redirects and aborted requests have no body
            continue
        # Servers leave already-compressed files (woff2, png) alone: count the smaller size.
        assets.append((response.url, len(body), min(len(body), len(gzip.compress(body, 6)))))
    total = sum(size for _, size, _ in assets)
    total_gzip = sum(size for _, _, size in assets)
    timings = page.evaluate(
        """() => performance.getEntriesByType('navigation').concat(performance.getEntriesByType('resource'))
                .map(e => [e.name, e.responseEnd - e.startTime])"""
    )
    slowest_name, slowest_ms = max(timings, key=lambda t: t[1])
    biggest = sorted(assets, key=lambda a: -a[1])[:8]

    record_property("page_weight_bytes", total)
    record_property("page_weight_gzip_bytes", total_gzip)
    record_property("slowest_asset", f"{slowest_name} {slowest_ms:.0f} ms")
    lines = [
        f"page: {chapter}",
        f"requests: {len(assets)}",
        f"total bytes on the wire, each body gzip-compressed (the budget, {PAGE_WEIGHT_LIMIT}): {total_gzip}",
        f"total bytes uncompressed, as the test server sends them: {total}",
        f"slowest asset: {slowest_name} ({slowest_ms:.0f} ms)",
        "largest assets:",
        *(f"  {size:>9}  gzip {gz:>8}  {url}" for url, size, gz in biggest),
    ]
    (artifacts / "page-weight.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    print("\n".join(lines))
    assert total_gzip < PAGE_WEIGHT_LIMIT, "\n".join(lines)


# ---------------------------------------------------------------- 9. offline maths, code width


def test_math_renders_with_the_network_blocked(chapter, page, page_log):
    """The site ships MathJax: with every off-site request blocked, the formulas still render."""
    open_page(page, chapter)
    rendered = page.locator("article mjx-container").count()
    raw = page.evaluate(
        """() => [...document.querySelectorAll('article .math')]
                   .filter(e => !e.querySelector('mjx-container'))
                   .map(e => e.textContent.slice(0, 60))"""
    )
    assert rendered >= 5 and not raw, f"{rendered} formulas rendered; left as raw TeX: {raw}"
    assert not page_log.blocked_external, f"off-site requests: {page_log.blocked_external}"
    src = page.evaluate("() => [...document.scripts].map(s => s.src).find(s => /mathjax/i.test(s))")
    assert src and src.startswith(page.url.rsplit("/", 2)[0]), f"MathJax comes from {src}"


def test_no_code_or_printed_output_scrolls_sideways(chapter, page, artifacts):
    """At 1280 px every code block of the chapter (code cells, code in the prose, and the
    text a cell printed) fits the content column: a reader never scrolls to see a number.
    (Printed lines wrap in the theme; test_site holds them to 80 characters.)"""
    open_page(page, chapter)
    assert page.locator("article div.cell_output pre").count() >= 5
    wide = page.evaluate(
        """() => [...document.querySelectorAll('article div.cell_input pre, article div.highlight pre')]
                   .filter(e => e.scrollWidth > e.clientWidth + 1)
                   .map(e => [e.scrollWidth - e.clientWidth, e.textContent.split('\\n')
                              .reduce((a, b) => (b.length > a.length ? b : a), '')])"""
    )
    assert page.locator("article div.cell_input pre").count() >= 10
    assert not wide, "code blocks that scroll (pixels over, longest line):\n" + "\n".join(map(str, wide))


# ---------------------------------------------------------------- 9. the evidence at a glance


@pytest.mark.parametrize("screen", ["page", "phone_page"])
def test_evidence_page_tables_fit_and_links_resolve(request, screen, artifacts):
    """The generated page's tables fit the content column at 1280 px and on a phone (no
    table scrolls inside itself), it has a part for every chapter, and every link on it
    leads to a page and anchor that exist."""
    page = request.getfixturevalue(screen)
    open_page(page, EVIDENCE_PAGE)
    save_shot(page, artifacts, f"evidence-at-a-glance-{screen}.png", full_page=True)
    parts = page.locator("article section.evidence-chapter").count()
    assert parts == len(CHAPTERS), f"{parts} chapter parts for {len(CHAPTERS)} chapters"
    overflow = page.evaluate(
        """() => {
            const column = document.querySelector('article.bd-article').getBoundingClientRect();
            return [...document.querySelectorAll('article .evidence-summary table')].map(t => {
                const box = t.closest('.pst-scrollable-table-container') || t.parentElement;
                const r = t.getBoundingClientRect();
                return [t.className, Math.round(r.right - column.right),
                        box.scrollWidth - box.clientWidth];
            }).filter(([, over, scroll]) => over > 1 || scroll > 1);
        }"""
    )
    # a claims table for every chapter, and a table of stored runs for each that has them
    seeded = [c for c in CHAPTERS if (ROOT / "book" / c.replace(".html", ".seeds.json")).is_file()]
    assert page.locator("article .evidence-summary table").count() >= len(CHAPTERS) + len(seeded)
    assert not overflow, f"tables wider than the column (class, px over, px scrolled): {overflow}"
    broken = page.evaluate(
        """async () => {
            const out = [];
            const links = [...document.querySelectorAll('article .evidence-summary a[href]')];
            for (const a of links) {
                const url = new URL(a.href);
                if (url.origin !== location.origin) continue;
                const response = await fetch(url.href.split('#')[0]);
                if (!response.ok) { out.push([a.getAttribute('href'), response.status]); continue; }
                if (!url.hash) continue;
                const doc = new DOMParser().parseFromString(await response.text(), 'text/html');
                if (!doc.getElementById(decodeURIComponent(url.hash.slice(1))))
                    out.push([a.getAttribute('href'), 'no such anchor']);
            }
            return out;
        }"""
    )
    assert not broken, f"links on the evidence page that lead nowhere: {broken}"



@pytest.mark.parametrize("screen", ["page"])
def test_evidence_page_headings_stay_whole_words(request, screen):
    """At 1280 px the claims tables' column headings ("Evidence", "seed 1", "this build")
    never break inside a word and each stays on one line. (On a phone the table must fit the
    screen first: there a heading may wrap anywhere.)"""
    page = request.getfixturevalue(screen)
    open_page(page, EVIDENCE_PAGE)
    headings = page.evaluate(
        """() => [...document.querySelectorAll('article table.evidence-claims th')].map(th => {
            // the line boxes of the heading's text, by their top edge
            const walker = document.createTreeWalker(th, NodeFilter.SHOW_TEXT);
            const tops = new Set();
            for (let node = walker.nextNode(); node; node = walker.nextNode()) {
                const range = document.createRange();
                range.selectNodeContents(node);
                for (const r of range.getClientRects()) if (r.width > 0) tops.add(Math.round(r.top));
            }
            const words = th.textContent.trim().split(/\\s+/).length;
            return [th.textContent.trim(), tops.size, words];
        })"""
    )
    assert headings, "no claims table on the evidence page"
    broken = [(text, lines) for text, lines, words in headings if lines > words]
    assert not broken, f"headings broken inside a word (heading, lines): {broken}"
    if screen == "page":
        wrapped = [(text, lines) for text, lines, _ in headings if lines > 1]
        assert not wrapped, f"headings wrapped at 1280 px (heading, lines): {wrapped}"
