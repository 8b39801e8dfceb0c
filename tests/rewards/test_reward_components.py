"""Reward components with the papers' values, the group reward on hand-computed groups, and the composer."""

from __future__ import annotations

import pytest

from searchrl.config import RewardComponent, RunConfig, load_config
from searchrl.generation.fake import ByteTokenizer, ScriptedGenerator
from searchrl.protocols import get_protocol
from searchrl.protocols.base import Answer, FormatReport, Invalid, Protocol
from searchrl.rewards.components import (
    RewardComposer,
    RewardInput,
    answer_recall_reward,
    answer_reward,
    evidence_reward,
    format_reward,
    generator_reader,
    group_reward,
    hop_reward,
    judge_reward,
    retrieval_reward,
)
from searchrl.rewards.judge import JudgeVerdict


def make(answer="Paris", golds=("Paris",), n=0, ok=True, group=None, evidence=None, question="q?", **extra):
    report = FormatReport(ok=ok, has_answer=answer is not None, answer=answer, n_searches=n, extra=extra)
    return RewardInput(question, list(golds), "response", answer, report, n, group, evidence)


# --------------------------------------------------------------------------------------------------- answer


def test_answer_metrics_and_missing():
    inputs = [make("Paris"), make("the city of Paris"), make(None), make("Lyon")]
    assert answer_reward(inputs, metric="em")[0] == [1.0, 0.0, 0.0, 0.0]
    assert answer_reward(inputs, metric="cover_em")[0] == [1.0, 1.0, 0.0, 0.0]
    scores, metrics = answer_reward(inputs, metric="f1")
    assert scores == pytest.approx([1.0, 0.5, 0.0, 0.0])
    assert metrics == {"f1": pytest.approx(0.375), "missing_rate": 0.25}


def test_answer_ten_word_cap_of_r1_searcher_pp():
    ten = "Paris " + " ".join(["x"] * 9)  # 10 words: allowed
    eleven = ten + " y"  # 11 words: scores 0 even though it covers the gold
    scores, metrics = answer_reward([make(ten), make(eleven)], metric="cover_em", max_words=10)
    assert scores == [1.0, 0.0]
    assert metrics["too_long_rate"] == 0.5
    assert metrics["cover_em"] == 1.0  # the uncapped metric is still reported


def test_answer_incorrect_value_for_the_plus_minus_one_ablation():
    scores, _ = answer_reward([make("Paris"), make("Lyon"), make(None)], metric="em", incorrect=-1.0)
    assert scores == [1.0, -1.0, -1.0]


def test_answer_uses_r1_normalisation_when_asked():
    inp = [make("Miller v. California", golds=["Miller v._California"])]
    assert answer_reward(inp, metric="f1")[0] == pytest.approx([0.4])
    assert answer_reward(inp, metric="f1", normalize="r1")[0] == [1.0]


# --------------------------------------------------------------------------------------------------- format


@pytest.mark.parametrize(
    ("params", "ok_score", "bad_score"),
    [
        ({"paper": "r1_searcher_stage1"}, 0.5, 0.0),  # spec 001 §3.1 Eq. 2
        ({"paper": "r1_searcher_stage2"}, 0.0, -2.0),  # spec 001 §3.2 Eq. 3 (paper)
        ({"paper": "r1_searcher_stage2", "penalty": -1.0}, 0.0, -1.0),  # the authors' Llama code
        ({"paper": "r1_searcher_pp"}, 0.0, -2.0),  # spec 000 §3.1 Eq. 3
        ({"paper": "tool_call"}, 0.0, -1.0),  # ours [O]
        ({"paper": "tool_call", "penalty": -0.5}, 0.0, -0.5),
    ],
)
def test_binary_format_rewards(params, ok_score, bad_score):
    scores, metrics = format_reward([make(ok=True), make(ok=False)], **params)
    assert scores == [ok_score, bad_score]
    assert metrics["ok_rate"] == 0.5


@pytest.mark.parametrize(
    ("n", "answer_ok", "evidence_ok", "evidence", "paper_value", "code_value"),
    [
        (2, True, True, "facts", 0.4, 0.4),  # searched, one evidence block, one answer
        (2, True, False, None, 0.2, 0.2),  # searched but no (or a duplicated) evidence block
        (2, False, True, "facts", 0.2, 0.2),  # answer badly formatted
        (2, False, False, None, 0.0, 0.0),
        (0, True, False, None, 0.4, 0.4),  # no search, evidence rightly omitted: gamma_e granted
        (0, False, False, None, 0.2, 0.2),
        (0, True, True, "made-up facts", 0.4, 0.2),  # evidence without search: Eq. 5 pays, the code does not
    ],
)
def test_r_search_format_eq5(n, answer_ok, evidence_ok, evidence, paper_value, code_value):
    inp = [make(n=n, evidence=evidence, answer_ok=answer_ok, evidence_ok=evidence_ok)]
    assert format_reward(inp, paper="r_search")[0] == pytest.approx([paper_value])
    assert format_reward(inp, paper="r_search", evidence_without_search="code")[0] == pytest.approx([code_value])


