"""Chapter 3: the ways a Transformer is told where each token sits.

Attention compares tokens by dot products, which ignore where the tokens
are; only the causal mask orders them. A position scheme adds order back
at one of three places, and each scheme here is a module with three hooks,
one per place:

- ``add_to_tokens``: add a vector per position to the token embeddings
  (sinusoidal, learned);
- ``rotate``: turn queries and keys by angles that grow with position
  (RoPE), so that their dot product depends on the distance only;
- ``score_bias``: add a bias to the attention scores that falls with
  distance (ALiBi).

The base class does nothing at all three, which is a model without
position signal (NoPE). Every hook takes the positions explicitly, a 1-D
tensor, so that a window can be shifted, or its positions scaled, without
touching the model.

``PositionalLM`` is Chapter 1's ``TransformerLM`` with the scheme passed in
(Chapter 1's module stays unchanged, and with it the earlier chapters'
seed data).
"""

from __future__ import annotations

import copy
import math

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch import Tensor

from .transformer import (
    Attention,
    TransformerLM,
    rope_frequencies,
    rotate_pairs,
)

__all__ = [
    "Position",
    "NoPosition",
    "Sinusoidal",
    "LearnedPosition",
    "RoPE",
    "ALiBi",
    "alibi_slopes",
    "ntk_base",
    "PositionalAttention",
    "PositionalLM",
]


class Position(nn.Module):
    """A position scheme: three hooks, each of which does nothing here."""

    def add_to_tokens(self, x: Tensor, positions: Tensor) -> Tensor:
        """Token vectors (B, T, dim) with position information added."""
        return x

    def rotate(self, x: Tensor, positions: Tensor) -> Tensor:
        """Queries or keys (B, heads, T, head_dim), turned by position."""
        return x

    def score_bias(self, positions: Tensor) -> Tensor | None:
        """A (heads, T, T) bias for the attention scores, or None."""
        return None


class NoPosition(Position):
    """No position signal (NoPE): only the causal mask orders tokens."""


class Sinusoidal(Position):
    """Fixed sines and cosines added to the embeddings (Vaswani et al.).

    Channel pair i at position p holds sin and cos of p / base^(2i / dim):
    wavelengths from 2*pi to base * 2*pi. Defined at every position, even
    ones never trained on.
    """

    def __init__(self, dim: int, base: float = 10000.0):
        super().__init__()
        if dim % 2:
            raise ValueError(
                f"dim={dim} must be even: sines and cosines come in pairs"
            )
        self.dim, self.base = dim, base

    def table(self, positions: Tensor) -> Tensor:
        """The (T, dim) vectors for the given positions."""
        i = torch.arange(0, self.dim, 2, dtype=torch.float64)
        freqs = self.base ** (-i / self.dim)
        # (T,) x (dim/2,) -> (T, dim/2)
        angles = positions.double()[:, None] * freqs[None, :].to(
            positions.device
        )
        # interleave: channel 2i is sin, 2i + 1 is cos
        return torch.stack([angles.sin(), angles.cos()], dim=-1).flatten(1)

    def add_to_tokens(self, x: Tensor, positions: Tensor) -> Tensor:
        return x + self.table(positions).to(x.dtype)


class LearnedPosition(Position):
    """A learned vector per position, one row for each position trained on
    (GPT, BERT, GPT-2's ``wpe``).

    The rows start as random as the token embeddings' rows, drawn when the
    model is built (``reset_parameters``). The table has no row past its
    length: asking for one raises rather than wrapping or clamping in
    silence.
    """

    def __init__(self, n_positions: int, dim: int):
        super().__init__()
        self.table = nn.Parameter(torch.zeros(n_positions, dim))

    def reset_parameters(self) -> None:
        nn.init.normal_(self.table)  # as nn.Embedding draws its rows

    def add_to_tokens(self, x: Tensor, positions: Tensor) -> Tensor:
        n = self.table.shape[0]
        if len(positions) and (positions.max() >= n or positions.min() < 0):
            raise ValueError(
                f"positions run from {int(positions.min())} to "
                f"{int(positions.max())}, but the learned table has rows "
                f"for 0 to {n - 1} only; read windows of at most {n} "
                "tokens, or pass positions clamped to the table "
                f"(positions.clamp(0, {n - 1})) knowing that it is a "
                "workaround"
            )
        return x + self.table[positions]


