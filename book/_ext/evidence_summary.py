"""The evidence at a glance: a page generated from the chapters' seed data and this build.

Two pieces of markup:

- ``{claim}`sentence``` in a chapter's prose marks where the chapter makes one of the claims
  its seed section checks (the sentence is the claim's key in the chapter's ``claims``). It
  renders as an invisible anchor; the page links to it and reads the evidence tag the prose
  gives the claim from the first ``{evidence}`` badge after it in the same paragraph (or the
  last one before it).
- The ``evidence-summary`` directive, on the page itself, stands for the whole summary.

Sphinx reads (and myst-nb executes) every document before it writes any, so the directive
only leaves a placeholder, and the content is built in ``doctree-resolved`` from every
chapter of the table of contents that recorded a seed section: its ``<chapter>.seeds.json``
and what its build glued (myst-nb's ``<chapter>.glue.json`` in ``_build/jupyter_execute``,
which stays there when the chapter comes from the execution cache or is not read again).
``mlexp.evidence.evidencepage`` turns that data into claims, runs and a verdict with the rule the
chapter's own seed section applies (``mlexp.evidence.seedtable.assess``). The page is read again on
every build, so it always reports the latest runs. At read time the directive registers one
label per chapter, ``evidence-<docname with dashes>``, so that a chapter links to its part of
the page with ``{ref}``.

Each chapter's part also says where the run its page shows came from: made by this build, by
an earlier build (the execution cache), or taken from the book's execution
record, and on which machine and when (``book/_ext/execution_fingerprint.py`` finds it).

A claim that a run contradicts fails the chapter's own build already; the page also logs it
as a warning, which ``-W`` turns into a failed build.
"""

from __future__ import annotations

import datetime
import json
import pathlib
import sys
from typing import Any

from docutils import nodes
from sphinx.application import Sphinx
from sphinx.errors import NoUri
from sphinx.util import logging
from sphinx.util.docutils import SphinxDirective, SphinxRole

logger = logging.getLogger(__name__)
ROOT = pathlib.Path(__file__).resolve().parents[2]


class claim_marker(nodes.Inline, nodes.TextElement):  # noqa: N801 (docutils naming)
    """Where a chapter makes a checked claim: an anchor with no text."""


class evidence_summary(nodes.General, nodes.Element):  # noqa: N801
    """Placeholder for the book's top line, filled in ``doctree-resolved``."""


class evidence_chapter(nodes.General, nodes.Element):  # noqa: N801
    """Placeholder for one chapter's part of the page, filled in ``doctree-resolved``."""


def claim_anchor(sentence: str) -> str:
    return "claim-" + nodes.make_id(sentence)


def chapter_label(docname: str) -> str:
    """The label of a chapter's part of the page: ``evidence-part1-chapter01``."""
    return "evidence-" + docname.replace("/", "-")


class ClaimRole(SphinxRole):
    def run(self) -> tuple[list[nodes.Node], list[nodes.system_message]]:
        sentence = " ".join(self.text.split())
        node = claim_marker("", "", claim=sentence, ids=[claim_anchor(sentence)],
                            classes=["checked-claim"])
        self.set_source_info(node)
        return [node], []


def visit_claim_html(self, node: claim_marker) -> None:
    self.body.append(self.starttag(node, "span", ""))
    self.body.append("</span>")
    raise nodes.SkipNode


def skip_node(self, node) -> None:
    raise nodes.SkipNode


def toc_docnames(app: Sphinx) -> list[str]:
    """The documents of the table of contents, in reading order."""
    site_map = getattr(app.env, "external_site_map", None) or getattr(
        app.config, "external_site_map", None)
    if site_map is None:
        return sorted(app.env.found_docs)
    order: list[str] = []

    def visit(docname: str) -> None:
        if docname in order or docname not in site_map:
            return
        order.append(docname)
        for subtree in site_map[docname].subtrees:
            for name in subtree.files():
                visit(name)

    visit(site_map.root.docname)
    return order


def seeds_file(source: pathlib.Path) -> pathlib.Path:
    return source.with_name(source.stem + ".seeds.json")


def notebook_title(source: pathlib.Path) -> str:
    """The chapter's title as its first heading writes it (the page's sidebar is built when the
    page is read, before the chapter may have been)."""
    cells = json.loads(source.read_text(encoding="utf-8"))["cells"]
    for cell in cells:
        if cell["cell_type"] == "markdown":
            for line in "".join(cell["source"]).splitlines():
                if line.startswith("# "):
                    return line[2:].strip()
    return source.stem


def has_seed_section(source: pathlib.Path) -> bool:
    """A chapter whose evidence the page reports: stored runs, or a seed section in its code."""
    if source.suffix != ".ipynb":
        return False
    if seeds_file(source).is_file():
        return True
    cells = json.loads(source.read_text(encoding="utf-8"))["cells"]
    return any("seed_section(" in "".join(c["source"]) for c in cells if c["cell_type"] == "code")


