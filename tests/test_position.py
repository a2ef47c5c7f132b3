"""Chapter 3's position schemes: what each one promises a reader."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from mlexp.position import (
    ALiBi,
    LearnedPosition,
    NoPosition,
    PositionalAttention,
    PositionalLM,
    RoPE,
    Sinusoidal,
    ntk_base,
)
from mlexp.training.evaluate import loss_by_position
from mlexp.transformer import TransformerLM, apply_rope

VOCAB, DIM, HEADS, T = 65, 32, 4, 16
HEAD_DIM = DIM // HEADS


def schemes():
    return {
        "none": NoPosition(),
        "sinusoidal": Sinusoidal(DIM),
        "learned": LearnedPosition(T, DIM),
        "RoPE": RoPE(HEAD_DIM),
        "ALiBi": ALiBi(HEADS),
    }


def build(scheme, seed=0):
    torch.manual_seed(seed)
    return PositionalLM(VOCAB, scheme, dim=DIM, n_layers=2, n_heads=HEADS)


@pytest.fixture
def tokens():
    return torch.randint(
        VOCAB, (2, T), generator=torch.Generator().manual_seed(1)
    )


@pytest.mark.parametrize("name", list(schemes()))
def test_logits_have_one_row_per_token(name, tokens):
    logits, loss = build(schemes()[name])(tokens, tokens)
    assert logits.shape == (2, T, VOCAB)
    assert loss.ndim == 0 and torch.isfinite(loss)


@pytest.mark.parametrize("name", list(schemes()))
def test_no_token_sees_the_future(name, tokens):
    model = build(schemes()[name])
    with torch.no_grad():
        before, _ = model(tokens)
        changed = tokens.clone()
        changed[:, 10:] = (changed[:, 10:] + 1) % VOCAB
        after, _ = model(changed)
    torch.testing.assert_close(before[:, :10], after[:, :10])
    assert not torch.allclose(before[:, 10:], after[:, 10:])


def test_the_models_share_every_weight_but_the_position_table():
    models = {name: build(s) for name, s in schemes().items()}
    reference = dict(models["none"].named_parameters())
    for name, model in models.items():
        for key, value in model.named_parameters():
            if "position" in key.split("."):
                assert name == "learned"
                assert 0.8 < value.std() < 1.2  # as random as the tokens
                continue
            torch.testing.assert_close(value, reference[key], msg=key)


def test_default_rope_is_chapter_1s(tokens):
    """With RoPE passed in, the model computes exactly Chapter 1's model."""
    torch.manual_seed(0)
    chapter1 = TransformerLM(VOCAB, dim=DIM, n_layers=2, n_heads=HEADS)
    ours = build(RoPE(HEAD_DIM))
    ours.load_state_dict(chapter1.state_dict())
    with torch.no_grad():
        torch.testing.assert_close(ours(tokens)[0], chapter1(tokens)[0])
    x = torch.randn(2, HEADS, T, HEAD_DIM)
    torch.testing.assert_close(
        RoPE(HEAD_DIM).rotate(x, torch.arange(T)), apply_rope(x)
    )


def test_no_position_is_chapter_1s_model_without_rope(tokens):
    torch.manual_seed(0)
    chapter1 = TransformerLM(
        VOCAB, dim=DIM, n_layers=2, n_heads=HEADS, rope=False
    )
    ours = build(NoPosition())
    ours.load_state_dict(chapter1.state_dict())
    with torch.no_grad():
        torch.testing.assert_close(ours(tokens)[0], chapter1(tokens)[0])


@pytest.mark.parametrize(
    "name, relative",
    [
        ("none", True),
        ("RoPE", True),
        ("ALiBi", True),
        ("sinusoidal", False),
        ("learned", False),
    ],
)
def test_only_relative_schemes_ignore_a_shift(name, relative):
    model = build(schemes()[name]).double()
    idx = torch.randint(VOCAB, (1, 8))
    with torch.no_grad():
        here, _ = model(idx, positions=torch.arange(8))
        shifted, _ = model(idx, positions=torch.arange(8) + 5)
    gap = (here - shifted).abs().max().item()
    assert (gap < 1e-10) if relative else (gap > 1e-3)


def test_rope_dot_products_depend_on_distance_only():
    rope = RoPE(HEAD_DIM)
    q, k = torch.randn(HEAD_DIM).double(), torch.randn(HEAD_DIM).double()
    positions = torch.tensor([3, 5, 40, 42, 1000, 1002])
    rq = rope.rotate(q.expand(1, 1, 6, -1), positions)[0, 0]
    rk = rope.rotate(k.expand(1, 1, 6, -1), positions)[0, 0]
    dots = [rq[i + 1] @ rk[i] for i in (0, 2, 4)]
    torch.testing.assert_close(dots[0], dots[1])
    torch.testing.assert_close(dots[0], dots[2])
    assert not torch.isclose(rq[0] @ rk[0], dots[0])


def test_learned_table_refuses_positions_it_has_no_row_for(tokens):
    model = build(LearnedPosition(T, DIM))
    longer = torch.randint(VOCAB, (1, T + 1))
    with pytest.raises(ValueError) as error:
        model(longer)
    message = str(error.value)
    assert f"rows for 0 to {T - 1}" in message
    assert "clamp" in message and f"at most {T} tokens" in message
    clamped = torch.arange(T + 1).clamp(max=T - 1)
    assert model(longer, positions=clamped)[0].shape == (1, T + 1, VOCAB)


