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
   600 steps, six 6-block variants for 150) done three ways: the spec's straightforward
   recipe, mlexp with the ablation one run after another, and mlexp as the chapter runs it,
   side by side. Each runs in a fresh process, as in a fresh kernel; the script samples the
   peak memory of that process and its workers, and reports evaluation's accuracy and share
   of training time.

Usage::

    MLEXP_DATA=../shared/data python benchmarks/train_speed.py [--steps 60] [--chapter]

The machine is noisy: compare figures from the same run, and read ratios rather than
absolute numbers.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import contextlib
import math
import multiprocessing
import os
import pathlib
import threading
import time
from unittest import mock

import torch
import torch.nn.functional as F
from torch.profiler import ProfilerActivity, profile

import mlexp
from mlexp.training.train import windows
from mlexp.transformer import TransformerLM, WriteNothing

BATCH, BLOCK = 32, 64  # train_lm's default batch size, the chapter's context
ABLATION_STEPS = 150  # as Chapter 1's ablation
VARIANTS = ("full model", "no position", "no attention", "no feed-forward", "no normalization", "no residual")
ARITHMETIC_KERNELS = ("aten::mm", "aten::addmm", "aten::bmm", "aten::_scaled_dot_product")  # name prefixes


def matmul_gflops(n: int = 2048, repeats: int = 30) -> float:
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


def chapter_runs(recipe: str) -> dict:
    """The chapter's seven training runs, timed, in a fresh process as a fresh kernel would be.

    ``recipe`` is ``spec`` (the spec's listing: RoPE rebuilt on every call, the ablation one
    run after another with an evaluation every 100 steps), ``sequential`` (mlexp, one after
    another) or ``side by side`` (mlexp, as the chapter calls it). Returns the wall time, the
    final validation losses, evaluation's largest share of a run's training time, and the
    standard error of the 600-step model's validation loss.
    """
    _, train_ids, val_ids = mlexp.load_char_corpus()
    rope = mock.patch("mlexp.transformer.apply_rope", rope_recomputed) if recipe == "spec" else contextlib.nullcontext()
    eval_every = {"eval_every": 100} if recipe == "spec" else {}
    start = time.perf_counter()
    with rope:
        model = chapter_model()
        history = mlexp.train_lm(model, train_ids, val_ids, steps=600, block_size=BLOCK, log=False)
        models = {v: ablation_model(v) for v in VARIANTS}
        if recipe == "side by side":
            runs = mlexp.train_side_by_side(models, train_ids, val_ids, steps=ABLATION_STEPS, block_size=BLOCK, log=False)
        else:
            runs = {v: mlexp.train_lm(m, train_ids, val_ids, steps=ABLATION_STEPS, block_size=BLOCK, log=False, **eval_every)
                    for v, m in models.items()}
    seconds = time.perf_counter() - start
    return {
        "seconds": seconds,
        "val": {"600 steps": history["val"][-1], **{v: runs[v]["val"][-1] for v in VARIANTS}},
        "eval_share": max(eval_share(h) for h in [history, *runs.values()]),
        "standard_error": loss_standard_error(model, val_ids),
    }


@torch.no_grad()
def loss_standard_error(model: TransformerLM, ids: torch.Tensor, windows: int = 512) -> float:
    """Standard error of a mean loss over ``windows`` random windows, as train_lm evaluates."""
    model.eval()
    starts = torch.randint(len(ids) - BLOCK, (windows,), generator=torch.Generator().manual_seed(7))
    x, y = windows(ids, starts, BLOCK)
    logits, _ = model(x)
    per_window = F.cross_entropy(logits.flatten(0, 1), y.flatten(), reduction="none").view(windows, BLOCK).mean(1)
    return per_window.std().item() / math.sqrt(windows)


def eval_share(history: dict) -> float:
    """Time spent evaluating, as a fraction of the time spent training."""
    evaluating = sum(history["eval_time"])
    return evaluating / (history["time"][-1] - evaluating)


def descendants_pss_mb() -> float:
    """Proportional set size of this process's descendants, in MB (shared pages split fairly)."""
    total_kb, stack = 0, [os.getpid()]
    while stack:
        pid = stack.pop()
        try:
            for task in pathlib.Path(f"/proc/{pid}/task").iterdir():
                stack += [int(child) for child in (task / "children").read_text().split()]
            if pid != os.getpid():
                rollup = pathlib.Path(f"/proc/{pid}/smaps_rollup").read_text()
                total_kb += int(next(line.split()[1] for line in rollup.splitlines() if line.startswith("Pss:")))
        except (OSError, StopIteration):
            continue  # the process ended while we looked
    return total_kb / 1024


def run_measuring_memory(recipe: str) -> dict:
    """``chapter_runs(recipe)`` in a spawned process, with the peak memory of it and its workers."""
    peak, done = [0.0], threading.Event()

    def sample() -> None:
        while not done.wait(0.25):
            peak[0] = max(peak[0], descendants_pss_mb())

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        with concurrent.futures.ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
            result = pool.submit(chapter_runs, recipe).result()
    finally:
        done.set()
        sampler.join()
    return {**result, "peak_mb": peak[0]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=60, help="training steps to time")
    parser.add_argument("--chapter", action="store_true", help="also time all of the chapter's training, three ways")
    args = parser.parse_args()

    _, train_ids, val_ids = mlexp.load_char_corpus()
    print(f"torch {torch.__version__}, {mlexp.default_device()}, {torch.get_num_threads()} threads")
    limit = matmul_gflops()
    print(f"fp32 matmul rate (2048², best of 30):    {limit:8.1f} GFLOP/s")
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
    results = {}
    for recipe in ("spec", "sequential", "side by side"):
        results[recipe] = run = run_measuring_memory(recipe)
        print(f"Chapter 1 training, {recipe + ':':14s}        {run['seconds']:8.0f} s = {run['seconds'] / 60:.1f} min, "
              f"peak memory {run['peak_mb']:.0f} MB", flush=True)
    spec, sequential, ours = results["spec"], results["sequential"], results["side by side"]
    print(f"  speed-up against the spec's recipe:    {spec['seconds'] / ours['seconds']:8.2f}x "
          f"(side by side alone: {sequential['seconds'] / ours['seconds']:.2f}x)")
    print("  val losses, spec recipe -> ours:       "
          + ", ".join(f"{name} {spec['val'][name]:.3f} -> {ours['val'][name]:.3f}" for name in ours["val"]))
    print(f"evaluation: standard error {ours['standard_error']:.4f} nats on 512 windows; at most "
          f"{ours['eval_share']:.0%} of a run's training time (spec recipe: {spec['eval_share']:.0%})")


if __name__ == "__main__":
    main()
