"""Chapter 5's feed-forward variants, proven from outside where a reference exists.

Our SwiGLU is checked against Hugging Face's LlamaMLP and a top-2 Mixture of Experts against
MixtralSparseMoeBlock, with the same weights in float64; the balancing loss against the Switch
Transformer's formula on a case small enough to check by hand, and against Hugging Face's
implementation of it; the batched dispatch against a loop over tokens; the parameter counts
against the numbers the chapter's brief states.
"""

import copy

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import mlexp
from mlexp.feedforward import (
    GATES,
    MLP,
    GatedFFN,
    MoE,
    active_params,
    balance_loss,
    capacity_overflow,
    expert_choices,
    expert_load,
    gated_hidden,
    hidden_activations,
)
from mlexp.transformer import SwiGLU, TransformerLM

transformers = pytest.importorskip("transformers")
from transformers import LlamaConfig, MixtralConfig  # noqa: E402
from transformers.models.llama.modeling_llama import LlamaMLP  # noqa: E402
from transformers.models.mixtral.modeling_mixtral import (  # noqa: E402
    MixtralSparseMoeBlock,
    load_balancing_loss_func,
)

DIM, HIDDEN, EXPERTS = 32, 48, 4

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def randomize(module, scale=0.3):
    """Weights away from their initial values, so a swapped or transposed weight shows."""
    torch.manual_seed(1)
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(torch.randn_like(p) * scale)
    return module


def tokens(*shape, seed=2):
    torch.manual_seed(seed)
    return torch.randn(*shape, DIM, dtype=torch.float64)


# --- the references -----------------------------------------------------------------------


def test_swiglu_equals_llama_mlp():
    ours = randomize(GatedFFN(DIM, nn.SiLU(), HIDDEN).double())
    config = LlamaConfig(hidden_size=DIM, intermediate_size=HIDDEN, hidden_act="silu", mlp_bias=False)
    theirs = LlamaMLP(config).double()
    with torch.no_grad():
        theirs.gate_proj.weight.copy_(ours.gate.weight)
        theirs.up_proj.weight.copy_(ours.up.weight)
        theirs.down_proj.weight.copy_(ours.down.weight)
        x = tokens(2, 11)
        assert (ours(x) - theirs(x)).abs().max() < 1e-5
        # The comparison can fail: another gate activation is caught.
        ours.act = nn.GELU()
        assert (ours(x) - theirs(x)).abs().max() > 1e-3


def test_gated_layer_with_silu_is_chapter1_swiglu():
    """The same weights under the same names, the same function: Chapter 1's layer needs no copy."""
    chapter1 = randomize(SwiGLU(DIM).double())
    ours = GatedFFN(DIM, GATES["SwiGLU"]()).double()
    ours.load_state_dict(chapter1.state_dict())  # strict: every name and shape matches
    x = tokens(2, 5)
    assert torch.equal(ours(x), chapter1(x))


def mixtral_pair(top_k=2):
    """Our MoE and a MixtralSparseMoeBlock with the same random weights, float64."""
    config = MixtralConfig(
        hidden_size=DIM,
        intermediate_size=HIDDEN,
        num_local_experts=EXPERTS,
        num_experts_per_tok=top_k,
        router_jitter_noise=0.0,  # Mixtral's optional training noise on the router's input
        hidden_act="silu",
        experts_implementation="eager",
    )
    theirs = MixtralSparseMoeBlock(config).double().eval()
    ours = MoE(DIM, EXPERTS, top_k, make_expert=lambda d: GatedFFN(d, nn.SiLU(), HIDDEN))
    ours = randomize(ours.double())
    with torch.no_grad():
        theirs.gate.weight.copy_(ours.router.weight)
        # transformers 5 stores the experts fused: gate|up as (E, 2 * hidden, dim), down as
        # (E, dim, hidden); transformers 4 had one module per expert with w1 (gate), w3 (up), w2.
        experts = theirs.experts
        if hasattr(experts, "gate_up_proj"):
            for e, expert in enumerate(ours.experts):
                experts.gate_up_proj[e].copy_(torch.cat([expert.gate.weight, expert.up.weight]))
                experts.down_proj[e].copy_(expert.down.weight)
        else:
            for expert, ref in zip(ours.experts, experts):
                ref.w1.weight.copy_(expert.gate.weight)
                ref.w3.weight.copy_(expert.up.weight)
                ref.w2.weight.copy_(expert.down.weight)
    return ours, theirs


