"""Chapter 4's measurements: each reads what it says it reads."""

import math

import pytest
import torch
import torch.nn as nn

from mlexp.attention import (
    GroupedQueryAttention,
    RecurrentLM,
    attention_lm,
    attention_maps,
    generation_speed,
    head_statistics,
    repeated_text_loss,
    training_tokens_per_second,
)
from mlexp.attention_cost import cost_table
from mlexp.training.evaluate import loss_by_position


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def small_lm():
    torch.manual_seed(0)
    return attention_lm(
        11, lambda d: GroupedQueryAttention(d, 4, 2), dim=32, n_layers=2
    )


def test_loss_by_position_averages_to_the_loss_on_every_window():
    ids = torch.randint(11, (8 * 16 + 1,), generator=torch.Generator().manual_seed(1))
    for model in (small_lm(), RecurrentLM(11, dim=16)):
        curve = loss_by_position(model, ids, 16)
        x, y = ids[:-1].view(8, 16), ids[1:].view(8, 16)
        with torch.no_grad():
            _, loss = model(x, y)
        assert curve.shape == (16,)
        assert curve.mean().item() == pytest.approx(loss.item(), abs=1e-5)


def test_head_statistics_of_a_previous_token_head():
    T = 20
    weights = torch.zeros(1, 1, 1, T, T)
    weights[..., 0, 0] = 1
    for t in range(1, T):
        weights[..., t, t - 1] = 1  # every query looks one back
    stats = head_statistics(weights, first_query=4)
    assert stats["previous"].item() == pytest.approx(1)
    assert stats["last_8"].item() == pytest.approx(1)
    assert stats["mean_distance"].item() == pytest.approx(1)


def test_attention_maps_are_causal_distributions():
    model = small_lm().eval()
    maps = attention_maps(model, torch.randint(11, (2, 9)))
    assert maps.shape == (2, 2, 4, 9, 9)
    assert torch.allclose(maps.sum(-1), torch.ones(2, 2, 4, 9))
    assert maps.triu(1).abs().max() == 0


def test_generation_is_the_same_with_and_without_the_cache():
    speed = generation_speed(small_lm().eval(), torch.randint(11, (1, 5)), 20, repeats=1)
    assert speed["identical"] == 1.0 and speed["cached"] > 0 and speed["uncached"] > 0


def test_training_speed_leaves_the_model_untouched():
    model = small_lm()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    ids = torch.randint(11, (500,))
    assert training_tokens_per_second(model, ids, 16, batch_size=4, steps=2) > 0
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())


def test_repeat_test_draws_only_from_its_alphabet_and_scores_both_copies():
    """A model that puts all its probability on the alphabet's two letters scores log 2 on
    each copy; with one letter, nothing is left to guess."""

    class Uniform(nn.Module):
        def __init__(self, allowed):
            super().__init__()
            self.logits = nn.Parameter(torch.full((11,), -1e9).index_fill(0, allowed, 0.0))

        def forward(self, idx):
            return self.logits.expand(*idx.shape, 11), None

    two = torch.tensor([3, 7])
    first, second = repeated_text_loss(Uniform(two), two, length=8, n=4)
    assert first == pytest.approx(math.log(2)) and second == pytest.approx(math.log(2))
    first, _ = repeated_text_loss(Uniform(two[:1]), two[:1], length=8, n=4)
    assert first == pytest.approx(0.0, abs=1e-6)


def test_cost_table_memory_law_and_agreement():
    rows = cost_table([64, 128], generator=torch.Generator().manual_seed(0))
    for row in rows:
        assert row["same"]
        assert row["naive_largest"] == row["law"] == 4 * 4 * row["T"] ** 2
        assert row["sdpa_peak"] < row["naive_peak"]


def test_forced_flash_kernel_raises_rather_than_falling_back_for_unequal_head_widths():
    """The page says forcing the flash kernel makes an unsupported call fail instead of quietly
    using another kernel, and that on a CPU MLA's explicit form (queries and keys 48 wide,
    values 32) is such a call; the cost table's timings rest on the first."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    q, k = torch.randn(1, 4, 16, 48), torch.randn(1, 4, 16, 48)
    v = torch.randn(1, 4, 16, 32)
    with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
        torch.nn.functional.scaled_dot_product_attention(q, k, k.clone(), is_causal=True)
        with pytest.raises(RuntimeError), pytest.warns(UserWarning, match="same last dimension"):
            torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
