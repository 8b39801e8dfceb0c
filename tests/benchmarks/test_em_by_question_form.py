"""benchmarks/em_by_question_form.py: EM split into choice, yes/no and open questions from a predictions file."""

from __future__ import annotations

import json
from pathlib import Path

import em_by_question_form as em_by_form


def test_each_question_is_counted_under_its_form(tmp_path: Path) -> None:
    rows = [
        ("Which film came out first, Blue Lake or Red Sea?", ["Blue Lake"], "Blue Lake"),
        ("Who was born first, Anna Berg or Tom Hale?", ["Tom Hale"], "Anna Berg"),
        ("Are Blue Lake and Red Sea from the same country?", ["no"], "no"),
        ("Who is the father of Anna Berg?", ["Carl Berg"], "Carl Berg"),
        ("Where was the director of film Blue Lake born?", ["Oslo"], "Bergen"),
        ("When did Tom Hale's father die?", ["1901"], None),
    ]
    path = tmp_path / "heldout__agent.jsonl"
    path.write_text("".join(json.dumps({"question": q, "golds": g, "prediction": p}) + "\n" for q, g, p in rows))
    got = em_by_form.split_em(path)
    assert got["n"] == 6 and got["em"] == 0.5
    assert (got["choice"]["n"], got["choice"]["correct"]) == (2, 1)
    assert got["choice"]["answered"] == {"first": 2, "second": 0, "other": 0}  # both answers name the first option
    assert got["choice"]["gold"] == {"first": 1, "second": 1, "other": 0}
    assert (got["yes/no"]["n"], got["yes/no"]["correct"]) == (1, 1)
    assert (got["open"]["n"], got["open"]["correct"], got["open"]["em"]) == (3, 1, 0.333)
