"""How fast Chapter 1 trains on this machine, and how close that comes to its limit.

Prints, from one run:

1. the fp32 matrix-multiply rate at the current thread count: the practical limit;
2. ``train_lm``'s tokens per second on Chapter 1's 4-block model at the chapter's batch size,
   its FLOPs per token (6 x the weights each token multiplies, plus attention) and the
   fraction of the limit that reaches;
3. where a training step's time goes, from torch.profiler: the kernels that do the arithmetic
   (matrix products and attention) and everything else. Their rate alone is the ceiling that
   no change outside them can lift the fraction above;
4. with ``--chapter``, the wall time of Chapter 1's seven training runs (one 4-block model for
   600 steps, six 6-block variants for 400) done three ways: the spec's straightforward
   recipe, mlexp with the ablation one run after another, and mlexp as the chapter runs it,
   side by side; then evaluation's accuracy and share of training time, and peak memory.

Usage::

    MLEXP_DATA=../shared/data python benchmarks/train_speed.py [--steps 60] [--chapter]

The machine is noisy: compare figures from the same run, and read ratios rather than
absolute numbers.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import resource
import time
from unittest import mock

import torch
import torch.nn.functional as F
from torch.profiler import ProfilerActivity, profile

import mlexp
from mlexp.side_by_side import plan_workers
from mlexp.train import _windows
from mlexp.transformer import TransformerLM, WriteNothing

BATCH, BLOCK = 32, 64  # train_lm's default batch size, the chapter's context
VARIANTS = ("full model", "no position", "no attention", "no feed-forward", "no normalization", "no residual")
ARITHMETIC_KERNELS = ("aten::mm", "aten::addmm", "aten::bmm", "aten::_scaled_dot_product")  # name prefixes


def matmul_gflops(n: int = 2048, repeats: int = 10) -> float:
    """fp32 GFLOP/s of an n x n matrix product, the best of ``repeats`` timings."""
    a, b = torch.randn(n, n), torch.randn(n, n)
    for _ in range(3):
        a @ b
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        a @ b
        best = min(best, time.perf_counter() - start)
    return 2 * n**3 / best / 1e9


def flops_per_token(model: TransformerLM, block: int) -> float:
    """Training FLOPs per token: 6 x the weights a token multiplies, plus attention's scores.

    The embedding is a lookup, not a product, so its table is left out. Each layer's
    attention forms T scores and T weighted values of width d per token (2 x 2 x T x d
    multiply-adds forward), halved by the causal mask, times 3 for forward and backward.
    """
    matmul_params = sum(p.numel() for name, p in model.named_parameters() if p.dim() == 2 and not name.startswith("embed"))
    dim, layers = model.embed.embedding_dim, len(model.blocks)
    attention = 3 * layers * 2 * 2 * block * dim / 2
    return 6 * matmul_params + attention


def chapter_model() -> TransformerLM:
    mlexp.manual_seed(0)
    return TransformerLM(65, dim=128, n_layers=4, n_heads=4)


def tokens_per_second(train_ids, val_ids, steps: int) -> float:
    """Training throughput of the chapter's 4-block model, evaluation excluded."""
    model = chapter_model()
    mlexp.train_lm(model, train_ids, val_ids, steps=5, block_size=BLOCK, log=False, eval_batches=1)  # warm up
    history = mlexp.train_lm(model, train_ids, val_ids, steps=steps, block_size=BLOCK, eval_every=steps,
                             log=False, eval_batches=1)
    return steps * BATCH * BLOCK / (history["time"][-1] - sum(history["eval_time"]))


def arithmetic_share(train_ids, val_ids, steps: int = 30) -> float:
    """Share of a training step's CPU time spent in matrix products and attention (profiled)."""
    model = chapter_model()
    mlexp.train_lm(model, train_ids, val_ids, steps=3, block_size=BLOCK, log=False, eval_batches=1)  # warm up
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        mlexp.train_lm(model, train_ids, val_ids, steps=steps, block_size=BLOCK, eval_every=steps, log=False,
                       eval_batches=1)
    # The two one-batch evaluations are about 2% of the profile, with the same mix of kernels.
    events = prof.key_averages()
    arithmetic = sum(e.self_cpu_time_total for e in events if e.key.startswith(ARITHMETIC_KERNELS))
    return arithmetic / sum(e.self_cpu_time_total for e in events)


def ablation_model(variant: str) -> TransformerLM:
    """The chapter's 6-block model with one part removed, built as its ``build`` cell does."""
    mlexp.manual_seed(0)
    cfg = dict(dim=128, n_layers=6, n_heads=4)
    if variant == "no attention":
        model = TransformerLM(65, **cfg)
        for block in model.blocks:
            block.attn = WriteNothing()
        return model
    if variant == "no feed-forward":
        return TransformerLM(65, make_ffn=lambda d: WriteNothing(), **cfg)
    extra = {"full model": {}, "no position": {"rope": False}, "no normalization": {"norm": False},
             "no residual": {"residual": False}}[variant]
    return TransformerLM(65, **cfg, **extra)


def rope_recomputed(x: torch.Tensor) -> torch.Tensor:
    """RoPE as the spec's listing writes it: angles, cosines and sines rebuilt on every call."""
    seq, dim = x.shape[-2], x.shape[-1]
    half = dim // 2
    freqs = 10000 ** (-torch.arange(half, device=x.device) / half)
    angles = torch.arange(seq, device=x.device)[:, None] * freqs[None, :]  # (seq, half)
    cos, sin = angles.cos(), angles.sin()
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1)


