"""Writes book/part2/chapter08.ipynb from drafts/ch08/*.md (the prose) and
the code cells below. Cell ids are fixed, so rewriting the prose leaves the
code's cells, and their execution, as they were.
"""

import pathlib
import sys
import re

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

HERE = pathlib.Path(__file__).parent
PROSE = (HERE / "ch08.md").read_text()
# the prose file holds markdown cells separated by lines "%% name"
parts = dict(
    (m.group(1), m.group(2).strip("\n"))
    for m in re.finditer(r"^%% (\S+)\n(.*?)(?=^%% |\Z)", PROSE, re.S | re.M)
)
cells = []


def md(name):
    cell = new_markdown_cell(parts.pop(name))
    cell.id = f"md-{name}"
    cells.append(cell)


def code(name, text, tags=(), alt=None):
    cell = new_code_cell(text.strip("\n"))
    cell.id = f"code-{name}"
    if tags:
        cell.metadata["tags"] = list(tags)
    if alt:
        cell.metadata["mystnb"] = {"image": {"alt": alt}}
    cells.append(cell)


md("opening")
md("history")
md("run")
code("setup", '''
# Setup. In a checkout (or on Binder) mlexp sits two folders up; on Colab it
# is installed from the repository.
import pathlib
import subprocess
import sys
import time

chapter_start = time.perf_counter()
try:
    import mlexp
except ImportError:
    root = pathlib.Path.cwd().resolve().parents[1]
    if (root / "mlexp").is_dir():
        sys.path.insert(0, str(root))
    else:
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "install",
                "-q",
                "git+https://github.com/daiyip/ml-explained",
            ],
            check=True,
        )
    import mlexp

import math

import torch
import torch.nn.functional as F

from mlexp.evidence import loss_figures

# like torch.manual_seed, shifted when the book reruns a chapter's seeds
mlexp.manual_seed(0)
mlexp.setup_style()
device = mlexp.default_device()
device_name = mlexp.describe_device(device)
print(f"torch {torch.__version__}, training on {device_name}")
''')
code("device", 'mlexp.glue_md("device_name", device_name)', tags=["remove-cell"])

md("step1")
code("ladder", '''
from mlexp.baselines import NGram, compressed_bits

tok, train_ids, val_ids = mlexp.load_char_corpus()
train_text, val_text = tok.decode(train_ids), tok.decode(val_ids)
nats = math.log(2)  # nats in a bit

ladder = {"uniform": math.log(tok.vocab_size)}  # nats per character
for n, name in [(1, "unigram"), (2, "bigram"), (3, "trigram"), (5, "5-gram")]:
    ladder[name] = NGram(train_ids, tok.vocab_size, n).loss(val_ids)
for method in ["gzip", "bz2", "xz"]:
    ladder[method] = compressed_bits(val_text, method) * nats
ladder["xz, after the training text"] = (
    compressed_bits(val_text, "xz", given=train_text) * nats
)
''')

