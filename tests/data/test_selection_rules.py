"""Data rules pinned with hand-written values: which questions a split holds out, ids of rows without one, corpus
title lines and duplicate ids."""

from __future__ import annotations

from array import array

from searchrl.data.corpus import _first_duplicate, split_contents
from searchrl.data.loaders import load_qa
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


def test_an_empty_id_gets_the_files_own_id_for_its_row(tmp_path) -> None:
    path = tmp_path / "qa.jsonl"
    rows = [
        '{"id": "", "question": "Who?", "golden_answers": ["x"]}',
        '{"id": "k", "question": "What?", "golden_answers": ["y"]}',
    ]
    path.write_text("\n".join(rows) + "\n")
    assert [e.id for e in load_qa(path)] == ["qa-1", "k"]  # an empty id would put every such question in one group


def test_a_lone_quote_title_line_is_kept_as_it_is() -> None:
    assert split_contents('"\ntext') == ('"', "text")
    assert split_contents('"Hamlet"\nA play.') == ("Hamlet", "A play.")


def test_two_ids_that_share_a_hash_are_no_duplicate(tmp_path) -> None:
    path = tmp_path / "corpus.jsonl"
    path.write_text('{"id": "a", "contents": "A\\ntext"}\n{"id": "b", "contents": "B\\ntext"}\n')
    assert _first_duplicate(path, 100, array("q", [7, 7]), array("q", [1, 2])) is None  # re-read: "a" != "b"
    path.write_text('{"id": "a", "contents": "A\\ntext"}\n{"id": "a", "contents": "B\\ntext"}\n')
    assert _first_duplicate(path, 100, array("q", [7, 7]), array("q", [1, 2])) == ("a", 1, 2)
