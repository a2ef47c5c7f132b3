"""What a norm costs on this CPU: PyTorch's LayerNorm and RMSNorm against ours and DyT.

For each shape, one forward and one backward pass of each norm (a random gradient flows back
into the input and the gains), every norm with the same number of PyTorch threads, called in
turns (one call of each, then the next round) so that a machine whose speed drifts slows them
alike. Prints the median of the rounds in microseconds and each norm's ratio to
``nn.LayerNorm``. With ``--model`` it also times a forward and backward pass of Chapter 1's
4-block model with each norm in every place (blocks and final), the cost a training step sees.

Usage::

    python benchmarks/norm_speed.py [--threads 1] [--repeats 200] [--model]

PyTorch's ``nn.LayerNorm`` is one fused kernel forward and one backward; ``nn.RMSNorm``
(PyTorch 2.4+) and Chapter 1's RMSNorm are composed of elementwise operations and a mean
unless compiled, so on a CPU without ``torch.compile`` RMSNorm's saving of one reduction does
not show, and it can come out slower. Zhang and Sennrich measured their savings with their own
implementations on GPUs; read these figures as this machine's, and the ratios rather than the
absolute numbers (the machine is shared and noisy).
"""

from __future__ import annotations

import argparse

import torch
import torch.nn as nn

from mlexp.normalization import DyT, LayerNorm, RMSNorm, norm_times, time_in_turns
from mlexp.transformer import TransformerLM

SHAPES = [(32, 64, 128), (8, 256, 512), (4, 512, 1024)]  # (batch, positions, width)


def norms(dim: int) -> dict[str, nn.Module]:
    return {
        "nn.LayerNorm": nn.LayerNorm(dim),
        "nn.RMSNorm": nn.RMSNorm(dim, eps=1e-6),
        "our RMSNorm": RMSNorm(dim),
        "our LayerNorm": LayerNorm(dim),
        "DyT": DyT(dim),
    }


def model_times(threads: int, repeats: int) -> dict[str, float]:
    """Forward and backward of the 4 x 128 model on 32 windows of 64 tokens, per norm."""
    kinds = {"nn.LayerNorm": nn.LayerNorm, "nn.RMSNorm": nn.RMSNorm, "our RMSNorm": RMSNorm,
             "our LayerNorm": LayerNorm, "DyT": DyT}
    generator = torch.Generator().manual_seed(0)
    idx = torch.randint(65, (32, 64), generator=generator)
    runs = {}
    for name, kind in kinds.items():
        torch.manual_seed(0)
        model = TransformerLM(65, dim=128, n_layers=4, n_heads=4, norm=kind, final_norm=kind)

        def step(model=model):
            model.zero_grad(set_to_none=True)
            model(idx, idx)[1].backward()

        runs[name] = step
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        return time_in_turns(runs, repeats=repeats, warmup=2)
    finally:
        torch.set_num_threads(before)


def show(title: str, times: dict[str, float], unit: float, unit_name: str) -> None:
    base = times["nn.LayerNorm"]
    print(title)
    for name, t in times.items():
        print(f"  {name:14s} {t / unit:9.1f} {unit_name}  x{t / base:5.2f} of nn.LayerNorm")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=200)
    parser.add_argument("--model", action="store_true", help="also time the 4 x 128 model per norm")
    args = parser.parse_args()
    print(f"torch {torch.__version__}, {args.threads} thread(s), median of {args.repeats} rounds in turns")
    for shape in SHAPES:
        generator = torch.Generator().manual_seed(0)
        x = torch.randn(*shape, generator=generator)
        times = norm_times(norms(shape[-1]), x, repeats=args.repeats, threads=args.threads)
        show(f"forward + backward on {shape}", times, 1e-6, "us")
    if args.model:
        repeats = max(5, args.repeats // 20)
        show(f"the 4 x 128 model, forward + backward (median of {repeats})",
             model_times(args.threads, repeats), 1e-3, "ms")


if __name__ == "__main__":
    main()