def ntk_base(base: float, scale: float, head_dim: int) -> float:
    """The base that "NTK-aware" scaling gives RoPE to stretch its context
    by ``scale``: base * scale^(d / (d - 2)), d the head width.

    The slowest pair then turns exactly ``scale`` times slower while the
    fastest is unchanged, so neighbouring tokens keep their resolution.
    """
    return base * scale ** (head_dim / (head_dim - 2))


class RoPE(Position):
    """Rotary position embedding with Chapter 1's layout (half-split
    pairs, pair i turning by p * base^(-i / half)).

    Two ways to stretch a trained RoPE past its context, as arguments:
    ``interpolate=s`` divides every position by s (position interpolation),
    so positions up to s times the trained length fall inside the trained
    angles; ``ntk_scale=s`` raises the base instead (``ntk_base``).
    """

    def __init__(
        self,
        head_dim: int,
        base: float = 10000.0,
        interpolate: float = 1.0,
        ntk_scale: float = 1.0,
    ):
        super().__init__()
        if head_dim % 2:
            raise ValueError(
                f"head_dim={head_dim} must be even: RoPE turns channel "
                "pairs"
            )
        if interpolate < 1 or ntk_scale < 1:
            raise ValueError(
                f"interpolate={interpolate} and ntk_scale={ntk_scale} "
                "stretch the context, so each must be at least 1 "
                "(1 leaves RoPE as trained)"
            )
        self.head_dim, self.interpolate = head_dim, interpolate
        self.base = ntk_base(base, ntk_scale, head_dim)

    def frequencies(self) -> Tensor:
        """Angle per position of each channel pair, fastest first
        (head_dim / 2,)."""
        return rope_frequencies(self.head_dim, self.base)

    def wavelengths(self) -> Tensor:
        """Positions each pair takes to turn once, as the model reads
        them (interpolation included)."""
        return 2 * math.pi * self.interpolate / self.frequencies()

    def rotate(self, x: Tensor, positions: Tensor) -> Tensor:
        scaled = positions.double() / self.interpolate
        # (T,) x (half,) -> (T, half)
        angles = scaled[:, None] * self.frequencies().to(x.device)[None, :]
        return rotate_pairs(
            x, angles.cos().to(x.dtype), angles.sin().to(x.dtype)
        )


def alibi_slopes(n_heads: int) -> list[float]:
    """ALiBi's slope for each of ``n_heads`` heads, by the rule of the
    paper's code: geometric from 2^(-8 / n) for n a power of two; else the
    closest power of two below, then every other slope of the next one."""
    below = 2 ** int(math.log2(n_heads))
    start = 2.0 ** (-8.0 / below)
    slopes = [start ** (h + 1) for h in range(below)]
    if below < n_heads:
        slopes += alibi_slopes(2 * below)[0::2][: n_heads - below]
    return slopes


class ALiBi(Position):
    """Attention with linear biases (Press et al.): each head subtracts
    m * distance from its scores, m a fixed slope per head.

    For a power of two n_heads the slopes are geometric, starting at
    2^(-8 / n_heads) with that ratio: for 4 heads 1/4, 1/16, 1/64, 1/256.
    Steep heads look at neighbours, gentle ones further back. For other
    head counts the paper's code takes the slopes of the closest power of
    two below, then every other slope of the next power of two (6 heads:
    4 heads' slopes, then 1/2 and 1/8), so the slopes still spread evenly.
    """

    def __init__(self, n_heads: int):
        super().__init__()
        if n_heads < 1:
            raise ValueError(
                f"n_heads={n_heads}: ALiBi gives each head a slope; pass "
                "at least one head"
            )
        self.register_buffer(
            "slopes", torch.tensor(alibi_slopes(n_heads)), persistent=False
        )

    def score_bias(self, positions: Tensor) -> Tensor:
        # (T, 1) - (1, T) -> (T, T): how far back each key is
        distance = (positions[:, None] - positions[None, :]).to(
            self.slopes.dtype
        )
        # (heads, 1, 1) * (T, T) -> (heads, T, T)
        return -self.slopes[:, None, None] * distance