def run_mixtral(block, x):
    out = block(x)
    return out[0] if isinstance(out, tuple) else out  # transformers 4 also returned the logits


def test_top2_moe_equals_mixtral_sparse_moe_block():
    ours, theirs = mixtral_pair(top_k=2)
    x = tokens(3, 13)
    with torch.no_grad():
        a, b = ours(x), run_mixtral(theirs, x)
        assert a.shape == x.shape
        # Hugging Face takes the router's softmax in float32, so agreement is to about 1e-6.
        assert (a - b).abs().max() < 1e-5
        assert (ours.load > 0).all(), "every expert took part, so each one's weights were compared"
        # The comparison can fail: the k weights as Switch leaves them (not renormalized) differ,
        ours.renormalize = False
        assert (ours(x) - b).abs().max() > 1e-3
        ours.renormalize = True
        # and so do experts in another order.
        ours.experts = nn.ModuleList(list(ours.experts)[::-1])
        assert (ours(x) - b).abs().max() > 1e-3


def naive_moe(moe, x):
    """The same layer, one token and one chosen expert at a time."""
    flat = x.reshape(-1, x.shape[-1])
    probs = moe.router(flat).softmax(-1)
    out = torch.zeros_like(flat)
    for t in range(len(flat)):
        weights, chosen = probs[t].topk(moe.top_k)
        if moe.renormalize:
            weights = weights / weights.sum()
        for w, e in zip(weights, chosen.tolist()):
            out[t] += w * moe.experts[e](flat[t : t + 1])[0]
    return out.view(x.shape)


@pytest.mark.parametrize("top_k", [1, 2, 3])
def test_batched_dispatch_equals_a_loop_over_tokens(top_k):
    moe = randomize(MoE(DIM, EXPERTS, top_k, make_expert=lambda d: MLP(d, nn.GELU(), HIDDEN)).double())
    x = tokens(2, 9)
    with torch.no_grad():
        assert (moe(x) - naive_moe(moe, x)).abs().max() < 1e-12
        # The comparison can fail: the busiest expert with other weights is caught.
        other = copy.deepcopy(moe)
        other.experts[int(moe.load.argmax())].down.weight.mul_(2.0)
        assert (moe(x) - naive_moe(other, x)).abs().max() > 1e-3


def test_top1_weights_are_the_routers_probability_so_the_router_learns():
    """Switch's rule for k = 1: the output is p_i(x) E_i(x) with p from the softmax over all N, so
    the task loss reaches the router. Renormalized, the one weight would always be 1."""
    moe = randomize(MoE(DIM, EXPERTS, top_k=1, balance=0.0).double())
    x = tokens(2, 7)
    out = moe(x)
    flat = x.reshape(-1, DIM)
    probs = moe.router(flat).softmax(-1)
    expected = torch.stack(
        [probs[t].max() * moe.experts[int(probs[t].argmax())](flat[t : t + 1])[0] for t in range(len(flat))]
    )
    assert (out.reshape(-1, DIM) - expected).abs().max() < 1e-12
    out.square().sum().backward()
    assert moe.router.weight.grad.abs().max() > 1e-6
    # Renormalized top-1 leaves the router without a gradient from the task.
    moe.zero_grad()
    moe.renormalize = True
    moe(x).square().sum().backward()
    assert moe.router.weight.grad.abs().max() < 1e-10  # p / p, up to rounding


# --- parameters ---------------------------------------------------------------------------


def test_parameter_counts_match_at_two_thirds_width():
    assert gated_hidden(128) == 341 == int(8 * 128 / 3)  # the brief's width
    lm = lambda make_ffn: mlexp.count_params(TransformerLM(65, make_ffn=make_ffn))
    assert lm(lambda d: GatedFFN(d, nn.SiLU())) == 803_712 == lm(None)  # Chapter 1's default
    for activation in (nn.ReLU(), nn.GELU(), torch.sigmoid):
        assert lm(lambda d: MLP(d, activation)) == 804_224
    # three d x h matrices never exceed, and come within one unit of, two d x 4d ones
    for dim in (64, 100, 128, 513):
        h = gated_hidden(dim)
        assert 3 * dim * h <= 2 * dim * 4 * dim < 3 * dim * (h + 1)
    # LLaMA-7B rounds up to a multiple of 256: 4096 wide, 11,008 hidden
    assert gated_hidden(4096, multiple_of=256) == 11_008
    assert gated_hidden(4096) == 10_922