def chapter_runs(train_ids, val_ids, recipe: str) -> tuple[float, dict]:
    """Wall time of the chapter's seven training runs, and the 600-step run's history and model.

    ``recipe`` is ``spec`` (the spec's listing: RoPE rebuilt on every call, the ablation one
    run after another with an evaluation every 100 steps), ``sequential`` (mlexp, one after
    another) or ``side by side`` (mlexp, as the chapter calls it).
    """
    rope = mock.patch("mlexp.transformer.apply_rope", rope_recomputed) if recipe == "spec" else contextlib.nullcontext()
    eval_every = {"eval_every": 100} if recipe == "spec" else {}
    start = time.perf_counter()
    with rope:
        model = chapter_model()
        history = mlexp.train_lm(model, train_ids, val_ids, steps=600, block_size=BLOCK, log=False)
        models = {v: ablation_model(v) for v in VARIANTS}
        if recipe == "side by side":
            runs = mlexp.train_side_by_side(models, train_ids, val_ids, steps=400, block_size=BLOCK, log=False)
        else:
            runs = {v: mlexp.train_lm(m, train_ids, val_ids, steps=400, block_size=BLOCK, log=False, **eval_every)
                    for v, m in models.items()}
    seconds = time.perf_counter() - start
    return seconds, {"history": history, "model": model, "ablation": runs}


@torch.no_grad()
def loss_standard_error(model: TransformerLM, ids: torch.Tensor, windows: int = 512) -> float:
    """Standard error of a mean loss over ``windows`` random windows, as train_lm evaluates."""
    model.eval()
    starts = torch.randint(len(ids) - BLOCK, (windows,), generator=torch.Generator().manual_seed(7))
    x, y = _windows(ids, starts, BLOCK)
    logits, _ = model(x)
    per_window = F.cross_entropy(logits.flatten(0, 1), y.flatten(), reduction="none").view(windows, BLOCK).mean(1)
    return per_window.std().item() / math.sqrt(windows)


def eval_share(history: dict) -> float:
    evaluating = sum(history["eval_time"])
    return evaluating / (history["time"][-1] - evaluating)


def peak_memory_mb() -> tuple[float, float]:
    """Peak resident memory of this process and of its largest finished worker, in MB."""
    kb_self = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    kb_children = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return kb_self / 1024, kb_children / 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=60, help="training steps to time")
    parser.add_argument("--chapter", action="store_true", help="also time all of the chapter's training, three ways")
    args = parser.parse_args()

    _, train_ids, val_ids = mlexp.load_char_corpus()
    threads = torch.get_num_threads()
    print(f"torch {torch.__version__}, {mlexp.default_device()}, {threads} threads")
    limit = matmul_gflops()
    print(f"fp32 matmul rate (2048 x 2048):          {limit:8.1f} GFLOP/s")
    per_token = flops_per_token(TransformerLM(65), BLOCK)
    rate = tokens_per_second(train_ids, val_ids, args.steps)
    achieved = rate * per_token / 1e9
    print(f"train_lm, 4-block model, batch {BATCH}:      {rate:8.0f} tokens/s")
    print(f"FLOPs per token (training):              {per_token / 1e6:8.2f} MFLOP")
    print(f"achieved:                                {achieved:8.1f} GFLOP/s = {achieved / limit:.0%} of the matmul rate")

    step_ms = BATCH * BLOCK / rate * 1e3
    arithmetic_ms = step_ms * arithmetic_share(train_ids, val_ids)
    ceiling = per_token * BATCH * BLOCK / (arithmetic_ms / 1e3) / 1e9
    print(f"one training step:                       {step_ms:8.1f} ms")
    print(f"  in matrix products and attention:      {arithmetic_ms:8.1f} ms = {arithmetic_ms / step_ms:.0%}")
    print(f"  in everything else:                    {step_ms - arithmetic_ms:8.1f} ms")
    print(f"ceiling, all else free:                  {ceiling:8.1f} GFLOP/s = {ceiling / limit:.0%} of the matmul rate")

    if not args.chapter:
        return
    times, results = {}, {}
    for recipe in ("spec", "sequential", "side by side"):
        times[recipe], results[recipe] = chapter_runs(train_ids, val_ids, recipe)
        print(f"Chapter 1 training, {recipe + ':':14s}        {times[recipe]:8.0f} s = {times[recipe] / 60:.1f} min", flush=True)
    print(f"  speed-up against the spec's recipe:    {times['spec'] / times['side by side']:8.2f}x "
          f"(side by side alone: {times['sequential'] / times['side by side']:.2f}x)")
    ours, spec = results["side by side"], results["spec"]
    print("  val losses, spec recipe -> ours:       600 steps "
          f"{spec['history']['val'][-1]:.3f} -> {ours['history']['val'][-1]:.3f}; ablation "
          + ", ".join(f"{spec['ablation'][v]['val'][-1]:.3f} -> {ours['ablation'][v]['val'][-1]:.3f}" for v in VARIANTS))
    error = loss_standard_error(ours["model"], val_ids)
    def worst_share(runs: dict) -> float:
        return max(eval_share(h) for h in [runs["history"], *runs["ablation"].values()])

    print(f"evaluation: standard error {error:.4f} nats on 512 windows; at most {worst_share(ours):.0%} of a "
          f"run's training time (spec recipe: {worst_share(spec):.0%})")
    own, worker = peak_memory_mb()
    workers, _ = plan_workers(len(VARIANTS), threads)
    print(f"peak memory: this process {own:.0f} MB, largest worker {worker:.0f} MB "
          f"(at most {own + workers * worker:.0f} MB with {workers} workers)")


if __name__ == "__main__":
    main()
