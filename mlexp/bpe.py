"""Byte-level byte-pair encoding (BPE), the subword tokenizer of Chapter 2.

A character vocabulary cannot encode a character it has never seen. UTF-8
bytes can encode any text with 256 symbols, but a byte sequence is long:
about one token per character for English, up to four for other scripts.
Byte-pair encoding (Gage, 1994; Sennrich et al., 2016) starts from the 256
byte values and repeatedly merges the most frequent adjacent pair of
tokens into a new token, so frequent words become single tokens and rare
ones stay spelled out in pieces. Any text still encodes, because every byte
is a token.

Four choices fix what the tokenizer learns:

* **Pre-splitting** (the default). With a ``pattern``, GPT-2's regular
  expression unless another is given, the text is first cut into chunks:
  a word with its leading space, a number, a run of punctuation, a run of
  whitespace. Merges never cross a chunk boundary. Without that, the
  merges compress more, since a token can span words (``"of the "``), but
  the vocabulary fills with fragments of two words (``"s of "``) and with
  words glued to their punctuation (``"lord, "``); GPT-2's authors
  (Radford et al., 2019, section 2.2) split for that reason. With
  ``pattern=None`` the text is one sequence and merges may cross
  anything; Chapter 2 compares the two.
* **Counting.** Pairs are counted with overlaps, as the usual reference
  code does: ``"aaa"`` holds the pair ``(a, a)`` twice. A merge then
  rewrites the occurrences from left to right, so ``"aaa"`` becomes
  ``["aa", "a"]``.
* **Ties.** When several pairs share the highest count, the one whose
  first occurrence comes first in the text wins. The rule depends on the
  text alone, not on the order of a hash table, so training is
  deterministic; and it is the rule that tiktoken's educational trainer
  and minbpe follow, which lets the tests check our merges against an
  independent trainer.
* **Running out.** A short text can run out of pairs before the requested
  vocabulary size. Training then stops early with a warning, and
  ``vocab_size`` reports the size actually reached.

Encoding applies the learned merges by rank, lowest first, each at its
leftmost place first: the standard definition, the one tiktoken
implements. Decoding joins the tokens' bytes and decodes them as UTF-8, so
any text round-trips exactly; ids cut in the middle of a character decode
to the replacement character U+FFFD.

Training keeps pair counts up to date instead of recounting the whole text
after every merge: each merge changes only the pairs next to the places
where it applies. That makes learning 4,096 tokens from 1 MB of text a
matter of seconds in pure Python.
"""

from __future__ import annotations

import heapq
import json
import operator
import os
import pathlib
import tempfile
import warnings
from collections import Counter, defaultdict
from collections.abc import Iterable

import regex
import torch
from torch import Tensor

__all__ = [
    "BPETokenizer",
    "GPT2_SPLIT_PATTERN",
    "pair_counts",
    "merge_pair",
    "learn_merges_slowly",
]

