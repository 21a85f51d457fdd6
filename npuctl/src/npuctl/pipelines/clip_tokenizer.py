"""CLIP's byte-pair-encoding tokenizer, giving the same ids as OpenAI's simple_tokenizer.

The reference cleans every text with ftfy and html.unescape and splits it with a Unicode
regex; that is kept exactly. What makes this one faster: printable ASCII without '&' is
returned unchanged by that cleaning, so it skips it and splits with the stdlib ``re``
(identical classes on ASCII); and each word's ids are cached, not only its BPE string.
"""

from __future__ import annotations

import gzip
import html
import re
import unicodedata
from functools import lru_cache
from pathlib import Path

import numpy as np
import regex

try:  # Debian 12 has no python3-ftfy: without it, non-trivial Unicode is only NFC-normalised
    import ftfy
except ImportError:  # pragma: no cover - exercised where ftfy is absent
    ftfy = None

SOT = 49406
EOT = 49407
CONTEXT_LENGTH = 77
VOCAB_SIZE = 49408
_MERGES = 49152 - 256 - 2

_UNICODE_SPLIT = regex.compile(
    r"""<\|startoftext\|>|<\|endoftext\|>|'s|'t|'re|'ve|'m|'ll|'d|[\p{L}]+|[\p{N}]|[^\s\p{L}\p{N}]+""",
    regex.IGNORECASE,
)
# The same pattern for lower-case printable ASCII (and "°", which neither class matches).
_ASCII_SPLIT = re.compile(
    r"""<\|startoftext\|>|<\|endoftext\|>|'s|'t|'re|'ve|'m|'ll|'d|[a-z]+|[0-9]|[^\sa-z0-9]+"""
)
# Texts that OpenAI's cleaning (ftfy.fix_text, html.unescape) returns unchanged: printable
# ASCII except '&' (HTML entities), plus the degree sign of temperatures. Every ftfy rule that
# involves "°" needs another non-ASCII character next to it (mojibake lead bytes such as "Â");
# ftfy changes no other character of this set. The test corpus checks it against ftfy.
_FAST = re.compile(r"^[\x20-\x25\x27-\x7e°]*$")
_SPACES = re.compile(r" {2,}")


def fix_text(text: str) -> str:
    """OpenAI's first cleaning step (ftfy); a plain NFC normalisation if ftfy is missing,
    which differs only for broken text (mojibake, HTML escapes, control characters)."""
    if ftfy is not None:
        return ftfy.fix_text(text)
    return unicodedata.normalize("NFC", text)


EXACT = ftfy is not None


@lru_cache(maxsize=1)
def bytes_to_unicode() -> dict[int, str]:
    printable = [
        *range(ord("!"), ord("~") + 1),
        *range(ord("¡"), ord("¬") + 1),
        *range(ord("®"), ord("ÿ") + 1),
    ]
    codes = printable[:]
    extra = 0
    for byte in range(256):
        if byte not in printable:
            printable.append(byte)
            codes.append(256 + extra)
            extra += 1
    return dict(zip(printable, [chr(code) for code in codes], strict=True))


class ClipTokenizer:
    def __init__(self, vocabulary: Path) -> None:
        try:
            with gzip.open(vocabulary) as stream:
                text = stream.read().decode("utf-8")
        except (OSError, EOFError, UnicodeDecodeError) as error:
            from ..errors import InputError

            raise InputError(
                f"cannot read the CLIP vocabulary {vocabulary}: {error}; run "
                "'npuctl models fetch clip-text'"
            ) from error
        merges = [tuple(line.split()) for line in text.split("\n")[1 : _MERGES + 1]]
        self.byte_encoder = bytes_to_unicode()
        vocab = list(self.byte_encoder.values())
        vocab += [symbol + "</w>" for symbol in vocab]
        vocab += ["".join(merge) for merge in merges]
        vocab += ["<|startoftext|>", "<|endoftext|>"]
        self.encoder = {symbol: index for index, symbol in enumerate(vocab)}
        self.bpe_ranks = {merge: rank for rank, merge in enumerate(merges)}
        self._word_ids: dict[str, list[int]] = {
            "<|startoftext|>": [SOT],
            "<|endoftext|>": [EOT],
        }
        # Every ASCII byte maps to itself in the byte encoder except space (never in a word).
        self._ascii_identity = all(
            self.byte_encoder[byte] == chr(byte) for byte in range(0x21, 0x7F)
        )

    @property
    def vocab_size(self) -> int:
        return len(self.encoder)

    def _bpe(self, token: str) -> list[str]:
        word = [*token[:-1], token[-1] + "</w>"]
        while len(word) > 1:
            pairs = {(word[i], word[i + 1]) for i in range(len(word) - 1)}
            best = min(pairs, key=lambda pair: self.bpe_ranks.get(pair, float("inf")))
            if best not in self.bpe_ranks:
                break
            first, second = best
            merged: list[str] = []
            i = 0
            while i < len(word):
                if i < len(word) - 1 and word[i] == first and word[i + 1] == second:
                    merged.append(first + second)
                    i += 2
                else:
                    merged.append(word[i])
                    i += 1
            word = merged
        return word

    def _ids(self, piece: str, ascii_piece: bool) -> list[int]:
        ids = self._word_ids.get(piece)
        if ids is None:
            if ascii_piece and self._ascii_identity:
                encoded = piece
            else:
                encoded = "".join(self.byte_encoder[b] for b in piece.encode("utf-8"))
            ids = [self.encoder[symbol] for symbol in self._bpe(encoded)]
            self._word_ids[piece] = ids
        return ids

    def encode(self, text: str) -> list[int]:
        """BPE ids of ``text`` without start/end tokens, as the reference's encode()."""
        if _FAST.match(text):
            cleaned = _SPACES.sub(" ", text.strip()).lower()
            pieces = _ASCII_SPLIT.findall(cleaned)  # "°" falls in the punctuation class
            ascii_text = text.isascii()
        else:
            cleaned = html.unescape(html.unescape(fix_text(text))).strip()
            cleaned = regex.sub(r"\s+", " ", cleaned).strip().lower()
            pieces = _UNICODE_SPLIT.findall(cleaned)
            ascii_text = False
        ids: list[int] = []
        for piece in pieces:
            ids.extend(self._ids(piece, ascii_text))
        return ids

    def tokenize(self, text: str, context_length: int = CONTEXT_LENGTH) -> np.ndarray:
        """[SOT, ids..., EOT] zero-padded to ``context_length``; a longer text is cut and
        still ends with EOT (as clip.tokenize(truncate=True))."""
        ids = [SOT, *self.encode(text), EOT]
        if len(ids) > context_length:
            ids = ids[:context_length]
            ids[-1] = EOT
        tokens = np.zeros(context_length, dtype=np.int32)
        tokens[: len(ids)] = ids
        return tokens
