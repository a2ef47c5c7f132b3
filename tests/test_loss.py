"""Chapter 8's objectives, calibration, counting baselines and multi-token
model, each against an outside reference where one exists (PyTorch's own
loss, a formula written out, a brute-force count)."""

import bz2
import contextlib
import io
import json
import math
import pathlib

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import mlexp
from mlexp.baselines import NGram, compressed_bits
from mlexp.calibration import calibration, fit_temperature, held_out_logits
from mlexp.loss import (
    CrossEntropy,
    LabelSmoothing,
    SoftCap,
    SquaredError,
    ZLoss,
    soft_cap,
)
from mlexp.multitoken import MultiTokenLM
from mlexp.training.seeds import SEED_OFFSET_ENV
from mlexp.transformer import TransformerLM

V = 7


def batch(seed=0, b=3, t=5, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(b, t, V, generator=g, dtype=dtype) * 2
    targets = torch.randint(0, V, (b, t), generator=g)
    return logits, targets


def grad_of(objective, logits, targets):
    z = logits.clone().requires_grad_(True)
    objective(z, targets).backward()
    return z.grad


def test_cross_entropy_gradient_is_p_minus_y():
    logits, targets = batch()
    p = logits.softmax(-1)
    y = F.one_hot(targets, V).double()
    n = targets.numel()  # the loss is a mean over positions
    assert torch.allclose(grad_of(CrossEntropy(), logits, targets), (p - y) / n)


def test_squared_error_is_brier_and_its_gradient_fades_with_confidence():
    logits, targets = batch()
    p = logits.softmax(-1)
    y = F.one_hot(targets, V).double()
    loss = SquaredError()(logits, targets)
    assert torch.allclose(loss, (p - y).pow(2).sum(-1).mean())
    # d/dz of sum_k (p_k - y_k)^2 is J^T 2(p - y), J = diag(p) - p p^T
    g = 2 * (p - y)
    expected = p * (g - (p * g).sum(-1, keepdim=True)) / targets.numel()
    assert torch.allclose(grad_of(SquaredError(), logits, targets), expected)
    # a confident mistake: cross-entropy pushes back, squared error barely
    wrong = torch.tensor([[[12.0, 0, 0, 0, 0, 0, 0]]], dtype=torch.float64)
    target = torch.tensor([[1]])
    ce = grad_of(CrossEntropy(), wrong, target).abs().max()
    se = grad_of(SquaredError(), wrong, target).abs().max()
    assert ce > 0.99 and se < 1e-4


def test_label_smoothing_is_pytorchs_and_the_written_out_mix():
    logits, targets = batch()
    eps = 0.1
    ours = LabelSmoothing(eps)(logits, targets)
    flat = logits.flatten(0, 1)
    theirs = F.cross_entropy(flat, targets.flatten(), label_smoothing=eps)
    log_p = flat.log_softmax(-1)
    mix = (1 - eps) * F.nll_loss(log_p, targets.flatten()) + eps * (
        -log_p.mean(-1)
    ).mean()
    assert torch.allclose(ours, theirs) and torch.allclose(ours, mix)
    # its floor: the smoothed target's own entropy, reached at that target
    target = torch.full((V,), eps / V, dtype=torch.float64)
    target[3] += 1 - eps
    at_floor = LabelSmoothing(eps)(target.log().view(1, 1, V), torch.tensor([[3]]))
    entropy = -(target * target.log()).sum()
    assert torch.allclose(at_floor, entropy)


def test_z_loss_adds_the_squared_log_normalizer_that_softmax_ignores():
    logits, targets = batch()
    log_z = logits.logsumexp(-1)
    ce = CrossEntropy()(logits, targets)
    assert torch.allclose(ZLoss(0.0)(logits, targets), ce)
    assert torch.allclose(ZLoss(1e-4)(logits, targets), ce + 1e-4 * log_z.pow(2).mean())
    shifted = logits + 5.0  # the softmax does not see a shift of every logit
    assert torch.allclose(CrossEntropy()(shifted, targets), ce)
    assert torch.allclose(shifted.logsumexp(-1), log_z + 5.0)
    assert ZLoss(1e-2)(shifted, targets) > ZLoss(1e-2)(logits - log_z[..., None], targets)


def test_soft_cap_bounds_logits_and_keeps_their_order():
    logits, targets = batch()
    capped = soft_cap(logits * 50, 30.0)
    assert capped.abs().max() < 30.0
    assert torch.equal(capped.argmax(-1), logits.argmax(-1))
    assert torch.allclose(soft_cap(logits * 1e-3, 30.0), logits * 1e-3)
    expected = CrossEntropy()(soft_cap(logits, 3.0), targets)
    assert torch.allclose(SoftCap(3.0)(logits, targets), expected)


@pytest.mark.parametrize("make, message", [
    (lambda: ZLoss(-1e-4), "must be 0 or more"),
    (lambda: SoftCap(0.0), "positive logit size"),
    (lambda: soft_cap(torch.zeros(2), -1.0), "positive logit size"),
    (lambda: LabelSmoothing(1.0), r"\[0, 1\)"),
    (lambda: NGram(torch.arange(10), 10, 0), "n - 1 >= 0"),
    (lambda: NGram(torch.arange(10), 10, 2, discount=1.0), r"\[0, 1\)"),
    (lambda: compressed_bits("abc", "zip"), "choose one of"),
    (lambda: calibration(torch.zeros(2, 3), torch.zeros(3, dtype=torch.long)), "do not match"),
    (lambda: MultiTokenLM(V, n_future=0), "at least the next token"),
])
def test_bad_arguments_say_what_to_do(make, message):
    with pytest.raises(ValueError, match=message):
        make()


def test_calibration_by_hand():
    # four predictions over two classes: confidences 0.85, 0.85, 0.65, 0.65
    p = torch.tensor(
        [[0.85, 0.15], [0.85, 0.15], [0.65, 0.35], [0.35, 0.65]], dtype=torch.float64
    )
    y = torch.tensor([0, 1, 0, 1])
    c = calibration(p.log(), y, bins=10)
    # bin (0.6, 0.7]: confidence 0.65, right 2 of 2; bin (0.8, 0.9]: 0.85, 1 of 2
    assert [(round(lo, 2), n, round(conf, 6), acc) for lo, _, conf, acc, n in c.bins] == [
        (0.6, 2, 0.65, 1.0),
        (0.8, 2, 0.85, 0.5),
    ]
    assert math.isclose(c.ece, 0.5 * 0.35 + 0.5 * 0.35)
    assert math.isclose(c.accuracy, 0.75) and math.isclose(c.confidence, 0.75)
    brier = ((p - F.one_hot(y, 2)) ** 2).sum(-1).mean()
    assert math.isclose(c.brier, float(brier))


def test_fitted_temperature_recovers_the_one_that_made_the_data():
    g = torch.Generator().manual_seed(1)
    logits = torch.randn(20000, 10, generator=g, dtype=torch.float64) * 3
    true_t = 2.5  # targets drawn from softmax(logits / 2.5): the logits are overconfident
    targets = torch.multinomial((logits / true_t).softmax(-1), 1, generator=g).squeeze(-1)
    t = fit_temperature(logits, targets)
    assert abs(t - true_t) < 0.1
    before, after = calibration(logits, targets), calibration(logits, targets, temperature=t)
    assert after.ece < before.ece / 3
    assert after.accuracy == before.accuracy  # a temperature keeps every top guess


def brute_force_ngram(train, vocab, n, d, context, w):
    """The interpolated absolute-discounting estimate, written as the recursion."""
    if n == 0:
        return 1.0 / vocab
    h = tuple(context[len(context) - (n - 1):]) if n > 1 else ()
    follow = {}
    for i in range(len(train) - n + 1):
        if tuple(train[i:i + n - 1]) == h:
            follow[train[i + n - 1]] = follow.get(train[i + n - 1], 0) + 1
    lower = brute_force_ngram(train, vocab, n - 1, d, context, w)
    total = sum(follow.values())
    if total == 0:
        return lower
    return (max(follow.get(w, 0) - d, 0) + d * len(follow) * lower) / total


def test_ngram_matches_the_recursion_and_sums_to_one():
    g = torch.Generator().manual_seed(2)
    train = torch.randint(0, 4, (300,), generator=g)
    model = NGram(train, vocab=5, n=3)  # token 4 never occurs in training
    context = [1, 2]
    rows = [model.probs(torch.tensor(context + [w]))[-1] for w in range(5)]
    expected = [brute_force_ngram(train.tolist(), 5, 3, 0.75, context, w) for w in range(5)]
    assert np.allclose(rows, expected)
    assert math.isclose(sum(rows), 1.0) and rows[4] > 0  # never impossible
    unigram = NGram(train, vocab=5, n=1, discount=0.0)
    freqs = torch.bincount(train, minlength=5) / len(train)
    assert np.allclose(unigram.probs(torch.arange(5)), freqs.numpy())


def test_ngram_loss_falls_with_order_on_real_text(corpus):
    tok, train_ids, val_ids = corpus
    losses = [NGram(train_ids, tok.vocab_size, n).loss(val_ids[:20000]) for n in (1, 2, 3)]
    assert losses[0] > losses[1] > losses[2]
    assert abs(losses[0] - 3.3) < 0.1  # the unigram baseline of Chapter 1, near 3.35


def test_compressed_bits_count_what_the_compressor_writes():
    text = "to be or not to be, that is the question. " * 40
    alone = compressed_bits(text, "bz2")
    assert math.isclose(alone, 8 * len(bz2.compress(text.encode(), 9)) / len(text))
    # text seen before costs less: the compressor already holds it
    assert compressed_bits(text, "xz", given=text) < compressed_bits(text, "xz")


def test_multi_token_model_has_the_baselines_parameters_and_scores_the_next_token():
    torch.manual_seed(0)
    mt = MultiTokenLM(V, dim=16, n_trunk=2, n_heads=2, n_future=2)
    base = TransformerLM(V, dim=16, n_layers=4, n_heads=2)
    assert mlexp.count_params(mt) == mlexp.count_params(base)
    idx = torch.randint(0, V, (2, 9))
    targets = torch.randint(0, V, (2, 9))
    logits, loss = mt(idx, targets, include_aux=False)
    assert logits.shape == (2, 9, V)
    assert torch.allclose(loss, F.cross_entropy(logits.flatten(0, 1), targets.flatten()))
    # the t + 2 head's loss, recorded for train_lm: head 2 read against tokens two ahead
    x = mt.embed(idx)
    for block in mt.blocks:
        x = block(x)
    far = mt.head(mt.norm(mt.futures[1](x)))
    expected = F.cross_entropy(far[:, :-2].flatten(0, 1), idx[:, 2:].flatten())
    assert torch.allclose(mt.aux_loss, expected)
    _, with_aux = mt(idx, targets)
    assert torch.allclose(with_aux, loss + expected)


def test_multi_token_model_trains_with_train_lm(corpus):
    tok, train_ids, val_ids = corpus
    torch.manual_seed(0)
    mt = MultiTokenLM(tok.vocab_size, dim=32, n_trunk=1, n_heads=2, n_future=2)
    history = mlexp.train_lm(mt, train_ids, val_ids, steps=20, block_size=16,
                             batch_size=4, eval_every=10, log=False)
    # the batch loss trained on includes the far head; the reported one is next-token only
    assert history["val"][-1] < history["val"][0]
    assert len(history["batch_loss"]) == 20


def test_held_out_logits_score_what_train_lm_reports(corpus):
    """Calibration reads the same windows the reported validation loss is the mean over."""
    from mlexp.training.train import evaluation_starts

    tok, train_ids, val_ids = corpus
    torch.manual_seed(0)
    model = TransformerLM(tok.vocab_size, dim=32, n_layers=1, n_heads=2)
    history = mlexp.train_lm(model, train_ids, val_ids, steps=10, block_size=16,
                             batch_size=4, eval_every=10, log=False)
    starts = evaluation_starts(train_ids, val_ids, 16, 16 * 4)["val"]  # 16 batches of 4
    logits, targets = held_out_logits(model, starts, val_ids, 16)
    assert logits.shape == (64, 16, tok.vocab_size)
    loss = F.cross_entropy(logits.flatten(0, 1), targets.flatten())
    assert math.isclose(float(loss), history["val"][-1], rel_tol=1e-5)


def test_logit_stats_tell_a_shift_of_every_logit_from_a_spread():
    """LogitStats reads the mean log Z, the mean logit and the largest logit: adding a
    constant to every logit moves all three by it, while spreading the logits moves log Z
    away from the mean logit."""
    from mlexp.loss import LogitStats

    logits = torch.randn(2, 5, 65, generator=torch.Generator().manual_seed(0))
    stats = LogitStats()
    base = stats.after(0, None, logits, None)
    assert base["log_z"] == pytest.approx(logits.logsumexp(-1).mean().item())
    assert base["mean_logit"] == pytest.approx(logits.mean().item())
    assert base["max_logit"] == pytest.approx(logits.max().item())
    shifted = stats.after(0, None, logits + 3.0, None)
    for key in base:
        assert shifted[key] == pytest.approx(base[key] + 3.0, abs=1e-5)
    spread = stats.after(0, None, 2 * logits, None)
    assert spread["log_z"] - spread["mean_logit"] > base["log_z"] - base["mean_logit"]


def chapter8_identity_checks(monkeypatch, offset: int) -> dict:
    """Run Chapter 8's Step 2 cell, which checks the chapter's identities on random logits,
    as the seed run with ``offset`` runs it; return the cell's names."""
    notebook = pathlib.Path(__file__).resolve().parents[1] / "book/part2/chapter08.ipynb"
    cells = ["".join(c["source"]) for c in json.loads(notebook.read_text())["cells"] if c["cell_type"] == "code"]
    (cell,) = [c for c in cells if "head_push" in c]
    monkeypatch.setenv(SEED_OFFSET_ENV, str(offset))
    names = {"mlexp": mlexp, "torch": torch, "F": F, "math": math, "VOCAB": 65}
    names |= {"CrossEntropy": CrossEntropy, "SquaredError": SquaredError}  # from Step 1
    with contextlib.redirect_stdout(io.StringIO()):
        exec(cell, names)
    return names


def test_chapter8_checks_its_identities_on_new_logits_in_every_seed(monkeypatch):
    """The seed table repeats Step 2's checks once per seed: each must draw its own logits,
    or three rows of the table are one check (they were, while the generator was fixed)."""
    first, second = (chapter8_identity_checks(monkeypatch, offset) for offset in (0, 1))
    assert not torch.equal(first["z"], second["z"])
    for names in (first, second):
        assert all(error < 1e-12 for error in names["checks"].values())
