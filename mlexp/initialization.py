"""Initialization: where training starts (Chapter 11).

An initialization is a picklable object that ``train_lm(init=...)`` calls
on the model before it builds the optimizer, setting the weights in
place. It draws from its own generator, seeded through
:mod:`mlexp.training.seeds`, so a model gets the same start whether it
trains in this process or in a worker of ``train_side_by_side``. Without
one, a model keeps PyTorch's default initialization, as in Part I.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch import Tensor

from .training.seeds import shifted

__all__ = [
    "Normal",
    "ScaledProjections",
    "FanIn",
    "Orthogonal",
    "tie_readout",
    "plain_stack",
    "signal",
    "first_look",
]


class Normal:
    """Every linear and embedding weight drawn from N(0, std^2), biases set
    to zero: GPT-2's initialization at its std of 0.02.

    PyTorch's defaults differ by layer (an embedding's rows have std 1, a
    linear layer's weights are uniform within 1/sqrt(fan-in)); one std for
    every matrix makes the starting scale a single knob.
    """

    def __init__(self, std: float = 0.02, seed: int = 0):
        if not std > 0:
            raise ValueError(
                f"std={std}: give a positive standard deviation"
            )
        self.std = std
        self.seed = seed

    @torch.no_grad()
    def __call__(self, model: nn.Module) -> None:
        generator = torch.Generator().manual_seed(shifted(self.seed))
        for module in model.modules():
            if isinstance(module, (nn.Linear, nn.Embedding)):
                weight = module.weight
                # drawn on the CPU, so every device starts from the same
                # numbers
                draw = torch.randn(weight.shape, generator=generator)
                weight.copy_(draw * self.std)
                if getattr(module, "bias", None) is not None:
                    module.bias.zero_()

    def __repr__(self) -> str:
        return f"Normal(std={self.std}, seed={self.seed})"


class ScaledProjections(Normal):
    """GPT-2's initialization as nanoGPT writes it: every matrix from
    N(0, std^2), then the projections that write into the residual stream
    (attention's ``out``, the feed-forward's ``down``) divided by
    sqrt(2 * n_layers).

    Each block adds two such writes to the stream; if each had the size of
    the stream's input, the stream would grow with depth. Dividing by the
    square root of their number keeps the sum of their variances fixed.
    """

    @torch.no_grad()
    def __call__(self, model: nn.Module) -> None:
        super().__call__(model)
        writes = [
            m
            for name, m in model.named_modules()
            if name.endswith((".attn.out", ".ffn.down"))
        ]
        for m in writes:
            m.weight.div_(math.sqrt(len(writes)))

    def __repr__(self) -> str:
        return f"ScaledProjections(std={self.std}, seed={self.seed})"


class _EachLinear:
    """What the initializations below share: every linear layer's weights
    redrawn (by the subclass's ``draw``) from a generator seeded through
    :mod:`mlexp.training.seeds`, and its biases set to zero."""

    def __init__(self, gain: float = 1.0, seed: int = 0):
        if not gain > 0:
            raise ValueError(f"gain={gain}: give a positive gain")
        self.gain, self.seed = gain, seed

    @torch.no_grad()
    def __call__(self, model: nn.Module) -> None:
        generator = torch.Generator().manual_seed(shifted(self.seed))
        for m in model.modules():
            if isinstance(m, nn.Linear):
                self.draw(m.weight, generator)
                if m.bias is not None:
                    m.bias.zero_()

    def __repr__(self) -> str:
        return f"{type(self).__name__}(gain={self.gain}, seed={self.seed})"


class FanIn(_EachLinear):
    """Every linear layer's weights from N(0, gain^2 / fan-in), biases
    zero: LeCun's rule at ``gain=1``, He's for ReLU at ``gain=sqrt(2)``.

    A unit of the next layer sums fan-in products; with weights of
    variance 1/fan-in the sum keeps its input's variance, and ``gain``
    makes up for what the activation takes away (ReLU zeroes half).
    """

    def draw(self, weight: Tensor, generator: torch.Generator) -> None:
        fan_in = weight.shape[1]  # (out, in)
        draw = torch.randn(weight.shape, generator=generator)
        weight.copy_(draw * self.gain / math.sqrt(fan_in))


class Orthogonal(_EachLinear):
    """Every linear layer's weights a random orthogonal matrix times
    ``gain``, biases zero (Saxe et al.): a square one keeps every input's
    length, not only the average."""

    def draw(self, weight: Tensor, generator: torch.Generator) -> None:
        nn.init.orthogonal_(weight, self.gain, generator)


def tie_readout(model: nn.Module) -> nn.Module:
    """Make the readout use the embedding's matrix (Press and Wolf): one
    (vocab, dim) matrix both looks tokens up and scores them. Returns the
    model."""
    model.head.weight = model.embed.weight
    return model


# --- signal through a deep stack ---------------------------------------

ACTIVATIONS: dict[str, Callable[[Tensor], Tensor]] = {
    "linear": lambda x: x,
    "tanh": torch.tanh,
    "ReLU": F.relu,
}


def plain_stack(depth: int, width: int, seed: int = 0) -> nn.Sequential:
    """``depth`` linear layers of ``width``, with biases and PyTorch's
    initialization: an init passed to :func:`signal` replaces it."""
    torch.manual_seed(shifted(seed))
    return nn.Sequential(*(nn.Linear(width, width) for _ in range(depth)))


def signal(
    stack: nn.Sequential,
    activation: str,
    inputs: Tensor,
) -> dict[str, list[float]]:
    """The root mean square of each layer's activations on a forward pass
    of ``inputs`` (n, width), and of the gradient reaching each layer's
    output on the way back (loss: the outputs' sum against a fixed random
    direction, so that the gradient's size is the network's own)."""
    act = ACTIVATIONS[activation]
    outputs = []
    x = inputs
    for layer in stack:
        x = act(layer(x))
        x.retain_grad()
        outputs.append(x)
    direction = torch.randn(
        x.shape, generator=torch.Generator().manual_seed(0)
    )
    (x * direction).sum().backward()
    return {
        "activations": [
            o.detach().pow(2).mean().sqrt().item() for o in outputs
        ],
        "gradients": [o.grad.pow(2).mean().sqrt().item() for o in outputs],
    }


# --- Chapter 1's model at step 0 ---------------------------------------


@torch.no_grad()
def first_look(model: nn.Module, x: Tensor, y: Tensor) -> dict:
    """What the first step sees: the root mean square of the stream after
    each block and of each sub-layer's write into it, the logits'
    standard deviation and the loss, on one batch (``x`` and ``y``, (B,
    T) each)."""
    sizes: dict[str, list[float]] = {
        "stream": [],
        "attention": [],
        "ffn": [],
    }

    def rms(t: Tensor) -> float:
        return t.pow(2).mean().sqrt().item()

    hooks = []
    for block in model.blocks:
        hooks += [
            block.register_forward_hook(
                lambda m, i, o: sizes["stream"].append(rms(o))
            ),
            block.attn.register_forward_hook(
                lambda m, i, o: sizes["attention"].append(rms(o))
            ),
            block.ffn.register_forward_hook(
                lambda m, i, o: sizes["ffn"].append(rms(o))
            ),
        ]
    try:
        logits, loss = model(x, y)
    finally:
        for h in hooks:
            h.remove()
    return {
        **sizes,
        "logit_std": logits.std().item(),
        "loss": loss.item(),
    }
