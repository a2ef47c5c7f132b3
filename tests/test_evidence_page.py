"""The evidence at a glance (book/evidence-at-a-glance.md), generated from data.

A small Jupyter Book is built in a temporary folder: two fake chapters whose stored outputs
carry what a build glues (the seed section's provenance and its claim check), and the real
Chapter 1 with its stored seed runs and a record made by running its own seed-section cell.
The page must list every claim of every chapter in that table of contents, without knowing
the chapters beforehand; a chapter whose stored runs this build does not reproduce shows as stale
with the reason and the rows that moved; a claim that a run contradicts shows as failed and is logged as a warning
(which the book's -W build turns into a failure).
"""

from __future__ import annotations

import json
import pathlib
import shutil
import subprocess
import sys

import pytest
import yaml
from bs4 import BeautifulSoup

import mlexp
from mlexp.evidence import evidencepage, provenance, seedtable

ROOT = pathlib.Path(__file__).resolve().parents[1]
CHAPTER01 = ROOT / "book/part1/chapter01.ipynb"
PREFIX = "application/papermill.record/"
FINGERPRINT = {"code": "c0de", "mlexp": "11b", "corpus": "c0a9", "torch": "2.13.0+cpu"}
MACHINE = {"kind": "fp32", "name": "Test CPU (AVX2)", "capability": "AVX2", "threads": 2}
ROWS = {"variant a": "fake_a", "variant b": "fake_b"}
# What book/_ext/evidence_summary.py warns of.
PAGE_WARNINGS = ["contradict", "not one of its checked claims", "is marked twice",
                 "recorded no seed section"]


def glued(key: str, value) -> dict:
    """One output as myst_nb.glue stores it in an executed notebook."""
    return {"output_type": "display_data",
            "metadata": {"scrapbook": {"name": key, "mime_prefix": PREFIX}},
            "data": {PREFIX + "text/plain": repr(value)}}


def record(claims: dict[str, dict[str, bool]], values: dict, checked: list[int]) -> list[dict]:
    """What a chapter's seed section glues in a build."""
    prov = {"fingerprint": FINGERPRINT, "machine": MACHINE, "rows": ROWS, "claims": list(claims)}
    check = {"offset": 0, "values": values, "checked": checked, "claims": claims}
    return [glued(seedtable.PROVENANCE_KEY, json.dumps(prov)),
            glued(seedtable.CHECK_KEY, json.dumps(check)),
            glued("hands_on_minutes", 1.5)]


def stored_run(offset: int, values: dict, **fingerprint) -> dict:
    return {"offset": offset, "values": values,
            "provenance": {"fingerprint": {**FINGERPRINT, **fingerprint}, "machine": MACHINE,
                           "date": f"2026-11-0{offset + 1}T10:00:00+00:00", "run_seconds": 90.0}}


def notebook(title: str, docname: str, markdown: str, outputs: list[dict]) -> dict:
    cells = [
        {"cell_type": "markdown", "metadata": {}, "source": f"# {title}\n\n{markdown}"},
        {"cell_type": "markdown", "metadata": {}, "source":
         f"## Across three seeds\n\nSee {{ref}}`the evidence at a glance <evidence-{docname.replace('/', '-')}>`."},
        {"cell_type": "code", "execution_count": 1, "metadata": {"tags": ["remove-cell"]},
         "source": "seeds = mlexp.seed_section(...)", "outputs": outputs},
    ]
    return {"cells": cells, "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3",
                                                         "language": "python"}},
            "nbformat": 4, "nbformat_minor": 5}


def real_chapter_record(tmp: pathlib.Path, monkeypatch) -> list[dict]:
    """Run Chapter 1's own seed-section cell (as tests/test_chapter_claims.py does) on its
    stored runs, and keep what it glues for the page."""
    cells = json.loads(CHAPTER01.read_text())["cells"]
    code = ["".join(c["source"]) for c in cells if c["cell_type"] == "code"]
    (keys_cell,) = [c for c in code if "ABLATION_KEYS = {" in c]
    (seed_cell,) = [c for c in code if "mlexp.seed_section(" in c]
    stored = json.loads(CHAPTER01.with_suffix("").with_suffix(".seeds.json").read_text())["runs"]
    zero = next(r for r in stored if r["offset"] == 0)["values"]
    # the stored run's own baselines (scored on its evaluation windows), as the build computes them
    namespace = {"mlexp": mlexp, "unigram_loss": zero.get("unigram_loss", 3.347),
                 "bigram_loss": zero.get("bigram_loss", 2.482), "ABLATION_STEPS": 150}
    exec(keys_cell.split('mlexp.glue("ablation_steps"')[0], namespace)
    namespace["ablation"] = {name: zero[key] for name, key in namespace["ABLATION_KEYS"].items()}
    outputs: list[dict] = []
    monkeypatch.setattr(seedtable, "glue", lambda key, value: outputs.append(glued(key, value)))
    monkeypatch.setattr(mlexp, "glue_md", lambda *a: None)
    monkeypatch.chdir(tmp)
    try:
        exec(seed_cell, namespace)
    except mlexp.evidence.seedstats.ClaimContradicted:
        pass  # the record is glued before the checks; the page reports what failed
    return outputs + [glued("hands_on_minutes", 12.0)]


