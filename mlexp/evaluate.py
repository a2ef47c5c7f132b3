"""Bits per character: one score for language models with any tokenizer.

A loss per token cannot compare tokenizers: a model that reads whole words
predicts fewer, harder tokens than one that reads characters, and its loss
per token is higher even when it models the text better. What can be
compared is how well each model predicts the *same text*: its total
negative log-likelihood, in bits, divided by the number of characters.
(Chapter 2 introduced it.)
"""

from __future__ import annotations

import contextlib
import math

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch import Tensor

__all__ = ["bits_per_char", "total_nll"]


@torch.no_grad()
def total_nll(
    model: nn.Module, ids: Tensor, block_size: int, batch_size: int = 32
) -> float:
    """Negative log-likelihood, in nats, of every token of ``ids`` but the
    first, each predicted from the tokens before it in its window.

    The sequence is cut into consecutive windows of ``block_size``
    predictions; a token's context is the part of its window before it (so
    at most ``block_size`` tokens), the way the model was trained.
    """
    if ids.dim() != 1 or len(ids) < 2:
        raise ValueError(
            f"ids must be a 1-D tensor of at least 2 tokens, got shape "
            f"{tuple(ids.shape)}"
        )
    device = next(model.parameters()).device
    on_cuda = device.type == "cuda"
    autocast = (
        torch.autocast("cuda", dtype=torch.bfloat16)
        if on_cuda
        else contextlib.nullcontext()
    )
    ids = ids.to(device)
    n_full = (len(ids) - 1) // block_size
    batches = []
    if n_full:
        # Window w predicts ids[wT + 1 : wT + T + 1] from ids[wT : wT + T].
        rows = ids[: n_full * block_size + 1].unfold(
            0, block_size + 1, block_size
        )  # (n_full, block_size + 1)
        batches += rows.split(batch_size)
    tail = ids[n_full * block_size :]  # the last, shorter window
    if len(tail) > 1:
        batches.append(tail[None])  # (1, len(tail))
    was_training = model.training
    model.eval()
    total = 0.0
    for batch in batches:
        x, y = batch[:, :-1], batch[:, 1:]  # (B, T) each
        with autocast:
            logits, _ = model(x)
        total += F.cross_entropy(
            logits.float().flatten(0, 1), y.flatten(), reduction="sum"
        ).item()
    model.train(was_training)
    return total


def bits_per_char(
    model: nn.Module,
    tokenizer,
    text: str,
    block_size: int,
    batch_size: int = 32,
) -> float:
    """Bits per character of ``model`` on ``text``, read through
    ``tokenizer``.

    Every token but the first is predicted; the characters counted are
    those of the predicted tokens, so the score is the same kind of number
    for characters, bytes or subwords.
    """
    ids = tokenizer.encode(text)
    n_chars = len(text) - len(tokenizer.decode(ids[:1]))
    nats = total_nll(model, ids, block_size, batch_size)
    return nats / math.log(2) / n_chars