md("step2")
code("objectives", '''
import torch.nn as nn
from torch import Tensor


class CrossEntropy(nn.Module):
    """The mean of ``-log p(next token)`` over every position: the loss of
    every Part I run."""

    def forward(self, logits: Tensor, targets: Tensor) -> Tensor:
        # (B, T, vocab) -> (B * T, vocab): every position counts once
        return F.cross_entropy(logits.flatten(0, 1), targets.flatten())


class LabelSmoothing(nn.Module):
    """Cross-entropy against a target that keeps ``1 - eps`` on the next
    token and spreads ``eps`` evenly over the whole vocabulary (Szegedy et
    al., 2016), so the model is never asked for certainty."""

    def __init__(self, eps: float = 0.1):
        super().__init__()
        if not 0.0 <= eps < 1.0:
            raise ValueError(
                f"eps={eps}: label smoothing takes a share in [0, 1) "
                "(0 is plain cross-entropy; 0.1 is the usual choice)"
            )
        self.eps = eps

    def forward(self, logits: Tensor, targets: Tensor) -> Tensor:
        return F.cross_entropy(
            logits.flatten(0, 1),
            targets.flatten(),
            label_smoothing=self.eps,
        )

    def extra_repr(self) -> str:
        return f"eps={self.eps}"


class SquaredError(nn.Module):
    """The squared distance between the predicted distribution and the
    one-hot target, summed over the vocabulary and averaged over positions
    (the Brier score of every prediction).

    Its gradient with respect to a logit is ``J^T 2(p - y)``, where ``J``
    is the softmax's Jacobian: every term carries a factor ``p``, so a
    confident wrong prediction (``p_y`` near 0) barely pushes back, where
    cross-entropy's ``p - y`` pushes hardest.
    """

    def forward(self, logits: Tensor, targets: Tensor) -> Tensor:
        # (B, T, vocab) -> (B * T, vocab)
        p = logits.flatten(0, 1).softmax(-1)
        y = F.one_hot(targets.flatten(), p.shape[-1]).to(p.dtype)
        return (p - y).pow(2).sum(-1).mean()


class ZLoss(nn.Module):
    """Cross-entropy plus ``coef * mean(log Z ** 2)``, where ``log Z`` is
    the logsumexp of a position's logits.

    The softmax ignores a constant added to every logit, so nothing in
    cross-entropy holds ``log Z`` anywhere; the extra term pulls it toward
    0, where the logits are themselves log-probabilities. Devlin et al.
    (2014) used such a penalty to skip normalizing at test time; Mesh
    TensorFlow named it z-loss (Shazeer, 2018, with 1e-4 as its example), and
    PaLM trained with 1e-4 for stability.
    """

    def __init__(self, coef: float = 1e-4):
        super().__init__()
        if not coef >= 0:
            raise ValueError(
                f"coef={coef}: the z-loss coefficient must be 0 or more "
                "(1e-4 is PaLM's; 0 is plain cross-entropy)"
            )
        self.coef = coef

    def forward(self, logits: Tensor, targets: Tensor) -> Tensor:
        flat = logits.flatten(0, 1)  # (B * T, vocab)
        log_z = flat.logsumexp(-1)
        ce = F.cross_entropy(flat, targets.flatten())
        return ce + self.coef * log_z.pow(2).mean()

    def extra_repr(self) -> str:
        return f"coef={self.coef}"
''')
md("push")
code("push", '''
# the same classes from the library, which training workers can load
from mlexp.loss import CrossEntropy, SquaredError

VOCAB = tok.vocab_size  # 65 characters
p_right = [0.001, 0.01, 0.1, 0.3, 0.5, 0.7, 0.9, 0.99]


def push(objective, p):
    """|d loss / d z| for the right character's logit z, when the model
    gives that character probability p and the other 64 share the rest."""
    z = torch.zeros(1, 1, VOCAB, dtype=torch.float64)
    z[..., 0] = math.log(p * (VOCAB - 1) / (1 - p))  # softmax gives p
    z.requires_grad_(True)
    objective(z, torch.zeros(1, 1, dtype=torch.long)).backward()
    return z.grad[..., 0].abs().item()


pushes = {
    "cross-entropy": [push(CrossEntropy(), p) for p in p_right],
    "squared error": [push(SquaredError(), p) for p in p_right],
}
print(" p(right)  cross-entropy  squared error")
for i, p in enumerate(p_right):
    ce, se = pushes["cross-entropy"][i], pushes["squared error"][i]
    print(f"{p:9.3f}  {ce:13.4f}  {se:13.5f}")
''', tags=["nbval-check-output"])
code("push-figure", '''
mlexp.glue("fig_push", loss_figures.gradient_push(p_right, pushes))
mlexp.glue("push_ratio", pushes["cross-entropy"][0] / pushes["squared error"][0])
''',
     tags=["hide-input"],
     alt="Two lines against the probability the model gave the right character, on a logarithmic axis from 0.001 to 0.99: how hard cross-entropy and squared error push that character's logit up. Cross-entropy's push is near 1 at the left and falls to 0 at the right; squared error's is near 0 at both ends and largest in the middle. Step 2 gives the numbers.")

