"""Chapter 6's norms, placements and measurements, proven from outside where a reference exists.

Our LayerNorm and RMSNorm are checked against PyTorch's ``nn.LayerNorm`` and ``nn.RMSNorm``, the
BatchNorm over tokens against ``nn.BatchNorm1d`` on the (batch, channels, length) layout, DyT
against its formula; each placement against its formula on a case small enough to work by hand;
the leak across positions against the property a causal model needs (exactly zero) and the one
BatchNorm breaks; the outcome of a run on made-up histories.
"""

import math
import pickle

import pytest
import torch
import torch.nn as nn

import mlexp
from mlexp.normalization import (
    OUTCOMES,
    PLACEMENTS,
    DyT,
    LayerNorm,
    OutputNorm,
    PostNorm,
    PreNorm,
    RMSNorm,
    TokenBatchNorm,
    block_kwargs,
    classify_run,
    ffn_grad_norms,
    norm_times,
    position_leak,
    time_in_turns,
    times_in_turns,
    unigram_loss,
    xavier_init,
)
from mlexp.transformer import Residual, TransformerLM

DIM = 16

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def randomize(module, scale=0.5):
    """Gains and biases away from 1 and 0, so a dropped or swapped one shows."""
    torch.manual_seed(1)
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(1.0 + torch.randn_like(p) * scale)
    return module


def tokens(*shape, seed=2):
    torch.manual_seed(seed)
    return 3.0 * torch.randn(*shape, DIM, dtype=torch.float64) + 1.0


# --- the formulas -------------------------------------------------------------------------


def test_rmsnorm_of_a_centred_vector_is_layernorm_without_bias():
    x = tokens(3, 7)
    centred = x - x.mean(dim=-1, keepdim=True)
    rms = randomize(RMSNorm(DIM, eps=1e-5).double())
    ln = LayerNorm(DIM, eps=1e-5, bias=False).double()
    ln.weight.data.copy_(rms.weight)
    assert torch.allclose(rms(centred), ln(centred), rtol=0, atol=1e-12)
    # The agreement can fail: on the raw, uncentred vectors the two differ.
    assert (rms(x) - ln(x)).abs().max() > 0.1


def test_layernorm_equals_pytorchs():
    ours = randomize(LayerNorm(DIM).double())
    theirs = nn.LayerNorm(DIM).double()
    theirs.load_state_dict(ours.state_dict())  # strict: weight and bias, same names
    x = tokens(2, 5)
    assert (ours(x) - theirs(x)).abs().max() < 1e-12
    assert LayerNorm(DIM, bias=False).bias is None
    assert len(list(LayerNorm(DIM, bias=False).parameters())) == 1


def test_rmsnorm_equals_pytorchs():
    ours = randomize(RMSNorm(DIM).double())
    theirs = nn.RMSNorm(DIM, eps=ours.eps).double()
    theirs.load_state_dict(ours.state_dict())
    x = tokens(2, 5)
    assert (ours(x) - theirs(x)).abs().max() < 1e-12


def test_token_batchnorm_takes_statistics_over_batch_and_positions():
    ours = randomize(TokenBatchNorm(DIM).double())
    x = tokens(3, 7)
    out = ours(x)
    flat = x.reshape(-1, DIM)  # 21 samples of every feature
    mean, var = flat.mean(dim=0), flat.var(dim=0, unbiased=False)
    expected = (x - mean) / torch.sqrt(var + ours.eps) * ours.weight + ours.bias
    assert (out - expected).abs().max() < 1e-12
    # per feature over the tokens, as BatchNorm1d sees a (batch, channels, length) sequence
    theirs = nn.BatchNorm1d(DIM).double()
    theirs.load_state_dict(TokenBatchNorm(DIM).double().state_dict())
    with torch.no_grad():
        theirs.weight.copy_(ours.weight)
        theirs.bias.copy_(ours.bias)
    assert (theirs(x.transpose(1, 2)).transpose(1, 2) - out).abs().max() < 1e-12
    # A token's own features would give another answer: the statistics are not LayerNorm's.
    assert (out - LayerNorm(DIM).double()(x)).abs().max() > 0.1
    # In eval mode it uses the running averages the training pass updated.
    assert torch.allclose(ours.running_mean, 0.1 * mean)
    ours.eval()
    rm, rv = ours.running_mean, ours.running_var
    assert (ours(x) - ((x - rm) / torch.sqrt(rv + ours.eps) * ours.weight + ours.bias)).abs().max() < 1e-12


