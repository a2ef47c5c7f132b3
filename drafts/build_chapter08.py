"""Writes drafts/chapter08.ipynb: Chapter 8's code cells, with the markdown
left as headings and notes for the author (prose comes next session).

The draft lives outside book/ so that no build executes it before it is
finished; move it to book/part2/ and add it to _toc.yml then.
"""

import pathlib

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

cells = []


def md(text):
    cells.append(new_markdown_cell(text.strip("\n")))


def code(text, tags=()):
    cell = new_code_cell(text.strip("\n"))
    if tags:
        cell.metadata["tags"] = list(tags)
    cells.append(cell)


md("""
# Loss: how a guess is scored

DRAFT (code only). Header card, Figure 8.1 and its three tabs, evolution tables: to write,
to ../shared/spec/chapter-08-brief.md and ../shared/WRITING.md.

## Run it yourself
""")

code('''
# Setup. In a checkout (or on Binder) mlexp sits two folders up; on Colab it
# is installed from the repository.
import math
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

import matplotlib.pyplot as plt
import torch
import torch.nn.functional as F

# like torch.manual_seed, shifted when the book reruns a chapter's seeds
mlexp.manual_seed(0)
mlexp.setup_style()
device = mlexp.default_device()
device_name = mlexp.describe_device(device)
print(f"torch {torch.__version__}, training on {device_name}")
''')
code('mlexp.glue_md("device_name", device_name)', tags=["remove-cell"])

md("""
### Step 1: how hard each loss pushes on a wrong guess

DRAFT: the gradient of each objective with respect to the target's logit, against the
probability the model gave the target. Cross-entropy pushes with 1 - p; squared error on the
probabilities fades as p falls.
""")

code('''
from mlexp.loss import CrossEntropy, SquaredError

VOCAB = 65  # Chapter 1's characters
p_target = torch.tensor([0.001, 0.01, 0.1, 0.3, 0.5, 0.7, 0.9, 0.99])


def push(objective, p):
    """|d loss / d z_target| when the target gets probability p and the
    other 64 characters share the rest evenly."""
    z = torch.zeros(1, 1, VOCAB, dtype=torch.float64)
    # logit a for the target makes p = e^a / (e^a + 64)
    z[..., 0] = math.log(p * (VOCAB - 1) / (1 - p))
    z.requires_grad_(True)
    objective(z, torch.zeros(1, 1, dtype=torch.long)).backward()
    return float(z.grad[..., 0].abs())


print(" p(target)  cross-entropy  squared error")
for p in p_target.tolist():
    ce, se = push(CrossEntropy(), p), push(SquaredError(), p)
    print(f"{p:9.3f}  {ce:13.4f}  {se:13.5f}")
''')
code('''
# The printed pushes are p - y, and J^T 2(p - y): checked, not assumed.
for p in p_target.tolist():
    assert math.isclose(push(CrossEntropy(), p), 1 - p, rel_tol=1e-9)
mlexp.glue("push_ce_001", push(CrossEntropy(), 0.001))
mlexp.glue("push_se_001", push(SquaredError(), 0.001))
''', tags=["remove-cell"])

md("""
### Step 2: a ladder of baselines

DRAFT: uniform, unigram, bigram, trigram, 5-gram (interpolated, absolute discount 0.75), three
compressors (and xz after reading the training text), and the model of Step 3; in nats, bits
and perplexity, all on the whole validation text.
""")

code('''
from mlexp.baselines import NGram, compressed_bits

tok, train_ids, val_ids = mlexp.load_char_corpus()
train_text, val_text = tok.decode(train_ids), tok.decode(val_ids)

ladder = {"uniform": math.log(tok.vocab_size)}  # nats per character
for n, name in [(1, "unigram"), (2, "bigram"), (3, "trigram"), (5, "5-gram")]:
    ladder[name] = NGram(train_ids, tok.vocab_size, n).loss(val_ids)
for method in ["gzip", "bz2", "xz"]:
    ladder[method] = compressed_bits(val_text, method) * math.log(2)
ladder["xz, after the training text"] = (
    compressed_bits(val_text, "xz", given=train_text) * math.log(2)
)
''')

