"""The training recipe passed into train_lm: Part I's defaults bit for bit, each part changing only
what it should, checkpoints that resume exactly, and bad input refused before any training."""

import importlib.util
import math
import pathlib

import pytest
import torch
import torch.nn.functional as F

import mlexp
from mlexp.initialization import Normal
from mlexp.loss import CrossEntropy, LabelSmoothing, LogitStats
from mlexp.optimizers import AdamW, UpdateRatio
from mlexp.schedules import WarmupCosine
from mlexp.training.checkpoint import Checkpoint
from mlexp.training.train import BATCH_SEED, windows
from mlexp.transformer import TransformerLM

FROZEN = pathlib.Path(__file__).parent / "frozen" / "part1_train.py"


def part1_loop():
    """The loop as Part I ran it, from its frozen copy."""
    spec = importlib.util.spec_from_file_location("part1_train", FROZEN)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def build(vocab, make_ffn=None, dim=32):
    mlexp.manual_seed(0)
    return TransformerLM(vocab, dim=dim, n_layers=2, n_heads=4, make_ffn=make_ffn)


RUN = dict(steps=24, block_size=16, eval_every=8, log=False, eval_batches=2, batch_size=8, device="cpu")


def same_weights(a, b):
    return all(torch.equal(x, y) for x, y in zip(a.state_dict().values(), b.state_dict().values()))


@pytest.mark.parametrize(
    "moe, settings",
    [(False, {}), (True, {}), (False, dict(lr=1e-2, warmup=0)), (False, dict(lr=1e-3, warmup=5, batch_size=4))],
    ids=["dense", "moe", "chapter 6's no warm-up", "chapter 3's fine-tune"],
)
def test_defaults_are_part_one_loop_bit_for_bit(corpus, moe, settings):
    """Part I's stored seed data rests on this: the default recipe computes exactly what the old loop did,
    including Chapter 5's balancing loss and the settings Part I's chapters pass."""
    tok, train_ids, val_ids = corpus
    make_ffn = (lambda d: mlexp.MoE(d, n_experts=4, top_k=2)) if moe else None
    old_model, new_model = build(tok.vocab_size, make_ffn), build(tok.vocab_size, make_ffn)
    run = {**RUN, **settings}
    old = part1_loop().train_lm(old_model, train_ids, val_ids, **run)
    new = mlexp.train_lm(new_model, train_ids, val_ids, **run)
    assert new["train"] == old["train"] and new["val"] == old["val"]
    assert same_weights(old_model, new_model)


def test_the_defaults_spelled_out_are_the_defaults(corpus):
    tok, train_ids, val_ids = corpus
    a, b = build(tok.vocab_size), build(tok.vocab_size)
    default = mlexp.train_lm(a, train_ids, val_ids, **RUN)
    spelled = mlexp.train_lm(
        b, train_ids, val_ids, objective=CrossEntropy(), optimizer=AdamW(3e-3, weight_decay=0.1),
        schedule=WarmupCosine(40, floor=0.1), clip=1.0, **RUN,
    )
    assert default["val"] == spelled["val"] and same_weights(a, b)


def test_default_schedule_keeps_part_one_arithmetic():
    """Every rate of a 600-step run at 3e-3 equals the old loop's; a bare multiplier of the peak would not."""
    old = part1_loop()._lr_at
    schedule = WarmupCosine()
    assert all(schedule(s, 600, 3e-3) == old(s, 600, 3e-3, 40) for s in range(600))
    assert all(WarmupCosine(0)(s, 300, 1e-2) == old(s, 300, 1e-2, 0) for s in range(300))
    multiplied = [3e-3 * ((s + 1) / 40) for s in range(40)]
    assert sum(m != old(s, 600, 3e-3, 40) for s, m in enumerate(multiplied)) == 19


