"""Chapter 10's figures, one call each.

Kept apart from the figures other chapters load, so that redrawing one of
these runs only Chapter 10 again (see :mod:`mlexp.evidence.provenance`).
Each function draws a new figure in the book's style and returns it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import matplotlib.pyplot as plt
import torch

from .style import PALETTE

__all__ = ["rates", "river", "schedule_losses", "budgets", "warmup_grid"]

COLOURS = ["grey", "blue", "green", "orange", "purple", "red", "ink"]


def smooth(values: Sequence[float], width: int = 20) -> torch.Tensor:
    """The mean of each run of ``width`` values (fewer at the start): a
    batch's loss is too noisy to read step by step."""
    v = torch.as_tensor(values, dtype=torch.float64)
    total = torch.cat([torch.zeros(1, dtype=v.dtype), v.cumsum(0)])
    ends = torch.arange(1, len(v) + 1)
    starts = (ends - width).clamp(min=0)
    return (total[ends] - total[starts]) / (ends - starts)


def rates(
    schedules: Mapping[str, Callable[[int, int, float], float]],
    steps: int,
    peak: float,
) -> plt.Figure:
    """Each schedule's learning rate at every step of a run of ``steps``,
    as a fraction of the peak."""
    fig, ax = plt.subplots(figsize=(6.2, 3.0))
    for (name, schedule), colour in zip(schedules.items(), COLOURS):
        r = [schedule(s, steps, peak) / peak for s in range(steps)]
        ax.plot(r, lw=1.6, color=PALETTE[colour], label=name)
    ax.set(xlabel="step", ylabel="rate ÷ peak", ylim=(0, 1.05))
    ax.legend(fontsize=7, ncol=2, loc="lower left")
    fig.tight_layout()
    return fig


def river(
    walks: Mapping[str, Mapping[str, torch.Tensor]],
    floors: Mapping[str, float],
    every: int = 4,
) -> plt.Figure:
    """Mean loss against the step for each toy walk, on a log axis, with
    the noise floor each constant rate predicts as a dashed line; every
    ``every``-th step is drawn (the walkers' mean is smooth)."""
    fig, ax = plt.subplots(figsize=(6.2, 3.2))
    for (name, walk), colour in zip(walks.items(), COLOURS[1:]):
        total = walk["along"] + walk["across"]
        steps = torch.arange(0, len(total), every)
        ax.plot(
            steps, total[steps], lw=1.5, color=PALETTE[colour], label=name
        )
        if name in floors:
            ax.axhline(floors[name], ls="--", lw=0.9, color=PALETTE[colour])
    ax.set(xlabel="step", ylabel="mean loss", yscale="log")
    ax.legend(fontsize=7)
    fig.tight_layout()
    return fig


def schedule_losses(
    histories: Mapping[str, Mapping],
    zoom: tuple[int, int],
    trunk: Mapping | None = None,
    every: int = 8,
) -> plt.Figure:
    """Left, each run's training loss (each batch's, smoothed) over the
    whole run; right, the last steps enlarged, with the validation loss as
    dots.

    A run branched from ``trunk`` to the trunk's end has fewer batch losses
    than the trunk: it is drawn from where it branched, its smoothing fed
    by the trunk's losses before that, so the shared steps are drawn once.
    Every ``every``-th step is drawn, which the smoothing makes invisible
    and keeps the page light.
    """
    fig, (whole, near) = plt.subplots(1, 2, figsize=(8.6, 3.4))
    first, last = zoom
    for (name, h), colour in zip(histories.items(), COLOURS):
        losses, branched = list(h["batch_loss"]), 0
        if trunk is not None and len(losses) < len(trunk["batch_loss"]):
            branched = len(trunk["batch_loss"]) - len(losses)
            losses = list(trunk["batch_loss"][:branched]) + losses
        loss = smooth(losses)
        steps = torch.arange(len(loss))
        shown = steps[branched::every]
        whole.plot(
            shown, loss[shown], lw=1.1, color=PALETTE[colour], label=name
        )
        close = steps[max(first, branched) :: every]
        near.plot(close, loss[close], lw=1.3, color=PALETTE[colour])
        evals = [(s, v) for s, v in zip(h["step"], h["val"]) if s >= first]
        near.plot(*zip(*evals), "o", ms=3.5, color=PALETTE[colour])
    whole.axvspan(first, last, color=PALETTE["grey"], alpha=0.15)
    whole.set(xlabel="step", ylabel="training loss (smoothed)")
    near.set(xlabel="step", ylabel="loss: line training, dots validation")
    whole.set_ylim(top=min(whole.get_ylim()[1], 3.5))
    whole.legend(fontsize=7)
    fig.tight_layout()
    return fig


def budgets(
    trunk: Mapping,
    branched: Mapping[int, float],
    separate: Mapping[int, float],
) -> plt.Figure:
    """Validation loss against the number of steps: the constant run's
    curve, the end of each decay branched from it, and the end of each
    separate cosine run of that length."""
    fig, ax = plt.subplots(figsize=(6.2, 3.4))
    ax.plot(
        trunk["step"][1:],
        trunk["val"][1:],
        "-",
        lw=1.2,
        color=PALETTE["grey"],
        label="constant rate",
    )
    ax.plot(
        list(branched),
        list(branched.values()),
        "o-",
        color=PALETTE["blue"],
        label="a 20% decay branched from it",
    )
    ax.plot(
        list(separate),
        list(separate.values()),
        "s--",
        color=PALETTE["orange"],
        label="a separate cosine run",
    )
    ax.set(xlabel="steps (the run's budget)", ylabel="validation loss")
    ax.legend(fontsize=7)
    fig.tight_layout()
    return fig


def warmup_grid(
    histories: Mapping[tuple[float, int], Mapping],
    first: int = 60,
) -> plt.Figure:
    """The ``first`` steps' training loss (each batch's) for every peak,
    one panel without warm-up and one with it."""
    warmups = sorted({w for _, w in histories})
    peaks = sorted({p for p, _ in histories})
    fig, axes = plt.subplots(
        1, len(warmups), figsize=(8.6, 3.2), sharey=True
    )
    for ax, warmup in zip(axes, warmups):
        for peak, colour in zip(peaks, COLOURS[1:]):
            loss = histories[peak, warmup]["batch_loss"][:first]
            ax.plot(loss, lw=1.1, color=PALETTE[colour], label=f"{peak:g}")
        title = f"{warmup} warm-up steps" if warmup else "no warm-up"
        ax.set(title=title, xlabel="step")
    axes[0].set_ylabel("training loss (each batch)")
    axes[0].legend(title="peak rate", fontsize=7, title_fontsize=7)
    fig.tight_layout()
    return fig
