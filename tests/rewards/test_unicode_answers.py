"""Answers outside plain ASCII English: the same text in other bytes matches under every normalisation, and the
``unicode`` / ``unicode_fold`` normalisations extend SQuAD's rules to Unicode without changing ASCII verdicts."""

from __future__ import annotations

import string
import unicodedata

import pytest
from hypothesis import given
from hypothesis import strategies as st

from searchrl.config import EvaluationConfig
from searchrl.rewards.metrics import NORMALIZERS, cover_em, exact_match, f1_score, get_metric, normalize_answer

NFD = unicodedata.normalize("NFD", "Beyoncé Zürich Ångström Việt")
NFC = unicodedata.normalize("NFC", NFD)


@pytest.mark.parametrize("name", ["squad", "r1_searcher", "rag_r1", "unicode", "unicode_fold"])
@pytest.mark.parametrize(
    ("pred", "gold"),
    [
        (NFD, NFC),  # combining accents (macOS, some scraped pages) vs precomposed letters
        ("New\u200bYork", "NewYork"),  # a zero-width space inside a word
        ("Ång\u00adström", "Ångström"),  # a soft hyphen
        ("\ufeffParis", "Paris"),  # a byte-order mark left at the start of a file's first answer
        ("Marie\u00a0Curie", "Marie Curie"),  # a no-break space
        ("Ｐａｒｉｓ", "Ｐａｒｉｓ"),
    ],
    ids=["nfd-nfc", "zero-width-space", "soft-hyphen", "bom", "nbsp", "full-width-same"],
)
def test_the_same_text_in_other_bytes_matches_under_every_normalisation(name, pred, gold) -> None:
    norm = NORMALIZERS[name]
    assert norm(pred) == norm(gold)
    for metric in ("em", "f1", "cover_em"):
        assert get_metric(metric, normalize=name)(pred, [gold]) == 1.0, metric


def test_the_default_keeps_the_papers_verdicts_on_text_that_looks_different() -> None:
    assert exact_match("O’Brien", ["O'Brien"]) == 0.0  # Search-R1's / SQuAD's code: ’ is not ASCII punctuation
    assert exact_match("Zurich", ["Zürich"]) == 0.0
    assert exact_match("１９９０", ["1990"]) == 0.0
    assert f1_score("作者是曹雪芹", ["曹雪芹"]) == 0.0  # one token: SQuAD F1's known limit on unspaced scripts
    assert cover_em("作者是曹雪芹", ["曹雪芹"]) == 1.0  # cover-EM finds the name inside it


# prediction, gold, | unicode: EM, F1 | unicode_fold: EM
UNICODE = [
    ("O’Brien", "O'Brien", 1, 1, 1),
    ("“Hello”", '"Hello"', 1, 1, 1),
    ("«Paris»", "Paris", 1, 1, 1),
    ("1939–1945", "1939-1945", 1, 1, 1),
    ("１９９０年", "1990年", 1, 1, 1),
    ("Straße", "STRASSE", 1, 1, 1),
    ("ΣΊΣΥΦΟΣ", "σίσυφος", 1, 1, 1),
    ("Beyoncé", "Beyonce", 0, 0, 1),
    ("İstanbul", "Istanbul", 0, 0, 1),
    ("Йошкар-Ола", "Иошкар-Ола", 0, 0, 0),  # й is a letter of its own in Russian, not an accented и
    ("मुंबई", "मुंबई", 1, 1, 1),
    ("मुंबई", "मबई", 0, 0, 0),  # Devanagari vowel signs are kept
    ("القاهرة", "القاهرة", 1, 1, 1),
    ("北京市。", "北京", 0, 0.8, 0),  # one token a character: partial credit as for words
    ("東京都の首都", "首都", 0, 0.5, 0),
    ("🎉 party", "party", 0, 2 / 3, 0),
]


@pytest.mark.parametrize(("pred", "gold", "em", "f1", "em_fold"), UNICODE, ids=[c[0] for c in UNICODE])
def test_the_unicode_normalisations(pred, gold, em, f1, em_fold) -> None:
    assert get_metric("em", normalize="unicode")(pred, [gold]) == em
    assert get_metric("f1", normalize="unicode")(pred, [gold]) == pytest.approx(f1)
    assert get_metric("em", normalize="unicode_fold")(pred, [gold]) == em_fold
    # cover-EM finds a gold inside a prediction in a script without spaces, word-bounded elsewhere
    assert get_metric("cover_em", normalize="unicode")("作者是曹雪芹", ["曹雪芹"]) == 1.0
    assert get_metric("cover_em", normalize="unicode")("Zürichsee", ["Zürich"]) == 0.0


@given(st.text(alphabet=string.printable, max_size=30))
def test_unicode_is_squad_on_ascii_text(text) -> None:
    assert NORMALIZERS["unicode"](text) == NORMALIZERS["unicode_fold"](text) == normalize_answer(text)


@given(st.text(max_size=20))
def test_no_normalisation_fails_on_any_text(text) -> None:
    for name, norm in NORMALIZERS.items():
        out = norm(text)
        assert out == " ".join(out.split()), name
        assert 0.0 <= get_metric("f1", normalize=name)(text, [text or "x"]) <= 1.0


def test_the_unicode_normalisations_are_evaluation_settings() -> None:
    assert EvaluationConfig(normalize="unicode_fold").normalize == "unicode_fold"
