"""Re-execute the notebooks when the code or data they depend on changes.

Jupyter Book's execution cache keys each notebook on its code cells only, so a change
to ``mlexp``, to the corpus or to a chapter's stored seed runs (which its seed table
reads) would otherwise reuse stale outputs. This extension keeps a stamp beside the
cache with a hash of what every chapter shares (the library's sources, the corpus, the
requirements) and one hash per chapter of its seed data. When the shared hash changes
the cache is emptied; when a chapter's seed data changes, only that chapter's cached
run is dropped. Prose-only edits keep the cache.
"""

from __future__ import annotations

import hashlib
import json
import pathlib
import shutil
import sys

from sphinx.application import Sphinx
from sphinx.util import logging

logger = logging.getLogger(__name__)
ROOT = pathlib.Path(__file__).resolve().parents[2]
STAMP = "mlexp-fingerprint.json"


def _digest(files: list[pathlib.Path]) -> str:
    digest = hashlib.sha256()
    for path in files:
        name = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path.name
        digest.update(str(name).encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()


def fingerprint() -> str:
    """SHA-256 over what every chapter shares: mlexp, the corpus, requirements.txt."""
    sys.path.insert(0, str(ROOT))
    from mlexp.data import corpus_path

    files = sorted((ROOT / "mlexp").rglob("*.py"))
    return _digest(files + [ROOT / "requirements.txt", corpus_path()])


def seed_data_fingerprints() -> dict[str, str]:
    """For each chapter with stored seed runs, the notebook's path and its data's hash."""
    return {
        str(data.with_name(data.name.removesuffix(".seeds.json") + ".ipynb")): _digest([data])
        for data in sorted((ROOT / "book").glob("part*/*.seeds.json"))
    }


def _drop_cached_run(cache_dir: pathlib.Path, notebook: str) -> None:
    from jupyter_cache import get_cache

    cache = get_cache(cache_dir)
    for record in cache.list_cache_records():
        if record.uri == notebook:
            cache.remove_cache(record.pk)


def reset_stale_cache(app: Sphinx) -> None:
    if app.config.nb_execution_mode != "cache":
        return
    cache = pathlib.Path(app.config.nb_execution_cache_path or pathlib.Path(app.outdir).parent / ".jupyter_cache")
    stamp_file = cache / STAMP
    stamp = json.loads(stamp_file.read_text()) if stamp_file.is_file() else {}
    current = {"shared": fingerprint(), "seed_data": seed_data_fingerprints()}
    if cache.is_dir() and stamp.get("shared") != current["shared"]:
        logger.info(f"mlexp, the corpus or the requirements changed: clearing the execution cache {cache}")
        shutil.rmtree(cache)
    elif cache.is_dir():
        for notebook, digest in current["seed_data"].items():
            if stamp.get("seed_data", {}).get(notebook) != digest:
                logger.info(f"the seed data of {notebook} changed: it will run again")
                _drop_cached_run(cache, notebook)
    cache.mkdir(parents=True, exist_ok=True)
    stamp_file.write_text(json.dumps(current, indent=1) + "\n")


def setup(app: Sphinx) -> dict:
    app.connect("builder-inited", reset_stale_cache)
    return {"version": "1.0", "parallel_read_safe": True, "parallel_write_safe": True}