class EvidenceSummary(SphinxDirective):
    def run(self) -> list[nodes.Node]:
        env = self.env
        if not hasattr(env, "evidence_summary_docs"):
            env.evidence_summary_docs = set()
        env.evidence_summary_docs.add(env.docname)
        std = env.get_domain("std")
        # One section per chapter now, so that the page's sidebar lists them and a chapter can
        # link to its part; what goes inside is known only once every chapter has run.
        out: list[nodes.Node] = [evidence_summary("", classes=["evidence-summary"])]
        for docname in toc_docnames(env.app):
            source = pathlib.Path(env.doc2path(docname))
            if docname == env.docname or not has_seed_section(source):
                continue
            label = chapter_label(docname)
            title = notebook_title(source)
            std.anonlabels[label] = (env.docname, label)
            std.labels[label] = (env.docname, label, title)
            section = nodes.section(ids=[label], classes=["evidence-summary", "evidence-chapter"])
            section += nodes.title(title, title)
            section += evidence_chapter("", docname=docname)
            out.append(section)
        return out


def collect_markers(app: Sphinx, doctree: nodes.document) -> None:
    """Each claim marker's anchor and the evidence level its paragraph gives it."""
    from evidence import evidence_badge  # the book's badge extension, beside this one

    env = app.env
    if not hasattr(env, "evidence_claim_markers"):
        env.evidence_claim_markers = {}
    found: dict[str, dict[str, Any]] = {}
    for marker in doctree.findall(claim_marker):
        block = marker.parent
        while block is not None and not isinstance(block, nodes.paragraph):
            block = block.parent
        sequence = list((block or marker).findall(
            lambda n: isinstance(n, (claim_marker, evidence_badge))))
        at = sequence.index(marker)
        after = [n for n in sequence[at + 1:] if isinstance(n, evidence_badge)]
        before = [n for n in sequence[:at] if isinstance(n, evidence_badge)]
        badge = after[0] if after else (before[-1] if before else None)
        sentence = marker["claim"]
        if sentence in found:
            logger.warning("the claim %r is marked twice", sentence, location=marker,
                           type="evidence", subtype="claim")
        found[sentence] = {"anchor": marker["ids"][0], "tag": badge["level"] if badge else None}
    # the section that links to the evidence page: the chapter's seed section
    for xref in doctree.findall(nodes.Element):
        if xref.get("reftarget") == chapter_label(env.docname):
            section = xref.parent
            while section is not None and not isinstance(section, nodes.section):
                section = section.parent
            if section is not None and section["ids"]:
                found[""] = {"anchor": section["ids"][0]}
            break
    env.evidence_claim_markers[env.docname] = found


def purge(app: Sphinx, env, docname: str) -> None:
    getattr(env, "evidence_summary_docs", set()).discard(docname)
    getattr(env, "evidence_claim_markers", {}).pop(docname, None)


def merge(app: Sphinx, env, docnames: set[str], other) -> None:
    if not hasattr(env, "evidence_summary_docs"):
        env.evidence_summary_docs = set()
    if not hasattr(env, "evidence_claim_markers"):
        env.evidence_claim_markers = {}
    env.evidence_summary_docs |= getattr(other, "evidence_summary_docs", set())
    env.evidence_claim_markers.update(getattr(other, "evidence_claim_markers", {}))


def always_reread(app: Sphinx, env, added, changed, removed) -> list[str]:
    """The page reports the latest runs, so it is read (and written) on every build."""
    return sorted(getattr(env, "evidence_summary_docs", set()) - set(removed))


def execution(env, docname: str, glued: dict) -> tuple[float | None, str | None]:
    """How long the chapter's run took and when it was made: myst-nb's record (a run taken from
    the execution cache keeps the time and date it was made), else the chapter's own clock."""
    data = getattr(env, "nb_metadata", {}).get(docname, {}).get("exec_data") or {}
    when = None
    if data.get("mtime"):
        when = datetime.datetime.fromtimestamp(data["mtime"], datetime.timezone.utc).date().isoformat()
    if data.get("runtime") is not None:
        return float(data["runtime"]), when
    if "hands_on_minutes" in glued:
        return float(glued["hands_on_minutes"]) * 60, when
    return None, when


def _evidencepage():
    """mlexp's page module, from this checkout."""
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    from mlexp.evidence import evidencepage

    return evidencepage


