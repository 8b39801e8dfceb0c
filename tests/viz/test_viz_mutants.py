"""The viewer and curves pinned where a plausible slip would go unseen: counts and verdicts read from rows, every
untrusted field escaped, filters and windows at their edges, the CLI passing each option on, and the curves' marks."""

from __future__ import annotations

import json
import re
from html.parser import HTMLParser
from pathlib import Path

import pytest
from typer.testing import CliRunner

from searchrl.cli import app
from searchrl.protocols import get_protocol
from searchrl.retrieval.base import Hit
from searchrl.viz import plots
from searchrl.viz.records import ViewRecord, load_records, parse_row, summarize
from searchrl.viz.render import fmt, highlight, observation_html, split_documents
from searchrl.viz.select import RowFilter, Window
from searchrl.viz.viewer import render_html, write_viewer

runner = CliRunner()


def _write(path: Path, rows: list[dict]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def _lines(html: str) -> list[int]:
    """The file lines of the records a page shows, in page order."""
    return [int(n) for n in re.findall(r"\.jsonl:(\d+)</span></div></header>", html)]


# ------------------------------------------------------------------------------------------------ counts


def test_counts_from_the_turns_of_a_row_without_its_own() -> None:
    """An empty ``<search></search>`` is no search; queries count one by one; an invalid turn without a reason is
    still invalid, shown with a placeholder reason; the page's data attributes carry the same numbers."""
    turns = [
        {"text": "<search>a</search><search>b</search>", "action": "search", "queries": ["a", "b"]},
        {"text": "<search></search>", "action": "search", "queries": []},
        {"text": "rambling", "action": "invalid"},
        {"text": "<answer>x</answer>", "action": "answer"},
    ]
    rec = parse_row({"question": "Q?", "golds": ["x"], "answer": "x", "turns": turns}, "t.jsonl:1")
    assert {k: rec.counts[k] for k in ("searches", "queries", "turns", "invalid")} == {
        "searches": 1,
        "queries": 2,
        "turns": 4,
        "invalid": 1,
    }
    html = render_html([rec])
    assert "<b>searches:</b> 1 (2 queries) · <b>turns:</b> 4" in html
    assert 'data-searches="1"' in html and 'data-invalid="1"' in html and 'data-turns="4"' in html
    assert "⚠ invalid: (no reason given)" in html and '<span class="badge inv">1 invalid</span>' in html


def test_an_eval_pages_attributes_labels_and_tables(tmp_path: Path) -> None:
    scored = {"question": "Q?", "golds": ["Ada Lovelace"], "prediction": "Lovelace", "score": 0.0}
    scored["metrics"] = {"em": 0.0, "f1": 0.5}
    unscored = {"question": "R?", "golds": [], "prediction": ""}
    files = [_write(tmp_path / "a.jsonl", [scored]), _write(tmp_path / "b.jsonl", [unscored])]
    html = write_viewer(files, tmp_path / "p.html").read_text()
    assert re.findall(r'data-f1="([^"]*)"', html) == ["0.5", ""]
    assert re.findall(r'data-answered="([^"]*)"', html) == ["1", "0"]
    assert "<b>score:</b> 0</span>" in html and "(1 without golds, not scored)" in html
    header = "<tr><th>file</th><th>n</th><th>EM</th><th>F1</th><th>score</th><th>searches</th><th>answered</th></tr>"
    assert header in html  # no column of n/a (no row carries a verdict)
    assert "<title>SearchRL trajectories: a.jsonl, b.jsonl</title>" in html


def test_the_writers_counts_win_zero_included_and_the_mask_only_fills_what_is_missing() -> None:
    turns = [{"text": "t", "action": "search", "queries": ["q"], "n_gen_tokens": 4, "n_obs_tokens": 9}]
    row = {"question": "Q?", "golds": [], "turns": turns, "counts": {"searches": 0, "policy_tokens": 3}}
    row["action_mask"] = [1, 1, 0, 0, 0, 1, 1]
    rec = parse_row(row, "t.jsonl:1")
    assert rec.counts["searches"] == 0 and rec.counts["policy_tokens"] == 3  # the writer's, not recomputed
    assert rec.counts["queries"] == 1  # not given: from the turns
    del row["counts"]
    rec = parse_row(row, "t.jsonl:1")
    assert rec.counts["policy_tokens"] == 4 and rec.counts["inserted_tokens"] == 3  # from the mask


def test_a_prediction_rows_answer_and_verdict() -> None:
    """An eval row's scored prediction is its answer (not its trajectory's); a verdict of 0.5 is not correct; a
    boolean is not a score, so EM is recomputed."""
    traj = {"question": "Q?", "golds": ["Londres"], "answer": "It is London, I think", "turns": []}
    row = {"question": "Q?", "golds": ["London"], "prediction": "London", "trajectory": traj, "source": "eval/step_20"}
    rec = parse_row(row, "p.jsonl:1")
    assert rec.answer == "London" and rec.golds == ["London"] and rec.em == 1.0 and rec.step == 20
    row["metrics"] = {"correct": 0.5}
    assert parse_row(row, "p.jsonl:1").verdict is False
    row["metrics"] = {"em": 0.0, "correct": 1.0}  # a row written before scores: its verdict is what it sorts on
    assert parse_row(row, "p.jsonl:1").reward == 1.0
    row["score"] = None  # written as null: not a score, so the verdict still sorts
    assert parse_row(row, "p.jsonl:1").reward == 1.0
    row["metrics"] = {"em": 0.0}
    assert parse_row(row, "p.jsonl:1").reward == 0.0
    del row["score"]
    row["prediction"], row["metrics"] = "Paris", {"em": True, "correct": True}
    rec = parse_row(row, "p.jsonl:1")
    assert rec.em == 0.0 and rec.correct is None and rec.verdict is False


def test_the_invalid_rate_counts_rows_not_turns(tmp_path: Path) -> None:
    bad = {"text": "?", "action": "invalid", "invalid_reason": "no_action"}
    rows = [
        {"question": "a", "golds": ["x"], "turns": [bad, bad, bad]},
        {"question": "b", "golds": ["x"], "turns": []},
    ]
    recs = load_records(_write(tmp_path / "t.jsonl", rows))
    assert summarize(recs)["invalid"] == 0.5
    assert 'data-stat="invalid">with invalid turns: <b>50.0%</b>' in render_html(recs)


def test_mean_searches_and_answers_cover_rows_without_golds_too(tmp_path: Path) -> None:
    search = {"text": "s", "action": "search", "queries": ["q"]}
    rows = [
        {"question": "a", "golds": ["x"], "turns": [search, search], "answer": " \n"},  # blank: not an answer
        {"question": "b", "golds": [], "turns": [], "answer": "y"},  # `searchrl ask`: no golds, still a trajectory
    ]
    s = summarize(load_records(_write(tmp_path / "t.jsonl", rows)))
    assert s["searches"] == 1.0 and s["answered"] == 0.5


def test_a_context_of_objects_is_shown_as_their_json(tmp_path: Path) -> None:
    row = {"question": "Q?", "golds": ["a"], "prediction": "a", "contexts": [{"title": "Ada", "text": "born 1815"}]}
    (rec,) = load_records(_write(tmp_path / "p.jsonl", [row]))
    assert rec.context == ['{"title": "Ada", "text": "born 1815"}']


def test_the_file_of_a_source_keeps_a_drive_letter() -> None:
    """A page on another drive than its input (Windows) names it by an absolute path with a colon in it."""
    assert ViewRecord(source="D:/runs/a.jsonl:3", kind="trajectory", question="q", golds=[], answer=None).file == (
        "D:/runs/a.jsonl"
    )


def test_a_run_directory_of_predictions_names_one(tmp_path: Path) -> None:
    _write(tmp_path / "eval" / "predictions" / "dev__agent.jsonl", [])
    with pytest.raises(FileNotFoundError, match=r"e\.g\. .*predictions/dev__agent\.jsonl"):
        load_records(tmp_path / "eval")


# ------------------------------------------------------------------------------------------------ escaping

EVIL = '"><img src=x onerror=alert(1)>'


class _Tags(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[str] = []
        self.handlers: list[str] = []
        self.texts: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)
        self.handlers += [k for k, _ in attrs if k.startswith("on") or '"' in k or "<" in k]

    def handle_data(self, data: str) -> None:
        self.texts.append(data)


def test_every_field_a_row_carries_is_escaped(tmp_path: Path) -> None:
    """Text from a file (model output, documents, golds, ids, metric names, datasets, file names) never becomes markup:
    no <img> element and no event handler attribute anywhere, and the text reads back as written."""
    turn = {
        "text": f"<search> {EVIL} </search>",
        "action": EVIL,
        "finish_reason": EVIL,
        "queries": [EVIL],
        "hit_ids": [[EVIL]],
        "observation": f"<information>Doc 1(Title: {EVIL}) {EVIL}</information>",
        "invalid_reason": EVIL,
        "hint": EVIL,
        "timings": {EVIL: 1.0},
    }
    traj = {"question": EVIL, "golds": [EVIL], "answer": EVIL, "stop_reason": EVIL, "uid": EVIL, "turns": [turn]}
    traj["metadata"] = {EVIL: EVIL}
    rollout = {
        "source": EVIL,
        "step": 1,
        "metrics": {"reward": 0.5, EVIL: EVIL},
        "reward_components": {EVIL: EVIL},
        "trajectory": traj,
    }
    trace = {"steps": [{"sentence": EVIL, "query": EVIL, "hit_ids": [EVIL]}], "note": EVIL}
    pred = {"question": EVIL, "golds": [EVIL], "prediction": EVIL, "raw": EVIL, "context": [EVIL], "trajectory": trace}
    pred |= {"id": EVIL, "dataset": EVIL, "method": EVIL}
    files = [_write(tmp_path / "<img src=x>" / "a.jsonl", [rollout]), _write(tmp_path / "b.jsonl", [pred])]
    html = write_viewer(files, tmp_path / "p.html").read_text()
    p = _Tags()
    p.feed(html)
    assert "img" not in p.tags and p.handlers == []
    assert html.count("<script>") == 1
    assert EVIL in "".join(p.texts)  # ... and reads back as written
    filtered = write_viewer(files, tmp_path / "q.html", where=RowFilter(methods=(EVIL,))).read_text()
    assert "<img" not in filtered and f"method {EVIL}" not in filtered  # the filter's note is escaped too


def test_a_named_protocol_cuts_its_own_documents() -> None:
    """An r1_searcher observation whose document holds lines an R-Search reader would take for documents: cut into
    its own two, not the most any protocol finds."""
    text = "born 1815\n(Title: Byron) her father\n(Title: Somerville) her tutor\n(Title: Babbage) a friend"
    hits = [Hit("d1", "Ada", text, 1.0), Hit("d2", "Bob", "x", 1.0)]
    obs = get_protocol("r1_searcher").render_observation(["Ada"], [hits])
    assert sum(is_doc for _, is_doc in split_documents(obs, "r1_searcher")) == 2


def test_a_tall_observation_starts_collapsed_and_a_tiny_negative_shows_as_zero() -> None:
    assert '<details class="inserted"><summary>' in observation_html("\n".join("x" * 13), 0)  # 13 lines
    assert '<details class="inserted" open>' in observation_html("\n".join("x" * 12), 0)
    assert fmt(-0.0001) == "0" and fmt(0.25) == "0.25"


def test_an_empty_query_marks_nothing() -> None:
    assert (
        highlight("<search></search> Ada", ["", " ", "Ada"])
        == '&lt;search&gt;&lt;/search&gt; <mark class="q">Ada</mark>'
    )
    assert highlight("a<b", [""]) == "a&lt;b"


# ------------------------------------------------------------------------------------------------ selection


def _rec(step: int | None = None, golds: tuple[str, ...] = ("a",), answer: str = "a", method: str = "m") -> ViewRecord:
    return ViewRecord(
        source="f:1", kind="rollout", question="q", golds=list(golds), answer=answer, step=step, method=method
    )


def test_a_filter_at_its_edges() -> None:
    window = RowFilter(steps=(2, 4))
    assert [window.matches(_rec(s)) for s in (1, 2, 3, 4, 5, None)] == [False, True, True, True, False, False]
    unscored = _rec(golds=())
    assert not RowFilter(only="wrong").matches(unscored) and not RowFilter(only="correct").matches(unscored)
    assert RowFilter(only="wrong").matches(_rec(answer="b")) and not RowFilter(only="wrong").matches(_rec())
    assert [RowFilter(methods=("rag", "agent")).matches(_rec(method=m)) for m in ("agent", "direct")] == [True, False]


def test_every_record_but_the_last_few() -> None:
    w = Window(0, offset=2, last=True)
    for i in range(5):
        w.offer(_rec(i))
    assert [r.step for r in w.records()] == [0, 1, 2]


# ------------------------------------------------------------------------------------------------ CLI


def _train_rows(n: int) -> list[dict]:
    rows = []
    for s in range(1, n + 1):
        turns = [{"text": "?", "action": "invalid"}] if s == 3 else [{"text": "a", "action": "answer"}]
        traj = {"question": f"q{s}", "golds": ["a"], "answer": "a" if s % 2 == 0 else "b", "turns": turns}
        rows.append({"source": "train", "step": s, "metrics": {"reward": 0.0}, "trajectory": traj})
    return rows


def test_the_view_command_passes_each_option_on(tmp_path: Path) -> None:
    src = _write(tmp_path / "rollouts.jsonl", _train_rows(6))
    out = tmp_path / "p.html"

    def page(*args: str) -> str:
        res = runner.invoke(app, ["view", str(src), "--out", str(out), *args])
        assert res.exit_code == 0, res.output
        return out.read_text()

    assert _lines(page("--step", "2:4", "--last", "--limit", "2")) == [3, 4]
    assert _lines(page("--offset", "1", "--limit", "2")) == [2, 3]
    assert _lines(page("--only", "invalid")) == [3]
    assert "a random sample of 2" in page("--sample", "--limit", "2")
    assert "<title>My page</title>" in page("--title", "My page")
    preds = [
        {"question": "Q?", "golds": ["a"], "prediction": "a", "method": m, "dataset": "d"} for m in ("rag", "agent")
    ]
    src = _write(tmp_path / "d__all.jsonl", preds)
    assert _lines(page("--method", "agent")) == [2]


def test_the_warning_when_nothing_matches_names_what_was_read(tmp_path: Path) -> None:
    rows = _train_rows(4)
    for row, step in zip(rows, (5, 2, 9, 7), strict=True):
        row["step"] = step
    src = _write(tmp_path / "rollouts.jsonl", rows)
    res = runner.invoke(app, ["view", str(src), "--out", str(tmp_path / "p.html"), "--step", "100", "--dataset", "nq"])
    assert res.exit_code == 0, res.output
    assert "(read: datasets: -; steps 2-9)" in " ".join(res.output.split())


def test_the_plot_command_passes_smooth_and_title(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    seen = {}
    monkeypatch.setattr(plots, "plot_runs", lambda runs, out, **kw: seen.update(kw) or "x.png")
    res = runner.invoke(app, ["plot", str(tmp_path), "--smooth", "4", "--title", "Mine"])
    assert res.exit_code == 0, res.output
    assert seen == {"smooth": 4, "title": "Mine"}


# ------------------------------------------------------------------------------------------------ curves


def _figure(monkeypatch: pytest.MonkeyPatch) -> list:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figures: list = []
    monkeypatch.setattr(plt, "close", lambda fig: figures.append(fig))
    return figures


def test_minus_infinity_is_marked_at_the_bottom_and_negative_rates_keep_their_range(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    figures = _figure(monkeypatch)
    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics.jsonl").write_text(
        '{"step": 1, "reward/total": 0.1, "rollout/em": -0.5}\n{"step": 2, "reward/total": -Infinity}\n'
        '{"step": 3, "reward/total": Infinity, "rollout/em": 0.5}\n'
    )
    plots.plot_run(run)
    axes = {a.get_title(): a for a in figures[0].get_axes()}
    (marks,) = axes["reward"].collections
    assert [list(p) for p in marks.get_offsets()] == [[2, 0.0], [3, 1.0]]
    assert axes["EM (rollouts)"].get_ylim() != (-0.05, 1.05)  # -0.5 is no rate: not squeezed into 0..1
    assert [t.get_text() for t in axes["reward"].get_legend().get_texts()] == ["per step", "not finite"]


def test_rows_without_a_step_are_counted_only_when_they_hold_a_curve() -> None:
    rows = [{"step": 1, "reward/total": 0.1}, {"event": "done"}, {"step": "x", "note": 1}, {"reward/total": 0.3}]
    problems = plots._series([*rows, {"step": 2, "reward/total": True}])[1]
    assert problems["no step"] == ["no step"] and problems["not a number"] == ["reward/total = True at step 2"]


def test_three_runs_named_below_their_common_directory_each_with_its_own_panels(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Runs ``x/rl``, ``y/rl``, ``z/rl``: named so; a metric only one run logs still gets its panel; two points get no
    mean; a value that is not finite is named in the figure's legend."""
    figures = _figure(monkeypatch)
    runs = []
    for name, extra in (("x", ', "kl/mean": 0.1'), ("y", ""), ("z", ', "time/step_s": NaN')):
        run = tmp_path / name / "rl"
        run.mkdir(parents=True)
        text = f'{{"step": 1, "reward/total": 0.1{extra}}}\n{{"step": 2, "reward/total": 0.2, "time/step_s": 1.0}}\n'
        (run / "metrics.jsonl").write_text(text)
        runs.append(run)
    monkeypatch.chdir(tmp_path)
    plots.plot_runs(runs, smooth=3)
    (fig,) = figures
    axes = {a.get_title(): a for a in fig.get_axes()}
    assert fig._suptitle.get_text() == "x/rl vs y/rl vs z/rl"
    assert "KL to reference" in axes and len(axes["reward"].get_lines()) == 3  # no mean over 2 points
    assert [t.get_text() for t in fig.legends[0].get_texts()] == ["x/rl", "y/rl", "z/rl", "not finite"]
