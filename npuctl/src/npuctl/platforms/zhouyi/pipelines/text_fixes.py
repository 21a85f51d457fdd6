"""The text fixes ftfy's default configuration applies to ordinary text, for systems without
ftfy (Debian 12 has no python3-ftfy). OpenAI's CLIP tokenizer cleans every text with
``ftfy.fix_text``; without these fixes curly quotes, Latin ligatures and fullwidth letters
give other token ids than the reference. What is not reproduced is ftfy's heuristic repair of
mojibake (UTF-8 decoded as another encoding); ``EXACT`` says whether ftfy is there.

Each fix follows ftfy's documented behaviour (ftfy.fixes): remove terminal escapes, C1
controls read as Windows-1252, Latin ligatures and fullwidth/halfwidth forms by NFKC,
curly quotes uncurled, line breaks unified, surrogate pairs joined, control characters
removed, NFC; repeated until nothing changes, as ftfy does.
"""

from __future__ import annotations

import html
import re
import unicodedata
from html.entities import html5

try:
    import ftfy
except ImportError:  # Debian 12
    ftfy = None  # type: ignore[assignment]

EXACT = ftfy is not None
CLEANING = f"ftfy {ftfy.__version__}" if ftfy is not None else "built-in (no mojibake repair)"

_TERMINAL_ESCAPES = re.compile(r"\033\[((?:\d|;)*)([a-zA-Z])")
_SINGLE_QUOTES = re.compile("[\u02bc\u2018-\u201b]")
_DOUBLE_QUOTES = re.compile("[\u201c-\u201f]")
_LINE_BREAKS = re.compile("\r\n|\r|\u2028|\u2029|\u0085")
_SURROGATE_PAIRS = re.compile("[\ud800-\udbff][\udc00-\udfff]")
_LONE_SURROGATES = re.compile("[\ud800-\udfff]")
_C1 = re.compile("[\x80-\x9f]")

_LIGATURES = {ord(c): unicodedata.normalize("NFKC", c) for c in "ĲĳŉǄǅǆǇǈǉǊǋǌǱǲǳﬀﬁﬂﬃﬄﬆ"}
_LIGATURES[0xFB05] = "\u017ft"  # ftfy keeps the long s of "ﬅ"
_WIDTH = {
    code: unicodedata.normalize("NFKC", chr(code))
    for code in range(0xFF01, 0xFFF0)
    if unicodedata.normalize("NFKC", chr(code)) != chr(code)
}
_WIDTH[0x3000] = " "
_CONTROL = dict.fromkeys(
    [
        *range(0x00, 0x09),
        0x0B,
        *range(0x0E, 0x20),
        0x7F,
        *range(0x206A, 0x2070),
        0xFEFF,
        *range(0xFFF9, 0xFFFD),
    ]
)


def _c1_as_windows_1252(match: re.Match[str]) -> str:
    byte = match.group(0).encode("latin-1")
    try:
        return byte.decode("windows-1252")
    except UnicodeDecodeError:  # 0x81, 0x8d, 0x8f, 0x90, 0x9d are undefined there
        return match.group(0)


def _join_surrogates(match: re.Match[str]) -> str:
    high, low = (ord(c) for c in match.group(0))
    return chr(0x10000 + ((high - 0xD800) << 10) + (low - 0xDC00))


def _fix_once(text: str) -> str:
    text = _TERMINAL_ESCAPES.sub("", text)
    text = _C1.sub(_c1_as_windows_1252, text)
    text = text.translate(_LIGATURES).translate(_WIDTH)
    text = _DOUBLE_QUOTES.sub('"', _SINGLE_QUOTES.sub("'", text))
    text = _LINE_BREAKS.sub("\n", text)
    text = _LONE_SURROGATES.sub("\ufffd", _SURROGATE_PAIRS.sub(_join_surrogates, text))
    text = text.translate(_CONTROL)
    return unicodedata.normalize("NFC", text)


_ENTITY = re.compile(r"&#?[0-9A-Za-z]{1,24};")


def _unescape_entity(match: re.Match[str]) -> str:
    entity = match.group(0)
    if entity[1:] in html5:
        return html5[entity[1:]]
    if entity.startswith("&#"):
        unescaped = html.unescape(entity)
        return entity if ";" in unescaped else unescaped
    return entity


def _fix_segment(segment: str, unescape: bool) -> str:
    for _ in range(16):
        fixed = _fix_once(_ENTITY.sub(_unescape_entity, segment) if unescape else segment)
        if fixed == segment:
            return fixed
        segment = fixed
    return segment


def builtin_fix_text(text: str) -> str:
    """Line by line, as ftfy: HTML entities are decoded until a line holds a "<"."""
    out = []
    unescape = True
    for segment in re.split("(?<=\n)", text):
        if "<" in segment:
            unescape = False
        out.append(_fix_segment(segment, unescape))
    return "".join(out)


def fix_text(text: str) -> str:
    """OpenAI's first cleaning step: ftfy where installed, else the fixes above."""
    if ftfy is not None:
        return ftfy.fix_text(text)
    return builtin_fix_text(text)
