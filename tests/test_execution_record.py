"""The execution record: each chapter's last run, committed in the repository, stands in for
a run on a machine whose cache lacks one, and only when it read what the chapter reads now.

Fast, like tests/test_execution_fingerprint.py (whose fake checkout and simulated builds
these tests reuse): a fake clone is built once, which writes its record into
``_execution_record/``; a copy of it (a fresh clone) is then built with an empty cache.
One end-to-end test builds a tiny book with Jupyter Book twice. The last tests keep the
repository's own record in shape.
"""

from __future__ import annotations

import gzip
import json
import os
import pathlib
import shutil
import subprocess
import sys
import types

import nbformat
import pytest
import test_execution_fingerprint as base
from docutils import nodes
from docutils.frontend import get_default_settings
from docutils.parsers.rst import Parser
from docutils.utils import new_document
from jupyter_cache import get_cache
from test_execution_fingerprint import Checkout, build, checkout, ext, tiny_book

corpus, log = base.corpus, base.log  # its fixtures: the fake corpus, the extension's log

ROOT = pathlib.Path(__file__).resolve().parents[1]
BOTH = {"part1/chapter01", "part1/chapter02"}
BUILD_DEVICE = ext.build_device  # before the fixture below replaces it
CPU = {"device": "cpu", "arithmetic": "fp32"}
GPU = {"device": "cuda", "arithmetic": "fp32"}


@pytest.fixture(autouse=True)
def on_a_cpu(monkeypatch):
    """Each build's device kind, as mlexp.training.precision's rule would report it."""
    monkeypatch.delenv(ext.COLD_ENV, raising=False)
    monkeypatch.setattr(ext, "build_device", lambda: dict(CPU))


def fresh_clone(monkeypatch, tmp_path) -> tuple[Checkout, pathlib.Path]:
    """A clone built once (which writes the record), and a copy of it elsewhere, without
    its _build: a fresh clone of the commit, with the record, and an empty cache."""
    first = checkout(tmp_path / "first")
    assert build(monkeypatch, first, tmp_path / "first-cache") == BOTH
    assert ext.record_files("part1/chapter01")[0].is_file(), "the build wrote no record"
    # the run is kept compressed: a chapter's figures are SVG text, which shrinks about sixfold
    recorded = ext.record_files("part1/chapter01")[1]
    assert recorded.name == "chapter01.ipynb.gz"
    assert nbformat.reads(gzip.decompress(recorded.read_bytes()).decode(), as_version=4).cells
    second = Checkout(tmp_path / "fresh")
    shutil.copytree(first.root, second.root, ignore=shutil.ignore_patterns("_build"))
    return second, tmp_path / "empty-cache"


def entry(clone: Checkout, docname: str) -> dict:
    return json.loads((clone.root / ext.RECORD_DIR / f"{docname}.json").read_text())


def test_a_fresh_clone_takes_every_chapter_from_the_record(monkeypatch, tmp_path, corpus, log):
    clone, cache_dir = fresh_clone(monkeypatch, tmp_path)
    log.lines.clear()
    assert build(monkeypatch, clone, cache_dir) == set(), "a chapter executed"
    assert clone.read == BOTH
    for docname in sorted(BOTH):
        assert any(line.startswith(f"{docname}.ipynb is taken from the execution record, not executed")
                   for line in log.lines), log.lines
    # the recorded runs are in the cache, with their inputs, so the next build finds them current
    cache = get_cache(cache_dir)
    assert len(cache.list_cache_records()) == 2
    for record in cache.list_cache_records():
        assert record.data[ext.RECORD_KEY]["date"] == entry(clone, "part1/chapter01")["made"]["date"]
        nb = cache.get_cache_bundle(record.pk).nb
        assert ext.notebook_provenance(nb)["modules"], "the recorded glue is in the cached run"
    assert set(ext.read_stamp(cache_dir)) == {r.hashkey for r in cache.list_cache_records()}
    log.lines.clear()
    assert build(monkeypatch, clone, cache_dir) == set()
    assert "part1/chapter01.ipynb: its cached run is current" in log.lines
    # the page and the evidence page learn where the run came from
    origins = getattr(clone.env, ext.ORIGINS)
    assert {origins[d]["source"] for d in BOTH} == {"record"}
    # the record holds no path of the machine that wrote it
    for path in (clone.root / ext.RECORD_DIR).rglob("*"):
        if path.is_file():
            text = gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
            assert str(tmp_path).encode() not in text, path


