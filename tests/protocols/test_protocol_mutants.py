"""Behaviours a mutation audit of the protocols found unpinned, each with the code it pins."""

from __future__ import annotations

import pytest

from searchrl.protocols import NO_ACTION, Invalid, get_protocol


# --------------------------------------------------------------------------------- inserted feedback and notices
@pytest.mark.parametrize(
    ("name", "response"),
    [
        ("search_r1", "<think> a </think><answer> Paris{fb}Rome </answer>"),
        ("rag_r1", "<think> a </think><answer> Paris{fb}Rome </answer>"),
        ("reason", "<think> a </think><answer> Paris{fb}Rome </answer>"),
        ("r1_searcher", "a</think>\n\n<answer> Paris{fb}Rome </answer>"),
        ("search_r1", "<think> a{fb}b </think><answer> Rome </answer>"),
        ("reason", "<think> a{fb}b </think><answer> Rome </answer>"),
    ],
)
def test_a_block_cut_by_inserted_feedback_fails_the_format(name: str, response: str) -> None:
    """The engine reads each turn on its own: an answer block that feedback cuts was never read as an answer, so a
    response whose only answer is such a block is not well-formed, and has no answer."""
    p = get_protocol(name)
    report = p.check_format(response.format(fb=p.invalid_feedback(Invalid(NO_ACTION))))
    assert not report.ok, report
    if "Paris" in response:
        assert report.answer is None and not report.has_answer


@pytest.mark.parametrize(
    ("name", "response"),
    [
        ("search_r1", "<think> a </think>{fb}<answer> Rome </answer>"),
        ("reason", "<think> a </think>{fb}<answer> Rome </answer>"),
        ("r1_searcher", "a{fb}b</think>\n\n<answer> Rome </answer>"),  # R1-Searcher reasons across turns
    ],
)
def test_feedback_between_blocks_keeps_the_format(name: str, response: str) -> None:
    p = get_protocol(name)
    report = p.check_format(response.format(fb=p.invalid_feedback(Invalid(NO_ACTION))))
    assert report.ok and report.answer == "Rome", report.problems
