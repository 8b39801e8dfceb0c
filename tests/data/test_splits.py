"""The held-out rule: fixed, order-independent, disjoint, exactly n held out."""

from __future__ import annotations

import random

import pytest

from searchrl.data.records import QAExample
from searchrl.data.splits import heldout_split, id_hash


def _qs(n: int) -> list[QAExample]:
    return [QAExample(f"q{i}", f"question {i}?", [f"a{i}"]) for i in range(n)]


def test_split_is_exact_disjoint_and_independent_of_row_order() -> None:
    qs = _qs(50)
    train, held = heldout_split(qs, 10)
    assert len(held) == 10 and len(train) == 40
    assert not {e.id for e in train} & {e.id for e in held}
    assert {e.id for e in held} == set(sorted((e.id for e in qs), key=id_hash)[:10])
    shuffled = list(qs)
    random.Random(0).shuffle(shuffled)
    assert {e.id for e in heldout_split(shuffled, 10)[1]} == {e.id for e in held}
    assert [e.id for e in train] == [e.id for e in qs if e.id not in {h.id for h in held}]  # file order kept


def test_split_rejects_duplicate_ids_and_bad_sizes() -> None:
    with pytest.raises(ValueError, match="duplicate question id"):
        heldout_split(_qs(3) + _qs(1), 1)
    with pytest.raises(ValueError, match=r"cannot hold out 4 of 3 questions; hold out fewer: .*--heldout N"):
        heldout_split(_qs(3), 4)


def test_split_cli_writes_both_files(tmp_path) -> None:
    from typer.testing import CliRunner

    from searchrl.cli import app
    from searchrl.data.loaders import load_qa
    from searchrl.utils import write_jsonl

    write_jsonl(tmp_path / "qa.jsonl", [e.to_flashrag() for e in _qs(20)])
    res = CliRunner().invoke(
        app, ["data", "split", str(tmp_path / "qa.jsonl"), "--out", str(tmp_path / "s"), "--heldout", "5"]
    )
    assert res.exit_code == 0, res.output
    assert len(load_qa(tmp_path / "s" / "heldout.jsonl")) == 5 and len(load_qa(tmp_path / "s" / "train.jsonl")) == 15
