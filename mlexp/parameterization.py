"""Parameterization: how initialization, learning rates and multipliers
change with a model's width (Chapter 11).

A parameterization is a picklable object with two methods: ``build``
makes Chapter 1's model at a width, with whatever initialization,
attention scale and readout multiplier the rule asks for, and
``optimizer`` gives ``train_lm`` a factory whose parameter groups carry
each layer's base rate. :class:`SP` is Part I's recipe at any width;
:class:`MuP` is the Maximal Update Parameterization for Adam (Yang et
al., Tensor Programs V, Table 8; microsoft/mup's ``MuReadout`` and
``MuAdamW``), which keeps the size of every layer's update steady as the
model widens, so that a rate tuned at the base width stays good.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch import Tensor

from .training.recipe import AdamW
from .transformer import Attention, TransformerLM, apply_rope

__all__ = [
    "SP",
    "MuP",
    "MuAdamW",
    "ScaledAttention",
    "Readout",
    "Coordinates",
    "Clipped",
    "parabola_minimum",
]


class ScaledAttention(Attention):
    """Chapter 1's attention with the scores multiplied by ``scale`` in
    place of 1/sqrt(head_dim).

    Built around an existing :class:`~mlexp.transformer.Attention`, it
    keeps that layer's weight matrices (the same tensors, the same
    names), so swapping it in changes the scale and nothing else.
    """

    def __init__(self, attention: Attention, scale: float):
        nn.Module.__init__(self)
        self.n_heads = attention.n_heads
        self.causal, self.rope = attention.causal, attention.rope
        self.qkv, self.out = attention.qkv, attention.out
        self.scale = scale

    def forward(self, x: Tensor) -> Tensor:
        B, T, C = x.shape
        q, k, v = self.qkv(x).split(C, dim=-1)  # three (B, T, C)
        # (B, T, C) -> (B, n_heads, T, head_dim)
        q, k, v = (
            t.view(B, T, self.n_heads, C // self.n_heads).transpose(1, 2)
            for t in (q, k, v)
        )
        if self.rope:
            q, k = apply_rope(q), apply_rope(k)
        y = F.scaled_dot_product_attention(
            q, k, v, is_causal=self.causal, scale=self.scale
        )
        # (B, n_heads, T, head_dim) -> (B, T, C)
        return self.out(y.transpose(1, 2).reshape(B, T, C))

    def extra_repr(self) -> str:
        return f"scale={self.scale:.4g}"


class Readout(nn.Module):
    """The last linear layer with its input divided by ``width_mult``:
    microsoft/mup's ``MuReadout``, bias-free, keeping the weight of the
    layer it replaces.

    A wider model's final vector has more coordinates, each about as large
    as before, and once training has lined the readout's rows up with it,
    the logits would grow in proportion to the width. Dividing by the
    width's multiple keeps them the same size.
    """

    def __init__(self, head: nn.Linear, width_mult: float):
        super().__init__()
        self.weight = head.weight  # (vocab, width)
        self.width_mult = width_mult

    def forward(self, x: Tensor) -> Tensor:
        return F.linear(x / self.width_mult, self.weight)

    def extra_repr(self) -> str:
        return f"width_mult={self.width_mult:.4g}"


def _check_width(width: int, n_heads: int, what: str = "width") -> None:
    if width < n_heads or width % n_heads:
        raise ValueError(
            f"{what}={width} with n_heads={n_heads}: each head needs a "
            "whole number of at least one channel; give a multiple of "
            "n_heads"
        )


class SP:
    """The standard parameterization: PyTorch's initialization, the
    default attention scale and one AdamW rate for every matrix, at any
    width. Part I's recipe, whose best rate moves as the model widens."""

    def build(
        self, vocab_size: int, width: int, **model_kwargs
    ) -> TransformerLM:
        """Chapter 1's model at ``width``, as Part I builds it."""
        return TransformerLM(vocab_size, dim=width, **model_kwargs)

    def optimizer(self, lr: float, weight_decay: float = 0.1) -> AdamW:
        """Part I's AdamW: ``lr`` for every group."""
        return AdamW(lr, weight_decay=weight_decay)

    def __repr__(self) -> str:
        return "SP()"