def test_dyt_is_a_learned_squashing_with_alpha_starting_at_one_half():
    dyt = DyT(DIM).double()
    assert dyt.alpha.item() == 0.5 and dyt.alpha.dim() == 0
    assert torch.equal(dyt.weight, torch.ones(DIM, dtype=torch.float64))
    assert torch.equal(dyt.bias, torch.zeros(DIM, dtype=torch.float64))
    randomize(dyt)
    x = tokens(2, 5)
    assert (dyt(x) - (dyt.weight * torch.tanh(dyt.alpha * x) + dyt.bias)).abs().max() < 1e-12
    # bounded by the gain and bias, whatever the input's size
    assert (dyt(1e6 * x) - dyt.bias).abs().max() <= dyt.weight.abs().max() + 1e-12
    # alpha is learned: one number per layer, with a gradient
    dyt(x).sum().backward()
    assert dyt.alpha.grad is not None and dyt.alpha.grad.abs() > 0
    assert DyT(DIM, alpha=2.0).alpha.item() == 2.0


# --- the placements -----------------------------------------------------------------------


class Times(nn.Module):
    def __init__(self, factor):
        super().__init__()
        self.factor = factor

    def forward(self, x):
        return self.factor * x


class PlusOne(nn.Module):
    def forward(self, x):
        return x + 1.0


def test_each_placement_computes_its_formula_by_hand():
    """Sub-layer f(x) = x + 1, norm n(x) = 10 x, residual connection, x = 2:
    pre x + f(n(x)) = 2 + 21 = 23; post n(x + f(x)) = 10 * 5 = 50; output x + n(f(x)) = 2 + 30 = 32."""
    x = torch.tensor([[2.0]])
    f, n, add = PlusOne(), Times(10.0), Residual(1)
    assert PreNorm()(x, f, n, add).item() == 23.0
    assert PostNorm()(x, f, n, add).item() == 50.0
    assert OutputNorm()(x, f, n, add).item() == 32.0


def test_each_placement_with_a_real_rmsnorm():
    """x = (2, -2, 2, -2) has root-mean-square 2, so RMSNorm gives (1, -1, 1, -1); the sub-layer
    multiplies by 3."""
    x = torch.tensor([[2.0, -2.0, 2.0, -2.0]])
    unit = torch.tensor([[1.0, -1.0, 1.0, -1.0]])
    norm, f, add = RMSNorm(4, eps=0.0), Times(3.0), Residual(4)
    assert torch.allclose(PreNorm()(x, f, norm, add), 5 * unit)  # x + 3 n(x)
    assert torch.allclose(PostNorm()(x, f, norm, add), unit)  # n(4x): the stream is renormalized
    assert torch.allclose(OutputNorm()(x, f, norm, add), 3 * unit)  # x + n(3x)


def test_a_post_norm_block_is_the_2017_formula():
    """Inside Chapter 1's Block: h = n1(x + Attn(x)), out = n2(h + FFN(h))."""
    torch.manual_seed(0)
    model = TransformerLM(65, dim=DIM, n_layers=1, n_heads=2, **block_kwargs("post", LayerNorm))
    block = model.blocks[0]
    randomize(block.norm1), randomize(block.norm2)
    x = torch.randn(2, 5, DIM)
    h = block.norm1(x + block.attn(x))
    assert torch.allclose(block(x), block.norm2(h + block.ffn(h)), atol=1e-6)
    # the pre-norm formula gives something else for the same weights
    block.placement = PreNorm()
    assert (block(x) - block.norm2(h + block.ffn(h))).abs().max() > 1e-2


