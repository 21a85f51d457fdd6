"""The CLIP tokenizer gives the same ids as OpenAI's reference simple_tokenizer.py (loaded by
path from a pinned PyPI wheel: importing the 'clip' package would import torch)."""

import importlib.util
import random
import string

import pytest

from npuctl.platforms.zhouyi.pipelines.clip_tokenizer import (
    CONTEXT_LENGTH,
    EOT,
    SOT,
    VOCAB_SIZE,
    ClipTokenizer,
)


@pytest.fixture(scope="module")
def ours(clip_vocab):
    return ClipTokenizer(clip_vocab)


@pytest.fixture(scope="module")
def reference(reference_tokenizer_source, clip_vocab):
    pytest.importorskip(
        "ftfy", reason="OpenAI's reference tokenizer needs ftfy (not packaged in Debian 12)"
    )
    spec = importlib.util.spec_from_file_location(
        "openai_simple_tokenizer", reference_tokenizer_source
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.SimpleTokenizer(str(clip_vocab))


def corpus(count: int = 1200) -> list[str]:
    """Varied strings: words, numbers, punctuation, system metrics, Unicode, HTML entities,
    mojibake, odd whitespace, and over-long text."""
    rng = random.Random(20261122)
    words = [
        "a",
        "photo",
        "of",
        "the",
        "cat",
        "dog's",
        "running",
        "isn't",
        "we'll",
        "NPU",
        "Orange",
        "Pi",
        "6",
        "Plus",
        "temperature",
        "naïve",
        "café",
        "Zürich",
        "日本語",
        "テキスト",
        "中文",
        "한국어",
        "Ελληνικά",
        "русский",
        "עברית",
        "العربية",
        "emoji😀",
        "🚀",
        "👩‍💻",
        "&amp;",
        "&lt;b&gt;",
        "Ã©",
        "â€™",
        "x²",
        "½",
        "١٢٣",
        "Ⅻ",
        "straße",
        "İstanbul",
        "ﬁne",
        "Ｆｕｌｌ",
        "tab\tbed",
        "new\nline",
        "‘quoted’",
        "“double”",
        "—",
        "…",
        "$9.99",
        "100%",
        "e=mc^2",
        "C++",
        "a_b",
        "<|endoftext|>",
    ]
    texts = [
        "a photo of a cat",
        "",
        "   ",
        "host mybox cpu 2.4% ram 25.5% load 0.46 temps [soc 44°C] disks [/ 19.7%]",
        "HELLO World!!!",
        "don't stop believin'",
    ]
    while len(texts) < count:
        kind = rng.random()
        if kind < 0.3:
            texts.append(" ".join(rng.choice(words) for _ in range(rng.randint(1, 12))))
        elif kind < 0.5:
            texts.append("".join(rng.choice(string.printable) for _ in range(rng.randint(1, 60))))
        elif kind < 0.7:
            texts.append(
                f"host box{rng.randint(1, 99)} cpu {rng.uniform(0, 100):.1f}% ram "
                f"{rng.uniform(0, 100):.1f}% load {rng.uniform(0, 9):.2f} temps "
                f"[soc {rng.randint(30, 90)}°C] disks [/ {rng.uniform(0, 100):.1f}%]"
            )
        elif kind < 0.9:
            texts.append("".join(chr(rng.randint(0x20, 0x2FFF)) for _ in range(rng.randint(1, 30))))
        else:
            texts.append(" ".join(rng.choice(words) for _ in range(rng.randint(60, 200))))
    return texts


def test_vocabulary_is_complete(ours):
    assert ours.vocab_size == VOCAB_SIZE


def test_known_ids(ours):
    assert ours.tokenize("a photo of a cat")[:7].tolist() == [
        49406,
        320,
        1125,
        539,
        320,
        2368,
        49407,
    ]


def test_identical_to_reference_on_varied_strings(ours, reference):
    texts = corpus()
    assert len(texts) >= 1000
    mismatches = [text for text in texts if ours.encode(text) != reference.encode(text)]
    assert mismatches == []


def test_padding_and_truncation(ours):
    short = ours.tokenize("hello world")
    assert short[0] == SOT and EOT in short.tolist()
    assert short.dtype.name == "int32" and len(short) == CONTEXT_LENGTH
    assert short[short.tolist().index(EOT) + 1 :].tolist() == [0] * (
        CONTEXT_LENGTH - short.tolist().index(EOT) - 1
    )
    long = ours.tokenize("word " * 500)
    assert len(long) == CONTEXT_LENGTH
    assert long[0] == SOT and long[-1] == EOT
    assert 0 not in long.tolist()


def test_missing_vocabulary_is_an_input_error(tmp_path):
    from npuctl.errors import InputError

    with pytest.raises(InputError, match="models fetch clip-text"):
        ClipTokenizer(tmp_path / "missing.txt.gz")


def ordinary_corpus(count: int = 2400) -> list[str]:
    """Varied ordinary text that ftfy changes without repairing mojibake: curly quotes, Latin
    ligatures, fullwidth and halfwidth forms, HTML entities, line breaks, control and
    terminal-escape characters, accents in composed and decomposed form."""
    rng = random.Random(9)
    pieces = [
        "‘single’",
        "“double”",
        "‚low‛",
        "„low‟",
        "it’s",
        "ʼn",
        "ﬁ",
        "ﬂ",
        "ﬀ",
        "ﬃ",
        "ﬄ",
        "ﬅ",
        "ﬆ",
        "Ĳssel",
        "ǅ",
        "Ｆｕｌｌｗｉｄｔｈ",
        "１２３",
        "ｶﾀｶﾅ",
        "\u3000",
        "＆",
        "！？",
        "&amp;",
        "&lt;tag&gt;",
        "&#233;",
        "&eacute;",
        "&amp;amp;",
        "&nbsp;",
        "<b>bold</b>",
        "café",
        "cafe\u0301",
        "Zürich",
        "naïve",
        "—",
        "…",
        "€5",
        "x\r\ny",
        "a\u2028b",
        "\x1b[31mred\x1b[0m",
        "tab\there",
        "\ufeffbom",
        "zero\u200bwidth",
        "\x07bell",
        "日本語",
        "한국어",
        "emoji😀",
        "°C",
        "½",
        "™",
        "Ω",
        "ß",
        "İ",
        "photo",
        "of",
        "a",
        "cat",
        "cpu",
        "95%",
        "load",
        "0.46",
        "NPU",
        "Orange",
        "Pi",
    ]
    texts = []
    while len(texts) < count:
        words = [rng.choice(pieces) for _ in range(rng.randint(1, 10))]
        texts.append(rng.choice([" ", "", " ", "\n"]).join(words))
    return texts


def test_builtin_cleaning_matches_the_reference_on_ordinary_text(
    clip_vocab, reference, monkeypatch
):
    """Without ftfy (Debian 12) the ids still match OpenAI's on ordinary text."""
    import ftfy

    from npuctl.platforms.zhouyi.pipelines import text_fixes

    monkeypatch.setattr(text_fixes, "ftfy", None)
    builtin = ClipTokenizer(clip_vocab)
    candidates = ordinary_corpus() + corpus()
    # What ftfy's mojibake repair changes is the one thing the built-in fixes leave alone.
    texts = [text for text in candidates if ftfy.fix_encoding(text) == text]
    assert len(texts) >= 2000 and len(texts) >= 0.9 * len(candidates)
    mismatches = [text for text in texts if builtin.encode(text) != reference.encode(text)]
    assert mismatches == []


def test_both_configurations_match_the_reference_on_ordinary_text(ours, reference):
    texts = ordinary_corpus()
    assert [ours.encode(t) for t in texts] == [reference.encode(t) for t in texts]


def test_builtin_fixes_without_any_reference(clip_vocab, monkeypatch):
    """What Debian 12 users get: quotes, ligatures and width fixed as ftfy would."""
    from npuctl.platforms.zhouyi.pipelines import text_fixes

    monkeypatch.setattr(text_fixes, "ftfy", None)
    builtin = ClipTokenizer(clip_vocab)
    for fancy, plain in [
        ("“ﬁne” ‘ﬂow’", "\"fine\" 'flow'"),
        ("Ｆｕｌｌ　ｗｉｄｔｈ １２３", "Full width 123"),
        ("\x1b[1mbold\x1b[0m cafe\u0301", "bold café"),
    ]:
        assert builtin.encode(fancy) == builtin.encode(plain), fancy


def test_long_words_match_the_reference(ours, reference):
    """Long words are merged with a heap instead of the reference's quadratic loop."""
    rng = random.Random(3)
    for _ in range(40):
        alphabet = rng.choice(["abcdefghijklmnopqrstuvwxyz", "ab", "aeiou", "thequickbrown"])
        word = "".join(rng.choice(alphabet) for _ in range(rng.randint(49, 700)))
        assert ours.encode(word) == reference.encode(word), word


def test_the_window_gives_the_first_ids_of_any_text(ours, reference):
    rng = random.Random(5)
    texts = [" ".join(corpus(400)), "\n".join(ordinary_corpus(300))]
    texts += ["".join(rng.choice("abcdefgh") for _ in range(6000)) for _ in range(5)]
    texts += ["x" * 5000 + " tail", "  \n\n  " * 3000 + "late words here"]
    for text in texts:
        ids, more = ours.window(text)
        full = ours.encode(text)
        assert ids == full[:75] and more == (len(full) > 75)
    prose = " ".join(corpus(300))
    assert ours.window(prose)[0] == reference.encode(prose)[:75]


def test_the_window_of_a_megabyte(ours):
    prose = " ".join(corpus(200)) * 50
    assert len(prose) > 1_000_000
    assert ours.window(prose) == (ours.encode(prose[:20_000])[:75], True)
    ids, more = ours.window("a" * 1_000_000)
    assert more and len(ids) == 75
    assert ids == ours.encode("a" * 5000)[:75]
