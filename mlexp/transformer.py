"""The modern Transformer of Chapter 1, one small module per part of the
block.

Read top to bottom: position (RoPE), attention, feed-forward (SwiGLU),
normalization (RMSNorm), the pre-norm block, then the two models that share
it: a decoder-only language model and a Vision Transformer.

The blocks follow the Llama convention (pre-norm, RMSNorm with a learned
gain, half-split RoPE with base 10000, SwiGLU with gate/up/down and no
biases, one fused q|k|v projection), so the weights map one to one onto a
standard Llama implementation. Later chapters swap one part at a time, so
variants are modules passed in (``make_ffn=``, ``norm=``, ``placement=``,
``connection=``, ``WriteNothing``) rather than flags threaded through
``forward``.
"""

from __future__ import annotations

import functools

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch import Tensor

__all__ = [
    "rope_frequencies",
    "rope_cos_sin",
    "rotate_pairs",
    "apply_rope",
    "Attention",
    "SwiGLU",
    "RMSNorm",
    "Residual",
    "Plain",
    "PreNorm",
    "Block",
    "WriteNothing",
    "TransformerLM",
    "PatchEmbed",
    "VisionTransformer",
]


# --- Chapter 1, step 1: position ------------------------------------------


def rope_frequencies(head_dim: int, base: float = 10000.0) -> Tensor:
    """Angle per position of each channel pair, fastest first, float64
    (head_dim // 2,): pair i turns by base^(-i / half) per position."""
    half = head_dim // 2
    return base ** (-torch.arange(half, dtype=torch.float64) / half)


@functools.lru_cache(maxsize=32)
def rope_cos_sin(
    seq: int, head_dim: int, device: torch.device, dtype: torch.dtype
) -> tuple[Tensor, Tensor]:
    """Cosines and sines of RoPE's angles at positions 0 .. seq - 1, shape
    (seq, head_dim // 2) each.

    The table depends only on the shape, so it is computed once and reused
    by every call.
    """
    freqs = rope_frequencies(head_dim)
    # (seq, 1) * (1, half) -> (seq, half)
    angles = (
        torch.arange(seq, dtype=torch.float64)[:, None] * freqs[None, :]
    )
    return angles.cos().to(device, dtype), angles.sin().to(device, dtype)


def rotate_pairs(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """Turn channel pair (i, i + head_dim // 2) of each row of ``x`` by the
    angle whose cosine and sine are given: RoPE's rotation, shared by every
    variant of it in the book.

    ``x`` is (..., seq, head_dim); ``cos`` and ``sin`` are (seq,
    head_dim // 2).
    """
    # (..., seq, head_dim) -> two (..., seq, head_dim // 2)
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1)


def apply_rope(x: Tensor, start: int = 0) -> Tensor:
    """Rotary position embedding for a (batch, heads, seq, head_dim) tensor
    whose first row sits at position ``start``.

    Channel i of the first half and channel i of the second half form a pair
    that is rotated by a position-dependent angle. A rotated query and a
    rotated key then have a dot product that depends only on how far apart
    their positions are. ``start`` is for a model fed one new token at a
    time from a cache (Chapter 4): its key must turn by the angle of its
    true position.
    """
    seq, head_dim = x.shape[-2], x.shape[-1]
    cos, sin = rope_cos_sin(start + seq, head_dim, x.device, x.dtype)
    # the rows of positions start .. start + seq - 1
    return rotate_pairs(x, cos[start:], sin[start:])


# --- Chapter 1, step 2: attention -----------------------------------------


class Attention(nn.Module):
    """Multi-head self-attention, where tokens exchange information."""

    def __init__(
        self, dim: int, n_heads: int, causal: bool = True, rope: bool = True
    ):
        super().__init__()
        if dim % n_heads:
            raise ValueError(
                f"dim={dim} must be divisible by n_heads={n_heads}; pick "
                "n_heads that divides dim"
            )
        self.n_heads, self.causal, self.rope = n_heads, causal, rope
        # q | k | v, in that order
        self.qkv = nn.Linear(dim, 3 * dim, bias=False)
        self.out = nn.Linear(dim, dim, bias=False)

    def forward(self, x: Tensor) -> Tensor:
        B, T, C = x.shape
        q, k, v = self.qkv(x).split(C, dim=-1)  # three (B, T, C)
        # (B, T, C) -> (B, n_heads, T, head_dim): each head attends on its
        # own slice
        q, k, v = (
            t.view(B, T, self.n_heads, C // self.n_heads).transpose(1, 2)
            for t in (q, k, v)
        )
        if self.rope:
            q, k = apply_rope(q), apply_rope(k)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=self.causal)
        # (B, n_heads, T, head_dim) -> (B, T, C)
        return self.out(y.transpose(1, 2).reshape(B, T, C))