def test_sinusoids_follow_vaswani_et_al():
    table = Sinusoidal(DIM).table(torch.arange(50))
    pos, i = 37, 5
    angle = pos / 10000 ** (2 * i / DIM)
    assert table[pos, 2 * i].item() == pytest.approx(math.sin(angle))
    assert table[pos, 2 * i + 1].item() == pytest.approx(math.cos(angle))


def test_interpolation_divides_positions():
    x = torch.randn(1, 1, 10, HEAD_DIM).double()
    positions = torch.arange(10) * 4
    torch.testing.assert_close(
        RoPE(HEAD_DIM, interpolate=4).rotate(x, positions),
        RoPE(HEAD_DIM).rotate(x, positions.double() / 4),
    )


def test_ntk_scaling_slows_the_slowest_pair_by_the_scale():
    plain, ntk = RoPE(HEAD_DIM), RoPE(HEAD_DIM, ntk_scale=4)
    assert ntk.base == pytest.approx(ntk_base(10000, 4, HEAD_DIM))
    assert ntk.base == pytest.approx(
        10000 * 4 ** (HEAD_DIM / (HEAD_DIM - 2))
    )
    # the fastest pair is untouched, the slowest turns 4 times slower
    assert ntk.frequencies()[0] == plain.frequencies()[0] == 1
    assert ntk.frequencies()[-1] == pytest.approx(
        plain.frequencies()[-1] / 4
    )


def test_stretching_must_stretch():
    with pytest.raises(ValueError, match="at least 1"):
        RoPE(HEAD_DIM, interpolate=0.5)
    with pytest.raises(ValueError, match="must be even"):
        RoPE(7)
    with pytest.raises(ValueError, match="must be even"):
        Sinusoidal(7)


def test_alibi_slopes_follow_the_papers_rule_for_any_head_count():
    """Powers of two: geometric from 2^(-8/n). Others: the closest power of two below, then every
    other slope of the next power of two (the rule of the paper's code)."""
    assert ALiBi(4).slopes.tolist() == [1 / 4, 1 / 16, 1 / 64, 1 / 256]
    assert ALiBi(8).slopes.tolist() == [2.0**-k for k in range(1, 9)]
    assert ALiBi(6).slopes.tolist() == [2.0**-k for k in (2, 4, 6, 8, 1, 3)]
    twelve = ALiBi(12).slopes.tolist()
    assert twelve[:8] == [2.0**-k for k in range(1, 9)]
    assert twelve[8:] == pytest.approx([2.0 ** -(k / 2) for k in (1, 3, 5, 7)], rel=1e-6)


def test_alibi_without_heads_says_what_to_do():
    with pytest.raises(ValueError, match="at least one head"):
        ALiBi(0)


def test_alibi_attention_subtracts_slope_times_distance():
    torch.manual_seed(0)
    attn = PositionalAttention(DIM, HEADS, ALiBi(HEADS)).double()
    x = torch.randn(1, 6, DIM).double()
    q, k, v = attn.qkv(x).split(DIM, dim=-1)
    q, k, v = (
        t.view(1, 6, HEADS, HEAD_DIM).transpose(1, 2) for t in (q, k, v)
    )
    i = torch.arange(6)
    distance = (i[:, None] - i[None, :]).double()
    scores = q @ k.transpose(-2, -1) / math.sqrt(HEAD_DIM)
    scores = (
        scores - attn.position.slopes.double()[:, None, None] * distance
    )
    scores = scores.masked_fill(distance < 0, float("-inf"))
    expected = attn.out(
        (F.softmax(scores, -1) @ v).transpose(1, 2).reshape(1, 6, DIM)
    )
    torch.testing.assert_close(attn(x, i), expected)


def test_with_position_swaps_the_scheme_of_a_copy(tokens):
    model = build(RoPE(HEAD_DIM))
    stretched = model.with_position(RoPE(HEAD_DIM, interpolate=4))
    assert model.position.interpolate == 1
    assert all(
        b.attn.position is stretched.position for b in stretched.blocks
    )
    torch.testing.assert_close(stretched.embed.weight, model.embed.weight)
    with torch.no_grad():
        assert not torch.allclose(model(tokens)[0], stretched(tokens)[0])


def test_hidden_states_are_the_residual_stream(tokens):
    model = build(NoPosition())
    states = model.hidden_states(tokens)
    assert len(states) == 3 and states[0].shape == (2, T, DIM)
    logits = model.head(model.norm(states[-1]))
    torch.testing.assert_close(logits, model(tokens)[0])


def test_positions_need_one_per_token(tokens):
    with pytest.raises(ValueError, match=r"shape \(16,\)"):
        build(RoPE(HEAD_DIM))(tokens, positions=torch.arange(T + 1))


def test_loss_by_position_averages_every_window():
    model = build(RoPE(HEAD_DIM))
    ids = torch.randint(
        VOCAB, (3 * T + 5,), generator=torch.Generator().manual_seed(2)
    )
    curve = loss_by_position(model, ids, T, batch_size=2)
    assert curve.shape == (T,)
    # the same number, computed window by window
    with torch.no_grad():
        windows = [
            F.cross_entropy(
                model(ids[i * T : (i + 1) * T][None])[0][0],
                ids[i * T + 1 : (i + 1) * T + 1],
                reduction="none",
            )
            for i in range(3)
        ]
    torch.testing.assert_close(curve, torch.stack(windows).mean(0).double())
    with pytest.raises(ValueError, match="no window"):
        loss_by_position(model, ids[:T], T)
