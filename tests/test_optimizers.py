"""Chapter 9's optimizers, each held against PyTorch's own where PyTorch has one."""

import copy

import pytest
import torch
import torch.nn as nn

from mlexp.optimizers import (
    Adam,
    AdamW,
    Muon,
    MuonHybrid,
    SGD,
    UpdateStats,
    newton_schulz,
    state_bytes,
)
from mlexp.transformer import TransformerLM


def tiny_model() -> nn.Module:
    torch.manual_seed(0)
    return TransformerLM(17, dim=16, n_layers=2, n_heads=2)


def train(model: nn.Module, factory, steps: int = 3, extra=None) -> nn.Module:
    """A few steps on a fixed batch; ``extra(model)`` is added to the loss."""
    g = torch.Generator().manual_seed(1)
    x = torch.randint(17, (4, 8), generator=g)
    y = torch.randint(17, (4, 8), generator=g)
    optimizer = factory(model)
    for _ in range(steps):
        optimizer.zero_grad()
        loss = model(x, y)[1]
        if extra is not None:
            loss = loss + extra(model)
        loss.backward()
        optimizer.step()
    return model


def same_weights(a: nn.Module, b: nn.Module) -> bool:
    return all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters()))


def test_adamw_without_decay_is_adam_bit_for_bit():
    a = train(tiny_model(), AdamW(1e-2, weight_decay=0.0))
    b = train(tiny_model(), Adam(1e-2, l2=0.0))
    assert same_weights(a, b)


def test_coupled_l2_is_adam_on_the_loss_plus_the_penalty():
    lam = 0.3
    a = train(tiny_model(), Adam(1e-2, l2=lam))

    def penalty(model):  # Adam's coupled decay acts on the matrices only
        return lam / 2 * sum(p.pow(2).sum() for p in model.parameters() if p.dim() >= 2)

    b = train(tiny_model(), Adam(1e-2, l2=0.0), extra=penalty)
    for p, q in zip(a.parameters(), b.parameters()):
        torch.testing.assert_close(p, q, rtol=1e-5, atol=1e-6)


def first_step(factory, scale: float) -> torch.Tensor:
    """How far one step moves each weight when the loss is multiplied by ``scale``."""
    model = tiny_model()
    before = torch.cat([p.detach().flatten() for p in model.parameters()])
    x = torch.randint(17, (4, 8), generator=torch.Generator().manual_seed(1))
    optimizer = factory(model)
    (scale * model(x, x.roll(1, 1))[1]).backward()
    optimizer.step()
    return torch.cat([p.detach().flatten() for p in model.parameters()]) - before


def test_adams_first_step_is_the_rate_on_every_weight_and_ignores_the_losss_scale():
    small, large = first_step(Adam(1e-3), 1.0), first_step(Adam(1e-3), 1000.0)
    moved = small.abs() > 0
    # |m / sqrt(v)| is 1 after one step, up to eps against a tiny gradient
    assert (small[moved].abs() - 1e-3).abs().median() < 1e-6
    # a thousandfold loss leaves the step as it was, but where eps is not
    # negligible against a tiny gradient
    same = (large - small).abs() <= 1e-3 * small.abs()
    assert same.float().mean() > 0.99
    sgd_small, sgd_large = first_step(SGD(1e-3), 1.0), first_step(SGD(1e-3), 1000.0)
    # SGD's step grows with the loss (measured after float32 rounding)
    assert abs(sgd_large.norm() / sgd_small.norm() / 1000 - 1) < 1e-2


def test_sgd_follows_its_formula_and_nesterov_looks_ahead():
    w0, lr, mu = torch.tensor([[1.0, -2.0]]), 0.1, 0.9
    for nesterov in (False, True):
        w = nn.Parameter(w0.clone())
        holder = nn.Module()
        holder.w = w
        opt = SGD(lr, momentum=mu, nesterov=nesterov)(holder)
        ref_w, v = w0.clone(), torch.zeros_like(w0)
        for _ in range(4):
            opt.zero_grad()
            (w**2).sum().backward()  # gradient 2w
            opt.step()
            g = 2 * ref_w
            v = mu * v + g
            ref_w = ref_w - lr * (g + mu * v if nesterov else v)
        torch.testing.assert_close(w.detach(), ref_w)


