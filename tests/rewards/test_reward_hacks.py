"""Reward hacking: scripted responses a policy under RL could find, scored by each recipe's reward as it configures
it, against what the paper intends.

Where the paper's reward (or the authors' code, where the paper is silent) pays for a hack, the test pins that the
recipe still does so, since the recipe reproduces the paper (docs/recipes.md, "Reward hacks the papers' rewards
allow"); where our reward departs from the paper or had a loophole the paper did not intend, the test pins the fix.
"""

from __future__ import annotations

import pytest

from searchrl.config import load_config
from searchrl.data.records import QAExample
from searchrl.generation.fake import ByteTokenizer, ScriptedGenerator
from searchrl.protocols import get_protocol
from searchrl.retrieval.base import Hit
from searchrl.rewards.components import RewardComposer, RewardInput, format_reward

DOC = "Paris is the capital of France."


class Docs:
    def search(self, queries: list[str], k: int) -> list[list[Hit]]:
        return [[Hit(f"{q}-1", "France", DOC, 1.0)] for q in queries]


class Reader:
    """A reader that answers with the evidence's first line: it says what the evidence says."""

    def __call__(self, questions: list[str], evidences: list[str]) -> list[str]:
        return [e.strip().splitlines()[0] for e in evidences]


def observation(protocol, query: str = "q") -> str:
    return protocol.render_observation([query], [[Hit("1", "France", DOC, 1.0)]])


def scored(recipe: str, responses: list, golds=("Paris",), question="What is the capital of France?", **kw):
    """Each response (a string, or a function of the protocol) scored by the recipe's reward, as one group."""
    cfg = load_config(recipe)
    protocol = get_protocol(cfg.rollout.protocol, **(cfg.rollout.options or {}))
    texts = [r(protocol) if callable(r) else r for r in responses]
    inputs = [RewardInput.from_response(protocol, question, list(golds), t, group_id=0) for t in texts]
    return RewardComposer.from_config(cfg.reward, reader=Reader())(inputs), inputs


# ------------------------------------------------------------------------------------------- Search-R1, RAG-R1


@pytest.mark.parametrize("recipe", ["search_r1_ppo", "search_r1_grpo", "rag_r1"])
def test_exact_match_pays_no_hedge(recipe: str) -> None:
    """EM (Search-R1 Eq. 3, RAG-R1): a list of candidates, "A or B", "yes no", the question repeated or an empty
    answer score 0; tags in another case or spacing are no answer. An answer written inside <think> is scored, as
    the authors' regex scores it (it reads every <answer> block); generation stops at </answer>, so nothing follows."""
    t = "<think> r </think>\n"
    result, _ = scored(
        recipe,
        [
            t + "<answer> Paris </answer>",
            t + "<answer> Paris, London, Rome </answer>",
            t + "<answer> Paris or London </answer>",
            t + "<answer> What is the capital of France? </answer>",
            t + "<answer>  </answer>",
            t + "<Answer> Paris </Answer>",
            t + "< answer > Paris </ answer >",
            "<think> so <answer> Paris </answer>",
        ],
    )
    assert result.total == [1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0]
    assert scored(recipe, [t + "<answer> yes no </answer>"] * 2, golds=("yes",))[0].total == [0.0, 0.0]


# ------------------------------------------------------------------------------------------------ R1-Searcher


def _engine_rollout(turns: list[str], max_searches: int = 8):
    protocol = get_protocol("r1_searcher")
    seen = {"n": -1}

    def script(context: str) -> str:
        seen["n"] += 1
        return turns[min(seen["n"], len(turns) - 1)]

    from searchrl.rollout.engine import RolloutEngine, RolloutLimits

    cfg = load_config("r1_searcher_stage1").rollout
    limits = RolloutLimits(
        max_turns=cfg.max_turns, max_searches=max_searches, force_answer=cfg.force_answer, max_total_tokens=8000
    )
    gen = ScriptedGenerator(ByteTokenizer(), script, eos=True)
    (traj,) = RolloutEngine(gen, Docs(), protocol, limits).run([QAExample("0", "Capital?", ["Paris"])], seed=0)
    return RewardInput.from_trajectory(protocol, traj, gen.tokenizer), traj