def test_block_kwargs_names_the_placements():
    assert set(PLACEMENTS) == {"pre", "post", "output", "none"}
    pre = block_kwargs("pre", LayerNorm)
    assert pre["norm"] is LayerNorm and pre["final_norm"] is LayerNorm and isinstance(pre["placement"], PreNorm)
    post = block_kwargs("post")
    assert post["norm"] is RMSNorm and post["final_norm"] is nn.Identity
    assert isinstance(post["placement"], PostNorm)
    assert isinstance(block_kwargs("output")["placement"], OutputNorm)
    none = block_kwargs("none")  # Chapter 1's "no normalization": the final norm stays
    assert none["norm"] is nn.Identity and none["final_norm"] is RMSNorm
    model = TransformerLM(65, dim=DIM, n_layers=2, n_heads=2, **none)
    assert isinstance(model.blocks[1].norm2, nn.Identity) and isinstance(model.norm, RMSNorm)


@pytest.mark.parametrize("placement", list(PLACEMENTS))
@pytest.mark.parametrize("norm", [RMSNorm, LayerNorm, TokenBatchNorm, DyT])
def test_every_norm_and_placement_plugs_into_chapter1_model(norm, placement):
    torch.manual_seed(0)
    model = TransformerLM(65, dim=DIM, n_layers=2, n_heads=2, **block_kwargs(placement, norm))
    idx = torch.randint(65, (2, 8))
    logits, loss = model(idx, idx)
    assert logits.shape == (2, 8, 65) and torch.isfinite(loss)
    # a worker process of train_side_by_side receives it pickled
    copy = pickle.loads(pickle.dumps(model))
    copy.eval(), model.eval()
    assert torch.equal(copy(idx)[0], model(idx)[0])


# --- the leak across positions ------------------------------------------------------------


def leak_model(norm):
    torch.manual_seed(0)
    return TransformerLM(65, dim=DIM, n_layers=2, n_heads=2, norm=norm, final_norm=norm).double()


@pytest.mark.parametrize("norm", [RMSNorm, LayerNorm, DyT])
def test_per_token_norms_leak_exactly_nothing(norm):
    idx = torch.randint(65, (4, 12), generator=torch.Generator().manual_seed(3))
    leak = position_leak(leak_model(norm).train(), idx, position=6)
    assert leak == {"earlier": 0.0, "other_sequences": 0.0}


def test_batchnorm_in_training_mode_leaks_the_future_and_stops_in_eval_mode():
    model = leak_model(TokenBatchNorm).train()
    idx = torch.randint(65, (4, 12), generator=torch.Generator().manual_seed(3))
    running = model.blocks[0].norm1.running_mean.clone()
    leak = position_leak(model, idx, position=6)
    assert leak["earlier"] > 1e-6 and leak["other_sequences"] > 1e-6
    assert torch.equal(model.blocks[0].norm1.running_mean, running)  # buffers restored
    assert model.blocks[0].norm1.num_batches_tracked == 0
    assert position_leak(model.eval(), idx, position=6) == {"earlier": 0.0, "other_sequences": 0.0}


def test_position_leak_reads_only_earlier_positions_of_the_changed_row():
    """A model whose output at every position is the sum of all tokens of its row (no mask):
    changing a token moves earlier positions of that row only."""

    class Sees(nn.Module):
        def __init__(self):
            super().__init__()
            self.head = nn.Linear(1, 65)

        def forward(self, idx):
            total = idx.double().sum(dim=1, keepdim=True).expand(idx.shape)  # (B, T)
            return total[..., None].repeat(1, 1, 65), None

    leak = position_leak(Sees(), torch.zeros(3, 5, dtype=torch.long), position=3, sequence=1)
    assert leak == {"earlier": 1.0, "other_sequences": 0.0}