def test_history_records_each_steps_rate_and_batch_loss(corpus):
    tok, train_ids, val_ids = corpus
    history = mlexp.train_lm(build(tok.vocab_size), train_ids, val_ids, schedule=WarmupCosine(5, 0.0), **RUN)
    assert history["lr"] == [[WarmupCosine(5, 0.0)(s, 24, 3e-3)] * 2 for s in range(24)]
    assert len(history["batch_loss"]) == 24 and history["batch_loss"][-1] < history["batch_loss"][0]
    assert 0 < history["lr"][-1][0] < history["lr"][5][0] / 100  # the last update before zero


class TwoRates:
    """A factory that gives the embedding its own base rate (module level, so a worker can load it)."""

    def __init__(self, embed_lr):
        self.embed_lr = embed_lr

    def __call__(self, model):
        rest = [p for n, p in model.named_parameters() if not n.startswith("embed")]
        return torch.optim.AdamW(
            [{"params": rest}, {"params": model.embed.parameters(), "lr": self.embed_lr}],
            lr=3e-3, weight_decay=0.0,
        )


def test_a_factorys_groups_keep_their_own_rates(corpus):
    """The old loop overwrote every group's rate; now a group at rate 0 does not move, and each group's
    recorded rates follow the schedule from its own base."""
    tok, train_ids, val_ids = corpus
    model = build(tok.vocab_size)
    embed, head = model.embed.weight.clone(), model.head.weight.clone()
    history = mlexp.train_lm(model, train_ids, val_ids, optimizer=TwoRates(0.0), **RUN)
    assert torch.equal(model.embed.weight, embed) and not torch.equal(model.head.weight, head)
    schedule = WarmupCosine()
    assert history["lr"] == [[schedule(s, 24, 3e-3), 0.0] for s in range(24)]


def test_an_objectives_loss_is_what_trains(corpus):
    """The first batch's recorded loss is the objective on the untrained model's logits; evaluation
    stays plain cross-entropy."""
    tok, train_ids, val_ids = corpus
    model = build(tok.vocab_size)
    generator = torch.Generator().manual_seed(mlexp.shifted(BATCH_SEED))
    x, y = windows(train_ids, torch.randint(len(train_ids) - 16, (8,), generator=generator), 16)
    with torch.no_grad():
        logits, plain = model(x, y)
    smoothed = F.cross_entropy(logits.flatten(0, 1), y.flatten(), label_smoothing=0.2)
    history = mlexp.train_lm(model, train_ids, val_ids, objective=LabelSmoothing(0.2), **RUN)
    assert history["batch_loss"][0] == pytest.approx(smoothed.item(), rel=1e-6)
    assert abs(smoothed.item() - plain.item()) > 1e-3
    baseline = mlexp.train_lm(build(tok.vocab_size), train_ids, val_ids, **RUN)
    assert history["val"][0] == baseline["val"][0]  # the same untrained model, scored the same way
    assert history["val"][-1] != baseline["val"][-1]


def test_init_sets_the_start_and_the_measure_sees_it(corpus):
    tok, train_ids, val_ids = corpus
    seen = {}

    class FirstWeights:
        def before(self, step, model):
            seen.setdefault(step, model.embed.weight.std().item())

        def after(self, step, model, logits, loss):
            return None

    mlexp.train_lm(build(tok.vocab_size, dim=64), train_ids, val_ids, init=Normal(0.02), measure=FirstWeights(), **RUN)
    assert seen[0] == pytest.approx(0.02, rel=0.05)  # PyTorch's default embedding has std 1


def test_measures_come_back_per_step(corpus):
    tok, train_ids, val_ids = corpus
    model = build(tok.vocab_size)
    history = mlexp.train_lm(model, train_ids, val_ids, measure=UpdateRatio(every=8), **RUN)
    assert [m["step"] for m in history["measures"]] == [0, 8, 16]
    first = history["measures"][0]
    assert set(first) == {"step"} | {n for n, p in model.named_parameters() if p.dim() >= 2}
    assert all(0 < v < 1 for k, v in first.items() if k != "step")
    stats = mlexp.train_lm(build(tok.vocab_size), train_ids, val_ids, measure=LogitStats(), **RUN)["measures"]
    assert len(stats) == 24 and all(m["log_z"] > 0 and m["max_logit"] > 0 for m in stats)


