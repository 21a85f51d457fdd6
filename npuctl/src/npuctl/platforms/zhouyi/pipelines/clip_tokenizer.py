"""CLIP's byte-pair-encoding tokenizer, giving the same ids as OpenAI's simple_tokenizer.

The reference cleans every text with ftfy and html.unescape and splits it with a Unicode
regex; that is kept exactly (``text_fixes`` stands in for ftfy where it is missing). What
makes this one faster: printable ASCII without '&' is returned unchanged by that cleaning,
so it skips it and splits with the stdlib ``re`` (identical classes on ASCII); each word's
ids are cached; long words are merged with a heap (O(n log n), the reference is quadratic);
and ``window`` reads only as much of a text as can reach the 77-token window.
"""

from __future__ import annotations

import gzip
import heapq
import html
import re
from functools import lru_cache
from pathlib import Path

import numpy as np
import regex

from .text_fixes import fix_text

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


# Words longer than this are merged with the heap; shorter ones with the reference's loop,
# which is faster for them.
_HEAP_FROM = 48
# The longest symbol in the vocabulary is 32 bytes: n ids never cover more than 32n bytes.
_MAX_SYMBOL_BYTES = 32
_WORD = re.compile(r"\S+")


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
            from npuctl.errors import InputError

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
        self._merges = merges
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
        if len(token) > _HEAP_FROM:
            return self._bpe_heap(token)
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

    def _bpe_heap(self, token: str, *, final: bool = True) -> list[str]:
        """The reference's merges in O(n log n): the lowest-ranked pair first, all its
        occurrences left to right (non-overlapping), exactly as the quadratic loop does.
        ``final``: the token ends a word (its last symbol carries "</w>")."""
        symbols: list[str | None] = [*token[:-1], token[-1] + "</w>"] if final else [*token]
        count = len(symbols)
        following = list(range(1, count + 1))
        preceding = list(range(-1, count - 1))
        ranks = self.bpe_ranks
        heap: list[tuple[int, int]] = []

        def push(left: int) -> None:
            right = following[left]
            if right < count:
                rank = ranks.get((symbols[left], symbols[right]))  # type: ignore[arg-type]
                if rank is not None:
                    heapq.heappush(heap, (rank, left))

        for position in range(count - 1):
            push(position)
        while heap:
            rank = heap[0][0]
            lefts = set()
            while heap and heap[0][0] == rank:
                lefts.add(heapq.heappop(heap)[1])
            pair = self._merges[rank]
            for left in sorted(lefts):
                right = following[left] if symbols[left] is not None else count
                if right >= count or (symbols[left], symbols[right]) != pair:
                    continue  # merged away, or no longer this pair
                symbols[left] = pair[0] + pair[1]
                symbols[right] = None
                following[left] = following[right]
                if following[right] < count:
                    preceding[following[right]] = left
                if preceding[left] >= 0:
                    push(preceding[left])
                push(left)
        return [symbol for symbol in symbols if symbol is not None]

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

    @staticmethod
    def _pieces(text: str) -> tuple[list[str], bool]:
        """The reference's cleaning and split; and whether the pieces are all ASCII."""
        if _FAST.match(text):
            cleaned = _SPACES.sub(" ", text.strip()).lower()
            # "°" falls in the punctuation class
            return _ASCII_SPLIT.findall(cleaned), text.isascii()
        cleaned = html.unescape(html.unescape(fix_text(text))).strip()
        cleaned = regex.sub(r"\s+", " ", cleaned).strip().lower()
        return _UNICODE_SPLIT.findall(cleaned), False

    def encode(self, text: str) -> list[int]:
        """BPE ids of ``text`` without start/end tokens, as the reference's encode()."""
        pieces, ascii_text = self._pieces(text)
        ids: list[int] = []
        known = self._word_ids
        for piece in pieces:
            cached = known.get(piece)
            ids.extend(cached if cached is not None else self._ids(piece, ascii_text))
        return ids

    def window(self, text: str, limit: int = CONTEXT_LENGTH - 2) -> tuple[list[int], bool]:
        """The first ``limit`` ids of ``encode(text)``, and whether there are more; in time
        bounded by ``limit``, whatever the length of the text.

        Only a prefix of the text is cleaned and split, cut at a line break or a space (the
        reference's cleaning works line by line, its split never crosses white space),
        long enough to give more than ``limit`` ids, grown until it does. A single word
        longer than every id could reach is merged only over its first bytes, with a
        margin of as many bytes again (``limit`` ids never cover more than 32 bytes each).
        """
        reach = (limit + 1) * _MAX_SYMBOL_BYTES
        budget = reach
        if len(text) <= budget:  # short enough to encode whole (the usual case)
            whole_ids = self.encode(text)
            return whole_ids[:limit], len(whole_ids) > limit
        while True:
            prefix, whole, last_complete = _prefix(text, budget)
            pieces, ascii_text = self._pieces(prefix)
            ids: list[int] = []
            last = len(pieces) - 1
            for index, piece in enumerate(pieces):
                # A character is at most 4 bytes: most pieces need no encoding to be measured.
                if len(piece) * 2 > reach and len(piece.encode("utf-8")) > 2 * reach:
                    ids.extend(self._ids_of_long_piece(piece, reach))
                elif index == last and not last_complete:
                    break  # cut inside this word: take a longer prefix
                else:
                    ids.extend(self._ids(piece, ascii_text))
                if len(ids) > limit:
                    return ids[:limit], True
            if whole:
                return ids, False
            budget *= 4

    def _ids_of_long_piece(self, piece: str, reach: int) -> list[int]:
        """The first ids of a word too long to merge whole: its first 2 x ``reach`` bytes are
        merged as the inside of a word (no end-of-word mark); the ids within ``reach``
        bytes are kept, the second half is the margin."""
        head = "".join(self.byte_encoder[b] for b in piece.encode("utf-8")[: 2 * reach])
        ids: list[int] = []
        covered = 0
        for symbol in self._bpe_heap(head, final=False):
            covered += len(symbol)
            if covered > reach:
                break
            ids.append(self.encoder[symbol])
        return ids

    def tokenize(self, text: str, context_length: int = CONTEXT_LENGTH) -> np.ndarray:
        """[SOT, ids..., EOT] zero-padded to ``context_length``; a longer text is cut and
        still ends with EOT (as clip.tokenize(truncate=True))."""
        ids, _ = self.window(text, context_length - 2)
        return padded(ids, context_length)


def padded(ids: list[int], context_length: int = CONTEXT_LENGTH) -> np.ndarray:
    """[SOT, ids..., EOT] zero-padded to ``context_length`` (ids must fit)."""
    tokens = np.zeros(context_length, dtype=np.int32)
    tokens[: len(ids) + 2] = [SOT, *ids, EOT]
    return tokens


def _prefix(text: str, budget: int) -> tuple[str, bool, bool]:
    """A prefix of ``text`` holding at least ``budget`` characters that are not white space,
    ending after a word (or after the next line break, if one comes soon); whether it is the
    whole text; and whether its last word is complete."""
    if len(text) <= budget:
        return text, True, True
    seen = 0
    for word in _WORD.finditer(text):
        length = word.end() - word.start()
        if seen + length < budget:
            seen += length
            continue
        if length > budget:  # a huge word: cut inside it
            cut = word.start() + (budget - seen)
            return text[:cut], False, False
        line_break = text.find("\n", word.end(), word.end() + budget)
        cut = line_break + 1 if line_break >= 0 else word.end()
        return text[:cut], not text[cut:].strip(), True
    return text, True, True
