"""Chapter 7's connections and measurements, proven from outside.

The invariants the chapter checks in every seed are tested here on small models with random
weights (away from their initial values, so a swapped index or a wrong tensor shows): a highway
block whose transform gates are shut is the identity, and one whose gates are wide open is the
plain block; ReZero at initialization is the model without blocks and gives the blocks' weights
no gradient; the logit lens's last layer is the model's own loss; deleting a block of a residual
stack is giving it sub-layers that write nothing. The measurements are compared with the same
quantity computed by hand, and each check is shown failing once on a case where it must.
"""

import copy
import pickle
import subprocess
import sys

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import mlexp
from mlexp.position import PositionalLM, Sinusoidal
from mlexp.residual import (
    Highway,
    ReZero,
    block_input_grads,
    blocks_in_order,
    deletion_losses,
    hidden_states,
    lm_loss,
    logit_lens,
    loss_with_blocks,
    neighbour_cosines,
    random_deletion_losses,
    relative_updates,
    stream_rms,
    swap_losses,
    token_uniformity,
)
from mlexp.transformer import Block, Plain, Residual, TransformerLM, WriteNothing

VOCAB, DIM, HEADS, LAYERS = 65, 32, 4, 5

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def randomize(module, scale=0.2, skip=()):
    """Every parameter drawn afresh, except those whose name contains one of ``skip``."""
    torch.manual_seed(1)
    with torch.no_grad():
        for name, p in module.named_parameters():
            if not any(s in name for s in skip):
                p.copy_(torch.randn_like(p) * scale)
    return module


def model(layers=LAYERS, **kwargs):
    torch.manual_seed(0)
    return randomize(TransformerLM(VOCAB, dim=DIM, n_layers=layers, n_heads=HEADS, **kwargs))


def batch(b=3, t=12, seed=2):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(VOCAB, (b, t + 1), generator=g)
    return ids[:, :-1], ids[:, 1:]


def shut(highway, bias):
    """Gates that ignore the stream: T = sigmoid(bias) everywhere."""
    with torch.no_grad():
        highway.gate.weight.zero_()
        highway.gate.bias.fill_(bias)


# --- the connections -----------------------------------------------------------------------


def test_highway_computes_the_papers_formula():
    torch.manual_seed(3)
    hw = randomize(Highway(DIM))
    x, update = torch.randn(2, 5, DIM), torch.randn(2, 5, DIM)
    t = torch.sigmoid(x @ hw.gate.weight.T + hw.gate.bias)
    assert torch.allclose(hw(x, update), update * t + x * (1 - t), atol=1e-6)
    # The comparison can fail: the gates the other way round are caught.
    assert not torch.allclose(hw(x, update), update * (1 - t) + x * t, atol=1e-3)


def test_highway_gate_starts_biased_towards_carrying():
    hw = Highway(DIM)
    assert torch.equal(hw.gate.bias, torch.full((DIM,), -2.0))
    assert torch.equal(Highway(DIM, gate_bias=-1.0).gate.bias, torch.full((DIM,), -1.0))


def test_highway_block_with_shut_gates_is_the_identity():
    torch.manual_seed(0)
    block = randomize(Block(DIM, HEADS, connection=Highway))
    x = torch.randn(2, 9, DIM)
    shut(block.connect1, -1000.0)
    shut(block.connect2, -1000.0)
    assert torch.equal(block(x), x)
    # The comparison can fail: with the initial bias of -2 the block changes the stream.
    shut(block.connect1, -2.0)
    assert not torch.allclose(block(x), x, atol=1e-3)


def test_highway_block_with_open_gates_is_the_plain_block():
    torch.manual_seed(0)
    block = randomize(Block(DIM, HEADS, connection=Highway))
    plain = Block(DIM, HEADS, connection=Plain)
    plain.load_state_dict(block.state_dict(), strict=False)  # all but the gates
    shut(block.connect1, 1000.0)
    shut(block.connect2, 1000.0)
    x = torch.randn(2, 9, DIM)
    assert torch.equal(block(x), plain(x))
    residual = Block(DIM, HEADS, connection=Residual)
    residual.load_state_dict(plain.state_dict())
    assert not torch.allclose(block(x), residual(x), atol=1e-3)


def test_highway_adds_a_gate_matrix_and_bias_per_sub_layer():
    residual = mlexp.count_params(TransformerLM(VOCAB, dim=64, n_layers=16))
    highway = mlexp.count_params(TransformerLM(VOCAB, dim=64, n_layers=16, connection=Highway))
    assert residual == 794_816
    assert highway - residual == 16 * 2 * (64 * 64 + 64) == 133_120


