"""Bits per character: the same text scored the same way whatever the tokenizer."""

import math
import subprocess
import sys

import pytest
import torch
import torch.nn as nn

import mlexp
from mlexp.training.evaluate import bits_per_char, total_nll


class Uniform(nn.Module):
    """A model that gives every token the same probability, 1 / vocabulary size."""

    def __init__(self, vocab_size: int):
        super().__init__()
        self.vocab_size = vocab_size
        self.dummy = nn.Parameter(torch.zeros(()))

    def forward(self, idx, targets=None):
        return torch.zeros(*idx.shape, self.vocab_size) + self.dummy, None


def test_every_token_but_the_first_is_predicted_once():
    ids = torch.arange(1000) % 7
    for block_size in (1, 7, 64, 999, 2000):
        assert total_nll(Uniform(7), ids, block_size) == pytest.approx(999 * math.log(7))


def test_a_uniform_model_scores_log2_vocab_per_token():
    text = "To be, or not to be: that is the question.\n" * 20
    chars = mlexp.CharTokenizer(text)
    assert bits_per_char(Uniform(chars.vocab_size), chars, text, 16) == pytest.approx(
        math.log2(chars.vocab_size))
    bpe = mlexp.BPETokenizer.train(text, 300)
    ids = bpe.encode(text)
    expected = (len(ids) - 1) * math.log2(bpe.vocab_size) / (len(text) - len(bpe.decode(ids[:1])))
    assert bits_per_char(Uniform(bpe.vocab_size), bpe, text, 16) == pytest.approx(expected)


def test_bits_per_char_matches_the_training_loss_of_a_char_model(corpus):
    """For characters, bits per character is the mean loss per token divided by ln 2."""
    tok, train_ids, val_ids = corpus
    mlexp.manual_seed(0)
    model = mlexp.transformer.TransformerLM(tok.vocab_size, dim=32, n_layers=1, n_heads=2).eval()
    text = tok.decode(val_ids[:2001])
    with torch.no_grad():
        x, y = val_ids[:2000].view(-1, 100)[:, :], val_ids[1:2001].view(-1, 100)
        _, loss = model(x, y)
    # Windows of 100: the same predictions as the loss above.
    assert bits_per_char(model, tok, text, 100) == pytest.approx(loss.item() / math.log(2), rel=1e-5)


def test_bad_ids_are_refused():
    with pytest.raises(ValueError, match="at least 2 tokens"):
        total_nll(Uniform(3), torch.tensor([1]), 4)


def test_the_text_split_is_the_char_corpus_split():
    train, val = mlexp.load_text_split()
    tok, train_ids, val_ids = mlexp.load_char_corpus()
    assert (len(train), len(val)) == (1_003_854, 111_540)
    assert tok.decode(train_ids) == train and tok.decode(val_ids) == val


def test_chapter_modules_load_only_when_used():
    code = "import sys, mlexp; print('mlexp.bpe' in sys.modules, 'mlexp.training.evaluate' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False"]
    assert mlexp.BPETokenizer.__module__ == "mlexp.bpe"
    with pytest.raises(AttributeError, match="no attribute 'nothing'"):
        mlexp.nothing


@pytest.mark.parametrize("stride", [1, 3, 7, 16])
def test_a_sliding_window_still_predicts_every_token_once(stride):
    ids = torch.arange(1000) % 7
    assert total_nll(Uniform(7), ids, 16, stride=stride) == pytest.approx(999 * math.log(7))


def test_a_stride_of_one_gives_every_token_the_full_window_of_context():
    """Independent definition: token p is predicted from the block_size tokens before it."""
    mlexp.manual_seed(0)
    model = mlexp.transformer.TransformerLM(11, dim=32, n_layers=1, n_heads=2).eval()
    ids = torch.randint(11, (70,))
    block = 8
    expected = 0.0
    with torch.no_grad():
        for p in range(1, len(ids)):
            logits, _ = model(ids[max(0, p - block):p][None])
            expected -= torch.log_softmax(logits[0, -1], -1)[ids[p]].item()
    assert total_nll(model, ids, block, stride=1) == pytest.approx(expected, rel=1e-5)
    # Windows that do not overlap give the later tokens of a window less context: a worse score.
    assert total_nll(model, ids, block) != pytest.approx(expected, rel=1e-5)


def test_a_stride_outside_the_window_is_refused():
    with pytest.raises(ValueError, match="between 1 and block_size=8"):
        total_nll(Uniform(3), torch.arange(20) % 3, 8, stride=9)
