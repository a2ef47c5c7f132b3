"""How close does the chapter's training come to this machine's matrix-multiply limit?

Prints, from one run on this machine:

1. the fp32 matrix-multiply rate at the current thread count (the practical limit);
2. ``train_lm``'s tokens per second on Chapter 1's 4-block model at the chapter's batch size,
   its FLOPs per token (6 x the parameters each token touches, plus attention) and the
   fraction of the matmul rate that reaches;
3. with ``--chapter``, the wall time of all of Chapter 1's training: one 4-block model for
   600 steps and six 6-block ablation variants for 400 steps each.

Usage::

    MLEXP_DATA=../shared/data python benchmarks/train_speed.py [--steps 60] [--chapter]

The machine is noisy: compare figures from the same run, and read ratios rather than
absolute numbers.
"""

from __future__ import annotations

import argparse
import time

import torch

import mlexp
from mlexp.transformer import TransformerLM, WriteNothing

BATCH, BLOCK = 32, 64  # train_lm's default batch size, the chapter's context


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


def tokens_per_second(train_ids, val_ids, steps: int) -> float:
    """Training throughput of the chapter's 4-block model, evaluation excluded."""
    mlexp.manual_seed(0)
    model = TransformerLM(65, dim=128, n_layers=4, n_heads=4)
    mlexp.train_lm(model, train_ids, val_ids, steps=5, block_size=BLOCK, log=False, eval_batches=1)  # warm up
    history = mlexp.train_lm(model, train_ids, val_ids, steps=steps, block_size=BLOCK, eval_every=steps,
                             log=False, eval_batches=1)
    eval_seconds = history["time"][0]  # the step-0 evaluation; the final one costs the same
    return steps * BATCH * BLOCK / (history["time"][-1] - 2 * eval_seconds)


def ablation_model(variant: str) -> TransformerLM:
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


def chapter_seconds(train_ids, val_ids) -> float:
    """Wall time of Chapter 1's seven training runs, as the notebook calls them."""
    start = time.perf_counter()
    mlexp.manual_seed(0)
    mlexp.train_lm(TransformerLM(65), train_ids, val_ids, steps=600, block_size=BLOCK, log=False)
    for variant in ("full model", "no position", "no attention", "no feed-forward", "no normalization", "no residual"):
        mlexp.manual_seed(0)
        mlexp.train_lm(ablation_model(variant), train_ids, val_ids, steps=400, block_size=BLOCK, eval_every=100,
                       log=False)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=60, help="training steps to time")
    parser.add_argument("--chapter", action="store_true", help="also time all of the chapter's training")
    args = parser.parse_args()

    _, train_ids, val_ids = mlexp.load_char_corpus()
    device = mlexp.default_device()
    print(f"torch {torch.__version__}, {device}, {torch.get_num_threads()} threads")
    limit = matmul_gflops()
    print(f"fp32 matmul rate (2048 x 2048):       {limit:8.1f} GFLOP/s")
    rate = tokens_per_second(train_ids, val_ids, args.steps)
    per_token = flops_per_token(TransformerLM(65), BLOCK)
    achieved = rate * per_token / 1e9
    print(f"train_lm, 4-block model, batch {BATCH}:   {rate:8.0f} tokens/s")
    print(f"FLOPs per token (training):           {per_token / 1e6:8.2f} MFLOP")
    print(f"achieved:                             {achieved:8.1f} GFLOP/s = {achieved / limit:.0%} of the matmul rate")
    if args.chapter:
        seconds = chapter_seconds(train_ids, val_ids)
        print(f"Chapter 1 training (7 models):        {seconds:8.0f} s = {seconds / 60:.1f} min")


if __name__ == "__main__":
    main()
