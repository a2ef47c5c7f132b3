"""Run a chapter again when the code or data its cached run read has changed, and only then.

Jupyter Book's execution cache (jupyter-cache) finds a notebook's earlier run by a hash of
its code cells alone. A change to ``mlexp``, to the corpus, to the requirements or to a
chapter's stored seed runs (which its seed table reads) would otherwise leave the old
outputs on the page. So this extension records, beside the cache, what each cached run
read, and before the build drops every chapter's cached run whose inputs have changed
since. A chapter's inputs are the ``mlexp`` modules its kernel loaded (the chapter glues
their names as ``"modules"`` in ``seed_provenance``; a chapter that glues no such list
depends on every file under ``mlexp/``), its own ``<chapter>.seeds.json``, the corpus and
``requirements.txt``. An edit to one module thus runs again only the chapters that loaded
it, an edit to the corpus or the requirements runs every chapter again, and an edit to the
prose runs none. The log says which chapters run again and why.

The record is ``mlexp-inputs.json`` in the cache folder. It is keyed by the cache's own key
for a run (the hash of the notebook's code cells) and holds the SHA-256 of each input by
its path in the repository, never an absolute path, so clones at other places can share
one cache folder: set ``MLEXP_EXECUTION_CACHE`` to a folder outside the checkout, and a
second clone of the same commit executes nothing. Unset, the cache stays in
``_build/.jupyter_cache``. The record is written when a build has run to its end, from the
glue files myst-nb leaves in ``_build/jupyter_execute`` (also for runs taken from the
cache); a run the build cached without recording its inputs, because the build stopped
early, counts as stale. Sphinx reads again only documents whose source changed, so the
extension also has it read every chapter without a current cached run, which executes it
(an empty or deleted cache folder thus makes a cold build), and every chapter whose pages in
this checkout show another run than the cached one, which another clone made.
"""

from __future__ import annotations

import ast
import dataclasses
import hashlib
import json
import os
import pathlib
import sys

import nbformat
from jupyter_cache import get_cache
from jupyter_cache.base import JupyterCacheAbstract
from jupyter_cache.cache.db import NbCacheRecord
from sphinx.application import Sphinx
from sphinx.config import Config
from sphinx.environment import BuildEnvironment
from sphinx.util import logging

logger = logging.getLogger(__name__)
ROOT = pathlib.Path(__file__).resolve().parents[2]
CACHE_ENV = "MLEXP_EXECUTION_CACHE"
STAMP = "mlexp-inputs.json"
CORPUS = "corpus"  # the corpus's key among the inputs: its path differs between machines
PROVENANCE_KEY = "seed_provenance"
SHOWN = "mlexp_shown_runs"  # the environment's attribute: docname -> the cached run its pages show

Digests = dict[str, str | None]  # path in the repository (or CORPUS) -> SHA-256, None if absent


@dataclasses.dataclass
class BuildInputs:
    """What the build found at its start, kept on the Sphinx app until the build ends."""

    cache_dir: pathlib.Path
    digests: Digests  # every possible input, read before any chapter runs
    chapters: dict[str, pathlib.Path]  # docname -> notebook
    to_read: set[str]  # docnames Sphinx must read even if their source is unchanged
    read: set[str] = dataclasses.field(default_factory=set)  # docnames this build reads


def _sha256(path: pathlib.Path) -> str | None:
    return hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else None


def _relative(path: pathlib.Path) -> str:
    return path.relative_to(ROOT).as_posix()


def seeds_file(notebook: pathlib.Path) -> pathlib.Path:
    return notebook.with_name(notebook.stem + ".seeds.json")


def corpus_file() -> pathlib.Path:
    """The corpus the chapters read, found the way mlexp finds it (``$MLEXP_DATA`` or the user cache)."""
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    from mlexp.training.data import corpus_path

    return corpus_path()


def current_digests(chapters: list[pathlib.Path], corpus: pathlib.Path) -> Digests:
    """The digest of everything a chapter can read: every mlexp source, each chapter's seed
    data, the corpus and the requirements."""
    digests: Digests = {_relative(p): _sha256(p) for p in sorted((ROOT / "mlexp").rglob("*.py"))}
    digests.update({_relative(seeds_file(c)): _sha256(seeds_file(c)) for c in chapters})
    digests["requirements.txt"] = _sha256(ROOT / "requirements.txt")
    digests[CORPUS] = _sha256(corpus)
    return digests