def gather(app: Sphinx) -> list:
    """Every chapter of the table of contents with a seed section, as mlexp.evidence.evidencepage sees it."""
    evidencepage = _evidencepage()

    env = app.env
    output = pathlib.Path(env.mystnb_config.output_folder)
    markers = getattr(env, "evidence_claim_markers", {})
    chapters = []
    for docname in toc_docnames(app):
        source = pathlib.Path(env.doc2path(docname))
        if source.suffix != ".ipynb":
            continue
        glued = evidencepage.read_glue(output.joinpath(*docname.split("/")).with_suffix(".glue.json"))
        stored = json.loads(seeds_file(source).read_text())["runs"] if seeds_file(source).is_file() else []
        seconds, when = execution(env, docname, glued)
        # where the run came from, as the execution extension found it (none without it)
        origin = getattr(env, "mlexp_run_origins", {}).get(docname)
        chapter = evidencepage.chapter_evidence(
            docname, glued, stored, seconds, markers.get(docname, {}), when, origin)
        if chapter is None:
            if stored:
                logger.warning("%s has stored seed runs but this build recorded no seed section",
                               docname, type="evidence", subtype="summary")
            continue
        claims = {c.sentence for c in chapter.claims}
        for sentence in markers.get(docname, {}):
            if sentence and sentence not in claims:
                logger.warning("%s marks {claim}`%s`, which is not one of its checked claims",
                               docname, sentence, type="evidence", subtype="claim")
        for claim in chapter.claims:
            if claim.held is False:
                failing = [r for r in [*claim.checked, "this build"] if claim.results.get(r) is not True]
                logger.warning("%s claims %r, but these runs contradict it: %s",
                               docname, claim.sentence, failing, type="evidence", subtype="claim")
        chapters.append(chapter)
    return chapters


# ---------- layout ----------

def _link(app: Sphinx, fromdoc: str, todoc: str, anchor: str | None, text: str) -> nodes.Node:
    try:
        uri = app.builder.get_relative_uri(fromdoc, todoc)
    except NoUri:
        return nodes.Text(text)
    uri = uri.split("#")[0] + (f"#{anchor}" if anchor else "")
    return nodes.reference("", text, internal=True, refuri=uri)


def _badge(app: Sphinx, fromdoc: str, level: str | None) -> nodes.Node:
    from evidence import evidence_badge, label_for

    if level is None:
        return nodes.Text("—")
    node = evidence_badge(level, level, level=level, classes=["evidence-badge", f"evidence-{level}"])
    target = app.env.get_domain("std").anonlabels.get(label_for(level))
    if target is not None and app.builder.format == "html":
        try:
            node["refuri"] = app.builder.get_relative_uri(fromdoc, target[0]).split("#")[0] + f"#{target[1]}"
        except NoUri:
            pass
    if app.builder.format != "html":
        return nodes.Text(f"[{level}]")
    return node


def _table(headers: list[str], rows: list[list[nodes.Node | str]], classes: list[str],
           widths: list[int]) -> nodes.table:
    table = nodes.table(classes=["evidence-summary-table", *classes])
    group = nodes.tgroup(cols=len(headers))
    table += group
    for width in widths:
        group += nodes.colspec(colwidth=width)
    head = nodes.thead()
    group += head
    row = nodes.row()
    for text in headers:
        row += nodes.entry("", nodes.paragraph("", text))
    head += row
    body = nodes.tbody()
    group += body
    for cells in rows:
        row = nodes.row()
        for cell in cells:
            para = nodes.paragraph()
            para += nodes.Text(cell) if isinstance(cell, str) else cell
            row += nodes.entry("", para)
        body += row
    return table


#: How a result shows (a mark, for narrow columns) and what a screen reader says.
RESULT_MARKS = {True: ("✓", "held"), False: ("✗", "failed"), None: ("–", "not tested")}


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "not recorded"
    return f"{seconds:.0f} s" if seconds < 120 else f"{seconds / 60:.1f} min"


def _result(claim, run: str) -> nodes.Node:
    """A claim's result in one run: a mark, with its word for screen readers."""
    if not claim.recorded:
        return nodes.Text("not recorded")
    result = claim.results.get(run)
    mark, word = RESULT_MARKS[result]
    unchecked = run != "this build" and run not in claim.checked and result is not None
    cell = nodes.inline(classes=["evidence-result", f"evidence-result-{word.replace(' ', '-')}"])
    cell += nodes.inline("", mark + ("*" if unchecked else ""), classes=["evidence-mark"])
    cell += nodes.inline("", f" {word}" + (", not checked" if unchecked else ""),
                         classes=["evidence-sr"])
    return cell


