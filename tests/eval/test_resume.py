"""An interrupted evaluation resumes: each answered batch is on disk as it finishes, a rerun with the same settings
answers only the rest (the same predictions as one whole run), other settings start afresh, a cut line is redone."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from searchrl.config import load_config
from searchrl.eval.baselines import DirectMethod
from searchrl.eval.harness import evaluate
from searchrl.eval.resume import partial_path, settings_key


class Counting(DirectMethod):
    """DirectMethod that counts the questions it answers and can fail on its n-th batch (an interruption)."""

    def __init__(self, generator, fail_at: int | None = None) -> None:
        super().__init__(generator)
        self.asked: list[str] = []
        self.fail_at = fail_at

    def answer(self, examples):
        if self.fail_at is not None and len(self.asked) >= self.fail_at:
            raise KeyboardInterrupt
        self.asked += [ex.id for ex in examples]
        return super().answer(examples)


def _run(examples, method, out: Path, key: str | None):
    return evaluate(
        {"toy": examples}, {"direct": method}, out, metrics=["em"], batch_size=1, show=False, resume_key=key
    )


def _rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_a_rerun_answers_only_what_the_interrupted_run_left(tmp_path: Path, examples, fakes) -> None:
    whole = _run(examples, Counting(fakes.scripted(fakes.direct_reply)), tmp_path / "whole", "k1")
    pred = tmp_path / "cut" / "predictions" / "toy__direct.jsonl"
    with pytest.raises(KeyboardInterrupt):
        _run(examples, Counting(fakes.scripted(fakes.direct_reply), fail_at=2), tmp_path / "cut", "k1")
    kept = _rows(partial_path(pred))
    assert kept[0] == {"resume_key": "k1/toy/direct"} and [r["id"] for r in kept[1:]] == ["q1", "q2"]
    again = Counting(fakes.scripted(fakes.direct_reply))
    resumed = _run(examples, again, tmp_path / "cut", "k1")
    assert again.asked == ["q3"] and not partial_path(pred).exists()
    drop = ("latency_s",)  # wall times differ between runs
    strip = [{k: v for k, v in r.items() if k not in drop} for r in _rows(pred)]
    assert strip == [{k: v for k, v in r.items() if k not in drop} for r in _rows(whole.paths["toy__direct"])]
    assert resumed.rows[0]["em"] == whole.rows[0]["em"]


def test_a_cut_line_is_redone_and_other_settings_or_no_key_start_afresh(tmp_path: Path, examples, fakes) -> None:
    pred = tmp_path / "predictions" / "toy__direct.jsonl"
    with pytest.raises(KeyboardInterrupt):
        _run(examples, Counting(fakes.scripted(fakes.direct_reply), fail_at=2), tmp_path, "k1")
    lines = partial_path(pred).read_text().splitlines()
    partial_path(pred).write_text("\n".join([*lines[:-1], lines[-1][:20]]) + "\n")  # the interruption cut q2's line
    cut = Counting(fakes.scripted(fakes.direct_reply), fail_at=1)
    with pytest.raises(KeyboardInterrupt):
        _run(examples, cut, tmp_path, "k1")
    assert cut.asked == ["q2"] and [json.loads(x)["id"] for x in partial_path(pred).read_text().splitlines()[1:]] == [
        "q1",
        "q2",
    ]
    other = Counting(fakes.scripted(fakes.direct_reply))
    _run(examples, other, tmp_path, "k2")  # other settings: every question answered again
    assert other.asked == ["q1", "q2", "q3"] and not partial_path(pred).exists()
    plain = Counting(fakes.scripted(fakes.direct_reply))
    _run(examples, plain, tmp_path / "plain", None)  # no key: nothing on disk but the predictions
    assert plain.asked == ["q1", "q2", "q3"] and not list((tmp_path / "plain" / "predictions").glob("*.partial.*"))


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


def test_a_sampled_baseline_gives_a_question_the_same_answer_in_any_batch(examples) -> None:
    """Each prompt samples from its own stream: a resumed or re-batched evaluation answers a question alike."""
    from searchrl.generation.fake import ByteTokenizer
    from searchrl.generation.hf import HFGenerator
    from searchrl.testing import tiny_model

    method = DirectMethod(HFGenerator(tiny_model(), ByteTokenizer()), temperature=1.0, max_new_tokens=12, seed=3)
    together = method.answer(examples)
    alone = method.answer(examples[2:])
    assert together[2].raw == alone[0].raw and together[0].raw != together[1].raw
