"""Answer metrics used by the five papers, as small pure functions of ``(prediction, golds) -> float``.

Every metric takes the best score over the gold answers, and scores a missing prediction (``None``, or a string
that is empty after stripping whitespace) 0. An empty gold list is a data error and raises ``ValueError``.

Three normalisations exist in the papers' code, and they differ on real answers, so all are here, by name
(:data:`NORMALIZERS`):

- ``squad`` (:func:`normalize_answer`) - SQuAD's (also Search-R1's, FlashRAG's, R-Search's and RAG-R1's training
  reward): lower-case, *delete* ASCII punctuation, drop the articles a/an/the, collapse whitespace.
- ``r1_searcher`` (:func:`normalize_answer_r1`) - R1-Searcher's evaluation script and reward servers (spec 001
  §11.3), written from their behaviour: the exact strings ``True``/``False`` become ``yes``/``no``, underscores
  become spaces, punctuation (ASCII plus the typographic quotes ``‘ ’ ´ ```) is *replaced by a space*, then the same
  lower-casing, article removal and whitespace collapse. So ``Miller v._California`` is ``miller v california`` here
  but ``miller vcalifornia`` under SQuAD. The True/False mapping looks at the string as given, not stripped: the
  released predictions hold ``" False "``, which the authors' script does not map (so ``" False "`` does not match
  the gold ``no``); this one case is the difference between 65.6 and the published 65.4 ACC_R of the Qwen HotpotQA
  file (``benchmarks/bench_rescore_r1_searcher.py``). ``r1`` is an alias.
- ``rag_r1`` (:func:`normalize_answer_rag_r1`) - RAG-R1's evaluation script (spec 004 §6.2): as ``r1_searcher``
  without the True/False mapping.

Each of them first reads the text as :func:`searchrl.data.unitext.same_text` does: composed (NFC), invisible
characters (zero-width spaces and joiners, soft hyphens, byte-order marks) dropped. So the same answer in other
bytes matches (``Zürich`` written as ``u`` plus a combining diaeresis, a zero-width space inside a name), and no
verdict of the papers' code changes between two texts that look different. Beyond that none folds accents or
Unicode case beyond ``str.lower`` (``Zürich`` stays ``zürich``, not ``zurich``), and ``squad`` keeps non-ASCII
punctuation (``O’Brien`` is not ``O'Brien``); this matches the papers' code, so our numbers stay comparable with
theirs. For other text, two more normalisations extend SQuAD's rules to Unicode (options, never a default):

- ``unicode`` (:func:`normalize_answer_unicode`) - SQuAD's on the text's compatibility form (NFKC: full-width
  ``１９９０`` is ``1990``) with full case folding (``Straße`` = ``STRASSE``); every Unicode punctuation character
  is deleted as SQuAD deletes ASCII's (``O’Brien`` = ``O'Brien``, ``«Paris»`` = ``Paris``, ``1939–1945`` =
  ``1939-1945``), and each character of a script written without spaces (Chinese, Japanese, Thai, ...) is a token
  of its own, so F1 gives partial credit there as it does to words (``北京市`` vs ``北京``: 0.8). On ASCII text it is
  ``squad`` exactly.
- ``unicode_fold`` - ``unicode`` with the accents of Latin letters removed (``Beyonce`` = ``Beyoncé``, ``Istanbul``
  = ``İstanbul``); other scripts' marks are letters and stay (Cyrillic ``й``, Devanagari vowel signs).

Under ``squad`` a text of a script without spaces is one token, so F1 on Chinese or Japanese answers is all or
nothing (SQuAD's known limit there); ``cover_em`` finds words inside it either way (below).

Metrics (all return 0.0 or 1.0 except F1):

- :func:`exact_match` - normalised prediction equals a normalised gold.
- :func:`f1_score` - bag-of-tokens F1 with HotpotQA's rule: if either side normalises to ``yes``/``no``/``noanswer``
  and the two differ, the score is 0 (so "yes" vs "yes it is" scores 0, not 0.67).
- :func:`cover_em` - the normalised gold occurs *contiguously* in the normalised prediction. With
  ``boundary="word"`` (default) the match must start and end at token boundaries: gold ``1`` does not cover
  ``1990`` and ``art`` does not cover ``martin``. A character of a script written without spaces between words
  (Chinese, Japanese, Thai, ...) is a boundary of its own (:func:`contains_words`), so ``曹雪芹`` covers
  ``作者是曹雪芹``. ``boundary="char"`` is a plain substring test and reproduces Search-R1's ``subem_check`` /
  FlashRAG's ``acc`` exactly (except for the empty-gold rule below).
- :func:`cover_em_tokens` - R1-Searcher's ``cover_exact_match_score_1``: every gold *token* appears somewhere among
  the prediction's tokens; order, contiguity and multiplicity are ignored, and it uses ``r1_searcher``
  normalisation by default (its ACC_R).

Cover rule for golds that normalise to the empty string (e.g. ``"The"``): the empty string is a substring of
everything, which would credit any prediction, so such a gold only matches a prediction that also normalises to
empty (exact-match semantics). For ``cover_em_tokens`` this is what R1-Searcher's code does anyway.
"""

