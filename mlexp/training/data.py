"""The character tokenizer and the TinyShakespeare corpus, found locally or
downloaded once.

Where the text comes from, in order: an explicit ``path``; the folder named
by the ``MLEXP_DATA`` environment variable; the user's cache
(``$XDG_CACHE_HOME/mlexp`` or ``~/.cache/mlexp``); a download from the
corpus's public home into that cache. Every copy is checked against its
SHA-256 before use, so a truncated or edited file is an error, never a
silent change of the training data.
"""

from __future__ import annotations

import hashlib
import os
import pathlib
import tempfile
import urllib.error
import urllib.request

import torch
from torch import Tensor

__all__ = [
    "CharTokenizer",
    "load_char_corpus",
    "load_text_split",
    "corpus_path",
    "TINYSHAKESPEARE_URL",
    "TINYSHAKESPEARE_SHA256",
]

TINYSHAKESPEARE_FILE = "tinyshakespeare.txt"
TINYSHAKESPEARE_URL = "https://raw.githubusercontent.com/karpathy/char-rnn/master/data/tinyshakespeare/input.txt"
TINYSHAKESPEARE_SHA256 = (
    "86c4e6aa9db7c042ec79f339dcb96d42b0075e16b8fc2e86bf0ca57e2dc565ed"
)
DATA_ENV = "MLEXP_DATA"


class CharTokenizer:
    """One token per character; ids follow the sorted order of the
    characters in the text."""

    def __init__(self, text: str):
        self.chars = sorted(set(text))
        self.stoi = {ch: i for i, ch in enumerate(self.chars)}

    @property
    def vocab_size(self) -> int:
        return len(self.chars)

    def encode(self, text: str) -> Tensor:
        """Text to a 1-D LongTensor of ids."""
        try:
            return torch.tensor(
                [self.stoi[ch] for ch in text], dtype=torch.long
            )
        except KeyError as err:
            raise ValueError(
                f"character {err.args[0]!r} is not in the "
                f"{self.vocab_size}-character vocabulary; "
                "remove it or build the tokenizer from a text that "
                "contains it"
            ) from None

    def token_str(self, token: int) -> str:
        """The text of one token: its character (as BPETokenizer has it)."""
        return self.chars[token]

    def decode(self, ids) -> str:
        """Ids (a tensor on any device, or a list of ints) back to text."""
        if isinstance(ids, Tensor):
            ids = ids.tolist()
        return "".join(self.chars[i] for i in ids)


def _cache_dir() -> pathlib.Path:
    base = (
        os.environ.get("XDG_CACHE_HOME") or pathlib.Path.home() / ".cache"
    )
    return pathlib.Path(base) / "mlexp"


def _sha256(path: pathlib.Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _verify(path: pathlib.Path, sha256: str | None) -> None:
    if sha256 is None:
        return
    actual = _sha256(path)
    if actual != sha256:
        raise ValueError(
            f"{path} is not the expected corpus (SHA-256 {actual}, "
            f"expected {sha256}); "
            "the file is truncated or changed. Delete it so a fresh copy "
            "is downloaded, "
            f"or replace it with the original from {TINYSHAKESPEARE_URL}"
        )


def _download(
    url: str, dest: pathlib.Path, sha256: str | None, timeout: float = 30.0
) -> None:
    """Download to a temporary file beside ``dest``, verify it, then rename
    it into place.

    The rename is atomic, so an interrupted or corrupt download never leaves
    a half-written file where the next run would find it.
    """
    dest.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(
        dir=dest.parent, prefix=dest.name + ".", suffix=".part"
    )
    tmp = pathlib.Path(tmp_name)
    try:
        with (
            os.fdopen(fd, "wb") as out,
            urllib.request.urlopen(url, timeout=timeout) as response,
        ):
            while chunk := response.read(1 << 16):
                out.write(chunk)
        _verify(tmp, sha256)
        os.replace(tmp, dest)
    finally:
        tmp.unlink(missing_ok=True)


def corpus_path(
    path: str | os.PathLike | None = None,
    *,
    url: str = TINYSHAKESPEARE_URL,
    sha256: str | None = TINYSHAKESPEARE_SHA256,
    filename: str = TINYSHAKESPEARE_FILE,
) -> pathlib.Path:
    """Find the corpus file (explicit path, ``$MLEXP_DATA``, user cache),
    downloading it if needed."""
    if path is not None:
        found = pathlib.Path(path)
        if not found.is_file():
            raise FileNotFoundError(
                f"no corpus file at {found}; check the path or omit it "
                "to use the default corpus"
            )
        _verify(found, sha256)
        return found
    if os.environ.get(DATA_ENV):
        found = pathlib.Path(os.environ[DATA_ENV]) / filename
        if not found.is_file():
            raise FileNotFoundError(
                f"{DATA_ENV}={os.environ[DATA_ENV]} names a folder "
                f"without {filename}; "
                f"put the file there or unset {DATA_ENV}"
            )
        _verify(found, sha256)
        return found
    cached = _cache_dir() / filename
    if not cached.is_file():
        try:
            _download(url, cached, sha256)
        except (urllib.error.URLError, TimeoutError, OSError) as err:
            raise FileNotFoundError(
                f"could not download the corpus from {url} ({err}). "
                "Offline, supply it yourself: "
                f"save that file as {cached}, or set {DATA_ENV} to a "
                f"folder holding {filename}, "
                "or pass load_char_corpus(path=...)"
            ) from err
    _verify(cached, sha256)
    return cached


def load_text_split(
    path: str | os.PathLike | None = None,
    *,
    val_fraction: float = 0.1,
    url: str = TINYSHAKESPEARE_URL,
    sha256: str | None = TINYSHAKESPEARE_SHA256,
) -> tuple[str, str]:
    """The corpus as text, split by position: the first 90% of its
    characters train, the last 10% validate.

    Every tokenizer of the book learns from the training text only and is
    judged on the same validation text, the one ``load_char_corpus``
    holds out.
    """
    if not 0.0 < val_fraction < 1.0:
        raise ValueError(
            f"val_fraction={val_fraction} must lie strictly between 0 and 1"
        )
    text = corpus_path(path, url=url, sha256=sha256).read_text(
        encoding="utf-8"
    )
    n_train = int(len(text) * (1.0 - val_fraction))
    return text[:n_train], text[n_train:]


def load_char_corpus(
    path: str | os.PathLike | None = None,
    *,
    val_fraction: float = 0.1,
    url: str = TINYSHAKESPEARE_URL,
    sha256: str | None = TINYSHAKESPEARE_SHA256,
) -> tuple[CharTokenizer, Tensor, Tensor]:
    """Load a character corpus and split it: the first 90% trains, the last
    10% validates.

    Returns the tokenizer and two 1-D LongTensors of ids. The split is by
    position, not at random, so validation text is text the model has never
    seen. For a corpus of your own, pass ``path=...`` and ``sha256=None``
    (or its checksum).
    """
    train, val = load_text_split(
        path, val_fraction=val_fraction, url=url, sha256=sha256
    )
    tok = CharTokenizer(train + val)
    return tok, tok.encode(train), tok.encode(val)
