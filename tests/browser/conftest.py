"""Fixtures for the reader-facing browser tests.

The tests open the built site the way a reader does: served over HTTP from 127.0.0.1,
in a real Chromium driven by Playwright's sync API. Everything they need is local:

* the site comes from $MLEXP_SITE (default: <repo>/_build/html);
* the browser is $CHROMIUM, or chromium / google-chrome found on PATH;
* axe-core comes from npm (tests/browser/package.json, installed with `npm ci`).

The site must work offline: it ships MathJax and everything else it needs. Every request
that leaves the local server is blocked and recorded, and the tests fail on any, so a new
external dependency shows up as a failure instead of a page that breaks without network.
"""

from __future__ import annotations

import dataclasses
import functools
import http.server
import mimetypes
import os
import pathlib
import re
import shutil
import subprocess
import threading

import pytest

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parents[1]
BUILD_COMMAND = 'jupyter-book build book/ -W --keep-going'
NODE_MODULES = HERE / "node_modules"
AXE_JS = NODE_MODULES / "axe-core" / "axe.min.js"

# Headless flags: no sandbox (containers), no GPU, and no background traffic that could
# show up as stray requests or slow the run.
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-quic",
]
BROWSER_NAMES = ["chromium", "chromium-browser", "google-chrome", "google-chrome-stable"]

DESKTOP = {"width": 1280, "height": 900}
PHONE = {"width": 390, "height": 844}

def pytest_configure(config):
    config.addinivalue_line("markers", "browser: drives Chromium over the built site (tests/browser)")


def pytest_collection_modifyitems(items):
    for item in items:
        if HERE in pathlib.Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.browser)


# ---------------------------------------------------------------- the site and artifacts


@pytest.fixture(scope="session")
def site_dir() -> pathlib.Path:
    """The built HTML. A missing build is a failure: a skipped suite would pass CI silently."""
    site = pathlib.Path(os.environ.get("MLEXP_SITE") or ROOT / "_build" / "html").resolve()
    if not (site / "part1" / "chapter01.html").is_file():
        pytest.fail(
            f"no built site at {site} (part1/chapter01.html missing): build the site first: "
            f"cd {ROOT} && {BUILD_COMMAND}  (or point MLEXP_SITE at a built _build/html)",
            pytrace=False,
        )
    return site


@pytest.fixture(scope="session")
def artifacts() -> pathlib.Path:
    """Where screenshots and page-weight.txt go ($MLEXP_ARTIFACTS overrides)."""
    folder = pathlib.Path(os.environ.get("MLEXP_ARTIFACTS") or HERE / "artifacts")
    folder.mkdir(parents=True, exist_ok=True)
    return folder


@pytest.fixture(scope="session")
def node_modules() -> pathlib.Path:
    """axe-core from npm, installed from the committed lock file when missing."""
    needed = [AXE_JS]
    if not all(p.is_file() for p in needed):
        npm = shutil.which("npm")
        if npm is None:
            pytest.fail("npm not found: install Node.js (it runs `npm ci --prefix tests/browser`)", pytrace=False)
        run = subprocess.run(
            [npm, "ci", "--prefix", str(HERE), "--no-audit", "--no-fund"],
            capture_output=True, text=True, timeout=300,
        )
        if run.returncode != 0 or not all(p.is_file() for p in needed):
            pytest.fail(f"`npm ci --prefix tests/browser` failed:\n{run.stdout}\n{run.stderr}", pytrace=False)
    return NODE_MODULES


@pytest.fixture(scope="session")
def axe_source(node_modules) -> str:
    return AXE_JS.read_text(encoding="utf-8")


# ---------------------------------------------------------------- HTTP server


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format, *args):  # noqa: A002 - the base class's name
        pass


@pytest.fixture(scope="session")
def base_url(site_dir) -> str:
    """The site served from 127.0.0.1 on a free port, as GitHub Pages would serve the files."""
    handler = functools.partial(_QuietHandler, directory=str(site_dir))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, name="site-server", daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/"
    server.shutdown()
    server.server_close()


# ---------------------------------------------------------------- browser


def _find_browser() -> str:
    wanted = os.environ.get("CHROMIUM")
    if wanted:
        path = shutil.which(wanted) or (wanted if os.access(wanted, os.X_OK) else None)
        if not path:
            pytest.fail(f"CHROMIUM={wanted!r} is not an executable browser", pytrace=False)
        return path
    for name in BROWSER_NAMES:
        path = shutil.which(name)
        if path:
            return path
    pytest.fail(
        "no Chromium found: install it (Debian/Ubuntu: `apt-get install -y chromium`) "
        "or set CHROMIUM to a Chrome/Chromium executable. "
        "Do not use `playwright install`; the tests drive the system browser.",
        pytrace=False,
    )


@pytest.fixture(scope="session")
def browser():
    """One headless Chromium for the whole session; each test gets a fresh context."""
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.fail("the browser tests need Playwright: pip install playwright", pytrace=False)
    executable = _find_browser()
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=executable, args=CHROMIUM_ARGS, headless=True)
        yield browser
        browser.close()


@dataclasses.dataclass
class PageLog:
    """What went wrong while a page was open: the evidence for test_no_errors."""

    base_url: str
    console_errors: list = dataclasses.field(default_factory=list)
    page_errors: list = dataclasses.field(default_factory=list)
    failed_requests: list = dataclasses.field(default_factory=list)
    blocked_external: list = dataclasses.field(default_factory=list)

    def attach(self, page):
        page.on("console", self._on_console)
        page.on("pageerror", lambda err: self.page_errors.append(f"{page.url}: {err}"))
        page.on("requestfailed", lambda req: self.failed_requests.append(f"{req.url} ({req.failure})"))
        page.on("response", self._on_response)

    def _on_console(self, msg):
        if msg.type == "error":
            where = msg.location.get("url", "") if msg.location else ""
            self.console_errors.append(f"{msg.text}  [{where}]")

    def _on_response(self, response):
        if response.status >= 400 and response.url.startswith(self.base_url):
            self.failed_requests.append(f"{response.url} (HTTP {response.status})")


def _block_off_site(route, log: PageLog):
    log.blocked_external.append(route.request.url)
    route.abort("blockedbyclient")


def make_context(browser, base_url, log: PageLog | None = None, **options):
    """A fresh browser context on the served site: own storage, light scheme unless told."""
    options = {"viewport": DESKTOP, "color_scheme": "light", "reduced_motion": "reduce", **options}
    context = browser.new_context(base_url=base_url, **options)
    context.set_default_timeout(15_000)
    log = log or PageLog(base_url)
    context.route(lambda url: not url.startswith(base_url), lambda route: _block_off_site(route, log))
    return context, log


@pytest.fixture
def page_log(base_url) -> PageLog:
    return PageLog(base_url)


@pytest.fixture
def context(browser, base_url, node_modules, page_log):
    context, _ = make_context(browser, base_url, page_log)
    yield context
    context.close()


@pytest.fixture
def page(context, page_log):
    """A desktop-sized page (1280x900, light scheme) that records errors in page_log."""
    page = context.new_page()
    page_log.attach(page)
    return page


@pytest.fixture
def phone_page(browser, base_url, node_modules, page_log):
    """A 390x844 touch screen, like a mid-size phone."""
    context, _ = make_context(
        browser, base_url, page_log,
        viewport=PHONE, device_scale_factor=2, is_mobile=True, has_touch=True,
    )
    page = context.new_page()
    page_log.attach(page)
    yield page
    context.close()