_RS_SEARCH = '<search> q </search>\n\n<observation>(Title: "P") Paris is the capital.\n</observation>\n\n'


@pytest.mark.parametrize(
    ("response", "authors_value"),
    [
        # The values are what R-Search's reward code (verl/utils/reward_score/qa_f1.py, compute_score_f1) pays in
        # format reward for these responses after its prompt: 0.2 per well-formed answer and per evidence flag.
        ("I know it. <answer> Paris </answer>", 0.4),
        ("<original_evidence> Paris is the capital </original_evidence><answer> Paris </answer>", 0.2),
        ("<original_evidence>  </original_evidence><answer> Paris </answer>", 0.2),  # an empty block counts too
        ("<original_evidence> a <original_evidence> b </original_evidence><answer> Paris </answer>", 0.2),
        ("<answer> Paris </answer><original_evidence> late </original_evidence>", 0.2),
        ("<original_evidence> unclosed <answer> Paris </answer>", 0.4),  # a lone tag is no evidence block
        ("</original_evidence><answer> Paris </answer>", 0.4),
        (_RS_SEARCH + "<original_evidence> Paris is the capital </original_evidence><answer> Paris </answer>", 0.4),
        (_RS_SEARCH + "<original_evidence> unclosed <answer> Paris </answer>", 0.2),
        (_RS_SEARCH + "<original_evidence>  </original_evidence><answer> Paris </answer>", 0.2),
        (
            _RS_SEARCH + "<original_evidence> a </original_evidence><original_evidence> b </original_evidence>"
            "<answer> Paris </answer>",
            0.2,
        ),
    ],
)
def test_r_search_code_mode_pays_what_the_authors_code_pays(response, authors_value):
    inp = RewardInput.from_response(get_protocol("r_search"), "q", ["Paris"], response)
    assert format_reward([inp], paper="r_search", evidence_without_search="code")[0] == pytest.approx([authors_value])


def test_r_search_invalid_action_feedback_changes_neither_format_nor_answer():
    """The authors' reward counts the `<answer> and </answer>` of their inserted invalid-action message (γ_a lost,
    an unanswered rollout scored as "and"); ours reads only the policy's text (docs/recipes.md, R-Search table)."""
    p = get_protocol("r_search")
    feedback = p.invalid_feedback(Invalid("no_action"))
    assert "<answer> and </answer>" in feedback and "<original_evidence> and </original_evidence>" in feedback
    answered = RewardInput.from_response(
        p,
        "q",
        ["Paris"],
        "thinking" + feedback + _RS_SEARCH + "<original_evidence> e </original_evidence><answer> Paris </answer>",
    )
    assert answered.answer == "Paris" and answered.evidence == "e"
    assert format_reward([answered], paper="r_search")[0] == pytest.approx([0.4])
    unanswered = RewardInput.from_response(p, "q", ["Romeo and Juliet"], "thinking" + feedback + "more thinking")
    assert unanswered.answer is None and unanswered.evidence is None
    assert format_reward([unanswered], paper="r_search")[0] == pytest.approx([0.2])  # gamma_e: no search


def test_r_search_format_gammas_and_missing_flags():
    inp = [make(n=1, answer_ok=True, evidence_ok=True)]
    assert format_reward(inp, paper="r_search", gamma_e=0.3, gamma_a=0.1)[0] == pytest.approx([0.4])
    assert format_reward(inp, paper="r_search", gamma=0.5)[0] == pytest.approx([1.0])
    with pytest.raises(ValueError, match="extra\\['answer_ok'\\]"):
        format_reward([make(n=1)], paper="r_search")


