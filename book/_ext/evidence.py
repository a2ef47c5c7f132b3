"""Evidence badges: the ``{evidence}`level``` role.

The book tags claims with how well supported they are. Writing the tag as a
role (rather than raw HTML) keeps the markdown readable, lets Sphinx check the
level at build time (a typo fails a ``-W`` build instead of silently shipping),
and lets Sphinx compute the link to the legend page, so it is correct from any
page depth and for any builder.

Usage in MyST markdown (and in markdown cells of notebooks run by myst-nb)::

    Scaling laws hold over many orders of magnitude {evidence}`established`.

The legend page must define the targets ``(evidence-<level>)=`` for each level;
by convention that is ``evidence.md``.
"""

from __future__ import annotations

from typing import Any

from docutils import nodes
from sphinx.application import Sphinx
from sphinx.errors import NoUri
from sphinx.transforms.post_transforms import SphinxPostTransform
from sphinx.util import logging
from sphinx.util.docutils import SphinxRole
from sphinx.writers.html5 import HTML5Translator

__version__ = "1.0.0"

logger = logging.getLogger(__name__)

#: Allowed levels, strongest first, with the one-sentence meaning shown as a tooltip.
LEVELS: dict[str, str] = {
    "established": "Replicated widely, across many papers and scales.",
    "likely": "Good evidence, but open questions remain.",
    "speculative": "A plausible story without decisive tests.",
}


def label_for(level: str) -> str:
    """Return the legend target name for ``level``; one place so role and legend agree."""
    return f"evidence-{level}"


class evidence_badge(nodes.Inline, nodes.TextElement):  # noqa: N801 (docutils naming)
    """Inline node for one badge; carries ``level`` and, once resolved, ``refuri``.

    A dedicated node (instead of a plain ``reference``) is needed so the HTML
    writer can emit ``aria-label`` and other builders can fall back to text.
    """


class EvidenceRole(SphinxRole):
    """Parse ``{evidence}`level``` into an :class:`evidence_badge` node."""

    def run(self) -> tuple[list[nodes.Node], list[nodes.system_message]]:
        """Validate the level here, at read time, so the warning points at the source line."""
        level = self.text.strip().lower()
        if level not in LEVELS:
            logger.warning(
                "unknown evidence level %r; allowed levels are: %s",
                self.text,
                ", ".join(LEVELS),
                location=self.get_location(),
                type="evidence",
                subtype="unknown_level",
            )
            # Keep the author's text visible so a non -W build still shows the mistake.
            return [nodes.literal(self.rawtext, self.rawtext)], []
        node = evidence_badge(
            self.rawtext,
            level,
            level=level,
            classes=["evidence-badge", f"evidence-{level}"],
        )
        self.set_source_info(node)
        return [node], []


class EvidenceLinker(SphinxPostTransform):
    """Resolve each badge's link to the legend, or degrade it to ``[level]`` text.

    Runs as a post-transform because only then are all documents read, so the
    legend's labels are known and the builder can produce a relative URI for
    the *current* page (works for html, dirhtml and singlehtml alike).
    """

    default_priority = 20  # early; nothing else depends on these nodes

    def run(self, **kwargs: Any) -> None:
        """Attach ``refuri`` for HTML-format builders; replace with text otherwise."""
        is_html = self.app.builder.format == "html"
        anonlabels: dict[str, tuple[str, str]] = self.env.get_domain("std").anonlabels  # type: ignore[attr-defined]
        for node in list(self.document.findall(evidence_badge)):
            level: str = node["level"]
            if not is_html:
                node["classes"] = []  # plain text cannot keep classes; docutils asserts that
                node.replace_self(nodes.Text(f"[{level}]"))
                continue
            target = anonlabels.get(label_for(level))
            if target is None:
                logger.warning(
                    "evidence legend target %r not found; add '(%s)=' to the legend page",
                    label_for(level),
                    label_for(level),
                    location=node,
                    type="evidence",
                    subtype="missing_legend",
                )
                continue
            docname, anchor = target
            try:
                uri = self.app.builder.get_relative_uri(self.env.docname, docname)
            except NoUri:
                continue
            # singlehtml returns "#document-x"; the page part is whatever precedes "#".
            node["refuri"] = f"{uri.split('#')[0]}#{anchor}"


def visit_badge_html(self: HTML5Translator, node: evidence_badge) -> None:
    """Write the whole badge at once: a link if resolved, else a span with the same look."""
    level: str = node["level"]
    meaning = LEVELS[level]
    attrs: dict[str, str] = {"title": meaning, "aria-label": f"evidence: {level}. {meaning}"}
    tag = "span"
    if "refuri" in node:
        tag = "a"
        attrs["href"] = node["refuri"]
    self.body.append(self.starttag(node, tag, "", **attrs))
    self.body.append(self.encode(level))
    self.body.append(f"</{tag}>")
    raise nodes.SkipNode


def setup(app: Sphinx) -> dict[str, Any]:
    """Register the role, node and post-transform; safe for parallel read/write."""
    app.add_node(evidence_badge, html=(visit_badge_html, None))
    app.add_role("evidence", EvidenceRole())
    app.add_post_transform(EvidenceLinker)
    return {"version": __version__, "parallel_read_safe": True, "parallel_write_safe": True}
