"""Unicode forms of text for matching: the same text in different bytes made equal, and optional looser forms.

Text from different sources spells the same characters differently: ``é`` is one code point (NFC, most files) or
``e`` plus a combining accent (NFD, macOS file names, some scraped pages); a web page may carry zero-width spaces,
soft hyphens or a byte-order mark that no reader sees. Answer matching (:mod:`searchrl.rewards.metrics`) and BM25
analysis (:mod:`searchrl.retrieval.bm25`) read text through these functions so that such differences do not decide
a match. Every function returns ASCII text unchanged.

- :func:`same_text` - canonical composition (NFC) and invisible characters dropped: only differences no reader can
  see are removed.
- :func:`compatible_text` - as :func:`same_text` with compatibility composition (NFKC): full-width ``１９９０`` is
  ``1990``, the ligature ``ﬁ`` is ``fi``, a non-breaking space is a space, ``²`` is ``2``.
- :func:`strip_accents` - the accents of Latin letters removed (``Zürich`` -> ``Zurich``); other scripts' marks are
  kept, as they make letters of their own there (Cyrillic ``й``, Devanagari vowel signs, Arabic and Hebrew points).
"""

from __future__ import annotations

import re
import unicodedata

#: Unicode's Default_Ignorable_Code_Point characters (DerivedCoreProperties.txt): zero-width space and joiners, soft
#: hyphen, byte-order mark, bidirectional marks, variation selectors, Hangul fillers, tags. A renderer shows nothing
#: for them.
IGNORABLE = re.compile(
    "[\u00ad\u034f\u061c\u115f\u1160\u17b4\u17b5\u180b-\u180f\u200b-\u200f\u202a-\u202e\u2060-\u206f\u3164"
    "\ufe00-\ufe0f\ufeff\uffa0\ufff0-\ufff8\U0001bca0-\U0001bca3\U0001d173-\U0001d17a\U000e0000-\U000e0fff]"
)
#: half of a UTF-16 pair on its own (JSON's "\\ud800" escape): no character, and no tokenizer or UTF-8 file takes one
_SURROGATE = re.compile("[\ud800-\udfff]")
#: a Latin letter and the combining accents (the Combining Diacritical Marks block) NFKD splits off it
_ACCENTED = re.compile("([A-Za-z])[\u0300-\u036f]+")


def same_text(text: str) -> str:
    """``text`` in canonical composed form (NFC), invisible characters dropped.

    >>> same_text("Zu\\u0308rich") == same_text("Zürich") == "Zürich"
    True
    >>> same_text("New\\u200bYork\\u00ad"), same_text("New\\u00a0York")  # a no-break space is a visible space
    ('NewYork', 'New\\xa0York')
    """
    if text.isascii():
        return text
    return IGNORABLE.sub("", unicodedata.normalize("NFC", text))


def compatible_text(text: str) -> str:
    """``text`` in compatibility composed form (NFKC), invisible characters dropped.

    >>> compatible_text("１９９０年"), compatible_text("ﬁnal\\u00a0score"), compatible_text("ｶﾞ")
    ('1990年', 'final score', 'ガ')
    """
    if text.isascii():
        return text
    return IGNORABLE.sub("", unicodedata.normalize("NFKC", text))


def strip_accents(text: str) -> str:
    """``text`` without the accents of Latin letters, composed again (NFC).

    >>> strip_accents("Beyoncé Ångström Zürich Việt"), strip_accents("i\\u0307stanbul"), strip_accents("Йошкар-Ола")
    ('Beyonce Angstrom Zurich Viet', 'istanbul', 'Йошкар-Ола')
    >>> strip_accents("मुंबई") == "मुंबई"  # Devanagari vowel signs are letters, not accents
    True
    """
    if text.isascii():
        return text
    return unicodedata.normalize("NFC", _ACCENTED.sub(r"\1", unicodedata.normalize("NFKD", text)))


def without_surrogates(text: str) -> str:
    """``text`` without lone surrogates (a JSON string may escape one: ``"\\ud800"``), which are no character.

    >>> without_surrogates("Z\\ud800ürich")
    'Zürich'
    """
    return text if text.isascii() else _SURROGATE.sub("", text)


def decoded_head(tokenizer, ids: list[int], n: int, text: str, **decode: bool) -> str:
    """The text of ``text``'s first ``n`` tokens ``ids[:n]``, without a character they cut in two: a byte-level
    tokenizer spreads one character of Chinese, Hindi or an emoji over several tokens, and their head decodes to
    U+FFFD, which is no text of ``text`` (kept where ``text`` has U+FFFD of its own). ``decode``: the tokenizer's
    ``decode`` options.

    >>> from searchrl.generation.fake import ByteTokenizer
    >>> tok = ByteTokenizer()
    >>> decoded_head(tok, tok.encode("東京"), 4, "東京"), decoded_head(tok, tok.encode("東京"), 3, "東京")
    ('東', '東')
    """
    head = tokenizer.decode(ids[:n], **decode)
    return head if "\ufffd" in text else head.rstrip("\ufffd")