def test_a_protocol_module_owns_its_format_reward():
    """A new protocol registers its paper's format reward in its own module; the reward component needs no edit."""
    from searchrl.protocols.base import FORMAT_SCHEMES, format_scheme

    @format_scheme("letters_test")
    def letters(report, n_searches, evidence, *, per_search: float = 1.0) -> float:
        return per_search * n_searches if report.ok else -1.0

    try:
        scores, metrics = format_reward(
            [make(n=2), make(n=3, ok=False, answer_ok=True)], paper="letters_test", per_search=0.5
        )
        assert scores == [1.0, -1.0] and metrics == {"ok_rate": 0.5, "answer_ok_rate": 0.5}
        with pytest.raises(ValueError, match=r"unknown param\(s\) \['per_serach'\]; valid params: per_search"):
            RewardComposer([RewardComponent(name="format", params={"paper": "letters_test", "per_serach": 1})])
    finally:
        FORMAT_SCHEMES.pop("letters_test")
    assert {"r1_searcher_stage1", "r1_searcher_stage2", "r1_searcher_pp", "r_search"} <= set(FORMAT_SCHEMES)


def test_format_rejects_papers_without_one():
    with pytest.raises(ValueError, match="Search-R1 and RAG-R1 have no format reward"):
        format_reward([], paper="search_r1")
    with pytest.raises(ValueError, match="must be one of"):
        format_reward([], paper="r1searcher")


# --------------------------------------------------------------------------------------------------- retrieval


def test_retrieval_reward_stage1_rule():
    scores, metrics = retrieval_reward([make(n=0), make(n=1), make(n=3)])
    assert scores == [0.0, 0.5, 0.5]
    assert metrics["searched_rate"] == pytest.approx(2 / 3)


def test_answer_recall_pays_for_documents_that_hold_the_gold():
    from dataclasses import replace

    docs = ["Doc 1 Anna was born in Paris.", "Doc 1 Parisian cafes", "", "Doc 1 nothing"]
    inputs = [replace(make(n=1, golds=("Paris", "Lutetia")), retrieved_text=d) for d in docs]
    scores, metrics = answer_recall_reward(inputs, value=0.5)
    assert scores == [0.5, 0.0, 0.0, 0.0]  # whole words: "Parisian" is not "Paris"
    assert metrics["answer_recall_rate"] == 0.25
    with pytest.raises(ValueError, match="retrieved_text"):
        answer_recall_reward([make(n=1)])


def test_trajectories_give_their_retrieved_text():
    from searchrl.rollout.trajectory import Trajectory, Turn

    t = Trajectory("u", "g", "q", "Where?", ["Paris"], [1], metadata={"prompt_docs": ["Doc A"]})
    t.turns = [
        Turn(text="x", action="search", finish_reason="stop", queries=["q1"], observation="<i>Doc B Paris</i>"),
        Turn(text="y", action="invalid", finish_reason="stop", observation="feedback"),
    ]
    assert t.retrieved_text == "Doc A\n<i>Doc B Paris</i>"


# --------------------------------------------------------------------------------------------------- hops

CHAIN = [{"answer": "Aesfern Krezher"}, {"answer": "1920"}]  # a bridge question; the last hop is the gold


def hop_input(policy_text, chain=CHAIN, golds=("1920",)):
    report = FormatReport(True, False, None, 0)
    question = "In which year was the director of Soukarn born?"
    return RewardInput(question, list(golds), "", None, report, policy_text=policy_text, metadata={"chain": chain})


def test_hop_reward_scores_intermediate_answers_in_the_policy_text():
    right = hop_input("Soukarn was directed by Aesfern Krezher, so #1 is Aesfern Krezher. <answer> 1875 </answer>")
    wrong = hop_input("Soukarn was directed by Zhylsik Pictures, so #1 is Zhylsik. <answer> 1920 </answer>")
    partial = hop_input("so #1 is Aesfern Krezherson")  # not the whole words
    scores, metrics = hop_reward([right, wrong, partial])
    assert scores == [1.0, 0.0, 0.0]  # the final answer (a gold) is the answer component's business
    assert metrics == {"hop_rate": pytest.approx(1 / 3), "with_hops_rate": 1.0}


def test_hop_reward_counts_each_intermediate_hop_and_skips_single_hop_questions():
    three = [{"answer": "A. Thervei"}, {"answer": "Lumdexa Symvir"}, {"answer": "Faxnoumza"}]
    half = hop_input("so #1 is a thervei; then the spouse is unknown", chain=three, golds=["Faxnoumza"])
    single = hop_input("anything", chain=[{"answer": "1920"}])
    scores, metrics = hop_reward([half, single])
    assert scores == [0.5, 0.0]
    assert metrics == {"hop_rate": 0.5, "with_hops_rate": 0.5}


def test_hop_reward_needs_the_chain_and_the_policy_text():
    with pytest.raises(ValueError, match="no metadata.chain"):
        hop_reward([hop_input("x", chain=None)])
    with pytest.raises(ValueError, match="policy_text"):
        hop_reward([RewardInput("q", ["a"], "", None, FormatReport(True, False, None, 0), metadata={"chain": CHAIN})])