def test_a_resumed_run_equals_the_uninterrupted_one(corpus):
    tok, train_ids, val_ids = corpus
    whole_model = build(tok.vocab_size)
    whole = mlexp.train_lm(whole_model, train_ids, val_ids, save_at=[10], **RUN)
    checkpoint = whole["checkpoints"][10]
    assert isinstance(checkpoint, Checkpoint) and checkpoint.step == 10
    resumed_model = build(tok.vocab_size)
    resumed = mlexp.train_lm(resumed_model, train_ids, val_ids, start=checkpoint, **RUN)
    assert same_weights(whole_model, resumed_model)
    assert resumed["step"] == [10, 16, 24] and resumed["val"][1:] == whole["val"][2:]
    assert resumed["batch_loss"] == whole["batch_loss"][10:] and resumed["lr"] == whole["lr"][10:]


@pytest.mark.xfail(strict=True, reason="train_lm loads a checkpoint's optimizer state without copying it, "
                   "so training from it changes it; fixing train.py re-executes every chapter, so the fix "
                   "waits for the next re-execution of all of them (Chapter 10 branches from copies meanwhile)")
def test_training_from_a_checkpoint_leaves_it_as_it_was(corpus):
    """Two branches from one checkpoint must start from the same state: the second gets the
    same first update as the first."""
    tok, train_ids, val_ids = corpus
    trunk = mlexp.train_lm(build(tok.vocab_size), train_ids, val_ids, save_at=[10], **RUN)
    checkpoint = trunk["checkpoints"][10]
    first = mlexp.train_lm(build(tok.vocab_size), train_ids, val_ids, start=checkpoint, **RUN)
    second = mlexp.train_lm(build(tok.vocab_size), train_ids, val_ids, start=checkpoint, **RUN)
    assert second["batch_loss"] == first["batch_loss"] == trunk["batch_loss"][10:]


def test_a_branch_may_change_the_schedule_after_the_checkpoint(corpus):
    """Chapter 10's branches: a decay from a constant run, started where the constant rate still held."""
    tok, train_ids, val_ids = corpus
    constant = WarmupCosine(1, floor=1.0)
    trunk = mlexp.train_lm(build(tok.vocab_size), train_ids, val_ids, schedule=constant, save_at=[12], **RUN)
    branch = mlexp.train_lm(
        build(tok.vocab_size), train_ids, val_ids, schedule=Decay(), start=trunk["checkpoints"][12], **RUN,
    )
    assert branch["lr"][0][0] == pytest.approx(3e-3) and branch["lr"][-1][0] < 3e-4


class Decay:
    """Constant until step 12, then linear to zero (module level: picklable)."""

    def __call__(self, step, steps, base_lr):
        return base_lr if step < 12 else base_lr * (steps - step) / (steps - 12)


class Negative:
    def __call__(self, step, steps, base_lr):
        return -base_lr if step == 7 else base_lr


class NotANumber:
    def __call__(self, step, steps, base_lr):
        return math.nan


class Nothing:
    def __call__(self, step, steps, base_lr):
        return None


def no_optimizer(model):
    return [p for p in model.parameters()]


def only_the_head(model):
    return torch.optim.SGD(model.head.parameters(), lr=0.1)


@pytest.mark.parametrize(
    "kwargs, error, message",
    [
        (dict(schedule=Negative()), ValueError, "rate -0.003 at step 7"),
        (dict(schedule=NotANumber()), ValueError, "rate nan at step 0"),
        (dict(schedule=Nothing()), ValueError, "rate None at step 0"),
        (dict(optimizer=no_optimizer), TypeError, "returned a list"),
        (dict(optimizer=only_the_head), ValueError, r"leaves \d+ trainable parameters out \(embed.weight, .*, \.\.\.\)"),
        (dict(save_at=[0]), ValueError, "give steps from 1 to 24"),
        (dict(start={"step": 3}), TypeError, "pass a Checkpoint"),
    ],
)
def test_bad_recipes_are_refused_before_any_training(corpus, kwargs, error, message):
    tok, train_ids, val_ids = corpus
    model = build(tok.vocab_size)
    before = model.head.weight.clone()
    with pytest.raises(error, match=message):
        mlexp.train_lm(model, train_ids, val_ids, **{**RUN, **kwargs})
    assert torch.equal(model.head.weight, before)