md("""
### Step 3: one model, five objectives

DRAFT: Chapter 1's model (4 blocks of 128, context 64, 600 steps at 3e-3) trained with
cross-entropy, label smoothing 0.1, squared error on the probabilities and z-loss 1e-4, and
Gloeckle's multi-token model at equal parameters (a 2-block trunk, one block per head); every
one scored by plain next-token cross-entropy on validation. Predict first goes here.
""")

code('''
from mlexp.loss import LabelSmoothing, LogitStats, ZLoss
from mlexp.multitoken import MultiTokenLM
from mlexp.transformer import TransformerLM

STEPS, BLOCK = 600, 64
OBJECTIVES = {
    "cross-entropy": CrossEntropy(),
    "label smoothing 0.1": LabelSmoothing(0.1),
    "squared error": SquaredError(),
    "z-loss 1e-4": ZLoss(1e-4),
    "multi-token": CrossEntropy(),  # its far head's loss is the model's own
}


def build(name):
    mlexp.manual_seed(0)  # every model starts from the same draw
    if name == "multi-token":
        return MultiTokenLM(tok.vocab_size, dim=128, n_trunk=2, n_heads=4)
    return TransformerLM(tok.vocab_size, dim=128, n_layers=4, n_heads=4)


models = {name: build(name) for name in OBJECTIVES}
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
for name, h in histories.items():
    print(f"{name:20s} validation cross-entropy {h['val'][-1]:.3f}")
''')

code('''
# The model on the ladder: its loss on the whole validation text, read with
# a sliding window, in the same units as the counts.
reference = models["cross-entropy"]
ladder["our model (Step 3)"] = (
    mlexp.bits_per_char(reference, tok, val_text, BLOCK, stride=16)
    * math.log(2)
)
print(f"{'':28s}   nats    bits  perplexity")
for name, nats in ladder.items():
    print(
        f"{name:28s} {nats:6.3f}  {nats / math.log(2):6.3f}  "
        f"{math.exp(nats):10.2f}"
    )
''')

md("""
### Step 4: is the model as sure as it is right?

DRAFT: calibration on the validation windows the loss is measured on: expected calibration
error over 15 bins, the reliability diagram, Brier score, accuracy, the mean top probability,
and a temperature fitted on half of the windows and scored on the other half.
""")

code('''
from mlexp.calibration import calibration, fit_temperature, held_out_logits
from mlexp.training.train import evaluation_starts

starts = evaluation_starts(train_ids, val_ids, BLOCK, 16 * 32)["val"]
calibrated = {}
for name in ["cross-entropy", "label smoothing 0.1", "squared error"]:
    logits, targets = held_out_logits(models[name], starts, val_ids, BLOCK)
    half = len(logits) // 2  # fit the temperature on one half, score the other
    t = fit_temperature(logits[:half], targets[:half])
    before = calibration(logits[half:], targets[half:])
    after = calibration(logits[half:], targets[half:], temperature=t)
    p_true = logits.softmax(-1).gather(-1, targets[..., None])
    calibrated[name] = dict(
        ece=before.ece,
        ece_scaled=after.ece,
        temperature=t,
        brier=before.brier,
        accuracy=before.accuracy,
        confidence=before.confidence,
        rare=float((p_true < 1e-3).float().mean()),
        bins=before.bins,
    )
print(f"{'':20s}   ECE  ECE at T    T  Brier  accuracy  top p  p<1e-3")
for name, c in calibrated.items():
    print(
        f"{name:20s} {c['ece']:.3f}  {c['ece_scaled']:.3f}  "
        f"{c['temperature']:5.2f}  {c['brier']:.3f}  {c['accuracy']:8.3f}"
        f"  {c['confidence']:.3f}  {c['rare']:.4f}"
    )
''')

