"""How fast Chapter 2's byte-level BPE learns and encodes, and how much it compresses.

Prints, for each way of training (with GPT-2's pre-splitting, and with ``pattern=None``, one
sequence whose merges may cross spaces):

1. the time to learn a vocabulary (4,096 tokens by default) from the training split, the
   first 90% of TinyShakespeare (1,003,854 characters);
2. the time to encode the whole corpus (1.1 MB), starting with an empty chunk cache;
3. characters per token on the validation split (the last 10%), which the tokenizer never
   saw, and on the training split;
4. the first merges learned, and with pre-splitting, tiktoken's time to encode the corpus
   with the same tokens (its Rust encoder must give the same ids).

Usage::

    MLEXP_DATA=../shared/data python benchmarks/bpe_speed.py [--vocab-size 4096]

The machine is noisy: compare figures from the same run, and read ratios rather than
absolute numbers.
"""

from __future__ import annotations

import argparse
import time

from mlexp.bpe import GPT2_SPLIT_PATTERN, BPETokenizer
from mlexp.training.data import corpus_path


def timed(fn, *args, **kwargs):
    """``fn``'s result and the seconds it took."""
    start = time.perf_counter()
    result = fn(*args, **kwargs)
    return result, time.perf_counter() - start


def tiktoken_seconds(tok: BPETokenizer, text: str) -> float | None:
    """tiktoken's time to encode ``text`` with our tokens; it must agree with ours."""
    try:
        import tiktoken
    except ImportError:
        return None
    ranks = {tok.token_bytes(i): i for i in range(tok.vocab_size)}
    enc = tiktoken.Encoding(name="mlexp-bpe", pat_str=tok.pattern, mergeable_ranks=ranks, special_tokens={})
    ids, seconds = timed(enc.encode_ordinary, text)
    if ids != tok.encode(text).tolist():
        raise RuntimeError("tiktoken and mlexp encode the corpus differently")
    return seconds


def row(label: str, value: str) -> None:
    print(f"  {label + ':':48s} {value}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--vocab-size", type=int, default=4096, help="tokens to learn, bytes included")
    args = parser.parse_args()

    text = corpus_path().read_text(encoding="utf-8")
    n_train = int(0.9 * len(text))
    train, val = text[:n_train], text[n_train:]
    print(f"corpus {len(text):,} characters: train {len(train):,}, validation {len(val):,}")

    for name, pattern in (("GPT-2 pre-split", GPT2_SPLIT_PATTERN), ("pattern=None", None)):
        tok, learn_s = timed(BPETokenizer.train, train, args.vocab_size, pattern=pattern)
        ids, encode_s = timed(tok.encode, text)
        if tok.decode(ids) != text:
            raise RuntimeError(f"{name}: the corpus does not round-trip")
        val_ratio = len(val) / len(tok.encode(val))
        train_ratio = len(train) / len(tok.encode(train))
        print(f"{name}:")
        row(f"learn {tok.vocab_size:,} tokens from the training split", f"{learn_s:6.2f} s")
        row("encode the whole corpus", f"{encode_s:6.2f} s -> {len(ids):,} tokens")
        row("characters per token, validation", f"{val_ratio:6.3f}   (training {train_ratio:.3f})")
        if pattern is not None and (tk := tiktoken_seconds(tok, text)) is not None:
            row("tiktoken (Rust): the same ids, encoded in", f"{tk:6.2f} s")
        print("  first merges: " + ", ".join(repr(tok.token_str(256 + r)) for r in range(10)))


if __name__ == "__main__":
    main()