md("identities")
code("identities", '''
from mlexp.loss import LabelSmoothing, ZLoss

g = torch.Generator().manual_seed(0)
z = torch.randn(8, 16, VOCAB, generator=g, dtype=torch.float64) * 3
y = torch.randint(VOCAB, (8, 16), generator=g)
onehot = F.one_hot(y, VOCAB).double()
p = z.softmax(-1)


def grad(objective, z):
    z = z.clone().requires_grad_(True)
    objective(z, y).backward()
    return z.grad


N = y.numel()  # the loss is a mean over positions
# (B, T, V) -> (B, T, V, V): the softmax's Jacobian dp_j / dz_i
jacobian = torch.diag_embed(p) - p[..., :, None] * p[..., None, :]
squared_grad = jacobian @ (2 * (p - onehot))[..., None] / N
eps = 0.1
log_p = z.log_softmax(-1)
smoothed = (1 - eps) * F.cross_entropy(z.flatten(0, 1), y.flatten()) + eps * (
    -log_p.mean(-1).mean()
)
target = (1 - eps) * onehot + eps / VOCAB  # the smoothed target
floor = -(target * target.log()).sum(-1).mean()  # its entropy
shift = 5.0
h = torch.randn(8, 16, 32, generator=g, dtype=torch.float64)  # hidden states
W = torch.randn(VOCAB, 32, generator=g, dtype=torch.float64)  # a head


def head_push(objective):
    """The head's gradient summed over its rows: the push that would move
    every character's row, and so every logit, the same way."""
    W_ = W.clone().requires_grad_(True)
    objective(h @ W_.T, y).backward()
    return W_.grad.sum(0)


log_z = (h @ W.T).logsumexp(-1)  # (B, T)
z_push = 2 * 1e-4 * (log_z[..., None] * h).mean((0, 1))  # 2c mean(log Z h)
checks = {
    "cross-entropy's gradient is (p - y) / N": grad(CrossEntropy(), z)
    .sub((p - onehot) / N)
    .abs()
    .max(),
    "squared error's is J^T 2(p - y) / N": grad(SquaredError(), z)
    .sub(squared_grad.squeeze(-1))
    .abs()
    .max(),
    "label smoothing is PyTorch's": (
        LabelSmoothing(eps)(z, y)
        - F.cross_entropy(z.flatten(0, 1), y.flatten(), label_smoothing=eps)
    ).abs(),
    "... and (1 - eps) CE + eps mean(-log p)": (
        LabelSmoothing(eps)(z, y) - smoothed
    ).abs(),
    "a shift of every logit leaves CE as it is": (
        CrossEntropy()(z + shift, y) - CrossEntropy()(z, y)
    ).abs(),
    "... and moves log Z by the shift": (
        (z + shift).logsumexp(-1) - z.logsumexp(-1) - shift
    )
    .abs()
    .max(),
    "the head's rows' gradients sum to 0: CE": head_push(CrossEntropy())
    .abs()
    .max(),
    "... label smoothing": head_push(LabelSmoothing(eps)).abs().max(),
    "... squared error": head_push(SquaredError()).abs().max(),
    "... z-loss's to 2c mean(log Z h)": (head_push(ZLoss(1e-4)) - z_push)
    .abs()
    .max(),
    "equal logits score ln 65": (
        CrossEntropy()(torch.zeros_like(z), y) - math.log(VOCAB)
    ).abs(),
}
for name, error in checks.items():
    print(f"{name:42s} off by {float(error):.1e}")
print(f"label smoothing's floor, the smoothed target's entropy: {floor:.3f}")
''', tags=["nbval-check-output"])

