"""The HTML trajectory viewer: both input formats, escaping, summary numbers, bad rows and ``searchrl view``."""

from __future__ import annotations

import json
import re
from html.parser import HTMLParser
from pathlib import Path

import pytest
from typer.testing import CliRunner

from searchrl.cli import app
from searchrl.data.records import QAExample
from searchrl.eval.baselines import Prediction
from searchrl.eval.harness import item_row
from searchrl.rollout.trajectory import Trajectory, Turn
from searchrl.viz.viewer import ViewRecord, load_records, render_html, summarize, write_viewer

EVIL = "<script>alert('pwned')</script>"
OBS = "\n\n<information>Doc 1(Title: Ada) Ada Lovelace was born in London.</information>\n\n"
LONG_OBS = "<information>" + "Lorem ipsum dolor sit amet. " * 60 + "</information>"

runner = CliRunner()


def _traj(qid: str, question: str, golds: list[str], answer: str | None, turns: list[Turn], **kw) -> Trajectory:
    n_resp = sum(t.n_gen_tokens + t.n_obs_tokens for t in turns)
    mask = [1 if i % 3 else 0 for i in range(n_resp)]
    return Trajectory(
        uid=f"{qid}#0",
        group_id=qid,
        question_id=qid,
        question=question,
        golds=golds,
        prompt_ids=[1, 2, 3],
        response_ids=list(range(n_resp)),
        action_mask=mask,
        logprobs=[0.0] * n_resp,
        turns=turns,
        answer=answer,
        **kw,
    )


def _search(query: str, obs: str = OBS) -> Turn:
    return Turn(
        text=f"<think>I need a fact.</think>\n<search> {query} </search>",
        action="search",
        finish_reason="stop",
        queries=[query],
        hit_ids=[["d1", "d2"]],
        observation=obs,
        n_gen_tokens=12,
        n_obs_tokens=30,
        timings={"retrieve_s": 0.01},
    )


def _answer(text: str) -> Turn:
    return Turn(text=f"<answer> {text} </answer>", action="answer", finish_reason="stop", n_gen_tokens=5)


def trajectories() -> list[Trajectory]:
    """Three trajectories with known correctness: right (1 search), wrong (2 searches), unanswered (invalid)."""
    right = _traj(
        "q1",
        "Where was Ada Lovelace born?",
        ["London"],
        "London",
        [_search("Ada Lovelace birthplace"), _answer("London")],
        stop_reason="answer",
        metadata={"kind": "single_hop"},
    )
    wrong = _traj(
        "q2",
        "Who wrote Hamlet?",
        ["William Shakespeare", "Shakespeare"],
        "Marlowe",
        [_search("Hamlet author", LONG_OBS), _search("Hamlet playwright"), _answer("Marlowe")],
        stop_reason="answer",
    )
    invalid = Turn(
        text=f"I will just say {EVIL}",
        action="invalid",
        finish_reason="eos",
        invalid_reason="no_action",
        n_gen_tokens=9,
    )
    unanswered = _traj("q3", "What is 2+2?", ["4"], None, [invalid], stop_reason="eos")
    return [right, wrong, unanswered]


def _write_jsonl(path: Path, rows: list) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


@pytest.fixture
def traj_file(tmp_path: Path) -> Path:
    return _write_jsonl(tmp_path / "trajectories.jsonl", [t.to_dict() for t in trajectories()])


def eval_rows() -> list[dict]:
    ex_ok = QAExample("e1", "Capital of France?", ["Paris"])
    ex_bad = QAExample("e2", "Capital of Italy?", ["Rome"])
    agent = trajectories()[0]
    agent_dict = agent.to_dict() | {"protocol": "search_r1"}
    metrics = ["em", "f1"]
    return [
        item_row(
            "dev",
            "agent",
            QAExample("q1", agent.question, agent.golds),
            Prediction("London", raw="...", trajectory=agent_dict, searches=1, gen_tokens=17),
            metrics,
        ),
        item_row("dev", "direct", ex_ok, Prediction("Paris", raw="Answer: Paris.", gen_tokens=4), metrics),
        item_row(
            "dev",
            "naive_rag",
            ex_bad,
            Prediction(
                "Milan",
                raw="It is Milan.",
                searches=1,
                gen_tokens=5,
                trajectory={"queries": ["Capital of Italy?"], "hit_ids": [["w7", "w9"]]},
            ),
            metrics,
        ),
    ]