from __future__ import annotations

import re
import string
import unicodedata
from collections import Counter
from collections.abc import Callable, Sequence
from functools import partial
from typing import Literal

from searchrl.data.corpus import UNSPACED
from searchrl.data.unitext import compatible_text, same_text, strip_accents

Golds = str | Sequence[str]
Normalizer = Callable[[str], str]
MetricFn = Callable[[str | None, Golds], float]

_ARTICLES = re.compile(r"\b(a|an|the)\b")
_SQUAD_PUNCT = frozenset(string.punctuation)
# R1-Searcher's code adds typographic quotes to the punctuation set (spec 001 §11.3).
_R1_PUNCT = frozenset(string.punctuation + "‘’´`")
_YES_NO = ("yes", "no", "noanswer")
_UNSPACED = re.compile(UNSPACED)  # a character of a script written without spaces between words


def normalize_answer(text: str) -> str:
    """SQuAD normalisation: lower-case, delete ASCII punctuation, drop a/an/the, collapse whitespace.

    >>> normalize_answer("  The Eiffel Tower! ")
    'eiffel tower'
    >>> normalize_answer("Jean-Paul")  # deleted, not spaced: a hyphenated name stays one token
    'jeanpaul'
    >>> normalize_answer("Miller v._California")
    'miller vcalifornia'
    """
    text = "".join(ch for ch in same_text(text).lower() if ch not in _SQUAD_PUNCT)
    return " ".join(_ARTICLES.sub(" ", text).split())


def _unicode_char(ch: str) -> str:
    """A character as :func:`normalize_answer_unicode` keeps it: punctuation deleted, a character of a script
    written without spaces set apart."""
    if ch.isascii():
        return "" if ch in _SQUAD_PUNCT else ch
    if unicodedata.category(ch).startswith("P"):
        return ""
    return f" {ch} " if _UNSPACED.match(ch) else ch


def normalize_answer_unicode(text: str, fold_accents: bool = False) -> str:
    """SQuAD's normalisation extended to Unicode (see the module docstring); ``fold_accents``: ``unicode_fold``.

    >>> normalize_answer_unicode("The O’Brien «Straße»"), normalize_answer_unicode("北京市。")
    ('obrien strasse', '北 京 市')
    >>> normalize_answer_unicode("Beyoncé"), normalize_answer_unicode("Beyoncé", fold_accents=True)
    ('beyoncé', 'beyonce')
    """
    if text.isascii():
        return normalize_answer(text)
    text = compatible_text(compatible_text(text).casefold())  # NFKC-casefold: case folding may undo NFKC
    if fold_accents:
        text = strip_accents(text)
    text = "".join(_unicode_char(ch) for ch in text)
    return " ".join(_ARTICLES.sub(" ", text).split())


def _space_punctuation(text: str) -> str:
    """Underscores and punctuation become spaces, then lower-case, drop a/an/the, collapse whitespace."""
    text = same_text(text).replace("_", " ").lower()
    text = "".join(" " if ch in _R1_PUNCT else ch for ch in text)
    return " ".join(_ARTICLES.sub(" ", text).split())


def normalize_answer_r1(text: str) -> str:
    """R1-Searcher's normalisation: True/False -> yes/no, ``_`` and punctuation -> space, then as SQuAD.

    The True/False mapping applies only when the whole string is exactly ``True`` or ``False`` (not stripped: the
    authors' script maps ``"False"`` but not ``" False "``).

    >>> normalize_answer_r1("Miller v._California")
    'miller v california'
    >>> normalize_answer_r1("True"), normalize_answer_r1("true story"), normalize_answer_r1(" False ")
    ('yes', 'true story', 'false')
    """
    if text == "True":
        text = "yes"
    elif text == "False":
        text = "no"
    return _space_punctuation(text)


def normalize_answer_rag_r1(text: str) -> str:
    """RAG-R1's evaluation normalisation: R1-Searcher's without the True/False mapping.

    >>> normalize_answer_rag_r1("Miller v._California"), normalize_answer_rag_r1("True")
    ('miller v california', 'true')
    """
    return _space_punctuation(text)