def test_trainer_reward_fn_passes_policy_text_and_metadata_to_hops():
    from searchrl.protocols import get_protocol
    from searchrl.rl.trainer import default_reward_fn
    from searchrl.rollout.trajectory import Trajectory, Turn

    cfg = RunConfig.model_validate({"reward": {"components": [{"name": "hops"}]}})
    tok = ByteTokenizer()
    policy = "<search> Soukarn director </search>"
    obs = "<information>Soukarn was directed by Aesfern Krezher.</information>"
    t = Trajectory(
        "q#0",
        "q",
        "q",
        "In which year was the director of Soukarn born?",
        ["1920"],
        [],
        turns=[Turn(policy, "search", "stop", observation=obs)],
        metadata={"chain": CHAIN},
    )
    t.append(tok.encode(policy + obs), sampled=False)
    fn = default_reward_fn(cfg, get_protocol("search_r1"), tok)
    assert fn([t])[0] == [0.0]  # the name is only in the inserted document, not in the policy's text
    t.turns[0].text = "<think> directed by Aesfern Krezher </think>" + policy
    assert fn([t])[0] == [1.0]


# --------------------------------------------------------------------------------------------------- group


def group(*rows, gid=0):
    """rows: (answer, n_searches); gold is Paris."""
    return [make(a, n=n, group=gid) for a, n in rows]


def test_group_none_correct():
    scores, metrics = group_reward(group(("Lyon", 0), ("Nice", 1), (None, 2)))
    assert scores == [0.0, 0.0, 0.0]
    assert metrics["bonus_rate"] == 0.0


def test_group_one_correct():
    rows = group(("Paris", 1), ("Lyon", 0), ("Nice", 3))
    # t = (1, 0, 3): population variance over all = 14/9, 2 * 14/9 = 3.11 -> capped at eta = 2.
    assert group_reward(rows)[0] == [2.0, 0.0, 0.0]
    # Over the correct rollouts only, one rollout has sigma = 0: no bonus.
    assert group_reward(rows, sigma_over="correct")[0] == [0.0, 0.0, 0.0]


def test_group_ties_for_fewest_searches():
    rows = group(("Paris", 1), ("Paris", 1), ("Paris", 2), ("Lyon", 0))
    # all: t = (1, 1, 2, 0), mean 1, variance 0.5 -> 2 * 0.5 = 1.0 to both tied correct rollouts.
    assert group_reward(rows)[0] == pytest.approx([1.0, 1.0, 0.0, 0.0])
    # correct only: t = (1, 1, 2), variance 2/9 -> 4/9.
    assert group_reward(rows, sigma_over="correct")[0] == pytest.approx([4 / 9, 4 / 9, 0.0, 0.0])
    # sample std over all: variance 2/3 -> 4/3.
    assert group_reward(rows, ddof=1)[0] == pytest.approx([4 / 3, 4 / 3, 0.0, 0.0])


def test_group_sigma_zero():
    scores, metrics = group_reward(group(("Paris", 2), ("Paris", 2), ("Lyon", 2)))
    assert scores == [0.0, 0.0, 0.0]
    assert metrics["sigma_mean"] == 0.0


def test_group_eta_and_scale():
    rows = group(("Paris", 0), ("Lyon", 4))  # variance 4
    assert group_reward(rows)[0] == [2.0, 0.0]
    assert group_reward(rows, eta=100.0)[0] == [8.0, 0.0]
    assert group_reward(rows, eta=100.0, scale=1.0)[0] == [4.0, 0.0]


def test_groups_are_independent_and_may_interleave():
    a = group(("Paris", 1), ("Lyon", 3), gid="a")  # variance 1 -> bonus 2
    b = group(("Paris", 2), ("Paris", 2), gid="b")  # sigma 0 -> no bonus
    scores, metrics = group_reward([a[0], b[0], a[1], b[1]])
    assert scores == [2.0, 0.0, 0.0, 0.0]
    assert metrics["sigma_mean"] == pytest.approx(0.5)


def test_group_correctness_follows_the_answer_rule():
    long_answer = "Paris " + " ".join(["x"] * 10)  # 11 words: not correct under the 10-word cap
    rows = [make(long_answer, n=0, group=0), make("Paris", n=2, group=0)]
    # The long answer would be the fewest-searches correct rollout without the cap.
    assert group_reward(rows)[0] == [0.0, 2.0]
    assert group_reward(rows, max_words=None)[0] == [2.0, 0.0]
    assert group_reward(rows, metric="em", max_words=None)[0] == [0.0, 2.0]