@pytest.fixture
def eval_file(tmp_path: Path) -> Path:
    return _write_jsonl(tmp_path / "dev__mixed.jsonl", eval_rows())


class Balance(HTMLParser):
    """Checks that every non-void element is closed in order and collects the text inside elements of a class."""

    VOID = {"meta", "input", "br", "hr", "img", "link", "wbr"}

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.stack: list[tuple[str, str]] = []
        self.errors: list[str] = []
        self.counts: dict[str, int] = {}
        self.texts: dict[str, list[str]] = {}

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        cls = dict(attrs).get("class") or ""
        for c in cls.split():
            self.counts[c] = self.counts.get(c, 0) + 1
        if tag not in self.VOID:
            self.stack.append((tag, cls))

    def handle_endtag(self, tag: str) -> None:
        if not self.stack or self.stack[-1][0] != tag:
            self.errors.append(f"</{tag}> closes {self.stack[-1] if self.stack else 'nothing'}")
            return
        self.stack.pop()

    def handle_data(self, data: str) -> None:
        for _, cls in self.stack:
            for c in cls.split():
                self.texts.setdefault(c, []).append(data)

    def text(self, cls: str) -> str:
        return "".join(self.texts.get(cls, []))


def parse(html: str) -> Balance:
    p = Balance()
    p.feed(html)
    p.close()
    assert not p.errors, p.errors[:5]
    assert not p.stack, f"unclosed: {p.stack[:5]}"
    return p


def stat(html: str, key: str) -> str:
    m = re.search(rf'data-stat="{key}">[^<]*<b>([^<]*)</b>', html)
    assert m, f"no {key} stat"
    return m.group(1)


# ------------------------------------------------------------------------------------------------ loading


def test_loads_raw_trajectories(traj_file: Path) -> None:
    recs = load_records(traj_file)
    assert [r.kind for r in recs] == ["trajectory"] * 3
    right, wrong, unanswered = recs
    assert right.question == "Where was Ada Lovelace born?" and right.golds == ["London"]
    assert right.em == 1.0 and right.f1 == 1.0 and right.counts["searches"] == 1
    assert right.turns[0].observation == OBS and right.turns[0].queries == ["Ada Lovelace birthplace"]
    assert right.source == f"{traj_file}:1"
    assert wrong.em == 0.0 and wrong.counts["searches"] == 2 and wrong.counts["turns"] == 3
    assert unanswered.answer is None and not unanswered.answered and unanswered.n_invalid == 1
    # counts come from Trajectory.counts() (the token mask), not re-derived
    assert right.counts["policy_tokens"] == trajectories()[0].n_policy_tokens


def test_loads_eval_rows_and_rollout_rows(eval_file: Path, tmp_path: Path) -> None:
    agent, direct, rag = load_records(eval_file)
    assert {r.kind for r in (agent, direct, rag)} == {"prediction"}
    assert agent.turns and agent.method == "agent" and agent.protocol == "search_r1" and agent.em == 1.0
    assert direct.turns == [] and direct.raw == "Answer: Paris." and direct.em == 1.0 and direct.dataset == "dev"
    assert direct.row_metrics == {"em": 1.0, "f1": 1.0}
    assert rag.em == 0.0 and rag.trace["hit_ids"] == [["w7", "w9"]] and rag.counts["searches"] == 1

    t = trajectories()[1].to_dict()
    rows = [
        {"step": 3, "reward": 0.25, "reward_components": {"answer": 0.0, "format": 0.25}, "trajectory": t},
        {"step": 7, "reward": 1.0, "trajectory": t, "some_future_field": [1, 2]},  # extra fields are tolerated
    ]
    recs = load_records(_write_jsonl(tmp_path / "rollouts.jsonl", rows))
    assert [(r.kind, r.step, r.reward) for r in recs] == [("rollout", 3, 0.25), ("rollout", 7, 1.0)]
    assert recs[0].reward_components == {"answer": 0.0, "format": 0.25}


