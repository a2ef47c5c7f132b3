"""Counting baselines: what a model's loss should be read against
(Chapter 8).

Before any network, text can be predicted by counting: how often each
character follows each context of the last ``n - 1`` characters in the
training text. :class:`NGram` does that with interpolated absolute
discounting (Ney, Essen and Kneser, 1994): every seen continuation gives
up a fixed ``discount`` of its count, and the mass freed is handed to the
next shorter context's prediction, down to a uniform guess, so that no
character is ever impossible. A compressor is another counter:
:func:`compressed_bits` reads a general-purpose compressor's output size as
a code length.

Losses are in nats per token, like every loss in the book.
"""

from __future__ import annotations

import bz2
import gzip
import lzma

import numpy as np
from torch import Tensor

__all__ = ["NGram", "compressed_bits"]


class NGram:
    """An interpolated absolute-discounting n-gram model over token ids.

    ``P_k(w|h) = (max(c(hw) - D, 0) + D N(h) P_{k-1}(w|h')) / c(h)``

    where ``h`` holds the last ``k - 1`` tokens, ``h'`` drops its oldest,
    ``c`` counts in the training text, ``N(h)`` is the number of distinct
    tokens seen after ``h`` and ``D`` the discount; a context never seen
    passes its whole mass down, and below order 1 stands the uniform
    ``1 / vocab``.
    """

    def __init__(
        self, train_ids: Tensor, vocab: int, n: int, discount: float = 0.75
    ):
        if n < 1:
            raise ValueError(f"n={n}: an n-gram looks at n - 1 >= 0 tokens")
        if not 0 <= discount < 1:
            raise ValueError(
                f"discount={discount}: give a discount in [0, 1) "
                "(0.75 is the usual choice)"
            )
        if vocab**n >= 2**62:
            raise ValueError(
                f"vocab={vocab} and n={n}: contexts this long do not fit "
                "the integer keys used to count them; use a smaller n"
            )
        self.vocab, self.n, self.discount = vocab, n, discount
        ids = np.asarray(train_ids, dtype=np.int64)
        # per order k: the sorted keys of every (context, next) seen, their
        # counts, and per context its total count and distinct nexts
        self.tables = []
        for k in range(1, n + 1):
            keys = _keys(ids, k, vocab)
            seen, counts = np.unique(keys, return_counts=True)
            contexts, first = np.unique(seen // vocab, return_index=True)
            totals = np.add.reduceat(counts, first)
            distinct = np.diff(np.append(first, len(seen)))
            self.tables.append((seen, counts, contexts, totals, distinct))

    def probs(self, ids: Tensor) -> np.ndarray:
        """``P(ids[t] | the n - 1 tokens before it)`` for every ``t``; the
        first tokens use the shorter context they have."""
        ids = np.asarray(ids, dtype=np.int64)
        p = np.full(len(ids), 1.0 / self.vocab)
        for k in range(1, self.n + 1):
            seen, counts, contexts, totals, distinct = self.tables[k - 1]
            keys = _keys(ids, k, self.vocab)  # one key per t >= k - 1
            c_hw = _lookup(seen, counts, keys)
            c_h = _lookup(contexts, totals, keys // self.vocab)
            n_h = _lookup(contexts, distinct, keys // self.vocab)
            lower = p[k - 1 :]
            with np.errstate(divide="ignore", invalid="ignore"):
                mixed = (
                    np.maximum(c_hw - self.discount, 0)
                    + self.discount * n_h * lower
                ) / c_h
            p[k - 1 :] = np.where(c_h > 0, mixed, lower)
        return p

    def loss(self, ids: Tensor) -> float:
        """Mean ``-ln P`` over the tokens of ``ids`` after its first
        ``n - 1``, the ones that have a full context."""
        return float(-np.log(self.probs(ids)[self.n - 1 :]).mean())


def _keys(ids: np.ndarray, k: int, vocab: int) -> np.ndarray:
    """One integer per window of ``k`` tokens, the last token least
    significant: ``key // vocab`` is then the window's context."""
    key = np.zeros(len(ids) - k + 1, dtype=np.int64)
    for j in range(k):
        key = key * vocab + ids[j : len(ids) - k + 1 + j]
    return key


def _lookup(keys: np.ndarray, values: np.ndarray, query: np.ndarray):
    """``values`` at ``query``'s places in sorted ``keys``, 0 if absent."""
    at = np.searchsorted(keys, query).clip(max=len(keys) - 1)
    return np.where(keys[at] == query, values[at], 0).astype(np.float64)


COMPRESSORS = {
    "gzip": lambda b: gzip.compress(b, compresslevel=9),
    "bz2": lambda b: bz2.compress(b, compresslevel=9),
    "xz": lambda b: lzma.compress(b, preset=9 | lzma.PRESET_EXTREME),
}


def compressed_bits(text: str, method: str, given: str = "") -> float:
    """Bits per character that ``method`` (gzip, bz2 or xz) spends on
    ``text``; with ``given``, the extra bits ``text`` costs after the
    compressor has read ``given`` first (its code length for ``text``
    conditioned on ``given``)."""
    if method not in COMPRESSORS:
        raise ValueError(
            f"method={method!r}: choose one of {sorted(COMPRESSORS)}"
        )
    if not text:
        raise ValueError("text is empty: give the text to score")
    squeeze = COMPRESSORS[method]
    both = len(squeeze((given + text).encode()))
    alone = len(squeeze(given.encode())) if given else 0
    return 8 * (both - alone) / len(text)
