"""Reward components that ask a model: R-Search's evidence reward (a frozen reader answers from the rollout's
evidence alone) and the LLM judge's verdict. ``searchrl.rewards.components`` registers them beside the others."""

from __future__ import annotations

import zlib
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from searchrl.generation.base import SamplingParams, mix_seed
from searchrl.generation.prompts import render_prompt
from searchrl.rewards.inputs import Reader, RewardInput, Scores
from searchrl.rewards.inputs import mean as _mean
from searchrl.rewards.judge import JudgeVerdict
from searchrl.rewards.metrics import get_metric

# --------------------------------------------------------------------------------------------------- evidence

#: The reader's prompt for the evidence reward: our wording of R-Search's Table 5 (spec 002 §2.3).
READER_PROMPT = (
    "Use only the passages below to answer the question. Reply with the answer alone, no other words.\n\n"
    "Passages:\n{evidence}\n\n"
    "Question: {question}\n"
    "Answer:"
)


def reader_prompt(question: str, evidence: str) -> str:
    return READER_PROMPT.format(question=question.strip(), evidence=evidence.strip())


def evidence_reward(
    inputs: Sequence[RewardInput],
    *,
    reader: Reader | None = None,
    metric: str = "f1",
    normalize: str | None = None,
    require_search: bool = True,
) -> Scores:
    """R-Search's evidence reward: ``metric`` (F1) of ``reader(question, evidence)`` against the golds.

    Only rollouts with a non-empty evidence block are sent to the reader; the others score 0. With
    ``require_search`` (default, as in the authors' code) evidence written without any search also scores 0; the
    paper does not say.
    """
    if reader is None:
        raise ValueError(
            "the evidence reward needs a reader: build the composer with reader=... (see generator_reader)"
        )
    fn = get_metric(metric, normalize=normalize)
    idx = [
        i
        for i, inp in enumerate(inputs)
        if inp.evidence is not None and inp.evidence.strip() and (inp.n_searches > 0 or not require_search)
    ]
    scores = [0.0] * len(inputs)
    if idx:
        answers = reader([inputs[i].question for i in idx], [inputs[i].evidence or "" for i in idx])
        if len(answers) != len(idx):
            raise ValueError(f"the evidence reader returned {len(answers)} answers for {len(idx)} questions")
        for i, ans in zip(idx, answers, strict=True):
            scores[i] = fn(ans, inputs[i].golds)
    metrics = {
        "scored_rate": len(idx) / len(inputs) if inputs else 0.0,
        "mean_scored": _mean([scores[i] for i in idx]),
    }
    return scores, metrics


def generator_reader(
    generator: Any,
    tokenizer: Any,
    *,
    max_new_tokens: int = 32,
    temperature: float = 0.0,
    top_p: float = 1.0,
    seed: int | None = None,
) -> Reader:
    """A :data:`Reader` from any ``searchrl.generation`` backend: :data:`READER_PROMPT`, first line kept; greedy by
    default (R-Search's code samples at temperature 0.1, top-p 0.9, up to 512 tokens: ``model.reader_*``).

    Chat models get the prompt as one user message through the tokenizer's chat template; others get it raw.
    ``seed`` (a run's ``training.seed``): each prompt samples from its own stream, a hash of the seed and the prompt,
    so a reading depends on neither its batch nor the step; None draws afresh.
    """
    params = SamplingParams(max_new_tokens=max_new_tokens, temperature=temperature, top_p=top_p, seed=seed)

    def encode(text: str) -> list[int]:
        return list(
            tokenizer.encode(render_prompt(tokenizer, [{"role": "user", "content": text}]), add_special_tokens=False)
        )

    def read(questions: list[str], evidences: list[str]) -> list[str]:
        texts = [reader_prompt(q, e) for q, e in zip(questions, evidences, strict=True)]
        rows = None if seed is None else tuple(mix_seed(seed, zlib.crc32(t.encode())) for t in texts)
        completions = generator.generate([encode(t) for t in texts], replace(params, row_seeds=rows))
        return [(c.text.strip().splitlines() or [""])[0].strip() for c in completions]

    return read


# --------------------------------------------------------------------------------------------------- judge


def judge_reward(inputs: Sequence[RewardInput], *, judge: Any = None, unparsed_value: float = 0.0) -> Scores:
    """1 if the judge accepts the answer, 0 if not; an unreadable reply scores ``unparsed_value`` and is counted.

    ``judge`` is an :class:`searchrl.rewards.judge.LLMJudge` (anything with its ``judge_many``).
    """
    if judge is None:
        raise ValueError("the judge reward needs a judge: build the composer with judge=LLMJudge(url, model)")
    verdicts: list[JudgeVerdict] = (
        judge.judge_many([i.question for i in inputs], [list(i.golds) for i in inputs], [i.answer for i in inputs])
        if inputs
        else []
    )
    scores = [unparsed_value if v.correct is None else float(v.correct) for v in verdicts]
    parsed = [v.correct for v in verdicts if v.correct is not None]
    metrics = {"accuracy": _mean([float(p) for p in parsed]), "unparsed": float(len(verdicts) - len(parsed))}
    return scores, metrics
