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
from searchrl.viz.select import RowFilter, parse_steps
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


def _eval_files(tmp_path: Path) -> list[Path]:
    nq = [_row(i, dataset="nq", right=i % 3 == 0) for i in range(9)]
    hotpot = [_row(i, dataset="hotpotqa", right=i % 2 == 0) for i in range(30)]
    return [_write(tmp_path / "nq__agent.jsonl", nq), _write(tmp_path / "hotpotqa__agent.jsonl", hotpot)]


def test_a_filter_picks_the_rows_the_page_shows_and_sums_up(tmp_path: Path) -> None:
    page = write_viewer(_eval_files(tmp_path), tmp_path / "p.html", where=RowFilter(datasets=("nq",), only="wrong"))
    html = page.read_text()
    assert html.count("<article") == 6 and html.count("dataset:</b> nq") == 6 and 'class="traj correct"' not in html
    assert 'data-stat="n">trajectories: <b>6</b>' in html and 'data-stat="em">EM: <b>0</b>' in html
    assert "Filter: dataset nq, only wrong: 6 of 39 records match; the summary covers those." in html


def test_offset_pages_through_the_rows_from_either_end(tmp_path: Path) -> None:
    src = _write(tmp_path / "rollouts.jsonl", [_row(i, step=i) for i in range(12)])
    html = write_viewer([src], tmp_path / "p.html", limit=5, offset=5).read_text()
    assert _shown_lines(html) == [6, 7, 8, 9, 10] and "Showing records 6-10 of 12 records: 7 not shown" in html
    assert "--offset N (the next page)" in html and 'data-stat="n">trajectories: <b>12</b>' in html
    html = write_viewer([src], tmp_path / "p.html", limit=3, offset=2, last=True).read_text()
    assert _shown_lines(html) == [8, 9, 10] and "Showing records 8-10 of 12" in html
    assert _shown_lines(write_viewer([src], tmp_path / "p.html", limit=0, offset=10).read_text()) == [11, 12]
    with pytest.raises(ValueError, match="--sample draws from every record"):
        write_viewer([src], tmp_path / "p.html", sample=True, offset=5)


def test_a_sample_spreads_over_every_file_in_file_order_and_repeats(tmp_path: Path) -> None:
    files = _eval_files(tmp_path)
    html = write_viewer(files, tmp_path / "s.html", limit=8, sample=True).read_text()
    assert html.count("<article") == 8 and "Showing a random sample of 8 of 39 records: 31 not shown" in html
    assert "dataset:</b> nq" in html and "dataset:</b> hotpotqa" in html  # not the first file's first rows
    sources = re.findall(r"(\w+)__agent\.jsonl:(\d+)<", html)
    order = {"nq": 0, "hotpotqa": 1}
    assert sources == sorted(sources, key=lambda s: (order[s[0]], int(s[1])))
    assert write_viewer(files, tmp_path / "again.html", limit=8, sample=True).read_text() == html.replace(
        "s.html", "again.html"
    )


def test_steps_select_a_range_of_a_runs_rows(tmp_path: Path) -> None:
    assert parse_steps("100:200") == (100, 200) and parse_steps("7") == (7, 7) and parse_steps(":50") == (None, 50)
    assert parse_steps(None) is None and parse_steps("1000:") == (1000, None)
    for bad in ("x", "5:2", "1:2:3"):
        with pytest.raises(ValueError, match="--step"):
            parse_steps(bad)
    rows = [_row(i, step=i // 2) for i in range(12)] + [{"question": "no step", "turns": [], "golds": ["a"]}]
    src = _write(tmp_path / "rollouts.jsonl", rows)
    html = write_viewer([src], tmp_path / "p.html", where=RowFilter(steps=(4, None))).read_text()
    assert re.findall(r'data-step="(\d*)"', html) == ["4", "4", "5", "5"] and "steps from 4: 4 of 13" in html


def test_cli_view_filters_pages_and_warns_when_nothing_matches(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from searchrl.cli import app

    files = [str(f) for f in _eval_files(tmp_path)]
    out = tmp_path / "p.html"
    args = ["view", *files, "--out", str(out), "--dataset", "hotpotqa", "--only", "correct", "--limit", "4"]
    res = CliRunner().invoke(app, [*args, "--offset", "4"])
    assert res.exit_code == 0, res.output
    html = out.read_text()
    assert _shown_lines(html) == [9, 11, 13, 15] and "dataset hotpotqa, only correct: 15 of 39 records match" in html
    res = CliRunner().invoke(app, ["view", *files, "--out", str(out), "--dataset", "NQ"])
    assert res.exit_code == 0 and "no record matches dataset NQ (read: datasets: hotpotqa, nq)" in res.output
    res = CliRunner().invoke(app, ["view", *files, "--out", str(out), "--only", "right"])
    assert isinstance(res.exception, ValueError) and "choose one of correct, wrong, invalid" in str(res.exception)


def test_a_page_too_big_for_a_browser_is_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    from searchrl.viz import viewer

    monkeypatch.setattr(viewer, "LARGE_PAGE_BYTES", 20_000)
    write_viewer(_eval_files(tmp_path), tmp_path / "p.html", limit=0)
    err = " ".join(capsys.readouterr().err.split())
    assert "the page holds 39 records" in err and "show fewer with --limit, --sample" in err


def test_a_run_caught_writing_inside_a_character_is_a_partial_line(tmp_path: Path) -> None:
    """Rows are written with ensure_ascii=False in flushes of bytes: the file may end inside a character. That last
    line is left out as incomplete, not an error telling to re-encode the file."""
    src = tmp_path / "rollouts.jsonl"
    row = _row(2, step=1)
    row["trajectory"]["question"] = "Où est né Zoë?"
    partial = json.dumps(row, ensure_ascii=False).encode()
    cut = partial.index("é".encode()) + 1
    src.write_bytes((json.dumps(_row(0, step=1)) + "\n" + json.dumps(_row(1, step=1)) + "\n").encode() + partial[:cut])
    assert [r.question for r in iter_records(src)] == ["q0", "q1"]
    src.write_bytes(src.read_bytes()[: -len(partial[:cut])] + b'{"question": "caf\xe9"}\n')  # latin-1: still an error
    with pytest.raises(ValueError, match=r"rollouts\.jsonl:3: not UTF-8 text"):
        list(iter_records(src))


def test_a_page_of_every_row_is_written_a_piece_at_a_time(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """--limit 0 over thousands of rows: the page goes to its file in pieces, never as one string of the whole page
    (beside the list of its articles, each a copy), and reads as the page rendered in memory does."""
    from searchrl import utils
    from searchrl.viz import viewer

    rows = [_row(i, dataset="nq", right=i % 4 == 0) for i in range(3000)]
    rows[7]["trajectory"]["turns"][0]["text"] = "Zoë 😀 <|begin_internal_answer|> x <|end_internal_answer|>"
    src = _write(tmp_path / "nq__agent.jsonl", rows)
    write, pieces = utils.atomic_write_lines, []

    def spy(path, lines):
        return write(path, (pieces.append(len(piece)) or piece for piece in lines))

    monkeypatch.setattr(utils, "atomic_write_lines", spy)
    monkeypatch.setattr(viewer, "atomic_write_lines", spy, raising=False)
    page = write_viewer([src], tmp_path / "p.html", limit=0).read_text(encoding="utf-8")
    assert page.count("<article") == 3000 and 'class="blk internal">internal step' in page
    assert max(pieces) < len(page) / 2
    records = load_records(src, display=src.name)
    assert page == viewer.render_html(records, f"SearchRL trajectories: {src.name}")
