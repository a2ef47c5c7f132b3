"""What passing the recipe in costs a training step: Part I's loop against today's.

Trains Chapter 1's model (4 blocks x 128, context 64, batch 32) with the frozen copy of the loop
as Part I ran it (``tests/frozen/part1_train.py``), with today's ``train_lm`` at its defaults, and
with today's loop taking a per-step measurement (``LogitStats``), in turns: one short run of each,
then the next round, the first variant rotating, so a machine whose speed drifts slows them alike.
Prints each variant's median time per training step (evaluation excluded) and its ratio to Part
I's loop, and whether the default run's weights equal Part I's bit for bit.

Usage::

    PYTHONPATH=. MLEXP_DATA=../shared/data python benchmarks/recipe_overhead.py [--steps 20] [--rounds 5]
"""

from __future__ import annotations

import argparse
import importlib.util
import pathlib
import statistics

import torch

import mlexp
from mlexp.loss import LogitStats
from mlexp.transformer import TransformerLM

FROZEN = pathlib.Path(__file__).resolve().parents[1] / "tests" / "frozen" / "part1_train.py"


def part1_train_lm():
    spec = importlib.util.spec_from_file_location("part1_train", FROZEN)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.train_lm


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()

    tok, train_ids, val_ids = mlexp.load_char_corpus()
    old_loop = part1_train_lm()
    variants = {
        "Part I's loop": lambda model: old_loop(model, train_ids, val_ids, **run),
        "train_lm, defaults": lambda model: mlexp.train_lm(model, train_ids, val_ids, **run),
        "train_lm + LogitStats": lambda model: mlexp.train_lm(
            model, train_ids, val_ids, measure=LogitStats(), **run
        ),
    }
    run = dict(steps=args.steps, block_size=64, eval_every=args.steps, eval_batches=1, log=False)

    def model():
        mlexp.manual_seed(0)
        return TransformerLM(tok.vocab_size, dim=128, n_layers=4, n_heads=4)

    per_step = {name: [] for name in variants}
    weights = {}
    names = list(variants)
    for round_ in range(args.rounds):
        order = names[round_ % len(names):] + names[: round_ % len(names)]
        for name in order:
            m = model()
            history = variants[name](m)
            training = history["time"][-1] - sum(history["eval_time"])
            per_step[name].append(training / args.steps)
            weights[name] = [p.detach().clone() for p in m.parameters()]

    print(f"PyTorch {torch.__version__}, {torch.get_num_threads()} threads, {args.steps} steps x "
          f"{args.rounds} rounds, Chapter 1's 4 x 128 model, batch 32, context 64")
    base = statistics.median(per_step[names[0]])
    for name in names:
        median = statistics.median(per_step[name])
        print(f"  {name:24s} {1000 * median:7.1f} ms/step   x{median / base:.3f}")
    same = all(torch.equal(a, b) for a, b in zip(weights[names[0]], weights[names[1]]))
    print(f"defaults' weights equal Part I's bit for bit: {same}")


if __name__ == "__main__":
    main()
