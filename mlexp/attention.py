"""Chapter 4's attention variants: how information moves between tokens.

Read top to bottom: RoPE at any position (so a cache can rotate new keys
where they really sit), a key/value cache, attention with any number of
key/value heads (MHA, GQA, MQA in one module), latent attention (MLA,
DeepSeek-V2), the helpers that put either into Chapter 1's
``TransformerLM``, generation with and without the cache, and a recurrent
language model of Chapter 1's size to compare against.

Chapter 1's modules stay untouched (the earlier chapters' seed data is
fingerprinted on them): the variants here are modules that replace each
block's ``attn``, built by a ``make_attention(dim)`` factory, and they
reuse Chapter 1's RoPE tables by import. Weight names follow Hugging Face's
Llama (``q_proj``, ``k_proj``, ``v_proj``, ``o_proj``) for the grouped
attention and DeepSeek-V2's equations (``w_dkv``, ``w_uk``, ...) for the
latent one, so each maps one to one onto its reference.
"""

from __future__ import annotations

import contextlib
import copy
import math
import statistics
import time
from collections.abc import Callable, Iterator

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch import Tensor

from .training.seeds import shifted
from .transformer import RMSNorm, TransformerLM, apply_rope

__all__ = [
    "KVCache",
    "GroupedQueryAttention",
    "LatentAttention",
    "attention_lm",
    "hidden_to_match",
    "kv_cache_bytes_per_token",
    "kv_cache",
    "generate",
    "RecurrentLM",
    "training_tokens_per_second",
    "generation_speed",
    "attention_maps",
    "head_statistics",
    "repeated_text_loss",
]


# --- Chapter 4, step 1: the causal call the variants share ----------------


def _causal_mask(n_new: int, n_all: int, device: torch.device) -> Tensor:
    """Which of ``n_all`` keys each of the last ``n_new`` queries may see:
    (n_new, n_all), True where allowed.

    The queries are the last rows of the square causal mask, so query i
    sees keys up to ``n_all - n_new + i``. (``is_causal=True`` in
    ``scaled_dot_product_attention`` aligns the mask to the top-left
    corner instead, which is right only when ``n_new == n_all``.)
    """
    mask = torch.ones(n_new, n_all, dtype=torch.bool, device=device)
    return mask.tril(diagonal=n_all - n_new)


def _attend(q: Tensor, k: Tensor, v: Tensor, scale: float) -> Tensor:
    """Causal attention of the last ``q.shape[-2]`` positions over all
    ``k.shape[-2]`` keys (the earlier ones come from a cache).

    Keys and values may have fewer heads than queries, as long as the
    query heads divide into equal groups: query head ``i`` reads key/value
    head ``i // (q heads / kv heads)``. PyTorch's ``enable_gqa`` path reads
    the shared heads where they are, without copying them per query head.
    """
    n_new, n_all = q.shape[-2], k.shape[-2]
    shared = dict(scale=scale, enable_gqa=k.shape[1] != q.shape[1])
    if n_new == n_all:
        return F.scaled_dot_product_attention(
            q, k, v, is_causal=True, **shared
        )
    if n_new == 1:  # the newest token sees every key
        return F.scaled_dot_product_attention(q, k, v, **shared)
    mask = _causal_mask(n_new, n_all, q.device)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, **shared)


# --- Chapter 4, step 2: the key/value cache -------------------------------


class KVCache:
    """What one attention layer keeps of the tokens it has already seen.

    Without a cache, each generated token re-runs the whole sequence, and
    every layer recomputes the keys and values of tokens whose keys and
    values cannot have changed (a causal model never lets a token see its
    future). The cache stores them once and appends one row per new token.

    It holds any number of tensors whose second-to-last axis is time:
    keys and values (B, n_kv_heads, T, head_dim) for grouped attention, a
    latent (B, T, d_c) and a RoPE key (B, T, d_R) for latent attention.
    Appending concatenates, which copies the cache each step; fine at the
    book's few hundred tokens, and the simplest thing to read.
    """

    def __init__(self) -> None:
        self.tensors: tuple[Tensor, ...] = ()

    def __len__(self) -> int:
        """Number of tokens cached."""
        return self.tensors[0].shape[-2] if self.tensors else 0

    def append(self, *new: Tensor) -> tuple[Tensor, ...]:
        """Add the new tokens' rows and return everything cached."""
        if not self.tensors:
            self.tensors = new
        else:
            self.tensors = tuple(
                torch.cat([old, t], dim=-2)
                for old, t in zip(self.tensors, new)
            )
        return self.tensors

    def nbytes(self) -> int:
        """Bytes the cache holds now (all batch rows)."""
        return sum(t.numel() * t.element_size() for t in self.tensors)


