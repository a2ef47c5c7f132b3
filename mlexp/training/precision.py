"""The arithmetic every chapter trains and evaluates in: one rule, in one
place.

The rule is **float32 on every device**, with TensorFloat-32 switched off on
GPUs, so that a laptop, Colab's T4 and a data-centre GPU all compute the
same kind of number and one set of stored seed runs judges them all (the
seed table's drift rule, which already serves two CPUs, then says how far
a GPU build lies from the stored runs).

Why not bfloat16 where the hardware has it? The book's models are small
(under a million weights, batches of a few thousand tokens): one training
step of Chapter 1's model is about 10 GFLOP, a fraction of a millisecond of
float32 arithmetic on a data-centre GPU, while its few hundred kernel
launches take milliseconds. A GPU is limited by launches here, and autocast
adds cast kernels, so bfloat16 cannot buy much; on a T4 (compute capability
7.5) it is emulated and slower than float32. What it would cost is certain:
numbers of a kind of their own that no stored seed run describes.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterator

import torch

__all__ = ["Arithmetic", "arithmetic", "exact_float32", "describe_device"]


def _fp32_switches() -> list[tuple[object, str, object]]:
    """(object, attribute, value that means full float32) for every place
    PyTorch may trade float32 precision for speed.

    PyTorch 2.9 and later name the precision per backend and operation
    (``fp32_precision``) and refuse a mix with the older switches; earlier
    versions only have the older ones.
    """
    backends = torch.backends
    if hasattr(backends.cuda.matmul, "fp32_precision"):
        return [
            (backends.cuda.matmul, "fp32_precision", "ieee"),
            (backends.cudnn.conv, "fp32_precision", "ieee"),
            (backends.cudnn.rnn, "fp32_precision", "ieee"),
            (backends.mkldnn.matmul, "fp32_precision", "ieee"),
            (backends.mkldnn.conv, "fp32_precision", "ieee"),
        ]
    return [
        (backends.cuda.matmul, "allow_tf32", False),
        (backends.cudnn, "allow_tf32", False),
    ]


@contextlib.contextmanager
def exact_float32() -> Iterator[None]:
    """Compute float32 matrix products and convolutions in full float32.

    PyTorch may otherwise use TensorFloat-32 on Ampere and later GPUs (for
    convolutions it does by default), keeping 10 bits of mantissa instead of
    23, or bfloat16 on some CPUs when asked to. The previous settings are
    restored on exit.
    """
    switches = _fp32_switches()
    saved = [getattr(obj, name) for obj, name, _ in switches]
    for obj, name, value in switches:
        setattr(obj, name, value)
    try:
        yield
    finally:
        for (obj, name, _), value in zip(switches, saved):
            setattr(obj, name, value)


@dataclasses.dataclass(frozen=True)
class Arithmetic:
    """A kind of arithmetic: how runs are grouped, how a page names it."""

    kind: (
        str  # stored with each seed run; only runs of one kind are compared
    )
    name: str  # as a page says it

    def context(self) -> contextlib.AbstractContextManager:
        """Wrap training or evaluation in this arithmetic."""
        return exact_float32()


FLOAT32 = Arithmetic(kind="fp32", name="float32")


def arithmetic(device: torch.device) -> Arithmetic:
    """The arithmetic of a run on ``device``: float32 on every device (the
    module's docstring says why). Training, evaluation and the seed runs'
    kind all ask here."""
    return FLOAT32


def describe_device(device: torch.device) -> str:
    """What a page says it ran on: the GPU's name or the CPU's threads, and
    the arithmetic."""
    name = arithmetic(device).name
    if device.type == "cuda":
        return f"{torch.cuda.get_device_name(device)}, {name}"
    return f"CPU ({torch.get_num_threads()} threads), {name}"