NORMALIZERS: dict[str, Normalizer] = {
    "squad": normalize_answer,
    "r1_searcher": normalize_answer_r1,
    "rag_r1": normalize_answer_rag_r1,
    "r1": normalize_answer_r1,  # alias of r1_searcher
    "unicode": normalize_answer_unicode,
    "unicode_fold": partial(normalize_answer_unicode, fold_accents=True),
}


def _gold_list(golds: Golds) -> list[str]:
    if isinstance(golds, str):
        return [golds]
    out = list(golds)
    if not out:
        raise ValueError("no gold answers given; every example needs at least one (check the dataset's answers)")
    return out


def _missing(prediction: str | None) -> bool:
    return prediction is None or not prediction.strip()


def exact_match(prediction: str | None, golds: Golds, *, normalizer: Normalizer = normalize_answer) -> float:
    """1.0 if the normalised prediction equals any normalised gold, else 0.0.

    >>> exact_match("The Beatles", ["beatles", "Fab Four"])
    1.0
    >>> exact_match("Beatles band", "beatles")
    0.0
    """
    golds = _gold_list(golds)
    if _missing(prediction):
        return 0.0
    pred = normalizer(prediction)
    return float(any(pred == normalizer(g) for g in golds))


def _f1_single(pred: str, gold: str, yes_no: bool = True) -> float:
    if yes_no and (pred in _YES_NO or gold in _YES_NO) and pred != gold:
        return 0.0
    pred_toks, gold_toks = pred.split(), gold.split()
    common = Counter(pred_toks) & Counter(gold_toks)
    same = sum(common.values())
    if same == 0:
        return 0.0
    precision, recall = same / len(pred_toks), same / len(gold_toks)
    return 2 * precision * recall / (precision + recall)


def f1_score(prediction: str | None, golds: Golds, *, normalizer: Normalizer = normalize_answer) -> float:
    """Best token-multiset F1 over golds, with HotpotQA's yes/no/noanswer rule.

    >>> round(f1_score("the city of Paris", ["Paris"]), 4)  # P = 1/3, R = 1
    0.5
    >>> f1_score("yes it is", ["yes"])
    0.0
    """
    golds = _gold_list(golds)
    if _missing(prediction):
        return 0.0
    pred = normalizer(prediction)
    return max(_f1_single(pred, normalizer(g)) for g in golds)


def token_f1(prediction: str | None, golds: Golds, *, normalizer: Normalizer = normalize_answer) -> float:
    """Best token-multiset F1 over golds without the yes/no rule of :func:`f1_score`: the plain SQuAD F1 of
    R-Search's reward and evaluation code, which gives a verbose yes/no answer partial credit.

    >>> f1_score("Yes, both are American", ["yes"]), round(token_f1("Yes, both are American", ["yes"]), 2)
    (0.0, 0.4)
    """
    golds = _gold_list(golds)
    if _missing(prediction):
        return 0.0
    pred = normalizer(prediction)
    return max(_f1_single(pred, normalizer(g), yes_no=False) for g in golds)


def _bounded(outside: str | None, inside: str) -> bool:
    """A match's edge between the ``outside`` character (None: the text's end) and its own ``inside`` one is a word
    boundary: a space, the end, or a character of a script written without spaces on either side."""
    return outside is None or outside == " " or bool(_UNSPACED.match(inside) or _UNSPACED.match(outside))


def contains_words(text: str, words: str) -> bool:
    """``words`` occurs in ``text`` (both normalised: single-space separated) as a run of whole tokens; next to a
    character of a script written without spaces (Chinese, Japanese, Thai, ...) a match needs no space.

    >>> contains_words("born in 1990", "1990"), contains_words("born in 1990", "19")
    (True, False)
    >>> contains_words("作者是曹雪芹", "曹雪芹"), contains_words("《红楼梦》是小说", "红楼梦")
    (True, True)
    >>> contains_words("作者是bram stoker", "bram stoker"), contains_words("作者是bram stoker", "bra")
    (True, False)
    """
    if f" {words} " in f" {text} ":
        return True
    if text.isascii():
        return False
    start = text.find(words)
    while start != -1:
        end = start + len(words)
        before, after = text[start - 1] if start else None, text[end] if end < len(text) else None
        if _bounded(before, words[0]) and _bounded(after, words[-1]):
            return True
        start = text.find(words, start + 1)
    return False


