"""The CLIP tokenizer gives the same ids as OpenAI's reference simple_tokenizer.py (loaded by
path from a pinned PyPI wheel: importing the 'clip' package would import torch)."""

import importlib.util
import random
import string

import pytest

from npuctl.pipelines.clip_tokenizer import CONTEXT_LENGTH, EOT, SOT, VOCAB_SIZE, ClipTokenizer


@pytest.fixture(scope="module")
def ours(clip_vocab):
    return ClipTokenizer(clip_vocab)


@pytest.fixture(scope="module")
def reference(reference_tokenizer_source, clip_vocab):
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
