"""A chapter's cached run is dropped when, and only when, something it read has changed.

Fast: no Jupyter Book build. Each test builds a fake checkout (a small ``mlexp`` package,
the requirements, two chapter notebooks with seed data) and runs simulated builds against
a real jupyter-cache folder: the extension's event handlers run in Sphinx's order, and a
chapter "executes" as myst-nb's cache client does it (match the cache by the code cells,
else run and cache the notebook), its kernel gluing the mlexp modules it loaded in
``seed_provenance``, which myst-nb writes to ``<chapter>.glue.json``.
"""

from __future__ import annotations

import importlib.util
import json
import os
import pathlib
import shutil
import subprocess
import sys
import types

import nbformat
import pytest
from jupyter_cache import get_cache
from jupyter_cache.base import CacheBundleIn
from myst_nb.ext.glue import GLUE_PREFIX, extract_glue_data

ROOT = pathlib.Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("execution_fingerprint", ROOT / "book/_ext/execution_fingerprint.py")
ext = importlib.util.module_from_spec(spec)
sys.modules[spec.name] = ext  # for its dataclass, and so that Sphinx loads this copy
spec.loader.exec_module(ext)

LIBRARY = {
    "mlexp/__init__.py": "from .training import train\n",
    "mlexp/training/__init__.py": "",
    "mlexp/training/train.py": "def train_lm(): return 1\n",
    "mlexp/evidence/__init__.py": "",
    "mlexp/evidence/seedtable.py": "def seed_section(): return 2\n",
    "mlexp/bpe.py": "class BPETokenizer: pass\n",
    "mlexp/attention.py": "def attend(): return 3\n",
}
SHARED = ["mlexp", "mlexp.evidence", "mlexp.evidence.seedtable", "mlexp.training", "mlexp.training.train"]
# The modules each chapter's kernel loads: only Chapter 2 tokenizes with BPE.
MODULES: dict[str, list[str] | None] = {
    "part1/chapter01": SHARED,
    "part1/chapter02": sorted([*SHARED, "mlexp.bpe"]),
}


class Log:
    def __init__(self) -> None:
        self.lines: list[str] = []

    def info(self, message: str) -> None:
        self.lines.append(message)


@pytest.fixture
def log(monkeypatch) -> Log:
    log = Log()
    monkeypatch.setattr(ext, "logger", log)
    return log


@pytest.fixture
def corpus(monkeypatch, tmp_path) -> pathlib.Path:
    path = tmp_path / "data" / "tinyshakespeare.txt"
    path.parent.mkdir()
    path.write_text("First Citizen:\n")
    monkeypatch.setattr(ext, "corpus_file", lambda: path)
    return path


class Checkout:
    """A clone of the repository and, once built, Sphinx's environment pickled in its _build."""

    def __init__(self, root: pathlib.Path) -> None:
        self.root = root
        self.env: types.SimpleNamespace | None = None
        self.read: set[str] = set()  # the chapters its last build read


def checkout(root: pathlib.Path) -> Checkout:
    """A fake clone of the repository at ``root``."""
    for name, text in LIBRARY.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    (root / "requirements.txt").write_text("torch>=2.5\n")
    for docname in MODULES:
        notebook = root / "book" / f"{docname}.ipynb"
        notebook.parent.mkdir(parents=True, exist_ok=True)
        nb = nbformat.v4.new_notebook(cells=[
            nbformat.v4.new_markdown_cell(f"# {docname}"),
            nbformat.v4.new_code_cell(f"import mlexp\nprint({docname!r})"),
        ])
        nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
        nbformat.write(nb, notebook)
        notebook.with_name(notebook.stem + ".seeds.json").write_text('{"runs": []}')
    return Checkout(root)


