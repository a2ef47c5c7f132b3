"""Chapter 7's residual connections: how a sub-layer's output meets its
input, and what the stream that the blocks share looks like once trained.

Read top to bottom: two connections beside Chapter 1's ``Residual`` and
``Plain`` (``Highway``, with a learned gate, and ``ReZero``, a shortcut
whose branch starts switched off), then the measurements the chapter makes
of a stack of blocks: the stream after every block, the logit lens,
deleting and swapping blocks, the stream's size and direction from block
to block, how alike its positions are, and the gradient that reaches each
block's input.

A connection is a class called with the model's width, one instance per
sub-layer; ``forward(x, update)`` combines the sub-layer's input ``x``
(the stream) with its output ``update``. It goes into Chapter 1's model
through ``TransformerLM(..., connection=Highway)``; nothing in
``transformer.py`` changes. The measurements take any chapter's language
model with ``blocks``, a final ``norm`` and a ``head``, including
Chapter 3's ``PositionalLM``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch import Tensor

__all__ = [
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
]


def _checked_pair(x: Tensor, update: Tensor) -> None:
    """A clear error where ``x + update`` would broadcast silently."""
    if x.shape != update.shape:
        raise ValueError(
            f"the sub-layer's input {tuple(x.shape)} and output "
            f"{tuple(update.shape)} differ in shape; a connection needs a "
            "sub-layer that keeps the width of its input"
        )


# --- Chapter 7, step 1: connections ---------------------------------------


class Highway(nn.Module):
    """Highway connection (Srivastava, Greff and Schmidhuber, 2015):
    ``y = update * T(x) + x * (1 - T(x))``.

    The transform gate ``T(x) = sigmoid(W x + b)`` is computed from the
    stream ``x`` that enters the sub-layer, one value per channel and
    position; ``1 - T`` is the carry gate. With ``T = 0`` the sub-layer is
    skipped and ``x`` passes through unchanged; with ``T = 1`` its output
    replaces ``x``, as in a plain stack. The paper starts the gates biased
    towards carrying, with a negative bias (-2 here: sigmoid(-2) = 0.12,
    so at first about 88% of each channel is carried).

    The gate is a full ``dim x dim`` matrix and a bias per sub-layer, two
    per block: about 17% more parameters than Chapter 1's block at width
    64. Unlike the identity shortcut, the carried path is scaled by
    ``1 - T``, so a signal that crosses many blocks is multiplied by many
    factors below 1.
    """

    def __init__(self, dim: int, gate_bias: float = -2.0):
        super().__init__()
        if dim < 1:
            raise ValueError(
                f"dim={dim} must be at least 1; pass the model's width"
            )
        self.dim = dim
        self.gate = nn.Linear(dim, dim)
        nn.init.constant_(self.gate.bias, gate_bias)

    def transform_gate(self, x: Tensor) -> Tensor:
        """T(x), in (0, 1), shape of ``x``: how much of the update each
        channel of each position takes."""
        if x.shape[-1] != self.dim:
            raise ValueError(
                f"Highway was built for width {self.dim} but the stream "
                f"has width {x.shape[-1]}; build it with the model's width "
                "(TransformerLM passes it when given connection=Highway)"
            )
        return torch.sigmoid(self.gate(x))

    def forward(self, x: Tensor, update: Tensor) -> Tensor:
        _checked_pair(x, update)
        t = self.transform_gate(x)  # (B, T, dim)
        return update * t + x * (1 - t)


class ReZero(nn.Module):
    """ReZero (Bachlechner et al., 2020): ``y = x + alpha * update`` with
    one learned scalar ``alpha`` that starts at 0.

    At initialization every block is the identity, whatever its weights,
    so a deep stack starts as the model without blocks, and the gradient
    reaches every block's input unchanged. The blocks' own weights get no
    gradient at the first step (it is scaled by alpha = 0); alpha gets one,
    and the branches open as it grows. The paper drops normalization, so
    the chapter builds it with ``norm=nn.Identity``.
    """

    def __init__(self, dim: int):
        super().__init__()
        self.alpha = nn.Parameter(torch.zeros(()))

    def forward(self, x: Tensor, update: Tensor) -> Tensor:
        _checked_pair(x, update)
        return x + self.alpha * update


# --- Chapter 7, step 2: the stream a stack shares -------------------------


def _checked_model(model: nn.Module) -> nn.ModuleList:
    """The model's blocks, or a clear error for a model the measurements
    cannot read."""
    for part in ("blocks", "norm", "head"):
        if not hasattr(model, part):
            raise ValueError(
                f"the model has no `{part}`; pass a language model built "
                "like TransformerLM (blocks, a final norm and a head)"
            )
    if len(model.blocks) == 0:
        raise ValueError(
            "the model has no blocks, so there is no stream between them "
            "to measure; build it with n_layers of at least 1"
        )
    return model.blocks


def _checked_tokens(idx: Tensor, targets: Tensor | None = None) -> None:
    if idx.dim() != 2:
        raise ValueError(
            f"idx has shape {tuple(idx.shape)}; pass token ids as "
            "(batch, time), such as a batch of windows"
        )
    if targets is not None and targets.shape != idx.shape:
        raise ValueError(
            f"targets {tuple(targets.shape)} and idx {tuple(idx.shape)} "
            "differ in shape; pass the next token of every position"
        )


#: Windows the measurements score at a time. Small batches keep a CPU's
#: caches warm (at width 64, 256 windows in chunks of 64 take about half
#: the time of one batch of 256) and bound the memory the stream takes.
CHUNK = 64


def _chunks(
    idx: Tensor, targets: Tensor | None, batch_size: int
) -> Iterator[tuple[Tensor, Tensor | None]]:
    """``idx`` and ``targets`` in consecutive slices of ``batch_size``
    windows."""
    if batch_size < 1:
        raise ValueError(
            f"batch_size={batch_size} must be at least 1; pass the number "
            "of windows to score at a time"
        )
    for start in range(0, len(idx), batch_size):
        stop = start + batch_size
        yield (
            idx[start:stop],
            None if targets is None else targets[start:stop],
        )


def _states(model: nn.Module, idx: Tensor) -> list[Tensor]:
    """The stream before the first block and after each block, as tensors
    of the autograd graph (they can be differentiated)."""
    blocks = _checked_model(model)
    _checked_tokens(idx)
    if hasattr(model, "hidden_states"):  # Chapter 3's PositionalLM
        return list(model.hidden_states(idx))
    states: list[Tensor] = []
    hooks = [
        blocks[0].register_forward_pre_hook(
            lambda _, args: states.append(args[0])
        )
    ]
    hooks += [
        block.register_forward_hook(lambda _, args, out: states.append(out))
        for block in blocks
    ]
    try:
        model(idx)
    finally:
        for hook in hooks:
            hook.remove()
    return states


@torch.no_grad()
def hidden_states(
    model: nn.Module, idx: Tensor, batch_size: int = CHUNK
) -> Tensor:
    """The residual stream for the tokens ``idx`` (B, T): before the first
    block (the embeddings, layer 0) and after each block, stacked as
    (n_layers + 1, B, T, dim)."""
    _checked_model(model)
    _checked_tokens(idx)
    parts = [
        torch.stack(_states(model, part))
        for part, _ in _chunks(idx, None, batch_size)
    ]
    return torch.cat(parts, dim=1)  # along the batch axis


def _nll(model: nn.Module, x: Tensor, targets: Tensor) -> Tensor:
    """Summed cross-entropy of the model's head read after its final
    norm."""
    logits = model.head(model.norm(x))  # (B, T, dim) -> (B, T, vocab)
    return F.cross_entropy(
        logits.flatten(0, 1), targets.flatten(), reduction="sum"
    )


@torch.no_grad()
def logit_lens(
    model: nn.Module, idx: Tensor, targets: Tensor, batch_size: int = CHUNK
) -> Tensor:
    """Loss of the output head applied to the stream after each block:
    (n_layers + 1,), layer 0 being the embeddings.

    The logit lens (nostalgebraist, 2020) reads an intermediate stream as
    if it were the last: through the final norm and the head the model was
    trained with. The last entry is the model's own loss. A head trained
    only on the last layer's stream need not understand the others, so a
    high loss early says the head cannot read that layer, not necessarily
    that the layer knows nothing.
    """
    _checked_model(model)
    _checked_tokens(idx, targets)
    total = sum(
        torch.stack([_nll(model, x, y) for x in _states(model, part)])
        for part, y in _chunks(idx, targets, batch_size)
    )
    return total / targets.numel()


@torch.no_grad()
def lm_loss(
    model: nn.Module, idx: Tensor, targets: Tensor, batch_size: int = CHUNK
) -> float:
    """The model's next-token cross-entropy on ``idx``, without auxiliary
    losses (a Mixture of Experts' balancing loss, say)."""
    _checked_tokens(idx, targets)
    total = 0.0
    for part, y in _chunks(idx, targets, batch_size):
        logits, _ = model(part)
        total += F.cross_entropy(
            logits.flatten(0, 1), y.flatten(), reduction="sum"
        ).item()
    return total / targets.numel()


@contextlib.contextmanager
def blocks_in_order(
    model: nn.Module, order: Sequence[int]
) -> Iterator[nn.Module]:
    """Within the ``with``, the model runs only the blocks listed in
    ``order``, in that order (``[0, 2, 3]`` deletes block 1; ``[1, 0, 2,
    3]`` swaps the first two). The trained weights are untouched, and the
    blocks are put back afterwards, also after an error."""
    blocks = _checked_model(model)
    n = len(blocks)
    for i in order:
        if isinstance(i, bool) or not isinstance(i, int):
            raise ValueError(
                f"order holds {i!r}; pass block indices as ints"
            )
        if not 0 <= i < n:
            raise ValueError(
                f"block {i} is out of range for a model of {n} blocks; "
                f"pass indices from 0 to {n - 1}"
            )
    model.blocks = nn.ModuleList(blocks[i] for i in order)
    try:
        yield model
    finally:
        model.blocks = blocks


def loss_with_blocks(
    model: nn.Module,
    idx: Tensor,
    targets: Tensor,
    order: Sequence[int],
    batch_size: int = CHUNK,
) -> float:
    """The model's loss when it runs only the blocks in ``order``."""
    with blocks_in_order(model, order):
        return lm_loss(model, idx, targets, batch_size)


def deletion_losses(
    model: nn.Module, idx: Tensor, targets: Tensor, batch_size: int = CHUNK
) -> Tensor:
    """Loss with each block deleted in turn, the rest kept in order:
    (n_layers,), in float64 like ``lm_loss``. With residual connections,
    deleting a block is the same as giving it sub-layers that write
    nothing (Chapter 1's ``WriteNothing``); with other connections it is
    not."""
    n = len(_checked_model(model))
    return torch.tensor(
        [
            loss_with_blocks(
                model,
                idx,
                targets,
                [j for j in range(n) if j != i],
                batch_size,
            )
            for i in range(n)
        ],
        dtype=torch.float64,
    )


def random_deletion_losses(
    model: nn.Module,
    idx: Tensor,
    targets: Tensor,
    k: int,
    trials: int,
    generator: torch.Generator | None = None,
    batch_size: int = CHUNK,
) -> Tensor:
    """Loss with ``k`` blocks deleted at random, the rest kept in order,
    for ``trials`` independent draws: (trials,). Veit et al. (2016)
    deleted blocks this way from trained residual networks to see whether
    the harm grows smoothly with k."""
    n = len(_checked_model(model))
    if not 1 <= k <= n:
        raise ValueError(
            f"k={k} blocks cannot be deleted from a model of {n}; pass k "
            f"from 1 to {n}"
        )
    if trials < 1:
        raise ValueError(f"trials={trials} must be at least 1")
    losses = []
    for _ in range(trials):
        gone = set(torch.randperm(n, generator=generator)[:k].tolist())
        keep = [j for j in range(n) if j not in gone]
        losses.append(
            loss_with_blocks(model, idx, targets, keep, batch_size)
        )
    return torch.tensor(losses, dtype=torch.float64)


def swap_losses(
    model: nn.Module, idx: Tensor, targets: Tensor, batch_size: int = CHUNK
) -> Tensor:
    """Loss with blocks i and i + 1 swapped, for each neighbouring pair:
    (n_layers - 1,)."""
    n = len(_checked_model(model))
    if n < 2:
        raise ValueError(
            "a model of one block has no neighbouring pair to swap; build "
            "it with n_layers of at least 2"
        )
    losses = []
    for i in range(n - 1):
        order = list(range(n))
        order[i], order[i + 1] = order[i + 1], order[i]
        losses.append(
            loss_with_blocks(model, idx, targets, order, batch_size)
        )
    return torch.tensor(losses, dtype=torch.float64)


# --- Chapter 7, step 3: the stream's geometry -----------------------------


def _checked_states(states: Tensor) -> None:
    if states.dim() != 4 or len(states) < 2:
        raise ValueError(
            f"states has shape {tuple(states.shape)}; pass what "
            "hidden_states(model, idx) returns, (n_layers + 1, B, T, dim)"
            " with at least one block"
        )


def stream_rms(states: Tensor) -> Tensor:
    """Root-mean-square size of the stream's entries at each layer:
    (n_layers + 1,). With identity shortcuts every block adds to the
    stream, so it tends to grow with depth."""
    _checked_states(states)
    return states.pow(2).mean(dim=(1, 2, 3)).sqrt()


def relative_updates(states: Tensor) -> Tensor:
    """How much each block changes each token's vector, relative to its
    size: the mean over tokens of ||x_{l+1} - x_l|| / ||x_l||,
    (n_layers,)."""
    _checked_states(states)
    change = (states[1:] - states[:-1]).norm(dim=-1)  # (L, B, T)
    return (change / states[:-1].norm(dim=-1)).mean(dim=(1, 2))


def neighbour_cosines(states: Tensor) -> Tensor:
    """Cosine between each token's vector before and after each block,
    averaged over tokens: (n_layers,). Near 1, a block nudges the stream;
    near 0, it replaces it."""
    _checked_states(states)
    return F.cosine_similarity(states[1:], states[:-1], dim=-1).mean((1, 2))


def token_uniformity(states: Tensor) -> Tensor:
    """How different the positions of a sequence still are, per layer:
    ||H - mean over positions of H|| / ||H|| for each sequence's (T, dim)
    matrix H, averaged over sequences, (n_layers + 1,).

    1 means the positions share nothing, 0 that every position holds the
    same vector, the collapse that Dong, Cordonnier and Loukas (2021)
    proved for attention stacked without shortcuts (their residual
    ``res(H)`` is H minus the best rank-1 matrix of the form ``1 x^T``,
    which is the mean over positions).
    """
    _checked_states(states)
    centred = states - states.mean(dim=2, keepdim=True)  # (L+1, B, T, dim)
    ratio = centred.norm(dim=(2, 3)) / states.norm(dim=(2, 3))  # (L+1, B)
    return ratio.mean(dim=1)


def block_input_grads(
    model: nn.Module, idx: Tensor, targets: Tensor
) -> Tensor:
    """Norm of the gradient of the loss with respect to each block's input:
    (n_layers,), the first block's input (the embeddings) first.

    Read at initialization, it says whether the signal from the loss
    reaches the early blocks (vanishing gradients: the norms shrink towards
    the input) or blows up on the way (they grow). The model's parameters'
    ``.grad`` are left as they were.
    """
    _checked_tokens(idx, targets)
    with torch.enable_grad():
        states = _states(model, idx)
        loss = _nll(model, states[-1], targets) / targets.numel()
        grads = torch.autograd.grad(loss, states[:-1])
    return torch.stack([g.norm() for g in grads]).detach()
