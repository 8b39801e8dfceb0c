"""Reading a choice question's answer off its options' documents, for grounded oracle SFT on real questions.

A choice question that compares two things by a year ("Which film came out earlier, A or B?", "Who was born
first, A or B?", "Who died later, A or B?") is answered by looking each option up and setting the two years side
by side. A real QA file records no reasoning chain, so the oracle reads the years itself: from each option's own
passage (its title names the option), the year the question compares. A question is kept for SFT only when the
two years decide its gold answer, so every kept trajectory's closing is what its documents say.

What is read, by the question's words before the options (our choice [O]; a question that names none of them
is not read):

- ``birth`` ("born", "older", "younger"): a person's passage opens "Name (born 4 May 1950)" or "Name (1743 - 1824)":
  the year before the dash, or after "born";
- ``death`` ("died", "death"): the year after the dash of those parentheses;
- ``date`` (a work or organisation: "released", "came out", "published", "founded", ...): the first year of the
  passage ("X is a 1957 American film").

The direction: "first", "earlier", "older", "before" ask for the earlier year; "later", "last", "younger", "more
recently", "after" for the later. "Which film has the director who died first, A or B?" reads the death year of a
film's passage, which a film's passage does not open with: such a question is dropped, not read wrongly.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from searchrl.retrieval.base import Hit
from searchrl.rewards.forms import choice_options
from searchrl.rewards.metrics import exact_match, normalize_answer

__all__ = ["compared_aspect", "compared_direction", "option_years", "side_by_side", "year_in_passage", "years_text"]

_YEAR = re.compile(r"\b(1[0-9]{3}|20[0-9]{2})\b")
_ASPECTS = (
    ("death", re.compile(r"\b(died|dies|death|die)\b")),
    ("birth", re.compile(r"\b(born|older|younger|oldest|youngest|birth)\b")),
    (
        "date",
        re.compile(
            r"\b(released|release|came out|come out|published|founded|established|formed|premiered|aired|opened"
            r"|built|launched)\b"
        ),
    ),
)
_EARLIER = re.compile(r"\b(first|earlier|earliest|older|oldest|before|sooner)\b")
_LATER = re.compile(r"\b(later|latest|last|younger|youngest|more recently|most recently|after)\b")
_LIFESPAN_DASH = re.compile(r"\s[-–—]\s|[–—]")


def _asked(question: str) -> str:
    """The question's words before its options (:func:`searchrl.rewards.forms.choice_options`), lower-cased: an
    option's own words ("The Last Samurai", "George Nevill, 1st Earl") say nothing about what is compared."""
    options = choice_options(question)
    cut = question.find(options[0]) if options else -1
    return (question[:cut] if cut > 0 else question).lower()


def compared_aspect(question: str) -> str | None:
    """``birth``, ``death`` or ``date``: the year a choice question compares; None when its words name none.

    >>> compared_aspect("Who died first, Ada Lovelace or Charles Babbage?")
    'death'
    >>> compared_aspect("Which film came out earlier, Navy Nurse or The Face In The Fog?")
    'date'
    >>> compared_aspect("Who lived longer, Ada Lovelace or Charles Babbage?") is None
    True
    >>> compared_aspect("Who lived longer, Ada Born or Charles Babbage?") is None  # an option's words are not asked
    True
    """
    asked = _asked(question)
    return next((name for name, words in _ASPECTS if words.search(asked)), None)


def compared_direction(question: str) -> str | None:
    """``earlier`` or ``later``: which year a choice question asks for; None when its words say neither or both.

    >>> compared_direction("Who was born first, The Last Baron or George Nevill, 1st Earl?")
    'earlier'
    """
    asked = _asked(question)
    early, late = bool(_EARLIER.search(asked)), bool(_LATER.search(asked))
    return ("earlier" if early else "later") if early != late else None


def year_in_passage(text: str, aspect: str, window: int = 300) -> int | None:
    """The year of ``aspect`` in a passage's opening ``window`` characters (the passage without its title); None
    when the opening does not state it in the expected form."""
    head = " ".join(text.split())[:window]
    if aspect == "date":
        found = _YEAR.search(head)
        return int(found.group(1)) if found else None
    paren = re.search(r"\(([^()]*)\)", head)
    if not paren:
        return None
    inside = paren.group(1)
    if re.search(r"\bborn\b", inside):
        years = _YEAR.findall(inside)
        return int(years[0]) if aspect == "birth" and years else None
    parts = _LIFESPAN_DASH.split(inside, maxsplit=1)
    if len(parts) != 2:
        return None
    years = _YEAR.findall(parts[0]) if aspect == "birth" else _YEAR.findall(parts[1])
    if not years:
        return None
    return int(years[-1] if aspect == "birth" else years[0])


def _own_passage(option: str, hits: Sequence[Hit]) -> Hit | None:
    """The first hit whose title names the option (a disambiguated title, "Navy Nurse (film)", counts)."""
    want = normalize_answer(option)
    for hit in hits:
        title = normalize_answer(hit.title or "")
        if want and (title == want or title.startswith(want + " ")):
            return hit
    return None


def option_years(question: str, options: Sequence[str], hits: Sequence[Sequence[Hit]]) -> list[int] | None:
    """Each option's year of the compared aspect, read from its own passage among ``hits`` (one list per option,
    in the options' order); None when the question compares no year or a passage does not state it."""
    aspect = compared_aspect(question)
    if aspect is None or len(options) != 2 or len(hits) != 2:
        return None
    years = []
    for option, found in zip(options, hits, strict=True):
        hit = _own_passage(option, found)
        if hit is None:
            return None
        year = year_in_passage(hit.body, aspect)
        if year is None:
            return None
        years.append(year)
    return years


def years_text(
    question: str, options: Sequence[str], years: Sequence[int], golds: Sequence[str]
) -> tuple[str, str] | None:
    """``("A 1957, B 1929. 1929 is earlier.", "B")``: the years side by side and the option they pick, when they
    decide a gold answer the question's way; None when they tie, the question states no direction, or the option
    they pick is not gold (a misread passage is dropped, never taught).

    >>> years_text("Which film came out earlier, A or B?", ["A", "B"], [1957, 1929], ["B"])
    ('A 1957, B 1929. 1929 is earlier.', 'B')
    >>> years_text("Which film came out later, A or B?", ["A", "B"], [1957, 1929], ["B"]) is None
    True
    """
    direction = compared_direction(question)
    if direction is None or len(years) != 2 or years[0] == years[1]:
        return None
    pick = (min if direction == "earlier" else max)(years)
    winner = options[list(years).index(pick)]
    if not exact_match(winner, list(golds)):
        return None
    return side_by_side(list(zip(options, years, strict=True)), pick, direction), winner


def side_by_side(pairs: Sequence[tuple[str, object]], pick: object, direction: str) -> str:
    """The closing of every oracle comparison of years, the world's and the real one's: "A 1950, B 1962. 1950 is
    earlier." (``pairs`` of label and year or date, the one picked, and ``earlier`` or ``later``)."""
    return ", ".join(f"{label} {value}" for label, value in pairs) + f". {pick} is {direction}."
