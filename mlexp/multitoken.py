"""Multi-token prediction at equal parameters (Chapter 8).

Gloeckle et al. (2024) train a shared trunk of blocks with one block per
future token on top, all reading the same norm and output head: head 1
predicts token ``t + 1``, head 2 token ``t + 2``, and the loss is the sum of
their cross-entropies. At equal parameters a 4-block model becomes a
2-block trunk and two 1-block heads, so its next-token path is 3 blocks
deep; the further head only shapes the trunk during training.

:class:`MultiTokenLM` is Chapter 1's model rearranged that way. Its forward
pass returns the next-token logits, so evaluation, sampling and the
reported loss are those of any language model; the further heads' loss is
recorded as ``aux_loss`` on the model, which ``train_lm`` adds to the
objective (as it adds a Mixture of Experts' balancing term).
"""

from __future__ import annotations

import torch.nn as nn
import torch.nn.functional as F
from torch import Tensor

from .transformer import Block, TransformerLM

__all__ = ["MultiTokenLM"]


class MultiTokenLM(TransformerLM):
    """``n_trunk`` shared blocks, then ``n_future`` heads of one block each,
    head ``i`` predicting the token ``i`` steps ahead, through one shared
    final norm and output head.

    ``TransformerLM(vocab, dim, n_trunk + n_future, heads)`` has exactly as
    many parameters, which is the comparison Gloeckle et al. make.
    """

    def __init__(
        self,
        vocab_size: int,
        dim: int = 128,
        n_trunk: int = 2,
        n_heads: int = 4,
        n_future: int = 2,
        context_length: int | None = None,
    ):
        if n_future < 1:
            raise ValueError(
                f"n_future={n_future}: predict at least the next token"
            )
        super().__init__(
            vocab_size, dim, n_trunk, n_heads, context_length=context_length
        )
        self.futures = nn.ModuleList(
            Block(dim, n_heads) for _ in range(n_future)
        )
        self.aux_loss: Tensor | None = None

    def forward(
        self,
        idx: Tensor,
        targets: Tensor | None = None,
        include_aux: bool = True,
    ):
        x = self.embed(idx)  # (B, T) -> (B, T, dim)
        for block in self.blocks:
            x = block(x)
        # head 1 is the next-token path; the others read the same trunk
        logits = self.head(self.norm(self.futures[0](x)))  # (B, T, vocab)
        # head i's target at position t is the input's token t + i, so
        # its loss is taken over the first T - i positions
        further = [
            F.cross_entropy(
                self.head(self.norm(f(x)))[:, :-i].flatten(0, 1),
                idx[:, i:].flatten(),
            )
            for i, f in enumerate(self.futures[1:], start=2)
            if idx.shape[1] > i
        ]
        self.aux_loss = sum(further) if further else None
        if targets is None:
            return logits, None
        loss = F.cross_entropy(logits.flatten(0, 1), targets.flatten())
        if include_aux and self.aux_loss is not None:
            loss = loss + self.aux_loss
        return logits, loss