def test_r1_searcher_stage1_pays_the_retrieval_reward_for_any_search_run() -> None:
    """Eq. 1 pays 0.5 when "n >= 1" retrievals: a one-letter query or the same query twice earns it (the paper's
    rule; stage 1 teaches the model to call the tool at all). A call with no query (an invalid action, answered with
    feedback) or one past the budget is never run and earns nothing, and fails the format check."""
    answer = " ok.</think>\n<answer> Paris </answer>"
    query = "<|begin_of_query|> {}<|end_of_query|>"
    stage1 = RewardComposer.from_config(load_config("r1_searcher_stage1").reward)
    cases = {
        "trivial": ([query.format("a"), answer], None, 1, 1.0),
        "repeated": ([query.format("x"), query.format("x"), answer], None, 2, 1.0),
        "empty": ([query.format(" "), answer], None, 0, 0.0),
        "over budget": ([query.format("x"), query.format("y")], 1, 1, 0.5),  # the 2nd call ends the sample
    }
    for name, (turns, budget, n, total) in cases.items():
        inp, traj = _engine_rollout(turns, max_searches=budget or 8)
        assert (inp.n_searches, stage1([inp]).total) == (n, [total]), name
        if name == "empty":
            assert traj.turns[0].action == "invalid" and not inp.report.ok


def test_r1_searcher_format_takes_an_empty_think_as_the_authors_code() -> None:
    """Rule 1 puts the reasoning inside <think>; the authors' code counts the tags only, and so does the check: an
    empty think block (the pre-filled <think>, then </think> at once) is well formed."""
    result, inputs = scored("r1_searcher_stage1", ["</think>\n<answer> Paris </answer>"])
    assert inputs[0].report.ok and result.total == [0.5]


def test_r1_searcher_stage2_f1_punishes_hedges() -> None:
    """Stage 2's word-level F1 (Eq. 4) pays a list by its precision (two candidates: 2/3, more than a committed guess
    between them earns on average, as F1 does); its yes/no rule (the authors' F1) pays "yes no" nothing; over 10
    words fails the format (-2)."""
    result, _ = scored(
        "r1_searcher_stage2",
        [
            "</think>\n<answer> Paris, London, Rome </answer>",
            "</think>\n<answer> London Paris </answer>",
            "</think>\n<answer> Paris" + " x" * 10 + " </answer>",
        ],
    )
    assert result.total == pytest.approx([0.5, 2 / 3, -2 + 1 / 6])  # F1 of 11 words, one right: 2 / 12
    assert scored("r1_searcher_stage2", ["</think><answer> yes no </answer>"], golds=("yes",))[0].total == [0.0]


# ---------------------------------------------------------------------------------------------- R1-Searcher++


def test_r1_searcher_pp_cover_em_pays_hedges_within_ten_words() -> None:
    """Eq. 4 is cover-EM with the paper's own guard, the 10-word cap: within it a list of candidates, "A or B" and
    "yes no" (against either gold) are correct, as the paper states the reward. Over 10 words is wrong."""
    boxed = ["\\boxed{Paris, London, Rome}", "\\boxed{London or Paris}", "\\boxed{Paris" + " x" * 10 + "}"]
    assert [scored("r1_searcher_pp", [b])[0].components["answer"] for b in boxed] == [[1.0], [1.0], [0.0]]
    for gold in ("yes", "no"):
        assert scored("r1_searcher_pp", ["\\boxed{yes no}"], golds=(gold,))[0].components["answer"] == [1.0]


