"""Chapter 2's figures, one call each.

Kept apart from the figures other chapters load, so that redrawing one of
these runs only Chapter 2 again (see :mod:`mlexp.evidence.provenance`).
Each function draws a new figure in the book's style
(:func:`mlexp.setup_style`) and returns it; the chapter computes in view
what is drawn.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import matplotlib.pyplot as plt
import torch

from .style import PALETTE

__all__ = ["bytes_per_char", "compression", "race", "embedding_map"]

#: The race's runs, in the order the chapter trains them.
RACE_COLOURS = ("grey", "orange", "blue", "green", "purple")
#: The compression curves' colours, in drawing order.
SPLIT_COLOURS = {"no pre-split": "orange", "pre-split": "blue"}
#: Each kind of character's colour in the embedding map.
KIND_COLOURS = {
    "lower case": "blue",
    "upper case": "orange",
    "digit": "green",
    "punctuation": "red",
    "white space": "purple",
}


def bytes_per_char(per_char: Mapping[str, float]) -> plt.Figure:
    """One bar per language: the UTF-8 bytes per character of its line."""
    fig, ax = plt.subplots(figsize=(7, 3))
    ax.bar(list(per_char), list(per_char.values()), color=PALETTE["blue"])
    ax.set(
        ylabel="UTF-8 bytes per character",
        title="The same line in six languages, and a row of emoji",
    )
    ax.grid(axis="x", visible=False)
    return fig


def compression(
    sizes: Sequence[int],
    curves: Mapping[str, Sequence[float]],
    colours: Mapping[str, str] = SPLIT_COLOURS,
) -> plt.Figure:
    """Characters per token against vocabulary size, on a logarithmic
    axis: one line per tokenizer in ``curves``, drawn in the order of
    ``colours`` (tokenizer -> palette colour), every other size labelled."""
    fig, ax = plt.subplots(figsize=(7, 3.2))
    for name, colour in colours.items():
        ax.plot(
            sizes,
            curves[name],
            marker="o",
            color=PALETTE[colour],
            label=name,
        )
    ax.set(
        xscale="log",
        xlabel="vocabulary size (tokens)",
        ylabel="characters per token",
        title="Compression of the validation text",
    )
    ax.set_xticks(sizes[::2], [f"{v:,}" for v in sizes[::2]])
    ax.minorticks_off()
    ax.legend()
    return fig


def race(
    bits: Mapping[str, float],
    points: Mapping[str, tuple[Sequence[float], Sequence[float]]],
) -> plt.Figure:
    """Two panels for the race between tokenizers. Left, each run's final
    bits per character as a bar labelled with its value, the first run at
    the top. Right, each run's (text read, bits per character) ``points``
    from the training loop's evaluations, one line per run."""
    runs = list(bits)
    colours = dict(zip(runs, RACE_COLOURS))
    fig, (left, right) = plt.subplots(1, 2, figsize=(9, 3.4))
    bars = left.barh(
        runs[::-1],
        [bits[r] for r in runs[::-1]],
        color=[PALETTE[colours[r]] for r in runs[::-1]],
    )
    left.bar_label(bars, fmt="%.3f", padding=3, fontsize=9)
    left.set(
        xlim=(0, max(bits.values()) * 1.3),
        xlabel="bits per character (validation)",
        title="At the end of each run",
    )
    left.grid(axis="y", visible=False)
    for run in runs:
        right.plot(
            *points[run],
            marker="o",
            ms=3,
            color=PALETTE[colours[run]],
            label=run,
        )
    right.set(
        xlabel="training text read (millions of characters)",
        ylabel="bits per character (approx.)",
        title="Against text read",
    )
    right.legend(fontsize=8)
    return fig


def embedding_map(
    maps: Mapping[str, tuple[torch.Tensor, torch.Tensor]],
    chars: Sequence[str],
    kinds: Sequence[str],
) -> plt.Figure:
    """One panel per table of the character model ("embed", then "head"):
    each row at its coordinates on the table's two principal directions
    (``maps[table]`` holds them, shape (vocab, 2), and each direction's
    share of the variance), coloured by its character's kind and labelled
    with the character (a space as ␣, a line break as ⏎)."""
    fig, axes = plt.subplots(1, 2, figsize=(8, 4))
    for ax, table, title in zip(
        axes, ("embed", "head"), ("embedding", "head")
    ):
        xy, variance = maps[table]
        for k, colour in KIND_COLOURS.items():
            idx = torch.tensor([i for i, kk in enumerate(kinds) if kk == k])
            if len(idx):
                ax.scatter(*xy[idx].T, s=12, color=PALETTE[colour], label=k)
        for i, c in enumerate(chars):
            ax.annotate(
                {" ": "␣", "\n": "⏎"}.get(c, c),
                xy[i].tolist(),
                fontsize=7,
                xytext=(2, 2),
                textcoords="offset points",
            )
        ax.set(
            title=f"character {title} rows",
            xticks=[],
            yticks=[],
            xlabel=(
                f"1st principal direction ({variance[0]:.0%} of variance)"
            ),
            ylabel=f"2nd ({variance[1]:.0%})",
        )
    axes[1].legend(fontsize=7, loc="best")
    return fig
