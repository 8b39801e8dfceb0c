"""One ``Correctness`` per run: the answer reward, the group reward, the memorizer, rejection sampling, the training
log and the viewer all use the rule the reward config defines; and one trajectory record format is written."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from searchrl.config import MemorizationConfig, load_config
from searchrl.generation.fake import ByteTokenizer
from searchrl.protocols import get_protocol
from searchrl.protocols.base import FormatReport
from searchrl.rewards import RewardComposer, RewardInput
from searchrl.rewards.correctness import Correctness
from searchrl.rewards.summary import scored_records, summarize
from searchrl.rl.memorization import Memorizer, memorizer_correctness
from searchrl.rollout.record import read_trajectories, row_trajectory, trajectory_record
from searchrl.rollout.trajectory import Trajectory, Turn
from searchrl.utils import write_jsonl
from searchrl.viz.records import load_records
from searchrl.viz.viewer import render_html


def test_rule_metric_threshold_and_word_cap() -> None:
    em = Correctness()
    assert em("paris", ["Paris"]) and not em("in Paris", ["Paris"]) and not em(None, ["Paris"])
    cover = Correctness(metric="cover_em", max_words=3)
    assert cover("in Paris", ["Paris"]) and not cover("it is in Paris France", ["Paris"])
    assert cover.score("it is in Paris France", ["Paris"]) == 1.0 and cover.too_long("it is in Paris France")
    half = Correctness(metric="f1", threshold=0.5)
    assert half("Paris France", ["Paris"]) and not half("Lyon France", ["Paris"])
    anything = Correctness(threshold=0.0)  # any answer counts; a missing one does not
    assert anything("Lyon", ["Paris"]) and not anything(None, ["Paris"])
    with pytest.raises(ValueError, match="threshold"):
        Correctness(threshold=1.5)
    with pytest.raises(ValueError, match="max_words"):
        Correctness(max_words=0)


def test_built_from_the_reward_config() -> None:
    pp = load_config("r1_searcher_pp")
    rule = Correctness.from_reward_config(pp.reward)
    assert (rule.metric, rule.max_words) == ("cover_em", 10)
    stage1 = load_config("r1_searcher_stage1")  # no answer component: the default rule
    assert Correctness.from_reward_config(stage1.reward) == Correctness()
    # overrides win; None overrides are ignored (a config field that defaults to "as the reward says")
    assert Correctness.from_reward_config(pp.reward, metric="em", max_words=None).metric == "em"
    assert Correctness.from_reward_config(pp.reward, max_words=None).max_words == 10


def _inputs(answers, searches, golds=("Paris",)):
    rep = FormatReport(ok=True, has_answer=True, answer=None, n_searches=0)
    return [RewardInput("q", list(golds), "", a, rep, n, group_id=0) for a, n in zip(answers, searches, strict=True)]


def test_answer_and_group_reward_agree_with_the_rule() -> None:
    components = [
        {"name": "answer", "weight": 1.0, "params": {"metric": "cover_em", "max_words": 3}},
        {"name": "group", "weight": 1.0, "params": {}},
    ]
    cfg = load_config("r1_searcher_pp", [f"reward.components={json.dumps(components)}"])
    rule = Correctness.from_reward_config(cfg.reward)
    answers = ["in Paris", "it was surely Paris", "Lyon", "Paris"]
    res = RewardComposer.from_config(cfg.reward)(_inputs(answers, [1, 0, 0, 2]))
    correct = [rule(a, ["Paris"]) for a in answers]
    assert correct == [True, False, False, True]
    assert [s > 0 for s in res.components["answer"]] == correct
    # the group bonus goes to the correct rollout with the fewest searches: the 4-word answer (0 searches) is not it
    assert [s > 0 for s in res.components["group"]] == [True, False, False, False]


def test_memorizer_uses_the_reward_rule_unless_overridden() -> None:
    tok, pp = ByteTokenizer(), get_protocol("r1_searcher_pp")
    cfg = load_config("r1_searcher_pp")  # memorization.metric: null -> the answer reward's cover_em, 10 words
    m = Memorizer(cfg.memorization, None, pp, tok, correctness=memorizer_correctness(cfg))
    path = "<|begin_internal_answer|>I recall it.<|end_internal_answer|> \\boxed{{{}}}"
    assert m.validate(path.format("the city of Paris"), ["Paris"]) == ""  # cover-EM: correct
    em_cfg = load_config("r1_searcher_pp", ["memorization.metric=em"])
    m_em = Memorizer(em_cfg.memorization, None, pp, tok, correctness=memorizer_correctness(em_cfg))
    assert m_em.validate(path.format("the city of Paris"), ["Paris"]) == "wrong answer"
    long = "a b c d e f g h i j k Paris"
    assert m.validate(path.format(long), ["Paris"]) == "answer too long"
    # standalone (no run config): R1-Searcher++'s own rule
    alone = Memorizer(MemorizationConfig(), None, pp, tok)
    assert (alone.correctness.metric, alone.correctness.max_words) == ("cover_em", 10)


def _traj(answer: str | None, golds=("Paris",)) -> Trajectory:
    t = Trajectory("u#0", "u", "u", "Capital of France?", list(golds), prompt_ids=[1, 2])
    t.turns.append(Turn(text=f"<answer>{answer}</answer>", action="answer", finish_reason="stop"))
    t.answer = answer
    return t


def test_records_round_trip_and_the_viewer_shows_the_writers_verdict(tmp_path: Path) -> None:
    rule = Correctness(metric="cover_em")
    trajs = [_traj("the city of Paris"), _traj("Lyon")]
    rows = scored_records(trajs, source="eval/step_0", correctness=rule, step=0)
    assert [sorted(r) for r in rows] == [["metrics", "score", "source", "step", "trajectory"]] * 2
    assert [r["metrics"]["correct"] for r in rows] == [1.0, 0.0] and [r["score"] for r in rows] == [0.0, 0.0]
    path = write_jsonl(tmp_path / "evals.jsonl", rows)
    back = list(read_trajectories(path))
    assert [t.answer for t in back] == ["the city of Paris", "Lyon"]
    assert row_trajectory(trajs[0].to_dict()).answer == "the city of Paris"  # bare rows of earlier releases
    recs = load_records(path)
    assert [r.correct for r in recs] == [1.0, 0.0]
    html = render_html(recs)
    assert html.count('class="badge ok">correct') == 1  # cover-EM's verdict, although EM is 0 for both
    assert trajectory_record(None, source="eval/d/direct") == {
        "source": "eval/d/direct",
        "score": None,
        "metrics": {},
        "trajectory": None,
    }


def test_summary_reports_the_runs_rule() -> None:
    proto, tok = get_protocol("search_r1"), ByteTokenizer()
    trajs = [_traj("the city of Paris"), _traj("Paris")]
    s = summarize(trajs, proto, tok, Correctness(metric="cover_em"))
    assert s["em"] == 0.5 and s["correct"] == 1.0
    assert summarize(trajs, proto, tok)["correct"] == 0.5  # default rule: EM
