"""The schedules of Chapter 10, step by step against PyTorch's own
schedulers over whole runs, and the branches they allow."""

import math
import pickle

import pytest
import torch
from torch.optim.lr_scheduler import (
    ConstantLR,
    CosineAnnealingLR,
    LambdaLR,
    LinearLR,
    SequentialLR,
)

import mlexp
from mlexp.schedules import (
    WSD,
    Constant,
    InverseSqrt,
    StepDecay,
    WarmupCosine,
    WarmupLinear,
    cosine,
    linear,
    one_minus_sqrt,
)
from mlexp.training.recipe import WarmupCosine as PartOne
from mlexp.transformer import TransformerLM

PEAK, STEPS, WARMUP = 3e-3, 600, 40


def torch_rates(make, steps=STEPS, peak=PEAK):
    """The rate PyTorch's scheduler ``make(optimizer)`` sets before each of
    ``steps`` updates."""
    optimizer = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=peak)
    scheduler = make(optimizer)
    rates = []
    for _ in range(steps):
        rates.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        scheduler.step()
    return rates


def ours(schedule, steps=STEPS, peak=PEAK):
    return [schedule(s, steps, peak) for s in range(steps)]


def warm(optimizer, warmup=WARMUP):
    # (step + 1) / warmup of the peak: from 1/warmup to 1 over warmup - 1 steps
    return LinearLR(optimizer, 1 / warmup, 1.0, total_iters=warmup - 1)


def then(first, *rest, at):
    """PyTorch's scheduler ``first`` until the steps in ``at``, then each of
    ``rest`` in turn."""
    return lambda o: SequentialLR(o, [first(o), *(r(o) for r in rest)], milestones=at)


def hold(factor):
    return lambda o: ConstantLR(o, factor=factor, total_iters=10 * STEPS)


def close(a, b):
    return len(a) == len(b) and all(math.isclose(x, y, rel_tol=1e-9, abs_tol=1e-15) for x, y in zip(a, b))


CASES = {
    "constant": (Constant(WARMUP), then(warm, hold(1.0), at=[WARMUP])),
    "cosine to a tenth (Part I's)": (
        WarmupCosine(WARMUP, 0.1),
        then(warm, lambda o: CosineAnnealingLR(o, STEPS - WARMUP, eta_min=0.1 * PEAK), at=[WARMUP]),
    ),
    "cosine to zero": (
        WarmupCosine(WARMUP, 0.0),
        then(warm, lambda o: CosineAnnealingLR(o, STEPS - WARMUP), at=[WARMUP]),
    ),
    "linear to zero": (
        WarmupLinear(WARMUP),
        then(warm, lambda o: LinearLR(o, 1.0, 0.0, total_iters=STEPS - WARMUP), at=[WARMUP]),
    ),
    "step decay (DeepSeek's)": (
        StepDecay(WARMUP),
        then(warm, hold(1.0), hold(0.316), hold(0.1), at=[WARMUP, 480, 540]),
    ),
    "WSD, linear": (
        WSD(WARMUP, 0.2),
        then(warm, hold(1.0), lambda o: LinearLR(o, 1.0, 0.0, total_iters=120), at=[WARMUP, 480]),
    ),
    "WSD, cosine": (
        WSD(WARMUP, 0.2, cosine),
        then(warm, hold(1.0), lambda o: CosineAnnealingLR(o, 120), at=[WARMUP, 480]),
    ),
}


@pytest.mark.parametrize("name", CASES)
def test_each_schedule_equals_pytorchs_over_a_whole_run(name):
    schedule, reference = CASES[name]
    assert close(ours(schedule), torch_rates(reference))


def test_inverse_sqrt_is_the_original_transformers_schedule_scaled_to_its_peak():
    """Vaswani et al.'s rate d^-0.5 * min(s^-0.5, s * w^-1.5) at update s = step + 1, over its value
    at the end of warm-up, times the peak."""
    d, w = 512, WARMUP
    noam = lambda s: d**-0.5 * min(s**-0.5, s * w**-1.5)  # noqa: E731
    reference = lambda o: LambdaLR(o, lambda step: noam(step + 1) / noam(w))  # noqa: E731
    assert close(ours(InverseSqrt(w)), torch_rates(reference))


def test_the_default_is_part_ones_schedule_to_the_last_bit():
    assert WarmupCosine is PartOne
    assert ours(WarmupCosine()) == ours(PartOne(40, 0.1))


