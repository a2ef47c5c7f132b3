"""Chapter 2's byte-level BPE: exact round trips, determinism, the merges it
learns, its files and errors, checked against tiktoken where the definitions
agree."""

import collections
import json
import random
import string

import pytest
import regex
import tiktoken
import torch
from tiktoken._educational import bpe_train

from mlexp import bpe
from mlexp.bpe import GPT2_SPLIT_PATTERN, BPETokenizer
from mlexp.training.data import corpus_path

# tiktoken needs a pattern; this one keeps any text in one piece, which is
# what pattern=None means.
WHOLE_TEXT = r"[\s\S]+"
PATTERNS = [GPT2_SPLIT_PATTERN, None]

SAMPLES = [
    "",
    "a",
    "naïve café ☃",
    "ROMEO:\nWhat, ho! apothecary!",
    "~{}|\\^`",  # characters TinyShakespeare lacks
    "e\u0301 o\u0308",  # combining marks
    "👩‍👩‍👧 🏳️‍🌈 👍🏽",  # emoji sequences joined by U+200D
    "日本語のテキスト, 中文, 한국어",
    "مرحبا بالعالم",
    "\x00\x01\x7f\u0085\u00a0\u2028\ufeff\U0010ffff",
    "  \n\n\t\r\n   trailing spaces   ",
    "aaaaaaa bbbbbbbb",
    "don't we'll they've I'm 1234567 3.14",
]

# Pools of characters that stress a byte-level tokenizer: several UTF-8
# lengths, combining marks, many kinds of whitespace, emoji sequences.
POOLS = [
    string.ascii_letters + "    ",
    string.punctuation + string.digits + "'s'll",
    " \t\n\r\x0b\x0c\x1c\x85\xa0\u2028\u3000",
    "éèüñçßøåÆŒ\u0301\u0308\u0327",
    "日本語中文한국어مرحباשלום",
    "👍🏽👩\u200d👧🏳️\u200d🌈☃\ufe0f",
]


def random_texts(n=300, seed=0):
    """Reproducible random strings: mostly from the pools, one character in
    five any code point except a surrogate (those are not valid Unicode)."""
    rng = random.Random(seed)
    texts = []
    for _ in range(n):
        chars = []
        for _ in range(rng.randrange(0, 40)):
            if rng.random() < 0.2:
                code = rng.randrange(rng.choice([0x80, 0x110000]))
                surrogate = 0xD800 <= code < 0xE000
                chars.append("?" if surrogate else chr(code))
            else:
                chars.append(rng.choice(rng.choice(POOLS)))
        texts.append("".join(chars))
    return texts


@pytest.fixture(scope="module")
def text():
    """The whole corpus, read as the chapter reads it."""
    return corpus_path().read_text(encoding="utf-8")


@pytest.fixture(scope="module")
def train_text(text):
    """A small slice of the training split, so the tests stay fast."""
    return text[:60_000]


@pytest.fixture(scope="module")
def val_text(text):
    """The start of the validation split (the last 10% of the corpus)."""
    return text[int(0.9 * len(text)):][:20_000]


@pytest.fixture(scope="module")
def tok(train_text):
    return BPETokenizer.train(train_text, 1024)


@pytest.fixture(scope="module")
def tok_whole(train_text):
    """Trained without pre-splitting: merges may cross spaces."""
    return BPETokenizer.train(train_text[:20_000], 640, pattern=None)


def tiktoken_with(tokenizer):
    """A tiktoken Encoding holding our tokenizer's tokens and pattern."""
    ranks = {tokenizer.token_bytes(i): i for i in range(tokenizer.vocab_size)}
    assert len(ranks) == tokenizer.vocab_size  # distinct bytes per token
    return tiktoken.Encoding(
        name="mlexp-test",
        pat_str=tokenizer.pattern or WHOLE_TEXT,
        mergeable_ranks=ranks,
        special_tokens={},
    )


# --- Round trips ------------------------------------------------------------


@pytest.mark.parametrize("sample", SAMPLES)
def test_round_trip_of_any_text(tok, tok_whole, sample):
    for tokenizer in (tok, tok_whole):
        ids = tokenizer.encode(sample)
        assert ids.dtype == torch.long and ids.dim() == 1
        assert tokenizer.decode(ids) == sample
        assert tokenizer.decode(ids.tolist()) == sample


def test_round_trip_of_random_text(tok, tok_whole):
    for sample in random_texts():
        assert tok.decode(tok.encode(sample)) == sample, ascii(sample)
        assert tok_whole.decode(tok_whole.encode(sample)) == sample