# --- Chapter 4, step 3: fewer key/value heads (MHA, GQA, MQA) -------------


class GroupedQueryAttention(nn.Module):
    """Causal self-attention in which groups of query heads share one key
    and value head.

    ``n_kv_heads == n_heads`` is multi-head attention (Vaswani et al.,
    2017), ``n_kv_heads == 1`` is multi-query attention (Shazeer, 2019),
    anything between is grouped-query attention (Ainslie et al., 2023).
    Only keys and values are shared, because only they are cached: the
    cache shrinks by ``n_heads / n_kv_heads`` while every query head still
    asks its own question.

    Separate q/k/v/o projections (rather than Chapter 1's fused q|k|v)
    because their widths now differ, and because they then map one to one
    onto Hugging Face Llama's ``q_proj``, ``k_proj``, ``v_proj``,
    ``o_proj``. RoPE is Chapter 1's (half-split, base 10000).
    """

    def __init__(self, dim: int, n_heads: int, n_kv_heads: int):
        super().__init__()
        if dim % n_heads:
            raise ValueError(
                f"dim={dim} must be divisible by n_heads={n_heads}; pick "
                "n_heads that divides dim"
            )
        if n_kv_heads < 1 or n_heads % n_kv_heads:
            raise ValueError(
                f"n_heads={n_heads} must be a multiple of "
                f"n_kv_heads={n_kv_heads}, so that every key/value head "
                "serves the same number of query heads; pick n_kv_heads "
                f"among the divisors of {n_heads}"
            )
        head_dim = dim // n_heads
        if head_dim % 2:
            raise ValueError(
                f"head_dim = dim / n_heads = {head_dim} must be even, "
                "because RoPE turns channels in pairs; change dim or "
                "n_heads"
            )
        self.n_heads, self.n_kv_heads = n_heads, n_kv_heads
        self.head_dim = head_dim
        self.q_proj = nn.Linear(dim, n_heads * head_dim, bias=False)
        self.k_proj = nn.Linear(dim, n_kv_heads * head_dim, bias=False)
        self.v_proj = nn.Linear(dim, n_kv_heads * head_dim, bias=False)
        self.o_proj = nn.Linear(n_heads * head_dim, dim, bias=False)
        # set by kv_cache() while generating; None in training
        self.cache: KVCache | None = None

    def _heads(self, x: Tensor, start: int) -> tuple[Tensor, ...]:
        """Rotated queries (B, H, T, D); rotated keys and values
        (B, K, T, D), for tokens whose first sits at ``start``."""
        B, T, _ = x.shape
        H, K, D = self.n_heads, self.n_kv_heads, self.head_dim
        # (B, T, H * D) -> (B, H, T, D); keys and values with K heads
        q = self.q_proj(x).view(B, T, H, D).transpose(1, 2)
        k = self.k_proj(x).view(B, T, K, D).transpose(1, 2)
        v = self.v_proj(x).view(B, T, K, D).transpose(1, 2)
        return apply_rope(q, start), apply_rope(k, start), v

    def forward(self, x: Tensor) -> Tensor:
        B, T, _ = x.shape
        start = len(self.cache) if self.cache is not None else 0
        q, k, v = self._heads(x, start)
        if self.cache is not None:
            # (B, K, start + T, D) each
            k, v = self.cache.append(k, v)
        # each group of n_heads // n_kv_heads query heads reads its shared
        # key/value head in place
        y = _attend(q, k, v, scale=1 / math.sqrt(self.head_dim))
        # (B, H, T, D) -> (B, T, H * D)
        return self.o_proj(y.transpose(1, 2).reshape(B, T, -1))

    @torch.no_grad()
    def attention_weights(self, x: Tensor) -> Tensor:
        """How much each position attends to each earlier one:
        (B, n_heads, T, T), rows summing to 1.

        The fused kernel in ``forward`` never stores these; here they are
        written out, softmax(Q K^T / sqrt(D)) under the causal mask, so a
        chapter can draw and measure them.
        """
        q, k, _ = self._heads(x, start=0)
        B, H, T, D = q.shape
        K = self.n_kv_heads
        # query heads in groups, one per key/value head:
        # (B, H, T, D) -> (B, K, H // K, T, D) @ (B, K, 1, D, T)
        # -> (B, K, H // K, T, T) -> (B, H, T, T)
        grouped = q.view(B, K, H // K, T, D)
        scores = grouped @ k[:, :, None].transpose(-2, -1)
        scores = scores.view(B, H, T, T) / math.sqrt(D)
        future = ~_causal_mask(T, T, x.device)
        return scores.masked_fill(future, float("-inf")).softmax(dim=-1)

    def cache_elements_per_token(self) -> int:
        """Numbers cached per token in this layer: a key and a value for
        every key/value head, read from the projections' widths."""
        return self.k_proj.out_features + self.v_proj.out_features


# --- Chapter 4, step 4: multi-head latent attention (MLA) -----------------


class LatentAttention(nn.Module):
    """Multi-head latent attention (DeepSeek-V2, arXiv 2405.04434, §2.1).

    Keys and values are not cached per head: each token's hidden state is
    compressed into one latent ``c = W_DKV h`` of width ``latent_dim``
    (d_c), and every head's key and value are up-projected from it
    (``W_UK c``, ``W_UV c``). Only the latent is cached. As in DeepSeek's
    released code (``kv_a_layernorm`` in ``modeling_deepseek.py``), the
    latent is RMS-normalized before it is cached and up-projected, which
    keeps its scale steady whatever ``W_DKV`` learns. RoPE cannot act
    on those keys, because a position-dependent rotation between the
    query and ``W_UK`` would stop ``W_UK`` from being folded into the
    query; so position travels in a separate, decoupled key ``W_KR h`` of
    width ``rope_dim`` (d_R), rotated and shared by all heads, with a
    rotated query part per head. Queries are not compressed (as in
    DeepSeek-V2-Lite). Per token and layer the cache holds d_c + d_R
    numbers. The scale is 1 / sqrt(head_dim + d_R), the width of the
    concatenated query and key.

    Two forms compute the same output from the same weights:

    - explicit: up-project keys and values for every head, then attend;
    - absorbed (``absorb=True``): fold ``W_UK`` into the query (each head
      asks its question in the latent space) and ``W_UV`` into the output
      (attend over latents, then project), so keys and values are never
      expanded per head. This is how MLA is served.
    """

    def __init__(
        self,
        dim: int,
        n_heads: int,
        latent_dim: int,
        rope_dim: int,
        absorb: bool = False,
    ):
        super().__init__()
        if dim % n_heads:
            raise ValueError(
                f"dim={dim} must be divisible by n_heads={n_heads}; pick "
                "n_heads that divides dim"
            )
        if not 0 < latent_dim <= dim:
            raise ValueError(
                f"latent_dim={latent_dim} must be between 1 and "
                f"dim={dim}: the latent compresses the token, so make it "
                "narrower than the model"
            )
        if rope_dim < 2 or rope_dim % 2:
            raise ValueError(
                f"rope_dim={rope_dim} must be even and at least 2, "
                "because RoPE turns channels in pairs"
            )
        head_dim = dim // n_heads
        self.n_heads, self.head_dim = n_heads, head_dim
        self.latent_dim, self.rope_dim = latent_dim, rope_dim
        self.absorb = absorb
        # names follow the matrices of DeepSeek-V2 §2.1 (W^Q, W^QR, ...)
        self.w_q = nn.Linear(dim, n_heads * head_dim, bias=False)
        self.w_qr = nn.Linear(dim, n_heads * rope_dim, bias=False)
        self.w_dkv = nn.Linear(dim, latent_dim, bias=False)
        self.latent_norm = RMSNorm(latent_dim)
        self.w_uk = nn.Linear(latent_dim, n_heads * head_dim, bias=False)
        self.w_uv = nn.Linear(latent_dim, n_heads * head_dim, bias=False)
        self.w_kr = nn.Linear(dim, rope_dim, bias=False)
        self.w_o = nn.Linear(n_heads * head_dim, dim, bias=False)
        self.cache: KVCache | None = None

    def forward(self, x: Tensor) -> Tensor:
        B, T, _ = x.shape
        H, D, R = self.n_heads, self.head_dim, self.rope_dim
        start = len(self.cache) if self.cache is not None else 0
        # (B, T, H * D) -> (B, H, T, D): the content part of each query
        q = self.w_q(x).view(B, T, H, D).transpose(1, 2)
        # (B, T, H * R) -> (B, H, T, R): the position part, rotated
        q_rope = apply_rope(
            self.w_qr(x).view(B, T, H, R).transpose(1, 2), start
        )
        # what is cached: (B, T, d_c) and the rotated key (B, T, R)
        latent = self.latent_norm(self.w_dkv(x))
        k_rope = apply_rope(self.w_kr(x), start)
        if self.cache is not None:
            # (B, start + T, d_c) and (B, start + T, R)
            latent, k_rope = self.cache.append(latent, k_rope)
        scale = 1 / math.sqrt(D + R)
        if self.absorb:
            y = self._absorbed(q, q_rope, latent, k_rope, scale)
        else:
            y = self._explicit(q, q_rope, latent, k_rope, scale)
        # (B, H, T, D) -> (B, T, H * D)
        return self.w_o(y.transpose(1, 2).reshape(B, T, H * D))

    def _explicit(
        self,
        q: Tensor,
        q_rope: Tensor,
        latent: Tensor,
        k_rope: Tensor,
        scale: float,
    ) -> Tensor:
        """Expand every head's key and value from the latent, then attend
        with [content; position] queries and keys. Returns (B, H, T, D)."""
        B, S, _ = latent.shape
        H, D, R = self.n_heads, self.head_dim, self.rope_dim
        # (B, S, d_c) -> (B, S, H * D) -> (B, H, S, D)
        k = self.w_uk(latent).view(B, S, H, D).transpose(1, 2)
        v = self.w_uv(latent).view(B, S, H, D).transpose(1, 2)
        # one RoPE key for all heads: (B, S, R) -> (B, H, S, R)
        k_rope = k_rope[:, None].expand(B, H, S, R)
        # (B, H, ., D + R): concatenate content and position channels
        q = torch.cat([q, q_rope], dim=-1)
        k = torch.cat([k, k_rope], dim=-1)
        return _attend(q, k, v, scale)

    def _absorbed(
        self,
        q: Tensor,
        q_rope: Tensor,
        latent: Tensor,
        k_rope: Tensor,
        scale: float,
    ) -> Tensor:
        """Attend over the cached latents themselves. Returns (B, H, T, D).

        Head i's content score is q_i . (W_UK_i c) = (W_UK_i^T q_i) . c, so
        the query moves into the latent space and the keys stay d_c wide.
        Its output is W_UV_i (sum_s a_s c_s), so the weights average the
        latents and W_UV_i is applied once per query, not per key.
        """
        B, S, C = latent.shape
        H, D = self.n_heads, self.head_dim
        # one (D, d_c) matrix per head: (H * D, d_c) -> (H, D, d_c)
        w_uk = self.w_uk.weight.view(H, D, C)
        w_uv = self.w_uv.weight.view(H, D, C)
        # queries in latent space:
        # (B, H, T, D) @ (H, D, d_c) -> (B, H, T, d_c)
        q_latent = q @ w_uk
        # one key/value head that every query head reads: (B, 1, S, .)
        k = torch.cat([latent, k_rope], dim=-1)[:, None]
        v = latent[:, None]
        q = torch.cat([q_latent, q_rope], dim=-1)  # (B, H, T, d_c + R)
        # (B, H, T, S) weights average the latents: (B, H, T, d_c)
        y_latent = _attend(q, k, v, scale)
        # back to each head's value space: (B, H, T, d_c) -> (B, H, T, D)
        return y_latent @ w_uv.transpose(1, 2)

    def cache_elements_per_token(self) -> int:
        """Numbers cached per token in this layer: the latent and the
        shared RoPE key, read from the projections' widths."""
        return self.w_dkv.out_features + self.w_kr.out_features


# --- Chapter 4, step 5: into Chapter 1's model ----------------------------


def attention_lm(
    vocab_size: int,
    make_attention: Callable[[int], nn.Module],
    **lm_kwargs,
) -> TransformerLM:
    """Chapter 1's ``TransformerLM`` with every block's attention built by
    ``make_attention(dim)``.

    Everything else (embedding, norms, SwiGLU, head, ``generate``) is
    Chapter 1's, so a comparison between models built here changes only
    attention. ``lm_kwargs`` go to ``TransformerLM`` (``dim``,
    ``n_layers``, ``make_ffn``, ...); its ``n_heads`` only shapes the
    attention that is replaced.
    """
    model = TransformerLM(vocab_size, **lm_kwargs)
    dim = model.embed.embedding_dim
    for block in model.blocks:
        block.attn = make_attention(dim)
    return model


def hidden_to_match(build: Callable[[int], nn.Module], target: int) -> int:
    """The SwiGLU hidden width at which ``build(hidden)`` has closest to
    ``target`` trainable parameters.

    Sharing keys and values removes parameters; Shazeer (2019) and Llama 2
    gave them back to the feed-forward layers so that variants compare at
    equal size. The count is linear in the hidden width, so two builds
    fix the line and the best width is read off it.
    """

    def count(hidden: int) -> int:
        return sum(
            p.numel() for p in build(hidden).parameters() if p.requires_grad
        )

    at_1, at_2 = count(1), count(2)
    per_unit = at_2 - at_1
    if per_unit <= 0:
        raise ValueError(
            "build(hidden) has the same parameter count for every hidden "
            "width; pass a builder whose SwiGLU uses hidden"
        )
    best = 1 + round((target - at_1) / per_unit)
    return max(best, 1)


def _attention_modules(model: nn.Module) -> list[nn.Module]:
    return [
        m
        for m in model.modules()
        if isinstance(m, (GroupedQueryAttention, LatentAttention))
    ]


def kv_cache_bytes_per_token(
    model: nn.Module, dtype: torch.dtype | None = None
) -> int:
    """Bytes a KV cache holds per token, summed over the model's layers.

    Computed from the modules' shapes: 2 * n_kv_heads * head_dim numbers
    per layer for grouped attention, d_c + d_R for latent attention, times
    the bytes of one number (``dtype``, else the model's parameters'). A
    test checks this against what the cache really stores.
    """
    layers = _attention_modules(model)
    if not layers:
        raise ValueError(
            "the model has no GroupedQueryAttention or LatentAttention; "
            "build it with attention_lm(...)"
        )
    if dtype is None:
        dtype = next(model.parameters()).dtype
    size = torch.empty((), dtype=dtype).element_size()
    return size * sum(m.cache_elements_per_token() for m in layers)


@contextlib.contextmanager
def kv_cache(model: nn.Module) -> Iterator[list[KVCache]]:
    """Give every attention layer of ``model`` an empty cache while the
    block runs; take the caches away afterwards.

    The cache lives on the attention module because Chapter 1's ``Block``
    calls ``self.attn(x)`` with nothing else; inside the block, calling the
    model on new tokens only continues the cached sequence.
    """
    layers = _attention_modules(model)
    if not layers:
        raise ValueError(
            "the model has no attention layer that can cache (Chapter 1's "
            "Attention cannot); build it with attention_lm(...)"
        )
    caches = [KVCache() for _ in layers]
    for layer, cache in zip(layers, caches):
        layer.cache = cache
    try:
        yield caches
    finally:
        for layer in layers:
            layer.cache = None


def _next_token(logits: Tensor, temperature: float) -> Tensor:
    """(B, vocab) -> (B, 1): the most likely token when temperature is 0,
    otherwise a sample, drawn as Chapter 1's ``generate`` draws it."""
    if temperature == 0:
        return logits.argmax(dim=-1, keepdim=True)
    probs = F.softmax(logits / temperature, dim=-1)
    return torch.multinomial(probs, 1)


@torch.no_grad()
def generate(
    model: TransformerLM,
    idx: Tensor,
    n_new: int,
    temperature: float = 1.0,
    use_cache: bool = True,
) -> Tensor:
    """Append ``n_new`` tokens to ``idx`` (B, T); greedy when
    ``temperature`` is 0.

    Without the cache, every step runs the model on the whole sequence
    so far and keeps only the last position's prediction. With it, the
    prompt runs once and then each step runs one token, against the keys
    and values the layers cached. Both draw the same random numbers in
    the same order, so with the same seed they return the same tokens.

    Neither crops the sequence to the trained context (Chapter 1's
    ``generate`` does): cropping would change the positions of cached
    keys. Past the trained context the model meets distances it never
    trained on (Chapter 3's subject) and its text degrades, but the two
    ways still agree.
    """
    if n_new < 0:
        raise ValueError(f"n_new={n_new} must be 0 or more")
    idx = idx.to(next(model.parameters()).device)
    if n_new == 0:
        return idx
    if not use_cache:
        for _ in range(n_new):
            logits, _ = model(idx)  # (B, T, vocab), T grows each step
            idx = torch.cat(
                [idx, _next_token(logits[:, -1], temperature)], dim=1
            )
        return idx
    with kv_cache(model):
        logits, _ = model(idx)  # the prompt fills the caches
        for step in range(n_new):
            token = _next_token(logits[:, -1], temperature)  # (B, 1)
            idx = torch.cat([idx, token], dim=1)
            if step + 1 < n_new:
                logits, _ = model(token)  # (B, 1, vocab)
    return idx


# --- Chapter 4, step 6: the recurrent baseline ----------------------------


class RecurrentLM(nn.Module):
    """A GRU language model (Cho et al., 2014) of about Chapter 1's size.

    Information reaches token t only through one state vector per layer,
    updated once per token: character 1 reaches character 64 through 63
    updates, where attention reaches it in one step. The defaults (256
    wide, two layers) give 822,849 parameters for 65 characters, 2.4%
    more than Chapter 1's 803,712.

    ``forward(idx, targets)`` returns ``(logits, loss)`` as
    ``TransformerLM`` does, so ``train_lm`` trains either.
    """

    def __init__(
        self,
        vocab_size: int,
        dim: int = 256,
        n_layers: int = 2,
        context_length: int | None = None,
    ):
        super().__init__()
        self.context_length = context_length
        self.embed = nn.Embedding(vocab_size, dim)
        self.rnn = nn.GRU(dim, dim, num_layers=n_layers, batch_first=True)
        self.head = nn.Linear(dim, vocab_size)

    def forward(
        self,
        idx: Tensor,
        targets: Tensor | None = None,
        include_aux: bool = True,
        state: Tensor | None = None,
    ):
        """``include_aux`` is accepted for ``train_lm`` and unused (a GRU
        adds no auxiliary loss)."""
        logits, _ = self.step(idx, state)
        if targets is None:
            return logits, None
        loss = F.cross_entropy(logits.flatten(0, 1), targets.flatten())
        return logits, loss

    def step(
        self, idx: Tensor, state: Tensor | None = None
    ) -> tuple[Tensor, Tensor]:
        """Logits (B, T, vocab) and the final state (n_layers, B, dim),
        starting from ``state`` (zeros when None)."""
        x = self.embed(idx)  # (B, T) -> (B, T, dim)
        x, state = self.rnn(x, state)  # (B, T, dim), (n_layers, B, dim)
        return self.head(x), state

    @torch.no_grad()
    def generate(
        self, idx: Tensor, n_new: int, temperature: float = 1.0
    ) -> Tensor:
        """Append ``n_new`` tokens; the state is the recurrent model's
        whole cache, the same size however long the text grows."""
        idx = idx.to(self.head.weight.device)
        logits, state = self.step(idx)
        for step in range(n_new):
            token = _next_token(logits[:, -1], temperature)
            idx = torch.cat([idx, token], dim=1)
            if step + 1 < n_new:
                logits, state = self.step(token, state)
        return idx


# --- Chapter 4, step 7: measuring what the models do ----------------------


def training_tokens_per_second(
    model: nn.Module,
    ids: Tensor,
    block_size: int,
    batch_size: int = 32,
    steps: int = 5,
    seed: int = 0,
) -> float:
    """Training tokens per second of a copy of ``model``: ``steps`` timed
    steps of AdamW (forward, backward, update) after one untimed step, in
    this process at its thread count. The model itself is untouched.

    Two models compared this way see the same threads and batches, which
    wall clocks of runs trained side by side cannot promise.
    """
    trained = copy.deepcopy(model).train()
    device = next(trained.parameters()).device
    opt = torch.optim.AdamW(trained.parameters(), lr=1e-3)
    gen = torch.Generator().manual_seed(shifted(seed))
    starts = torch.randint(
        len(ids) - block_size - 1, (steps + 1, batch_size), generator=gen
    )
    elapsed = 0.0
    for step, rows in enumerate(starts):
        # (batch, block_size + 1): inputs and their next tokens
        window = torch.stack([ids[i : i + block_size + 1] for i in rows])
        window = window.to(device)
        begin = time.perf_counter()
        _, loss = trained(window[:, :-1], window[:, 1:])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if step:  # the first step warms up and is not timed
            elapsed += time.perf_counter() - begin
    return steps * batch_size * block_size / elapsed


def generation_speed(
    model: TransformerLM, prompt: Tensor, n_new: int, repeats: int = 3
) -> dict[str, float]:
    """Greedy generation of ``n_new`` tokens after ``prompt`` without and
    with the KV cache: tokens per second of each (the median of
    ``repeats`` runs, the two ways alternating) and whether they returned
    the same tokens (1.0 or 0.0)."""
    seconds: dict[bool, list[float]] = {False: [], True: []}
    out = {}
    for _ in range(repeats):
        for use_cache in (False, True):
            begin = time.perf_counter()
            out[use_cache] = generate(
                model, prompt, n_new, temperature=0.0, use_cache=use_cache
            )
            seconds[use_cache].append(time.perf_counter() - begin)
    return {
        "uncached": n_new / statistics.median(seconds[False]),
        "cached": n_new / statistics.median(seconds[True]),
        "identical": float(torch.equal(out[False], out[True])),
    }


@torch.no_grad()
def attention_maps(model: TransformerLM, idx: Tensor) -> Tensor:
    """Every head's attention weights in every block for the text ``idx``
    (B, T): (n_layers, B, n_heads, T, T), rows summing to 1.

    Each block's attention reads the normalized residual stream, as in
    the block's own ``forward``; the stream then moves on through the
    whole block.
    """
    x = model.embed(idx.to(model.head.weight.device))  # (B, T, dim)
    maps = []
    for block in model.blocks:
        maps.append(block.attn.attention_weights(block.norm1(x)))
        x = block(x)
    return torch.stack(maps).cpu()


def head_statistics(
    weights: Tensor, first_query: int = 16
) -> dict[str, Tensor]:
    """Where each head looks, from ``attention_maps``' (L, B, H, T, T).

    Averaged over the batch and over queries at positions ``first_query``
    and later (so that every query has at least that many keys): the
    weight on the previous token (offset -1), the mass on the last 8 and
    on the last 16 tokens (the query itself included), and the mean
    distance back. Each entry is (L, H).
    """
    T = weights.shape[-1]
    # (T, T): how far back key s is from query t
    back = (torch.arange(T)[:, None] - torch.arange(T)[None, :]).clamp(
        min=0
    )
    w = weights[..., first_query:, :]  # queries first_query .. T - 1
    back = back[first_query:].to(w.dtype)

    def mean(x: Tensor) -> Tensor:  # (L, B, H, Q) -> (L, H)
        return x.mean(dim=(1, 3))

    return {
        "previous": mean((w * (back == 1)).sum(-1)),
        "last_8": mean((w * (back < 8)).sum(-1)),
        "last_16": mean((w * (back < 16)).sum(-1)),
        "mean_distance": mean((w * back).sum(-1)),
    }


@torch.no_grad()
def repeated_text_loss(
    model: nn.Module,
    alphabet: Tensor,
    length: int = 32,
    n: int = 64,
    seed: int = 0,
) -> tuple[float, float]:
    """The repeat test for induction heads (Olsson et al., 2022): ``n``
    strings of ``length`` tokens drawn at random from ``alphabet`` (token
    ids), each written twice in a row; the mean loss on the first copy and
    on the second (its first token excluded, which follows the end of the
    first copy).

    A random string cannot be predicted the first time beyond how often
    each token occurs; a model that finds the earlier occurrence of the
    current token and copies what followed it predicts the second copy
    well. Draw the alphabet from frequent tokens, so that the test asks a
    model to copy, not to read tokens it has rarely seen.
    """
    gen = torch.Generator().manual_seed(shifted(seed))
    picks = torch.randint(len(alphabet), (n, length), generator=gen)
    half = alphabet.cpu()[picks]  # (n, length) token ids
    text = torch.cat([half, half], dim=1).to(
        next(model.parameters()).device
    )
    logits, _ = model.eval()(text[:, :-1])
    # (n, 2 * length - 1): the loss of each next-token prediction
    loss = F.cross_entropy(
        logits.transpose(1, 2), text[:, 1:], reduction="none"
    )
    first = loss[:, : length - 1].mean().item()
    second = loss[:, length:].mean().item()
    return first, second