def glue_output(modules: list[str] | None) -> nbformat.NotebookNode:
    """What ``mlexp.glue("seed_provenance", json.dumps(...))`` leaves in the notebook."""
    provenance = {"fingerprint": {"code": "abc"}} | ({"modules": modules} if modules is not None else {})
    return nbformat.v4.new_output(
        "display_data",
        data={GLUE_PREFIX + "text/plain": repr(json.dumps(provenance, sort_keys=True))},
        metadata={"scrapbook": {"name": ext.PROVENANCE_KEY, "mime_prefix": GLUE_PREFIX}},
    )


def build(monkeypatch, clone: Checkout, cache_dir: pathlib.Path,
          modules: dict[str, list[str] | None] = MODULES, warnings: int = 0) -> set[str]:
    """One ``jupyter-book build`` of ``clone``; returns the chapters it executed.

    A checkout's first build reads every document; later ones read what Sphinx finds changed
    (nothing here: no notebook is edited) and what the extension marks, as Sphinx does."""
    root = clone.root
    monkeypatch.setattr(ext, "ROOT", root)
    build_dir = root / "_build"
    output = build_dir / "jupyter_execute"
    added = set(MODULES) if clone.env is None else set()
    if clone.env is None:
        clone.env = types.SimpleNamespace(mystnb_config=types.SimpleNamespace(output_folder=str(output)))
    env = clone.env
    config = types.SimpleNamespace(nb_execution_mode="cache", nb_execution_cache_path=str(cache_dir))
    app = types.SimpleNamespace(config=config, outdir=str(build_dir / "html"), srcdir=str(root / "book"), env=env,
                                _warncount=warnings, keep_going=True)  # as -W --keep-going sets it

    ext.check_cached_runs(app)  # builder-inited
    docnames = sorted(added | set(ext.chapters_to_read(app, env, added, set(), set())))  # env-get-outdated
    clone.read = set(docnames)
    ext.note_read_docs(app, env, docnames)  # env-before-read-docs
    cache = get_cache(cache_dir)
    executed = set()
    for docname in docnames:
        nb = nbformat.read(root / "book" / f"{docname}.ipynb", as_version=4)
        try:
            cache.match_cache_notebook(nb)
            _, nb = cache.merge_match_into_notebook(nb)
        except KeyError:
            nb.cells[1].outputs = [glue_output(modules[docname])]
            cache.cache_notebook_bundle(CacheBundleIn(nb, str(root / "book" / f"{docname}.ipynb")),
                                        check_validity=False, overwrite=True)
            executed.add(docname)
        glue = extract_glue_data(nb, [0] * len(nb.cells), None)
        (output / docname).parent.mkdir(parents=True, exist_ok=True)
        (output / f"{docname}.glue.json").write_text(json.dumps(glue))
    ext.note_shown_runs(app, env)  # env-updated
    ext.stamp_cached_runs(app, None)  # build-finished
    return executed


def cached(cache_dir: pathlib.Path) -> dict[str, int]:
    """The cached runs, by chapter: chapter name -> the record's primary key."""
    return {pathlib.Path(r.uri).stem: r.pk for r in get_cache(cache_dir).list_cache_records()}


def test_an_edit_to_one_module_runs_only_the_chapters_that_loaded_it(monkeypatch, tmp_path, corpus, log):
    """The old rule emptied the whole cache on any mlexp edit; Chapter 1's run must survive."""
    clone, cache_dir = checkout(tmp_path / "clone"), tmp_path / "cache"
    root = clone.root
    assert build(monkeypatch, clone, cache_dir) == {"part1/chapter01", "part1/chapter02"}
    assert build(monkeypatch, clone, cache_dir) == set(), "nothing changed: nothing runs"
    before = cached(cache_dir)

    (root / "mlexp/bpe.py").write_text("class BPETokenizer: merges = 1\n")
    log.lines.clear()
    assert build(monkeypatch, clone, cache_dir) == {"part1/chapter02"}
    assert cached(cache_dir)["chapter01"] == before["chapter01"], "Chapter 1 never loaded mlexp.bpe"
    assert "part1/chapter02.ipynb runs again: mlexp/bpe.py changed" in log.lines
    assert "part1/chapter01.ipynb: its cached run is current" in log.lines

    (root / "mlexp/training/train.py").write_text("def train_lm(): return 2\n")
    assert build(monkeypatch, clone, cache_dir) == {"part1/chapter01", "part1/chapter02"}
    (root / "mlexp/attention.py").write_text("def attend(): return 4\n")
    assert build(monkeypatch, clone, cache_dir) == set(), "no chapter loaded mlexp.attention"