def test_a_prediction_without_a_trajectory_shows_its_own_query_count() -> None:
    """A multi-query baseline's row: 1 search holding 3 queries; a row from before the queries field: one each."""
    from searchrl.viz.records import parse_row

    row = {"question": "q", "golds": ["a"], "prediction": "a", "searches": 1, "queries": 3, "gen_tokens": 7}
    assert parse_row(row, "f:1").counts["queries"] == 3 and parse_row(row, "f:1").counts["searches"] == 1
    del row["queries"]
    assert parse_row(row, "f:1").counts["queries"] == 1


def test_tolerates_missing_and_extra_fields(tmp_path: Path) -> None:
    row = {"question": "Q?", "turns": [{"text": "hi", "new_key": 1}], "golds": "A", "extra": {"x": 1}}
    (rec,) = load_records(_write_jsonl(tmp_path / "t.jsonl", [row]))
    assert rec.golds == ["A"] and rec.turns[0].action == "none" and rec.counts["turns"] == 1
    assert rec.em == 0.0  # no answer
    no_golds = {"question": "asked", "golds": [], "turns": [], "answer": "x"}  # `searchrl ask --json`
    (rec,) = load_records(_write_jsonl(tmp_path / "ask.jsonl", [no_golds]))
    assert rec.em is None and summarize([rec])["em"] is None


def test_malformed_rows_name_file_and_line(traj_file: Path, tmp_path: Path) -> None:
    good = traj_file.read_text().splitlines()
    bad = tmp_path / "bad.jsonl"
    bad.write_text("\n".join([good[0], "", '{"foo": 1, "bar": 2}', good[1], "{not json", good[2]]) + "\n")
    with pytest.raises(ValueError, match=rf"^{re.escape(str(bad))}:3: unrecognised row \(keys: bar, foo\); expected"):
        load_records(bad)
    bad2 = tmp_path / "bad2.jsonl"
    bad2.write_text(good[0] + '\n{"question": "q", "turns": "oops"}\n')
    with pytest.raises(ValueError, match=rf"{re.escape(str(bad2))}:2: malformed row"):
        load_records(bad2)
    bad3 = tmp_path / "bad3.jsonl"
    bad3.write_text('{"question": "q", "turns": [{"queries": {"q": 1}}], "golds": ["a"]}\n')
    with pytest.raises(ValueError, match=r"bad3\.jsonl:1: malformed row \(turn 1 queries: expected a list of strings"):
        load_records(bad3)
    bad3.write_text('{"question": "q", "turns": [], "golds": {"a": 1}}\n')
    with pytest.raises(ValueError, match=r":1: malformed row \(golds: expected a list of strings, got dict\)"):
        load_records(bad3)

    errors: list[str] = []
    recs = load_records(bad, skip_bad=True, errors=errors)
    assert len(recs) == 3 and len(errors) == 2
    assert errors[0].startswith(f"{bad}:3:") and errors[1].startswith(f"{bad}:5: not valid JSON")

    out = write_viewer([bad], tmp_path / "bad.html", skip_bad=True)
    assert "2 malformed rows skipped" in out.read_text()
    with pytest.raises(ValueError, match=":3:"):
        write_viewer([bad], tmp_path / "bad.html")


def test_a_run_still_writing_and_compressed_or_foreign_bytes(traj_file: Path, tmp_path: Path) -> None:
    """A run in progress has a half-written last line: left out, not an error. A .gz file reads as its text; bytes
    that are not UTF-8 name file:line and the fix."""
    import gzip

    good = traj_file.read_text().splitlines()
    live = tmp_path / "rollouts.jsonl"
    live.write_text("\n".join(good[:2]) + "\n" + good[2][:300])  # no newline: the writer is mid-row
    assert len(load_records(live)) == 2
    packed = tmp_path / "rollouts.jsonl.gz"
    packed.write_bytes(gzip.compress(("\n".join(good) + "\n").encode()))
    assert len(load_records(packed)) == len(good)
    latin = tmp_path / "latin.jsonl"
    latin.write_bytes(good[0].encode() + b"\n" + b'{"question": "caf\xe9"}\n')
    with pytest.raises(ValueError, match=rf"{re.escape(str(latin))}:2: not UTF-8 text .* re-encode"):
        load_records(latin)


def test_missing_file() -> None:
    with pytest.raises(FileNotFoundError, match="not found"):
        load_records("/nonexistent/rollouts.jsonl")


# ------------------------------------------------------------------------------------------------ rendering


