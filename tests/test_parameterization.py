"""μP and the standard parameterization (Chapter 11), checked against
microsoft/mup, the reference implementation of Tensor Programs V.

mup is installed in the test environment only (``requirements-test.txt``,
without its dependencies: PyPI's package asks for torchvision, pandas and
seaborn, which its optimizer and readout do not use and the book does not
need).
"""

import math

import mup
import pytest
import torch
import torch.nn.functional as F

import mlexp
from mlexp.parameterization import (
    SP,
    Clipped,
    Coordinates,
    MuAdamW,
    MuP,
    Readout,
    ScaledAttention,
    parabola_minimum,
)
from mlexp.schedules import Constant, WarmupCosine
from mlexp.transformer import TransformerLM

VOCAB, KW = 65, dict(n_layers=2, n_heads=4)


def tokens(n=2, t=16, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(VOCAB, (n, t), generator=g)


def built(p, width, seed=0):
    torch.manual_seed(seed)
    return p.build(VOCAB, width, **KW)


def test_mup_at_its_base_width_is_the_standard_model_bit_for_bit():
    sp, mu = built(SP(), 128), built(MuP(128), 128)
    x = tokens()
    assert torch.equal(sp(x)[0], mu(x)[0])
    ids = torch.randint(VOCAB, (4000,), generator=torch.Generator())
    runs = [
        mlexp.train_lm(
            m, ids[:3000], ids[3000:], steps=6, block_size=16,
            batch_size=4, eval_batches=1, log=False,
            optimizer=p.optimizer(1e-2),
        )
        for m, p in ((sp, SP()), (mu, MuP(128)))
    ]  # fmt: skip
    assert runs[0]["batch_loss"] == runs[1]["batch_loss"]
    assert runs[0]["val"] == runs[1]["val"]


def reference(width, base_width=128, seed=0, lr=1e-2, wd=0.1):
    """The same model through mup: PyTorch's initialization, mup's
    MuReadout for the head, base shapes from the models at the base width
    and twice it, and mup's MuAdamW over Part I's two groups."""

    def with_readout(w):
        model = TransformerLM(VOCAB, dim=w, **KW)
        head = mup.MuReadout(w, VOCAB, bias=False)
        head.weight = model.head.weight
        model.head = head
        return model

    torch.manual_seed(seed)
    model = with_readout(width)
    base, delta = with_readout(base_width), with_readout(2 * base_width)
    mup.set_base_shapes(model, base, delta=delta)
    params = list(model.parameters())
    groups = [
        {"params": [p for p in params if p.dim() >= 2], "weight_decay": wd},
        {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0},
    ]
    opt = mup.MuAdamW(groups, lr=lr, betas=(0.9, 0.99))
    return model, opt


def settings(model, opt):
    """Each parameter's name -> (rate, weight decay) in ``opt``."""
    where = {
        id(p): (g["lr"], g["weight_decay"])
        for g in opt.param_groups
        for p in g["params"]
    }
    return {n: where[id(p)] for n, p in model.named_parameters()}


@pytest.mark.parametrize("width", [32, 64, 256, 512])
def test_mup_matches_microsofts_mup(width):
    ours = built(MuP(128), width)
    theirs, their_opt = reference(width)
    # initial weights: mup rescales the readout by sqrt(width multiple)
    for (n, a), (_, b) in zip(
        ours.named_parameters(), theirs.named_parameters()
    ):
        assert torch.equal(a, b), n
    # each layer's rate and weight decay
    our_opt = MuP(128).optimizer(1e-2)(ours)
    assert settings(ours, our_opt) == settings(theirs, their_opt)
    # the readout's multiplier
    x = torch.randn(3, width)
    assert torch.equal(ours.head(x), theirs.head(x))


def test_each_layers_rate_is_the_schedule_times_its_own_multiple():
    model = built(MuP(128), 64)
    ids = torch.randint(VOCAB, (4000,), generator=torch.Generator())
    h = mlexp.train_lm(
        model, ids[:3000], ids[3000:], steps=5, block_size=16,
        batch_size=4, eval_batches=1, log=False, warmup=2,
        optimizer=MuP(128).optimizer(1e-2),
    )  # fmt: skip
    # fan-in 64 against 128 at the base; the down projection's 170 against
    # 341; the embedding, readout and norm gains keep the base rate
    bases = [1e-2 / (64 / 128), 1e-2 / (170 / 341), 1e-2, 1e-2]
    schedule = WarmupCosine(2)
    for step, rates in enumerate(h["lr"]):
        assert rates == [schedule(step, 5, b) for b in bases]


def test_mup_attention_scales_scores_by_sqrt_base_head_over_head():
    model = built(MuP(128), 256)  # head width 64, base head width 32
    attn = model.blocks[0].attn
    assert isinstance(attn, ScaledAttention)
    x = torch.randn(2, 10, 256)
    B, T, C = x.shape
    q, k, v = attn.qkv(x).split(C, dim=-1)
    q, k, v = (t.view(B, T, 4, 64).transpose(1, 2) for t in (q, k, v))
    q, k = mlexp.transformer.apply_rope(q), mlexp.transformer.apply_rope(k)
    scores = q @ k.transpose(-2, -1) * math.sqrt(32) / 64
    mask = torch.ones(T, T, dtype=torch.bool).tril()
    weights = scores.masked_fill(~mask, -math.inf).softmax(-1)
    y = (weights @ v).transpose(1, 2).reshape(B, T, C)
    torch.testing.assert_close(attn(x), attn.out(y))


def test_the_readout_divides_its_input_by_the_width_multiple():
    head = torch.nn.Linear(8, 5, bias=False)
    readout = Readout(head, 4.0)
    x = torch.randn(3, 8)
    torch.testing.assert_close(readout(x), F.linear(x, head.weight) / 4)
    assert readout.weight is head.weight


@pytest.mark.parametrize(
    "base_width, width, words",
    [(130, 64, "base_width=130"), (128, 2, "width=2"), (128, 66, "width=66")],
)
def test_widths_that_do_not_split_into_heads_are_refused(
    base_width, width, words
):
    with pytest.raises(ValueError, match=words):
        MuP(base_width).build(VOCAB, width, **KW)


def test_mup_optimizer_refuses_a_model_mup_did_not_build():
    with pytest.raises(ValueError, match="MuP"):
        MuAdamW(1e-2)(built(SP(), 64))


def test_parameterizations_pickle_and_their_models_train_side_by_side():
    import pickle

    for p in (SP(), MuP(64)):
        again = pickle.loads(pickle.dumps(p))
        model = pickle.loads(pickle.dumps(built(again, 32)))
        assert model(tokens())[0].shape == (2, 16, VOCAB)


def test_coordinates_records_every_layer_at_the_steps_asked_then_unhooks():
    model = built(MuP(128), 64)
    ids = torch.randint(VOCAB, (4000,), generator=torch.Generator())
    h = mlexp.train_lm(
        model, ids[:3000], ids[3000:], steps=4, block_size=16,
        batch_size=4, eval_batches=1, log=False, schedule=Constant(0),
        measure=Coordinates(steps=[0, 2]),
    )  # fmt: skip
    assert [m["step"] for m in h["measures"]] == [0, 2]
    keys = set(h["measures"][0]) - {"step"}
    assert keys == {
        "embedding", "attention 0", "feed-forward 0", "attention 1",
        "feed-forward 1", "stream", "logits",
    }  # fmt: skip
    assert not any(m._forward_hooks for m in model.modules())
    with torch.no_grad():
        emb = model.embed(ids[:16].view(1, 16)).abs().mean().item()
    assert h["measures"][0]["embedding"] > 0 and emb > 0


def test_parabola_minimum_finds_the_vertex_between_grid_points():
    rates = [1e-3 * 2**i for i in range(6)]
    best = 5.5e-3
    losses = [2 + 0.3 * (math.log(r) - math.log(best)) ** 2 for r in rates]
    assert parabola_minimum(rates, losses) == pytest.approx(best, rel=1e-9)
    with pytest.raises(ValueError, match="grid's end"):
        parabola_minimum(rates, sorted(losses))


@pytest.mark.parametrize("clip, expected", [(1e-4, 1.0), (1e4, 0.0)])
def test_clipped_says_whether_clipping_shortened_the_gradient(clip, expected):
    model = built(SP(), 32)
    ids = torch.randint(VOCAB, (4000,), generator=torch.Generator())
    h = mlexp.train_lm(
        model, ids[:3000], ids[3000:], steps=3, block_size=16,
        batch_size=4, eval_batches=1, log=False, clip=clip,
        measure=Clipped(clip),
    )  # fmt: skip
    assert [m["clipped"] for m in h["measures"]] == [expected] * 3