def test_round_trip_of_unseen_text_and_compression(tok, val_text):
    ids = tok.encode(val_text)
    assert tok.decode(ids) == val_text
    assert len(val_text) / len(ids) > 2.0  # bytes would give 1.0


def test_partial_characters_decode_to_the_replacement_character(tok):
    ids = tok.encode("é")  # two bytes, 0xC3 0xA9, one token each
    assert ids.tolist() == [0xC3, 0xA9]
    assert tok.decode(ids[:1]) == "\ufffd"
    assert tok.token_str(0xC3) == "\ufffd"


# --- What training learns ---------------------------------------------------


def pair_counts(sequences):
    """Counts of adjacent byte pairs, with overlaps, in order of first
    appearance: counted here independently of mlexp."""
    counts = collections.Counter()
    for seq in sequences:
        counts.update(zip(seq, seq[1:]))
    return counts


@pytest.mark.parametrize("pattern", PATTERNS, ids=["gpt2", "none"])
def test_first_merge_is_the_most_frequent_pair(train_text, pattern):
    small = train_text[:20_000]
    chunks = regex.findall(pattern, small) if pattern else [small]
    counts = pair_counts(chunk.encode() for chunk in chunks)
    top = max(counts.values())
    first_of_the_tied = next(p for p, n in counts.items() if n == top)
    tokenizer = BPETokenizer.train(small, 260, pattern=pattern)
    assert tokenizer.merges[0] == first_of_the_tied
    assert tokenizer.token_bytes(256) == bytes(first_of_the_tied)


def test_first_merges_are_the_corpus_frequent_pairs(tok):
    first = [tok.token_str(256 + r) for r in range(5)]
    assert first[0] == " t" and "he" in first
    assert tok.token_bytes(256) == b" t"


def test_ties_go_to_the_pair_seen_first():
    # Every pair occurs once: the merges follow the text.
    tokenizer = BPETokenizer.train("abcd", 259, pattern=None)
    assert tokenizer.merges == ((97, 98), (256, 99), (257, 100))
    # ("b", "a") ties with ("a", "b") and comes first.
    assert BPETokenizer.train("baab", 257).merges == ((98, 97),)


def test_overlapping_pairs_merge_from_the_left():
    tokenizer = BPETokenizer.train("aaa", 257, pattern=None)
    assert tokenizer.merges == ((97, 97),)  # counted twice in "aaa"
    assert tokenizer.encode("aaa").tolist() == [256, 97]
    assert tokenizer.encode("aaaaa").tolist() == [256, 256, 97]


@pytest.mark.parametrize("pattern", PATTERNS, ids=["gpt2", "none"])
def test_training_is_deterministic(train_text, pattern):
    small = train_text[:20_000]
    first = BPETokenizer.train(small, 600, pattern=pattern)
    second = BPETokenizer.train(small, 600, pattern=pattern)
    assert first.merges == second.merges and len(first.merges) == 344


def test_merges_never_cross_chunk_boundaries(tok, tok_whole, val_text):
    for sample in (val_text[:5000], *SAMPLES):
        chunk_ends = set(offsets(regex.findall(GPT2_SPLIT_PATTERN, sample)))
        pieces = [tok.token_bytes(i) for i in tok.encode(sample).tolist()]
        assert chunk_ends <= set(offsets(pieces, encoded=True))
    # Without pre-splitting, tokens do span words: "e t" style tokens.
    spanning = [
        tok_whole.token_str(i) for i in range(256, tok_whole.vocab_size)
        if len(regex.findall(GPT2_SPLIT_PATTERN, tok_whole.token_str(i))) > 1
    ]
    assert len(spanning) > 20


def offsets(parts, encoded=False):
    """Byte offsets where each part ends."""
    total, ends = 0, []
    for part in parts:
        total += len(part if encoded else part.encode())
        ends.append(total)
    return ends


def test_trains_only_on_the_text_it_is_given(text, train_text, val_text):
    alone = BPETokenizer.train(train_text[:20_000], 512)
    # Training on other text in between leaves no trace: no hidden state.
    BPETokenizer.train(val_text, 512)
    again = BPETokenizer.train(train_text[:20_000], 512)
    assert again.merges == alone.merges
    # Validation text, if given, would change the vocabulary.
    leaked = BPETokenizer.train(train_text[:20_000] + val_text, 512)
    assert leaked.merges != alone.merges
    # Text the tokenizer never saw still encodes exactly.
    assert alone.decode(alone.encode(val_text)) == val_text