@pytest.mark.parametrize("edit", ["module", "code cell", "seeds"])
def test_a_record_whose_input_differs_is_refused_and_rewritten(monkeypatch, tmp_path, corpus, log, edit):
    clone, cache_dir = fresh_clone(monkeypatch, tmp_path)
    root = clone.root
    before, untouched = entry(clone, "part1/chapter02"), entry(clone, "part1/chapter01")
    if edit == "module":
        (root / "mlexp/bpe.py").write_text("class BPETokenizer: merges = 3\n")
        why = "mlexp/bpe.py changed"
    elif edit == "seeds":
        (root / "book/part1/chapter02.seeds.json").write_text('{"runs": [{"offset": 1}]}')
        why = "book/part1/chapter02.seeds.json changed"
    else:
        notebook = root / "book/part1/chapter02.ipynb"
        nb = nbformat.read(notebook, as_version=4)
        nb.cells[1].source += "\nprint('edited')"
        nbformat.write(nb, notebook)
        why = "the chapter's code cells changed since the recorded run"
    log.lines.clear()
    assert build(monkeypatch, clone, cache_dir) == {"part1/chapter02"}, "only the changed chapter runs"
    assert f"part1/chapter02.ipynb executes: its execution record is stale ({why})" in log.lines
    # the build rewrote the changed chapter's record, so it is committed with the change
    after = entry(clone, "part1/chapter02")
    assert after != before
    assert "part1/chapter02.ipynb: its run is written to the execution record " \
           "(_execution_record/part1/chapter02.json)" in log.lines
    assert ext.record_mismatch(after, root / "book/part1/chapter02.ipynb", ext.current_digests(
        [root / "book/part1/chapter02.ipynb"], corpus), CPU) == ""
    assert entry(clone, "part1/chapter01") == untouched, "the other chapter's record was rewritten"


@pytest.mark.parametrize("recorded, building", [(CPU, GPU), (GPU, CPU)])
def test_a_record_of_another_device_kind_is_refused(monkeypatch, tmp_path, corpus, log, recorded, building):
    clone, cache_dir = fresh_clone(monkeypatch, tmp_path)
    for docname in BOTH:
        path = clone.root / ext.RECORD_DIR / f"{docname}.json"
        data = json.loads(path.read_text())
        data["device"] = recorded
        path.write_text(json.dumps(data))
    monkeypatch.setattr(ext, "build_device", lambda: dict(building))
    log.lines.clear()
    assert build(monkeypatch, clone, cache_dir) == BOTH
    words = {"cuda": "a GPU in float32", "cpu": "a CPU in float32"}
    assert (f"part1/chapter01.ipynb executes: its execution record is stale (the recorded run was made "
            f"on {words[recorded['device']]}, and this build runs on {words[building['device']]})"
            in log.lines), log.lines
    # the record holds CPU runs: a CPU build replaces a GPU's, a GPU build writes nothing
    assert entry(clone, "part1/chapter01")["device"] == CPU


@pytest.mark.parametrize("damage", ["truncated entry", "notebook edited", "notebook missing"])
def test_an_unreadable_record_is_refused_and_explained(monkeypatch, tmp_path, corpus, log, damage):
    clone, cache_dir = fresh_clone(monkeypatch, tmp_path)
    monkeypatch.setattr(ext, "ROOT", clone.root)
    entry_file, nb_file = ext.record_files("part1/chapter01")
    if damage == "truncated entry":
        entry_file.write_text(entry_file.read_text()[:40])
    elif damage == "notebook edited":
        # an output edited by hand (the fake run's glued fingerprint reads "abc")
        text = gzip.decompress(nb_file.read_bytes()).decode()
        assert '\\"abc\\"' in text
        nb_file.write_bytes(gzip.compress(text.replace("abc", "abd").encode()))
    else:
        nb_file.unlink()
    with pytest.raises(ext.RecordError) as error:
        ext.read_record("part1/chapter01")
    message = str(error.value)
    assert "_execution_record/part1/chapter01.json cannot be read" in message
    assert "build the book to rewrite it" in message
    assert ext.record_problems() == [message] or message in ext.record_problems()
    log.lines.clear()
    assert build(monkeypatch, clone, cache_dir) == {"part1/chapter01"}
    assert any(line.startswith("part1/chapter01.ipynb executes: its execution record is unreadable: "
                               "_execution_record/part1/chapter01.json cannot be read") for line in log.lines)
    assert ext.read_record("part1/chapter01") is not None, "the build rewrote the record"
    assert ext.record_problems() == []


def test_a_cold_build_ignores_the_record(monkeypatch, tmp_path, corpus, log):
    clone, cache_dir = fresh_clone(monkeypatch, tmp_path)
    monkeypatch.setenv(ext.COLD_ENV, "1")
    log.lines.clear()
    assert build(monkeypatch, clone, cache_dir) == BOTH
    assert "part1/chapter01.ipynb executes: MLEXP_COLD_BUILD is set, so the execution record is not used" \
        in log.lines
    assert {o["source"] for o in getattr(clone.env, ext.ORIGINS).values()} == {"build"}
    monkeypatch.setenv(ext.COLD_ENV, "0")
    assert not ext.cold_build()


