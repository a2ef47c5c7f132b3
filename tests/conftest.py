"""Shared fixtures. The corpus is read from $MLEXP_DATA (CI points it at ../shared/data)."""

import os
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session")
def corpus():
    """The TinyShakespeare split, as the chapter loads it."""
    import mlexp

    if not os.environ.get("MLEXP_DATA") and not (pathlib.Path.home() / ".cache" / "mlexp").is_dir():
        pytest.fail("set MLEXP_DATA to the folder holding tinyshakespeare.txt (see README)")
    return mlexp.load_char_corpus()