def test_active_parameters_count_k_experts_and_the_router():
    make = lambda d: MoE(d, 4, top_k=1, make_expert=lambda d: GatedFFN(d, nn.SiLU(), 341))
    model = TransformerLM(65, make_ffn=make)
    router, expert = 4 * 128, 3 * 128 * 341
    assert mlexp.count_params(model) == 803_712 + 4 * (router + 3 * expert)
    # equal active parameters to the dense SwiGLU, plus the routers
    assert active_params(model) == 803_712 + 4 * router
    two = TransformerLM(65, make_ffn=lambda d: MoE(d, 4, top_k=2, make_expert=lambda d: GatedFFN(d, nn.SiLU(), 341)))
    assert active_params(two) == 803_712 + 4 * (router + expert)
    assert active_params(TransformerLM(65)) == 803_712


# --- the variants -------------------------------------------------------------------------


def test_mlp_applies_the_activation_passed_in():
    x = tokens(2, 5)
    for activation, function in ((nn.ReLU(), F.relu), (nn.GELU(), F.gelu), (torch.sigmoid, torch.sigmoid)):
        mlp = randomize(MLP(DIM, activation, HIDDEN).double())
        assert torch.equal(mlp(x), mlp.down(function(mlp.up(x))))
    # nn.GELU is the exact x * Phi(x), not the tanh form
    mlp.act = nn.GELU()
    exact = mlp.down(mlp.up(x) * torch.distributions.Normal(0.0, 1.0).cdf(mlp.up(x)))
    assert (mlp(x) - exact).abs().max() < 1e-12
    assert (mlp(x) - mlp.down(F.gelu(mlp.up(x), approximate="tanh"))).abs().max() > 1e-6


@pytest.mark.parametrize("name", list(GATES))
def test_gated_variants_multiply_gate_and_up(name):
    layer = randomize(GatedFFN(DIM, GATES[name](), HIDDEN).double())
    x = tokens(2, 5)
    gate = {"GLU": torch.sigmoid, "Bilinear": lambda t: t, "ReGLU": F.relu, "GEGLU": F.gelu, "SwiGLU": F.silu}
    assert torch.equal(layer(x), layer.down(gate[name](layer.gate(x)) * layer.up(x)))
    assert len(list(layer.parameters())) == 3


def test_bilinear_is_the_gate_without_an_activation():
    bilinear = GatedFFN(DIM, None, HIDDEN)
    assert isinstance(bilinear.act, nn.Identity)


@pytest.mark.parametrize(
    "make_ffn",
    [
        lambda d: MLP(d, nn.ReLU()),
        lambda d: MLP(d, torch.sigmoid),
        lambda d: GatedFFN(d, nn.Sigmoid()),
        lambda d: MoE(d, 4, top_k=1),
        lambda d: MoE(d, 4, top_k=2, make_expert=lambda d: MLP(d, nn.GELU(), 64)),
    ],
    ids=["relu", "sigmoid", "glu", "moe-top1", "moe-top2-mlp"],
)
def test_every_variant_plugs_into_chapter1_model(make_ffn):
    torch.manual_seed(0)
    model = TransformerLM(65, dim=32, n_layers=2, n_heads=4, make_ffn=make_ffn)
    idx = torch.randint(65, (2, 8))
    logits, loss = model(idx, idx)
    assert logits.shape == (2, 8, 65) and torch.isfinite(loss)


# --- the balancing loss -------------------------------------------------------------------


def test_balance_loss_on_a_hand_checked_case():
    # four tokens, two experts, top-1: f = (3/4, 1/4), P = (0.65, 0.35)
    probs = torch.tensor([[0.9, 0.1], [0.8, 0.2], [0.6, 0.4], [0.3, 0.7]], dtype=torch.float64)
    chosen = probs.argmax(-1, keepdim=True)
    # N * sum f_i P_i = 2 * (0.75 * 0.65 + 0.25 * 0.35) = 1.15
    assert abs(balance_loss(probs, chosen).item() - 1.15) < 1e-12
    # Hugging Face's version of the Switch loss agrees for k = 1 ...
    logits = probs.log()
    assert abs(load_balancing_loss_func((logits,), 2, top_k=1).item() - 1.15) < 1e-6
    # ... and, counting k assignments per token, is k times ours for k = 2.
    torch.manual_seed(0)
    logits = torch.randn(50, EXPERTS, dtype=torch.float64)
    probs = logits.softmax(-1)
    ours = balance_loss(probs, probs.topk(2, dim=-1).indices)
    assert abs(load_balancing_loss_func((logits,), EXPERTS, top_k=2).item() - 2 * ours.item()) < 1e-5