FAKE01_CLAIMS = {"variant a beats variant b": {"0": True, "1": True, "2": True, "this build": True},
                 "variant b is above one": {"0": True, "1": True, "2": True, "this build": True}}
FAKE02_CLAIMS = {"the second fake's claim holds": {"0": True, "1": True, "this build": True},
                 "the second fake's other claim": {"0": True, "1": False, "this build": False}}


def make_book(tmp: pathlib.Path, monkeypatch, fail: bool) -> pathlib.Path:
    book = tmp / "book"
    (book / "part1").mkdir(parents=True)
    for page in ["evidence.md", "evidence-at-a-glance.md"]:
        shutil.copy(ROOT / "book" / page, book / page)
    (book / "intro.md").write_text("# Fixture book\n\n```{tableofcontents}\n```\n")
    values = {"fake_a": 1.0, "fake_b": 1.2}
    fake01 = notebook("Fake one", "part1/fake01",
                      "A beats B in every seed.{claim}`variant a beats variant b` {evidence}`likely`",
                      record(FAKE01_CLAIMS, values, [1, 2]))
    (book / "part1/fake01.ipynb").write_text(json.dumps(fake01))
    (book / "part1/fake01.seeds.json").write_text(json.dumps(
        {"runs": [stored_run(k, values) for k in range(3)]}))
    claims02 = FAKE02_CLAIMS if fail else {c: {**r, "1": True, "this build": True}
                                           for c, r in FAKE02_CLAIMS.items()}
    # a marker whose sentence is none of the chapter's claims (a typo) is a warning
    marked = "A typo.{claim}`the second fake's claim hold` {evidence}`likely`" if fail else "No marks."
    fake02 = notebook("Fake two", "part1/fake02", marked, record(claims02, values, []))
    (book / "part1/fake02.ipynb").write_text(json.dumps(fake02))
    # stored with other code whose numbers this build does not reproduce: stale
    older = {"fake_a": 1.1, "fake_b": 1.2}
    (book / "part1/fake02.seeds.json").write_text(json.dumps(
        {"runs": [stored_run(k, older, code="older") for k in range(2)]}))
    shutil.copy(CHAPTER01.with_suffix("").with_suffix(".seeds.json"), book / "part1")
    nb = json.loads(CHAPTER01.read_text())
    shutil.copy(CHAPTER01, book / "part1")  # the seed cell runs beside the chapter
    outputs = real_chapter_record(book / "part1", monkeypatch)
    seed_cell = next(c for c in nb["cells"] if "mlexp.seed_section(" in "".join(c["source"]))
    seed_cell["outputs"] = outputs
    (book / "part1/chapter01.ipynb").write_text(json.dumps(nb))
    toc = {"format": "jb-book", "root": "intro", "parts": [
        {"caption": "Chapters", "chapters": [{"file": f"part1/{c}"} for c in ["fake01", "fake02", "chapter01"]]},
        {"caption": "About", "chapters": [{"file": "evidence"}, {"file": "evidence-at-a-glance"}]}]}
    (book / "_toc.yml").write_text(yaml.safe_dump(toc))
    config = {"title": "Fixture", "only_build_toc_files": True,
              "execute": {"execute_notebooks": "off"},
              "parse": {"myst_enable_extensions": ["colon_fence", "dollarmath", "amsmath"]},
              "sphinx": {"local_extensions": {"evidence": str(ROOT / "book/_ext"),
                                              "evidence_summary": str(ROOT / "book/_ext")},
                         "config": {"suppress_warnings": ["mystnb.unknown_mime_type"]}}}
    (book / "_config.yml").write_text(yaml.safe_dump(config))
    return book