def test_r1_searcher_pp_group_reward_goes_to_correct_rollouts_only_whatever_their_format() -> None:
    """Eq. 5 pays the fewest-retrievals bonus only where R_answer = 1: a wrong answer from internal knowledge alone
    (0 searches) gets none. Eq. 7 sums the three rewards without gating, so a correct rollout that broke the format
    (documents it wrote itself instead of searching) still takes the bonus: -2 + 1 + 2, as much as a well-formed
    correct rollout that searched twice (0 + 1 + 0)."""
    internal = "<|begin_internal_answer|>I know it.<|end_internal_answer|>"
    search = "<|begin_external_search|>{0}<|end_external_search|>"

    def searches(n: int, answer: str):
        return lambda p: "".join(search.format(q) + observation(p, q) for q in "abcd"[:n]) + f"\\boxed{{{answer}}}"

    responses = [
        internal + "\\boxed{London}",
        searches(2, "Paris"),
        "<|begin_search_result|>Paris<|end_search_result|> \\boxed{Paris}",
        searches(4, "Lyon"),
    ]
    result, inputs = scored("r1_searcher_pp", responses)  # t = (0, 2, 0, 4): sigma^2 = 2.75, bonus min(5.5, 2)
    assert [i.n_searches for i in inputs] == [0, 2, 0, 4] and not inputs[2].report.ok
    assert result.components["group"] == [0.0, 0.0, 2.0, 0.0]
    assert result.total == [0.0, 1.0, 1.0, 0.0]


# --------------------------------------------------------------------------------------------------------- R-Search


def test_r_search_evidence_reward_reads_what_the_policy_wrote() -> None:
    """Eq. 4 scores the reader's answer from the evidence block alone, and nothing checks the block against the
    observations: the policy's own answer as the evidence earns the full evidence reward (2.4 in all), as the paper
    states it. Evidence copied from the question gives the reader nothing. Evidence written without any search
    scores 0 (the authors' code; ``require_search``), and documents inside an evidence block that spans a search are
    left out of what the reader sees (the code would show them: docs/recipes.md); such a block is not well-formatted
    evidence either, so it loses g_e."""

    def searched(evidence: str):
        return lambda p: "I search. <search> capital </search>" + observation(p, "capital") + evidence

    question = "What is the capital of France?"
    result, inputs = scored(
        "r_search",
        [
            searched("<original_evidence>Paris</original_evidence><answer> Paris </answer>"),
            searched(f"<original_evidence>{question}</original_evidence><answer> Paris </answer>"),
            "<original_evidence>Paris</original_evidence><answer> Paris </answer>",
            lambda p: (
                "<original_evidence>\n"
                + searched("</original_evidence><answer> Paris </answer>")(p).replace("I search. ", "")
            ),
        ],
        question=question,
    )
    assert result.components["evidence"] == [1.0, 0.0, 0.0, 0.0]
    assert result.total == pytest.approx([2.4, 1.4, 1.4, 1.2])
    assert DOC not in inputs[3].evidence


def test_r_search_token_f1_pays_yes_no_more_than_a_guess() -> None:
    """R-Search's answer reward is the authors' plain token F1 (no yes/no rule): "yes no" earns 2/3 against either
    gold, more than a committed guess earns on average (1/2). ``metric: f1`` (HotpotQA's rule) pays it 0."""
    for gold in ("yes", "no"):
        result, _ = scored("r_search", ["<answer> yes no </answer>"], golds=(gold,))
        assert result.components["answer"] == pytest.approx([2 / 3])
    _, inputs = scored("r_search", ["<answer> yes no </answer>"], golds=("yes",))
    from searchrl.rewards.components import answer_reward

    assert answer_reward(inputs, metric="f1")[0] == [0.0]


# ---------------------------------------------------------------------------------------------- R1-Searcher stage 1


def test_r1_searcher_stage1_pays_nothing_for_the_format_of_an_empty_answer() -> None:
    """Stage 1 has no answer reward: an empty answer block passing the format would earn the stage's full reward
    without answering. The format check passes it (as the authors' code, which counts tags), the stage-1 reward does
    not (``require_answer``, default true); ``require_answer: false`` gives the code's rule."""
    query = " I search. <|begin_of_query|> capital France<|end_of_query|>"
    result, inputs = scored(
        "r1_searcher_stage1",
        [
            lambda p: query + observation(p, "capital France") + "</think>\n<answer>  </answer>",
            lambda p: query + observation(p, "capital France") + "</think>\n<answer> Paris </answer>",
        ],
    )
    assert [inp.report.ok for inp in inputs] == [True, True] and inputs[0].answer == ""
    assert result.total == [0.5, 1.0]  # the empty answer keeps only the retrieval reward
    assert format_reward(inputs, paper="r1_searcher_stage1", require_answer=False)[0] == [0.5, 0.5]