def test_balance_loss_is_the_coefficient_for_uniform_routing_and_more_otherwise():
    """Uniform routing gives exactly alpha * 1; a router certain of one expert gives alpha * N."""
    moe = MoE(EXPERTS, EXPERTS, top_k=1, balance=0.01).double()
    with torch.no_grad():
        moe.router.weight.copy_(torch.eye(EXPERTS) * 3.0)
        # every expert is the first choice of two tokens, and the probabilities are symmetric
        x = torch.eye(EXPERTS, dtype=torch.float64).repeat(2, 1)[None]
        moe(x)
        assert moe.load.tolist() == [2] * EXPERTS
        assert abs(moe.aux_loss.item() - 0.01) < 1e-12
        # everything to expert 0, with near certainty
        moe.router.weight.zero_()
        moe.router.weight[0].fill_(50.0)
        moe(torch.ones(1, 8, EXPERTS, dtype=torch.float64))
        assert moe.load.tolist() == [8, 0, 0, 0]
        assert abs(moe.aux_loss.item() - 0.01 * EXPERTS) < 1e-12
    # When every token has the same probabilities p, the loss is N * max(p): 1 only if p is uniform.
    torch.manual_seed(0)
    for _ in range(20):
        p = torch.rand(EXPERTS, dtype=torch.float64).softmax(-1).expand(10, EXPERTS)
        loss = balance_loss(p, p.argmax(-1, keepdim=True))
        assert torch.isclose(loss, EXPERTS * p[0].max()) and loss > 1.0
    uniform = torch.full((10, EXPERTS), 1 / EXPERTS, dtype=torch.float64)
    assert balance_loss(uniform, torch.zeros(10, 1, dtype=torch.long)) == 1.0


def test_balance_loss_pushes_probability_away_from_the_busiest_expert():
    moe = randomize(MoE(DIM, EXPERTS, top_k=1, balance=1.0).double())
    moe(tokens(4, 16))
    moe.aux_loss.backward()
    busiest = int(moe.load.argmax())
    assert moe.router.weight.grad.abs().max() > 0
    # one small step against the gradient moves probability off the busiest expert
    before = moe.router(tokens(4, 16)).softmax(-1)[..., busiest].mean()
    with torch.no_grad():
        moe.router.weight.sub_(0.1 * moe.router.weight.grad)
    after = moe.router(tokens(4, 16)).softmax(-1)[..., busiest].mean()
    assert after < before


# --- routing statistics -------------------------------------------------------------------


@pytest.mark.parametrize("top_k", [1, 2])
def test_load_counts_sum_to_k_times_the_tokens(top_k):
    torch.manual_seed(0)
    model = TransformerLM(65, dim=DIM, n_layers=3, n_heads=4, make_ffn=lambda d: MoE(d, EXPERTS, top_k))
    idx = torch.randint(65, (3, 10))
    load = expert_load(model, idx)
    chosen = expert_choices(model, idx)
    assert load.shape == (3, EXPERTS) and chosen.shape == (3, 3, 10, top_k)
    assert load.sum(-1).tolist() == [top_k * 30] * 3
    for layer in range(3):
        assert torch.equal(load[layer], torch.bincount(chosen[layer].flatten(), minlength=EXPERTS))
    # a token's k experts are distinct
    assert (chosen.sort(-1).values.diff(dim=-1) > 0).all()


def test_capacity_overflow_counts_what_a_capacity_would_drop():
    # 8 routed tokens, 4 experts: a factor of 1 gives each expert 2 places, 1.25 gives floor(2.5) = 2
    load = torch.tensor([[6, 1, 1, 0], [2, 2, 2, 2], [3, 3, 1, 1]])
    assert capacity_overflow(load, 1.0).tolist() == [4, 0, 2]
    assert capacity_overflow(load, 1.25).tolist() == [4, 0, 2]
    assert capacity_overflow(load, 1.5).tolist() == [3, 0, 0]  # 3 places each
    assert capacity_overflow(load, 4.0).tolist() == [0, 0, 0]