def build(book: pathlib.Path, *flags: str) -> subprocess.CompletedProcess:
    jb = pathlib.Path(sys.executable).with_name("jupyter-book")
    return subprocess.run([str(jb), "build", str(book), "--builder", "html", *flags],
                          capture_output=True, text=True, timeout=600)


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    monkeypatch = pytest.MonkeyPatch()
    try:
        book = make_book(tmp_path_factory.mktemp("evidence"), monkeypatch, fail=True)
    finally:
        monkeypatch.undo()
    result = build(book)
    page = book / "_build/html/evidence-at-a-glance.html"
    assert page.is_file(), result.stdout[-3000:] + result.stderr[-3000:]
    return book, result, BeautifulSoup(page.read_text(encoding="utf-8"), "html.parser")


def section(soup: BeautifulSoup, docname: str):
    found = soup.find(id="evidence-" + docname.replace("/", "-"))
    assert found is not None, f"no part of the page for {docname}"
    return found


def chapters_of(book: pathlib.Path) -> list[str]:
    toc = yaml.safe_load((book / "_toc.yml").read_text())
    return [c["file"] for part in toc["parts"] for c in part["chapters"]
            if (book / f"{c['file']}.ipynb").is_file()]


def claims_of(book: pathlib.Path, docname: str) -> list[str]:
    """The claims a chapter's build recorded, read from the notebook's glued outputs."""
    nb = json.loads((book / f"{docname}.ipynb").read_text())
    glue = evidencepage.read_glue_outputs(o for cell in nb["cells"] for o in cell.get("outputs", []))
    return json.loads(glue[seedtable.PROVENANCE_KEY])["claims"]


def test_every_claim_of_every_chapter_in_the_toc_is_listed(built):
    book, _, soup = built
    chapters = chapters_of(book)
    assert len(chapters) == 3
    for docname in chapters:
        claims = claims_of(book, docname)
        assert claims
        rows = section(soup, docname).select("table.evidence-claims tbody tr")
        listed = [row.find("td").get_text(" ", strip=True) for row in rows]
        assert listed == claims, docname


def test_the_real_chapters_claims_carry_the_prose_tag_and_anchor(built):
    book, _, soup = built
    rows = section(soup, "part1/chapter01").select("table.evidence-claims tbody tr")
    for row in rows:
        badge = row.select_one(".evidence-badge")
        assert badge is not None and badge.get_text() in {"established", "likely", "speculative"}, row
        href = row.find("td").find("a")["href"]
        assert href.startswith("part1/chapter01.html#claim-"), href
        chapter = BeautifulSoup((book / "_build/html/part1/chapter01.html").read_text(), "html.parser")
        assert chapter.find(id=href.split("#")[1]) is not None, href


def test_a_stale_chapter_shows_as_stale_with_its_reason(built):
    _, _, soup = built
    status = section(soup, "part1/fake02").select_one(".evidence-status").get_text(" ", strip=True)
    assert status.startswith("Seed data stale"), status
    assert "this build does not reproduce the stored run with seed offset 0" in status
    assert "moved by 0.100 (1.100 stored, 1.000 now)" in status
    current = section(soup, "part1/fake01").select_one(".evidence-status").get_text(" ", strip=True)
    assert current.startswith("Seed data current"), current


def test_the_top_line_counts_claims_and_current_chapters(built):
    book, _, soup = built
    line = soup.select_one(".evidence-top-line").get_text(" ", strip=True)
    n = sum(len(claims_of(book, d)) for d in chapters_of(book))
    # one claim of the second fake fails in this build
    assert line.startswith(f"{n} claims checked in this build, {n - 1} held"), line
    # the first fake is current, the second stale; Chapter 1's record, made in this process
    # from its stored seed-0 values, reproduces its stored run whatever code made that run
    real = section(soup, "part1/chapter01").select_one(".evidence-status").get_text()
    assert real.startswith("Seed data current"), real
    assert "2 of 3 chapters have current seed data" in line, line


def test_a_contradicted_claim_shows_failed_and_fails_the_build(built):
    book, result, soup = built
    rows = section(soup, "part1/fake02").select("table.evidence-claims tbody tr")
    failing = next(r for r in rows if "other claim" in r.get_text())
    this_build = failing.find_all("td")[-1]
    assert this_build.select_one(".evidence-result-failed") is not None, this_build
    assert "✗" in this_build.get_text() and "failed" in this_build.get_text()
    held = next(r for r in rows if "claim holds" in r.get_text()).find_all("td")[-1]
    assert held.select_one(".evidence-result-held") is not None, held
    # a warning, which the book's -W build turns into a failure
    log = (result.stdout + result.stderr).splitlines()
    assert any("WARNING" in line and "the second fake's other claim" in line
               and "contradict" in line for line in log), "\n".join(log[-40:])
    assert any("WARNING" in line and "the second fake's claim hold`" in line
               and "not one of its checked claims" in line for line in log), "\n".join(log[-40:])