class MuP:
    """The Maximal Update Parameterization for Adam, relative to the model
    at ``base_width``, where it is the standard model, bit for bit.

    Let m be a matrix's fan-in over its fan-in at the base width. Then:
    matrices whose both sides grow with the width (attention's and the
    feed-forward's) keep PyTorch's fan-in initialization and train at the
    base rate / m, with weight decay x m so that each step decays them
    as much; the embedding and the norms' gains are left alone; the
    readout's input is divided by m and its initial weights multiplied by
    sqrt(m) (:class:`Readout`); attention scores are scaled by
    sqrt(d0) / d for head width d and base head width d0, where the
    standard model uses 1 / sqrt(d).
    """

    def __init__(self, base_width: int = 128):
        if base_width < 1:
            raise ValueError(
                f"base_width={base_width}: give the width the rates were "
                "tuned at, a positive number of channels"
            )
        self.base_width = base_width

    def build(
        self, vocab_size: int, width: int, **model_kwargs
    ) -> TransformerLM:
        """Chapter 1's model at ``width``, parameterized relative to the
        same model at the base width; its ``width_mults`` give each hidden
        matrix's m, for :class:`MuAdamW`."""
        n_heads = model_kwargs.get("n_heads", 4)
        _check_width(self.base_width, n_heads, "base_width")
        _check_width(width, n_heads)
        model = TransformerLM(vocab_size, dim=width, **model_kwargs)
        base, other = (
            _shapes(vocab_size, w, model_kwargs)
            for w in (self.base_width, 2 * self.base_width)
        )
        # a side grows with the width if it differs between two widths
        model.width_mults = {
            name: p.shape[-1] / base[name][-1]
            for name, p in model.named_parameters()
            if p.dim() == 2
            and base[name][0] != other[name][0]
            and base[name][1] != other[name][1]
        }

        head_mult = width / self.base_width
        with torch.no_grad():
            model.head.weight.mul_(math.sqrt(head_mult))
        model.head = Readout(model.head, head_mult)
        d, d0 = width // n_heads, self.base_width // n_heads
        scale = 1 / math.sqrt(d0) * (d0 / d)  # 1 / sqrt(d0) at the base
        for block in model.blocks:
            block.attn = ScaledAttention(block.attn, scale)
        return model

    def optimizer(self, lr: float, weight_decay: float = 0.1) -> MuAdamW:
        """AdamW with each hidden matrix's rate divided by its m."""
        return MuAdamW(lr, weight_decay=weight_decay)

    def __repr__(self) -> str:
        return f"MuP(base_width={self.base_width})"


def _shapes(
    vocab_size: int, width: int, model_kwargs: dict
) -> dict[str, torch.Size]:
    """Every parameter's shape at ``width``, from a model built on the
    meta device: no memory, no random numbers drawn."""
    with torch.device("meta"):
        model = TransformerLM(vocab_size, dim=width, **model_kwargs)
    return {name: p.shape for name, p in model.named_parameters()}


class MuAdamW(AdamW):
    """Part I's AdamW for a model built by :meth:`MuP.build`: the hidden
    matrices in groups by their m, each at rate ``lr / m`` and weight decay
    ``weight_decay * m``; everything else as Part I.

    Adam moves every weight by about the rate, whatever its gradient, so
    a matrix with m times the fan-in would change its outputs m times as
    much per step; dividing its rate by m holds that change steady.
    """

    def __call__(self, model: nn.Module) -> torch.optim.Optimizer:
        mults = getattr(model, "width_mults", None)
        if mults is None:
            raise ValueError(
                "this model has no width_mults: build it with "
                "MuP(...).build, or train it with SP's optimizer"
            )
        named = [
            (n, p) for n, p in model.named_parameters() if p.requires_grad
        ]
        by_mult: dict[float, list[Tensor]] = {}
        for n, p in named:
            if n in mults:
                by_mult.setdefault(mults[n], []).append(p)
        groups = [
            {
                "params": params,
                "lr": self.lr / m,
                "weight_decay": self.weight_decay * m,
            }
            for m, params in by_mult.items()
        ]
        rest = [(n, p) for n, p in named if n not in mults]
        groups += [
            {
                "params": [p for _, p in rest if p.dim() >= 2],
                "weight_decay": self.weight_decay,
            },
            {
                "params": [p for _, p in rest if p.dim() < 2],
                "weight_decay": 0.0,
            },
        ]
        on_cuda = any(p.is_cuda for _, p in named)
        return torch.optim.AdamW(
            groups, lr=self.lr, betas=self.betas, fused=on_cuda or None
        )

    def __repr__(self) -> str:
        return f"Mu{super().__repr__()}"


