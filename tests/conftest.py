"""Shared fixtures. The corpus is read from $MLEXP_DATA (CI points it at ../shared/data)."""

import pytest


@pytest.fixture(scope="session")
def corpus():
    """The TinyShakespeare split, as the chapter loads it (the loader says how to supply a missing file)."""
    import mlexp

    return mlexp.load_char_corpus()