def chapter_content(app: Sphinx, fromdoc: str, chapter) -> list[nodes.Node]:
    """One chapter's part of the page: its verdict, its claims, its runs and this build."""
    env = app.env
    section = nodes.container()
    markers = getattr(env, "evidence_claim_markers", {}).get(chapter.docname, {})
    seeds_anchor = markers.get("", {}).get("anchor")

    status = nodes.paragraph(classes=["evidence-status", f"evidence-status-{chapter.status.replace(' ', '-')}"])
    words = {"current": "Seed data current", "stale": "Seed data stale",
             "no runs": "No seed runs of this kind"}[chapter.status]
    status += nodes.strong("", words)
    status += nodes.Text(f": {chapter.reason}. ")
    status += _link(app, fromdoc, chapter.docname, seeds_anchor, "The chapter's seed section")
    status += nodes.Text(".")
    section += status

    runs = chapter.runs
    headers = ["Claim", "Evidence", *[f"seed {r}" if r != "this build" else "this build" for r in runs]]
    rows = []
    for claim in chapter.claims:
        sentence = _link(app, fromdoc, chapter.docname, claim.anchor or seeds_anchor, claim.sentence)
        cells: list[nodes.Node | str] = [sentence, _badge(app, fromdoc, claim.tag)]
        for run in runs:
            cells.append(_result(claim, run))
        rows.append(cells)
    section += _table(headers, rows, ["evidence-claims"], [40, 12, *[8] * len(runs)])
    legend = "✓ held, ✗ failed, – could not be tested."
    unchecked = [r for r in runs if r != "this build" and any(
        r not in c.checked and c.results.get(r) is not None for c in chapter.claims)]
    if not any(c.recorded for c in chapter.claims):
        legend = "This build did not record the claims' results; the next full build will."
    elif unchecked:
        legend += " * A stored run the build does not check the claims against: " + (
            "its data is stale." if not chapter.current else
            f"this build, with seed offset {chapter.assessment.offset}, stands in for it.")
    section += nodes.paragraph("", legend, classes=["evidence-footnote"])

    stored_rows = [[str(s.offset), s.machine, s.kind + ("" if s.compared else " (not compared)"),
                    s.date, _duration(s.run_seconds)] for s in chapter.stored]
    if stored_rows:
        section += _table(["Seed offset", "Machine", "Arithmetic", "Made", "Run time"], stored_rows,
                          ["evidence-runs"], [10, 40, 18, 18, 14])
    else:
        section += nodes.paragraph("", "No seed runs stored yet.")
    machine = chapter.assessment.this_name
    source = (chapter.origin or {}).get("source", "unknown")
    build = nodes.paragraph(classes=["evidence-build", f"evidence-origin-{source}"])
    if chapter.made:
        # where the chapter's run came from: this build, the cache or the book's record
        build += nodes.Text(
            f"The chapter's run: seed offset {chapter.assessment.offset}, "
            f"{chapter.made}. Largest distance from the stored run of the same "
            f"offset: {chapter.drift}.")
    else:
        build += nodes.Text(
            f"This build: {machine}, seed offset {chapter.assessment.offset}, executed in "
            f"{_duration(chapter.exec_seconds)}"
            + (f" (run made {chapter.exec_date})" if chapter.exec_date else "")
            + ". Largest distance from the stored run of the same "
            f"offset: {chapter.drift}.")
    section += build
    return list(section.children)


def fill_summary(app: Sphinx, doctree: nodes.document, docname: str) -> None:
    placeholders = list(doctree.findall(evidence_summary))
    if not placeholders:
        return
    evidencepage = _evidencepage()
    chapters = {c.docname: c for c in gather(app)}
    line = evidencepage.top_line(list(chapters.values()))
    logger.info("evidence at a glance: %s", line)
    for node in placeholders:
        top = nodes.container(classes=["evidence-summary"])
        top += nodes.paragraph("", line, classes=["evidence-top-line"])
        node.replace_self(top)
    for node in list(doctree.findall(evidence_chapter)):
        chapter = chapters.get(node["docname"])
        section = node.parent
        title = section.next_node(nodes.title)
        text = title.astext()
        del title[:]
        title += _link(app, docname, node["docname"], None, text)
        if chapter is None:
            node.replace_self(nodes.paragraph(
                "", "This build recorded no seed section for this chapter."))
        else:
            node.replace_self(chapter_content(app, docname, chapter))


def setup(app: Sphinx) -> dict[str, Any]:
    app.setup_extension("evidence")
    app.add_node(claim_marker, html=(visit_claim_html, None), latex=(skip_node, None),
                 text=(skip_node, None), man=(skip_node, None), texinfo=(skip_node, None))
    app.add_node(evidence_summary)
    app.add_node(evidence_chapter)
    app.add_role("claim", ClaimRole())
    app.add_directive("evidence-summary", EvidenceSummary)
    app.connect("doctree-read", collect_markers)
    app.connect("env-purge-doc", purge)
    app.connect("env-merge-info", merge)
    app.connect("env-get-outdated", always_reread)
    app.connect("doctree-resolved", fill_summary)
    return {"version": "1.0", "parallel_read_safe": True, "parallel_write_safe": True}
