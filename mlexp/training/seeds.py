"""Seeds that a whole chapter can shift at once, to rerun it with different
randomness.

Every seed the book uses goes through :func:`shifted`, which adds the offset
named by the ``MLEXP_SEED_OFFSET`` environment variable (default 0).
Rerunning a chapter with offset 1 or 2 changes every initialisation, batch
and evaluation sample together; the same offset on the same machine
reproduces the same numbers bit for bit.
"""

from __future__ import annotations

import os
import random

import torch

__all__ = [
    "SEED_OFFSET_ENV",
    "SEED_RUN_ENV",
    "seed_offset",
    "shifted",
    "manual_seed",
    "in_seed_run",
]

SEED_OFFSET_ENV = "MLEXP_SEED_OFFSET"
SEED_RUN_ENV = "MLEXP_SEED_RUN"


def seed_offset() -> int:
    """The seed offset of this run, read from ``$MLEXP_SEED_OFFSET`` (0 when
    unset)."""
    raw = os.environ.get(SEED_OFFSET_ENV, "").strip() or "0"
    try:
        return int(raw)
    except ValueError:
        raise ValueError(
            f"{SEED_OFFSET_ENV}={raw!r} is not an integer; set it to 0, "
            "1, 2, ..."
        ) from None


def shifted(seed: int) -> int:
    """``seed`` plus this run's offset: the seed actually used."""
    return seed + seed_offset()


def manual_seed(seed: int) -> torch.Generator:
    """Seed PyTorch and Python's ``random`` with the shifted seed (use
    instead of ``torch.manual_seed``)."""
    actual = shifted(seed)
    random.seed(actual)
    return torch.manual_seed(actual)


def in_seed_run() -> bool:
    """True while :mod:`mlexp.evidence.seedruns` executes a chapter to
    collect its values.

    A seed run gathers numbers; it does not read or judge the stored seed
    data, which it is about to replace.
    """
    return os.environ.get(SEED_RUN_ENV) == "1"
