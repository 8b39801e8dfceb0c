"""The viewer shows what the rows say: their own scores and verdicts, a summary per input file, documents cut by
each row's protocol, and text of any kind (lone surrogates, control characters, huge documents) without breaking."""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from searchrl.cli import app
from searchrl.protocols import get_protocol
from searchrl.retrieval.base import Hit
from searchrl.viz.records import load_records, summarize
from searchrl.viz.render import MAX_SHOWN_CHARS, highlight
from searchrl.viz.viewer import render_html, write_viewer


def _write(path: Path, rows: list[dict]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def _stat(html: str, key: str) -> str:
    m = re.search(rf'data-stat="{key}">[^<]*<b>([^<]*)</b>', html)
    assert m, f"no {key} stat"
    return m.group(1)


def _turn(observation: str = "", text: str = "<search> q </search>", queries: list[str] | None = None) -> dict:
    return {
        "text": text,
        "action": "search",
        "queries": ["q"] if queries is None else queries,
        "observation": observation,
    }


def _traj(answer: str, turns: list[dict] | None = None, golds: list[str] | None = None, **kw) -> dict:
    return {
        "question": "Q?",
        "golds": ["Tom Hale"] if golds is None else golds,
        "answer": answer,
        "turns": turns or [],
    } | kw


def _record(answer: str, metrics: dict, source: str = "eval/step_5", **kw) -> dict:
    return {"source": source, "score": metrics.get("em"), "metrics": metrics, "trajectory": _traj(answer, **kw)}


# ------------------------------------------------------------------------------------------------ scores


def test_a_rows_own_scores_are_shown_not_recomputed(tmp_path: Path) -> None:
    """A row scored with its run's normalisation (here: underscores count as spaces) keeps its EM / F1; a row
    without scores gets them recomputed."""
    pred = {"question": "Who?", "golds": ["Tom Hale"], "prediction": "Tom_Hale", "metrics": {"em": 1.0, "f1": 1.0}}
    bare = {"question": "Who?", "golds": ["Tom Hale"], "prediction": "Tom_Hale"}
    stored, recomputed = load_records(_write(tmp_path / "p.jsonl", [pred, bare]))
    assert (stored.em, stored.f1, stored.verdict) == (1.0, 1.0, True)
    assert (recomputed.em, recomputed.verdict) == (0.0, False)
    html = render_html([stored])
    assert _stat(html, "em") == "1" and 'class="traj correct"' in html and "EM 1 · F1 1" in html
    (rollout,) = load_records(_write(tmp_path / "r.jsonl", [_record("Tom_Hale", {"em": 1.0, "f1": 1.0})]))
    assert rollout.em == 1.0 and summarize([rollout])["em"] == 1.0


def test_the_summary_has_the_correct_rate_the_badges_show(tmp_path: Path) -> None:
    """Training rows judged by cover-EM: correct although EM is 0; the page's correct rate counts the badges."""
    rows = [
        _record("born in Tom Hale's town", {"reward": 1.0, "correct": 1.0}, source="train", step=1),
        _record("nobody", {"reward": 0.0, "correct": 0.0}, source="train", step=1),
    ]
    recs = load_records(_write(tmp_path / "rollouts.jsonl", rows))
    html = render_html(recs)
    assert _stat(html, "em") == "0" and _stat(html, "correct") == "50.0%"
    assert html.count('class="traj correct"') == 1 and 'data-correct="1"' in html
    assert "correct: fmt(mean(col('correct')), true)" in html  # the filtered summary recomputes it too
    plain = render_html(load_records(_write(tmp_path / "t.jsonl", [_traj("Tom Hale")])))
    assert 'data-stat="correct"' not in plain  # no row carries a verdict of its own: EM decides, no extra rate


def test_several_files_get_a_summary_row_each(tmp_path: Path) -> None:
    before = _write(tmp_path / "before.jsonl", [_record("x", {"em": 0.0}, "demo/before") for _ in range(2)])
    after = _write(tmp_path / "evals" / "step_9.jsonl", [_record("Tom Hale", {"em": 1.0}, "eval/step_9")])
    html = write_viewer([before, after], tmp_path / "page.html").read_text()
    table = re.search(r'<table class="groups">.*?</table>', html).group(0)
    assert "<th>file</th>" in table
    assert re.search(r"<td>before\.jsonl</td><td>2</td><td>0</td>", table)
    assert re.search(r"<td>evals/step_9\.jsonl</td><td>1</td><td>1</td>", table)
    one_file = _write(
        tmp_path / "both.jsonl", [_record("x", {"em": 0.0}, "demo/before"), _record("Tom Hale", {"em": 1.0})]
    )
    html = write_viewer([one_file], tmp_path / "one.html").read_text()
    assert "<th>source</th>" in html and "<td>demo/before</td><td>1</td><td>0</td>" in html
    single = write_viewer([before], tmp_path / "single.html").read_text()
    assert '<table class="groups">' not in single


def test_prediction_files_get_one_table_when_files_and_methods_coincide(tmp_path: Path) -> None:
    def pred(method: str) -> dict:
        return {"dataset": "dev", "method": method, "question": "Q?", "golds": ["a"], "prediction": "a"}

    paths = [_write(tmp_path / f"dev__{m}.jsonl", [pred(m)]) for m in ("agent", "direct")]
    html = write_viewer(paths, tmp_path / "page.html").read_text()
    assert html.count('<table class="groups">') == 1 and "dataset / method" in html


# ------------------------------------------------------------------------------------------------ text


def test_a_lone_surrogate_is_shown_as_the_replacement_character(tmp_path: Path) -> None:
    src = tmp_path / "surr.jsonl"
    src.write_text('{"question": "q\\ud800", "golds": ["a\\udfff"], "turns": [], "answer": "\\ud83d\\ude00"}\n')
    html = write_viewer([src], tmp_path / "surr.html").read_text(encoding="utf-8")
    assert "q\ufffd" in html and "a\ufffd" in html and "\U0001f600" in html  # a valid pair stays the emoji
    res = CliRunner().invoke(app, ["view", str(src), "--out", str(tmp_path / "cli.html")])
    assert res.exit_code == 0, res.output


def test_control_characters_and_bidi_overrides_are_visible_escapes(tmp_path: Path) -> None:
    evil = "a\u202eb\x1b[31mc\x00d\te\nf\u2066g"
    src = _write(tmp_path / "t.jsonl", [_traj(evil, [_turn(evil, text=evil)], question=evil)])
    html = write_viewer([src], tmp_path / "t.html").read_text()
    for raw in ("\u202e", "\x1b", "\x00", "\u2066"):
        assert raw not in html
    assert "a\\u202eb\\x1b[31mc\\x00d\te\nf\\u2066g" in html
    assert "unicode-bidi:isolate" in html


def test_long_observations_and_contexts_are_cut_with_a_note(tmp_path: Path) -> None:
    big = "<information>Doc 1(Title: Big) " + "lorem ipsum " * 10_000 + "</information>"
    rows = [
        _traj("a", [_turn(big)]),
        {"question": "Q?", "golds": ["a"], "prediction": "a", "context": ["ctx " * 20_000]},
    ]
    html = write_viewer([_write(tmp_path / "t.jsonl", rows)], tmp_path / "t.html").read_text()
    notes = re.findall(r"… (\d+) more characters not shown", html)
    assert len(notes) == 2
    assert int(notes[0]) == len(big) - MAX_SHOWN_CHARS and int(notes[1]) == 80_000 - MAX_SHOWN_CHARS
    assert len(html) < 3 * MAX_SHOWN_CHARS + 20_000
    assert f"{len(big)} chars, 1 document)" in html  # the box still says how long it is


def test_highlighting_is_one_pass_and_prefers_the_longest_query() -> None:
    assert highlight("the Ada Lovelace, Ada", ["Ada", "Ada Lovelace"]) == (
        'the <mark class="q">Ada Lovelace</mark>, <mark class="q">Ada</mark>'
    )
    assert highlight("a<b", ["<"]) == 'a<mark class="q">&lt;</mark>b'
    assert highlight("a " * 100_000, ["a", "zz"]).count("<mark") == 100_000  # one regex pass (quadratic took minutes)


def test_a_gzipped_input_names_its_page_without_the_jsonl(tmp_path: Path) -> None:
    src = tmp_path / "rollouts.jsonl.gz"
    src.write_bytes(gzip.compress((json.dumps(_traj("a")) + "\n").encode()))
    assert write_viewer([src]) == tmp_path / "rollouts.html"


# ------------------------------------------------------------------------------------------------ protocols


def _observation(name: str, **options) -> str:
    protocol = get_protocol(name, **options)
    queries = ["alpha", "beta"][: protocol.max_queries]
    return protocol.render_observation(
        queries, [[Hit(f"{q}{i}", f"T{i}", f"x{i}", 1.0) for i in (1, 2)] for q in queries]
    )


@pytest.mark.parametrize(
    ("name", "options", "n_docs"),
    [
        ("r1_searcher", {}, 2),
        ("r1_searcher_pp", {}, 2),
        ("r_search", {}, 2),
        ("rag_r1", {}, 2),
        ("rag_r1", {"multi_query": True}, 4),
        ("search_o1", {}, 2),
        ("tool_call", {}, 4),
    ],
)
def test_documents_are_cut_by_the_rows_protocol_or_a_guess(
    tmp_path: Path, name: str, options: dict, n_docs: int
) -> None:
    obs = _observation(name, **options)
    named = _traj("a", [_turn(obs)], protocol=name)  # an evaluation row's trajectory names its protocol
    unnamed = {"source": "train", "step": 1, "metrics": {}, "trajectory": _traj("a", [_turn(obs)])}
    html = write_viewer([_write(tmp_path / "t.jsonl", [named, unnamed])], tmp_path / "t.html").read_text()
    assert html.count(f"{n_docs} documents)") == 2 and html.count('<pre class="inserted doc">') == 2 * n_docs


def test_evidence_and_internal_steps_are_marked_and_counted(tmp_path: Path) -> None:
    pp, rs = get_protocol("r1_searcher_pp"), get_protocol("r_search")
    text = f"Think. {pp.format_recalled('Paris is in France')} more {pp.format_recalled('it is big')}"
    rows = [
        _traj("a", [_turn(text=text, queries=[])], protocol="r1_searcher_pp"),
        _traj("a", [_turn(text=rs.format_evidence("Ada was born in London") + rs.format_answer("London"))]),
    ]
    html = write_viewer([_write(tmp_path / "t.jsonl", rows)], tmp_path / "t.html").read_text()
    assert html.count('<span class="blk internal">') == 2 + 1  # two steps and the legend
    assert html.count('<span class="blk evidence">') == 1 + 1  # guessed by its tags (no protocol named)
    assert "<b>internal steps:</b> 2" in html and "<b>evidence blocks:</b> 1" in html
    assert "masked out of the loss" in html