md("step3")
code("train", '''
from mlexp.loss import LogitStats
from mlexp.multitoken import MultiTokenLM
from mlexp.transformer import TransformerLM

STEPS, BLOCK = 600, 64
OBJECTIVES = {
    "cross-entropy": CrossEntropy(),
    "label smoothing 0.1": LabelSmoothing(0.1),
    "squared error": SquaredError(),
    "z-loss 1e-4": ZLoss(1e-4),
    "multi-token": CrossEntropy(),  # plus its t+2 head's loss (aux_loss)
}


def build(name):
    mlexp.manual_seed(0)  # every model starts from the same draw
    if name == "multi-token":  # a 2-block trunk and two 1-block heads
        return MultiTokenLM(tok.vocab_size, dim=128, n_trunk=2, n_heads=4)
    return TransformerLM(tok.vocab_size, dim=128, n_layers=4, n_heads=4)


models = {name: build(name) for name in OBJECTIVES}
sizes = {name: mlexp.count_params(m) for name, m in models.items()}
histories = mlexp.train_side_by_side(
    models,
    train_ids,
    val_ids,
    steps=STEPS,
    block_size=BLOCK,
    objective=OBJECTIVES,
    measure=LogitStats(),
    log=False,
)
''')

code("scores", '''
from mlexp.calibration import calibration, fit_temperature, held_out_logits
from mlexp.training.train import evaluation_starts

# the validation windows train_lm scores, read once more for calibration
starts = evaluation_starts(train_ids, val_ids, BLOCK, 16 * 32)["val"]
scores = {}
for name, model in models.items():
    logits, targets = held_out_logits(model, starts, val_ids, BLOCK)
    half = len(logits) // 2  # fit a temperature on one half, score the other
    t = fit_temperature(logits[:half], targets[:half])
    before = calibration(logits[half:], targets[half:])
    after = calibration(logits[half:], targets[half:], temperature=t)
    p_right = logits.softmax(-1).gather(-1, targets[..., None])
    scores[name] = dict(
        loss=histories[name]["val"][-1],
        accuracy=before.accuracy,
        confidence=before.confidence,
        ece=before.ece,
        temperature=t,
        ece_at_t=after.ece,
        brier=before.brier,
        rare=(p_right < 1e-3).float().mean().item(),
        bins=before.bins,
        same_guess=after.accuracy == before.accuracy,
        smoothed=LabelSmoothing(0.1)(logits, targets).item(),
    )
print(
    f"{'':20s} val loss  accuracy  top p    ECE      T  ECE at T  Brier"
    "  p<0.001"
)
for name, s in scores.items():
    print(
        f"{name:20s} {s['loss']:8.3f}  {s['accuracy']:8.3f}  "
        f"{s['confidence']:.3f}  {s['ece']:.3f}  {s['temperature']:5.2f}  "
        f"{s['ece_at_t']:8.3f}  {s['brier']:.3f}  {s['rare']:7.4f}"
    )
''')
code("reliability-figure", '''
mlexp.glue("fig_reliability", loss_figures.reliability(
    {n: scores[n]["bins"] for n in ["cross-entropy", "label smoothing 0.1", "squared error"]}
))
''', tags=["hide-input"],
     alt="A reliability diagram: accuracy against confidence, where confidence is the probability of the model's top guess, for the models trained with cross-entropy, label smoothing and squared error, each prediction sorted into 15 bins of confidence. The dashed diagonal marks a model whose confidence equals its accuracy. Step 3 gives the numbers.")