def test_group_needs_group_ids():
    with pytest.raises(ValueError, match="group_id"):
        group_reward([make(group=None)])
    with pytest.raises(ValueError, match="sigma_over"):
        group_reward([], sigma_over="paper")


# --------------------------------------------------------------------------------------------------- evidence


class FakeReader:
    def __init__(self, answers: dict[str, str]):
        self.answers, self.calls = answers, []

    def __call__(self, questions, evidences):
        self.calls.append((list(questions), list(evidences)))
        return [self.answers.get(e, "no idea") for e in evidences]


def test_evidence_reward_scores_the_reader_answer():
    reader = FakeReader({"Paris is the capital.": "Paris", "France info": "the city of Paris"})
    inputs = [
        make(n=1, evidence="Paris is the capital."),
        make(n=2, evidence="France info"),
        make(n=0, evidence="written without search"),  # not scored (authors' code rule)
        make(n=1, evidence="   "),  # empty block: not scored
        make(n=1, evidence=None),
    ]
    scores, metrics = evidence_reward(inputs, reader=reader)
    assert scores == pytest.approx([1.0, 0.5, 0.0, 0.0, 0.0])
    assert reader.calls == [(["q?", "q?"], ["Paris is the capital.", "France info"])]  # one batched call
    assert metrics == {"scored_rate": pytest.approx(0.4), "mean_scored": pytest.approx(0.75)}
    assert evidence_reward(inputs[2:3], reader=FakeReader({}), require_search=False)[1]["scored_rate"] == 1.0


def test_evidence_reward_checks_the_reader():
    with pytest.raises(ValueError, match="needs a reader"):
        evidence_reward([make(n=1, evidence="e")])
    with pytest.raises(ValueError, match="returned 0 answers for 1"):
        evidence_reward([make(n=1, evidence="e")], reader=lambda q, e: [])


def test_generator_reader_with_a_scripted_generator():
    seen = []

    def script(prompt: str) -> str:
        seen.append(prompt)
        return " Paris\nbecause the passage says so"

    reader = generator_reader(ScriptedGenerator(ByteTokenizer(), script), ByteTokenizer())
    assert reader(["Capital of France?"], ["Paris is the capital of France."]) == ["Paris"]
    assert "Paris is the capital of France." in seen[0] and seen[0].rstrip().endswith("Answer:")


def test_generator_reader_decodes_with_the_given_settings():
    """R-Search's reader samples at temperature 0.1, top-p 0.9, up to 512 tokens (model.reader_* in the recipe)."""
    from searchrl.generation.base import Completion

    class Recording:
        def __init__(self):
            self.params = []

        def generate(self, prompts, params):
            self.params.append(params)
            return [Completion([], [], "Paris", "eos") for _ in prompts]

    gen = Recording()
    reader = generator_reader(gen, ByteTokenizer(), max_new_tokens=512, temperature=0.1, top_p=0.9)
    assert reader(["q"], ["e"]) == ["Paris"]
    p = gen.params[0]
    assert (p.max_new_tokens, p.temperature, p.top_p) == (512, 0.1, 0.9)
    greedy = Recording()
    generator_reader(greedy, ByteTokenizer())(["q"], ["e"])
    assert (greedy.params[0].max_new_tokens, greedy.params[0].temperature) == (32, 0.0)


# --------------------------------------------------------------------------------------------------- judge


class FakeJudge:
    def __init__(self, verdicts):
        self.verdicts = verdicts

    def judge_many(self, questions, golds, predictions):
        return [JudgeVerdict(v, str(v), "api") for v in self.verdicts]


def test_judge_reward_counts_unparsed_separately():
    scores, metrics = judge_reward([make(), make(), make()], judge=FakeJudge([True, False, None]))
    assert scores == [1.0, 0.0, 0.0]
    assert metrics == {"accuracy": 0.5, "unparsed": 1.0}
    with pytest.raises(ValueError, match="needs a judge"):
        judge_reward([make()])


# --------------------------------------------------------------------------------------------------- composer