def test_every_decay_branches_from_the_constant_run_at_its_start():
    """Bit for bit equal to the constant run before they decay: what ``train_lm(start=...)`` checks
    before a branch continues a saved run."""
    trunk = ours(Constant(WARMUP))
    for schedule in (StepDecay(WARMUP), WSD(WARMUP, 0.2), WSD(WARMUP, 0.2, one_minus_sqrt)):
        assert ours(schedule)[:480] == trunk[:480] and ours(schedule)[481] < PEAK
    for budget in (150, 300, 450, 600):  # WSD's budgets from one run: 20% decays from 120, 240, ...
        start = budget - WSD().decay_steps(budget)
        assert start == round(0.8 * budget)
        assert ours(WSD(WARMUP, 0.2), budget)[:start] == trunk[:start]


def test_wsd_ends_one_step_short_of_zero():
    """The brief's check: the peak at step 480 of 600, and a 120th of it at the last step."""
    rates = ours(WSD(WARMUP, 0.2))
    assert rates[479] == rates[480] == PEAK and rates[599] == pytest.approx(PEAK / 120, rel=1e-12)


@pytest.mark.parametrize("shape", [linear, one_minus_sqrt, cosine])
def test_each_decay_shape_falls_from_one_toward_zero(shape):
    points = [shape(p / 100) for p in range(101)]
    assert points[0] == 1.0 and abs(points[-1]) < 1e-12
    assert all(a > b for a, b in zip(points, points[1:]))


def test_one_minus_sqrt_drops_faster_than_linear_at_first():
    assert one_minus_sqrt(0.25) == 0.5 < linear(0.25)


def test_schedules_survive_pickling_for_the_worker_processes():
    for schedule, _ in CASES.values():
        copy = pickle.loads(pickle.dumps(schedule))
        assert ours(copy) == ours(schedule) and repr(copy) == repr(schedule)


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda: WarmupLinear(40, floor=1.5), "floor=1.5 is a fraction of the peak"),
        (lambda: WarmupCosine(40, floor=-0.1), "floor=-0.1 is a fraction of the peak"),
        (lambda: Constant(-1), "warmup=-1: give a number of steps"),
        (lambda: WSD(40, decay=1.5), "decay=1.5 is the fraction of the run"),
        (lambda: WSD(40, decay=0.0), "give a value above 0"),
        (lambda: StepDecay(40, at=(0.9, 0.8)), "increasing fractions"),
        (lambda: StepDecay(40, at=(0.8,), factors=(0.3, 0.1)), "one factor per drop"),
        (lambda: StepDecay(40, factors=(0.3, 2.0)), "factor=2.0 is a fraction of the peak"),
        (lambda: InverseSqrt(0), "give at least 1 step"),
    ],
)
def test_bad_settings_are_refused_with_what_to_do(make, message):
    with pytest.raises(ValueError, match=message):
        make()


def test_a_decay_longer_than_the_run_is_refused_when_the_run_is_known():
    with pytest.raises(ValueError, match="do not fit in the run; shorten the warm-up or the decay"):
        WSD(40, decay=0.9)(0, 100, PEAK)


def test_train_lm_branches_each_decay_from_a_constant_run(corpus):
    """The chapter's use: one constant run saves a checkpoint, and a WSD or step decay continues
    from it, accepted because their rates before it are the constant run's."""
    tok, train_ids, val_ids = corpus
    run = dict(steps=20, block_size=16, eval_every=10, log=False, eval_batches=2, batch_size=8, device="cpu")

    def build():
        mlexp.manual_seed(0)
        return TransformerLM(tok.vocab_size, dim=32, n_layers=2, n_heads=4)

    trunk = mlexp.train_lm(build(), train_ids, val_ids, schedule=Constant(4), save_at=[16], **run)
    for decay in (WSD(4, 0.2), StepDecay(4, at=(0.8, 0.9))):
        branch = mlexp.train_lm(build(), train_ids, val_ids, schedule=decay, start=trunk["checkpoints"][16], **run)
        assert branch["lr"] == [[decay(s, 20, 3e-3)] * len(branch["lr"][0]) for s in range(16, 20)]
        assert branch["batch_loss"][0] == trunk["batch_loss"][16]  # the same model and batch at step 16
    with pytest.raises(ValueError, match="another length or schedule"):  # decays before the checkpoint
        mlexp.train_lm(build(), train_ids, val_ids, schedule=WarmupCosine(4), start=trunk["checkpoints"][16], **run)