def module_file(name: str, digests: Digests) -> str:
    """``mlexp.training.train`` -> ``mlexp/training/train.py``; a package -> its ``__init__.py``."""
    path = name.replace(".", "/")
    package = f"{path}/__init__.py"
    return package if package in digests else f"{path}.py"


def chapter_inputs(notebook: pathlib.Path, modules: list[str] | None, digests: Digests) -> Digests:
    """A chapter's inputs and their digests: the files of ``modules`` (every mlexp file when
    ``None``), its seed data, the corpus and the requirements."""
    if modules is None:
        library = [key for key in digests if key.startswith("mlexp/")]
    else:
        library = [module_file(name, digests) for name in modules]
    keys = [*library, _relative(seeds_file(notebook)), CORPUS, "requirements.txt"]
    return {key: digests.get(key) for key in keys}


def changes(recorded: Digests, current: Digests) -> str:
    """What differs between two sets of inputs, in words ("" when nothing does)."""
    groups: dict[str, list[str]] = {"changed": [], "added": [], "removed": []}
    for key in sorted(recorded.keys() | current.keys()):
        before, now = recorded.get(key), current.get(key)
        if before != now:
            name = "the corpus" if key == CORPUS else key
            groups["added" if before is None else "removed" if now is None else "changed"].append(name)
    return "; ".join(f"{', '.join(names)} {what}" for what, names in groups.items() if names)


def glued_modules(glue_file: pathlib.Path) -> list[str] | None:
    """The mlexp modules a chapter's kernel loaded, as its ``seed_provenance`` glue lists them
    in myst-nb's ``<chapter>.glue.json``; ``None`` when it lists none."""
    if not glue_file.is_file():
        return None
    output = json.loads(glue_file.read_text(encoding="utf-8")).get(PROVENANCE_KEY)
    if output is None:
        return None
    text = "".join(output.get("data", {}).get("text/plain", ""))
    try:
        provenance = json.loads(ast.literal_eval(text))
    except (ValueError, SyntaxError, TypeError):
        return None
    modules = provenance.get("modules") if isinstance(provenance, dict) else None
    return sorted(modules) if isinstance(modules, list) else None


def read_stamp(cache_dir: pathlib.Path) -> dict[str, dict]:
    path = cache_dir / STAMP
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}


