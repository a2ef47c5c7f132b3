"""Scores of a trained language model beyond its training loss: bits per
character, and the loss at each position of a window.

Bits per character is one score for language models with any tokenizer.
A loss per token cannot compare tokenizers: a model that reads whole words
predicts fewer, harder tokens than one that reads characters, and its loss
per token is higher even when it models the text better. What can be
compared is how well each model predicts the *same text*: its total
negative log-likelihood, in bits, divided by the number of characters.
(Chapter 2 introduced it.)

The loss by position (Chapter 3, used again in Chapter 4) shows how much a
model gains from each extra token of context, and whether it still predicts
past the length it was trained on.
"""

from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch import Tensor

from .precision import arithmetic

__all__ = ["bits_per_char", "loss_by_position", "total_nll"]


def _spans(n: int, block_size: int, stride: int) -> list[tuple[int, int]]:
    """Windows over ``n`` tokens as (start, end): the window reads
    ``ids[start:end]`` and predicts ``ids[start + 1:end + 1]``; only the
    predictions of targets after the previous window's last one count.

    The first window predicts its ``block_size`` targets; each later one
    moves ``stride`` tokens on, so a scored target has between
    ``block_size - stride + 1`` and ``block_size`` tokens of context.
    """
    spans, done = [], 0  # targets ids[1 : done + 1] are scored
    while done < n - 1:
        end = min(done + (stride if done else block_size), n - 1)
        spans.append((max(0, end - block_size), end))
        done = end
    return spans


@torch.no_grad()
def total_nll(
    model: nn.Module,
    ids: Tensor,
    block_size: int,
    batch_size: int = 32,
    stride: int | None = None,
) -> float:
    """Negative log-likelihood, in nats, of every token of ``ids`` but the
    first, each predicted once from the tokens before it.

    Windows of ``block_size`` tokens, the length the model was trained on,
    move ``stride`` tokens at a time (by default ``block_size``: windows
    that do not overlap, where a token's context is only the part of its
    window before it, ``block_size / 2`` tokens on average). A smaller
    stride gives every scored token at least ``block_size - stride + 1``
    tokens of context, at ``block_size / stride`` times the cost.
    """
    if ids.dim() != 1 or len(ids) < 2:
        raise ValueError(
            f"ids must be a 1-D tensor of at least 2 tokens, got shape "
            f"{tuple(ids.shape)}"
        )
    stride = block_size if stride is None else stride
    if not 1 <= stride <= block_size:
        raise ValueError(
            f"stride={stride} must be between 1 and block_size="
            f"{block_size}; a larger stride would skip tokens"
        )
    device = next(model.parameters()).device
    ids = ids.to(device)
    spans = _spans(len(ids), block_size, stride)
    # Each window scores the targets after the previous window's last one.
    windows = [
        (start, end, previous)
        for (start, end), (_, previous) in zip(spans, [(0, 0)] + spans)
    ]
    # The first window may be shorter than the rest: it is batched alone.
    batches = [windows[:1]] + [
        windows[i : i + batch_size]
        for i in range(1, len(windows), batch_size)
    ]
    was_training = model.training
    model.eval()
    total = 0.0
    with arithmetic(device).context():
        for batch in filter(None, batches):
            rows = torch.stack(
                [ids[start : end + 1] for start, end, _ in batch]
            )  # (B, L + 1)
            x, y = rows[:, :-1], rows[:, 1:]  # (B, L) each
            logits, _ = model(x)
            nll = F.cross_entropy(
                logits.float().transpose(1, 2), y, reduction="none"
            )  # (B, L)
            # Position t of a window from s predicts target s + t + 1.
            starts = torch.tensor([w[0] for w in batch], device=device)
            previous = torch.tensor([w[2] for w in batch], device=device)
            target = (
                starts[:, None]
                + 1
                + torch.arange(x.shape[1], device=device)
            )
            total += nll[target > previous[:, None]].sum().item()
    model.train(was_training)
    return total


def bits_per_char(
    model: nn.Module,
    tokenizer,
    text: str,
    block_size: int,
    batch_size: int = 32,
    stride: int | None = None,
) -> float:
    """Bits per character of ``model`` on ``text``, read through
    ``tokenizer``.

    Every token but the first is predicted; the characters counted are
    those of the predicted tokens, so the score is the same kind of number
    for characters, bytes or subwords. ``stride`` is :func:`total_nll`'s.
    """
    ids = tokenizer.encode(text)
    n_chars = len(text) - len(tokenizer.decode(ids[:1]))
    nats = total_nll(model, ids, block_size, batch_size, stride)
    return nats / math.log(2) / n_chars


@torch.no_grad()
def loss_by_position(
    model: nn.Module,
    ids: Tensor,
    length: int,
    positions: Tensor | None = None,
    batch_size: int = 64,
) -> Tensor:
    """Mean next-token loss at each position of a window, shape (length,).

    The text is cut into every non-overlapping window of ``length`` tokens;
    entry p is the loss on the token after position p, averaged over all
    windows, so position 0 predicts from one token and the last position
    from ``length``, and the curve's mean is the loss on the whole text.
    Any model ``train_lm`` trains will do; ``positions`` replaces 0, 1, 2,
    ... for a model whose ``forward`` takes them (Chapter 3's
    ``PositionalLM``: clamped positions for a learned table, say).
    """
    n = (len(ids) - 1) // length
    if n < 1:
        raise ValueError(
            f"{len(ids):,} tokens hold no window of {length + 1}; pass a "
            "longer text or a shorter length"
        )
    model.eval()
    device = next(model.parameters()).device
    extra = {} if positions is None else {"positions": positions}
    # (n * length + 1,) -> inputs and targets, (n, length) each
    x = ids[: n * length].view(n, length).to(device)
    y = ids[1 : n * length + 1].view(n, length).to(device)
    total = torch.zeros(length, dtype=torch.float64, device=device)
    for xb, yb in zip(x.split(batch_size), y.split(batch_size)):
        logits, _ = model(xb, **extra)
        # (B, length, vocab) -> (B, vocab, length): a loss per token
        loss = F.cross_entropy(logits.transpose(1, 2), yb, reduction="none")
        total += loss.sum(dim=0).double()
    return (total / n).cpu()