class Coordinates:
    """A ``train_lm`` measure: the mean absolute value of each layer's
    output, on each step's batch, before that step's update.

    μP's own test (microsoft/mup's "coordinate check"): after a few steps
    at a high rate, a layer whose outputs grow with the width will blow
    up in a wide enough model.
    """

    def __init__(self, steps: Iterable[int] | None = None):
        self.steps = None if steps is None else set(steps)
        self._values: dict[str, float] = {}
        self._hooks: list = []

    def _layers(self, model: TransformerLM) -> dict[str, nn.Module]:
        layers = {"embedding": model.embed}
        for i, block in enumerate(model.blocks):
            layers[f"attention {i}"] = block.attn
            layers[f"feed-forward {i}"] = block.ffn
        layers["stream"] = model.blocks[-1]
        layers["logits"] = model.head
        return layers

    def before(self, step: int, model: nn.Module) -> None:
        if self.steps is not None and step not in self.steps:
            return

        def keep(name):
            def hook(module, inputs, output):
                self._values[name] = output.detach().abs().mean().item()

            return hook

        self._hooks = [
            layer.register_forward_hook(keep(name))
            for name, layer in self._layers(model).items()
        ]

    def after(
        self, step: int, model: nn.Module, logits: Tensor, loss: Tensor
    ) -> dict[str, float] | None:
        if not self._hooks:
            return None
        for hook in self._hooks:
            hook.remove()
        self._hooks = []
        values, self._values = self._values, {}
        return values

    def __repr__(self) -> str:
        steps = None if self.steps is None else sorted(self.steps)
        return f"Coordinates(steps={steps})"


class Clipped:
    """A ``train_lm`` measure: 1 at each step whose gradient clipping
    shortened, 0 where it did not.

    ``train_lm`` clips in place, so after the update a clipped gradient's
    norm is the limit (less a millionth of it); an unclipped one is
    shorter than that.
    """

    def __init__(self, clip: float = 1.0):
        self.clip = clip

    def before(self, step: int, model: nn.Module) -> None:
        pass

    def after(
        self, step: int, model: nn.Module, logits: Tensor, loss: Tensor
    ) -> dict[str, float]:
        grads = [p.grad for p in model.parameters() if p.grad is not None]
        norm = torch.linalg.vector_norm(
            torch.stack([torch.linalg.vector_norm(g) for g in grads])
        )
        return {"clipped": float(norm.item() > self.clip * (1 - 1e-4))}

    def __repr__(self) -> str:
        return f"Clipped(clip={self.clip})"


def parabola_minimum(rates: list[float], losses: list[float]) -> float:
    """The rate at the bottom of a parabola through the lowest loss and
    its two neighbours, on a log-rate axis: the best rate read between
    the grid's points.

    Refuses a minimum at either end of the grid, where the parabola would
    extrapolate: widen the grid that way.
    """
    if len(rates) != len(losses) or len(rates) < 3:
        raise ValueError("give at least three rates, one loss for each")
    order = sorted(range(len(rates)), key=rates.__getitem__)
    x = [math.log(rates[i]) for i in order]
    y = [losses[i] if math.isfinite(losses[i]) else math.inf for i in order]
    i = min(range(len(y)), key=y.__getitem__)
    if i in (0, len(y) - 1):
        raise ValueError(
            f"the lowest loss is at the grid's end (rate "
            f"{math.exp(x[i]):g}): add rates beyond it so that the minimum "
            "is interior"
        )
    (x0, x1, x2), (y0, y1, y2) = x[i - 1 : i + 2], y[i - 1 : i + 2]
    # vertex of the parabola through three points
    num = (x1 - x0) ** 2 * (y1 - y2) - (x1 - x2) ** 2 * (y1 - y0)
    den = (x1 - x0) * (y1 - y2) - (x1 - x2) * (y1 - y0)
    return math.exp(x1 - 0.5 * num / den)