def test_html_content_escaping_and_structure(traj_file: Path, eval_file: Path) -> None:
    recs = load_records(traj_file) + load_records(eval_file)
    html = render_html(recs, title="t <b>")
    p = parse(html)
    assert p.counts["traj"] == 6 and p.counts["turn"] >= 7
    assert "Where was Ada Lovelace born?" in p.text("question")
    # untrusted model text is escaped: no live <script> except the viewer's own
    assert EVIL not in html and "&lt;script&gt;alert(&#x27;pwned&#x27;)&lt;/script&gt;" in html
    assert html.count("<script>") == 1 and "<title>t &lt;b&gt;</title>" in html
    assert EVIL in p.text("policy")  # ... and reads back as the original text
    # the observation sits in the inserted-style element, not in the policy text
    assert "Ada Lovelace was born in London." in p.text("inserted")
    assert "Ada Lovelace was born in London." not in p.text("policy")
    assert "<information>Doc 1(Title: Ada)" in p.text("inserted")
    # queries are highlighted, invalid turns flagged with their reason
    assert "Ada Lovelace birthplace" in p.text("query") and "Ada Lovelace birthplace" in p.text("q")
    assert p.counts["invalid"] == 1 and "no_action" in p.text("invalid-reason")
    # long observations start collapsed, short ones open
    assert re.search(r'<details class="inserted"><summary>inserted \(30 tokens, ' + str(len(LONG_OBS)), html)
    assert f'<details class="inserted" open><summary>inserted (30 tokens, {len(OBS)} chars, 1 document)' in html
    # the direct baseline shows its prediction and raw output; naive RAG its retrieval
    assert "Answer: Paris." in p.text("policy") and "w7, w9" in p.text("hits")
    # controls and a self-contained page
    for needle in (
        'id="filter"',
        'id="only-correct"',
        'id="only-wrong"',
        'id="only-invalid"',
        'value="step:asc"',
        'value="reward:desc"',
    ):
        assert needle in html
    assert not re.search(r"(src|href)=\"https?:", html) and "@import" not in html


def test_summary_numbers(traj_file: Path) -> None:
    recs = load_records(traj_file)  # right, wrong, unanswered
    html = render_html(recs)
    assert stat(html, "n") == "3"
    assert stat(html, "em") == "0.333"
    assert stat(html, "answered") == "66.7%"
    assert stat(html, "searches") == "1"  # (1 + 2 + 0) / 3
    assert stat(html, "invalid") == "33.3%"
    assert 'data-stat="reward"' not in html  # no rewards in raw trajectories
    assert html.count('class="traj correct"') == 1 and html.count('class="traj wrong"') == 2
    s = summarize(recs)
    assert s["em"] == pytest.approx(1 / 3) and s["f1"] == pytest.approx(1 / 3)


def test_rollout_reward_and_step_in_page(tmp_path: Path) -> None:
    rewards = [1.0, 0.0, 0.5]
    rows = [
        {"step": i, "reward": r, "trajectory": t.to_dict()}
        for i, (r, t) in enumerate(zip(rewards, trajectories(), strict=True))
    ]
    html = render_html(load_records(_write_jsonl(tmp_path / "rollouts.jsonl", rows)))
    parse(html)
    assert stat(html, "reward") == "0.5" and 'data-step="2"' in html and 'data-reward="1.0"' in html


def test_limit_says_how_many_are_not_shown(tmp_path: Path) -> None:
    rows = [t.to_dict() for t in trajectories()] * 4  # 12 records
    src = _write_jsonl(tmp_path / "many.jsonl", rows)
    out = write_viewer(src, limit=5)
    assert out == tmp_path / "many.html"
    html = out.read_text()
    parse(html)
    assert html.count("<article") == 5 and "first 5 of 12 records: 7 not shown" in html
    assert stat(html, "n") == "12"  # the summary covers every record
    html_all = write_viewer([src], tmp_path / "all.html", limit=0).read_text()
    assert html_all.count("<article") == 12 and "not shown" not in html_all


def test_last_renders_the_latest_records(tmp_path: Path) -> None:
    rows = [{"step": s, "reward": 0.0, "trajectory": t.to_dict()} for s in range(1, 5) for t in trajectories()]
    src = _write_jsonl(tmp_path / "rollouts.jsonl", rows)  # 4 steps x 3 trajectories
    html = write_viewer(src, tmp_path / "last.html", limit=3, last=True).read_text()
    assert "last 3 of 12 records" in html and 'data-step="4"' in html and 'data-step="3"' not in html


