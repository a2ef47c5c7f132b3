"""mlexp: the small PyTorch library that the chapters of ML Explained
import.

What every chapter uses is imported here. What only some chapters use (the
BPE tokenizer, bits per character) is imported on first use, so a chapter's
kernel loads, and its seed runs' fingerprint covers, only the modules its
numbers can depend on (see :mod:`mlexp.provenance`).
"""

from __future__ import annotations

import importlib

import torch.nn as nn

from . import seedstats, transformer
from .data import CharTokenizer, load_char_corpus, load_text_split
from .pages import glue, glue_md
from .precision import describe_device
from .seeds import in_seed_run, manual_seed, seed_offset, shifted
from .seedtable import seed_section, timing_note
from .side_by_side import train_side_by_side
from .style import PALETTE, setup_style
from .train import default_device, train_lm

__version__ = "0.1.0"

# Public names of the modules imported on first use.
_LAZY = {
    "BPETokenizer": "bpe",
    "bits_per_char": "evaluate",
}

__all__ = [
    "seedstats",
    "transformer",
    "CharTokenizer",
    "load_char_corpus",
    "load_text_split",
    "glue",
    "glue_md",
    "describe_device",
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
    *_LAZY,
]


def __getattr__(name: str):
    if name in _LAZY:
        module = importlib.import_module(f".{_LAZY[name]}", __name__)
        return getattr(module, name)
    raise AttributeError(f"module 'mlexp' has no attribute {name!r}")


def count_params(model: nn.Module) -> int:
    """Number of trainable parameters."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad)
