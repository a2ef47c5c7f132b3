"""train_lm and the seeds: it learns, it reproduces, and the offset changes the numbers."""

import pytest
import torch

import mlexp
from mlexp.transformer import TransformerLM


def short_run(corpus, steps=30, **kwargs):
    tok, train_ids, val_ids = corpus
    mlexp.manual_seed(0)
    model = TransformerLM(tok.vocab_size, dim=32, n_layers=2, n_heads=4)
    history = mlexp.train_lm(
        model, train_ids, val_ids, steps=steps, block_size=32, eval_every=10, log=False, eval_batches=2, **kwargs
    )
    return model, history


def test_history_and_loss_goes_down(corpus):
    model, history = short_run(corpus)
    assert history["step"] == [0, 10, 20, 30]
    assert set(history) >= {"step", "train", "val", "time", "eval_time"}
    assert all(0 < e < t for e, t in zip(history["eval_time"][1:], history["time"][1:]))
    assert history["val"][-1] < history["val"][0] - 0.5
    assert model.context_length == 32


def test_log_lines_have_the_chapter_format(corpus, capsys):
    short_run(corpus, steps=5)
    lines = capsys.readouterr().out.splitlines()
    assert lines == []  # log=False prints nothing
    tok, train_ids, val_ids = corpus
    model = TransformerLM(tok.vocab_size, dim=32, n_layers=1, n_heads=4)
    mlexp.train_lm(model, train_ids, val_ids, steps=4, block_size=16, eval_every=2, eval_batches=1)
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 3
    assert lines[1].startswith("step    2  train ") and "  val " in lines[1] and lines[1].endswith("s)")


def test_same_seed_same_losses_bit_for_bit(corpus):
    _, first = short_run(corpus, steps=20)
    _, second = short_run(corpus, steps=20)
    assert first["train"] == second["train"] and first["val"] == second["val"]


def test_seed_offset_changes_the_numbers_and_reproduces(corpus, monkeypatch):
    _, base = short_run(corpus, steps=20)
    monkeypatch.setenv("MLEXP_SEED_OFFSET", "1")
    _, shifted = short_run(corpus, steps=20)
    _, again = short_run(corpus, steps=20)
    assert shifted["val"] != base["val"]
    assert shifted["val"] == again["val"]
    assert mlexp.shifted(5) == 6


def test_bad_seed_offset_is_explained(monkeypatch):
    monkeypatch.setenv("MLEXP_SEED_OFFSET", "one")
    with pytest.raises(ValueError, match="MLEXP_SEED_OFFSET"):
        mlexp.manual_seed(0)


def test_block_size_longer_than_validation_split(corpus):
    tok, train_ids, _ = corpus
    model = TransformerLM(tok.vocab_size, dim=32, n_layers=1, n_heads=4)
    with pytest.raises(ValueError, match="val_ids has 50 tokens"):
        mlexp.train_lm(model, train_ids, train_ids[:50], steps=1, block_size=64)



def test_side_by_side_matches_one_after_another(corpus, two_threads):
    """Workers give each model the numbers it gets alone with the same threads, and its weights."""
    from mlexp.training.side_by_side import plan_workers

    tok, train_ids, val_ids = corpus

    def build(rope):
        mlexp.manual_seed(0)
        return TransformerLM(tok.vocab_size, dim=32, n_layers=1, n_heads=4, rope=rope)

    kwargs = dict(steps=10, block_size=16, eval_every=5, log=False, eval_batches=1)
    models = {"rope": build(True), "no rope": build(False)}
    side_by_side = mlexp.train_side_by_side(models, train_ids, val_ids, **kwargs)
    torch.set_num_threads(1)  # what each of the two workers had
    alone = {name: build(name == "rope") for name in models}
    one_after_another = {name: mlexp.train_lm(model, train_ids, val_ids, **kwargs) for name, model in alone.items()}
    assert list(side_by_side) == ["rope", "no rope"]
    for name in models:
        assert side_by_side[name]["val"] == one_after_another[name]["val"]
        assert side_by_side[name]["train"] == one_after_another[name]["train"]
        assert all(torch.equal(a, b) for a, b in zip(models[name].state_dict().values(), alone[name].state_dict().values()))
        assert models[name].context_length == 16
    assert side_by_side["rope"]["val"] != side_by_side["no rope"]["val"]
    assert plan_workers(6, 2) == (2, 1) and plan_workers(6, 16) == (6, 2) and plan_workers(6, 1) == (1, 1)