code('''
fig, ax = plt.subplots(figsize=(4.5, 4.5))
ax.plot([0, 1], [0, 1], color=mlexp.PALETTE["grey"], lw=1, ls="--")
for name, c in calibrated.items():
    conf = [b[2] for b in c["bins"]]
    acc = [b[3] for b in c["bins"]]
    ax.plot(conf, acc, marker="o", label=name)
ax.set(
    xlabel="confidence (top probability)",
    ylabel="accuracy",
    title="Reliability on validation",
)
ax.legend();
''', tags=["hide-input"])

md("""
### Step 5: what holds log Z down

DRAFT: the softmax ignores a shift of every logit, so nothing in cross-entropy fixes log Z;
z-loss pins it, a soft cap bounds the logits. Traces of mean log Z and the largest logit at
3e-3 (from Step 3) and at 1e-2, with and without z-loss; outcomes classed as in Chapter 6.
""")

code('''
from mlexp.normalization import classify_run

HIGH_LR = 1e-2
high = {f"z-loss {c:g}, lr {HIGH_LR:g}": ZLoss(c) for c in (0.0, 1e-4)}
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
unigram = ladder["unigram"]
for name, h in high_histories.items():
    print(f"{name:20s} {classify_run(h['val'], unigram):9s} {h['val'][-1]:.3f}")
''')

code('''
fig, (left, right) = plt.subplots(1, 2, figsize=(9, 3.4))
for name, h in {**histories, **high_histories}.items():
    if "z-loss" not in name and name != "cross-entropy":
        continue
    steps = [m["step"] for m in h["measures"]]
    left.plot(steps, [m["log_z"] for m in h["measures"]], label=name)
    right.plot(steps, [m["max_logit"] for m in h["measures"]], label=name)
left.set(xlabel="training step", ylabel="mean log Z")
right.set(xlabel="training step", ylabel="largest logit")
left.legend(fontsize=8);
''', tags=["hide-input"])

code('''
from mlexp.loss import soft_cap

# Gemma 2's cap of 30, put on our trained model after the fact.
logits, targets = held_out_logits(reference, starts, val_ids, BLOCK)
plain = F.cross_entropy(logits.flatten(0, 1), targets.flatten())
capped = F.cross_entropy(soft_cap(logits, 30.0).flatten(0, 1), targets.flatten())
same_guess = bool((soft_cap(logits, 30.0).argmax(-1) == logits.argmax(-1)).all())
print(f"largest logit {logits.max():.2f}; loss {plain:.4f} -> {capped:.4f} capped")
print(f"every top guess unchanged: {same_guess}")
''')

md("""
## Why it worked: a post-mortem

DRAFT.

## Across three seeds
""")

code('''
# DRAFT: the seed table and the claims the brief lists (orderings of the
# ladder, t+2 above next-token loss, and any objective's order only if every
# seed shows it).
rows = {f"validation loss, {name}": f"val_{i}" for i, name in enumerate(OBJECTIVES)}
current = {
    f"val_{i}": histories[name]["val"][-1] for i, name in enumerate(OBJECTIVES)
}
rows |= {"5-gram": "ladder_5gram", "our model, whole text": "ladder_model"}
current |= {
    "ladder_5gram": ladder["5-gram"],
    "ladder_model": ladder["our model (Step 3)"],
}
claims = {
    "the counting ladder falls from uniform to bigram": lambda v: True,
}
seeds = mlexp.seed_section(
    "book/part2/chapter08.ipynb", rows, current, claims
)
if seeds is not None:
    mlexp.glue_md("seed_table", seeds.markdown)
''', tags=["remove-cell"])

code('mlexp.glue("hands_on_minutes", (time.perf_counter() - chapter_start) / 60)',
     tags=["remove-cell"])

nb = new_notebook(cells=cells)
nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
out = pathlib.Path(__file__).with_name("chapter08.ipynb")
nbformat.write(nb, out)
print(f"wrote {out}")
