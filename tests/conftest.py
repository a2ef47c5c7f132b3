"""Shared fixtures. The corpus is read from $MLEXP_DATA (CI points it at ../shared/data)."""

import pytest


@pytest.fixture(scope="session")
def corpus():
    """The TinyShakespeare split, as the chapter loads it (the loader says how to supply a missing file)."""
    import mlexp

    return mlexp.load_char_corpus()


@pytest.fixture(scope="module")
def one_torch_thread():
    """Tiny tensors: one thread is as fast, and cannot stall on a core another job holds.
    A module opts in with ``pytestmark = pytest.mark.usefixtures("one_torch_thread")``."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture
def two_threads():
    """PyTorch at two threads for the test, as on the build machine; restored afterwards."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    yield
    torch.set_num_threads(threads)