def test_a_build_that_fails_on_its_warnings_leaves_the_record_alone(monkeypatch, tmp_path, corpus, log):
    clone, cache_dir = fresh_clone(monkeypatch, tmp_path)
    (clone.root / "mlexp/bpe.py").write_text("class BPETokenizer: merges = 3\n")
    before = entry(clone, "part1/chapter02")
    assert build(monkeypatch, clone, cache_dir, warnings=1) == {"part1/chapter02"}
    assert entry(clone, "part1/chapter02") == before
    assert any("the execution record is not rewritten" in line for line in log.lines)


def test_the_status_script_names_the_stale_records(monkeypatch, tmp_path, corpus, log):
    clone, cache_dir = fresh_clone(monkeypatch, tmp_path)
    root = clone.root
    monkeypatch.setattr(ext, "ROOT", root)
    chapters = {d: root / "book" / f"{d}.ipynb" for d in BOTH}

    def status():
        return ext.record_status(chapters, ext.current_digests(list(chapters.values()), corpus))

    assert {d: s for d, (s, _) in status().items()} == {d: "current" for d in BOTH}
    (root / "mlexp/bpe.py").write_text("class BPETokenizer: merges = 3\n")
    state, words = status()["part1/chapter02"]
    assert state == "stale" and words.startswith("mlexp/bpe.py changed"), words
    assert status()["part1/chapter01"][0] == "current"
    build(monkeypatch, clone, cache_dir)
    assert status()["part1/chapter02"][0] == "current"


def test_the_record_names_only_inputs_that_exist(monkeypatch, tmp_path, corpus, log):
    clone, _ = fresh_clone(monkeypatch, tmp_path)
    monkeypatch.setattr(ext, "ROOT", clone.root)
    assert ext.record_problems() == []
    (clone.root / "mlexp/bpe.py").unlink()
    problems = ext.record_problems()
    assert len(problems) == 1 and "_execution_record/part1/chapter02.json records inputs that no longer " \
        "exist (mlexp/bpe.py, module mlexp.bpe)" in problems[0], problems
    shutil.rmtree(clone.root / "book/part1")
    assert any("book/part1/chapter01.ipynb, which no longer exists" in p for p in ext.record_problems())


def seed_section_doctree(caption: str) -> nodes.document:
    source = (f"Anatomy\n=======\n\nHands-on\n\nAcross three seeds\n------------------\n\n"
              f".. table:: {caption}\n\n   ===  ===\n   a    b\n   ===  ===\n   1    2\n   ===  ===\n")
    doctree = new_document("chapter", get_default_settings(Parser))
    Parser().parse(source, doctree)
    return doctree


@pytest.mark.parametrize("source", ["record", "build", "cache"])
def test_the_seed_caption_stays_the_chapters_own_line(source):
    """Where a run came from is the evidence page's to say: the reader's caption is left as
    the chapter wrote it, whatever the run's origin."""
    doctree = seed_section_doctree("Seeds 0, 1 and 2, where seed 0 is this page's run.")
    origin = {"source": source, "machine": "Test CPU (AVX2)", "date": "2026-12-01T10:00:00+00:00"}
    env = types.SimpleNamespace(**{ext.ORIGINS: {"part1/chapter01": origin}})
    ext.say_where_runs_came_from(types.SimpleNamespace(env=env), doctree, "part1/chapter01")
    caption = next(doctree.findall(nodes.table)).next_node(nodes.title).astext()
    assert caption == "Seeds 0, 1 and 2, where seed 0 is this page's run."


def test_the_evidence_page_says_where_each_run_came_from():
    from mlexp.evidence import evidencepage

    chapter = types.SimpleNamespace(origin={
        "source": "record", "machine": "Test CPU (AVX2)", "date": "2026-12-01T10:00:00+00:00",
        "commit": "0123456789abcdef", "execution_seconds": 420.0})
    made = evidencepage.ChapterEvidence.made.fget(chapter)
    assert made == ("taken from the book's execution record, not executed by this build: made on "
                    "Test CPU (AVX2) on 2026-12-01, in 7.0 min; recorded at commit 0123456789")
    chapter.origin = {**chapter.origin, "source": "build"}
    assert evidencepage.ChapterEvidence.made.fget(chapter).startswith("made by this build on Test CPU")


