"""mlexp: the small PyTorch library that the chapters of ML Explained
import."""

from __future__ import annotations

import torch.nn as nn

from . import seedstats, transformer
from .data import CharTokenizer, load_char_corpus
from .pages import glue, glue_md
from .seeds import in_seed_run, manual_seed, seed_offset, shifted
from .seedtable import seed_section, timing_note
from .side_by_side import train_side_by_side
from .style import PALETTE, setup_style
from .train import default_device, train_lm

__version__ = "0.1.0"

__all__ = [
    "seedstats",
    "transformer",
    "CharTokenizer",
    "load_char_corpus",
    "glue",
    "glue_md",
    "in_seed_run",
    "manual_seed",
    "seed_offset",
    "shifted",
    "seed_section",
    "timing_note",
    "PALETTE",
    "setup_style",
    "default_device",
    "train_lm",
    "train_side_by_side",
    "count_params",
]


def count_params(model: nn.Module) -> int:
    """Number of trainable parameters."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad)