def test_rezero_at_initialization_is_the_model_without_blocks():
    deep = model(norm=nn.Identity, connection=ReZero)
    with torch.no_grad():  # randomize() drew the alphas too; ReZero starts them at 0
        for block in deep.blocks:
            block.connect1.alpha.zero_()
            block.connect2.alpha.zero_()
    assert ReZero(DIM).alpha.item() == 0.0
    empty = TransformerLM(VOCAB, dim=DIM, n_layers=0, n_heads=HEADS)
    empty.load_state_dict({k: v for k, v in deep.state_dict().items() if "blocks" not in k})
    x, y = batch()
    assert torch.equal(deep(x)[0], empty(x)[0])
    # The comparison can fail: once one branch opens, the model is no longer the empty one.
    with torch.no_grad():
        deep.blocks[2].connect2.alpha.fill_(0.1)
    assert not torch.allclose(deep(x)[0], empty(x)[0], atol=1e-3)


def test_rezero_gives_no_gradient_to_the_blocks_at_step_0():
    torch.manual_seed(0)
    deep = TransformerLM(VOCAB, dim=DIM, n_layers=LAYERS, n_heads=HEADS, norm=nn.Identity,
                         connection=ReZero)
    x, y = batch()
    deep(x, y)[1].backward()
    for name, p in deep.blocks.named_parameters():
        if name.endswith("alpha"):
            assert p.grad.abs().item() > 0, name
        else:
            assert torch.count_nonzero(p.grad) == 0, name
    assert deep.embed.weight.grad.abs().sum() > 0
    # The check can fail: with alpha = 0.1 the block weights do get gradient.
    deep.zero_grad()
    with torch.no_grad():
        deep.blocks[0].connect1.alpha.fill_(0.1)
    deep(x, y)[1].backward()
    assert deep.blocks[0].attn.qkv.weight.grad.abs().sum() > 0


def test_connections_reject_a_sub_layer_that_changes_the_shape():
    x = torch.randn(2, 5, DIM)
    for connection in (Highway(DIM), ReZero(DIM)):
        with pytest.raises(ValueError, match="keeps the width"):
            connection(x, torch.randn(2, 5, 1))


def test_highway_of_another_width_says_to_build_it_with_the_models():
    with pytest.raises(ValueError, match="built for width 32 but the stream has width 64"):
        Highway(32)(torch.randn(2, 5, 64), torch.randn(2, 5, 64))
    with pytest.raises(ValueError, match="pass the model's width"):
        Highway(0)


def test_models_with_the_new_connections_pickle_for_side_by_side_training():
    x, _ = batch()
    for connection, norm in ((Highway, mlexp.transformer.RMSNorm), (ReZero, nn.Identity)):
        m = model(connection=connection, norm=norm)
        again = pickle.loads(pickle.dumps(m))
        assert torch.equal(m(x)[0], again(x)[0])


