"""mlexp: the small PyTorch library that the chapters of ML Explained
import.

The top level holds what a reader learns, one module per part of the
block: ``transformer`` (Chapter 1's model), ``bpe`` (tokens), ``position``,
``attention``, ``feedforward``, ``normalization``, ``residual``. Two
subpackages hold the rest: ``mlexp.training`` (data, seeds, arithmetic,
training and scoring), which the parts use, and ``mlexp.evidence``
(gluing, figure style, seed runs, the seed table and the evidence page),
with which the book checks itself.

What every chapter uses is re-exported here, so a notebook's imports
survive a move inside the package. What only some chapters use (the BPE
tokenizer, bits per character, the feed-forward, normalization and
residual variants and their measurements) is imported on first use, so a
chapter's kernel loads, and its seed runs' fingerprint covers, only the
modules its numbers can depend on
(see :mod:`mlexp.evidence.provenance`).
"""

from __future__ import annotations

import importlib

import torch.nn as nn

from . import transformer
from .evidence import seedstats
from .evidence.pages import glue, glue_md
from .evidence.seedtable import seed_section, timing_note
from .evidence.style import PALETTE, setup_style
from .training.data import CharTokenizer, load_char_corpus, load_text_split
from .training.precision import describe_device
from .training.seeds import in_seed_run, manual_seed, seed_offset, shifted
from .training.side_by_side import (
    train_for_comparison,
    train_side_by_side,
)
from .training.train import default_device, train_lm

__version__ = "0.1.0"

# Public names of the modules imported on first use.
_LAZY = {
    "BPETokenizer": "bpe",
    "bits_per_char": "training.evaluate",
    "loss_by_position": "training.evaluate",
    **dict.fromkeys(
        [
            "MLP",
            "GatedFFN",
            "GATES",
            "gated_hidden",
            "MoE",
            "balance_loss",
            "hidden_activations",
            "expert_choices",
            "expert_load",
            "capacity_overflow",
            "active_params",
        ],
        "feedforward",
    ),
    **dict.fromkeys(
        [
            "LayerNorm",
            "TokenBatchNorm",
            "DyT",
            "PostNorm",
            "OutputNorm",
            "PLACEMENTS",
            "block_kwargs",
            "xavier_init",
            "ffn_grad_norms",
            "position_leak",
            "unigram_loss",
            "OUTCOMES",
            "classify_run",
            "time_in_turns",
            "norm_times",
        ],
        "normalization",
    ),
    **dict.fromkeys(
        [
            "Highway",
            "ReZero",
            "hidden_states",
            "logit_lens",
            "lm_loss",
            "blocks_in_order",
            "loss_with_blocks",
            "deletion_losses",
            "random_deletion_losses",
            "swap_losses",
            "stream_rms",
            "relative_updates",
            "neighbour_cosines",
            "token_uniformity",
            "block_input_grads",
        ],
        "residual",
    ),
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
    "train_for_comparison",
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
