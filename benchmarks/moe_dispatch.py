"""What a Mixture-of-Experts step costs against a dense feed-forward step with the same
active parameters, on this machine's CPU.

Chapter 5's layers at Chapter 1's size (width 128, SwiGLU experts of hidden width 341, the
dense layer's): one forward and backward pass over a batch of tokens (32 windows of 64 by
default), float32, one thread, all in one process, the layers taking turns, each figure
the median of a few runs:

- **dense**: ``GatedFFN(128, nn.SiLU(), 341)``, Chapter 1's SwiGLU;
- **MoE top-1**: ``MoE(128, 4, top_k=1)`` with four such experts (Switch routing): four
  times the parameters, the same active ones plus a 4 x 128 router;
- **per-token loop**: the same MoE layer computed one token and one expert at a time, the
  naive dispatch the batched one replaces (run on fewer tokens, scaled to the batch);
- **dense 682 / MoE top-2**: the same comparison for Mixtral's k = 2, against a dense
  SwiGLU of twice the width (the same active parameters).

Then a whole training step (forward, backward) of Chapter 1's model, four blocks, with the
dense SwiGLU and with the top-1 MoE in every block, the comparison the chapter makes per
step. The batched and looped layers are checked to compute the same output.

What MoE buys is parameters without compute: four experts' weights at one expert's cost
per token. The times say what routing and the batched dispatch add to a step on this CPU,
and what a loop over tokens would cost instead; they say nothing about how fast MoE trains
at scale, where experts are spread over many accelerators and moving tokens between them
matters. The chapter compares its models per step, never per second.

Usage::

    PYTHONPATH=. python benchmarks/moe_dispatch.py [--batch 32] [--context 64] [--repeats 7]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import torch
import torch.nn as nn

import mlexp
from mlexp.feedforward import GatedFFN, MoE, active_params
from mlexp.transformer import TransformerLM

DIM, HIDDEN, EXPERTS, VOCAB = 128, 341, 4, 65


def per_token(moe: MoE, x: torch.Tensor) -> torch.Tensor:
    """``moe``'s output computed one token and one chosen expert at a time."""
    flat = x.reshape(-1, x.shape[-1])
    probs = moe.router(flat).softmax(-1)
    rows = []
    for t in range(len(flat)):
        weights, chosen = probs[t].topk(moe.top_k)
        if moe.renormalize:
            weights = weights / weights.sum()
        rows.append(sum(w * moe.experts[e](flat[t : t + 1])[0] for w, e in zip(weights, chosen.tolist())))
    return torch.stack(rows).view(x.shape)


def median_ms(steps: dict[str, Callable[[], None]], repeats: int) -> dict[str, float]:
    """Median milliseconds of each step, after one warm-up call of each. The steps take turns, so
    a slow spell of a shared machine falls on all of them alike."""
    times: dict[str, list[float]] = {name: [] for name in steps}
    for step in steps.values():
        step()
    for _ in range(repeats):
        for name, step in steps.items():
            start = time.perf_counter()
            step()
            times[name].append(time.perf_counter() - start)
    return {name: 1000 * statistics.median(t) for name, t in times.items()}


def training_step(module: nn.Module, loss: Callable[[], torch.Tensor]) -> Callable[[], None]:
    """One forward and backward pass of ``loss()`` through ``module``."""

    def step() -> None:
        module.zero_grad(set_to_none=True)
        loss().backward()

    return step


def print_table(title: str, rows: list[tuple[str, nn.Module, float, str | None]]) -> None:
    """One line per (name, module, ms per step, the row it is compared with)."""
    header = f"{title:<20} {'params':>9} {'active':>9} {'ms/step':>9}  ratio"
    print(header)
    print("-" * (len(header) + 20))
    ms = {name: t for name, _, t, _ in rows}
    for name, module, t, against in rows:
        ratio = f"{t / ms[against]:.2f}x {against.strip()}" if against else ""
        print(f"{name:<20} {mlexp.count_params(module):>9,} {active_params(module):>9,} {t:>9.2f}  {ratio}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--context", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--loop-tokens", type=int, default=256, help="tokens the per-token loop runs on")
    args = parser.parse_args()
    torch.set_num_threads(1)
    n_tokens = args.batch * args.context
    print(
        f"torch {torch.__version__}, {torch.get_num_threads()} thread, float32, forward + backward, "
        f"{args.batch} x {args.context} = {n_tokens:,} tokens of width {DIM}, median of {args.repeats}"
    )
    torch.manual_seed(0)
    swiglu = lambda hidden: lambda d: GatedFFN(d, nn.SiLU(), hidden)
    dense = GatedFFN(DIM, nn.SiLU(), HIDDEN)
    moe1 = MoE(DIM, EXPERTS, top_k=1, make_expert=swiglu(HIDDEN))
    dense2 = GatedFFN(DIM, nn.SiLU(), 2 * HIDDEN)
    moe2 = MoE(DIM, EXPERTS, top_k=2, make_expert=swiglu(HIDDEN))
    x = torch.randn(args.batch, args.context, DIM, requires_grad=True)
    # the loop runs on the first windows' first --loop-tokens tokens, scaled to the batch
    few = x.detach()[:, : max(1, args.loop_tokens // args.batch)].clone().requires_grad_()
    with torch.no_grad():
        agree = (moe1(few) - per_token(moe1, few)).abs().max().item()
    scale = n_tokens / (few.numel() // DIM)

    def layer_step(layer: nn.Module, forward: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor):
        return training_step(layer, lambda: forward(x).square().mean())

    layers = {
        "dense SwiGLU 341": (dense, layer_step(dense, dense, x), None),
        "MoE 4 x 341, top-1": (moe1, layer_step(moe1, moe1, x), "dense SwiGLU 341"),
        "  per-token loop": (moe1, layer_step(moe1, lambda t: per_token(moe1, t), few), "MoE 4 x 341, top-1"),
        "dense SwiGLU 682": (dense2, layer_step(dense2, dense2, x), None),
        "MoE 4 x 341, top-2": (moe2, layer_step(moe2, moe2, x), "dense SwiGLU 682"),
    }
    ms = median_ms({name: step for name, (_, step, _) in layers.items()}, args.repeats)
    ms["  per-token loop"] *= scale
    print_table(
        "one layer", [(name, layer, ms[name], against) for name, (layer, _, against) in layers.items()]
    )
    print(
        f"batched and per-token outputs agree to {agree:.1e} (the loop timed on {few.numel() // DIM} tokens)"
    )

    print(f"\none training step of Chapter 1's model (4 blocks, width {DIM}, vocabulary {VOCAB}):")
    idx = torch.randint(VOCAB, (args.batch, args.context))
    models = {
        "dense SwiGLU 341": TransformerLM(VOCAB, make_ffn=swiglu(HIDDEN)),
        "MoE 4 x 341, top-1": TransformerLM(
            VOCAB, make_ffn=lambda d: MoE(d, EXPERTS, 1, make_expert=swiglu(HIDDEN))
        ),
    }
    times = median_ms(
        {name: training_step(m, lambda m=m: m(idx, idx)[1]) for name, m in models.items()}, args.repeats
    )
    print_table(
        "model",
        [
            (name, m, times[name], None if name.startswith("dense") else "dense SwiGLU 341")
            for name, m in models.items()
        ],
    )


if __name__ == "__main__":
    main()
