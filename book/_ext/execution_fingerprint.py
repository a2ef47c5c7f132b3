"""Re-execute the notebooks when the code or data they import changes.

Jupyter Book's execution cache keys each notebook on its code cells only, so a change
to ``mlexp``, to the corpus or to a chapter's stored seed runs (which its seed table
reads) would otherwise reuse stale outputs. This extension hashes the library's sources,
the corpus, the requirements and the seed data, stores the hash beside the cache, and
empties the cache when the hash changes. Prose-only edits keep the cache.
"""

from __future__ import annotations

import hashlib
import pathlib
import shutil
import sys

from sphinx.application import Sphinx
from sphinx.util import logging

logger = logging.getLogger(__name__)
ROOT = pathlib.Path(__file__).resolve().parents[2]
STAMP = "mlexp-fingerprint.txt"


def fingerprint() -> str:
    """SHA-256 over mlexp's sources, the corpus, requirements.txt and the seed data."""
    sys.path.insert(0, str(ROOT))
    from mlexp.data import corpus_path

    digest = hashlib.sha256()
    files = sorted((ROOT / "mlexp").rglob("*.py")) + [ROOT / "requirements.txt", corpus_path()]
    files += sorted((ROOT / "book").glob("part*/*.seeds.json"))
    for path in files:
        digest.update(str(path.relative_to(ROOT) if path.is_relative_to(ROOT) else path.name).encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()


def reset_stale_cache(app: Sphinx) -> None:
    if app.config.nb_execution_mode != "cache":
        return
    cache = pathlib.Path(app.config.nb_execution_cache_path or pathlib.Path(app.outdir).parent / ".jupyter_cache")
    stamp = cache / STAMP
    current = fingerprint()
    if cache.is_dir() and (not stamp.is_file() or stamp.read_text().strip() != current):
        logger.info(f"mlexp, the corpus or the requirements changed: clearing the execution cache {cache}")
        shutil.rmtree(cache)
    cache.mkdir(parents=True, exist_ok=True)
    stamp.write_text(current + "\n")


def setup(app: Sphinx) -> dict:
    app.connect("builder-inited", reset_stale_cache)
    return {"version": "1.0", "parallel_read_safe": True, "parallel_write_safe": True}
