"""Checkpoints: a run stopped at a step, to resume or to branch from.

A checkpoint holds everything the next update depends on: the weights,
the optimizer's state, the batch sampler's state and the rates used so
far. A run started from it with the same settings continues exactly
where the first run was, bit for bit. A run of another length or with
another schedule branches from it (Chapter 10 decays several times from
one long run), and is refused only where its rates before the checkpoint
differ from those the saved run took: then it would not continue that
run.
"""

from __future__ import annotations

import copy
import dataclasses

import torch
import torch.nn as nn
from torch import Tensor

__all__ = ["Checkpoint", "take_checkpoint", "check_resumable"]


@dataclasses.dataclass
class Checkpoint:
    """A run after ``step`` updates."""

    step: int
    steps: int  # the length of the run that saved it
    weights: dict[str, Tensor]
    optimizer: dict
    sampler: Tensor  # the batch generator's state
    rates: list[list[float]]  # each update's rate per group, before step


def take_checkpoint(
    step: int,
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    sampler: torch.Generator,
    rates: list[list[float]],
) -> Checkpoint:
    """Copies, not references: the run goes on changing its tensors."""
    return Checkpoint(
        step=step,
        steps=len(rates),
        weights={
            name: value.detach().clone()
            for name, value in model.state_dict().items()
        },
        optimizer=copy.deepcopy(optimizer.state_dict()),
        sampler=sampler.get_state(),
        rates=[list(r) for r in rates[:step]],
    )


def check_resumable(
    start: object,
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    steps: int,
    rates: list[list[float]],
) -> None:
    """Raise before any training if ``start`` cannot continue this run:
    not a checkpoint, no steps left, another model's weights, or a
    schedule that disagrees with the steps already taken."""
    if not isinstance(start, Checkpoint):
        raise TypeError(
            f"start is a {type(start).__name__}; pass a Checkpoint from an "
            "earlier run's history['checkpoints'] (save_at=...)"
        )
    if not 0 < start.step < steps:
        raise ValueError(
            f"the checkpoint was taken after {start.step} steps; a run "
            f"of {steps} steps started from it would have none left to "
            "take: give steps beyond the checkpoint's"
        )
    own = {k: tuple(v.shape) for k, v in model.state_dict().items()}
    saved = {k: tuple(v.shape) for k, v in start.weights.items()}
    if own != saved:
        missing = sorted(own.keys() - saved.keys())
        extra = sorted(saved.keys() - own.keys())
        resized = sorted(
            k for k in own.keys() & saved.keys() if own[k] != saved[k]
        )
        raise ValueError(
            "the checkpoint holds another model's weights (missing: "
            f"{missing[:3]}, not in this model: {extra[:3]}, other "
            f"shapes: {resized[:3]}); start it on a model built with the "
            "same settings as the run that saved it"
        )
    saved = [
        {k: v for k, v in g.items() if k != "lr"}
        for g in start.optimizer["param_groups"]
    ]
    own_groups = [
        {k: v for k, v in g.items() if k != "lr"}
        for g in optimizer.state_dict()["param_groups"]
    ]
    if saved != own_groups:
        raise ValueError(
            "the checkpoint's optimizer groups its parameters or sets "
            f"them differently ({saved}) from this run's ({own_groups}); "
            "resume with the optimizer factory that saved it"
        )
    for step, (old, new) in enumerate(zip(start.rates, rates)):
        if old != new:
            raise ValueError(
                f"at step {step} the checkpointed run used rates {old} "
                f"and this run's schedule gives {new}: the run that saved "
                f"it ({start.steps} steps) had another length or "
                "schedule. Resume with the same steps and schedule, or "
                "branch with a schedule that agrees with it on every step "
                "before the checkpoint"
            )