md("multitoken")
code("multitoken", '''
from mlexp.training.train import windows

# the t+2 head's loss on the same validation windows: the multi-token
# model records it as aux_loss on every forward pass
mt = models["multi-token"].eval()
with torch.no_grad():
    mt(windows(val_ids, starts, BLOCK)[0])
far = mt.aux_loss.item()
print(f"parameters: {sizes['cross-entropy']:,} and {sizes['multi-token']:,}")
print(f"multi-token, next character (t+1): {scores['multi-token']['loss']:.3f}")
print(f"multi-token, the one after (t+2):  {far:.3f}")
''')

md("step4")
code("high-lr", '''
from mlexp.normalization import classify_run

HIGH_LR = 3e-2
high = {f"lr {HIGH_LR:g}": CrossEntropy(), f"lr {HIGH_LR:g}, z-loss 1e-4": ZLoss(1e-4)}
high_models = {name: build("cross-entropy") for name in high}
high_histories = mlexp.train_side_by_side(
    high_models,
    train_ids,
    val_ids,
    steps=STEPS,
    block_size=BLOCK,
    objective=high,
    measure=LogitStats(),
    lr=HIGH_LR,
    log=False,
)
traces = {
    "lr 0.003": histories["cross-entropy"],
    "lr 0.003, z-loss 1e-4": histories["z-loss 1e-4"],
    **high_histories,
}
print(f"{'':22s} outcome   val loss  mean log Z  largest logit (last step)")
for name, h in traces.items():
    last = h["measures"][-1]
    outcome = classify_run(h["val"], ladder["unigram"])
    print(
        f"{name:22s} {outcome:9s} {h['val'][-1]:8.3f}  {last['log_z']:10.2f}"
        f"  {last['max_logit']:13.2f}"
    )
''')
code("trace-figure", 'mlexp.glue("fig_log_z", loss_figures.log_z_traces(traces))',
     tags=["hide-input"],
     alt="Two panels over the training steps of four runs: Chapter 1's learning rate with and without z-loss, and a rate ten times higher with and without it. Left, the mean log Z, the logarithm of the softmax's normalizer, with a line at 0; right, the largest logit in the batch. The table above gives the values at the last step.")

md("softcap")
code("softcap", '''
from mlexp.loss import soft_cap

CAP = 30.0  # Gemma 2's cap on its final logits
logits, targets = held_out_logits(models["cross-entropy"], starts, val_ids, BLOCK)
capped = soft_cap(logits, CAP)
loss = F.cross_entropy(logits.flatten(0, 1), targets.flatten()).item()
loss_capped = F.cross_entropy(capped.flatten(0, 1), targets.flatten()).item()
print(f"largest logit {logits.max():.2f}, capped {capped.max():.2f}")
print(f"validation loss {loss:.4f} -> {loss_capped:.4f} with the cap")
print(f"every top guess unchanged: {bool((capped.argmax(-1) == logits.argmax(-1)).all())}")
''')

md("ladder-model")
code("ladder-model", '''
# The model on the ladder: its loss on the whole validation text, every
# character read with a context as in training (windows that slide by 16).
ladder["our model (Step 3)"] = (
    mlexp.bits_per_char(
        models["cross-entropy"], tok, val_text, BLOCK, batch_size=128, stride=16
    )
    * nats
)
print(f"{'':28s}   nats    bits  perplexity")
for name, value in ladder.items():
    print(
        f"{name:28s} {value:6.3f}  {value / nats:6.3f}  {math.exp(value):10.2f}"
    )
''')
code("ladder-figure", 'mlexp.glue("fig_ladder", loss_figures.ladder_bars(ladder, "our model (Step 3)"))',
     tags=["hide-input"],
     alt='Horizontal bars, one per baseline, in nats per character on the validation text, read downward: the uniform guess, the unigram, bigram, trigram and 5-gram counts, the compressors gzip, bz2 and xz, xz after reading the training text, and our model, whose bar is coloured differently. A second axis on top gives bits per character. Step 5 gives the numbers.')