@pytest.mark.parametrize("edit", ["corpus", "requirements"])
def test_the_corpus_or_the_requirements_run_every_chapter(monkeypatch, tmp_path, corpus, log, edit):
    clone, cache_dir = checkout(tmp_path / "clone"), tmp_path / "cache"
    build(monkeypatch, clone, cache_dir)
    if edit == "corpus":
        corpus.write_text("Second Citizen:\n")
    else:
        (clone.root / "requirements.txt").write_text("torch>=2.6\n")
    assert build(monkeypatch, clone, cache_dir) == {"part1/chapter01", "part1/chapter02"}
    what = "the corpus" if edit == "corpus" else "requirements.txt"
    assert f"part1/chapter01.ipynb runs again: {what} changed" in log.lines


def test_new_seed_data_runs_only_its_chapter(monkeypatch, tmp_path, corpus, log):
    """A chapter's seed table reads its seed data: new data runs that chapter again, not the others."""
    clone, cache_dir = checkout(tmp_path / "clone"), tmp_path / "cache"
    root = clone.root
    build(monkeypatch, clone, cache_dir)
    (root / "book/part1/chapter01.seeds.json").write_text('{"runs": [{"offset": 1}]}')
    assert build(monkeypatch, clone, cache_dir) == {"part1/chapter01"}
    assert "part1/chapter01.ipynb runs again: book/part1/chapter01.seeds.json changed" in log.lines


def test_a_second_clone_finds_the_runs_of_the_first(monkeypatch, tmp_path, corpus, log):
    """Records are matched by the code cells' hash and inputs by their paths in the repository,
    so a clone elsewhere with the same content executes nothing."""
    first, cache_dir = checkout(tmp_path / "clone-a"), tmp_path / "shared-cache"
    build(monkeypatch, first, cache_dir)
    second = Checkout(tmp_path / "elsewhere" / "clone-b")
    shutil.copytree(first.root, second.root, ignore=shutil.ignore_patterns("_build"))
    log.lines.clear()
    assert build(monkeypatch, second, cache_dir) == set()
    assert second.read == {"part1/chapter01", "part1/chapter02"}, "a fresh checkout reads every chapter"
    assert log.lines == ["part1/chapter01.ipynb: its cached run is current",
                         "part1/chapter02.ipynb: its cached run is current"]
    assert str(tmp_path) not in (cache_dir / ext.STAMP).read_text()


def test_a_chapter_another_clone_ran_again_is_read_again(monkeypatch, tmp_path, corpus, log):
    """Both clones get the same edit; the second builds first. The first executes nothing, but
    must read the chapter again: its pages still show the run from before the edit."""
    first, cache_dir = checkout(tmp_path / "clone-a"), tmp_path / "shared-cache"
    build(monkeypatch, first, cache_dir)
    second = Checkout(tmp_path / "clone-b")
    shutil.copytree(first.root, second.root, ignore=shutil.ignore_patterns("_build"))
    build(monkeypatch, second, cache_dir)
    for clone in (first, second):
        (clone.root / "mlexp/bpe.py").write_text("class BPETokenizer: merges = 2\n")
    assert build(monkeypatch, second, cache_dir) == {"part1/chapter02"}
    assert build(monkeypatch, first, cache_dir) == set()
    assert first.read == {"part1/chapter02"}
    assert ("part1/chapter02.ipynb is read again: this checkout's pages show another run than the cached one"
            in log.lines)
    assert build(monkeypatch, first, cache_dir) == set() and first.read == set()


