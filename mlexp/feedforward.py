"""Chapter 5's feed-forward variants: how each token is transformed on its
own.

Read top to bottom: the two-layer MLP with any activation (sigmoid, ReLU,
GELU), the gated family (GLU, Bilinear, ReGLU, GEGLU, SwiGLU) as one module
that takes the gate's activation, the hidden width at which a gated layer
has an MLP's parameters, a Mixture of Experts (a router sends each token to
k of N expert feed-forward layers, with the Switch Transformer's balancing
loss), and the measurements a chapter reads from a trained model.

Each variant is a module that maps (B, T, dim) to (B, T, dim) and goes into
Chapter 1's ``TransformerLM`` through ``make_ffn=lambda dim: ...``.
Chapter 1's modules stay untouched (the earlier chapters' seed data is
fingerprinted on them): ``GatedFFN(dim, nn.SiLU())`` has the same weights,
under the same names (``gate``, ``up``, ``down``), as Chapter 1's
``SwiGLU(dim)``, and computes the same function. The Mixture of Experts
reports its balancing loss as ``aux_loss``, which ``TransformerLM`` adds to
the training loss.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.nn as nn
from torch import Tensor

__all__ = [
    "MLP",
    "GatedFFN",
    "GATES",
    "gated_hidden",
    "balance_loss",
    "MoE",
    "hidden_activations",
    "expert_choices",
    "expert_load",
    "capacity_overflow",
    "active_params",
]

Activation = nn.Module | Callable[[Tensor], Tensor]


def _checked(activation: Activation | None) -> Activation:
    """The activation itself, or the identity for ``None``; a clear error
    for anything that cannot be applied to a tensor."""
    if activation is None:
        return nn.Identity()
    if isinstance(activation, type):
        raise ValueError(
            f"activation={activation.__name__} is a class; pass an "
            f"instance, such as {activation.__name__}()"
        )
    if isinstance(activation, str) or not callable(activation):
        raise ValueError(
            f"activation={activation!r} is not a module or a function; "
            "pass one, such as nn.ReLU(), nn.GELU() or torch.sigmoid"
        )
    return activation


def _checked_hidden(hidden: int) -> int:
    if hidden < 1:
        raise ValueError(
            f"hidden={hidden} must be at least 1; pass a positive width "
            "or None for the default"
        )
    return hidden


# --- Chapter 5, step 1: one token at a time -------------------------------


class MLP(nn.Module):
    """Two-layer feed-forward layer: ``down(activation(up(x)))``, applied
    to every position on its own.

    Vaswani et al. (2017) used ReLU and a hidden width of four times the
    model's; earlier networks used the logistic sigmoid, GPT and BERT GELU.
    The activation is passed in (``nn.ReLU()``, ``nn.GELU()``,
    ``torch.sigmoid``, ...), so the variants differ in that one argument.
    No biases by default, as in Shazeer (2020) and Chapter 1's SwiGLU, so
    parameter counts compare matrix with matrix.
    """

    def __init__(
        self,
        dim: int,
        activation: Activation | None,
        hidden: int | None = None,
        bias: bool = False,
    ):
        super().__init__()
        hidden = _checked_hidden(hidden or 4 * dim)
        self.act = _checked(activation)
        self.up = nn.Linear(dim, hidden, bias=bias)
        self.down = nn.Linear(hidden, dim, bias=bias)

    def forward(self, x: Tensor) -> Tensor:
        # (B, T, dim) -> (B, T, hidden) -> (B, T, dim)
        return self.down(self.act(self.up(x)))


# --- Chapter 5, step 2: gating --------------------------------------------


def gated_hidden(
    dim: int, mlp_hidden: int | None = None, multiple_of: int = 1
) -> int:
    """Hidden width at which a gated layer has (about) the parameters of an
    MLP of width ``mlp_hidden`` (default ``4 * dim``).

    An MLP holds two matrices of dim x hidden, a gated layer three, so the
    gated width is 2/3 of the MLP's (Shazeer, 2020): int(2 * 4 * 128 / 3)
    = 341 for Chapter 1's model. LLaMA then rounds it up to a multiple of
    ``multiple_of`` (256 in LLaMA-7B: 4096 wide, hidden 11,008), which
    suits hardware and costs a few parameters.
    """
    mlp_hidden = 4 * dim if mlp_hidden is None else mlp_hidden
    if mlp_hidden < 2:
        raise ValueError(
            f"mlp_hidden={mlp_hidden} leaves no gated width (2/3 of it "
            "rounds to 0); pass at least 2"
        )
    if multiple_of < 1:
        raise ValueError(
            f"multiple_of={multiple_of} must be at least 1; pass 1 for "
            "no rounding"
        )
    hidden = int(2 * mlp_hidden / 3)
    return multiple_of * math.ceil(hidden / multiple_of)


class GatedFFN(nn.Module):
    """Gated feed-forward layer: ``down(activation(gate(x)) * up(x))``.

    Two projections of the token are multiplied channel by channel, one of
    them through an activation: the gate decides how much of each hidden
    unit passes. With the logistic sigmoid this is the GLU (Dauphin et al.,
    2017); with no activation the Bilinear layer; with ReLU, GELU or
    SiLU/Swish the ReGLU, GEGLU and SwiGLU of Shazeer (2020), listed in
    ``GATES``. Three matrices instead of two, so the default width is
    ``gated_hidden(dim)``, where the layer has a 4x MLP's parameters.

    Weight names are Chapter 1's SwiGLU's (``gate``, ``up``, ``down``;
    ``gate_proj``, ``up_proj``, ``down_proj`` in Hugging Face's Llama): with
    ``nn.SiLU()`` this is that layer, and either loads the other's weights.
    """

    def __init__(
        self,
        dim: int,
        activation: Activation | None,
        hidden: int | None = None,
        bias: bool = False,
    ):
        super().__init__()
        hidden = _checked_hidden(hidden or gated_hidden(dim))
        self.act = _checked(activation)
        self.gate = nn.Linear(dim, hidden, bias=bias)
        self.up = nn.Linear(dim, hidden, bias=bias)
        self.down = nn.Linear(hidden, dim, bias=bias)

    def forward(self, x: Tensor) -> Tensor:
        # two (B, T, hidden), multiplied channel by channel -> (B, T, dim)
        return self.down(self.act(self.gate(x)) * self.up(x))


#: The gated variants of Shazeer (2020), Table 1, by name: the class of
#: each gate's activation (instantiate it: ``GatedFFN(dim, GATES[n]())``).
#: Swish with beta = 1 is PyTorch's SiLU; Bilinear has no activation.
GATES: dict[str, type[nn.Module]] = {
    "GLU": nn.Sigmoid,
    "Bilinear": nn.Identity,
    "ReGLU": nn.ReLU,
    "GEGLU": nn.GELU,
    "SwiGLU": nn.SiLU,
}


# --- Chapter 5, step 3: more parameters, same compute ---------------------


def balance_loss(probs: Tensor, chosen: Tensor) -> Tensor:
    """The Switch Transformer's load-balancing loss without its
    coefficient: N * sum_i f_i * P_i (Fedus et al., 2022, eq. 4-6).

    ``probs`` (tokens, N) is the router's softmax over all N experts;
    ``chosen`` (tokens, k) the experts each token was sent to. f_i is the
    fraction of the routed tokens that went to expert i, P_i the mean
    probability the router gave it. f has no gradient (it counts), so the
    gradient flows through P: it lowers the probability of the experts that
    received the most tokens. When either f or P is uniform the loss is
    exactly 1, its value under perfectly balanced routing; a router that
    sends everything to one expert with certainty gives N. (It is not a
    strict lower bound: it dips below 1 when the busiest experts are not
    the ones given the most probability on average, which choosing the
    most probable experts makes unusual.)

    Switch routes to k = 1 expert. For k > 1, f counts all k * tokens
    assignments, so f still sums to 1 and balanced routing still gives 1
    (Hugging Face's Mixtral counts k per token and gets k).
    """
    if probs.dim() != 2 or chosen.dim() != 2:
        raise ValueError(
            f"probs {tuple(probs.shape)} and chosen {tuple(chosen.shape)} "
            "must be (tokens, N) and (tokens, k); flatten the batch and "
            "time axes first"
        )
    n = probs.shape[-1]
    counts = torch.bincount(chosen.flatten(), minlength=n)
    f = counts.to(probs.dtype) / chosen.numel()  # (N,), sums to 1
    p = probs.mean(dim=0)  # (N,), sums to 1
    return n * (f * p).sum()


class MoE(nn.Module):
    """Mixture of Experts: a linear router sends each token to ``top_k`` of
    ``n_experts`` feed-forward layers and adds their outputs, weighted.

    Every expert is built by ``make_expert(dim)`` (by default a SwiGLU
    ``GatedFFN``, as in Mixtral). The layer holds N experts' parameters but
    runs only k of them per token: N experts' weights for the compute of k
    experts and the router.

    The weights are the router's softmax probabilities of the chosen
    experts. ``renormalize`` rescales the k of them to sum to 1, as Mixtral
    does (softmax over the top-k logits, which is the same thing); without
    it they stay as the softmax gave them, as in the Switch Transformer.
    With k = 1, renormalizing makes every weight 1 and leaves the router no
    gradient from the task, so the default (``None``) is Switch's rule for
    k = 1 and Mixtral's for k > 1.

    Routers tend to collapse: the experts that get tokens early improve
    and get more. Each forward therefore records ``aux_loss``, the
    coefficient ``balance`` times ``balance_loss`` (the Switch paper uses
    0.01; 0 switches it off), which ``TransformerLM`` adds to the training
    loss, and what a chapter reads about routing: ``chosen`` (B, T, k), the
    experts of each token, and ``load`` (N,), how many tokens each expert
    received.

    Dispatch is batched: for each expert, the tokens that chose it are
    gathered and go through it in one call (one matrix product per weight
    matrix), never one token at a time. Within an expert the tokens are
    distinct, so the scatter-add of the outputs has no colliding rows and
    is deterministic on a GPU too.
    """

    def __init__(
        self,
        dim: int,
        n_experts: int,
        top_k: int = 1,
        make_expert: Callable[[int], nn.Module] | None = None,
        balance: float = 0.01,
        renormalize: bool | None = None,
    ):
        super().__init__()
        if n_experts < 1:
            raise ValueError(
                f"n_experts={n_experts} must be at least 1; a Mixture of "
                "Experts needs experts to route to"
            )
        if not 1 <= top_k <= n_experts:
            raise ValueError(
                f"top_k={top_k} must be between 1 and n_experts="
                f"{n_experts}: each token goes to top_k distinct experts; "
                "lower top_k or add experts"
            )
        if balance < 0:
            raise ValueError(
                f"balance={balance} must be at least 0 (0.01 in the "
                "Switch Transformer; 0 switches the loss off)"
            )
        make_expert = make_expert or (lambda d: GatedFFN(d, nn.SiLU()))
        if not callable(make_expert):
            raise ValueError(
                f"make_expert={make_expert!r} must be a function of the "
                "width, such as lambda d: GatedFFN(d, nn.SiLU())"
            )
        experts = [make_expert(dim) for _ in range(n_experts)]
        if not all(isinstance(e, nn.Module) for e in experts):
            raise ValueError(
                "make_expert(dim) must return an nn.Module, such as "
                "GatedFFN(dim, nn.SiLU())"
            )
        self.n_experts, self.top_k, self.balance = n_experts, top_k, balance
        self.renormalize = top_k > 1 if renormalize is None else renormalize
        self.router = nn.Linear(dim, n_experts, bias=False)
        self.experts = nn.ModuleList(experts)
        # written by every forward
        self.aux_loss: Tensor = torch.zeros(())
        self.chosen: Tensor | None = None
        self.load: Tensor | None = None

    def forward(self, x: Tensor) -> Tensor:
        shape = x.shape
        tokens = x.reshape(-1, shape[-1])  # (B, T, C) -> (B * T, C)
        probs = self.router(tokens).softmax(dim=-1)  # (B * T, N)
        # the k most probable experts of each token: two (B * T, k)
        weights, chosen = probs.topk(self.top_k, dim=-1)
        if self.renormalize:
            weights = weights / weights.sum(dim=-1, keepdim=True)
        out = torch.zeros_like(tokens)
        for e, expert in enumerate(self.experts):
            # the tokens that chose expert e, and in which of their k slots
            token, slot = torch.where(chosen == e)
            y = expert(tokens[token])  # (n_e, C) -> (n_e, C), one call
            if y.shape != (len(token), shape[-1]):
                raise ValueError(
                    f"expert {e} maps width {shape[-1]} to "
                    f"{tuple(y.shape[1:])}; make_expert(dim) must build "
                    "a layer whose output has the width of its input"
                )
            out.index_add_(0, token, y * weights[token, slot, None])
        self.aux_loss = self.balance * balance_loss(probs, chosen)
        self.chosen = chosen.detach().view(*shape[:-1], self.top_k)
        self.load = torch.bincount(
            chosen.flatten(), minlength=self.n_experts
        )
        return out.view(shape)

    def active_params(self) -> int:
        """Parameters one token uses: the router and k experts (the k
        largest, should the factory build experts of different sizes)."""
        sizes = sorted(
            (sum(p.numel() for p in e.parameters()) for e in self.experts),
            reverse=True,
        )
        router = sum(p.numel() for p in self.router.parameters())
        return router + sum(sizes[: self.top_k])


# --- Chapter 5, step 4: what a trained model's layers do ------------------


def _moe_layers(model: nn.Module) -> list[MoE]:
    layers = [m for m in model.modules() if isinstance(m, MoE)]
    if not layers:
        raise ValueError(
            "the model has no MoE layer; build it with "
            "make_ffn=lambda dim: MoE(dim, n_experts, top_k)"
        )
    return layers


@torch.no_grad()
def hidden_activations(model: nn.Module, idx: Tensor) -> Tensor:
    """What every feed-forward layer's hidden units output on the tokens
    ``idx`` (B, T): (n_layers, B, T, hidden).

    Read at the input of each block's ``ffn.down`` (the activations of an
    MLP, the gated product of a gated layer). In the reading of Geva et al.
    (2021), a hidden unit's row of ``up`` is a key, its activation says how
    strongly the token matches that key, and its column of ``down`` is the
    value it adds to the residual stream, scaled by the activation.
    """
    layers = [getattr(block.ffn, "down", None) for block in model.blocks]
    if not all(isinstance(d, nn.Linear) for d in layers):
        raise ValueError(
            "every block's ffn needs a `down` projection (MLP, GatedFFN or "
            "Chapter 1's SwiGLU); an MoE's experts are read one by one"
        )
    seen: list[Tensor] = []
    hooks = [
        down.register_forward_pre_hook(lambda _, args: seen.append(args[0]))
        for down in layers
    ]
    try:
        model(idx)
    finally:
        for hook in hooks:
            hook.remove()
    return torch.stack(seen)


@torch.no_grad()
def expert_choices(model: nn.Module, idx: Tensor) -> Tensor:
    """The experts each token of ``idx`` (B, T) is sent to in every MoE
    layer: (n_layers, B, T, k), most probable first."""
    layers = _moe_layers(model)
    model(idx)
    return torch.stack([m.chosen for m in layers])


@torch.no_grad()
def expert_load(model: nn.Module, idx: Tensor) -> Tensor:
    """Tokens of ``idx`` (B, T) each expert receives, per MoE layer:
    (n_layers, n_experts); each row sums to k * B * T."""
    layers = _moe_layers(model)
    model(idx)
    return torch.stack([m.load for m in layers])


def capacity_overflow(
    load: Tensor, capacity_factor: float = 1.25
) -> Tensor:
    """How many of the routed tokens would not fit if each expert could
    take only ``capacity_factor`` times an equal share: one count per row
    of ``load`` (..., n_experts).

    The Switch Transformer gives each expert a fixed buffer of
    capacity_factor * tokens / N (here tokens counts all k * tokens
    assignments, rounded down to whole tokens) and lets the tokens beyond
    it skip the layer through the residual connection. Our layers drop
    nothing; this counts what that rule would have dropped.
    """
    if capacity_factor <= 0:
        raise ValueError(
            f"capacity_factor={capacity_factor} must be positive (1.0 to "
            "1.25 in the Switch Transformer)"
        )
    n = load.shape[-1]
    routed = load.sum(-1, keepdim=True)
    capacity = (capacity_factor * routed / n).floor().to(load.dtype)
    return (load - capacity).clamp(min=0).sum(-1)


def active_params(model: nn.Module) -> int:
    """Trainable parameters one token uses: all of them, except that each
    MoE layer counts only its router and k experts."""
    total = sum(p.numel() for p in model.parameters() if p.requires_grad)
    unused = sum(
        sum(p.numel() for p in m.parameters()) - m.active_params()
        for m in model.modules()
        if isinstance(m, MoE)
    )
    return total - unused