def test_when_every_claim_holds_the_page_warns_of_nothing(tmp_path, monkeypatch):
    """The same book with the claim holding: no warning from the page, every claim held.
    (The copied Chapter 1 warns of its own missing figures here, so -W cannot be used.)"""
    book = make_book(tmp_path, monkeypatch, fail=False)
    monkeypatch.undo()
    result = build(book)
    own = [line for line in (result.stdout + result.stderr).splitlines()
           if "WARNING" in line and any(words in line for words in PAGE_WARNINGS)]
    assert not own, own
    page = BeautifulSoup((book / "_build/html/evidence-at-a-glance.html").read_text(), "html.parser")
    n = sum(len(claims_of(book, d)) for d in chapters_of(book))
    assert page.select_one(".evidence-top-line").get_text().startswith(
        f"{n} claims checked in this build, {n} held")


def test_a_rebuild_without_changes_still_fills_the_page(built):
    """Sphinx writes only what it read again; the page is read on every build, so a rebuild
    that takes every chapter from the cache (or does not read it at all) still reports them,
    from the glue files the earlier build left in _build/jupyter_execute."""
    book, _, first = built
    result = build(book)
    assert "evidence-at-a-glance" in result.stdout  # read and written again
    page = BeautifulSoup((book / "_build/html/evidence-at-a-glance.html").read_text(), "html.parser")
    assert page.select_one(".evidence-top-line").get_text() == first.select_one(
        ".evidence-top-line").get_text()
    assert len(page.select("section.evidence-chapter")) == 3


def test_harvesting_a_build_keeps_its_claim_check_out_of_the_values(tmp_path):
    """The check is the build's record, not a number of the chapter: a harvested run of
    offset 0 stores the provenance and the values, without it."""
    from mlexp.evidence import seedruns

    outputs = record(FAKE01_CLAIMS, {"fake_a": 1.0, "fake_b": 1.2}, [1, 2])
    outputs += [glued("fake_a", 1.0), glued("fake_b", 1.2)]
    nb = {"cells": [{"cell_type": "code", "outputs": outputs}]}
    run = seedruns.run_record(nb, tmp_path / "fake.ipynb", 0, 60.0)
    assert seedtable.CHECK_KEY not in run["values"]
    assert run["values"]["fake_a"] == 1.0
    assert run["provenance"]["claims"] == list(FAKE01_CLAIMS)


def test_the_page_reports_a_failing_claim_as_the_chapter_fails(tmp_path, monkeypatch):
    """seed_section records how each claim fared before it checks them, so the build that
    fails on a contradicted claim has a record that the page reads the same way."""
    from mlexp.evidence import seedruns

    (tmp_path / "fake.ipynb").write_text(json.dumps(notebook("Fake", "part1/fake", "", [])))
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MLEXP_SEED_RUN", raising=False)
    monkeypatch.delenv("MLEXP_SEED_OFFSET", raising=False)
    here = provenance.fingerprint("fake.ipynb")
    machine = provenance.machine(torch_device())
    runs = [{"offset": k, "values": {"fake_a": 1.0 + k / 10, "fake_b": 2.0},
             "provenance": {"fingerprint": here, "machine": machine}} for k in range(3)]
    seedruns.write_atomic(tmp_path / "fake.seeds.json", {"notebook": "fake.ipynb", "runs": runs})
    claims = {"a is below b": lambda v: v["fake_a"] < v["fake_b"]}
    outputs: dict[str, object] = {}
    monkeypatch.setattr(seedtable, "glue", lambda key, value: outputs.__setitem__(key, value))

    seedtable.seed_section("part1/fake.ipynb", ROWS, {"fake_a": 1.0, "fake_b": 2.0}, claims)
    chapter = evidencepage.chapter_evidence("part1/fake", outputs, runs)
    assert chapter.current and chapter.claims[0].held is True
    assert chapter.claims[0].checked == ["1", "2"]

    with pytest.raises(mlexp.evidence.seedstats.ClaimContradicted):
        seedtable.seed_section("part1/fake.ipynb", ROWS, {"fake_a": 3.0, "fake_b": 2.0}, claims)
    chapter = evidencepage.chapter_evidence("part1/fake", outputs, runs)
    assert chapter.claims[0].held is False
    assert chapter.claims[0].results == {"0": True, "1": True, "2": True, "this build": False}
    assert evidencepage.top_line([chapter]).startswith("1 claim checked in this build, 0 held")


def torch_device():
    import torch

    return torch.device("cpu")
