"""One rule for the arithmetic: float32 on a CPU, on Colab's T4 and on an H100 alike.

The GPUs are stand-ins: torch.cuda's queries are stubbed with what a T4 (compute capability
7.5, no bfloat16 hardware) and an H100 (9.0) answer, so the rule is tested on any machine.
"""

import contextlib

import pytest
import torch

import mlexp
from mlexp.evidence import provenance
from mlexp.training import precision
from mlexp.transformer import TransformerLM

GPUS = {"T4": ("Tesla T4", (7, 5)), "H100": ("NVIDIA H100 80GB HBM3", (9, 0))}


@pytest.fixture(params=sorted(GPUS))
def gpu(request, monkeypatch):
    name, capability = GPUS[request.param]
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: name)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: capability)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: True)  # as PyTorch answers on a T4
    return name


def test_a_cpu_trains_in_float32():
    rule = precision.arithmetic(torch.device("cpu"))
    assert (rule.kind, rule.name) == ("fp32", "float32")
    assert mlexp.describe_device(torch.device("cpu")).endswith("threads), float32")


def test_every_gpu_trains_in_float32_and_is_named_with_it(gpu):
    cuda = torch.device("cuda")
    assert precision.arithmetic(cuda) == precision.arithmetic(torch.device("cpu"))
    assert mlexp.describe_device(cuda) == f"{gpu}, float32"


def test_a_gpu_run_is_stored_as_the_same_kind_as_a_cpu_run(gpu, monkeypatch):
    """So a GPU build is judged against the CPU's seed runs by the drift rule."""
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: GPUS["H100"][1])
    on_gpu = provenance.machine(torch.device("cuda"))
    on_cpu = provenance.machine(torch.device("cpu"))
    assert on_gpu["kind"] == on_cpu["kind"] == "fp32"
    assert on_gpu["name"] == gpu and on_gpu["capability"] == "sm_90"


def test_tensorfloat32_is_off_inside_the_rule_and_restored_after():
    switches = precision._fp32_switches()
    assert len(switches) >= 2
    saved = [getattr(obj, name) for obj, name, _ in switches]
    loose = "tf32" if isinstance(switches[0][2], str) else True
    conv = switches[1][0]
    setattr(conv, switches[1][1], loose)  # what a reader's session may have set
    try:
        with precision.arithmetic(torch.device("cuda")).context():
            assert all(getattr(obj, name) == full for obj, name, full in switches)
        assert getattr(conv, switches[1][1]) == loose
    finally:
        for (obj, name, _), value in zip(switches, saved):
            setattr(obj, name, value)


def test_the_rule_leaves_the_cpu_numbers_exactly_as_they_were(corpus, monkeypatch):
    """Training under the rule and training with no context at all give the same bits."""
    tok, train_ids, val_ids = corpus

    def run():
        mlexp.manual_seed(0)
        model = TransformerLM(tok.vocab_size, dim=32, n_layers=1, n_heads=4)
        history = mlexp.train_lm(model, train_ids, val_ids, steps=6, block_size=16, eval_every=3,
                                 log=False, eval_batches=1)
        return history["train"] + history["val"], model.head.weight.detach().clone()

    losses, weights = run()
    plain = precision.Arithmetic(kind="fp32", name="float32")
    monkeypatch.setattr(precision.Arithmetic, "context", lambda self: contextlib.nullcontext())
    monkeypatch.setattr(mlexp.training.train, "arithmetic", lambda device: plain)
    plain_losses, plain_weights = run()
    assert losses == plain_losses
    assert torch.equal(weights, plain_weights)
