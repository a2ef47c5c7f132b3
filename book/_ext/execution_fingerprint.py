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

**The execution record.** A cache lives on one machine; the record travels with the
repository. ``_execution_record/<docname>.ipynb.gz`` is each chapter's last executed run as the
cache stores it (code cells with their outputs and glue), gzip-compressed because its figures'
SVG text shrinks about sixfold, and ``_execution_record/<docname>.json``
what it read (the cache's hash of its code cells, the SHA-256 of each input as above), the
device and arithmetic it ran with, and where and when it was made. At the start of a build,
each chapter without a current cached run whose record matches its code cells, its inputs
and this build's device kind (a CPU or a GPU, and the arithmetic of
``mlexp.training.precision``) is put into the cache from the record, so myst-nb takes it from
there and executes nothing; any other chapter executes as before. After a CPU build that ran
to its end without a warning, every chapter whose current cached run the record lacks (a
changed chapter's new run) is written to the record, atomically, so that a change and the
record it causes are committed together; a valid entry for the same inputs stays.
``MLEXP_COLD_BUILD=1`` makes a build ignore the record (it still writes the runs the record
lacks). *The evidence at a glance* says where each chapter's run came from; a chapter's
header card names the machine that measured its hands-on time when the run came from the
record.
"""

from __future__ import annotations

import ast
import dataclasses
import datetime
import gzip
import hashlib
import json
import os
import pathlib
import subprocess
import sys

import nbformat
from docutils import nodes
from jupyter_cache import get_cache
from jupyter_cache.base import CacheBundleIn, JupyterCacheAbstract
from jupyter_cache.cache.db import NbCacheRecord, session_context
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
ORIGINS = "mlexp_run_origins"  # the environment's attribute: docname -> where its page's run came from
RECORD_DIR = "_execution_record"  # the record's folder, in the repository's root
RECORD_FORMAT = 1
RECORD_KEY = "mlexp_execution_record"  # in a cache record's data: the run came from the record
COLD_ENV = "MLEXP_COLD_BUILD"
GLUE_PREFIX = "application/papermill.record/"
_SAME_KIND = {"cpu-fp32": "fp32"}  # older runs' name for float32 on a CPU (mlexp.evidence.seedtable)

Digests = dict[str, str | None]  # path in the repository (or CORPUS) -> SHA-256, None if absent


@dataclasses.dataclass
class BuildInputs:
    """What the build found at its start, kept on the Sphinx app until the build ends."""

    cache_dir: pathlib.Path
    digests: Digests  # every possible input, read before any chapter runs
    chapters: dict[str, pathlib.Path]  # docname -> notebook
    to_read: set[str]  # docnames Sphinx must read even if their source is unchanged
    read: set[str] = dataclasses.field(default_factory=set)  # docnames this build reads
    # docname -> "cache" (a current cached run), "record" (taken from the record) or None
    # (no run: the chapter executes), as the build found it at its start
    found: dict[str, str | None] = dataclasses.field(default_factory=dict)
    device: dict[str, str] | None = None  # this build's device kind


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


# ---------- the execution record ----------

class RecordError(Exception):
    """A record entry that cannot be read; the message names the file and what to do."""


def cold_build() -> bool:
    """``MLEXP_COLD_BUILD`` set to anything but empty, 0, false or no: ignore the record."""
    return os.environ.get(COLD_ENV, "").strip().lower() not in ("", "0", "false", "no")


def record_folder() -> pathlib.Path:
    return ROOT / RECORD_DIR


NOTEBOOK_SUFFIX = ".ipynb.gz"  # a recorded run: the executed notebook, gzip-compressed


def record_files(docname: str) -> tuple[pathlib.Path, pathlib.Path]:
    """A chapter's entry (the small JSON) and its executed notebook."""
    base = record_folder().joinpath(*docname.split("/"))
    return base.with_suffix(".json"), base.with_name(base.name + NOTEBOOK_SUFFIX)


def code_hash(nb: nbformat.NotebookNode) -> str:
    """The key jupyter-cache matches a run by: a hash of the notebook's code cells."""
    from jupyter_cache.cache.main import JupyterCacheBase

    # the hash reads no database; the folder is never created
    return JupyterCacheBase(ROOT / RECORD_DIR / ".unused").create_hashed_notebook(nb)[1]


def build_device() -> dict[str, str]:
    """This build's device kind, by the chapters' own rule: CUDA when a GPU is present
    (``mlexp.training.train.default_device``), in the arithmetic of
    ``mlexp.training.precision`` (float32 on every device today)."""
    import importlib.util

    import torch

    device = "cuda" if torch.cuda.is_available() else "cpu"
    rule = ROOT / "mlexp" / "training" / "precision.py"
    if not rule.is_file():  # a checkout without the rule (the tests' tiny books)
        return {"device": device, "arithmetic": "unknown"}
    # the checkout's own rule, loaded from its file (it imports only torch)
    spec = importlib.util.spec_from_file_location("_mlexp_precision_rule", rule)
    precision = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = precision  # for its dataclasses
    spec.loader.exec_module(precision)
    return {"device": device, "arithmetic": precision.arithmetic(torch.device(device)).kind}


def device_words(kind: dict | None) -> str:
    if not kind:
        return "an unrecorded device"
    device = {"cuda": "a GPU", "cpu": "a CPU"}.get(kind.get("device"), str(kind.get("device")))
    arithmetic = {"fp32": "float32"}.get(kind.get("arithmetic"), str(kind.get("arithmetic")))
    return f"{device} in {arithmetic}"


def glued_value(nb: nbformat.NotebookNode, key: str) -> str | None:
    """The text a notebook's kernel glued under ``key`` (plain text or Markdown)."""
    for cell in nb.get("cells", []):
        for output in cell.get("outputs", []):
            if output.get("metadata", {}).get("scrapbook", {}).get("name") != key:
                continue
            data = output.get("data", {})
            for mime in ("text/markdown", "text/plain"):
                text = data.get(GLUE_PREFIX + mime)
                if text is not None:
                    text = "".join(text)
                    if mime == "text/plain":
                        try:
                            text = ast.literal_eval(text)
                        except (ValueError, SyntaxError):
                            pass
                    return str(text)
    return None


def notebook_provenance(nb: nbformat.NotebookNode) -> dict:
    """The ``seed_provenance`` a chapter's run glued ({} when it glued none)."""
    text = glued_value(nb, PROVENANCE_KEY)
    try:
        provenance = json.loads(text) if text is not None else {}
    except ValueError:
        return {}
    return provenance if isinstance(provenance, dict) else {}


def run_device(provenance: dict) -> dict[str, str] | None:
    """The device kind a run glued: a GPU when its capability is CUDA's (``sm_..``)."""
    machine = provenance.get("machine")
    if not isinstance(machine, dict) or "kind" not in machine:
        return None
    device = "cuda" if str(machine.get("capability", "")).startswith("sm_") else "cpu"
    return {"device": device, "arithmetic": _SAME_KIND.get(machine["kind"], machine["kind"])}


def _utc(moment: datetime.datetime) -> str:
    if moment.tzinfo is None:  # jupyter-cache stores UTC without a zone
        moment = moment.replace(tzinfo=datetime.timezone.utc)
    return moment.astimezone(datetime.timezone.utc).isoformat(timespec="seconds")


def _git_commit() -> str | None:
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True,
                             text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    if out.returncode != 0:
        return None
    return out.stdout.strip() or None


def made_by_build(record: NbCacheRecord, nb: nbformat.NotebookNode, commit: bool = True) -> dict:
    """Where and when a run this machine's builds made was made."""
    provenance = notebook_provenance(nb)
    machine = provenance.get("machine") if isinstance(provenance.get("machine"), dict) else {}
    seconds = (record.data or {}).get("execution_seconds")
    return {
        "machine": machine.get("name"),
        "threads": machine.get("threads"),
        "device_name": glued_value(nb, "device_name"),
        "torch": provenance.get("fingerprint", {}).get("torch"),
        "date": _utc(record.created),
        "execution_seconds": round(float(seconds), 1) if seconds is not None else None,
        # the commit checked out when the record was written; the run's own change may be
        # uncommitted then, and is committed with its record
        "commit": _git_commit() if commit else None,
    }


def read_record(docname: str) -> tuple[dict, nbformat.NotebookNode] | None:
    """A chapter's record entry and executed notebook; ``None`` when it has none.

    Raises :class:`RecordError`, naming the file and what to do, when the entry cannot be
    read or does not belong with its notebook."""
    entry_file, nb_file = record_files(docname)
    if not entry_file.is_file() and not nb_file.is_file():
        return None
    shown = entry_file.relative_to(ROOT).as_posix()
    advice = ("build the book to rewrite it (jupyter-book build book/), or delete "
              f"{shown} and {nb_file.name} beside it, and the chapter executes")
    try:
        entry = json.loads(entry_file.read_text(encoding="utf-8"))
        if not isinstance(entry, dict) or entry.get("format") != RECORD_FORMAT:
            raise ValueError(f"not a record entry of format {RECORD_FORMAT}")
        for key in ("chapter", "code_hash", "inputs", "device", "made", "notebook_sha256"):
            if key not in entry:
                raise ValueError(f"it has no {key!r}")
        raw = gzip.decompress(nb_file.read_bytes())  # the entry hashes the notebook itself
        if hashlib.sha256(raw).hexdigest() != entry["notebook_sha256"]:
            raise ValueError(f"{nb_file.name} is not the notebook the entry was written with")
        nb = nbformat.reads(raw.decode("utf-8"), as_version=4)
        if code_hash(nb) != entry["code_hash"]:
            raise ValueError(f"the code cells of {nb_file.name} are not the ones the entry names")
    except (OSError, ValueError, UnicodeDecodeError) as error:
        raise RecordError(f"{shown} cannot be read ({error}); {advice}") from error
    except Exception as error:  # nbformat's own errors
        raise RecordError(f"{shown} cannot be read ({type(error).__name__}: {error}); {advice}") from error
    return entry, nb


def record_mismatch(entry: dict, notebook: pathlib.Path, digests: Digests,
                    device: dict[str, str] | None) -> str:
    """Why a record entry cannot stand in for a run of the chapter now ("" when it can):
    other code cells, other inputs, or another device kind (``device`` None: not checked)."""
    nb = nbformat.read(notebook, as_version=4)
    if entry["code_hash"] != code_hash(nb):
        return "the chapter's code cells changed since the recorded run"
    why = changes(entry["inputs"], chapter_inputs(notebook, entry.get("modules"), digests))
    if why:
        return why
    if device is not None and entry["device"] != device:
        return (f"the recorded run was made on {device_words(entry['device'])}, and this "
                f"build runs on {device_words(device)}")
    return ""


def _set_created(cache: JupyterCacheAbstract, record: NbCacheRecord, when: str) -> None:
    """Date a cached run from the record by when it was made (myst-nb shows it as the run's)."""
    try:
        moment = datetime.datetime.fromisoformat(when).astimezone(datetime.timezone.utc)
    except (TypeError, ValueError):
        return
    with session_context(cache.db) as session:
        session.query(NbCacheRecord).filter_by(pk=record.pk).update(
            {"created": moment.replace(tzinfo=None)})
        session.commit()


def take_from_record(cache_dir: pathlib.Path, chapters: dict[str, pathlib.Path],
                     runs: dict[str, str | None], digests: Digests,
                     device: dict[str, str]) -> set[str]:
    """Put into the cache, with the inputs it read, the recorded run of each chapter without a
    current cached run whose record matches its code cells, its inputs and this build's
    device kind; log for each such chapter what the build does and why. Returns the chapters
    taken from the record (``runs`` gets their cached run)."""
    cache = get_cache(cache_dir)
    stamp = read_stamp(cache_dir)
    taken = set()
    for docname, notebook in sorted(chapters.items()):
        if runs.get(docname) is not None:
            continue
        name = f"{docname}{notebook.suffix}"
        if cold_build():
            logger.info(f"{name} executes: {COLD_ENV} is set, so the execution record is not used")
            continue
        try:
            found = read_record(docname)
        except RecordError as error:
            logger.info(f"{name} executes: its execution record is unreadable: {error}")
            continue
        if found is None:
            logger.info(f"{name} executes: the execution record holds no run of it")
            continue
        entry, nb = found
        why = record_mismatch(entry, notebook, digests, device)
        if why:
            logger.info(f"{name} executes: its execution record is stale ({why})")
            continue
        made = entry["made"]
        try:
            record = cache.cache_notebook_bundle(
                CacheBundleIn(nb, str(notebook), data={"execution_seconds": made.get("execution_seconds"),
                                                       RECORD_KEY: made}),
                check_validity=False, overwrite=True)
            _set_created(cache, record, made.get("date"))
            record = cache.get_cache_record(record.pk)
        except Exception as error:  # the cache refused it: the chapter executes, as without a record
            logger.info(f"{name} executes: its recorded run could not be put into the execution cache "
                        f"({type(error).__name__}: {error})")
            continue
        modules = entry.get("modules")
        stamp[record.hashkey] = {"modules": modules, "inputs": chapter_inputs(notebook, modules, digests)}
        runs[docname] = run_id(record)
        taken.add(docname)
        logger.info(f"{name} is taken from the execution record, not executed: its code cells, "
                    f"inputs and device kind ({device_words(device)}) match those of the run made on "
                    f"{made.get('machine') or 'an unrecorded machine'} on {_day(made.get('date'))}")
    write_stamp(cache, cache_dir, stamp)
    return taken


def _day(when: str | None) -> str:
    try:
        return datetime.datetime.fromisoformat(str(when)).date().isoformat()
    except ValueError:
        return "an unrecorded date"


def _write_atomic(path: pathlib.Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def write_record(inputs: BuildInputs, device: dict[str, str]) -> list[str]:
    """Write the record entry of every chapter whose current cached run the record lacks;
    drop the entries of chapters that no longer exist. Returns the chapters written.

    The record holds CPU runs only, the kind every reader's, contributor's and CI's build
    makes: a GPU build writes nothing, so that it cannot swap the record's runs for its own.
    A valid entry for the same inputs stays (a cold build does not churn the record)."""
    if device.get("device") != "cpu":
        logger.info(f"the execution record is not rewritten: it holds CPU runs, and this build "
                    f"runs on {device_words(device)}")
        return []
    cache = get_cache(inputs.cache_dir)
    stamp = read_stamp(inputs.cache_dir)
    written = []
    for docname, notebook in sorted(inputs.chapters.items()):
        record = _cached_run(cache, notebook)
        entry = stamp.get(record.hashkey) if record is not None else None
        if entry is None or changes(entry["inputs"], chapter_inputs(notebook, entry["modules"], inputs.digests)):
            continue  # no current run to record
        try:
            nb = cache.get_cache_bundle(record.pk).nb
        except KeyError:  # the cached notebook's file is gone; the next build executes it
            continue
        raw = nbformat.writes(nb, nbformat.NO_CONVERT).encode("utf-8")
        try:
            old = read_record(docname)
        except RecordError:
            old = None
        if old is not None and not record_mismatch(old[0], notebook, inputs.digests, device):
            continue  # the record holds this run, or another run of the same inputs
        made = (record.data or {}).get(RECORD_KEY) or made_by_build(record, nb)
        new = {
            "format": RECORD_FORMAT,
            "chapter": _relative(notebook),
            "code_hash": record.hashkey,
            "modules": entry["modules"],
            "inputs": entry["inputs"],
            "device": run_device(notebook_provenance(nb)) or device,
            "made": made,
            "notebook_sha256": hashlib.sha256(raw).hexdigest(),
        }
        entry_file, nb_file = record_files(docname)
        try:
            # the notebook first: an entry never names a notebook that is not there
            # mtime=0: the same run compresses to the same bytes
            _write_atomic(nb_file, gzip.compress(raw, mtime=0))
            _write_atomic(entry_file, (json.dumps(new, indent=1, sort_keys=True) + "\n").encode("utf-8"))
        except OSError as error:
            logger.warning(f"{docname}{notebook.suffix}: its run could not be written to the execution "
                           f"record ({error}); the next build writes it")
            continue
        written.append(docname)
        logger.info(f"{docname}{notebook.suffix}: its run is written to the execution record "
                    f"({entry_file.relative_to(ROOT).as_posix()})")
    folder = record_folder()
    for entry_file in sorted(folder.rglob("*.json")) if folder.is_dir() else []:
        docname = entry_file.relative_to(folder).with_suffix("").as_posix()
        if not (ROOT / "book" / f"{docname}.ipynb").is_file():
            entry_file.unlink()
            record_files(docname)[1].unlink(missing_ok=True)
            logger.info(f"{docname}: its entry leaves the execution record (the chapter is gone)")
    return written


def run_origin(record: NbCacheRecord | None, found: str | None, nb: nbformat.NotebookNode | None) -> dict | None:
    """Where the run a chapter's page shows came from: ``record`` (the repository's execution
    record), ``build`` (this build executed it) or ``cache`` (an earlier build on this machine),
    with the machine, date, commit and execution time the record or the run gives."""
    if record is None:
        return None
    data = record.data or {}
    if data.get(RECORD_KEY):
        made = dict(data[RECORD_KEY])
        source = "record"
    else:
        made = made_by_build(record, nb, commit=False) if nb is not None else {"date": _utc(record.created)}
        source = "build" if found is None else "cache"
    return {"source": source, **made}


RECORD_LIMIT = 4 * 1024 * 1024  # bytes: the whole record, Parts I and II together
CPU_KIND = {"device": "cpu", "arithmetic": "fp32"}  # the record's runs (see write_record)


def record_status(chapters: dict[str, pathlib.Path], digests: Digests) -> dict[str, tuple[str, str]]:
    """Each chapter's record in the working tree: ``current``, ``stale``, ``missing`` or
    ``unreadable``, with why in words."""
    status = {}
    for docname, notebook in sorted(chapters.items()):
        try:
            found = read_record(docname)
        except RecordError as error:
            status[docname] = ("unreadable", str(error))
            continue
        if found is None:
            status[docname] = ("missing", "the record holds no run of it")
            continue
        entry = found[0]
        why = record_mismatch(entry, notebook, digests, CPU_KIND)
        made = entry["made"]
        where = (f"made on {made.get('machine') or 'an unrecorded machine'} on {_day(made.get('date'))}, "
                 f"on {device_words(entry['device'])}")
        status[docname] = ("stale", f"{why}; {where}") if why else ("current", where)
    return status


def record_problems() -> list[str]:
    """What is wrong with the record in the repository, in words: entries that cannot be
    read, entries of chapters that no longer exist, inputs (files, modules) that no longer
    exist, a record over its size limit."""
    folder = record_folder()
    if not folder.is_dir():
        return []
    problems = []
    for entry_file in sorted(folder.rglob("*.json")):
        docname = entry_file.relative_to(folder).with_suffix("").as_posix()
        shown = entry_file.relative_to(ROOT).as_posix()
        try:
            found = read_record(docname)
        except RecordError as error:
            problems.append(str(error))
            continue
        entry = found[0]
        if not (ROOT / entry["chapter"]).is_file():
            problems.append(f"{shown} records {entry['chapter']}, which no longer exists; "
                            "delete the entry and its notebook (a build does)")
        # an input recorded as absent (None: a chapter before its first seed runs) is no problem
        gone = [key for key, digest in entry["inputs"].items()
                if key != CORPUS and digest is not None and not (ROOT / key).is_file()]
        for name in entry.get("modules") or []:
            path = module_file(name, {})
            if not (ROOT / path).is_file() and not (ROOT / name.replace(".", "/") / "__init__.py").is_file():
                gone.append(f"module {name}")
        if gone:
            problems.append(f"{shown} records inputs that no longer exist ({', '.join(sorted(set(gone)))}); "
                            "build the book to rewrite it")
    for nb_file in sorted(folder.rglob("*" + NOTEBOOK_SUFFIX)):
        docname = nb_file.relative_to(folder).as_posix().removesuffix(NOTEBOOK_SUFFIX)
        if not record_files(docname)[0].is_file():
            problems.append(f"{nb_file.relative_to(ROOT).as_posix()} has no entry beside it; "
                            "delete it, or build the book to rewrite the entry")
    size = sum(p.stat().st_size for p in folder.rglob("*") if p.is_file() and not p.name.startswith("."))
    if size > RECORD_LIMIT:
        problems.append(f"{RECORD_DIR}/ holds {size / 2**20:.1f} MB, over its limit of "
                        f"{RECORD_LIMIT / 2**20:.0f} MB")
    return problems


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
    found: dict[str, str | None] = {d: None if run is None else "cache" for d, run in runs.items()}
    device = build_device()
    taken = take_from_record(cache_dir, chapters, runs, digests, device)
    found.update({docname: "record" for docname in taken})
    # Sphinx reads again only documents whose source changed (a new environment reads all).
    # Also read every chapter without a cached run, which executes it, every chapter taken
    # from the record, and every chapter whose pages in this checkout show another run than
    # the cached one: another clone sharing the cache ran it again.
    to_read = {docname for docname, run in runs.items() if run is None} | taken
    shown: dict[str, str | None] | None = getattr(app.env, SHOWN, None)
    for docname, run in sorted(runs.items()):
        if shown is not None and run is not None and shown.get(docname, run) != run:
            logger.info(f"{docname}.ipynb is read again: this checkout's pages show another run than the cached one")
            to_read.add(docname)
    app.execution_inputs = BuildInputs(cache_dir, digests, chapters, to_read, found=found, device=device)


def chapters_to_read(app: Sphinx, env: BuildEnvironment, added: set[str], changed: set[str],
                     removed: set[str]) -> list[str]:
    return sorted(app.execution_inputs.to_read) if app.execution_inputs else []


def note_read_docs(app: Sphinx, env: BuildEnvironment, docnames: list[str]) -> None:
    """Remember which chapters this build reads: their glue files are this build's."""
    if app.execution_inputs:
        app.execution_inputs.read.update(docnames)


def note_shown_runs(app: Sphinx, env: BuildEnvironment) -> list[str]:
    """Keep, with this checkout's pickled environment, the cached run each chapter read shows,
    and where each chapter's run came from (for its page and the evidence page)."""
    if app.execution_inputs:
        inputs = app.execution_inputs
        cache = get_cache(inputs.cache_dir)
        shown = getattr(env, SHOWN, {})
        for docname in inputs.read & inputs.chapters.keys():
            record = _cached_run(cache, inputs.chapters[docname])
            shown[docname] = run_id(record) if record else None
        setattr(env, SHOWN, shown)
        origins = getattr(env, ORIGINS, {})
        for docname, notebook in inputs.chapters.items():
            record = _cached_run(cache, notebook)
            try:
                nb = cache.get_cache_bundle(record.pk).nb if record is not None else None
            except KeyError:  # the cached notebook's file is gone
                record = nb = None
            origins[docname] = run_origin(record, inputs.found.get(docname), nb)
        setattr(env, ORIGINS, origins)
    return []


def say_where_runs_came_from(app: Sphinx, doctree: nodes.document, docname: str) -> None:
    """For a run taken from the record, add to the header card's hands-on time the machine
    that measured it, so the card does not pass another machine's minutes off as this
    build's. Where each run came from in full is the evidence page's to say, not the
    chapter's prose."""
    origin = getattr(app.env, ORIGINS, {}).get(docname)
    if not origin or origin["source"] != "record":
        return
    for item in doctree.findall(nodes.Element):
        if "header-card-item" in item.get("classes", []) and item.astext().startswith("Hands-on"):
            paragraphs = list(item.findall(nodes.paragraph))
            if paragraphs:
                paragraphs[-1] += nodes.Text(
                    f" ({origin.get('machine') or 'an unrecorded machine'}, {_day(origin.get('date'))})")
            break


def stamp_cached_runs(app: Sphinx, exception: Exception | None) -> None:
    """Record the inputs of the runs this build used or made, if it ran to its end; then,
    unless it logged a warning, write the execution record."""
    if exception is None and app.execution_inputs:
        record_inputs(app.execution_inputs, pathlib.Path(app.env.mystnb_config.output_folder))
        warnings = getattr(app, "_warncount", 0)
        if warnings:  # a run that printed to stderr would fail every -W build that took it
            logger.info(f"the execution record is not rewritten: the build logged {warnings} "
                        "warning(s)")
            return
        write_record(app.execution_inputs, app.execution_inputs.device or build_device())


def setup(app: Sphinx) -> dict:
    app.connect("config-inited", use_cache_folder)
    app.connect("builder-inited", check_cached_runs)
    app.connect("env-get-outdated", chapters_to_read)
    app.connect("env-before-read-docs", note_read_docs)
    app.connect("env-updated", note_shown_runs)
    app.connect("doctree-resolved", say_where_runs_came_from)
    app.connect("build-finished", stamp_cached_runs)
    return {"version": "3.0", "parallel_read_safe": True, "parallel_write_safe": True}