def test_a_chapter_without_a_module_list_depends_on_every_mlexp_file(monkeypatch, tmp_path, corpus, log):
    """Executed notebooks from before the seed provenance listed its modules."""
    clone, cache_dir = checkout(tmp_path / "clone"), tmp_path / "cache"
    root = clone.root
    modules = {**MODULES, "part1/chapter02": None}
    build(monkeypatch, clone, cache_dir, modules)
    (root / "mlexp/attention.py").write_text("def attend(): return 4\n")
    assert build(monkeypatch, clone, cache_dir, modules) == {"part1/chapter02"}
    (root / "mlexp/rope.py").write_text("def rotate(): pass\n")
    assert build(monkeypatch, clone, cache_dir, modules) == {"part1/chapter02"}
    assert "part1/chapter02.ipynb runs again: mlexp/rope.py added" in log.lines


def test_a_run_cached_without_a_record_of_its_inputs_runs_again(monkeypatch, tmp_path, corpus, log):
    """A build that stopped before its end cached runs without recording their inputs. (The
    execution record would stand in for them; a cold build ignores it.)"""
    clone, cache_dir = checkout(tmp_path / "clone"), tmp_path / "cache"
    build(monkeypatch, clone, cache_dir)
    monkeypatch.setenv(ext.COLD_ENV, "1")
    (cache_dir / ext.STAMP).unlink()
    assert build(monkeypatch, clone, cache_dir) == {"part1/chapter01", "part1/chapter02"}
    assert build(monkeypatch, clone, cache_dir) == set()


def test_an_empty_cache_folder_runs_every_chapter_in_a_built_checkout(monkeypatch, tmp_path, corpus, log):
    """Sphinx reads again only changed documents; the extension marks the uncached chapters.
    (With the execution record the chapters would be taken from it; a cold build ignores it.)"""
    clone = checkout(tmp_path / "clone")
    build(monkeypatch, clone, tmp_path / "cache")
    monkeypatch.setenv(ext.COLD_ENV, "1")
    shutil.rmtree(tmp_path / "cache")
    assert build(monkeypatch, clone, tmp_path / "cache") == {"part1/chapter01", "part1/chapter02"}
    assert "part1/chapter01.ipynb runs: the execution cache holds no run of its code cells" in log.lines


def test_the_environment_variable_names_the_cache_folder(monkeypatch, tmp_path):
    config = types.SimpleNamespace(nb_execution_cache_path="")
    app = types.SimpleNamespace(config=config, outdir=str(tmp_path / "_build" / "html"))
    monkeypatch.delenv(ext.CACHE_ENV, raising=False)
    ext.use_cache_folder(app, config)
    assert ext.cache_folder(app) == tmp_path / "_build" / ".jupyter_cache"
    monkeypatch.setenv(ext.CACHE_ENV, str(tmp_path / "shared" / ".." / "cache"))
    ext.use_cache_folder(app, config)
    assert config.nb_execution_cache_path == str(tmp_path / "cache")
    assert ext.cache_folder(app) == tmp_path / "cache"


def test_myst_nb_caches_in_the_folder_the_variable_names(monkeypatch, tmp_path, corpus, log):
    """myst-nb reads nb_execution_cache_path at builder-inited, after config-inited sets it."""
    from sphinx.application import Sphinx

    root = checkout(tmp_path / "clone").root
    monkeypatch.setattr(ext, "ROOT", root)
    monkeypatch.setenv(ext.CACHE_ENV, str(tmp_path / "cache"))
    (root / "book" / "conf.py").write_text(
        'extensions = ["myst_nb", "execution_fingerprint"]\nnb_execution_mode = "cache"\n')
    app = Sphinx(str(root / "book"), str(root / "book"), str(root / "_build" / "html"),
                 str(root / "_build" / ".doctrees"), "html", status=None, warning=None)
    assert app.env.mystnb_config.execution_cache_path == str(tmp_path / "cache")
    assert (tmp_path / "cache" / ext.STAMP).is_file()


