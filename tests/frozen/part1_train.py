"""Part I's ``train_lm`` as it was before the recipe was passed in (commit
f67bb3c), frozen: the tests and ``benchmarks/recipe_overhead.py`` hold today's
defaults to it bit for bit. Do not edit.

The short training loop every chapter uses to compare its
models.

One fixed recipe (AdamW, linear warm-up then cosine decay, gradient
clipping), so that when a chapter changes one block, the block is the only
thing that changed. Batches and evaluation windows are drawn from generators
seeded through :mod:`mlexp.training.seeds`.
"""

from __future__ import annotations

import math
import time

import torch
import torch.nn as nn
from torch import Tensor

from mlexp.training.precision import arithmetic
from mlexp.training.seeds import shifted

__all__ = ["train_lm", "default_device", "evaluation_starts", "windows"]

# Seeds of the two samplers, before the run's offset is added.
BATCH_SEED = 1337
EVAL_SEED = 2024


def default_device(
    device: str | torch.device | None = None,
) -> torch.device:
    """``device`` when one is given; otherwise CUDA when a GPU is present,
    the CPU if not."""
    if device is not None:
        return torch.device(device)
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def windows(
    ids: Tensor, starts: Tensor, block_size: int
) -> tuple[Tensor, Tensor]:
    """Inputs and next-token targets for windows starting at ``starts``: two
    (B, block_size)."""
    # (B, block_size + 1), no copy of the corpus
    rows = ids.unfold(0, block_size + 1, 1)[starts]
    return rows[:, :-1], rows[:, 1:]


def evaluation_starts(
    train_ids: Tensor, val_ids: Tensor, block_size: int, n_windows: int
) -> dict[str, Tensor]:
    """Where ``train_lm``'s fixed evaluation windows start in each split,
    ``{"train": (n_windows,), "val": (n_windows,)}``.

    They depend only on the lengths and the run's seed offset, so a chapter
    can score anything else (a counting baseline, say) on exactly the
    windows its models were scored on.
    """
    generator = torch.Generator(device="cpu").manual_seed(
        shifted(EVAL_SEED)
    )
    return {
        "train": torch.randint(
            len(train_ids) - block_size, (n_windows,), generator=generator
        ),
        "val": torch.randint(
            len(val_ids) - block_size, (n_windows,), generator=generator
        ),
    }


def _lr_at(
    step: int, steps: int, lr: float, warmup: int, min_ratio: float = 0.1
) -> float:
    """Linear warm-up, then cosine decay to ``min_ratio * lr`` at the last
    step."""
    if step < warmup:
        return lr * (step + 1) / warmup
    progress = (step - warmup) / max(1, steps - warmup)
    return lr * (
        min_ratio
        + (1 - min_ratio) * 0.5 * (1 + math.cos(math.pi * progress))
    )


def train_lm(
    model: nn.Module,
    train_ids: Tensor,
    val_ids: Tensor,
    steps: int,
    block_size: int,
    eval_every: int = 200,
    log: bool = True,
    *,
    batch_size: int = 32,
    lr: float = 3e-3,
    warmup: int = 40,
    weight_decay: float = 0.1,
    eval_batches: int = 16,
    seed: int = 0,
    device: str | torch.device | None = None,
) -> dict[str, list]:
    """Train a language model with next-token prediction and return its loss
    history.

    Evaluates the mean loss on fixed windows of the training and validation
    text at step 0, every ``eval_every`` steps and at the end. Returns a
    dict of lists: ``step``, ``train``, ``val``, ``time`` (seconds since the
    start) and ``eval_time`` (seconds that evaluation took), one entry per
    evaluation. The model stays on ``device`` (CUDA when available) and
    remembers ``block_size`` as its context length.
    """
    for name, ids in (("train_ids", train_ids), ("val_ids", val_ids)):
        if ids.dim() != 1 or len(ids) <= block_size:
            raise ValueError(
                f"{name} has {len(ids):,} tokens, too few for "
                f"block_size={block_size}; "
                "use a shorter block_size or a larger split"
            )
    if steps < 1 or eval_every < 1:
        raise ValueError(
            f"steps={steps} and eval_every={eval_every} must both be at "
            "least 1"
        )

    device = default_device(device)
    on_cuda = device.type == "cuda"
    model.to(device)
    model.context_length = block_size
    train_ids, val_ids = train_ids.to(device), val_ids.to(device)

    # Decay the matrices, not the gains of the norms.
    params = [p for p in model.parameters() if p.requires_grad]
    groups = [
        {
            "params": [p for p in params if p.dim() >= 2],
            "weight_decay": weight_decay,
        },
        {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0},
    ]
    optimizer = torch.optim.AdamW(
        groups, lr=lr, betas=(0.9, 0.99), fused=on_cuda or None
    )

    batch_gen = torch.Generator(device="cpu").manual_seed(
        shifted(BATCH_SEED)
    )
    eval_starts = {
        split: starts.to(device)
        for split, starts in evaluation_starts(
            train_ids, val_ids, block_size, eval_batches * batch_size
        ).items()
    }
    splits = {"train": train_ids, "val": val_ids}

    @torch.no_grad()
    def evaluate() -> dict[str, float]:
        model.eval()
        means = {}
        for split, starts in eval_starts.items():
            total = 0.0
            for chunk in starts.split(batch_size):
                x, y = windows(splits[split], chunk, block_size)
                _, loss = model(x, y, include_aux=False)
                total += loss.item() * len(chunk)
            means[split] = total / len(starts)
        model.train()
        return means

    history: dict[str, list] = {
        "step": [],
        "train": [],
        "val": [],
        "time": [],
        "eval_time": [],
    }
    start = time.perf_counter()

    def record(step: int) -> None:
        eval_start = time.perf_counter()
        losses = evaluate()
        now = time.perf_counter()
        elapsed = now - start
        history["step"].append(step)
        history["train"].append(losses["train"])
        history["val"].append(losses["val"])
        history["time"].append(elapsed)
        history["eval_time"].append(now - eval_start)
        if log:
            print(
                f"step {step:4d}  train {losses['train']:.3f}  val "
                f"{losses['val']:.3f}  ({elapsed:.0f}s)",
                flush=True,
            )

    def train_step(step: int) -> None:
        for group in optimizer.param_groups:
            group["lr"] = _lr_at(step, steps, lr, warmup)
        starts = torch.randint(
            len(train_ids) - block_size, (batch_size,), generator=batch_gen
        ).to(device)
        x, y = windows(train_ids, starts, block_size)
        _, loss = model(x, y)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        optimizer.step()

    # float32 on every device: see mlexp.training.precision
    with arithmetic(device).context():
        model.train()
        record(0)
        for step in range(steps):
            train_step(step)
            if (step + 1) % eval_every == 0 or step + 1 == steps:
                record(step + 1)
    return history
