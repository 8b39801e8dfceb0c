"""The ``prior`` baseline: training answers alone, no model, no retrieval."""

from __future__ import annotations

import json

import pytest

from searchrl.config import load_config
from searchrl.data.records import QAExample
from searchrl.eval import harness
from searchrl.eval.prior import AnswerPrior, asks_yes_no, wh_word


def qa(question: str, *answers: str) -> QAExample:
    return QAExample(id=question, question=question, answers=list(answers))


TRAIN = [
    qa("Who was born first, Ann Lee or Bo Chan?", "Bo Chan"),
    qa("Which film came out earlier, Red Sky or Blue Sea?", "Blue Sea"),
    qa("Who died later, Cy Dorn or Di Este?", "Cy Dorn"),
    qa("Are both films from the same country?", "no"),
    qa("Were Ann Lee and Bo Chan born in the same city?", "no"),
    qa("Is Red Sky older than Blue Sea?", "yes"),
    qa("Where was the director of Red Sky born?", "Paris"),
    qa("Where did Bo Chan die?", "Rome"),
    qa("In which place was Cy Dorn buried? Where?", "Paris"),
    qa("Who is the mother of Di Este?", "Eve Fay"),
]


def test_the_prior_answers_by_form_from_the_training_answers_only() -> None:
    prior = AnswerPrior.fit(TRAIN)
    assert prior.answer("Which film has the director born later, Up High or Down Low?") == "Down Low"  # 2 of 3
    assert prior.answer("Did Up High and Down Low come out in the same year?") == "no"  # 2 of 3
    assert prior.answer("Where was Eve Fay born?") == "Paris"  # the commonest "where" answer
    assert prior.answer("Who is the father of Up High's director?") == "Eve Fay"  # the only "who" answer
    assert prior.answer("When did Eve Fay die?") == "Paris"  # no "when" answer: the commonest open answer


def test_ties_go_to_the_first_option_and_to_yes() -> None:
    prior = AnswerPrior.fit([TRAIN[0], TRAIN[2], TRAIN[3], TRAIN[5]])
    assert prior.answer("Who is older, Al or Bea?") == "Al"
    assert prior.answer("Is Al older than Bea?") == "yes"
    assert prior.answer("Who is Al's mother?") is None  # no open answers to draw on


def test_the_form_of_a_question_is_read_from_its_words_alone() -> None:
    assert asks_yes_no("Were they born in the same city?") and not asks_yes_no("Where were they born?")
    assert wh_word("Whose mother is Eve Fay?") == "who" and wh_word("In which year?") == "which"


def test_a_prior_without_training_answers_names_the_setting() -> None:
    with pytest.raises(ValueError, match="evaluation.prior_data"):
        AnswerPrior.fit([qa("Who?")])


def _write(path, rows) -> str:
    path.write_text("".join(json.dumps(e.to_flashrag()) + "\n" for e in rows))
    return str(path)


def test_the_prior_alone_loads_no_model_and_is_scored_like_any_method(tmp_path, monkeypatch) -> None:
    def no_model(cfg):
        raise AssertionError("the prior must not load the policy")

    monkeypatch.setattr(harness, "eval_generator", no_model)
    held_out = [qa("Who was born later, Al or Bea?", "Bea"), qa("Is Al older than Bea?", "yes")]
    cfg = load_config(
        None,
        [
            f"evaluation.datasets=[{_write(tmp_path / 'heldout.jsonl', held_out)}]",
            f"evaluation.prior_data={_write(tmp_path / 'train.jsonl', TRAIN)}",
            "evaluation.methods=[prior]",
            "evaluation.metrics=[em]",
            f"evaluation.output_dir={tmp_path / 'out'}",
        ],
    )
    result = harness.run_from_config(cfg)
    preds = [json.loads(line) for line in (tmp_path / "out" / "predictions" / "heldout__prior.jsonl").open()]
    assert [p["prediction"] for p in preds] == ["Bea", "no"]
    assert [p["metrics"]["em"] for p in preds] == [1.0, 0.0]
    assert {r["method"] for r in result.rows} == {"prior"}


def test_the_prior_without_its_data_fails_before_any_model_loads(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(harness, "eval_generator", lambda cfg: pytest.fail("loaded the policy"))
    held_out = _write(tmp_path / "heldout.jsonl", [qa("Is Al older than Bea?", "yes")])
    cfg = load_config(None, [f"evaluation.datasets=[{held_out}]", "evaluation.methods=[prior, direct]"])
    with pytest.raises(ValueError, match="evaluation.prior_data"):
        harness.run_from_config(cfg)


def test_a_yes_no_question_counts_its_yes_or_no_gold_whichever_comes_first() -> None:
    prior = AnswerPrior.fit([qa("Did Al win?", "He did", "yes"), qa("Did Bea win?", "no"), qa("Is Al tall?", "yes")])
    assert prior.yes_no == {"yes": 2, "no": 1}
