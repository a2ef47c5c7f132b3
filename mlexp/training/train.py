"""``train_lm``: the short training loop every chapter uses to compare its
models.

Part I holds one recipe fixed (cross-entropy, AdamW, linear warm-up then
cosine decay, gradient clipping, PyTorch's initialization), so that when a
chapter changes one block, the block is the only thing that changed. Part
II changes the recipe instead: each part of it is passed in, from the
modules named after it (``mlexp.loss``, ``mlexp.optimizers``,
``mlexp.schedules``, ``mlexp.initialization``), and the defaults are Part
I's, bit for bit. Batches and evaluation windows are drawn from generators
seeded through :mod:`mlexp.training.seeds`.
"""

from __future__ import annotations

import math
import numbers
import time
from collections.abc import Callable, Collection

import torch
import torch.nn as nn
from torch import Tensor

from .checkpoint import Checkpoint, check_resumable, take_checkpoint
from .measure import Measure
from .precision import arithmetic
from .recipe import AdamW, CrossEntropy, WarmupCosine, auxiliary_loss
from .seeds import shifted

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
    objective: nn.Module | None = None,
    optimizer: Callable[[nn.Module], torch.optim.Optimizer] | None = None,
    schedule: Callable[[int, int, float], float] | None = None,
    init: Callable[[nn.Module], object] | None = None,
    clip: float | None = 1.0,
    measure: Measure | None = None,
    save_at: Collection[int] = (),
    start: Checkpoint | None = None,
) -> dict[str, list]:
    """Train a language model with next-token prediction and return its loss
    history.

    The recipe is passed in, one part each, the way a chapter passes a part
    of the block into the model; left out, each part is Part I's:

    - ``objective(logits, targets)``, the loss to minimize (default
      :class:`mlexp.loss.CrossEntropy`), plus whatever auxiliary loss the
      model's modules record (:func:`mlexp.loss.auxiliary_loss`);
    - ``optimizer(model)``, a factory whose parameter groups carry their
      own base rates (default :class:`mlexp.optimizers.AdamW` with ``lr``
      and ``weight_decay``);
    - ``schedule(step, steps, base_lr)``, each group's rate at each update
      from its own base rate (default
      :class:`mlexp.schedules.WarmupCosine` with ``warmup``);
    - ``init(model)``, applied before the optimizer is built (default:
      PyTorch's own initialization); a run started from a checkpoint
      skips it;
    - ``clip``, the largest gradient norm (None: no clipping).

    ``measure`` takes per-step measurements (``before(step, model)`` and
    ``after(step, model, logits, loss)``, which returns a dict of numbers
    or None); ``save_at`` lists the steps after which to keep a
    :class:`~mlexp.training.checkpoint.Checkpoint`; ``start`` continues a
    run from one.

    Evaluates the mean cross-entropy (never the training objective) on
    fixed windows of the training and validation text at the first step,
    every ``eval_every`` steps and at the end. Returns a dict of lists, one
    entry per evaluation: ``step``, ``train``, ``val``, ``time`` (seconds
    since the start) and ``eval_time`` (seconds that evaluation took); one
    entry per update: ``lr`` (every group's rate) and ``batch_loss`` (the
    objective on that update's batch); ``measures`` (``{"step": ...,
    **values}`` for each update the measure returned numbers for) and
    ``checkpoints`` (step -> Checkpoint). The model stays on ``device``
    (CUDA when available) and remembers ``block_size`` as its context
    length.
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
    save_at = sorted(set(save_at))
    if save_at and not 1 <= save_at[0] <= save_at[-1] <= steps:
        raise ValueError(
            f"save_at={save_at}: a checkpoint is taken after an update, "
            f"so give steps from 1 to {steps}"
        )

    device = default_device(device)
    model.to(device)
    model.context_length = block_size
    train_ids, val_ids = train_ids.to(device), val_ids.to(device)

    objective = CrossEntropy() if objective is None else objective
    schedule = WarmupCosine(warmup) if schedule is None else schedule
    if start is None and init is not None:
        init(model)
    params = [p for p in model.parameters() if p.requires_grad]
    if optimizer is None:
        optimizer = AdamW(lr, weight_decay=weight_decay)
    optimizer = _built(optimizer, model)
    rates = _rates(schedule, steps, optimizer)
    first = 0
    batch_gen = torch.Generator(device="cpu").manual_seed(
        shifted(BATCH_SEED)
    )
    if start is not None:
        check_resumable(start, model, optimizer, steps, rates)
        model.load_state_dict(start.weights)
        optimizer.load_state_dict(start.optimizer)
        batch_gen.set_state(start.sampler)
        first = start.step

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
        "lr": rates[first:],
        "measures": [],
    }
    checkpoints: dict[int, Checkpoint] = {}
    batch_losses: list[Tensor] = []
    start_time = time.perf_counter()

    def record(step: int) -> None:
        eval_start = time.perf_counter()
        losses = evaluate()
        now = time.perf_counter()
        elapsed = now - start_time
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
        for group, rate in zip(optimizer.param_groups, rates[step]):
            group["lr"] = rate
        starts = torch.randint(
            len(train_ids) - block_size, (batch_size,), generator=batch_gen
        ).to(device)
        x, y = windows(train_ids, starts, block_size)
        if measure is not None:
            measure.before(step, model)
        logits, _ = model(x)
        loss = objective(logits, y) + auxiliary_loss(model)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if clip is not None:
            torch.nn.utils.clip_grad_norm_(params, clip)
        optimizer.step()
        batch_losses.append(loss.detach())
        if measure is not None:
            values = measure.after(step, model, logits, loss)
            if values:
                history["measures"].append({"step": step, **values})

    # float32 on every device: see mlexp.training.precision
    with arithmetic(device).context():
        model.train()
        record(first)
        for step in range(first, steps):
            train_step(step)
            if step + 1 in save_at:
                checkpoints[step + 1] = take_checkpoint(
                    step + 1, model, optimizer, batch_gen, rates
                )
            if (step + 1) % eval_every == 0 or step + 1 == steps:
                record(step + 1)
    history["batch_loss"] = torch.stack(batch_losses).tolist()
    history["checkpoints"] = checkpoints
    return history


def _built(
    factory: Callable[[nn.Module], torch.optim.Optimizer], model: nn.Module
) -> torch.optim.Optimizer:
    """The factory's optimizer, refused before any training if it is not
    one or leaves some of the model's parameters out."""
    optimizer = factory(model)
    if not isinstance(optimizer, torch.optim.Optimizer):
        raise TypeError(
            f"the optimizer factory {factory!r} returned a "
            f"{type(optimizer).__name__}; it must build and return a "
            "torch.optim.Optimizer over the model's parameters"
        )
    covered = {
        id(p) for group in optimizer.param_groups for p in group["params"]
    }
    left_out = [
        name
        for name, p in model.named_parameters()
        if p.requires_grad and id(p) not in covered
    ]
    if left_out:
        raise ValueError(
            f"the optimizer from {factory!r} leaves {len(left_out)} "
            f"trainable parameters out ({', '.join(left_out[:3])}"
            f"{', ...' if len(left_out) > 3 else ''}): "
            "put every parameter in a group, or freeze it with "
            "requires_grad_(False)"
        )
    return optimizer


def _rates(
    schedule: Callable[[int, int, float], float],
    steps: int,
    optimizer: torch.optim.Optimizer,
) -> list[list[float]]:
    """Every group's rate at every update, from the rate the optimizer
    factory gave the group, checked before the first update."""
    base = [group["lr"] for group in optimizer.param_groups]
    rates = [
        [schedule(step, steps, b) for b in base] for step in range(steps)
    ]
    for step, row in enumerate(rates):
        for rate in row:
            number = isinstance(rate, numbers.Real)
            if not (number and math.isfinite(rate) and rate >= 0):
                raise ValueError(
                    f"the schedule {schedule!r} gives the rate {rate} at "
                    f"step {step} of {steps}; a rate must be a finite "
                    "number of at least 0"
                )
    return rates