def test_newton_schulz_keeps_the_singular_vectors_and_ignores_scale():
    g = torch.randn(24, 40, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    u, s, vh = torch.linalg.svd(g, full_matrices=False)
    out = newton_schulz(g)
    inner = u.T @ out @ vh.T  # diagonal when the singular vectors are kept
    off = inner - torch.diag(torch.diagonal(inner))
    assert off.abs().max() < 1e-10
    assert torch.diagonal(inner).min() > 0.5 and torch.diagonal(inner).max() < 1.3
    torch.testing.assert_close(newton_schulz(1000 * g), out)
    torch.testing.assert_close(newton_schulz(g.T), out.T)


@pytest.mark.skipif(not hasattr(torch.optim, "Muon"), reason="this PyTorch has no torch.optim.Muon (it came in 2.9)")
def test_our_muon_step_is_pytorchs_within_bfloat16():
    g = torch.Generator().manual_seed(0)
    w0 = torch.randn(32, 48, generator=g)
    grads = [torch.randn(32, 48, generator=g) for _ in range(3)]
    ours, theirs = nn.Parameter(w0.clone()), nn.Parameter(w0.clone())
    opt_ours = Muon([{"params": [ours], "muon": True}], lr=0.02, weight_decay=0.1)
    opt_theirs = torch.optim.Muon([theirs], lr=0.02, weight_decay=0.1)
    for grad in grads:
        ours.grad, theirs.grad = grad.clone(), grad.clone()
        opt_ours.step()
        opt_theirs.step()
    step_ours, step_theirs = ours.detach() - w0, theirs.detach() - w0
    # PyTorch orthogonalizes in bfloat16 (8 bits of mantissa), we in float32
    assert (step_ours - step_theirs).norm() / step_theirs.norm() < 2e-2


def test_muons_other_groups_are_pytorchs_adamw():
    w0 = torch.randn(5, generator=torch.Generator().manual_seed(0))
    ours, theirs = nn.Parameter(w0.clone()), nn.Parameter(w0.clone())
    opt_ours = Muon([{"params": [ours], "muon": False, "lr": 1e-2}], weight_decay=0.1)
    opt_theirs = torch.optim.AdamW([theirs], lr=1e-2, betas=(0.9, 0.99), eps=1e-8, weight_decay=0.1)
    for i in range(5):
        grad = torch.full_like(w0, float(i + 1)) * w0
        ours.grad, theirs.grad = grad.clone(), grad.clone()
        opt_ours.step()
        opt_theirs.step()
    torch.testing.assert_close(ours, theirs)


def test_muon_hybrid_covers_every_parameter_and_orthogonalizes_only_the_blocks_matrices():
    model = tiny_model()
    opt = MuonHybrid(lr=0.02, adam_lr=3e-3)(model)
    muon, rest = opt.param_groups
    names = {id(p): n for n, p in model.named_parameters()}
    assert all(names[id(p)].startswith("blocks.") and p.dim() == 2 for p in muon["params"])
    assert len(muon["params"]) + len(rest["params"]) == len(list(model.parameters()))
    assert (muon["lr"], rest["lr"]) == (0.02, 3e-3)
    train(model, MuonHybrid())  # and it trains without complaint


def test_state_bytes_count_what_each_optimizer_keeps():
    params = sum(p.numel() for p in tiny_model().parameters())
    matrices = sum(p.numel() for n, p in tiny_model().named_parameters() if n.startswith("blocks.") and p.dim() == 2)
    expected = {
        SGD(0.1): 0,
        SGD(0.1, momentum=0.9): 4 * params,
        AdamW(1e-3): 8 * params,
        MuonHybrid(): 4 * matrices + 8 * (params - matrices),
    }
    for factory, nbytes in expected.items():
        model = tiny_model()
        optimizer = factory(model)
        model(torch.zeros(1, 4, dtype=torch.long), torch.zeros(1, 4, dtype=torch.long))[1].backward()
        optimizer.step()
        assert state_bytes(optimizer) == nbytes, factory


@pytest.mark.parametrize("make", [
    lambda: SGD(0.0), lambda: SGD(-1.0), lambda: SGD(0.1, momentum=1.0), lambda: SGD(0.1, nesterov=True),
    lambda: Adam(0.0), lambda: Adam(1e-3, l2=-0.1), lambda: MuonHybrid(lr=0.0), lambda: MuonHybrid(adam_lr=-1.0),
    lambda: Muon([{"params": [nn.Parameter(torch.zeros(3))], "muon": True}]),
    lambda: newton_schulz(torch.zeros(2, 3, 4)),
])
def test_bad_arguments_say_what_to_do(make):
    with pytest.raises(ValueError, match=r"give|must|matri|needs"):
        make()


def test_update_stats_read_the_step_an_optimizer_took():
    model = tiny_model()
    stats = UpdateStats(steps=(0,))
    x = torch.randint(17, (4, 8), generator=torch.Generator().manual_seed(1))
    optimizer = SGD(0.1)(model)
    stats.before(0, model)
    model(x, x)[1].backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.dim() == 2}
    optimizer.step()
    found = stats.after(0, model, None, None)
    assert set(found) == set(grads)
    for name, g in grads.items():
        # plain SGD moves each matrix by -lr * grad
        assert abs(found[name]["update_rms"] - 0.1 * g.pow(2).mean().sqrt().item()) < 1e-6
        s = torch.linalg.svdvals(g)
        expected = (s.pow(2).sum() / s[0] ** 2).item()
        assert abs(found[name]["stable_rank"] - expected) < 1e-3 * expected
    assert stats.after(1, model, None, None) is None  # only the steps asked for
    # a rank-one update has stable rank 1; an orthogonal one, its smaller side
    rank_one, square = UpdateStats((0,)), UpdateStats((0,))
    w = nn.Parameter(torch.zeros(6, 4))
    holder = nn.Module()
    holder.w = w
    for stats, delta, expected in [(rank_one, torch.outer(torch.ones(6), torch.arange(4.0)), 1.0),
                                   (square, torch.eye(6)[:, :4], 4.0)]:
        stats.before(0, holder)
        with torch.no_grad():
            w.add_(delta)
        assert abs(stats.after(0, holder, None, None)["w"]["stable_rank"] - expected) < 1e-5


def step_without_gradient(factory) -> tuple[torch.Tensor, torch.Tensor]:
    """A matrix of the tiny model before and after one step whose gradients are all 0."""
    model = tiny_model()
    optimizer = factory(model)
    w = next(p for p in model.parameters() if p.dim() == 2)
    before = w.detach().clone()
    for p in model.parameters():
        p.grad = torch.zeros_like(p)
    optimizer.step()
    return before, w.detach()


def test_adamw_shrinks_a_weight_without_gradient_by_one_minus_rate_times_decay():
    """Decoupled decay acts outside Adam's rescaling: a weight whose gradient is 0 is only
    scaled, by 1 - lr * decay per step, however small its (zero) second moment."""
    before, after = step_without_gradient(AdamW(1e-2, weight_decay=0.1))
    torch.testing.assert_close(after, before * (1 - 1e-2 * 0.1))
    # Adam's coupled L2 instead divides the decay by sqrt(v): with no gradient but the
    # penalty's, the first step moves every weight by the full rate
    before, after = step_without_gradient(Adam(1e-2, l2=0.1))
    moved = (after - before).abs()[before != 0]
    torch.testing.assert_close(moved, torch.full_like(moved, 1e-2), rtol=1e-3, atol=0)