# --- Chapter 1, step 3: feed-forward, normalization, the block ------------


class SwiGLU(nn.Module):
    """Gated feed-forward layer, applied to every token on its own."""

    def __init__(self, dim: int, hidden: int | None = None):
        super().__init__()
        # three matrices of dim x 8d/3 match a 4x MLP's two
        hidden = hidden or int(8 * dim / 3)
        self.gate = nn.Linear(dim, hidden, bias=False)
        self.up = nn.Linear(dim, hidden, bias=False)
        self.down = nn.Linear(hidden, dim, bias=False)

    def forward(self, x: Tensor) -> Tensor:
        return self.down(F.silu(self.gate(x)) * self.up(x))


class RMSNorm(nn.Module):
    """Scale each token vector to unit root-mean-square, then by a learned
    per-channel gain."""

    def __init__(self, dim: int, eps: float = 1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: Tensor) -> Tensor:
        if x.shape[-1] != len(self.weight):
            raise ValueError(
                f"RMSNorm({len(self.weight)}) got vectors of width "
                f"{x.shape[-1]}; build it with RMSNorm({x.shape[-1]})"
            )
        return self.weight * (
            x * torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + self.eps)
        )


class Residual(nn.Module):
    """The shortcut: a sub-layer adds its output to its input, so a block
    that writes nothing passes the stream through unchanged."""

    def __init__(self, dim: int):
        super().__init__()

    def forward(self, x: Tensor, update: Tensor) -> Tensor:
        return x + update


class Plain(nn.Module):
    """No shortcut: the sub-layer's output replaces its input (Chapter 1's
    "no residual" ablation)."""

    def __init__(self, dim: int):
        super().__init__()

    def forward(self, x: Tensor, update: Tensor) -> Tensor:
        return update


class PreNorm(nn.Module):
    """Pre-norm placement: ``connect(x, sublayer(norm(x)))``. The sub-layer
    reads a normalized copy; the stream itself is never normalized."""

    def forward(
        self,
        x: Tensor,
        sublayer: nn.Module,
        norm: nn.Module,
        connect: nn.Module,
    ) -> Tensor:
        return connect(x, sublayer(norm(x)))


class Block(nn.Module):
    """Attention, then the feed-forward layer, each wired to the stream.

    Three parts are passed in as modules: ``norm`` (a class called with the
    width: RMSNorm, or ``nn.Identity`` for none), ``placement`` (where the
    norm sits: pre-norm here, others in Chapter 6) and ``connection`` (how
    a sub-layer's output meets its input: residual, or plain, others in
    Chapter 7). The default is Llama's pre-norm residual block.
    """

    def __init__(
        self,
        dim: int,
        n_heads: int,
        ffn: nn.Module | None = None,
        causal: bool = True,
        rope: bool = True,
        norm: type[nn.Module] = RMSNorm,
        placement: nn.Module | None = None,
        connection: type[nn.Module] = Residual,
    ):
        super().__init__()
        self.norm1 = norm(dim)
        self.attn = Attention(dim, n_heads, causal=causal, rope=rope)
        self.norm2 = norm(dim)
        self.ffn = ffn if ffn is not None else SwiGLU(dim)
        self.connect1 = connection(dim)
        self.connect2 = connection(dim)
        self.placement = placement if placement is not None else PreNorm()

    def forward(self, x: Tensor) -> Tensor:
        x = self.placement(x, self.attn, self.norm1, self.connect1)
        return self.placement(x, self.ffn, self.norm2, self.connect2)


class WriteNothing(nn.Module):
    """Stand-in for a removed sub-layer: it adds zero to the residual
    stream."""

    def forward(self, x: Tensor) -> Tensor:
        return torch.zeros_like(x)


