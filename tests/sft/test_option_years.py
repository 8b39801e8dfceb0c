"""Reading the years a choice question compares off its options' passages."""

from __future__ import annotations

import doctest

import pytest

import searchrl.sft.option_years as oy
from searchrl.sft.option_years import compared_aspect, compared_direction, year_in_passage


def test_doctests() -> None:
    result = doctest.testmod(oy)
    assert result.attempted >= 5 and result.failed == 0


@pytest.mark.parametrize(
    ("question", "aspect", "direction"),
    [
        ("Which film came out first, Rope or Vertigo?", "date", "earlier"),
        ("Which album was released more recently, A or B?", "date", "later"),
        ("Who is older, Ada Byron or Carl Berg?", "birth", "earlier"),
        ("Who was born later, The First Lady or Carl Berg?", "birth", "later"),  # an option's words are not read
        ("Who died earlier, The Last Baron or Carl Berg, 1st Earl?", "death", "earlier"),
        ("Who lived longer, Ada Byron or Carl Berg?", None, None),
    ],
)
def test_what_a_choice_question_compares(question: str, aspect: str | None, direction: str | None) -> None:
    assert compared_aspect(question) == aspect
    assert compared_direction(question) == direction


@pytest.mark.parametrize(
    ("text", "aspect", "year"),
    [
        ("Ada Byron (10 December 1815 – 27 November 1852) was a mathematician.", "birth", 1815),
        ("Ada Byron (10 December 1815 – 27 November 1852) was a mathematician.", "death", 1852),
        ("Carl Berg (born 3 May 1791) was a painter who died in 1871.", "birth", 1791),
        ("Carl Berg (born 3 May 1791) was a painter who died in 1871.", "death", None),  # not in the opening's form
        ("Rope is a 1948 American film directed by Alfred Hitchcock (1899 - 1980).", "date", 1948),
        ("Rope is an American film directed by Alfred Hitchcock.", "birth", None),
        (("word " * 80) + "Ada (1815 - 1852)", "birth", None),  # beyond the opening window
    ],
)
def test_year_in_a_passage_opening(text: str, aspect: str, year: int | None) -> None:
    assert year_in_passage(text, aspect) == year
