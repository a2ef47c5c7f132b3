"""Chapter 11's initializations and measurements at step 0, against PyTorch's
own initializers and nanoGPT's rule."""

import math

import pytest
import torch
import torch.nn as nn

from mlexp.initialization import (
    FanIn,
    Normal,
    Orthogonal,
    ScaledProjections,
    first_look,
    plain_stack,
    signal,
    tie_readout,
)
from mlexp.transformer import TransformerLM

VOCAB = 65


@pytest.mark.parametrize("gain", [1.0, math.sqrt(2)])
def test_fan_in_draws_what_pytorchs_kaiming_normal_draws(gain):
    layer = nn.Linear(512, 384)
    FanIn(gain)(nn.Sequential(layer))
    reference = torch.empty(384, 512)
    nonlinearity = "relu" if gain > 1 else "linear"
    nn.init.kaiming_normal_(reference, mode="fan_in", nonlinearity=nonlinearity)
    assert layer.weight.std().item() == pytest.approx(reference.std().item(), rel=0.02)
    assert layer.weight.mean().abs() < 0.01 * reference.std()
    assert torch.equal(layer.bias, torch.zeros(384))


def test_orthogonal_square_matrices_keep_every_length():
    stack = plain_stack(3, 64)
    Orthogonal(gain=1.0)(stack)
    for layer in stack:
        torch.testing.assert_close(layer.weight @ layer.weight.T, torch.eye(64), atol=1e-5, rtol=0)
    x = torch.randn(10, 64)
    with torch.no_grad():
        torch.testing.assert_close(stack(x).norm(dim=1), x.norm(dim=1), rtol=1e-5, atol=0)


def test_scaled_projections_follow_nanogpts_rule():
    """nanoGPT: every weight N(0, 0.02), each c_proj 0.02 / sqrt(2 * n_layer)."""
    layers = 6
    model = TransformerLM(VOCAB, dim=128, n_layers=layers)
    ScaledProjections(0.02)(model)
    writes = 0.02 / math.sqrt(2 * layers)
    for name, p in model.named_parameters():
        if p.dim() < 2:
            continue
        expected = writes if name.endswith((".attn.out.weight", ".ffn.down.weight")) else 0.02
        assert p.std().item() == pytest.approx(expected, rel=0.05), name


def test_the_same_seed_draws_the_same_start_and_another_seed_does_not():
    a, b, c = (TransformerLM(VOCAB, n_layers=2) for _ in range(3))
    Normal(0.02, seed=0)(a)
    Normal(0.02, seed=0)(b)
    Normal(0.02, seed=1)(c)
    assert torch.equal(a.embed.weight, b.embed.weight)
    assert not torch.equal(a.embed.weight, c.embed.weight)


def test_a_tied_readout_is_the_embedding_matrix():
    model = tie_readout(TransformerLM(VOCAB, n_layers=1))
    assert model.head.weight is model.embed.weight
    assert len(list(model.parameters())) == len({id(p) for p in model.parameters()})


@pytest.mark.parametrize("bad", [0.0, -1.0])
def test_a_gain_that_is_not_positive_is_refused(bad):
    for init in (FanIn, Orthogonal):
        with pytest.raises(ValueError, match="positive gain"):
            init(bad)


def test_signal_measures_each_layer_and_the_gradient_reaching_it():
    stack = plain_stack(4, 32)
    Orthogonal(1.0)(stack)
    x = torch.randn(100, 32)
    r = signal(stack, "linear", x)
    rms = x.pow(2).mean().sqrt().item()
    assert r["activations"] == pytest.approx([rms] * 4, rel=1e-5)
    # orthogonal layers pass the gradient back unchanged in size too
    assert r["gradients"] == pytest.approx([r["gradients"][-1]] * 4, rel=1e-5)
    # ReLU at PyTorch's default: a third of the variance, half of it zeroed
    bare = plain_stack(30, 256)
    for layer in bare:
        nn.init.zeros_(layer.bias)
    a = signal(bare, "ReLU", torch.randn(512, 256))["activations"]
    assert math.log(a[-1] / a[9]) / 20 == pytest.approx(math.log(1 / math.sqrt(6)), abs=0.02)


def test_first_look_reports_the_models_own_loss_and_logits():
    torch.manual_seed(0)
    model = TransformerLM(VOCAB, n_layers=3)
    x, y = torch.randint(VOCAB, (4, 16)), torch.randint(VOCAB, (4, 16))
    f = first_look(model, x, y)
    with torch.no_grad():
        logits, loss = model(x, y)
    assert f["loss"] == pytest.approx(loss.item())
    assert f["logit_std"] == pytest.approx(logits.std().item())
    assert len(f["stream"]) == len(f["attention"]) == len(f["ffn"]) == 3
    assert not any(m._forward_hooks for m in model.modules())
