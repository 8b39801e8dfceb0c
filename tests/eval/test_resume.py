"""An interrupted evaluation resumes: each answered batch is on disk as it finishes, a rerun with the same settings
answers only the rest (the same predictions as one whole run), pairs finished before the interruption included;
other settings or other questions start afresh, a cut line is redone, and repeated questions keep their own rows."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from searchrl.config import load_config
from searchrl.data.records import QAExample
from searchrl.eval.baselines import DirectMethod
from searchrl.eval.harness import evaluate
from searchrl.eval.resume import partial_path, settings_key


class Counting(DirectMethod):
    """DirectMethod that records the questions it answers and can fail once it has answered ``fail_at`` batches
    in this run (an interruption)."""

    def __init__(self, generator, fail_at: int | None = None) -> None:
        super().__init__(generator)
        self.asked: list[str] = []
        self.batches = 0
        self.fail_at = fail_at

    def answer(self, examples):
        if self.fail_at is not None and self.batches >= self.fail_at:
            raise KeyboardInterrupt
        self.batches += 1
        self.asked += [ex.id for ex in examples]
        return super().answer(examples)


def _run(sets, method, out: Path, key: str | None, methods=("direct",)):
    return evaluate(
        sets, dict.fromkeys(methods, method), out, metrics=["em"], batch_size=1, show=False, resume_key=key
    )


def _rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def _strip(rows: list[dict]) -> list[dict]:
    return [{k: v for k, v in r.items() if k != "latency_s"} for r in rows]  # wall times differ between runs


def test_a_rerun_answers_only_what_the_interrupted_run_left(tmp_path: Path, examples, fakes) -> None:
    sets = {"toy": examples, "two": examples[:2]}
    whole = _run(sets, Counting(fakes.scripted(fakes.direct_reply)), tmp_path / "whole", "k1")
    cut = Counting(fakes.scripted(fakes.direct_reply), fail_at=4)  # the second pair's second batch never comes
    with pytest.raises(KeyboardInterrupt):
        _run(sets, cut, tmp_path / "cut", "k1")
    assert cut.asked == ["q1", "q2", "q3", "q1"]
    again = Counting(fakes.scripted(fakes.direct_reply))
    resumed = _run(sets, again, tmp_path / "cut", "k1")
    assert again.asked == ["q2"]  # the finished first pair and the first answer of the second are kept
    for pair in ("toy__direct", "two__direct"):
        assert _strip(_rows(resumed.paths[pair])) == _strip(_rows(whole.paths[pair]))
        assert not partial_path(resumed.paths[pair]).exists()  # the whole evaluation is written: they go
    assert [r["em"] for r in resumed.rows] == [r["em"] for r in whole.rows]
    assert [r["em_ci95"] for r in resumed.rows] == [r["em_ci95"] for r in whole.rows]  # the intervals too


def test_a_cut_line_is_redone_and_other_settings_or_no_key_start_afresh(tmp_path: Path, examples, fakes) -> None:
    sets = {"toy": examples}
    pred = tmp_path / "predictions" / "toy__direct.jsonl"
    with pytest.raises(KeyboardInterrupt):
        _run(sets, Counting(fakes.scripted(fakes.direct_reply), fail_at=2), tmp_path, "k1")
    raw = partial_path(pred).read_bytes().rstrip(b"\n").split(b"\n")
    assert json.loads(raw[0]).keys() == {"resume_key"} and len(raw) == 3
    partial_path(pred).write_bytes(b"\n".join([*raw[:-1], raw[-1][:25]]) + b"\n")  # the interruption cut q2's line
    cut = Counting(fakes.scripted(fakes.direct_reply), fail_at=1)
    with pytest.raises(KeyboardInterrupt):
        _run(sets, cut, tmp_path, "k1")
    assert cut.asked == ["q2"]
    other = Counting(fakes.scripted(fakes.direct_reply))
    _run(sets, other, tmp_path, "k2")  # other settings: every question answered again
    assert other.asked == ["q1", "q2", "q3"] and not partial_path(pred).exists()
    plain = Counting(fakes.scripted(fakes.direct_reply))
    _run(sets, plain, tmp_path / "plain", None)  # no key: nothing on disk but the predictions
    assert plain.asked == ["q1", "q2", "q3"] and not list((tmp_path / "plain" / "predictions").glob("*.partial"))


def test_other_questions_start_afresh_and_a_repeated_question_keeps_its_own_row(tmp_path: Path, fakes) -> None:
    first = [QAExample("q1", fakes.Q_ROME, ["Rome"]), QAExample("q1", fakes.Q_ROME, ["Roma"])]
    with pytest.raises(KeyboardInterrupt):
        _run({"toy": first}, Counting(fakes.scripted(fakes.direct_reply), fail_at=1), tmp_path, "k")
    regenerated = [QAExample("q1", fakes.Q_ROME, ["Paris"]), first[1]]  # the set's file written again, other golds
    again = Counting(fakes.scripted(fakes.direct_reply))
    res = _run({"toy": regenerated}, again, tmp_path, "k")
    assert again.asked == ["q1", "q1"]  # other questions: nothing kept
    assert [r["golds"] for r in _rows(res.paths["toy__direct"])] == [["Paris"], ["Roma"]]  # one row per occurrence


def test_the_settings_key_follows_the_config_and_a_local_policys_files(tmp_path: Path) -> None:
    policy = tmp_path / "policy"
    policy.mkdir()
    (policy / "model.safetensors").write_bytes(b"weights")
    cfg = load_config("demo", [f"model.policy={policy}"])
    key = settings_key(cfg)
    assert key == settings_key(load_config("demo", [f"model.policy={policy}"]))
    assert key != settings_key(load_config("demo", [f"model.policy={policy}", "evaluation.seed=1"]))
    (policy / "model.safetensors").write_bytes(b"weights trained again")
    assert key != settings_key(cfg)


def test_the_settings_key_follows_an_index_rebuilt_in_place(tmp_path: Path) -> None:
    """Answers retrieved from an index are not kept once it is rebuilt at the same path (same config, new index)."""
    index = tmp_path / "index"
    index.mkdir()
    (index / "manifest.json").write_text('{"created": "then"}')
    cfg = load_config("demo", [f"retrieval.index={index}", "retrieval.kind=bm25"])
    key = settings_key(cfg)
    assert key == settings_key(cfg)
    (index / "manifest.json").write_text('{"created": "now, from another corpus"}')
    assert key != settings_key(cfg)


def test_the_settings_key_follows_a_sets_own_index_under_data_source(tmp_path: Path, monkeypatch) -> None:
    """A set's own ``index:`` relative to data.source, where the evaluation finds it, counts by its manifest too."""
    data = tmp_path / "data"
    (data / "own-index").mkdir(parents=True)
    (data / "own-index" / "manifest.json").write_text('{"created": "then"}')
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")
    sets = '[{"data": "dev", "index": "own-index"}]'
    cfg = load_config("demo", [f"data.source={data}", f"evaluation.datasets={sets}"])
    key = settings_key(cfg)
    (data / "own-index" / "manifest.json").write_text('{"created": "now, from another corpus"}')
    assert key != settings_key(cfg)


