"""The corpus: where it is found, how it is checked, how it is split and tokenized."""

import hashlib
import io
import urllib.error

import pytest
import torch

import mlexp
from mlexp.training import data


def test_split_and_vocabulary(corpus):
    tok, train_ids, val_ids = corpus
    assert tok.vocab_size == 65
    assert len(train_ids) == 1_003_854 and len(val_ids) == 111_540
    assert tok.chars == sorted(tok.chars)
    assert tok.decode(train_ids[:14]) == "First Citizen:"
    assert train_ids.dtype == torch.long


def test_encode_decode_round_trip(corpus):
    tok, _, val_ids = corpus
    text = tok.decode(val_ids[:500])
    assert torch.equal(tok.encode(text), val_ids[:500])
    assert tok.decode(tok.encode("ROMEO:").tolist()) == "ROMEO:"


def test_unknown_character_names_it(corpus):
    tok = corpus[0]
    with pytest.raises(ValueError, match="'é'"):
        tok.encode("café")


@pytest.fixture
def no_corpus_anywhere(tmp_path, monkeypatch):
    """No $MLEXP_DATA, an empty cache, and a network that refuses every download."""
    monkeypatch.delenv("MLEXP_DATA", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))

    def offline(*args, **kwargs):
        raise urllib.error.URLError("network is unreachable")

    monkeypatch.setattr(data.urllib.request, "urlopen", offline)
    return tmp_path / "cache" / "mlexp"


def test_offline_without_a_file_says_how_to_supply_it(no_corpus_anywhere):
    with pytest.raises(FileNotFoundError) as err:
        mlexp.load_char_corpus()
    message = str(err.value)
    assert "MLEXP_DATA" in message and "path=" in message and str(no_corpus_anywhere) in message
    assert not no_corpus_anywhere.exists() or not any(no_corpus_anywhere.iterdir())


def serve(monkeypatch, payload: bytes):
    monkeypatch.setattr(data.urllib.request, "urlopen", lambda url, timeout: io.BytesIO(payload))


def test_download_is_verified_and_written_once(no_corpus_anywhere, monkeypatch):
    text = "hello world\n"
    serve(monkeypatch, text.encode())
    tok, train_ids, val_ids = mlexp.load_char_corpus(sha256=hashlib.sha256(text.encode()).hexdigest())
    assert [p.name for p in no_corpus_anywhere.iterdir()] == ["tinyshakespeare.txt"]
    assert tok.decode(torch.cat([train_ids, val_ids])) == text


def test_corrupt_download_leaves_no_file(no_corpus_anywhere, monkeypatch):
    serve(monkeypatch, b"truncated")
    with pytest.raises(ValueError, match="SHA-256"):
        mlexp.load_char_corpus()
    assert list(no_corpus_anywhere.iterdir()) == []


def test_corrupt_local_file_is_refused(tmp_path, monkeypatch):
    (tmp_path / "tinyshakespeare.txt").write_text("First Citizen:\nBefore we proceed")
    monkeypatch.setenv("MLEXP_DATA", str(tmp_path))
    with pytest.raises(ValueError, match="truncated or changed"):
        mlexp.load_char_corpus()


def test_data_folder_without_the_file(tmp_path, monkeypatch):
    monkeypatch.setenv("MLEXP_DATA", str(tmp_path))
    with pytest.raises(FileNotFoundError, match="MLEXP_DATA"):
        mlexp.load_char_corpus()


def test_explicit_path_of_your_own(tmp_path):
    own = tmp_path / "own.txt"
    own.write_text("abcabcabcd")
    tok, train_ids, val_ids = mlexp.load_char_corpus(own, sha256=None)
    assert tok.chars == ["a", "b", "c", "d"] and len(train_ids) == 9 and len(val_ids) == 1


def test_a_tokens_text_reads_the_same_for_characters_and_bpe(corpus):
    import mlexp

    tok, train_ids, _ = corpus
    assert [tok.token_str(t) for t in train_ids[:5].tolist()] == list("First")
    bpe = mlexp.BPETokenizer.train(tok.decode(train_ids[:5000]), 300)
    assert "".join(bpe.token_str(t) for t in bpe.encode("First Citizen").tolist()) == "First Citizen"