def test_render_empty() -> None:
    html = render_html([])
    parse(html)
    assert stat(html, "n") == "0" and stat(html, "em") == "n/a"


def test_write_viewer_refuses_to_overwrite_input(tmp_path: Path) -> None:
    src = _write_jsonl(tmp_path / "x.html", [t.to_dict() for t in trajectories()])
    with pytest.raises(ValueError, match="one of the input files"):
        write_viewer([src])


def test_view_record_is_a_dataclass() -> None:
    rec = ViewRecord(source="x:1", kind="trajectory", question="q", golds=["a"], answer="the a")
    assert rec.em == 1.0 and rec.answered


# ------------------------------------------------------------------------------------------------ CLI


def test_cli_view(traj_file: Path, eval_file: Path, tmp_path: Path) -> None:
    res = runner.invoke(app, ["view", str(traj_file), str(eval_file)])
    assert res.exit_code == 0, res.output
    out = traj_file.with_name("trajectories.html")
    assert res.stdout.strip() == str(out) and out.is_file()
    html = out.read_text()
    assert html.count("<article") == 6 and "Capital of Italy?" in html

    custom = tmp_path / "sub" / "page.html"
    res = runner.invoke(app, ["view", str(traj_file), "--out", str(custom), "--limit", "2"])
    assert res.exit_code == 0, res.output
    assert custom.read_text().count("<article") == 2
    for cmd in (["view", str(traj_file), "--limit", "-1"], ["plot", str(tmp_path), "--smooth", "-3"]):
        res = runner.invoke(app, cmd)
        assert res.exit_code == 2 and f"Invalid value for '{cmd[2]}'" in res.output, res.output

    bad = tmp_path / "bad.jsonl"
    bad.write_text(traj_file.read_text() + "[1, 2]\n")
    res = runner.invoke(app, ["view", str(bad)])
    assert isinstance(res.exception, ValueError) and f"{bad}:4:" in str(res.exception)
    res = runner.invoke(app, ["view", str(bad), "--skip-bad"])
    assert res.exit_code == 0, res.output
    assert "skipped 1 malformed row" in res.output
    assert "1 malformed row skipped" in bad.with_suffix(".html").read_text()

    res = runner.invoke(app, ["view", "--help"])
    assert res.exit_code == 0 and "searchrl view" in res.output


def test_a_run_directory_names_its_files_and_an_out_directory_takes_the_page(tmp_path: Path) -> None:
    """``view runs/x/rl`` names the JSONL file to give; ``--out DIR`` writes ``DIR/<first file stem>.html``."""
    from searchrl.viz.viewer import write_viewer

    run = tmp_path / "run" / "rl"
    run.mkdir(parents=True)
    (run / "rollouts.jsonl").write_text("")
    with pytest.raises(
        FileNotFoundError, match=r"is a directory: the viewer reads JSONL files; e\.g\. .*rollouts\.jsonl"
    ):
        write_viewer([run])
    pages = tmp_path / "pages"
    pages.mkdir()
    assert write_viewer([run / "rollouts.jsonl"], pages) == pages / "rollouts.html"
    res = CliRunner().invoke(app, ["view", str(run / "rollouts.jsonl"), "--out", str(pages)])
    assert res.exit_code == 0 and "no records in" in res.output  # an empty file: a page, and a warning


def test_the_hint_before_the_final_turn_is_shown_and_counted(tmp_path: Path) -> None:
    row = {
        "question": "Q?",
        "golds": ["a"],
        "turns": [
            {
                "text": "<search>x</search>",
                "action": "search",
                "n_gen_tokens": 5,
                "observation": "docs",
                "n_obs_tokens": 3,
                "hint": "Answer now.",
                "n_hint_tokens": 4,
            },
            {"text": "<answer>a</answer>", "action": "answer", "n_gen_tokens": 6},
        ],
    }
    (rec,) = load_records(_write_jsonl(tmp_path / "t.jsonl", [row]))
    assert rec.counts["inserted_tokens"] == 7 and rec.turns[0].hint == "Answer now."
    assert "hint before the final turn (4 tokens" in render_html([rec])
