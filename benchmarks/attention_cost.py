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

import torch

from mlexp.attention_cost import cost_table

B, H, D = 1, 4, 32


def mib(nbytes: float) -> str:
    return f"{nbytes / 2**20:8.2f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--max-t", type=int, default=4096)
    args = parser.parse_args()
    torch.set_num_threads(1)
    generator = torch.Generator().manual_seed(0)
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
    for row in cost_table(lengths, B, H, D, generator=generator):
        law, n_peak, f_peak = row["law"], row["naive_peak"], row["sdpa_peak"]
        print(
            f"{row['T']:>5} | {row['naive_s'] * 1e3:9.2f} {row['sdpa_s'] * 1e3:8.2f} "
            f"{row['naive_s'] / row['sdpa_s']:6.2f} | {mib(law)} "
            f"{mib(row['naive_largest']):>13} {row['naive_largest'] / law:5.2f} "
            f"{mib(n_peak):>10} {n_peak / law:5.2f} | "
            f"{mib(row['sdpa_largest']):>12} {mib(f_peak):>9} | {row['same']}"
        )
        if previous is not None:
            print(
                f"{'':>5}   peak memory x{n_peak / previous[0]:.2f} (naive), "
                f"x{f_peak / previous[1]:.2f} (sdpa) since the previous T"
            )
        previous = (n_peak, f_peak)


if __name__ == "__main__":
    main()