def test_a_sampled_baseline_gives_a_question_the_same_answer_in_any_batch(examples) -> None:
    """Each prompt samples from its own stream: a resumed or re-batched evaluation answers a question alike."""
    from searchrl.generation.fake import ByteTokenizer
    from searchrl.generation.hf import HFGenerator
    from searchrl.testing import tiny_model

    method = DirectMethod(HFGenerator(tiny_model(), ByteTokenizer()), temperature=1.0, max_new_tokens=12, seed=3)
    together = method.answer(examples)
    alone = method.answer(examples[2:])
    assert together[2].raw == alone[0].raw and together[0].raw != together[1].raw


def test_an_interrupted_rerun_leaves_no_earlier_summary_beside_its_answers(tmp_path: Path, examples, fakes) -> None:
    _run({"toy": examples}, Counting(fakes.scripted(fakes.direct_reply)), tmp_path, "k1")
    assert (tmp_path / "summary.json").exists() and (tmp_path / "summary.md").exists()
    with pytest.raises(KeyboardInterrupt):  # another evaluation into the same directory, cut short
        _run({"toy": examples}, Counting(fakes.scripted(fakes.direct_reply), fail_at=1), tmp_path, "k2")
    assert not list(tmp_path.glob("summary.*"))  # the first run's figures are not left to pass for this one's


def test_run_from_config_with_objects_given_does_not_resume_unless_asked(tmp_path: Path, qa_file, fakes) -> None:
    """The settings key cannot tell two generators (or retrievers) apart: answers an interrupted call with other
    objects left behind are not kept, unless resume=True says they are the same."""
    from searchrl.eval import harness

    qa = qa_file
    cfg = load_config(
        None,
        [
            f"evaluation.datasets=[{qa}]",
            "evaluation.methods=[direct]",
            "evaluation.batch_size=1",
            f"evaluation.output_dir={tmp_path / 'out'}",
        ],
    )
    first = fakes.scripted(lambda ctx: "Rome")

    class Cut:  # answers one question, then is interrupted
        def __init__(self, inner):
            self.inner, self.calls = inner, 0

        def __getattr__(self, name):
            return getattr(self.inner, name)

        def generate(self, prompts, params):
            self.calls += 1
            if self.calls > 1:
                raise KeyboardInterrupt
            return self.inner.generate(prompts, params)

    with pytest.raises(KeyboardInterrupt):
        harness.run_from_config(cfg, generator=Cut(first), resume=True, show=False)
    other = fakes.scripted(lambda ctx: "Oslo")
    fresh = harness.run_from_config(cfg, generator=other, show=False)
    assert [it["prediction"] for it in fresh.items] == ["Oslo"] * 3  # nothing of the first generator's kept
    with pytest.raises(KeyboardInterrupt):
        harness.run_from_config(cfg, generator=Cut(first), resume=True, show=False)
    kept = harness.run_from_config(cfg, generator=other, resume=True, show=False)
    assert [it["prediction"] for it in kept.items] == ["Rome", "Oslo", "Oslo"]  # asked to resume: kept