# GPT-2's pre-split pattern (Radford et al., 2019, encoder.py): English
# contractions, a word with an optional leading space, a number, a run of
# other symbols, whitespace. \p{L} and \p{N} are Unicode letters and
# numbers, which is why the `regex` package is needed rather than `re`.
GPT2_SPLIT_PATTERN = (
    r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+"""
    r"""|\s+(?!\S)|\s+"""
)

FILE_FORMAT = "mlexp-bpe"
FILE_VERSION = 1

Pair = tuple[int, int]


# --- The idea, slowly: what Chapter 2 shows -------------------------------


def pair_counts(ids: list[int]) -> Counter[Pair]:
    """How often each adjacent pair occurs in ``ids``, overlaps included.

    The Counter lists pairs in the order they first occur, which is how
    ties are broken: of equally frequent pairs, the first one wins.
    """
    return Counter(zip(ids, ids[1:]))


def merge_pair(ids: list[int], pair: Pair, new: int) -> list[int]:
    """``ids`` with each occurrence of ``pair``, from the left, replaced
    by the single token ``new``."""
    merged, i = [], 0
    while i < len(ids):
        if i + 1 < len(ids) and (ids[i], ids[i + 1]) == pair:
            merged.append(new)
            i += 2
        else:
            merged.append(ids[i])
            i += 1
    return merged


def learn_merges_slowly(text: str, n_merges: int) -> list[Pair]:
    """BPE in its plainest form: bytes and no pre-splitting.

    Start from the UTF-8 bytes; count every adjacent pair; give the most
    frequent one the next free id (256, 257, ...); repeat. Gage's
    compressor instead wrote each pair as a byte value the data did not
    use, so it never grew past 256 symbols. Recounting the whole text for
    every merge is slow on a large text, so ``BPETokenizer.train`` learns
    the same merges by updating only the counts a merge changes.
    """
    ids = list(text.encode("utf-8"))
    merges = []
    for new in range(256, 256 + n_merges):
        counts = pair_counts(ids)
        if not counts:
            break
        pair = max(counts, key=counts.get)  # the first of the most frequent
        ids = merge_pair(ids, pair, new)
        merges.append(pair)
    return merges


# --- Training: learn the merges -------------------------------------------


def _most_frequent(
    heap: list[tuple[int, Pair]],
    counts: dict[Pair, int],
    where: dict[Pair, set[int]],
) -> Pair | None:
    """Take the most frequent pair off the heap; a tie goes to the first.

    The heap holds ``(-count, pair)`` entries. An entry is stale when the
    pair's count has changed since it was pushed (a newer entry exists);
    stale entries are dropped as they surface. Every valid entry that ties
    for the top count is taken off; the pair whose first position (the
    smallest in ``where``) comes first in the text wins, the others go
    back.
    """
    tied: set[Pair] = set()
    top = 0
    while heap:
        negative, pair = heap[0]
        if counts.get(pair) != -negative:
            heapq.heappop(heap)  # stale
            continue
        if tied and -negative < top:
            break
        heapq.heappop(heap)
        tied.add(pair)
        top = -negative
    if not tied:
        return None
    best = min(tied, key=lambda pair: min(where[pair]))
    for pair in tied - {best}:
        heapq.heappush(heap, (-top, pair))
    return best


def _learn_merges(
    pieces: Iterable[tuple[bytes, int]], n_merges: int
) -> list[Pair]:
    """Up to ``n_merges`` merges learned from ``(piece, count)`` pairs.

    Every piece is laid out once in a flat array of token ids, in the
    order the pieces are given, with its count as the weight of each of
    its positions; links ``prev`` and ``next`` chain the live tokens of a
    piece and end at -1, so no pair spans two pieces. ``counts`` holds the
    weighted count of each adjacent pair and ``where`` the positions of its
    left token. A merge rewrites only the positions in ``where[pair]`` and
    the counts of the pairs next to them.
    """
    tokens: list[int] = []  # token id at each position; -1 once merged away
    weight: list[int] = []  # how many times the piece holding it occurs
    prev: list[int] = []
    next_: list[int] = []
    for piece, count in pieces:
        start, n = len(tokens), len(piece)
        tokens.extend(piece)
        weight.extend([count] * n)
        prev.extend(range(start - 1, start + n - 1))
        prev[start] = -1
        next_.extend(range(start + 1, start + n + 1))
        next_[-1] = -1

    counts: dict[Pair, int] = defaultdict(int)
    where: dict[Pair, set[int]] = defaultdict(set)
    changed: set[Pair] = set()

    def add(pair: Pair, i: int) -> None:
        counts[pair] += weight[i]
        where[pair].add(i)
        changed.add(pair)

    def remove(pair: Pair, i: int) -> None:
        counts[pair] -= weight[i]
        where[pair].discard(i)
        changed.add(pair)
        if not counts[pair]:
            del counts[pair], where[pair]

    for i, j in enumerate(next_):
        if j != -1:
            add((tokens[i], tokens[j]), i)
    heap = [(-count, pair) for pair, count in counts.items()]
    heapq.heapify(heap)

    merges: list[Pair] = []
    while len(merges) < n_merges:
        pair = _most_frequent(heap, counts, where)
        if pair is None:
            break  # every piece is a single token: nothing left to merge
        a, b = pair
        new = 256 + len(merges)
        merges.append(pair)
        changed.clear()
        # Left to right, so that "aaa" merges (a, a) at the left.
        for i in sorted(where[pair]):
            j = next_[i]
            if tokens[i] != a or j == -1 or tokens[j] != b:
                continue  # an overlapping merge just before used i or j
            h, k = prev[i], next_[j]
            remove(pair, i)
            if h != -1:
                remove((tokens[h], a), h)
                add((tokens[h], new), h)
            if k != -1:
                remove((b, tokens[k]), j)
                add((new, tokens[k]), i)
                prev[k] = i
            tokens[i], tokens[j], next_[i] = new, -1, k
        for changed_pair in changed:
            if changed_pair in counts:
                heapq.heappush(heap, (-counts[changed_pair], changed_pair))
    return merges


# --- Encoding: apply the merges -------------------------------------------


def _apply_merges(
    ids: list[int], merges: tuple[Pair, ...], ranks: dict[Pair, int]
) -> list[int]:
    """Encode a piece's byte ids: each merge in the order learned, applied
    at every place it occurs, left to right.

    That is the standard definition (merge the lowest-ranked pair present,
    at its leftmost place, and repeat), done without rescanning the piece:
    ``places[rank]`` lists the positions where that merge's pair starts. A
    merge creates only pairs that hold its new token, and every merge using
    that token was learned later, so those pairs go to buckets not yet
    visited. Only the ranks that occur are visited, smallest first, which
    keeps a long piece (the whole text when ``pattern=None``) fast.
    """
    n = len(ids)
    if n < 2:
        return ids
    ids = list(ids)  # -1 marks a position merged into its left neighbour
    prev = list(range(-1, n - 1))
    next_ = list(range(1, n + 1))
    next_[-1] = -1
    places: dict[int, list[int]] = defaultdict(list)
    order: list[int] = []  # a heap of the ranks that have places

    def note(i: int, pair: Pair) -> None:
        rank = ranks.get(pair)
        if rank is not None:
            if rank not in places:
                heapq.heappush(order, rank)
            places[rank].append(i)

    for i, pair in enumerate(zip(ids, ids[1:])):
        note(i, pair)
    while order:
        rank = heapq.heappop(order)
        a, b = merges[rank]
        new = 256 + rank
        for i in sorted(places.pop(rank)):
            j = next_[i]
            if ids[i] != a or j == -1 or ids[j] != b:
                continue  # an earlier merge used i or j: (a, a) in "aaa"
            k = next_[j]
            ids[i], ids[j], next_[i] = new, -1, k
            if k != -1:
                prev[k] = i
                note(i, (new, ids[k]))
            if prev[i] != -1:
                note(prev[i], (ids[prev[i]], new))
    return [token for token in ids if token != -1]


def _utf8(text: str) -> bytes:
    """UTF-8 bytes of ``text``, with a clear error for a lone surrogate."""
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError as err:
        raise ValueError(
            f"the text holds {text[err.start]!r} at position {err.start}, "
            "a lone surrogate that is not valid Unicode and has no UTF-8 "
            "bytes; remove it, or read the file with errors='replace'"
        ) from None


# --- The tokenizer --------------------------------------------------------


class BPETokenizer:
    """Byte-level BPE: 256 byte tokens, then one token per learned merge.

    Token ``256 + r`` is the merge of rank ``r``, the pair ``merges[r]``.
    Build one with :meth:`train` or :meth:`load`; the constructor takes the
    merges and pattern directly, for tokenizers learned elsewhere.
    """

    def __init__(
        self,
        merges: Iterable[Pair],
        pattern: str | None = GPT2_SPLIT_PATTERN,
    ):
        try:
            merges = tuple(
                (operator.index(a), operator.index(b)) for a, b in merges
            )
        except (TypeError, ValueError):
            raise ValueError(
                "merges must be pairs of token ids (ints), in the order "
                "they were learned"
            ) from None
        for rank, (a, b) in enumerate(merges):
            if not (0 <= a < 256 + rank and 0 <= b < 256 + rank):
                raise ValueError(
                    f"merge {rank} is ({a}, {b}), but a merge can only "
                    "join tokens that exist before it (ids 0 to "
                    f"{255 + rank}); the merges are corrupt or out of order"
                )
        try:
            compiled = None if pattern is None else regex.compile(pattern)
        except (regex.error, TypeError) as err:
            raise ValueError(
                f"pattern {pattern!r} is not a valid regular expression "
                f"({err}); pass GPT2_SPLIT_PATTERN, a valid pattern or None"
            ) from None
        if compiled is not None and compiled.groups:
            raise ValueError(
                f"pattern {pattern!r} has capturing groups, which change "
                "what findall returns; write each group as (?:...)"
            )
        self.pattern = pattern
        self._regex = compiled
        self.merges = merges  # a tuple, so it cannot drift from the tables
        self._ranks = {pair: rank for rank, pair in enumerate(merges)}
        self._bytes = [bytes([i]) for i in range(256)]
        for a, b in merges:
            self._bytes.append(self._bytes[a] + self._bytes[b])
        self._cache: dict[str, list[int]] = {}  # chunk -> its token ids

    def _chunks(self, text: str) -> list[str]:
        """The chunks that merges may not cross: the whole text without a
        pattern. A pattern must match every character (GPT-2's does: its
        last alternatives match any whitespace, the others any other
        character), or the characters it skips would be lost."""
        if self._regex is None:
            return [text] if text else []
        chunks = self._regex.findall(text)
        if sum(map(len, chunks)) != len(text):
            raise ValueError(
                f"the split pattern {self.pattern!r} skips characters of "
                "the text, which would be lost; end it with a catch-all "
                r"alternative such as |[\s\S]"
            )
        return chunks

    @classmethod
    def train(
        cls,
        text: str,
        vocab_size: int,
        pattern: str | None = GPT2_SPLIT_PATTERN,
    ) -> BPETokenizer:
        """Learn ``vocab_size - 256`` merges from ``text`` and nothing else.

        Pass the training split alone: whatever text is given shapes the
        vocabulary, so validation text given here would leak into it. With
        a ``pattern``, each distinct chunk is counted once with its
        frequency, which makes training on a megabyte fast. With
        ``pattern=None`` the whole text is one sequence: every position is
        tracked, so training takes several times longer and a few hundred
        megabytes of memory per megabyte of text.
        """
        if not isinstance(text, str):
            raise TypeError(f"text must be str, not {type(text).__name__}")
        try:
            vocab_size = operator.index(vocab_size)
        except TypeError:
            raise ValueError(
                f"vocab_size must be an int, not {vocab_size!r}; "
                "pass a whole number of at least 256"
            ) from None
        if vocab_size < 256:
            raise ValueError(
                f"vocab_size={vocab_size} is too small: a byte-level "
                "vocabulary starts with the 256 byte values; pass 256 or "
                "more (256 learns no merges)"
            )
        if not text:
            raise ValueError(
                "cannot train on an empty text; pass the training text"
            )
        _utf8(text)  # a lone surrogate fails here, with its position
        # Distinct chunks with their counts, in order of first appearance.
        chunks = Counter(cls((), pattern)._chunks(text))
        pieces = [(c.encode("utf-8"), n) for c, n in chunks.items() if c]
        merges = _learn_merges(pieces, vocab_size - 256)
        if len(merges) < vocab_size - 256:
            warnings.warn(
                f"the text ran out of pairs to merge after {len(merges)} "
                f"merges; the vocabulary has {256 + len(merges)} tokens, "
                f"not {vocab_size}. Train on more text for a larger one",
                stacklevel=2,
            )
        return cls(merges, pattern)

    @property
    def vocab_size(self) -> int:
        """Number of token ids: 256 bytes plus one per merge."""
        return 256 + len(self.merges)

    def token_bytes(self, token: int) -> bytes:
        """The bytes a token stands for."""
        (token,) = self._check_ids([token])
        return self._bytes[token]

    def token_str(self, token: int) -> str:
        """A token as text, for display; a partial UTF-8 character shows as
        the replacement character U+FFFD."""
        return self.token_bytes(token).decode("utf-8", errors="replace")

    def encode(self, text: str) -> Tensor:
        """Text to a 1-D LongTensor of token ids.

        Each distinct chunk is encoded once and remembered, since a text
        repeats its words; the cache grows with the distinct chunks seen.
        """
        if not isinstance(text, str):
            raise TypeError(f"text must be str, not {type(text).__name__}")
        if self._regex is None:
            ids = _apply_merges(list(_utf8(text)), self.merges, self._ranks)
            return torch.tensor(ids, dtype=torch.long)  # (n_tokens,)
        ids: list[int] = []
        for chunk in self._chunks(text):
            chunk_ids = self._cache.get(chunk)
            if chunk_ids is None:
                chunk_ids = _apply_merges(
                    list(_utf8(chunk)), self.merges, self._ranks
                )
                self._cache[chunk] = chunk_ids
            ids.extend(chunk_ids)
        return torch.tensor(ids, dtype=torch.long)  # (n_tokens,)

    def decode(self, ids: Tensor | Iterable[int]) -> str:
        """Token ids (a 1-D tensor on any device, or ints) back to text.

        Any text that was encoded decodes exactly. A sequence of ids cut at
        an arbitrary place can end inside a multi-byte character; such
        bytes decode as the replacement character U+FFFD rather than
        raising (``errors="replace"``, tiktoken's default too).
        """
        if isinstance(ids, Tensor):
            if ids.dim() != 1:
                raise ValueError(
                    f"decode takes a 1-D tensor of ids, got shape "
                    f"{tuple(ids.shape)}; decode each row separately"
                )
            ids = ids.tolist()
        ids = self._check_ids(ids)
        data = b"".join(self._bytes[i] for i in ids)
        return data.decode("utf-8", errors="replace")

    def _check_ids(self, ids: Iterable[int]) -> list[int]:
        """The ids as a list of ints; a clear error for anything that is not
        a token id, naming the first culprit."""
        try:
            ids = [operator.index(i) for i in ids]
        except TypeError:
            raise ValueError(
                "token ids must be whole numbers; pass ints or a long "
                "tensor, not floats or strings"
            ) from None
        size = self.vocab_size
        for i in ids:
            if not 0 <= i < size:
                raise ValueError(
                    f"token id {i} is outside the vocabulary of {size} "
                    f"tokens (ids 0 to {size - 1}); were these ids made by "
                    "another tokenizer?"
                )
        return ids

    # --- Files ------------------------------------------------------------

    def save(self, path: str | os.PathLike) -> None:
        """Write the merges and pattern as JSON, one merge per line.

        The file is written beside ``path`` under a temporary name and
        renamed into place, which is atomic: a failure leaves the old file
        (or none), never half of a new one.
        """
        path = pathlib.Path(path)
        header = {
            "format": FILE_FORMAT,
            "version": FILE_VERSION,
            "pattern": self.pattern,
            "vocab_size": self.vocab_size,
        }
        pairs = ",\n".join(f"    [{a}, {b}]" for a, b in self.merges)
        text = json.dumps(header, indent=2)[:-2]  # without "\n}"
        text += f',\n  "merges": [\n{pairs}\n  ]\n}}\n'
        fd, tmp_name = tempfile.mkstemp(
            dir=path.parent, prefix=path.name + ".", suffix=".tmp"
        )
        tmp = pathlib.Path(tmp_name)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as out:
                out.write(text)
                out.flush()
                os.fsync(out.fileno())
            os.chmod(tmp, 0o644)  # mkstemp makes it private to its owner
            os.replace(tmp, path)
        finally:
            tmp.unlink(missing_ok=True)

    @classmethod
    def load(cls, path: str | os.PathLike) -> BPETokenizer:
        """Read a tokenizer written by :meth:`save`."""
        path = pathlib.Path(path)

        def bad(reason: str) -> ValueError:
            return ValueError(
                f"{path} is not a BPE tokenizer file of format "
                f"{FILE_FORMAT} version {FILE_VERSION}: {reason}; "
                "save it again with BPETokenizer.save"
            )

        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as err:
            raise bad(f"it is not valid JSON ({err})") from None
        if not isinstance(data, dict) or data.get("format") != FILE_FORMAT:
            raise bad("the 'format' field is missing or different")
        if data.get("version") != FILE_VERSION:
            raise bad(f"its version is {data.get('version')!r}")
        merges, pattern = data.get("merges"), data.get("pattern", ...)
        if not isinstance(merges, list) or not all(
            isinstance(m, list) and [type(i) for i in m] == [int, int]
            for m in merges
        ):
            raise bad("'merges' must be a list of [int, int] pairs")
        if pattern is not None and not isinstance(pattern, str):
            raise bad("'pattern' must be a string or null")
        if data.get("vocab_size") != 256 + len(merges):
            raise bad(
                f"'vocab_size' is {data.get('vocab_size')!r} but the file "
                f"has {len(merges)} merges, which make {256 + len(merges)}"
            )
        try:
            return cls(merges, pattern)
        except ValueError as err:
            raise bad(str(err)) from None

    def __repr__(self) -> str:
        names = {GPT2_SPLIT_PATTERN: "GPT-2", None: "none"}
        split = names.get(self.pattern, repr(self.pattern))
        return f"BPETokenizer(vocab_size={self.vocab_size}, split={split})"