def test_composer_weights_and_per_component_logging():
    comps = [
        RewardComponent(name="answer", weight=1.0, params={"metric": "em"}),
        RewardComponent(name="retrieval", weight=2.0, params={"value": 0.5}),
        RewardComponent(name="format", weight=0.5, params={"paper": "r1_searcher_pp"}),
    ]
    result = RewardComposer(comps)([make("Paris", n=1, ok=True), make("Lyon", n=0, ok=False)])
    assert result.components == {"answer": [1.0, 0.0], "retrieval": [0.5, 0.0], "format": [0.0, -2.0]}
    assert result.total == [1.0 + 2 * 0.5, 0.5 * -2.0]
    m = result.metrics
    assert m["reward/answer"] == 0.5 and m["reward/retrieval"] == 0.25 and m["reward/format"] == -1.0
    assert m["reward/total"] == pytest.approx(0.5)
    assert m["answer/em"] == 0.5 and m["format/ok_rate"] == 0.5 and m["retrieval/searched_rate"] == 0.5


def test_composer_takes_components_as_mappings_as_a_recipe_writes_them():
    inputs = [make("Paris"), make("Paris Hilton")]
    as_dicts = RewardComposer([{"name": "answer", "params": {"metric": "f1"}}, {"name": "retrieval", "weight": 0.5}])
    as_models = RewardComposer(
        [RewardComponent(name="answer", params={"metric": "f1"}), RewardComponent(name="retrieval", weight=0.5)]
    )
    assert as_dicts(inputs) == as_models(inputs) and as_dicts(inputs).components["answer"] == [
        1.0,
        pytest.approx(2 / 3),
    ]
    with pytest.raises(ValueError, match="unknown reward component 'answr'"):
        RewardComposer([{"name": "answr"}])
    with pytest.raises(ValueError, match=r"\['metirc'\] \(did you mean 'metric'\?\)"):
        RewardComposer([{"name": "answer", "params": {"metirc": "f1"}}])


def test_composer_validates_at_construction():
    with pytest.raises(
        ValueError, match=r"unknown param\(s\) \['metirc'\] \(did you mean 'metric'\?\); valid params: metric"
    ):
        RewardComposer([RewardComponent(name="answer", params={"metirc": "em"})])
    with pytest.raises(ValueError, match="unknown metric"):
        RewardComposer([RewardComponent(name="answer", params={"metric": "acc"})])
    with pytest.raises(ValueError, match="listed twice"):
        RewardComposer([RewardComponent(name="answer"), RewardComponent(name="answer")])
    with pytest.raises(ValueError, match="needs a reader"):
        RewardComposer([RewardComponent(name="evidence")])
    with pytest.raises(ValueError, match="is empty"):
        RewardComposer([])


def test_group_inherits_the_answer_rule_in_the_composer():
    comps = [
        RewardComponent(name="answer", params={"metric": "em"}),  # no word cap, exact match
        RewardComponent(name="group", params={"eta": 2.0}),
    ]
    rows = [make("the city of Paris", n=0, group=0), make("Paris", n=2, group=0)]
    result = RewardComposer(comps)(rows)
    # Under em the first rollout is wrong, so the bonus goes to the second (group's own default is cover_em).
    assert result.components["group"] == [0.0, 2.0]
    assert result.total == [0.0, 3.0]


def test_r1_searcher_pp_total_is_format_plus_answer_plus_group():
    comps = [
        RewardComponent(name="format", params={"paper": "r1_searcher_pp"}),
        RewardComponent(name="answer", params={"metric": "cover_em", "max_words": 10}),
        RewardComponent(name="group", params={"eta": 2.0}),
    ]
    rows = [make("Paris", n=1, group=0), make("Paris", n=3, group=0), make("Lyon", n=0, ok=False, group=0)]
    # t = (1, 3, 0): variance 14/9 -> bonus 2 for the 1-search correct rollout.
    assert RewardComposer(comps)(rows).total == [3.0, 1.0, -2.0]


def test_r_search_recipe_composes_eq6():
    cfg = load_config("r_search").reward
    reader = FakeReader({"facts": "Paris"})
    composer = RewardComposer.from_config(cfg, reader=reader)
    rows = [
        # searched, evidence and answer well formed, answer F1 0.5, reader F1 1 -> 0.5 + 1 + 0.4
        make("the Paris", n=1, evidence="facts", answer_ok=True, evidence_ok=True, golds=["Paris France"]),
        # no search, no evidence, correct answer -> 1 + 0 + 0.4 (gamma_e is granted when nothing was retrieved)
        make("Paris", n=0, evidence=None, answer_ok=True, evidence_ok=False),
    ]
    result = composer(rows)
    assert result.components["answer"] == pytest.approx([2 / 3, 1.0])
    assert result.components["evidence"] == pytest.approx([2 / 3, 0.0])
    assert result.total == pytest.approx([2 / 3 + 2 / 3 + 0.4, 1.4])