def test_module_names_resolve_to_their_files():
    digests = {"mlexp/__init__.py": "a", "mlexp/training/__init__.py": "b", "mlexp/training/train.py": "c"}
    assert ext.module_file("mlexp", digests) == "mlexp/__init__.py"
    assert ext.module_file("mlexp.training", digests) == "mlexp/training/__init__.py"
    assert ext.module_file("mlexp.training.train", digests) == "mlexp/training/train.py"


TINY_CONFIG = """\
title: tiny
only_build_toc_files: true
execute:
  execute_notebooks: cache
sphinx:
  local_extensions:
    execution_fingerprint: book/_ext
"""
TINY_CELL = """\
import json, sys
sys.path.insert(0, "../..")
import mlexp.training.data
from myst_nb import glue
glue("seed_provenance", json.dumps({"modules": sorted(n for n in sys.modules if n.split(".")[0] == "mlexp")}))
"""


def tiny_book(root: pathlib.Path, files: dict[str, str] | None = None) -> pathlib.Path:
    """A checkout of a one-chapter book with the real extension, a stand-in mlexp and corpus,
    and ``files`` besides; the chapter notebook is the caller's to write."""
    for name, text in {
        "_config.yml": TINY_CONFIG,
        "book/_toc.yml": "format: jb-book\nroot: intro\nchapters:\n  - file: part1/chapter01\n",
        "book/intro.md": "# Intro\n",
        "mlexp/__init__.py": "",
        "mlexp/training/__init__.py": "",
        "mlexp/training/data.py": "import pathlib\n\ndef corpus_path():\n"
                                  "    return pathlib.Path(__file__).parents[2] / 'corpus.txt'\n",
        "corpus.txt": "First Citizen:\n",
        "requirements.txt": "torch\n",
        **(files or {}),
    }.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    for folder in ("book/_ext", "book/part1"):
        (root / folder).mkdir(exist_ok=True)
    shutil.copy(ROOT / "book/_ext/execution_fingerprint.py", root / "book/_ext")
    return root


def test_a_second_clone_of_a_tiny_book_executes_nothing(tmp_path):
    """End to end (a few seconds): Jupyter Book builds a one-chapter book in one clone, then in a
    copy elsewhere with the same MLEXP_EXECUTION_CACHE, which takes the chapter from the cache."""
    first = tiny_book(tmp_path / "a")
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell("# One"),
                                         nbformat.v4.new_code_cell(TINY_CELL)])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, first / "book/part1/chapter01.ipynb")
    second = tmp_path / "elsewhere" / "b"
    shutil.copytree(first, second)

    env = {**os.environ, ext.CACHE_ENV: str(tmp_path / "cache")}
    jupyter_book = str(pathlib.Path(sys.executable).with_name("jupyter-book"))
    logs = [subprocess.run([jupyter_book, "build", "book/", "-W", "--keep-going"], cwd=clone, env=env,
                           capture_output=True, text=True, timeout=300) for clone in (first, second)]
    for log in logs:
        assert log.returncode == 0, log.stdout + log.stderr
    assert "Executing notebook" in logs[0].stdout
    assert "part1/chapter01.ipynb runs: the execution cache holds no run of its code cells" in logs[0].stdout
    assert "Executing notebook" not in logs[1].stdout and "Using cached notebook" in logs[1].stdout
    assert "part1/chapter01.ipynb: its cached run is current" in logs[1].stdout
    stamp = json.loads((tmp_path / "cache" / ext.STAMP).read_text())
    assert [entry["modules"] for entry in stamp.values()] == [["mlexp", "mlexp.training", "mlexp.training.data"]]
