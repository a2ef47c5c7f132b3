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
    assert set(history) >= {"step", "train", "val", "time"}
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
