"""searchrl.partial: the keyed file of finished work that a rerun reads back."""

from __future__ import annotations

import json
from pathlib import Path

from searchrl import partial


def _lines(path: Path) -> list[str]:
    return path.read_text().splitlines()


def test_a_rerun_reads_the_rows_back_and_cuts_the_line_the_interruption_cut_in_place(tmp_path: Path) -> None:
    """The finished rows are read back; the cut line (and what follows) is cut off the file itself, which is not
    written again whole (a sampling stage's file holds every attempt's tokens: gigabytes)."""
    path = tmp_path / "out.jsonl.rs.partial"
    partial.start(path, "k")
    partial.write(path, None, [("q1", {"a": 1}), ("q2", {"a": "é"})], "a")
    inode = path.stat().st_ino
    assert partial.kept(path, "k") == {"q1": {"a": 1}, "q2": {"a": "é"}}
    assert path.stat().st_ino == inode  # nothing to drop: the file as it was
    whole = path.read_bytes()
    path.write_bytes(whole + b'{"slot": "q3", "ro\n{"slot": "q4", "row": {}}\n')  # a row after the cut goes too
    inode = path.stat().st_ino
    assert partial.kept(path, "k") == {"q1": {"a": 1}, "q2": {"a": "é"}}
    assert path.read_bytes() == whole and path.stat().st_ino == inode
    partial.write(path, None, [("q3", {"a": 3})], "a")
    assert list(partial.kept(path, "k")) == ["q1", "q2", "q3"]


def test_a_last_row_cut_just_before_its_newline_is_kept_and_the_next_row_starts_a_line(tmp_path: Path) -> None:
    path = tmp_path / "p.partial"
    partial.start(path, "k")
    path.write_bytes(path.read_bytes() + b'{"slot": "q1", "row": {"a": 1}}')  # the kill fell before the newline
    assert partial.kept(path, "k") == {"q1": {"a": 1}}
    partial.write(path, None, [("q2", {"a": 2})], "a")
    assert [json.loads(line)["slot"] for line in _lines(path)[1:]] == ["q1", "q2"]
    assert partial.kept(path, "k") == {"q1": {"a": 1}, "q2": {"a": 2}}


def test_another_key_or_no_file_keeps_nothing(tmp_path: Path) -> None:
    path = tmp_path / "p.partial"
    assert partial.kept(path, "k") == {}
    partial.start(path, "k")
    partial.write(path, None, [("q1", {"a": 1})], "a")
    assert partial.kept(path, "other") == {}
    path.write_bytes(b"")
    assert partial.kept(path, "k") == {}


def test_a_row_with_values_json_has_no_type_for_is_written(tmp_path: Path) -> None:
    """A question's metadata read from parquet or a dataset may hold dates or arrays: written as JSON's nearest."""
    import datetime

    import numpy as np

    path = tmp_path / "p.partial"
    partial.start(path, "k")
    row = {"when": datetime.date(2020, 1, 2), "ids": np.arange(3), "n": np.int64(4)}
    partial.write(path, None, [("q1", row)], "a")
    assert partial.kept(path, "k") == {"q1": {"when": "2020-01-02", "ids": [0, 1, 2], "n": 4}}
