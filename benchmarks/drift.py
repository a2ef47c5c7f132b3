"""How far the same experiment lands on other arithmetic, against a changed experiment.

The seed table's reproduction tolerance (mlexp.evidence.seedtable.REPRODUCTION_TOLERANCE)
must absorb what differs between machines running the same code, and must not absorb a
change of the experiment. This trains Chapter 1's main model (803,712 parameters, batch 32
x 64 characters, Chapter 1's recipe) once per setting, each in a fresh process, and prints
its validation loss beside the reference run's:

- the reference: this machine as it is;
- PyTorch's vectorized CPU kernels switched off (ATEN_CPU_CAPABILITY=default): the
  elementwise and reduction kernels take another path, as on a CPU with another
  instruction set;
- one thread instead of PyTorch's default: matrix products split their sums another way;
- a tenth more training steps: the smallest change of the experiment worth detecting.

    PYTHONPATH=. MLEXP_DATA=../shared/data python benchmarks/drift.py [--steps 600]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

RUN = """
import json, sys, torch, mlexp
from mlexp.transformer import TransformerLM
steps, threads = int(sys.argv[1]), int(sys.argv[2])
if threads:
    torch.set_num_threads(threads)
tok, train_ids, val_ids = mlexp.load_char_corpus()
mlexp.manual_seed(0)
model = TransformerLM(tok.vocab_size, dim=128, n_layers=4, n_heads=4)
history = mlexp.train_lm(model, train_ids, val_ids, steps=steps, block_size=64,
                         eval_every=steps, log=False, device="cpu")
print(json.dumps({"val": history["val"][-1],
                  "capability": torch.backends.cpu.get_cpu_capability(),
                  "threads": torch.get_num_threads()}))
"""


def run(steps: int, threads: int = 0, env: dict[str, str] | None = None) -> dict:
    out = subprocess.run(
        [sys.executable, "-c", RUN, str(steps), str(threads)],
        env={**os.environ, **(env or {})},
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=600)
    args = parser.parse_args()
    from mlexp.evidence.seedtable import REPRODUCTION_TOLERANCE

    reference = run(args.steps)
    settings = {
        "vectorized kernels off": run(args.steps, env={"ATEN_CPU_CAPABILITY": "default"}),
        "one thread": run(args.steps, threads=1),
        f"{args.steps + args.steps // 10} steps": run(args.steps + args.steps // 10),
    }
    print(f"Chapter 1's model, {args.steps} steps; tolerance {REPRODUCTION_TOLERANCE}")
    print(f"{'setting':28s} {'val loss':>9s} {'distance':>9s}")
    print(f"{'reference':28s} {reference['val']:9.6f} "
          f"{'':>9s}  ({reference['capability']}, {reference['threads']} threads)")
    for name, result in settings.items():
        distance = abs(result["val"] - reference["val"])
        print(f"{name:28s} {result['val']:9.6f} {distance:9.6f}  "
              f"({result['capability']}, {result['threads']} threads)")


if __name__ == "__main__":
    main()
