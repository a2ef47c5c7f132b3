"""Generation speed with and without a KV cache, for Chapter 1's size of model.

Builds Chapter 4's four attention variants at Chapter 1's size (128 wide, 4 blocks, 4 query
heads; MHA, GQA with 2 key/value heads, MQA, MLA with a 48-wide latent and a 16-wide RoPE
key) and generates 200 new tokens after a 16-token prompt, batch 1, greedy, one thread,
once with ``mlexp.attention.generate(..., use_cache=False)`` (the whole sequence re-run every
step) and once with the cache (the prompt once, then one token per step). Both ways run in
the same process, alternating, and each figure is the median of a few runs. It also
checks that both return the same tokens, and prints the cache's bytes per token (from the
shapes) and what the cache held at the end.

Last, what one generated token costs in memory traffic with a long cache (``--cached``
tokens): the bytes of cache its attention reads (every cached key and value, or latent, in
every layer) and the bytes the step allocates, measured with PyTorch's profiler. A layer
that copied its shared key/value heads out to every query head would allocate several times
the cache it reads; MHA, GQA and MQA allocate about one cache's worth, the copy that appending
a token makes (``KVCache.append`` concatenates). MLA allocates far more (11 to 13 times its
cache on torch 2.13's CPU build): its explicit form expands every head's keys and values from the
latent, by design, and its absorbed form has queries and keys wider than its values, which
PyTorch's flash kernel refuses, so the call falls back to the math kernel, which expands the
shared latent per head and writes out the scores.

The weights are untrained: speed does not depend on them. 216 tokens are past the
chapter's trained context of 64; generate does not crop (see its docstring), so the
uncached run's work grows with the whole sequence, as a cache's saving does.

Usage::

    PYTHONPATH=. python benchmarks/kv_cache.py [--new 200] [--repeats 5]
"""

from __future__ import annotations

import argparse

import torch
from torch.profiler import ProfilerActivity, profile

import mlexp
from mlexp.attention import (
    GroupedQueryAttention,
    LatentAttention,
    attention_lm,
    generate,
    generation_speed,
    kv_cache,
    kv_cache_bytes_per_token,
)

VARIANTS = {
    "MHA": lambda d: GroupedQueryAttention(d, 4, 4),
    "GQA-2": lambda d: GroupedQueryAttention(d, 4, 2),
    "MQA": lambda d: GroupedQueryAttention(d, 4, 1),
    "MLA": lambda d: LatentAttention(d, 4, latent_dim=48, rope_dim=16),
    "MLA absorbed": lambda d: LatentAttention(d, 4, latent_dim=48, rope_dim=16, absorb=True),
}


def step_traffic(model: torch.nn.Module, cached: int) -> tuple[int, int]:
    """Bytes of cache one new token's attention reads after ``cached`` tokens, and bytes
    the step allocates."""
    with torch.no_grad(), kv_cache(model):
        model(torch.randint(65, (1, cached)))
        with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
            model(torch.randint(65, (1, 1)))
    allocated = sum(max(e.self_cpu_memory_usage, 0) for e in prof.key_averages())
    return kv_cache_bytes_per_token(model) * (cached + 1), allocated


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--new", type=int, default=200)
    parser.add_argument("--prompt", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--cached", type=int, default=2048)
    args = parser.parse_args()
    torch.set_num_threads(1)
    print(
        f"torch {torch.__version__}, {torch.get_num_threads()} thread, float32, batch 1, "
        f"{args.prompt}-token prompt, {args.new} new tokens, greedy, median of {args.repeats}"
    )
    header = (
        f"{'variant':<13} {'params':>8} {'cache B/token':>13} {'no cache tok/s':>14} "
        f"{'cache tok/s':>11} {'speed-up':>8}  identical"
    )
    print(header)
    print("-" * len(header))
    for name, make in VARIANTS.items():
        torch.manual_seed(0)
        model = attention_lm(65, make).eval()
        prompt = torch.randint(65, (1, args.prompt))
        generation_speed(model, prompt, 10, repeats=1)  # warm-up
        speed = generation_speed(model, prompt, args.new, repeats=args.repeats)
        out_cached = generate(model, prompt, args.new, temperature=0.0)
        with torch.no_grad(), kv_cache(model) as caches:
            model(out_cached)
            held = sum(c.nbytes() for c in caches) // out_cached.shape[1]
        per_token = kv_cache_bytes_per_token(model)
        assert held == per_token, (held, per_token)
        rate_plain, rate_cached = speed["uncached"], speed["cached"]
        print(
            f"{name:<13} {mlexp.count_params(model):>8,} {per_token:>13,} "
            f"{rate_plain:>14.0f} {rate_cached:>11.0f} {rate_cached / rate_plain:>7.2f}x  "
            f"{speed['identical'] == 1.0}"
        )
    print(f"\none new token after {args.cached:,} cached tokens, model's own activations included:")
    header = f"{'variant':<13} {'cache read':>12} {'allocated':>12} {'allocated/read':>14}"
    print(header)
    print("-" * len(header))
    for name, make in VARIANTS.items():
        torch.manual_seed(0)
        read, allocated = step_traffic(attention_lm(65, make).eval(), args.cached)
        print(f"{name:<13} {read:>12,} {allocated:>12,} {allocated / read:>14.2f}")


if __name__ == "__main__":
    main()