@pytest.mark.parametrize("recipe", ["search_r1_grpo", "rag_r1", "r1_searcher_stage1", "r1_searcher_stage2"])
def test_paper_recipes_build_a_composer(recipe):
    composer = RewardComposer.from_config(load_config(recipe).reward)
    result = composer([make("Paris", n=1, group=0), make(None, n=0, ok=False, group=0)])
    assert len(result.total) == 2 and "reward/total" in result.metrics


def test_stage1_total_takes_the_three_paper_values():
    composer = RewardComposer.from_config(load_config("r1_searcher_stage1").reward)
    rows = [make(n=0, ok=False), make(n=1, ok=False), make(n=0, ok=True), make(n=2, ok=True)]
    assert composer(rows).total == [0.0, 0.5, 0.5, 1.0]


def test_default_run_config_composes():
    composer = RewardComposer.from_config(RunConfig().reward)
    assert composer.names == ["answer"]


# --------------------------------------------------------------------------------------------------- inputs


class TinyProtocol(Protocol):
    name = "tiny"
    stop_strings = ("</search>",)

    def instruction(self, question):
        return question

    def parse(self, turn_text):
        return Answer(turn_text) if turn_text else Invalid("empty")

    def render_observation(self, queries, hits):
        return ""

    def invalid_feedback(self, action):
        return ""

    def check_format(self, response):
        ans = response.split("<answer>")[-1].split("</answer>")[0] if "<answer>" in response else None
        n = response.count("<search>")
        return FormatReport(
            ok=ans is not None, has_answer=ans is not None, answer=ans, n_searches=n, extra={"evidence": "ev"}
        )


def test_reward_input_from_response():
    inp = RewardInput.from_response(
        TinyProtocol(), "q?", ["Paris"], "<search>x</search><answer>Paris</answer>", group_id=7
    )
    assert (inp.answer, inp.n_searches, inp.evidence, inp.group_id) == ("Paris", 1, "ev", 7)
    assert inp.report.ok
    assert RewardInput.from_response(TinyProtocol(), "q?", ["Paris"], "no answer", n_searches=3).n_searches == 3


# --------------------------------------------------------------------------------------------------- with protocols


def _respond(protocol_name: str, before: str, after: str, query: str = "capital of France") -> tuple:
    from searchrl.protocols import get_protocol
    from searchrl.retrieval.base import Hit

    protocol = get_protocol(protocol_name)
    hits = [[Hit("1", "France", "Paris is the capital of France.", 1.0)]]
    return protocol, before + protocol.render_observation([query], hits) + after


def test_r_search_protocol_reports_feed_the_composer():
    protocol, searched = _respond(
        "r_search",
        "I will search. <search> capital of France </search>",
        "<original_evidence>Paris is the capital of France.</original_evidence>\n<answer> Paris </answer>",
    )
    no_evidence = searched.split("<original_evidence>")[0] + "<answer> Paris </answer>"
    inputs = [RewardInput.from_response(protocol, "Capital of France?", ["Paris"], r) for r in (searched, no_evidence)]
    assert inputs[0].evidence == "Paris is the capital of France." and inputs[0].n_searches == 1
    composer = RewardComposer.from_config(load_config("r_search").reward, reader=FakeReader({}))
    # reader says "no idea" -> evidence 0; first: 1 + 0 + 0.4, second: no evidence block after a search -> 1 + 0.2
    assert composer(inputs).total == pytest.approx([1.4, 1.2])


def test_r1_searcher_protocol_reports_feed_stage_rewards():
    protocol, good = _respond(
        "r1_searcher",
        " I search. <|begin_of_query|> capital France<|end_of_query|>",
        "So Paris.</think>\n<answer> Paris </answer>",
    )
    no_search = " I know it.</think>\n<answer> Paris </answer>"
    broken = " I know it. <answer> Paris </answer>"
    inputs = [RewardInput.from_response(protocol, "q", ["Paris"], r) for r in (good, no_search, broken)]
    stage1 = RewardComposer.from_config(load_config("r1_searcher_stage1").reward)
    assert stage1(inputs).total == [1.0, 0.5, 0.0]
    stage2 = RewardComposer.from_config(load_config("r1_searcher_stage2").reward)
    assert stage2(inputs).total == [1.0, 1.0, -1.0]  # answer F1 1, format penalty -2 on the broken one