md("postmortem")
md("seeds")
code("seed-table", '''
from mlexp.normalization import OUTCOMES

KEY = {"cross-entropy": "ce", "label smoothing 0.1": "ls", "squared error": "se",
       "z-loss 1e-4": "z", "multi-token": "mt"}
LADDER = {"uniform": "uniform", "unigram": "unigram", "bigram": "bigram",
          "trigram": "trigram", "5-gram": "5gram", "gzip": "gzip", "bz2": "bz2",
          "xz": "xz", "xz, after the training text": "xz_given",
          "our model (Step 3)": "model"}
HIGH = dict(zip(traces, ["ce", "z", "ce_high", "z_high"]))
values = {f"ladder_{k}": ladder[n] for n, k in LADDER.items()}
for name, k in KEY.items():
    values |= {f"{m}_{k}": scores[name][m] for m in
               ["loss", "accuracy", "confidence", "ece", "temperature", "ece_at_t", "brier", "rare"]}
for name, k in HIGH.items():
    last = traces[name]["measures"][-1]
    values |= {f"val_{k}": traces[name]["val"][-1], f"log_z_{k}": last["log_z"],
               f"log_z0_{k}": traces[name]["measures"][0]["log_z"],
               f"outcome_{k}": float(OUTCOMES.index(classify_run(traces[name]["val"], ladder["unigram"]))),
               f"max_logit_{k}": last["max_logit"]}
values |= {f"check_{i}": float(e) for i, e in enumerate(checks.values())}
values |= dict(far_mt=far, floor=float(floor), loss_capped=loss_capped, cap_change=loss - loss_capped,
               params_ce=sizes["cross-entropy"], params_mt=sizes["multi-token"],
               max_logit=logits.max().item(), smoothed_ls=scores["label smoothing 0.1"]["smoothed"], push_ce=pushes["cross-entropy"][0],
               push_se=pushes["squared error"][0], train_ls=histories["label smoothing 0.1"]["train"][-1],
               same_guess_t=float(all(s["same_guess"] for s in scores.values())),
               same_guess_cap=float((capped.argmax(-1) == logits.argmax(-1)).all()))
for k, v in values.items():
    mlexp.glue(k, v)
''', tags=["remove-cell"])
code("claims", '''
# The seed table's rows, and the claims the prose makes, checked in every
# seed (a contradicted claim fails the build).
ROWS = {f"validation loss: {name}": f"loss_{k}" for name, k in KEY.items()}
ROWS |= {"multi-token, t+2 head's loss": "far_mt"}
ROWS |= {f"{m}: {name}": f"{key}_{k}" for m, key in [("ECE", "ece"), ("ECE at T", "ece_at_t"),
         ("temperature T", "temperature"), ("accuracy", "accuracy"), ("top probability", "confidence"),
         ("Brier", "brier"), ("share p < 0.001", "rare")] for name, k in list(KEY.items())[:3]}
ROWS |= {f"ladder: {n}": f"ladder_{k}" for n, k in LADDER.items() if n != "uniform"}
ROWS |= {"mean log Z at the start": "log_z0_ce"}
ROWS |= {f"{q} at the end: {n}": f"{key}_{k}" for q, key in [("mean log Z", "log_z"),
         ("largest logit", "max_logit"), ("outcome", "outcome")] for n, k in HIGH.items()}
ROWS |= {f"identity off by: {name}": f"check_{i}" for i, name in enumerate(checks)}
ROWS |= {"label smoothing's loss on validation": "smoothed_ls", "its floor": "floor",
         "parameters: 4 blocks": "params_ce", "parameters: multi-token": "params_mt",
         "top guesses kept: temperature": "same_guess_t", "top guesses kept: cap 30": "same_guess_cap",
         "validation loss, capped at 30": "loss_capped"}
DIFFERENCES = {f"{name} minus cross-entropy": (f"loss_{k}", "loss_ce") for name, k in list(KEY.items())[1:]}
DIFFERENCES |= {"ECE: label smoothing minus cross-entropy": ("ece_ls", "ece_ce"),
                "capped minus uncapped": ("loss_capped", "loss_ce"),
                "our model minus the 5-gram": ("ladder_model", "ladder_5gram"),
                "t+2 minus t+1, multi-token": ("far_mt", "loss_mt")}


def exact(*indices):
    """A claim that the checks at ``indices`` of Step 2 hold to 1e-12."""
    return lambda v: all(v[f"check_{i}"] < 1e-12 for i in indices)


claims = {
    "the gradients are p - y and J^T 2(p - y)": exact(0, 1),
    "label smoothing is PyTorch's and its formula": exact(2, 3),
    "a shift of every logit moves only log Z": exact(4, 5, 10),
    "the head's rows' gradients sum to 0, or to z-loss's pull": exact(6, 7, 8, 9),
    "label smoothing's loss stays above its floor": lambda v: v["smoothed_ls"] > v["floor"],
    "the multi-token model has as many parameters": lambda v: v["params_mt"] == v["params_ce"],
    "temperature and a cap keep every top guess": lambda v: v["same_guess_t"] == v["same_guess_cap"] == 1,
    "uniform > unigram > bigram > our model": lambda v: v["ladder_unigram"] < math.log(65)
    and v["ladder_bigram"] < v["ladder_unigram"] and v["ladder_model"] < v["ladder_bigram"],
    "the t+2 head's loss is above the next character's": lambda v: v["far_mt"] > v["loss_mt"],
    "our model ends below the 5-gram and every compressor": lambda v: v["ladder_model"]
    < min(v[f"ladder_{k}"] for k in ["5gram", "gzip", "bz2", "xz", "xz_given"]),
    "label smoothing raises the validation loss": lambda v: v["loss_ls"] > v["loss_ce"],
    "label smoothing raises the calibration error": lambda v: v["ece_ls"] > v["ece_ce"],
    "label smoothing's temperature is below 1, cross-entropy's above": lambda v: v["temperature_ls"]
    < 1 < v["temperature_ce"],
    "a fitted temperature lowers cross-entropy's calibration error, not to label smoothing's":
    lambda v: v["ece_at_t_ce"] < v["ece_ce"] and v["ece_at_t_ls"] > v["ece_at_t_ce"],
    "squared error ends higher in loss and in Brier score": lambda v: v["loss_se"] > v["loss_ce"]
    and v["brier_se"] > v["brier_ce"],
    "squared error leaves more characters below 0.001": lambda v: v["rare_se"] > v["rare_ce"],
    "log Z rises in training; z-loss holds it lower, far from 0": lambda v: v["log_z_ce"]
    > v["log_z0_ce"] and v["log_z_z"] < v["log_z_ce"] and v["log_z_z_high"] < v["log_z_ce_high"]
    and v["log_z_z"] > 5,
    "at the higher rate both runs train": lambda v: v["outcome_ce_high"] == v["outcome_z_high"] == 0,
}
seeds = mlexp.seed_section("book/part2/chapter08.ipynb", ROWS, values, claims,
                           differences=DIFFERENCES, coded={f"outcome_{k}": OUTCOMES for k in HIGH.values()})
if seeds is not None:
    mlexp.glue_md("seed_table", seeds.markdown)
''', tags=["remove-cell"])
md("recap")
code("hands-on", 'mlexp.glue("hands_on_minutes", (time.perf_counter() - chapter_start) / 60)',
     tags=["remove-cell"])
assert not parts, f"prose parts never placed: {sorted(parts)}"

nb = new_notebook(cells=cells)
nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
nb.metadata["language_info"] = {"name": "python"}
out = pathlib.Path(sys.argv[1]) if len(sys.argv) > 1 else HERE.parent / "book" / "part2" / "chapter08.ipynb"
out.parent.mkdir(exist_ok=True)
nbformat.write(nb, out)
print(f"wrote {out}")