TINY_CELL = """\
import json, sys
sys.path.insert(0, "../..")
import mlexp.training.data
from IPython.display import Markdown
from myst_nb import glue
machine = {"kind": "fp32", "name": "Tiny CPU (AVX2)", "capability": "AVX2", "threads": 1}
modules = sorted(n for n in sys.modules if n.split(".")[0] == "mlexp")
glue("seed_provenance", json.dumps({"modules": modules, "machine": machine}), display=False)
table = "```{table} This page ran on Tiny CPU (AVX2).\\n| a | b |\\n|---|---|\\n| 1 | 2 |\\n```"
glue("seed_table", Markdown(table), display=False)
"""
SEED_SECTION = "## Across three seeds\n\n```{glue:md} seed_table\n:format: myst\n```\n"


def test_a_fresh_clone_of_a_tiny_book_executes_nothing(tmp_path):
    """End to end: Jupyter Book builds a one-chapter book, which writes its record; a copy with
    the record and an empty cache executes nothing, and its page says where the run came from."""
    first = tiny_book(tmp_path / "a", {
        "mlexp/training/precision.py": "import types\n\ndef arithmetic(device):\n"
                                       "    return types.SimpleNamespace(kind='fp32')\n",
    })
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell("# One"),
                                         nbformat.v4.new_code_cell(TINY_CELL),
                                         nbformat.v4.new_markdown_cell(SEED_SECTION)])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, first / "book/part1/chapter01.ipynb")

    jupyter_book = str(pathlib.Path(sys.executable).with_name("jupyter-book"))
    env = {k: v for k, v in os.environ.items() if k != ext.COLD_ENV}
    env["CUDA_VISIBLE_DEVICES"] = ""  # the recorded run is a CPU's: so is this build

    def jb(clone: pathlib.Path, cache: str) -> subprocess.CompletedProcess:
        result = subprocess.run([jupyter_book, "build", "book/", "-W", "--keep-going"], cwd=clone,
                                env={**env, ext.CACHE_ENV: str(tmp_path / cache)},
                                capture_output=True, text=True, timeout=300)
        assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
        return result

    made = jb(first, "cache-a")
    assert "Executing notebook" in made.stdout
    assert "part1/chapter01.ipynb executes: the execution record holds no run of it" in made.stdout
    record = json.loads((first / ext.RECORD_DIR / "part1/chapter01.json").read_text())
    assert record["device"]["arithmetic"] == "fp32" and record["made"]["machine"] == "Tiny CPU (AVX2)"

    second = tmp_path / "elsewhere" / "b"
    shutil.copytree(first, second, ignore=shutil.ignore_patterns("_build"))
    taken = jb(second, "cache-b")
    assert "Executing notebook" not in taken.stdout and "Using cached notebook" in taken.stdout
    assert "part1/chapter01.ipynb is taken from the execution record, not executed" in taken.stdout
    page = (second / "_build/html/part1/chapter01.html").read_text()
    caption = page.split("<caption>")[1].split("</caption>")[0]
    assert '<span class="caption-text">This page ran on Tiny CPU (AVX2).</span>' in caption, caption
    assert (second / ext.RECORD_DIR / "part1/chapter01.json").read_text() == \
        (first / ext.RECORD_DIR / "part1/chapter01.json").read_text(), "an unchanged run was rewritten"


def test_the_repositorys_record_is_readable_and_names_only_inputs_that_exist():
    """Every entry in _execution_record/ reads, belongs with its notebook, and names a chapter,
    files and modules that exist; the whole record stays under 4 MB."""
    assert ext.ROOT == ROOT
    problems = ext.record_problems()
    assert not problems, "\n".join(problems)


def test_every_chapter_has_a_current_record_after_the_build():
    """The build that the tests follow writes the record of every chapter it ran, so a chapter
    whose record is missing or stale here would make every fresh clone execute it."""
    chapters = {_docname(nb): nb for nb in sorted((ROOT / "book").glob("part*/chapter*.ipynb"))}
    digests = ext.current_digests(list(chapters.values()), ext.corpus_file())
    status = ext.record_status(chapters, digests)
    assert status and all(state == "current" for state, _ in status.values()), status


def _docname(notebook: pathlib.Path) -> str:
    return notebook.relative_to(ROOT / "book").with_suffix("").as_posix()


def test_the_build_device_kind_follows_the_chapters_rule():
    """What mlexp.training.precision and the chapters' default device report for this machine,
    and what a chapter's glued machine says for its run."""
    import torch

    from mlexp.training import precision
    from mlexp.training.train import default_device

    device = default_device()
    assert BUILD_DEVICE() == {"device": device.type, "arithmetic": precision.arithmetic(device).kind}
    assert ext.run_device({"machine": {"kind": "fp32", "capability": "sm_90"}}) == GPU
    assert ext.run_device({"machine": {"kind": "cpu-fp32", "capability": "AVX512"}}) == CPU
    assert ext.run_device({}) is None
    assert torch.device(device.type).type in {"cpu", "cuda"}
