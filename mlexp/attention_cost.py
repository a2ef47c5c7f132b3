"""Chapter 4's cost experiment: what one causal attention call costs as
the context grows, with the scores materialized or never stored.

Two ways to compute softmax(Q K^T / sqrt(D)) V under the causal mask:

- ``naive`` writes the scores as a (B, H, T, T) tensor, masks them and
  passes them through softmax, as Chapter 1 writes the formula;
- ``fused`` calls ``F.scaled_dot_product_attention`` forced to its flash
  kernel (``sdpa_kernel``), which walks over blocks of keys with a running
  softmax, so no T x T tensor ever exists.

Memory is read from ``torch.profiler`` with ``profile_memory=True``: every
allocation and free of PyTorch's CPU allocator is a ``[memory]`` event
with its size and time. ``tracemalloc`` sees only Python's own
allocations, and the process's resident memory never falls, so the
profiler's records are the measurement. ``benchmarks/attention_cost.py``
and the chapter both call :func:`cost_table`.
"""

from __future__ import annotations

import contextlib
import os
import statistics
import sys
import time
from collections.abc import Callable, Iterator, Sequence

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.profiler import ProfilerActivity, profile

__all__ = [
    "naive_attention",
    "fused_attention",
    "median_seconds",
    "allocations",
    "cost_table",
]


def naive_attention(q: Tensor, k: Tensor, v: Tensor) -> Tensor:
    """softmax(Q K^T / sqrt(D)) V with the scores stored: two (B, H, T, T)
    tensors, the scores and their softmax."""
    T, D = q.shape[-2], q.shape[-1]
    future = torch.ones(T, T, dtype=torch.bool).triu(1)  # (T, T)
    scores = (q * D**-0.5) @ k.transpose(-2, -1)  # (B, H, T, T)
    scores.masked_fill_(future, float("-inf"))
    return scores.softmax(dim=-1) @ v  # (B, H, T, T) @ (B, H, T, D)


def fused_attention(q: Tensor, k: Tensor, v: Tensor) -> Tensor:
    """PyTorch's fused attention, its flash kernel only: an error if that
    kernel cannot run these inputs, rather than a silent fallback."""
    with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)


def median_seconds(
    fn: Callable, *args, repeats: int = 5, warm_up: bool = True
) -> float:
    """Median wall time of ``fn(*args)`` over ``repeats`` calls, after one
    warm-up call unless the caller has just made one."""
    if warm_up:
        fn(*args)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn(*args)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


@contextlib.contextmanager
def _quiet_native_stderr() -> Iterator[None]:
    """Silence what C++ code writes to file descriptor 2 for a moment.

    PyTorch's profiler (Kineto) prints a status line to the process's
    stderr at every start and stop, whatever its log level; a notebook
    would show those lines as output. Python's own ``sys.stderr`` is
    flushed first and restored after.
    """
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(os.devnull, "w") as devnull:
            os.dup2(devnull.fileno(), 2)
            yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def allocations(fn: Callable, *args) -> tuple[int, int]:
    """(largest single allocation, peak live bytes) of one call of
    ``fn(*args)``, in bytes, from the profiler's allocation records.

    The peak counts only what the call allocates, not its inputs.
    """
    with (
        _quiet_native_stderr(),
        profile(
            activities=[ProfilerActivity.CPU], profile_memory=True
        ) as prof,
    ):
        fn(*args)
    events = sorted(
        (e.start_ns(), e.nbytes())
        for e in prof.profiler.kineto_results.events()
        if e.name() == "[memory]"
    )
    live = peak = largest = 0
    for _, nbytes in events:
        live += nbytes
        peak, largest = max(peak, live), max(largest, nbytes)
    return largest, peak


def cost_table(
    lengths: Sequence[int],
    batch: int = 1,
    heads: int = 4,
    head_dim: int = 32,
    generator: torch.Generator | None = None,
) -> list[dict[str, float]]:
    """One row per length T: median seconds, largest allocation and peak
    bytes of both ways, the law ``4 * batch * heads * T^2`` bytes (one
    float32 score matrix), and whether the outputs agree (atol 1e-5).

    Float32 on the CPU. Short lengths repeat more (at least 3 times);
    the call that checks the outputs is each way's warm-up.
    """
    rows = []
    for T in lengths:
        q, k, v = (
            torch.randn(batch, heads, T, head_dim, generator=generator)
            for _ in range(3)
        )
        same = torch.allclose(
            naive_attention(q, k, v), fused_attention(q, k, v), atol=1e-5
        )
        repeats = max(3, min(15, 2**22 // T**2))
        row = {"T": T, "law": 4 * batch * heads * T * T, "same": same}
        for name, fn in (
            ("naive", naive_attention),
            ("sdpa", fused_attention),
        ):
            row[f"{name}_s"] = median_seconds(
                fn, q, k, v, repeats=repeats, warm_up=False
            )
            largest, peak = allocations(fn, q, k, v)
            row[f"{name}_largest"], row[f"{name}_peak"] = largest, peak
        rows.append(row)
    return rows
