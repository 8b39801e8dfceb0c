"""The viewer on files of research size: rows read one at a time, only the page's records kept, and pages that
filter, page and sample the rows instead of embedding them all."""

from __future__ import annotations

import json
import re
import weakref
from pathlib import Path

import pytest

from searchrl.viz import records as records_mod
from searchrl.viz.records import iter_records, load_records, summarize
from searchrl.viz.viewer import write_viewer


def _row(i: int, step: int | None = None, dataset: str | None = None, right: bool = False) -> dict:
    answer = "London" if right else f"Paris {i}"
    turns = [{"text": answer, "action": "answer"}]
    traj = {"question": f"q{i}", "golds": ["London"], "answer": answer, "turns": turns}
    em = float(right)
    if dataset is not None:  # an eval prediction row
        return {
            "source": f"eval/{dataset}/agent",
            "score": em,
            "id": f"{dataset}-{i}",
            "dataset": dataset,
            "method": "agent",
            "question": f"q{i}",
            "golds": ["London"],
            "prediction": answer,
            "metrics": {"em": em, "f1": em},
            "trajectory": traj,
        }
    return {"source": "train", "score": em, "step": step, "metrics": {"reward": em, "correct": em}, "trajectory": traj}


def _write(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _shown_lines(html: str) -> list[int]:
    return [int(n) for n in re.findall(r"\.jsonl:(\d+)</span></div></header>", html)]


def test_rows_are_read_one_at_a_time(tmp_path: Path) -> None:
    """The first rows are there before a later bad row is read: the file is not read whole first."""
    src = tmp_path / "rollouts.jsonl"
    src.write_text(json.dumps(_row(0, step=1)) + "\n" + json.dumps(_row(1, step=1)) + "\n{not json\n")
    rows = iter_records(src)
    assert next(rows).question == "q0" and next(rows).question == "q1"
    with pytest.raises(ValueError, match=r"rollouts\.jsonl:3: not valid JSON"):
        next(rows)


def test_a_page_keeps_only_the_records_it_shows(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Reading 60 rows for a page of 4 never holds more than the page (and the row in hand), first or last ones;
    the summary still covers all 60."""
    src = _write(tmp_path / "rollouts.jsonl", [_row(i, step=i, right=i % 3 == 0) for i in range(60)])
    parse, alive, most = records_mod.parse_row, [], [0]

    def counting(row, source):
        rec = parse(row, source)
        alive.append(weakref.ref(rec))
        most[0] = max(most[0], sum(ref() is not None for ref in alive))
        return rec

    monkeypatch.setattr(records_mod, "parse_row", counting)
    for last in (False, True):
        alive.clear()
        most[0] = 0
        html = write_viewer([src], tmp_path / "page.html", limit=4, last=last).read_text()
        assert html.count("<article") == 4 and most[0] <= 4 + 2
        assert 'data-stat="n">trajectories: <b>60</b>' in html and 'data-stat="em">EM: <b>0.333</b>' in html
    assert _shown_lines(html) == [57, 58, 59, 60]


def test_summary_added_up_row_by_row_matches_the_list_of_records(tmp_path: Path) -> None:
    rows = [_row(i, dataset=d, right=i % 2 == 0) for i, d in enumerate(["nq", "hotpotqa", "nq", "popqa", "nq"])]
    rows[1]["diagnostics"] = {"no_search": True, "reading_failure": None}
    rows[3]["diagnostics"] = {"no_search": False, "reading_failure": True}
    rows.append({"question": "no golds", "turns": [], "golds": [], "answer": None})
    recs = load_records(_write(tmp_path / "p.jsonl", rows))
    s = summarize(recs)
    assert s["n"] == 6 and s["n_scored"] == 5 and s["em"] == pytest.approx(3 / 5) and s["reward"] == pytest.approx(0.6)
    assert s["diagnostics"] == {"no_search": 0.5, "reading_failure": 1.0} and s["correct"] is None
    assert s["answered"] == pytest.approx(5 / 6) and s["turns"] == pytest.approx(5 / 6)