def test_a_checkpoint_of_another_model_or_run_is_refused(corpus):
    tok, train_ids, val_ids = corpus
    run = {**RUN, "warmup": 4}
    checkpoint = mlexp.train_lm(build(tok.vocab_size), train_ids, val_ids, save_at=[10], **run)["checkpoints"][10]
    with pytest.raises(ValueError, match="another model's weights"):
        mlexp.train_lm(build(tok.vocab_size, dim=64), train_ids, val_ids, start=checkpoint, **run)
    with pytest.raises(ValueError, match="at step 5 .* another length or schedule"):  # its cosine had 24 steps
        mlexp.train_lm(build(tok.vocab_size), train_ids, val_ids, start=checkpoint, **{**run, "steps": 40})
    with pytest.raises(ValueError, match="none left"):
        mlexp.train_lm(build(tok.vocab_size), train_ids, val_ids, start=checkpoint, **{**run, "steps": 10})
    model = build(tok.vocab_size)
    before = model.head.weight.clone()
    with pytest.raises(ValueError, match="groups its parameters or sets them differently"):
        mlexp.train_lm(model, train_ids, val_ids, start=checkpoint, optimizer=AdamW(weight_decay=0.0), **run)
    assert torch.equal(model.head.weight, before)  # refused before the checkpoint's weights were loaded


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda: LabelSmoothing(1.0), "label smoothing takes a share"),
        (lambda: AdamW(lr=0.0), "must be positive"),
        (lambda: AdamW(weight_decay=-0.1), "give 0 for no decay"),
        (lambda: WarmupCosine(floor=1.5), "fraction of the peak"),
        (lambda: WarmupCosine(warmup=-1), "0 for no warm-up"),
        (lambda: Normal(std=0.0), "positive standard deviation"),
    ],
)
def test_bad_settings_say_what_to_do(make, message):
    with pytest.raises(ValueError, match=message):
        make()



def test_side_by_side_gives_each_run_its_own_recipe_in_workers(corpus, two_threads):
    """Per-run schedules, optimizers and inits reach worker processes and give what each gets alone."""
    from mlexp.training.side_by_side import _sendable

    from mlexp.training.side_by_side import cpu_budget, plan_workers

    if plan_workers(2, cpu_budget())[0] < 2:
        pytest.skip("one CPU: train_side_by_side has no second worker here")
    tok, train_ids, val_ids = corpus
    recipe = {
        "a": dict(schedule=WarmupCosine(4), optimizer=TwoRates(0.0), init=None),
        "b": dict(schedule=Decay(), optimizer=AdamW(1e-3), init=Normal(0.05)),
    }
    assert all(_sendable(r) is not None for r in recipe.values())  # so they train in workers
    models = {name: build(tok.vocab_size) for name in recipe}
    histories = mlexp.train_side_by_side(
        models, train_ids, val_ids, measure=LogitStats(),
        **{key: {n: r[key] for n, r in recipe.items()} for key in ("schedule", "optimizer", "init")},
        **{k: v for k, v in RUN.items() if k != "device"},
    )
    torch.set_num_threads(1)  # what each of the two workers had
    for name, kwargs in recipe.items():
        alone_model = build(tok.vocab_size)
        alone = mlexp.train_lm(alone_model, train_ids, val_ids, measure=LogitStats(), **kwargs, **RUN)
        assert histories[name]["val"] == alone["val"] and histories[name]["lr"] == alone["lr"]
        assert histories[name]["measures"] == alone["measures"]
        assert same_weights(models[name], alone_model)
    assert histories["a"]["lr"] != histories["b"]["lr"]


