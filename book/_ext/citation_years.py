"""Tell apart works that an author-year citation would print the same: 2023a, 2023b.

sphinxcontrib-bibtex's ``author_year`` style prints "Touvron et al., 2023" for both LLaMA
papers and "Mikolov et al., 2013" for both word2vec papers, so a reader cannot tell which one
a sentence means. Author-year styles (APA, Chicago, natbib) add a letter to the year of every
work whose printed author and year coincide; this extension does the same, once the
bibliography is parsed and before any page cites it, so the citation and the bibliography
entry both read "2023a". The letters follow the order of publication, as those styles ask:
the arXiv identifier (year, month, then number) where the entry links one, the title for
entries without. Nothing is written into ``references.bib``: a work added later re-letters its
group on the next build.
"""

from __future__ import annotations

import re
from collections import defaultdict

import pybtex.plugin
from pybtex.style.formatting.alpha import Style as AlphaStyle
from pybtex.style.labels.alpha import LabelStyle as AlphaLabelStyle
from sphinx.application import Sphinx

#: Where the year as written in references.bib is kept, so that re-lettering is idempotent.
PLAIN_YEAR = "x-plain-year"


def printed_authors(entry) -> tuple[str, ...]:
    """The authors as the author_year style prints them: one or two last names, or the
    first last name and "et al." for three or more."""
    people = entry.persons.get("author") or entry.persons.get("editor") or []
    last = tuple(" ".join(p.last_names) for p in people)
    return last if len(last) <= 2 else (last[0], "et al.")


#: An arXiv identifier (YYMM.NNNNN) in an entry's url, eprint or journal field.
ARXIV_ID = re.compile(r"\b(\d{4}\.\d{4,5})\b")


def publication_order(entry) -> tuple[str, str]:
    """Sort key for entries printed alike: the arXiv identifier, which grows with the date of
    first release, then the title; an entry without one comes after those with one."""
    fields = " ".join(str(entry.fields.get(f, "")) for f in ("eprint", "url", "journal"))
    found = ARXIV_ID.search(fields)
    title = str(entry.fields.get("title", "")).replace("{", "").replace("}", "").lower()
    return (found.group(1) if found else "~", title)


def letter_years(entries) -> dict[str, str]:
    """The year each entry should print, by key: its own year, plus a letter where another
    entry would otherwise print the same authors and year."""
    groups: dict[tuple, list[str]] = defaultdict(list)
    for key, entry in entries.items():
        year = entry.fields.get(PLAIN_YEAR) or entry.fields.get("year", "")
        groups[(printed_authors(entry), year)].append(key)
    years = {}
    for (_, year), keys in groups.items():
        if len(keys) == 1:
            years[keys[0]] = year
            continue
        ordered = sorted(keys, key=lambda k: publication_order(entries[k]))
        for letter, key in zip("abcdefghijklmnopqrstuvwxyz", ordered):
            years[key] = f"{year}{letter}"
    return years


def disambiguate(app: Sphinx) -> None:
    entries = app.env.get_domain("cite").bibdata.data.entries
    years = letter_years(entries)
    for key, entry in entries.items():
        entry.fields.setdefault(PLAIN_YEAR, entry.fields.get("year", ""))
        entry.fields["year"] = years[key]


class LetteredAlphaLabels(AlphaLabelStyle):
    """The bibliography's alpha labels ("TLI+23") read the year's last two digits; a lettered
    year keeps its digits and letter ("TLI+23b", not "TLI+3b")."""

    def format_label(self, entry):
        label = super().format_label(entry)
        year, plain = entry.fields.get("year", ""), entry.fields.get(PLAIN_YEAR)
        if plain and year != plain:
            return label[: -len(year[-2:])] + plain[-2:] + year[len(plain):]
        return label


class BookStyle(AlphaStyle):
    """pybtex's alpha bibliography style with lettered labels."""

    default_label_style = "lettered_alpha"


def setup(app: Sphinx) -> dict:
    pybtex.plugin.register_plugin("pybtex.style.labels", "lettered_alpha", LetteredAlphaLabels)
    pybtex.plugin.register_plugin("pybtex.style.formatting", "book_alpha", BookStyle)
    # After sphinxcontrib-bibtex has parsed the .bib files (its handler has the default 500).
    app.connect("builder-inited", disambiguate, priority=600)
    return {"version": "1.0", "parallel_read_safe": True, "parallel_write_safe": True}
