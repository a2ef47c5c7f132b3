"""Figures the chapters draw, one call each.

A notebook's drawing code is not what a reader came for, yet Colab and
Jupyter show every cell: a figure drawn here keeps the chapter's cell to
the line that says what is drawn. Each function draws a new figure in the
book's style (:func:`mlexp.setup_style`) and returns its axes, so that a
chapter can still add to it.

Only the chapters that call a function here load this module, so editing
one figure runs only those chapters again (see
:mod:`mlexp.evidence.provenance`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import matplotlib.pyplot as plt

from .style import PALETTE

__all__ = ["loss_bars", "training_curves"]


def training_curves(
    history: Mapping[str, Sequence[float]], title: str
) -> plt.Axes:
    """Training and validation loss against the step, from a history of
    ``train_lm``."""
    _, ax = plt.subplots()
    ax.plot(history["step"], history["train"], label="train")
    ax.plot(history["step"], history["val"], label="validation")
    ax.set(
        xlabel="training step",
        ylabel="loss (nats per character)",
        title=title,
    )
    ax.legend()
    return ax


def loss_bars(
    losses: Mapping[str, float], reference: str, xlabel: str, title: str
) -> plt.Axes:
    """One horizontal bar per model, the first at the top, each labelled
    with its loss. The ``reference`` model's bar is coloured and a dashed
    line carries its loss across the others, so that each bar reads as
    better or worse than it."""
    if reference not in losses:
        raise ValueError(
            f"reference {reference!r} is not among the losses "
            f"{list(losses)}: name the model the others are read against"
        )
    blue, grey = PALETTE["blue"], PALETTE["grey"]
    names = list(losses)[::-1]  # barh draws the first name at the bottom
    _, ax = plt.subplots(figsize=(7, 3.2))
    ax.barh(
        names,
        [losses[n] for n in names],
        color=[blue if n == reference else grey for n in names],
    )
    ax.axvline(losses[reference], color=blue, lw=1, ls="--")
    for i, n in enumerate(names):
        ax.text(
            losses[n] + 0.02, i, f"{losses[n]:.2f}", va="center", fontsize=9
        )
    ax.set(
        xlim=(0, max(losses.values()) * 1.15), xlabel=xlabel, title=title
    )
    ax.grid(axis="y", visible=False)
    return ax