def test_the_chapter_imports_the_connections_lazily():
    code = ("import sys, mlexp; print('mlexp.residual' in sys.modules); "
            "mlexp.Highway; print('mlexp.residual' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "True"]
    assert mlexp.logit_lens is logit_lens and mlexp.ReZero is ReZero


# --- the stream and the logit lens ---------------------------------------------------------


def test_hidden_states_are_the_embeddings_then_each_blocks_output():
    m = model()
    x, _ = batch()
    states = hidden_states(m, x)
    assert states.shape == (LAYERS + 1, 3, 12, DIM)
    with torch.no_grad():
        h = m.embed(x)
        assert torch.equal(states[0], h)
        for i, block in enumerate(m.blocks):
            h = block(h)
            assert torch.equal(states[i + 1], h)


def test_last_layer_of_the_lens_is_the_models_loss():
    for kwargs in ({}, {"connection": Highway}, {"connection": Plain}):
        m = model(**kwargs)
        x, y = batch()
        lens = logit_lens(m, x, y)
        assert lens.shape == (LAYERS + 1,)
        _, loss = m(x, y)
        assert abs(lens[-1].item() - loss.item()) < 1e-6
        assert abs(lm_loss(m, x, y) - loss.item()) < 1e-6
        # The comparison can fail: the layer before the last reads differently.
        assert abs(lens[-2].item() - loss.item()) > 1e-3


def test_lens_layer_0_reads_the_embeddings_through_the_final_norm_and_head():
    m = model()
    x, y = batch()
    with torch.no_grad():
        expected = F.cross_entropy(m.head(m.norm(m.embed(x))).flatten(0, 1), y.flatten())
    assert abs(logit_lens(m, x, y)[0].item() - expected.item()) < 1e-6


def test_lens_reads_chapter_3s_positional_model_too():
    torch.manual_seed(0)
    m = randomize(PositionalLM(VOCAB, Sinusoidal(DIM), dim=DIM, n_layers=3, n_heads=HEADS))
    x, y = batch()
    lens = logit_lens(m, x, y)
    assert lens.shape == (4,)
    assert abs(lens[-1].item() - m(x, y)[1].item()) < 1e-6


def test_lens_on_a_model_without_blocks_says_to_add_blocks():
    x, y = batch()
    empty = TransformerLM(VOCAB, dim=DIM, n_layers=0, n_heads=HEADS)
    with pytest.raises(ValueError, match="n_layers of at least 1"):
        logit_lens(empty, x, y)
    with pytest.raises(ValueError, match="no `blocks`; pass a language model"):
        logit_lens(nn.Linear(3, 3), x, y)


def test_lens_rejects_tokens_of_the_wrong_shape():
    m = model()
    x, y = batch()
    with pytest.raises(ValueError, match=r"\(batch, time\)"):
        logit_lens(m, x[0], y[0])
    with pytest.raises(ValueError, match="next token of every position"):
        logit_lens(m, x, y[:, :-1])


# --- deleting and swapping blocks ----------------------------------------------------------


def write_nothing_at(m, i):
    silent = copy.deepcopy(m)
    silent.blocks[i].attn = WriteNothing()
    silent.blocks[i].ffn = WriteNothing()
    return silent


def test_a_deleted_block_equals_sub_layers_that_write_nothing():
    m = model()
    x, y = batch()
    deleted = deletion_losses(m, x, y)
    assert deleted.shape == (LAYERS,)
    for i in range(LAYERS):
        assert deleted[i].item() == lm_loss(write_nothing_at(m, i), x, y)
    # The comparison can fail: silencing another block gives another loss.
    assert abs(deleted[1].item() - lm_loss(write_nothing_at(m, 3), x, y)) > 1e-4
    # ...and without the shortcut, writing nothing is not deleting.
    plain = model(connection=Plain)
    assert abs(deletion_losses(plain, x, y)[1].item()
               - lm_loss(write_nothing_at(plain, 1), x, y)) > 1e-3


def test_blocks_in_order_runs_the_listed_blocks_and_puts_them_back():
    m = model()
    x, y = batch()
    before = lm_loss(m, x, y)
    original = list(m.blocks)
    reordered = copy.deepcopy(m)
    reordered.blocks = nn.ModuleList(reordered.blocks[i] for i in (2, 0, 4))
    assert loss_with_blocks(m, x, y, [2, 0, 4]) == lm_loss(reordered, x, y)
    with pytest.raises(RuntimeError):
        with blocks_in_order(m, [1, 3]):
            assert len(m.blocks) == 2
            raise RuntimeError("inside the with")
    assert list(m.blocks) == original and lm_loss(m, x, y) == before
    assert list(m.state_dict()) == list(model().state_dict())


def test_swaps_exchange_neighbouring_blocks():
    m = model()
    x, y = batch()
    swapped = swap_losses(m, x, y)
    assert swapped.shape == (LAYERS - 1,)
    for i in range(LAYERS - 1):
        by_hand = copy.deepcopy(m)
        by_hand.blocks[i], by_hand.blocks[i + 1] = by_hand.blocks[i + 1], by_hand.blocks[i]
        assert swapped[i].item() == lm_loss(by_hand, x, y)
    assert (swapped - lm_loss(m, x, y)).abs().min() > 1e-5


def test_random_deletions_draw_k_distinct_blocks():
    m = model()
    x, y = batch()
    g = torch.Generator().manual_seed(0)
    one = random_deletion_losses(m, x, y, k=1, trials=12, generator=g)
    assert one.shape == (12,)
    singles = set(deletion_losses(m, x, y).tolist())
    assert set(one.tolist()) <= singles and len(set(one.tolist())) > 1
    # all of them: the model without blocks, whatever the draw
    every = random_deletion_losses(m, x, y, k=LAYERS, trials=2, generator=g)
    empty = TransformerLM(VOCAB, dim=DIM, n_layers=0, n_heads=HEADS)
    empty.load_state_dict({k: v for k, v in m.state_dict().items() if "blocks" not in k})
    assert torch.allclose(every, torch.full((2,), lm_loss(empty, x, y), dtype=torch.float64))


@pytest.mark.parametrize("order", [[0, LAYERS], [-1], [1.0]])
def test_a_block_index_out_of_range_says_which_are_valid(order):
    m = model()
    x, y = batch()
    with pytest.raises(ValueError, match="from 0 to 4|as ints"):
        loss_with_blocks(m, x, y, order)
    assert len(m.blocks) == LAYERS


def test_bad_counts_of_blocks_to_delete_or_swap_say_what_to_pass():
    m = model()
    x, y = batch()
    for k in (0, LAYERS + 1):
        with pytest.raises(ValueError, match=f"from 1 to {LAYERS}"):
            random_deletion_losses(m, x, y, k=k, trials=1)
    with pytest.raises(ValueError, match="at least 1"):
        random_deletion_losses(m, x, y, k=1, trials=0)
    with pytest.raises(ValueError, match="n_layers of at least 2"):
        swap_losses(model(layers=1), x, y)


# --- the stream's geometry and the gradient at initialization ------------------------------


def test_geometry_on_a_stream_built_by_hand():
    torch.manual_seed(0)
    h0 = torch.randn(2, 6, DIM)
    states = torch.stack([h0, 2 * h0, 2 * h0 + 1e-3 * torch.randn(2, 6, DIM)])
    assert torch.allclose(stream_rms(states), states.pow(2).mean((1, 2, 3)).sqrt())
    assert torch.allclose(stream_rms(states)[1], 2 * stream_rms(states)[0])
    rel = relative_updates(states)
    assert rel.shape == (2,) and abs(rel[0].item() - 1.0) < 1e-5 and rel[1] < 1e-3
    cos = neighbour_cosines(states)
    assert torch.allclose(cos, torch.ones(2), atol=1e-5)
    assert neighbour_cosines(torch.stack([h0, -h0]))[0].item() == pytest.approx(-1, abs=1e-6)


def test_token_uniformity_is_0_when_positions_agree_and_1_when_they_cancel():
    torch.manual_seed(0)
    same = torch.randn(1, 2, 1, DIM).expand(1, 2, 7, DIM)
    mixed = torch.randn(1, 2, 7, DIM)
    mixed = mixed - mixed.mean(dim=2, keepdim=True)
    u = token_uniformity(torch.cat([same, mixed]))
    assert u.shape == (2,)
    assert u[0].item() < 1e-6 and abs(u[1].item() - 1) < 1e-6
    # by hand, for one sequence
    h = torch.randn(1, 1, 7, DIM) + 3
    by_hand = (h[0, 0] - h[0, 0].mean(0)).norm() / h[0, 0].norm()
    assert abs(token_uniformity(torch.cat([h, h]))[0].item() - by_hand.item()) < 1e-6


def test_geometry_asks_for_what_hidden_states_returns():
    with pytest.raises(ValueError, match=r"hidden_states\(model, idx\)"):
        stream_rms(torch.randn(6, DIM))
    with pytest.raises(ValueError, match="at least one block"):
        token_uniformity(torch.randn(1, 2, 6, DIM))


def test_block_input_grads_match_autograd_by_hand_and_leave_grads_alone():
    m = model()
    x, y = batch()
    grads = block_input_grads(m, x, y)
    assert grads.shape == (LAYERS,)
    assert all(p.grad is None for p in m.parameters())
    inputs = []
    h = m.embed(x)
    for block in m.blocks:
        h.retain_grad()
        inputs.append(h)
        h = block(h)
    F.cross_entropy(m.head(m.norm(h)).flatten(0, 1), y.flatten()).backward()
    by_hand = torch.stack([t.grad.norm() for t in inputs])
    assert torch.allclose(grads, by_hand, rtol=1e-5)
    assert not torch.allclose(grads, by_hand.flip(0), rtol=1e-2)


def test_rezero_at_initialization_passes_the_gradient_unchanged():
    torch.manual_seed(0)
    deep = TransformerLM(VOCAB, dim=DIM, n_layers=8, n_heads=HEADS, norm=nn.Identity,
                         connection=ReZero)
    grads = block_input_grads(deep, *batch())
    assert torch.equal(grads, grads[:1].expand(8))
    plain = TransformerLM(VOCAB, dim=DIM, n_layers=8, n_heads=HEADS, connection=Plain)
    grads = block_input_grads(plain, *batch())
    assert not torch.allclose(grads, grads[:1].expand(8), rtol=1e-2)


def test_measurements_do_not_depend_on_how_the_windows_are_chunked():
    m = model()
    x, y = batch(b=5)
    whole = hidden_states(m, x, batch_size=64)
    assert torch.allclose(hidden_states(m, x, batch_size=2), whole, atol=1e-6)
    assert torch.allclose(logit_lens(m, x, y, batch_size=2), logit_lens(m, x, y), atol=1e-6)
    assert abs(lm_loss(m, x, y, batch_size=3) - m(x, y)[1].item()) < 1e-6
    assert torch.allclose(deletion_losses(m, x, y, batch_size=2), deletion_losses(m, x, y), atol=1e-6)
    with pytest.raises(ValueError, match="batch_size=0 must be at least 1"):
        lm_loss(m, x, y, batch_size=0)