def cover_em(
    prediction: str | None,
    golds: Golds,
    *,
    boundary: Literal["word", "char"] = "word",
    normalizer: Normalizer = normalize_answer,
) -> float:
    """1.0 if some normalised gold occurs contiguously in the normalised prediction (see the module docstring).

    >>> cover_em("He was born in 1990 in Paris", ["1990"])
    1.0
    >>> cover_em("born in 1990", ["19"]), cover_em("born in 1990", ["19"], boundary="char")
    (0.0, 1.0)
    >>> cover_em("Paris, New York", ["New York City"])
    0.0
    """
    if boundary not in ("word", "char"):
        raise ValueError(f"cover_em boundary must be 'word' or 'char', got {boundary!r}")
    golds = _gold_list(golds)
    if _missing(prediction):
        return 0.0
    pred = normalizer(prediction)
    for gold in golds:
        g = normalizer(gold)
        if not g:
            hit = pred == g
        elif boundary == "word":
            hit = contains_words(pred, g)
        else:
            hit = g in pred
        if hit:
            return 1.0
    return 0.0


def cover_em_tokens(prediction: str | None, golds: Golds, *, normalizer: Normalizer = normalize_answer_r1) -> float:
    """R1-Searcher's cover EM: every gold token is among the prediction tokens (order and counts ignored).

    >>> cover_em_tokens("California v. Miller", ["Miller v._California"])
    1.0
    >>> cover_em_tokens("False", ["no"]), cover_em_tokens("Paris", ["Paris, Texas"])
    (1.0, 0.0)
    """
    golds = _gold_list(golds)
    if _missing(prediction):
        return 0.0
    pred = normalizer(prediction)
    pred_tokens = set(pred.split())
    for gold in golds:
        g = normalizer(gold)
        gold_tokens = g.split()
        hit = (pred == g) if not gold_tokens else all(t in pred_tokens for t in gold_tokens)
        if hit:
            return 1.0
    return 0.0


METRICS: dict[str, MetricFn] = {
    "em": exact_match,
    "f1": f1_score,
    "token_f1": token_f1,
    "cover_em": cover_em,
    "cover_em_tokens": cover_em_tokens,
}


def get_metric(name: str, *, normalize: str | None = None, boundary: str | None = None) -> MetricFn:
    """A metric by name, optionally with another normalisation (a name in :data:`NORMALIZERS`) or cover_em
    ``boundary``.

    >>> get_metric("f1", normalize="r1_searcher")("Miller v California", ["Miller v._California"])
    1.0
    """
    if name not in METRICS:
        raise ValueError(f"unknown metric {name!r}; choose one of: {', '.join(METRICS)}")
    kwargs: dict[str, object] = {}
    if normalize is not None:
        if normalize not in NORMALIZERS:
            raise ValueError(f"unknown normalisation {normalize!r}; choose one of: {', '.join(NORMALIZERS)}")
        kwargs["normalizer"] = NORMALIZERS[normalize]
    if boundary is not None:
        if name != "cover_em":
            raise ValueError(f"'boundary' only applies to the cover_em metric, not {name!r}; remove it")
        if boundary not in ("word", "char"):
            raise ValueError(f"cover_em boundary must be 'word' or 'char', got {boundary!r}")
        kwargs["boundary"] = boundary
    fn = METRICS[name]
    return partial(fn, **kwargs) if kwargs else fn


def get_metrics(
    names: Sequence[str], *, normalize: str | None = None, boundary: str | None = None
) -> dict[str, MetricFn]:
    """The metric functions of one evaluation table: ``normalize`` (None = each metric's default) applies to every
    metric, ``boundary`` (None = word) only to ``cover_em``.

    >>> fns = get_metrics(["em", "cover_em"], normalize="squad", boundary="char")
    >>> fns["em"]("1990", ["1990"]), fns["cover_em"]("born in 1990", ["19"])
    (1.0, 1.0)
    """
    return {
        name: get_metric(name, normalize=normalize, boundary=boundary if name == "cover_em" else None)
        for name in names
    }


def compute_metrics(prediction: str | None, golds: Golds, names: Sequence[str] = tuple(METRICS)) -> dict[str, float]:
    """Several metrics for one prediction, e.g. one row of an evaluation table.

    >>> compute_metrics("Paris", ["Paris"], ["em", "f1"])
    {'em': 1.0, 'f1': 1.0}
    """
    return {name: get_metric(name)(prediction, golds) for name in names}


def word_count(text: str) -> int:
    """Whitespace-separated words of the raw answer, the unit of R1-Searcher++'s 10-word cap.

    >>> word_count("  the  Eiffel Tower ")
    3
    """
    return len(text.split())