class PositionalAttention(Attention):
    """Chapter 1's causal attention, with a position scheme where it had
    RoPE: the scheme turns queries and keys and may bias the scores."""

    def __init__(self, dim: int, n_heads: int, position: Position):
        super().__init__(dim, n_heads, causal=True, rope=False)
        self.position = position

    def forward(self, x: Tensor, positions: Tensor) -> Tensor:
        B, T, C = x.shape
        q, k, v = self.qkv(x).split(C, dim=-1)  # three (B, T, C)
        # (B, T, C) -> (B, n_heads, T, head_dim)
        q, k, v = (
            t.view(B, T, self.n_heads, C // self.n_heads).transpose(1, 2)
            for t in (q, k, v)
        )
        q = self.position.rotate(q, positions)
        k = self.position.rotate(k, positions)
        bias = self.position.score_bias(positions)
        if bias is None:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            future = torch.ones(T, T, dtype=torch.bool, device=x.device)
            mask = bias.to(q.dtype).masked_fill(
                future.triu(1), float("-inf")
            )  # (heads, T, T), broadcast over the batch
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        # (B, n_heads, T, head_dim) -> (B, T, C)
        return self.out(y.transpose(1, 2).reshape(B, T, C))


class PositionalLM(TransformerLM):
    """Chapter 1's language model with a position scheme passed in.

    Everything but position is Chapter 1's: embedding, pre-norm blocks with
    RMSNorm and SwiGLU, the output head. ``forward`` takes the positions of
    the tokens, 0, 1, 2, ... unless given (shifted or clamped ones, say).
    """

    def __init__(
        self,
        vocab_size: int,
        position: Position,
        dim: int = 128,
        n_layers: int = 4,
        n_heads: int = 4,
        context_length: int | None = None,
    ):
        super().__init__(
            vocab_size,
            dim,
            n_layers,
            n_heads,
            context_length=context_length,
            rope=False,
        )
        self.position = position
        for block in self.blocks:
            block.attn = PositionalAttention(dim, n_heads, position)
        # Last, so that the weights every scheme shares are drawn alike.
        if hasattr(position, "reset_parameters"):
            position.reset_parameters()

    def with_position(self, position: Position) -> PositionalLM:
        """A copy of this model, trained weights and all, reading position
        through another scheme (RoPE stretched to a longer context, say)."""
        model = copy.deepcopy(self)
        model.position = position
        for block in model.blocks:
            block.attn.position = position
        return model

    def hidden_states(
        self, idx: Tensor, positions: Tensor | None = None
    ) -> list[Tensor]:
        """The residual stream (B, T, dim) after the embedding and after
        each block: n_layers + 1 tensors."""
        T = idx.shape[1]
        if positions is None:
            positions = torch.arange(T, device=idx.device)
        if positions.shape != (T,):
            raise ValueError(
                f"positions has shape {tuple(positions.shape)}; pass one "
                f"position per token, shape ({T},)"
            )
        # (B, T) -> (B, T, dim), with position added if the scheme does
        x = self.position.add_to_tokens(self.embed(idx), positions)
        states = [x]
        for block in self.blocks:  # Chapter 1's pre-norm block
            x = x + block.attn(block.norm1(x), positions)
            x = x + block.ffn(block.norm2(x))
            states.append(x)
        return states

    def forward(
        self,
        idx: Tensor,
        targets: Tensor | None = None,
        include_aux: bool = True,
        positions: Tensor | None = None,
    ):
        x = self.hidden_states(idx, positions)[-1]
        logits = self.head(self.norm(x))  # (B, T, dim) -> (B, T, vocab)
        if targets is None:
            return logits, None
        loss = F.cross_entropy(logits.flatten(0, 1), targets.flatten())
        return logits, loss