# --- measurements at initialization -------------------------------------------------------


def test_ffn_grad_norms_are_the_gradients_of_each_down_weight():
    torch.manual_seed(0)
    model = TransformerLM(65, dim=DIM, n_layers=3, n_heads=2)
    idx = torch.randint(65, (2, 8))
    norms = ffn_grad_norms(model, idx, idx)
    assert all(p.grad is None for p in model.parameters())  # left as found
    _, loss = model(idx, idx)
    loss.backward()
    expected = torch.stack([b.ffn.down.weight.grad.norm() for b in model.blocks])
    assert norms.shape == (3,) and torch.allclose(norms, expected)


def test_post_norm_renormalizes_the_stream_after_every_block():
    """Read with Chapter 7's stream measurements: with unit gains, post-norm
    leaves the stream at RMS 1 after each block; pre-norm does not."""
    from mlexp.residual import hidden_states, stream_rms

    torch.manual_seed(0)
    idx = torch.randint(65, (2, 8))
    post = TransformerLM(65, dim=DIM, n_layers=3, n_heads=2, **block_kwargs("post"))
    assert torch.allclose(stream_rms(hidden_states(post, idx))[1:], torch.ones(3), atol=1e-4)
    pre = TransformerLM(65, dim=DIM, n_layers=3, n_heads=2, **block_kwargs("pre"))
    assert not torch.allclose(stream_rms(hidden_states(pre, idx))[1:], torch.ones(3), atol=1e-2)


def test_xavier_init_draws_linear_weights_from_glorots_range():
    torch.manual_seed(0)
    model = TransformerLM(65, dim=64, n_layers=2, n_heads=4)
    embed = model.embed.weight.clone()
    default = model.blocks[0].ffn.down.weight.abs().max().item()
    xavier_init(model)
    assert torch.equal(model.embed.weight, embed)
    for module in model.modules():
        if isinstance(module, nn.Linear):
            fan_out, fan_in = module.weight.shape
            bound = math.sqrt(6 / (fan_in + fan_out))
            w = module.weight
            assert w.abs().max() <= bound and w.abs().max() > 0.9 * bound
            assert abs(w.var().item() - 2 / (fan_in + fan_out)) < 0.2 * 2 / (fan_in + fan_out)
    assert model.blocks[0].ffn.down.weight.abs().max().item() > 1.5 * default


# --- outcomes of a run --------------------------------------------------------------------


def test_unigram_loss_by_hand():
    # train "a a b" over a vocabulary of three; add-one: p = (3/6, 2/6, 1/6)
    train = torch.tensor([0, 0, 1])
    loss = unigram_loss(train, torch.tensor([0, 1, 2]), vocab_size=3)
    assert loss == pytest.approx(-(math.log(1 / 2) + math.log(1 / 3) + math.log(1 / 6)) / 3)


@pytest.mark.parametrize(
    "losses, outcome",
    [
        ([4.2, 3.0, 2.1], "trained"),
        ([4.2, 3.2, 3.3], "collapsed"),
        ([4.2, 3.5, 3.44], "collapsed"),  # within 0.1 above
        ([4.2, 3.0, 3.26], "collapsed"),  # within 0.1 below
        ([4.2, 3.0, 3.2], "trained"),  # 0.15 below: learned more than the frequencies
        ([4.2, 4.17], "stalled"),  # the uniform guess, ln 65
        ([4.2, float("nan"), float("nan")], "diverged"),
        ([4.2, float("inf")], "diverged"),
        ([4.2, float("nan"), 2.0], "diverged"),  # a non-finite loss at any evaluation
    ],
)
def test_outcome_of_made_up_histories(losses, outcome):
    assert classify_run(losses, unigram=3.35, margin=0.1) == outcome
    assert outcome in OUTCOMES