def test_running_out_of_pairs_stops_early_and_says_so():
    with pytest.warns(UserWarning, match="pairs to merge after 2 merges"):
        tokenizer = BPETokenizer.train("abab", 1000, pattern=None)
    assert tokenizer.vocab_size == 258
    assert tokenizer.encode("abab").tolist() == [257]


# --- Against tiktoken --------------------------------------------------------
# tiktoken's educational trainer uses the same counting (overlapping pairs,
# merged left to right) and, through Python's max over a Counter, the same
# tie-break (the pair seen first), so on a small text the two must learn the
# same vocabulary; it recounts every pair after each merge, which is why the
# texts here are short. Its Rust encoder applies merges by rank, lowest
# first and leftmost first, as ours does. It keys ranks by a token's bytes
# and merges any two neighbours whose bytes join into a token, while ours
# merges only the pair that was learned; the two agree when every token has
# distinct bytes and its bytes form only by its own merge, which BPE
# training ensures in practice and these tests confirm.


@pytest.mark.parametrize(
    "pattern, size", [(GPT2_SPLIT_PATTERN, 3000), (None, 1500)],
    ids=["gpt2", "none"],
)
def test_training_matches_tiktoken_educational(train_text, pattern, size):
    small = train_text[:size]
    ours = BPETokenizer.train(small, 420, pattern=pattern)
    theirs = bpe_train(small, 420, pattern or WHOLE_TEXT, visualise=None)
    assert {ours.token_bytes(i): i for i in range(420)} == theirs


def test_encoding_matches_tiktoken(tok, tok_whole, val_text):
    for tokenizer in (tok, tok_whole):
        reference = tiktoken_with(tokenizer)
        for sample in (val_text, *SAMPLES):
            assert tokenizer.encode(sample).tolist() == (
                reference.encode_ordinary(sample)
            )


def test_encoding_of_random_text_matches_tiktoken(tok, tok_whole):
    for tokenizer in (tok, tok_whole):
        reference = tiktoken_with(tokenizer)
        for sample in random_texts():
            assert tokenizer.encode(sample).tolist() == (
                reference.encode_ordinary(sample)
            ), ascii(sample)


# --- Files -------------------------------------------------------------------


@pytest.mark.parametrize("which", ["tok", "tok_whole"])
def test_save_and_load_round_trip(request, tmp_path, val_text, which):
    tokenizer = request.getfixturevalue(which)
    path = tmp_path / "bpe.json"
    tokenizer.save(path)
    loaded = BPETokenizer.load(path)
    assert loaded.merges == tokenizer.merges
    assert loaded.pattern == tokenizer.pattern
    assert torch.equal(loaded.encode(val_text), tokenizer.encode(val_text))
    data = json.loads(path.read_text())
    assert data["format"] == "mlexp-bpe" and data["version"] == 1
    assert data["vocab_size"] == tokenizer.vocab_size
    # Human-readable: one merge per line.
    assert len(path.read_text().splitlines()) == len(tokenizer.merges) + 8
    assert list(tmp_path.iterdir()) == [path]


def test_a_failing_save_leaves_no_file(tok, tmp_path, monkeypatch):
    def fail(*args):
        raise OSError("disk full")

    monkeypatch.setattr(bpe.os, "replace", fail)
    with pytest.raises(OSError, match="disk full"):
        tok.save(tmp_path / "bpe.json")
    assert list(tmp_path.iterdir()) == []


def test_a_failing_save_keeps_the_old_file(tok, tmp_path, monkeypatch):
    path = tmp_path / "bpe.json"
    BPETokenizer.train("abcabc", 258).save(path)
    before = path.read_bytes()

    def fail(fd):
        raise OSError("disk full")

    monkeypatch.setattr(bpe.os, "fsync", fail)
    with pytest.raises(OSError, match="disk full"):
        tok.save(path)
    assert path.read_bytes() == before
    assert list(tmp_path.iterdir()) == [path]


def good_file():
    return {"format": "mlexp-bpe", "version": 1, "pattern": None,
            "vocab_size": 258, "merges": [[97, 98], [256, 99]]}