def test_side_by_side_gives_each_model_its_own_steps_and_batch_size(corpus, two_threads):
    """The equal-text controls: per-model steps and batch sizes reach each model's training."""
    tok, train_ids, val_ids = corpus

    def build():
        mlexp.manual_seed(0)
        return TransformerLM(tok.vocab_size, dim=32, n_layers=1, n_heads=4)

    plan = {"big batches": (4, 8), "small batches": (6, 3)}  # name -> (steps, batch size)
    kwargs = dict(block_size=16, eval_every=2, log=False, eval_batches=1)
    models = {name: build() for name in plan}
    histories = mlexp.train_side_by_side(
        models, train_ids, val_ids, steps={n: s for n, (s, _) in plan.items()},
        batch_size={n: b for n, (_, b) in plan.items()}, **kwargs,
    )
    torch.set_num_threads(1)
    for name, (steps, batch) in plan.items():
        alone = mlexp.train_lm(build(), train_ids, val_ids, steps=steps, batch_size=batch, **kwargs)
        assert histories[name]["step"][-1] == steps
        assert histories[name]["train"] == alone["train"]


def test_side_by_side_trains_unpicklable_models_here(corpus, two_threads):
    """A model class defined in a notebook cannot reach a worker; it trains in this process instead."""
    tok, train_ids, val_ids = corpus

    class Local(TransformerLM):  # defined in a function, so pickle cannot find it by name
        pass

    model = Local(tok.vocab_size, dim=32, n_layers=1, n_heads=4)
    before = model.head.weight.clone()
    histories = mlexp.train_side_by_side({"a": model, "b": Local(tok.vocab_size, dim=32, n_layers=1, n_heads=4)},
                                         train_ids, val_ids, steps=3, block_size=16, log=False, eval_batches=1)
    assert set(histories) == {"a", "b"} and histories["a"]["step"] == [0, 3]
    assert not torch.equal(model.head.weight, before)


@pytest.mark.parametrize(
    "files, cpus",
    [
        ({"cpu.max": "50000 100000\n"}, 1),  # Binder: half a CPU still gets one worker
        ({"cpu.max": "400000 100000\n"}, 4),
        ({"cpu.max": "max 100000\n"}, None),
        ({"cpu/cpu.cfs_quota_us": "200000\n", "cpu/cpu.cfs_period_us": "100000\n"}, 2),  # cgroup v1
        ({"cpu/cpu.cfs_quota_us": "-1\n", "cpu/cpu.cfs_period_us": "100000\n"}, None),
        ({}, None),
    ],
)
def test_container_cpu_quota_caps_the_workers(tmp_path, files, cpus):
    from mlexp.training.side_by_side import cgroup_cpus

    for name, text in files.items():
        (tmp_path / name).parent.mkdir(exist_ok=True)
        (tmp_path / name).write_text(text)
    assert cgroup_cpus(tmp_path) == cpus


def test_side_by_side_gives_each_model_its_own_text(corpus, two_threads):
    """Models reading the text through different tokenizers each train on their own ids."""
    tok, train_ids, val_ids = corpus
    train_text, val_text = tok.decode(train_ids[:20_000]), tok.decode(val_ids[:5_000])
    bpe = mlexp.BPETokenizer.train(train_text, 300)
    splits = {"chars": (tok, train_ids[:20_000], val_ids[:5_000]),
              "bpe": (bpe, bpe.encode(train_text), bpe.encode(val_text))}

    def build(name):
        mlexp.manual_seed(0)
        return TransformerLM(splits[name][0].vocab_size, dim=32, n_layers=1, n_heads=4)

    kwargs = dict(steps=6, block_size=16, eval_every=3, log=False, eval_batches=1)
    models = {name: build(name) for name in splits}
    side_by_side = mlexp.train_side_by_side(
        models, {n: s[1] for n, s in splits.items()}, {n: s[2] for n, s in splits.items()}, **kwargs)
    torch.set_num_threads(1)
    for name, (_, train, val) in splits.items():
        assert side_by_side[name]["val"] == mlexp.train_lm(build(name), train, val, **kwargs)["val"]


def test_evaluation_starts_are_the_windows_train_lm_scores():
    """A baseline scored on evaluation_starts' windows is scored on exactly the models' windows."""
    import copy

    import torch.nn.functional as F

    from mlexp.training.train import evaluation_starts, windows

    torch.manual_seed(0)
    ids = torch.randint(0, 11, (3_000,))
    train_ids, val_ids = ids[:2_500], ids[2_500:]
    model = TransformerLM(11, dim=16, n_layers=1, n_heads=2)
    untrained = copy.deepcopy(model)
    history = mlexp.train_lm(model, train_ids, val_ids, steps=1, block_size=16, batch_size=4,
                             eval_batches=3, log=False, device="cpu")
    starts = evaluation_starts(train_ids, val_ids, 16, 3 * 4)["val"]
    x, y = windows(val_ids, starts, 16)  # (12, 16) each
    with torch.no_grad():
        logits, _ = untrained(x)
    loss = F.cross_entropy(logits.flatten(0, 1), y.flatten()).item()
    assert history["val"][0] == pytest.approx(loss, rel=1e-5)
