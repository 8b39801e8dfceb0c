"""Selection rules pinned with hand-written values: which questions a split holds out, and its edge sizes."""

from __future__ import annotations

from searchrl.data.records import QAExample
from searchrl.data.splits import heldout_split


def _qs(n: int) -> list[QAExample]:
    return [QAExample(f"q{i}", f"question {i}?", [f"a{i}"]) for i in range(n)]


def test_the_held_out_questions_are_those_with_the_smallest_sha256_of_their_id() -> None:
    # sha256("q7") < sha256("q4") < sha256("q5") < the other seven: a fixed rule, so a file splits the same
    # way in every version (another hash would move questions between train and held-out)
    train, held = heldout_split(_qs(10), 3)
    assert [e.id for e in held] == ["q4", "q5", "q7"]  # file order
    assert [e.id for e in train] == ["q0", "q1", "q2", "q3", "q6", "q8", "q9"]


def test_every_question_or_none_can_be_held_out() -> None:
    train, held = heldout_split(_qs(3), 3)
    assert train == [] and [e.id for e in held] == ["q0", "q1", "q2"]
    train, held = heldout_split(_qs(3), 0)
    assert [e.id for e in train] == ["q0", "q1", "q2"] and held == []