def test_side_by_side_needs_a_value_for_every_model(corpus):
    tok, train_ids, val_ids = corpus
    models = {"a": build(tok.vocab_size), "b": build(tok.vocab_size)}
    with pytest.raises(ValueError, match=r"schedule is given per model but not for \['b'\]"):
        mlexp.train_side_by_side(models, train_ids, val_ids, schedule={"a": Decay()}, **RUN)


def test_a_notebook_schedule_trains_here_instead_of_failing_in_a_worker(corpus, two_threads):
    tok, train_ids, val_ids = corpus
    models = {"a": build(tok.vocab_size), "b": build(tok.vocab_size)}
    histories = mlexp.train_side_by_side(
        models, train_ids, val_ids, schedule=lambda step, steps, lr: lr / 2, **{k: v for k, v in RUN.items() if k != "device"}
    )
    from mlexp.training.side_by_side import _sendable

    assert _sendable({"schedule": lambda step, steps, lr: lr}) is None
    assert histories["a"]["lr"][0] == [1.5e-3, 1.5e-3] and histories["a"]["val"] == histories["b"]["val"]


def test_per_model_block_size_sets_each_models_context(corpus, two_threads):
    tok, train_ids, val_ids = corpus
    models = {"short": build(tok.vocab_size), "long": build(tok.vocab_size)}
    run = {k: v for k, v in RUN.items() if k not in ("device", "block_size")}
    mlexp.train_side_by_side(models, train_ids, val_ids, block_size={"short": 8, "long": 16}, **run)
    assert models["short"].context_length == 8 and models["long"].context_length == 16


def test_a_notebooks_own_class_stays_in_this_process(monkeypatch):
    """Pickle names a notebook's class as __main__'s, which a spawned worker lacks; a script's it has."""
    import sys
    import types

    from mlexp.training.side_by_side import _sendable

    notebook = types.ModuleType("__main__")
    Schedule = type("Schedule", (), {"__module__": "__main__", "__call__": lambda self, s, n, lr: lr})
    notebook.Schedule = Schedule
    monkeypatch.setitem(sys.modules, "__main__", notebook)
    assert _sendable(Schedule()) is None
    notebook.__file__ = "script.py"
    assert _sendable(Schedule()) is not None


class ScaledReadout(torch.nn.Module):
    """What a parameterization's init can swap in: the readout times a multiplier."""

    def __init__(self, head, multiplier):
        super().__init__()
        self.head, self.multiplier = head, multiplier

    def forward(self, x):
        return self.head(x) * self.multiplier


class ReadoutMultiplier:
    def __call__(self, model):
        model.head = ScaledReadout(model.head, 0.0)


def test_init_can_swap_in_a_readout_multiplier_before_the_optimizer_is_built(corpus):
    tok, train_ids, val_ids = corpus
    history = mlexp.train_lm(build(tok.vocab_size), train_ids, val_ids, init=ReadoutMultiplier(), **RUN)
    assert history["val"][0] == pytest.approx(math.log(tok.vocab_size), rel=1e-6)  # zero logits: uniform


def test_part_one_runs_load_none_of_part_twos_recipe_modules():
    """A Part I kernel imports mlexp and trains with the defaults; the
    modules its run loads are the inputs of its execution record, so an
    edit to the loss, optimizer or schedule chapters' modules must not be
    among them, or every Part I chapter would execute again."""
    import subprocess
    import sys

    code = (
        "import sys, torch, mlexp\n"
        "from mlexp.transformer import TransformerLM\n"
        "ids = torch.randint(0, 8, (400,))\n"
        "mlexp.train_lm(TransformerLM(8, dim=8, n_layers=1, n_heads=2), ids, ids, steps=2,"
        " block_size=8, batch_size=2, log=False)\n"
        "print(' '.join(m for m in sys.modules if m.startswith('mlexp')))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert "mlexp.training.recipe" in out
    for module in ["mlexp.loss", "mlexp.optimizers", "mlexp.schedules"]:
        assert module not in out, f"{module} is loaded by a Part I run"