def write_stamp(cache: JupyterCacheAbstract, cache_dir: pathlib.Path, stamp: dict[str, dict]) -> None:
    """Write the record, keeping only the runs still in the cache; atomic, for clones that
    share the folder."""
    cached = {record.hashkey for record in cache.list_cache_records()}
    kept = {key: stamp[key] for key in sorted(stamp) if key in cached}
    tmp = cache_dir / f"{STAMP}.{os.getpid()}.tmp"
    tmp.write_text(json.dumps(kept, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    os.replace(tmp, cache_dir / STAMP)


def _cached_run(cache: JupyterCacheAbstract, notebook: pathlib.Path) -> NbCacheRecord | None:
    """The cached run of the notebook's current code cells, matched by their hash, not by path."""
    try:
        return cache.match_cache_notebook(nbformat.read(notebook, as_version=4))
    except KeyError:
        return None


def run_id(record: NbCacheRecord) -> str:
    """One cached run: a run made again for the same code has the same hashkey (and may reuse
    the primary key), not the same time."""
    return f"{record.hashkey} {record.created.isoformat()}"


def drop_stale_runs(cache_dir: pathlib.Path, chapters: dict[str, pathlib.Path],
                    digests: Digests) -> dict[str, str | None]:
    """Drop each chapter's cached run whose inputs changed since it ran; return each chapter's
    current cached run, ``None`` for a chapter that has none and will run."""
    cache = get_cache(cache_dir)
    stamp = read_stamp(cache_dir)
    runs: dict[str, str | None] = {}
    for docname, notebook in sorted(chapters.items()):
        name = f"{docname}{notebook.suffix}"
        record = _cached_run(cache, notebook)
        runs[docname] = None
        if record is None:
            logger.info(f"{name} runs: the execution cache holds no run of its code cells")
            continue
        entry = stamp.pop(record.hashkey, None)
        if entry is None:
            why = "its cached run has no record of the inputs it read"
        else:
            why = changes(entry["inputs"], chapter_inputs(notebook, entry["modules"], digests))
        if why:
            logger.info(f"{name} runs again: {why}")
            cache.remove_cache(record.pk)
        else:
            logger.info(f"{name}: its cached run is current")
            stamp[record.hashkey] = entry
            runs[docname] = run_id(record)
    write_stamp(cache, cache_dir, stamp)
    return runs


def record_inputs(inputs: BuildInputs, glue_folder: pathlib.Path) -> None:
    """Record, for each chapter this build read, the inputs of the cached run it used or made."""
    cache = get_cache(inputs.cache_dir)
    stamp = read_stamp(inputs.cache_dir)
    for docname in sorted(inputs.read & inputs.chapters.keys()):
        notebook = inputs.chapters[docname]
        record = _cached_run(cache, notebook)
        if record is not None:
            modules = glued_modules(glue_folder.joinpath(*docname.split("/")).with_suffix(".glue.json"))
            stamp[record.hashkey] = {
                "modules": modules,
                "inputs": chapter_inputs(notebook, modules, inputs.digests),
            }
    write_stamp(cache, inputs.cache_dir, stamp)


# ---------- Sphinx events ----------

def use_cache_folder(app: Sphinx, config: Config) -> None:
    """``$MLEXP_EXECUTION_CACHE`` names the cache folder; myst-nb reads the setting at
    ``builder-inited``, after this."""
    folder = os.environ.get(CACHE_ENV)
    if folder:
        config.nb_execution_cache_path = str(pathlib.Path(folder).expanduser().resolve())


def cache_folder(app: Sphinx) -> pathlib.Path:
    """The folder myst-nb caches in: the setting, else ``.jupyter_cache`` beside the HTML."""
    return pathlib.Path(app.config.nb_execution_cache_path or pathlib.Path(app.outdir).parent / ".jupyter_cache")


def check_cached_runs(app: Sphinx) -> None:
    app.execution_inputs = None
    if app.config.nb_execution_mode != "cache":
        return
    source = pathlib.Path(app.srcdir)
    chapters = {
        notebook.relative_to(source).with_suffix("").as_posix(): notebook
        for notebook in sorted(source.glob("part*/*.ipynb"))
    }
    cache_dir = cache_folder(app)
    cache_dir.mkdir(parents=True, exist_ok=True)
    digests = current_digests(list(chapters.values()), corpus_file())
    runs = drop_stale_runs(cache_dir, chapters, digests)
    # Sphinx reads again only documents whose source changed (a new environment reads all).
    # Also read every chapter without a cached run, which executes it, and every chapter
    # whose pages in this checkout show another run than the cached one: another clone
    # sharing the cache ran it again.
    to_read = {docname for docname, run in runs.items() if run is None}
    shown: dict[str, str | None] | None = getattr(app.env, SHOWN, None)
    for docname, run in sorted(runs.items()):
        if shown is not None and run is not None and shown.get(docname, run) != run:
            logger.info(f"{docname}.ipynb is read again: this checkout's pages show another run than the cached one")
            to_read.add(docname)
    app.execution_inputs = BuildInputs(cache_dir, digests, chapters, to_read)


def chapters_to_read(app: Sphinx, env: BuildEnvironment, added: set[str], changed: set[str],
                     removed: set[str]) -> list[str]:
    return sorted(app.execution_inputs.to_read) if app.execution_inputs else []


def note_read_docs(app: Sphinx, env: BuildEnvironment, docnames: list[str]) -> None:
    """Remember which chapters this build reads: their glue files are this build's."""
    if app.execution_inputs:
        app.execution_inputs.read.update(docnames)


def note_shown_runs(app: Sphinx, env: BuildEnvironment) -> list[str]:
    """Keep, with this checkout's pickled environment, the cached run each chapter read shows."""
    if app.execution_inputs:
        cache = get_cache(app.execution_inputs.cache_dir)
        shown = getattr(env, SHOWN, {})
        for docname in app.execution_inputs.read & app.execution_inputs.chapters.keys():
            record = _cached_run(cache, app.execution_inputs.chapters[docname])
            shown[docname] = run_id(record) if record else None
        setattr(env, SHOWN, shown)
    return []


def stamp_cached_runs(app: Sphinx, exception: Exception | None) -> None:
    """Record the inputs of the runs this build used or made, if it ran to its end."""
    if exception is None and app.execution_inputs:
        record_inputs(app.execution_inputs, pathlib.Path(app.env.mystnb_config.output_folder))


def setup(app: Sphinx) -> dict:
    app.connect("config-inited", use_cache_folder)
    app.connect("builder-inited", check_cached_runs)
    app.connect("env-get-outdated", chapters_to_read)
    app.connect("env-before-read-docs", note_read_docs)
    app.connect("env-updated", note_shown_runs)
    app.connect("build-finished", stamp_cached_runs)
    return {"version": "2.0", "parallel_read_safe": True, "parallel_write_safe": True}