def test_the_margin_sets_the_band():
    assert classify_run([3.0], unigram=3.35, margin=0.5) == "collapsed"
    assert classify_run([3.0], unigram=3.35, margin=0.2) == "trained"


# --- timing -------------------------------------------------------------------------------


def test_time_in_turns_takes_turns_and_medians():
    """One call of each per round, the first place passing round: a variant timed always first
    (or last) would carry the order's cost alone."""
    calls = []
    times = time_in_turns({"a": lambda: calls.append("a"), "b": lambda: calls.append("b")}, repeats=3, warmup=1)
    assert calls == ["a", "b", "b", "a", "a", "b", "b", "a"]
    assert set(times) == {"a", "b"} and all(t >= 0 for t in times.values())


def test_times_in_turns_keeps_every_timed_call():
    times = times_in_turns({"a": lambda: None, "b": lambda: None, "c": lambda: None}, repeats=4, warmup=2)
    assert {name: len(t) for name, t in times.items()} == {"a": 4, "b": 4, "c": 4}


def test_norm_times_runs_forward_and_backward_at_the_threads_asked():
    seen = []

    class Probe(nn.Module):
        def __init__(self):
            super().__init__()
            self.weight = nn.Parameter(torch.ones(DIM))

        def forward(self, x):
            seen.append(torch.get_num_threads())
            return self.weight * x

    probe = Probe()
    before = torch.get_num_threads()  # 1, from the fixture
    norms = {"probe": probe, "ln": nn.LayerNorm(DIM)}
    times = norm_times(norms, torch.randn(2, 3, DIM), repeats=2, warmup=0, threads=2)
    assert set(times) == {"probe", "ln"}
    assert seen == [2, 2] and torch.get_num_threads() == before
    assert probe.weight.grad is not None  # a backward pass ran


# --- bad arguments ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "build, message",
    [
        (lambda: LayerNorm(DIM)(torch.randn(2, 3, DIM + 1)), r"build it with LayerNorm\(17\)"),
        (lambda: DyT(DIM)(torch.randn(2, DIM - 1)), r"build it with DyT\(15\)"),
        (lambda: TokenBatchNorm(DIM)(torch.randn(2, 3, 8)), r"build it with TokenBatchNorm\(8\)"),
        (lambda: LayerNorm(0), "must be a positive int"),
        (lambda: DyT(DIM, alpha=0.0), "must be positive"),
        (lambda: block_kwargs("sandwich"), "unknown placement 'sandwich'; pass one of 'pre'"),
        (lambda: block_kwargs("pre", RMSNorm(DIM)), "the class, not an instance"),
        (lambda: classify_run([], 3.35), "val_losses is empty"),
        (lambda: classify_run([2.0], 3.35, margin=0.0), "margin=0.0 must be positive"),
        (lambda: position_leak(leak_model(RMSNorm), torch.zeros(2, 5, dtype=torch.long), 0), "earlier position"),
        (lambda: position_leak(leak_model(RMSNorm), torch.zeros(5, dtype=torch.long), 2), "must be \\(batch"),
        (lambda: ffn_grad_norms(nn.Linear(2, 2), torch.zeros(1, 2), None), "ModuleList `blocks`"),
        (lambda: time_in_turns({"a": lambda: None}, repeats=0), "repeats=0 must be at least 1"),
    ],
)
def test_bad_arguments_say_what_to_do(build, message):
    with pytest.raises(ValueError, match=message):
        build()


def test_an_ffn_without_down_is_reported():
    model = TransformerLM(65, dim=DIM, n_layers=1, n_heads=2, make_ffn=lambda d: nn.Linear(d, d))
    with pytest.raises(ValueError, match="needs a `down` projection"):
        ffn_grad_norms(model, torch.zeros(1, 4, dtype=torch.long), torch.zeros(1, 4, dtype=torch.long))


def test_the_names_are_reexported_lazily():
    assert mlexp.DyT is DyT and mlexp.classify_run is classify_run and mlexp.block_kwargs is block_kwargs
