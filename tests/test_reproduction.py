"""Seed data is current while the build reproduces its stored run: the rule on real training.

A tiny language model is trained on the corpus and its validation loss stored as a seed run,
with the fingerprint of a notebook that trains it. Then the experiment is run again after
three kinds of change. The first two changed the fingerprint, so the old rule (stale on any
hash change) called the data stale; the third is a change of the experiment itself:

- a presentation-only edit of a code cell (a print's format): current;
- a library function rewritten to compute the same numbers another way: current;
- twice the training steps: stale, naming the row that moved.
"""

import json
import pathlib

import pytest
import torch

import mlexp
from mlexp import transformer
from mlexp.evidence import provenance
from mlexp.evidence.seedtable import REPRODUCTION_TOLERANCE, assess
from mlexp.training.data import load_char_corpus

pytestmark = pytest.mark.slow

ROWS = {"validation loss": "val"}
CELL = """history = mlexp.train_lm(model, train_ids, val_ids, steps=STEPS, block_size=32)
print(f"validation loss {history['val'][-1]:.3f}")
"""


def notebook(tmp_path: pathlib.Path, cell: str) -> pathlib.Path:
    path = tmp_path / "chapter.ipynb"
    cells = [{"cell_type": "code", "source": cell, "metadata": {}, "outputs": []}]
    path.write_text(json.dumps({"cells": cells}))
    return path


def experiment(steps: int) -> dict[str, float]:
    """The chapter's experiment: a small model trained for ``steps``, scored on the validation
    text."""
    torch.set_num_threads(1)
    tok, train_ids, val_ids = load_char_corpus()
    mlexp.manual_seed(0)
    model = transformer.TransformerLM(tok.vocab_size, dim=32, n_layers=2, n_heads=2)
    history = mlexp.train_lm(model, train_ids[:50_000], val_ids[:10_000], steps=steps,
                             block_size=32, batch_size=8, eval_every=steps, eval_batches=4,
                             log=False, device="cpu")
    return {"val": history["val"][-1]}


def here(nb: pathlib.Path, **changes) -> dict:
    machine = provenance.machine(torch.device("cpu"))
    return {"fingerprint": {**provenance.fingerprint(nb), **changes}, "machine": machine}


@pytest.fixture(scope="module")
def stored_run(tmp_path_factory):
    """The stored seed run of offset 0: 40 steps, and the fingerprint it was made with."""
    nb = notebook(tmp_path_factory.mktemp("stored"), CELL)
    made = here(nb)
    return {"offset": 0, "values": experiment(40), "provenance": made}


def test_a_presentation_only_edit_of_a_code_cell_keeps_the_data_current(stored_run, tmp_path):
    nb = notebook(tmp_path, CELL.replace(":.3f}", ":.4f}"))
    now = here(nb)
    assert now["fingerprint"]["code"] != stored_run["provenance"]["fingerprint"]["code"]
    a = assess(now, ROWS, experiment(40), [stored_run], offset=0)
    assert a.changed == ["the chapter's code cells"]  # what the old rule called stale
    assert a.current and a.moved == [] and a.drift[0] <= REPRODUCTION_TOLERANCE


def test_a_library_rewrite_that_computes_the_same_numbers_keeps_the_data_current(
        stored_run, tmp_path, monkeypatch):
    """RoPE's rotation rewritten with complex numbers: the same rotation, other rounding."""

    def rotate_complex(x, cos, sin):
        half = x.shape[-1] // 2
        z = torch.complex(x[..., :half], x[..., half:]) * torch.complex(cos, sin)
        return torch.cat([z.real, z.imag], dim=-1)

    monkeypatch.setattr(transformer, "rotate_pairs", rotate_complex)
    nb = notebook(tmp_path, CELL)
    now = here(nb, mlexp="a rewritten library")
    values = experiment(40)
    a = assess(now, ROWS, values, [stored_run], offset=0)
    assert a.changed == ["the mlexp library"]
    assert a.current, a.moved
    assert values != stored_run["values"] or a.drift[0] == 0.0


def test_twice_the_training_steps_makes_the_data_stale(stored_run, tmp_path):
    nb = notebook(tmp_path, CELL.replace("STEPS", "2 * STEPS"))
    a = assess(here(nb), ROWS, experiment(80), [stored_run], offset=0)
    assert not a.current and a.checked == []
    (key, then, now), = a.moved
    assert key == "val" and then - now > REPRODUCTION_TOLERANCE
    assert "validation loss moved by" in a.moved_rows({"val": "validation loss"})