@pytest.mark.parametrize(
    "change, reason",
    [
        (lambda d: "{not json", "not valid JSON"),
        (lambda d: [1, 2], "'format'"),
        (lambda d: {**d, "format": "other"}, "'format'"),
        (lambda d: {**d, "version": 2}, "version is 2"),
        (lambda d: {**d, "merges": [[97, "b"]]}, "list of \\[int, int\\]"),
        (lambda d: {**d, "merges": [[97]]}, "list of \\[int, int\\]"),
        (lambda d: {**d, "pattern": 3}, "'pattern'"),
        (lambda d: {**d, "pattern": "("}, "not a valid regular expression"),
        (lambda d: {**d, "vocab_size": 300}, "'vocab_size' is 300"),
        (lambda d: {**d, "merges": [[97, 98], [300, 99]]},
         "merge 1 is \\(300, 99\\)"),
    ],
)
def test_a_bad_file_is_refused_clearly(tmp_path, change, reason):
    path = tmp_path / "bpe.json"
    data = change(good_file())
    path.write_text(data if isinstance(data, str) else json.dumps(data))
    with pytest.raises(ValueError, match=reason) as err:
        BPETokenizer.load(path)
    assert str(path) in str(err.value)
    assert "BPETokenizer.save" in str(err.value)


def test_the_good_file_loads(tmp_path):
    path = tmp_path / "bpe.json"
    path.write_text(json.dumps(good_file()))
    assert BPETokenizer.load(path).encode("abc").tolist() == [257]


# --- Errors ------------------------------------------------------------------


@pytest.mark.parametrize(
    "vocab_size, message",
    [
        (255, "vocab_size=255 is too small.*256"),
        (0, "vocab_size=0 is too small"),
        ("512", "vocab_size must be an int, not '512'"),
        (512.0, "vocab_size must be an int, not 512.0"),
    ],
)
def test_bad_vocab_size(vocab_size, message):
    with pytest.raises(ValueError, match=message):
        BPETokenizer.train("some text", vocab_size)


def test_empty_text_is_refused():
    with pytest.raises(ValueError, match="empty text"):
        BPETokenizer.train("", 300)


def test_text_must_be_a_string(tok):
    with pytest.raises(TypeError, match="bytes"):
        BPETokenizer.train(b"bytes", 300)
    with pytest.raises(TypeError, match="bytes"):
        tok.encode(b"bytes")


def test_ids_outside_the_vocabulary_are_named(tok):
    for bad in (1024, -1, 10**9):
        with pytest.raises(ValueError, match=f"token id {bad} .* 1024 tok"):
            tok.decode([65, bad])
    with pytest.raises(ValueError, match="token id 1024 .* 1024 tok"):
        tok.decode(torch.tensor([65, 1024]))
    with pytest.raises(ValueError, match="token id 5000"):
        tok.token_str(5000)
    with pytest.raises(ValueError, match="whole numbers"):
        tok.decode([65.0])
    with pytest.raises(ValueError, match="1-D"):
        tok.decode(torch.zeros(2, 3, dtype=torch.long))


def test_bad_patterns_are_refused():
    with pytest.raises(ValueError, match="not a valid regular expression"):
        BPETokenizer.train("abc", 300, pattern="(")
    with pytest.raises(ValueError, match="capturing groups"):
        BPETokenizer.train("abc", 300, pattern=r"(\w+)|\s")
    with pytest.raises(ValueError, match="skips characters"):
        BPETokenizer.train("a b", 300, pattern=r"\w+")


def test_lone_surrogates_are_refused(tok):
    with pytest.raises(ValueError, match="lone surrogate"):
        tok.encode("ab\ud800")
    with pytest.raises(ValueError, match="position 2"):
        BPETokenizer.train("ab\ud800", 300)


def test_merges_must_only_join_earlier_tokens():
    with pytest.raises(ValueError, match="merge 0 is \\(256, 97\\)"):
        BPETokenizer([(256, 97)])


def test_repr(tok, tok_whole):
    assert repr(tok) == "BPETokenizer(vocab_size=1024, split=GPT-2)"
    assert repr(tok_whole) == "BPETokenizer(vocab_size=640, split=none)"


def test_the_chapters_slow_definition_learns_the_same_merges(corpus):
    """The few lines the chapter shows and the fast trainer agree merge for merge."""
    from mlexp.bpe import BPETokenizer, learn_merges_slowly, merge_pair, pair_counts

    tok, train_ids, _ = corpus
    text = tok.decode(train_ids[:3000])
    assert list(BPETokenizer.train(text, 256 + 60, pattern=None).merges) == learn_merges_slowly(text, 60)
    assert pair_counts([1, 1, 1, 2]) == {(1, 1): 2, (1, 2): 1}
    assert merge_pair([1, 1, 1, 2], (1, 1), 9) == [9, 1, 2]
