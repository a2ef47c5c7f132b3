"""What attention costs as the context grows: materialized scores against fused attention.

One causal attention call (batch 1, 4 heads of 32, float32, one thread) at T = 256 ... 4096,
computed two ways:

- **naive**: the scores Q K^T are materialized as a (B, H, T, T) tensor, masked, passed
  through softmax (a second T x T tensor) and multiplied by V, as Chapter 1 writes the
  formula;
- **SDPA**: ``F.scaled_dot_product_attention`` forced to its flash kernel with
  ``torch.nn.attention.sdpa_kernel``; it walks over blocks of keys and keeps a running
  softmax, so no T x T tensor ever exists.

For each T it prints the median time of several calls, and two memory figures per method,
both from ``torch.profiler`` with ``profile_memory=True``. The profiler records every
allocation and free made by PyTorch's CPU allocator as a ``[memory]`` event with its size
in bytes and its time (``prof.profiler.kineto_results.events()``; the same records
``export_memory_timeline`` reads). The script sorts them by time and reports:

- **largest**: the largest single allocation, which for naive is the score tensor;
- **peak**: the highest total of live bytes above what was allocated before the call
  (inputs excluded), which for naive holds the scores and their softmax at once.

Beside them it prints the memory law for the scores, B * H * T^2 * 4 bytes, and the ratio
of the measured largest allocation to it. ``tracemalloc`` cannot be used (it sees only
Python's own allocations, not PyTorch's), and the process's resident memory is a poor
proxy (the allocator returns large blocks to the system at different moments, and the
peak RSS never falls), so the profiler's allocation records are the measurement.

Usage::

    PYTHONPATH=. python benchmarks/attention_cost.py [--max-t 4096]

Timings on a shared machine are noisy: read the ratios and the growth with T, not the
absolute figures.
"""

from __future__ import annotations

import argparse
import math
import statistics
import time

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.profiler import ProfilerActivity, profile

B, H, D = 1, 4, 32


def naive(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """softmax(Q K^T / sqrt(D)) V with the scores stored: two (B, H, T, T) tensors."""
    T = q.shape[-2]
    future = torch.ones(T, T, dtype=torch.bool).triu(1)  # (T, T) booleans
    scores = (q * D**-0.5) @ k.transpose(-2, -1)  # (B, H, T, T)
    scores.masked_fill_(future, float("-inf"))
    return scores.softmax(dim=-1) @ v  # (B, H, T, T) @ (B, H, T, D)


def fused(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """PyTorch's fused attention, its flash kernel only (an error if it cannot run)."""
    with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)


def median_seconds(fn, *args, repeats: int) -> float:
    fn(*args)  # warm-up
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn(*args)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def memory(fn, *args) -> tuple[int, int]:
    """(largest single allocation, peak live bytes) of one call, in bytes."""
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        fn(*args)
    events = sorted(
        (e.start_ns(), e.nbytes()) for e in prof.profiler.kineto_results.events() if e.name() == "[memory]"
    )
    live = peak = largest = 0
    for _, nbytes in events:
        live += nbytes
        peak = max(peak, live)
        largest = max(largest, nbytes)
    return largest, peak


def mib(nbytes: float) -> str:
    return f"{nbytes / 2**20:8.2f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--max-t", type=int, default=4096)
    args = parser.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    lengths = [256 * 2**i for i in range(int(math.log2(args.max_t // 256)) + 1)]
    print(
        f"torch {torch.__version__}, {torch.get_num_threads()} thread, float32, "
        f"B={B}, H={H}, head dim {D}, causal"
    )
    print("memory in MiB; law = B*H*T^2*4 bytes (one score matrix)")
    header = (
        f"{'T':>5} | {'naive ms':>9} {'sdpa ms':>8} {'ratio':>6} | {'law':>8} "
        f"{'naive largest':>13} {'/law':>5} {'naive peak':>10} {'/law':>5} | "
        f"{'sdpa largest':>12} {'sdpa peak':>9} | allclose"
    )
    print(header)
    print("-" * len(header))
    previous = None
    for T in lengths:
        q, k, v = (torch.randn(B, H, T, D) for _ in range(3))
        same = torch.allclose(naive(q, k, v), fused(q, k, v), atol=1e-5)
        repeats = max(3, 2**20 // T**2 * 8) if T < 2048 else 3
        t_naive = median_seconds(naive, q, k, v, repeats=repeats)
        t_fused = median_seconds(fused, q, k, v, repeats=repeats)
        n_largest, n_peak = memory(naive, q, k, v)
        f_largest, f_peak = memory(fused, q, k, v)
        law = B * H * T * T * 4
        print(
            f"{T:>5} | {t_naive * 1e3:9.2f} {t_fused * 1e3:8.2f} "
            f"{t_naive / t_fused:6.2f} | {mib(law)} {mib(n_largest):>13} "
            f"{n_largest / law:5.2f} {mib(n_peak):>10} {n_peak / law:5.2f} | "
            f"{mib(f_largest):>12} {mib(f_peak):>9} | {same}"
        )
        if previous is not None:
            growth = (n_peak / previous[0], f_peak / previous[1])
            print(
                f"{'':>5}   peak memory x{growth[0]:.2f} (naive), x{growth[1]:.2f} (sdpa) "
                "since the previous T"
            )
        previous = (n_peak, f_peak)


if __name__ == "__main__":
    main()