def test_your_own_component_from_a_file_or_a_module(tmp_path, monkeypatch):
    # a module as users write them: annotations postponed, a dataclass, a mean that assumes a non-empty batch
    (tmp_path / "my_rewards.py").write_text(
        "from __future__ import annotations\n"
        "from dataclasses import dataclass\n\n"
        "@dataclass\n"
        "class Limit:\n"
        "    words: int\n\n"
        "def brevity(inputs, *, max_words=3):\n"
        "    scores = [float(len((i.answer or '').split()) <= Limit(max_words).words) for i in inputs]\n"
        "    return scores, {'short_rate': sum(scores) / len(scores)}\n"
    )
    monkeypatch.chdir(tmp_path)  # a file is named relative to the working directory
    rows = [make("Paris"), make("the city of Paris"), make(None)]
    comp = RewardComponent(name="my_rewards.py:brevity", weight=2.0, params={"max_words": 2})
    result = RewardComposer([comp, RewardComponent(name="answer")])(rows)
    assert result.components["my_rewards.py:brevity"] == [1.0, 0.0, 1.0]
    assert result.total == [3.0, 0.0, 2.0]  # 2 x brevity + answer EM
    assert result.metrics["my_rewards.py:brevity/short_rate"] == pytest.approx(2 / 3)
    with pytest.raises(ValueError, match=r"unknown param\(s\) \['max_wrds'\].*did you mean 'max_words'"):
        RewardComposer([RewardComponent(name="my_rewards.py:brevity", params={"max_wrds": 2})])
    with pytest.raises(ValueError, match="my_rewards.py has no 'shortness'"):
        RewardComposer([RewardComponent(name="my_rewards.py:shortness")])
    with pytest.raises(ValueError, match="there is no file missing.py"):
        RewardComposer([RewardComponent(name="missing.py:f")])
    with pytest.raises(ValueError, match="no_such_pkg.rewards cannot be loaded: .*PYTHONPATH"):
        RewardComposer([RewardComponent(name="no_such_pkg.rewards:f")])
    # a function that returns the scores alone, or too few of them, is named with the shape it must return
    (tmp_path / "bad_rewards.py").write_text(
        "def scores_only(inputs):\n    return [1.0] * len(inputs)\n\n"
        "def one_short(inputs):\n    return [1.0] * (len(inputs) - 1), {}\n"
    )
    with pytest.raises(
        TypeError, match=r"'bad_rewards.py:scores_only' returned list; return a pair \(scores, metrics"
    ):
        RewardComposer([RewardComponent(name="bad_rewards.py:scores_only")])(rows)
    with pytest.raises(RuntimeError, match="'bad_rewards.py:one_short' returned 2 scores for 3 inputs"):
        RewardComposer([RewardComponent(name="bad_rewards.py:one_short")])(rows)
    # an importable module works the same way
    module = RewardComposer([RewardComponent(name="searchrl.rewards.components:retrieval_reward")])(rows)
    assert module.total == [0.0, 0.0, 0.0]  # none of the rows searched


@pytest.mark.parametrize("value", [float("nan"), float("inf")])
def test_a_component_score_that_is_not_finite_is_an_error_naming_the_component(tmp_path, monkeypatch, value):
    """Trained on, a NaN or inf score would turn the step's advantages, its loss and then the weights into NaN."""
    (tmp_path / "odd.py").write_text(
        "def odd(inputs, *, value=0.0):\n    return [1.0] + [value] * (len(inputs) - 1), {}\n"
    )
    monkeypatch.chdir(tmp_path)
    composer = RewardComposer(
        [RewardComponent(name="answer"), RewardComponent(name="odd.py:odd", params={"value": value})]
    )
    with pytest.raises(
        ValueError, match=rf"component 'odd.py:odd' returned {value} for input 1 \(question 'q2'\)"
    ) as err:
        composer([make(question="q1"), make(question="q2")])
    assert "\n" not in str(err.value) and "return a finite number for every input" in str(err.value)


def test_a_recipe_names_your_component_and_the_checks_read_its_signature(tmp_path, monkeypatch):
    from searchrl.validation import reward_problems

    (tmp_path / "mine.py").write_text("def bonus(inputs, *, value=1.0):\n    return [value] * len(inputs), {}\n")
    monkeypatch.chdir(tmp_path)
    cfg = load_config("demo", ["reward.components=[{name: 'mine.py:bonus', params: {valu: 2}}]"])
    (problem,) = reward_problems(cfg)
    assert "reward.components[0].params" in problem and "valu" in problem and "value" in problem
    broken = load_config("demo", ["reward.components=[{name: 'gone.py:bonus'}]"])
    assert reward_problems(broken) == [
        "reward.components[0].name: reward component 'gone.py:bonus': there is no file gone.py"
    ]
    with pytest.raises(ValueError, match="unknown reward component 'answr'.*'path/to/file.py:function'"):
        load_config("demo", ["reward.components=[{name: answr}]"])
