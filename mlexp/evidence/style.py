"""The book's figure style: one palette, readable on the site's light and
dark themes.

Figures keep an opaque white background, so they read the same on either
theme; the dark theme's stylesheet frames them rather than recolouring them.
"""

from __future__ import annotations

import matplotlib as mpl

__all__ = ["PALETTE", "setup_style"]

# Colour-blind-safe hues that hold their contrast on white.
PALETTE = {
    "blue": "#2563eb",
    "orange": "#d97706",
    "green": "#059669",
    "red": "#dc2626",
    "purple": "#7c3aed",
    "grey": "#6b7280",
    "light": "#d1d5db",
    "ink": "#1f2937",
}


def setup_style() -> None:
    """Apply the book's matplotlib style and, inside Jupyter, render figures
    as SVG."""
    ink = PALETTE["ink"]
    mpl.rcParams.update(
        {
            "axes.prop_cycle": mpl.cycler(
                color=[
                    PALETTE[c]
                    for c in (
                        "blue",
                        "orange",
                        "green",
                        "red",
                        "purple",
                        "grey",
                    )
                ]
            ),
            "figure.figsize": (6.4, 3.6),
            "figure.dpi": 100,
            "figure.facecolor": "white",
            "axes.facecolor": "white",
            "savefig.facecolor": "white",
            "savefig.bbox": "tight",
            "axes.edgecolor": ink,
            "axes.labelcolor": ink,
            "axes.titlecolor": ink,
            "text.color": ink,
            "xtick.color": ink,
            "ytick.color": ink,
            "axes.spines.top": False,
            "axes.spines.right": False,
            "axes.grid": True,
            "grid.color": PALETTE["light"],
            "grid.linewidth": 0.6,
            "font.size": 10,
            "axes.titlesize": 11,
            "legend.frameon": False,
            "svg.fonttype": "none",
        }
    )
    try:
        from IPython import get_ipython
        from matplotlib_inline.backend_inline import set_matplotlib_formats

        if get_ipython() is not None:
            set_matplotlib_formats("svg")
    except ImportError:
        pass
