"""Chapter 6's normalization: what keeps a deep stack's activations in
range, where the norm sits, and whether it is needed at all.

Three ways to bring one token vector x of width d back to a steady scale,
side by side (mean and variance over the token's own d features; g and b
learned per feature, alpha a learned number):

    LayerNorm(x) = g * (x - mean(x)) / sqrt(var(x) + eps) + b
    RMSNorm(x)   = g * x / sqrt(mean(x ** 2) + eps)
    DyT(x)       = g * tanh(alpha * x) + b

LayerNorm (Ba et al., 2016) centres and rescales; RMSNorm (Zhang and
Sennrich, 2019) only rescales, so on a centred vector the two agree; Dynamic
Tanh (Zhu et al., 2025) computes no statistic at all and squashes instead.
The norm they replaced in language models, BatchNorm (Ioffe and Szegedy,
2015), normalizes each *feature* by its mean and variance over the batch;
over a language model's tokens that mixes other sequences, and later
positions of the same one, into every token's output.

A norm is one of three modules passed into Chapter 1's ``Block``; the
placement is another. Each placement has ``PreNorm``'s signature
``forward(x, sublayer, norm, connect)``:

    pre-norm              connect(x, sublayer(norm(x)))   GPT-2, Llama
    post-norm             norm(connect(x, sublayer(x)))   the 2017 paper
    sub-layer-output norm connect(x, norm(sublayer(x)))   OLMo 2

``block_kwargs`` names them for ``TransformerLM``. The rest of the module
measures: the gradients and the residual stream at initialization, how far
a change of one token reaches back through batch statistics, how long a
norm takes, and what became of a training run (trained, collapsed to the
unigram model, or diverged).
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Mapping, Sequence

import torch
import torch.nn as nn
from torch import Tensor

from .transformer import PreNorm, RMSNorm

__all__ = [
    "LayerNorm",
    "RMSNorm",
    "TokenBatchNorm",
    "DyT",
    "PreNorm",
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
    "times_in_turns",
    "norm_times",
]


def _checked_dim(dim: int) -> int:
    if not isinstance(dim, int) or dim < 1:
        raise ValueError(
            f"dim={dim!r} must be a positive int, the width of the token "
            "vectors the norm will see"
        )
    return dim


def _check_width(x: Tensor, dim: int, name: str) -> None:
    if x.shape[-1] != dim:
        raise ValueError(
            f"{name} was built for width {dim} but got a tensor of shape "
            f"{tuple(x.shape)}; build it with {name}({x.shape[-1]}) or "
            "pass vectors of its width in the last axis"
        )


# --- Chapter 6, step 1: statistics of what? -------------------------------


class LayerNorm(nn.Module):
    """LayerNorm: each token vector minus its own mean, divided by its own
    standard deviation, then a learned gain and bias per feature.

    The statistics come from one token's features alone, so the same
    computation runs in training and at test time and no token sees
    another (Ba et al., 2016). Equal to ``nn.LayerNorm(dim, eps)``, written
    out so the three formulas of this module read alike.
    """

    def __init__(self, dim: int, eps: float = 1e-5, bias: bool = True):
        super().__init__()
        self.dim, self.eps = _checked_dim(dim), eps
        self.weight = nn.Parameter(torch.ones(dim))
        self.bias = nn.Parameter(torch.zeros(dim)) if bias else None

    def forward(self, x: Tensor) -> Tensor:
        _check_width(x, self.dim, "LayerNorm")
        mean = x.mean(dim=-1, keepdim=True)  # (..., 1)
        var = (x - mean).pow(2).mean(dim=-1, keepdim=True)  # biased
        y = self.weight * ((x - mean) * torch.rsqrt(var + self.eps))
        return y if self.bias is None else y + self.bias


class TokenBatchNorm(nn.BatchNorm1d):
    """BatchNorm over a language model's tokens: each feature minus its
    mean over every position of every sequence in the batch, divided by
    its standard deviation there (Ioffe and Szegedy, 2015).

    In training mode the statistics are the batch's own, so a token's
    output depends on the other sequences and on later positions of its
    own: a causal model trained this way can read the future through the
    mean (``position_leak`` measures it). In eval mode it uses the running
    averages collected in training, and the leak stops.
    """

    def __init__(self, dim: int, eps: float = 1e-5, momentum: float = 0.1):
        super().__init__(_checked_dim(dim), eps=eps, momentum=momentum)
        self.dim = dim

    def forward(self, x: Tensor) -> Tensor:
        _check_width(x, self.dim, "TokenBatchNorm")
        # (B, T, C) -> (B * T, C): each position of each sequence is one
        # sample of every feature
        return super().forward(x.reshape(-1, self.dim)).view_as(x)


# --- Chapter 6, step 3: cheaper, or none at all ---------------------------


class DyT(nn.Module):
    """Dynamic Tanh: ``g * tanh(alpha * x) + b``, with one learned
    ``alpha`` per layer and a gain and bias per feature (Zhu et al., 2025).

    No statistic is computed: tanh is nearly linear near zero and flattens
    large entries, the S-shape its authors saw in trained LayerNorms'
    input-output maps. ``alpha`` starts at 0.5, their default.
    """

    def __init__(self, dim: int, alpha: float = 0.5):
        super().__init__()
        if not alpha > 0:
            raise ValueError(
                f"alpha={alpha} must be positive (0.5 is the paper's "
                "default); tanh(0 * x) would erase every input"
            )
        self.dim = _checked_dim(dim)
        self.alpha = nn.Parameter(torch.tensor(float(alpha)))
        self.weight = nn.Parameter(torch.ones(dim))
        self.bias = nn.Parameter(torch.zeros(dim))

    def forward(self, x: Tensor) -> Tensor:
        _check_width(x, self.dim, "DyT")
        return self.weight * torch.tanh(self.alpha * x) + self.bias


# --- Chapter 6, step 2: where the norm sits -------------------------------


class PostNorm(nn.Module):
    """Post-norm placement: ``norm(connect(x, sublayer(x)))``, the 2017
    Transformer's LayerNorm(x + Sublayer(x)). The stream itself is
    normalized after every addition, so every gradient to an earlier layer
    passes through every later norm."""

    def forward(
        self,
        x: Tensor,
        sublayer: nn.Module,
        norm: nn.Module,
        connect: nn.Module,
    ) -> Tensor:
        return norm(connect(x, sublayer(x)))


class OutputNorm(nn.Module):
    """Sub-layer-output placement: ``connect(x, norm(sublayer(x)))``, as in
    OLMo 2. The sub-layer reads the raw stream and its output is normalized
    before it is added; like pre-norm, the stream itself is never
    normalized, but no sub-layer's update can be larger than the norm's
    gain allows."""

    def forward(
        self,
        x: Tensor,
        sublayer: nn.Module,
        norm: nn.Module,
        connect: nn.Module,
    ) -> Tensor:
        return connect(x, norm(sublayer(x)))


#: The placements by name. "none" is pre-norm with ``nn.Identity`` as the
#: norm, which ``block_kwargs`` builds.
PLACEMENTS: dict[str, type[nn.Module]] = {
    "pre": PreNorm,
    "post": PostNorm,
    "output": OutputNorm,
    "none": PreNorm,
}


def block_kwargs(
    placement: str, norm: type[nn.Module] = RMSNorm
) -> dict[str, object]:
    """``TransformerLM`` arguments for a placement named in
    ``PLACEMENTS``: ``norm``, ``placement`` and ``final_norm``.

    Pre-norm and sub-layer-output norm leave the stream unnormalized, so a
    final norm reads it before the output head. Post-norm's last block
    already ends in a norm, so it has no final one, as in the 2017
    Transformer. "none" removes the blocks' norms and keeps the final one,
    as Chapter 1's ablation did.
    """
    if placement not in PLACEMENTS:
        raise ValueError(
            f"unknown placement {placement!r}; pass one of "
            f"{', '.join(repr(p) for p in PLACEMENTS)}"
        )
    if not (isinstance(norm, type) and issubclass(norm, nn.Module)):
        raise ValueError(
            f"norm={norm!r} must be a module class called with the width, "
            "such as RMSNorm or LayerNorm (the class, not an instance)"
        )
    return {
        "norm": nn.Identity if placement == "none" else norm,
        "placement": PLACEMENTS[placement](),
        "final_norm": nn.Identity if placement == "post" else norm,
    }


def xavier_init(model: nn.Module) -> nn.Module:
    """Draw every ``nn.Linear`` weight of ``model`` from Glorot and
    Bengio's uniform distribution, variance 2 / (fan_in + fan_out), in
    place; biases and embeddings stay as they were. Returns the model.

    PyTorch's default for a linear layer has variance 1 / (3 fan_in), a
    third of Xavier's for a square matrix, so its residual branches start
    smaller."""
    for module in model.modules():
        if isinstance(module, nn.Linear):
            nn.init.xavier_uniform_(module.weight)
    return model


# --- Chapter 6, measurements ----------------------------------------------


def _blocks(model: nn.Module) -> nn.ModuleList:
    blocks = getattr(model, "blocks", None)
    if not isinstance(blocks, nn.ModuleList) or len(blocks) == 0:
        raise ValueError(
            "the model needs a non-empty ModuleList `blocks`, as "
            "TransformerLM has"
        )
    return blocks


def ffn_grad_norms(
    model: nn.Module, idx: Tensor, targets: Tensor
) -> Tensor:
    """Gradient norm of each block's feed-forward output weight
    (``ffn.down``) for the loss on ``idx``, ``targets`` (B, T): (n_layers,).

    Xiong et al. (2020) bound this gradient in the last layer at
    initialization: independent of depth for post-norm, shrinking with
    depth for pre-norm. Leaves the model's ``.grad`` as it found it.
    """
    blocks = _blocks(model)
    weights = [
        getattr(getattr(b, "ffn", None), "down", None) for b in blocks
    ]
    if not all(isinstance(w, nn.Linear) for w in weights):
        raise ValueError(
            "every block's ffn needs a `down` projection (Chapter 1's "
            "SwiGLU, an MLP or a GatedFFN)"
        )
    params = [w.weight for w in weights]
    _, loss = model(idx, targets)
    grads = torch.autograd.grad(loss, params)
    return torch.stack([g.norm() for g in grads]).detach()


@torch.no_grad()
def position_leak(
    model: nn.Module, idx: Tensor, position: int, sequence: int = 0
) -> dict[str, float]:
    """How far the logits move when the token at ``position`` of row
    ``sequence`` of ``idx`` (B, T) changes, in the mode the model is in.

    Returns the largest absolute change at the *earlier* positions of that
    row, which a causal model must not let move (information from the
    future), and at every position of the other rows. Per-token norms give
    exactly 0 for both; a BatchNorm in training mode does not. Buffers a
    forward pass updates (BatchNorm's running averages) are restored.
    """
    if idx.dim() != 2:
        raise ValueError(
            f"idx {tuple(idx.shape)} must be (batch, positions) token ids"
        )
    B, T = idx.shape
    if not 0 < position < T or not 0 <= sequence < B:
        raise ValueError(
            f"position={position} must be in 1..{T - 1} (there must be an "
            f"earlier position) and sequence={sequence} in 0..{B - 1}"
        )
    saved = {k: v.clone() for k, v in model.named_buffers()}
    vocab = model.head.out_features
    changed = idx.clone()
    changed[sequence, position] = (idx[sequence, position] + 1) % vocab
    try:
        before, _ = model(idx)
        after, _ = model(changed)
    finally:
        for name, buffer in model.named_buffers():
            buffer.copy_(saved[name])
    moved = (after - before).abs()  # (B, T, vocab)
    others = torch.cat([moved[:sequence], moved[sequence + 1 :]])
    return {
        "earlier": moved[sequence, :position].max().item(),
        "other_sequences": others.max().item() if len(others) else 0.0,
    }


def unigram_loss(
    train_ids: Tensor, targets: Tensor, vocab_size: int
) -> float:
    """Cross-entropy, in nats, of ``targets`` under the frequencies of the
    tokens in ``train_ids`` (add-one smoothed): the loss of a model that
    ignores its input and always predicts the training text's character
    frequencies. A run "collapsed" to it has learned nothing else."""
    counts = torch.bincount(train_ids.flatten(), minlength=vocab_size)
    log_p = torch.log((counts + 1.0) / (counts.sum() + vocab_size))
    return -log_p[targets.flatten()].double().mean().item()


#: What ``classify_run`` can say about a run.
OUTCOMES = ("trained", "collapsed", "stalled", "diverged")


def classify_run(
    val_losses: Sequence[float], unigram: float, margin: float = 0.1
) -> str:
    """The outcome of a run from its validation losses, in order, the last
    one being the final model's.

    ``"diverged"``: a loss is not finite (the weights overflowed);
    ``"collapsed"``: the final loss lies within ``margin`` nats of
    ``unigram``, the loss of always predicting the character frequencies;
    ``"trained"``: below that band; ``"stalled"``: above it (worse than
    the frequencies, such as a model stuck near the uniform guess).
    """
    if len(val_losses) == 0:
        raise ValueError(
            "val_losses is empty; pass the run's validation losses, such "
            "as train_lm's history['val']"
        )
    if not margin > 0:
        raise ValueError(
            f"margin={margin} must be positive: the band, in nats, around "
            "the unigram loss that counts as collapsed"
        )
    if not all(math.isfinite(v) for v in val_losses):
        return "diverged"
    final = val_losses[-1]
    if abs(final - unigram) <= margin:
        return "collapsed"
    return "trained" if final < unigram else "stalled"


def times_in_turns(
    runs: Mapping[str, Callable[[], object]],
    repeats: int = 20,
    warmup: int = 3,
) -> dict[str, list[float]]:
    """Seconds of every timed call of each function in ``runs``, called in
    turns: one call of each per round, so that a machine whose speed drifts
    slows all of them alike, and each round starting one function later, so
    that none is always first or last. ``warmup`` rounds are not timed."""
    if repeats < 1 or warmup < 0:
        raise ValueError(
            f"repeats={repeats} must be at least 1 and warmup={warmup} at "
            "least 0"
        )
    names = list(runs)
    times: dict[str, list[float]] = {name: [] for name in names}
    for round_ in range(warmup + repeats):
        k = round_ % len(names)
        for name in names[k:] + names[:k]:
            start = time.perf_counter()
            runs[name]()
            if round_ >= warmup:
                times[name].append(time.perf_counter() - start)
    return times


def time_in_turns(
    runs: Mapping[str, Callable[[], object]],
    repeats: int = 20,
    warmup: int = 3,
) -> dict[str, float]:
    """Median seconds of each function in ``runs``, timed in turns
    (:func:`times_in_turns`)."""
    return {
        name: statistics.median(t)
        for name, t in times_in_turns(runs, repeats, warmup).items()
    }


def norm_times(
    norms: Mapping[str, nn.Module],
    x: Tensor,
    repeats: int = 50,
    warmup: int = 5,
    threads: int = 1,
) -> dict[str, float]:
    """Median seconds of one forward and backward pass of each norm on
    ``x`` (B, T, dim), in turns, with ``threads`` PyTorch threads for all
    of them (the thread count is restored afterwards)."""
    x = x.detach().requires_grad_(True)
    grad = torch.randn_like(x)

    def step(norm: nn.Module) -> Callable[[], None]:
        def run() -> None:
            x.grad = None
            norm.zero_grad(set_to_none=True)
            norm(x).backward(grad)

        return run

    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        return time_in_turns(
            {name: step(n) for name, n in norms.items()}, repeats, warmup
        )
    finally:
        torch.set_num_threads(before)
