"""Question forms: a choice question names its options ("..., A or B?"), a yes/no question has a yes or no gold,
any other is open. A guess answers the first two right often and an open one rarely, so evaluations split scores by
form (``benchmarks/em_by_question_form.py``) and oracle SFT data can be picked by form."""

from __future__ import annotations

import re
from collections.abc import Sequence

from searchrl.rewards.metrics import normalize_answer

__all__ = ["QUESTION_FORMS", "choice_options", "option_index", "question_form"]

# "..., A or B?": the options after the question's last comma before " or " (an option may hold commas after it).
_CHOICE = re.compile(r",\s*(?P<a>[^,]+?)\s+or\s+(?P<b>.+?)\s*\?\s*$", re.IGNORECASE)


def choice_options(question: str) -> list[str]:
    """The options of a choice question worded "..., A or B?"; ``[]`` for any other question.

    >>> choice_options("Who was born first, Ada Lovelace or Charles Babbage?")
    ['Ada Lovelace', 'Charles Babbage']
    >>> choice_options("Who was born earlier, Matt Hale or George Nevill, 1st Earl of Abergavenny?")
    ['Matt Hale', 'George Nevill, 1st Earl of Abergavenny']
    >>> choice_options("Where was the director of film Or Else born?")
    []
    """
    m = _CHOICE.search(question or "")
    if not m:
        return []
    options = [m.group("a").strip(), m.group("b").strip()]
    return options if all(normalize_answer(o) for o in options) else []


def option_index(question: str, text: str | None) -> int | None:
    """The index of the one option of a choice question that ``text`` names (after answer normalisation); None
    when it names neither, or both, or the question names no options.

    >>> option_index("Who was born first, Ada Lovelace or Charles Babbage?", "charles babbage.")
    1
    >>> option_index("Who was born first, Ada Lovelace or Charles Babbage?", "Byron") is None
    True
    """
    said = normalize_answer(text or "")
    hit = [i for i, o in enumerate(choice_options(question)) if normalize_answer(o) == said]
    return hit[0] if len(hit) == 1 else None


#: the forms :func:`question_form` tells apart: a guess answers the first two right often, an open question rarely.
QUESTION_FORMS = ("choice", "yes/no", "open")


def question_form(question: str, golds: Sequence[str]) -> str:
    """``choice`` when :func:`choice_options` finds the question's options, ``yes/no`` when a gold answer is "yes"
    or "no", ``open`` otherwise.

    >>> question_form("Who was born first, Ada Lovelace or Charles Babbage?", ["Ada Lovelace"])
    'choice'
    >>> question_form("Are both films from the same country?", ["no"])
    'yes/no'
    """
    if choice_options(question):
        return "choice"
    if any(str(g).strip().lower() in ("yes", "no") for g in golds):
        return "yes/no"
    return "open"