def test_hidden_activations_are_what_down_reads():
    torch.manual_seed(0)
    model = TransformerLM(65, dim=DIM, n_layers=2, n_heads=4, make_ffn=lambda d: MLP(d, nn.ReLU(), HIDDEN))
    idx = torch.randint(65, (2, 6))
    hidden = hidden_activations(model, idx)
    assert hidden.shape == (2, 2, 6, HIDDEN)
    assert (hidden >= 0).all() and (hidden == 0).any()  # ReLU units that are off
    # the first layer's, recomputed by hand
    x = model.embed(idx)
    x = x + model.blocks[0].attn(model.blocks[0].norm1(x))
    ffn = model.blocks[0].ffn
    assert torch.allclose(hidden[0], F.relu(ffn.up(model.blocks[0].norm2(x))), atol=1e-6)
    assert not model.blocks[0].ffn.down._forward_pre_hooks  # the hooks are gone


# --- training -----------------------------------------------------------------------------


def tiny_moe_model(balance):
    torch.manual_seed(0)
    make = lambda d: MoE(d, EXPERTS, top_k=1, balance=balance, make_expert=lambda d: GatedFFN(d, nn.SiLU(), 32))
    return TransformerLM(65, dim=DIM, n_layers=2, n_heads=4, make_ffn=make)


def test_moe_model_trains_and_its_balancing_loss_is_in_the_total():
    model = tiny_moe_model(balance=0.5)
    idx = torch.randint(65, (2, 12))
    _, total = model(idx, idx)
    _, task = model(idx, idx, include_aux=False)
    aux = sum(block.ffn.aux_loss for block in model.blocks)
    assert aux > 0
    assert torch.isclose(total - task, aux)

    generator = torch.Generator().manual_seed(0)
    train_ids = torch.randint(65, (3000,), generator=generator)
    val_ids = torch.randint(65, (500,), generator=generator)
    runs = {}
    for balance in (0.0, 1.0):
        model = tiny_moe_model(balance)
        kw = dict(steps=3, block_size=16, batch_size=4, eval_batches=1, log=False, device="cpu")
        history = mlexp.train_lm(model, train_ids, val_ids, **kw)
        assert all(torch.isfinite(torch.tensor(history["val"])))
        runs[balance] = model
    # Same initial weights and batches: only the balancing loss, reaching the optimizer through
    # train_lm's total, can make the routers differ.
    router = lambda m: torch.stack([b.ffn.router.weight for b in m.blocks])
    assert not torch.allclose(router(runs[0.0]), router(runs[1.0]))
    assert torch.equal(router(tiny_moe_model(0.0)), router(tiny_moe_model(1.0)))


# --- bad arguments ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "build, message",
    [
        (lambda: MoE(DIM, 4, top_k=5), "lower top_k or add experts"),
        (lambda: MoE(DIM, 4, top_k=0), "between 1 and n_experts"),
        (lambda: MoE(DIM, 0), "needs experts to route to"),
        (lambda: MoE(DIM, 4, balance=-0.01), "0 switches the loss off"),
        (lambda: MoE(DIM, 4, make_expert="swiglu"), "must be a function of the width"),
        (lambda: MoE(DIM, 4, make_expert=lambda d: torch.zeros(d)), "must return an nn.Module"),
        (lambda: MLP(DIM, "relu"), "pass one, such as nn.ReLU()"),
        (lambda: MLP(DIM, nn.ReLU), r"pass an instance, such as ReLU\(\)"),
        (lambda: GatedFFN(DIM, 3.0), "not a module or a function"),
        (lambda: MLP(DIM, nn.ReLU(), hidden=-4), "pass a positive width"),
        (lambda: gated_hidden(DIM, multiple_of=0), "pass 1 for no rounding"),
        (lambda: gated_hidden(DIM, mlp_hidden=1), "pass at least 2"),
        (lambda: capacity_overflow(torch.ones(1, 4), 0.0), "must be positive"),
        (lambda: balance_loss(torch.ones(2, 3, 4), torch.zeros(2, 3, 1)), "flatten the batch"),
        (lambda: expert_load(TransformerLM(65, dim=DIM), torch.zeros(1, 2, dtype=torch.long)), "no MoE layer"),
        (
            lambda: hidden_activations(tiny_moe_model(0.0), torch.zeros(1, 2, dtype=torch.long)),
            "needs a `down` projection",
        ),
    ],
)
def test_bad_arguments_say_what_to_do(build, message):
    with pytest.raises(ValueError, match=message):
        build()


def test_an_expert_that_changes_the_width_is_reported():
    moe = MoE(DIM, 2, make_expert=lambda d: nn.Linear(d, d + 1))
    with pytest.raises(ValueError, match="output has the width of its input"):
        moe(torch.randn(1, 3, DIM))