# --- Chapter 1, step 4: the two models ------------------------------------


class TransformerLM(nn.Module):
    """Decoder-only language model: embed tokens, run the blocks, predict
    the next token.

    ``context_length`` is the longest sequence the model has been trained
    on; ``generate`` never feeds it more, because attention has not seen
    longer query-key distances. ``train_lm`` sets it.
    """

    def __init__(
        self,
        vocab_size: int,
        dim: int = 128,
        n_layers: int = 4,
        n_heads: int = 4,
        make_ffn=None,
        context_length: int | None = None,
        final_norm: type[nn.Module] = RMSNorm,
        **block_kwargs,
    ):
        super().__init__()
        self.context_length = context_length
        self.embed = nn.Embedding(vocab_size, dim)
        self.blocks = nn.ModuleList(
            Block(
                dim,
                n_heads,
                ffn=make_ffn(dim) if make_ffn else None,
                **block_kwargs,
            )
            for _ in range(n_layers)
        )
        self.norm = final_norm(dim)
        self.head = nn.Linear(dim, vocab_size, bias=False)

    def forward(
        self,
        idx: Tensor,
        targets: Tensor | None = None,
        include_aux: bool = True,
    ):
        x = self.embed(idx)  # (B, T) -> (B, T, dim)
        for block in self.blocks:
            x = block(x)
        logits = self.head(self.norm(x))  # (B, T, dim) -> (B, T, vocab)
        if targets is None:
            return logits, None
        # over all B * T positions
        loss = F.cross_entropy(logits.flatten(0, 1), targets.flatten())
        # losses a block may add, such as a Mixture of Experts' load
        # balancing
        if include_aux:
            loss = loss + sum(
                getattr(b.ffn, "aux_loss", 0.0) for b in self.blocks
            )
        return logits, loss

    @torch.no_grad()
    def generate(
        self,
        idx: Tensor,
        n_new: int,
        temperature: float = 1.0,
        context_length: int | None = None,
    ) -> Tensor:
        """Append ``n_new`` sampled tokens to ``idx`` (B, T), reading at
        most the trained context."""
        context = context_length or self.context_length
        idx = idx.to(self.head.weight.device)
        for _ in range(n_new):
            # (B, <= context)
            window = idx if context is None else idx[:, -context:]
            logits, _ = self(window)
            # (B, vocab)
            probs = F.softmax(logits[:, -1] / temperature, dim=-1)
            idx = torch.cat([idx, torch.multinomial(probs, 1)], dim=1)
        return idx


class PatchEmbed(nn.Module):
    """Cut an image into square patches; project each to a token vector."""

    def __init__(self, patch: int, channels: int, dim: int):
        super().__init__()
        # one step per patch
        self.proj = nn.Conv2d(
            channels, dim, kernel_size=patch, stride=patch
        )

    def forward(self, images: Tensor) -> Tensor:
        # (B, C, H, W) -> (B, dim, H/p, W/p) -> (B, n_patches, dim)
        return self.proj(images).flatten(2).transpose(1, 2)


class VisionTransformer(nn.Module):
    """Vision Transformer: patches in, the same blocks without a causal
    mask or RoPE (learned position vectors instead), a class out."""

    def __init__(
        self,
        n_classes: int,
        image: int = 32,
        patch: int = 4,
        channels: int = 3,
        dim: int = 128,
        n_layers: int = 4,
        n_heads: int = 4,
    ):
        super().__init__()
        if image % patch:
            raise ValueError(
                f"image={image} must be a multiple of patch={patch} so "
                "the patches tile it"
            )
        self.embed = PatchEmbed(patch, channels, dim)
        # one learned vector per patch
        self.pos = nn.Parameter(torch.zeros(1, (image // patch) ** 2, dim))
        self.blocks = nn.ModuleList(
            Block(dim, n_heads, causal=False, rope=False)
            for _ in range(n_layers)
        )
        self.norm = RMSNorm(dim)
        self.head = nn.Linear(dim, n_classes)

    def forward(self, images: Tensor) -> Tensor:
        x = self.embed(images) + self.pos  # (B, n_patches, dim)
        for block in self.blocks:
            x = block(x)
        # average over patches: (B, dim) -> (B, n_classes)
        return self.head(self.norm(x).mean(dim=1))
