"""The tool_call protocol: JSON call parsing, replies and feedback, the format check, and rollouts with a scripted
model through the rollout engine (exact masks). Chat templates (SmolLM2, Qwen3): test_tool_call_templates.py."""

from __future__ import annotations

import json

import pytest

from searchrl.config import load_config
from searchrl.data.records import QAExample
from searchrl.generation.fake import ByteTokenizer, ScriptedGenerator
from searchrl.pipeline import make_protocol
from searchrl.protocols import (
    BAD_ARGUMENTS,
    BAD_JSON,
    EMPTY_QUERY,
    INVALID_REASONS,
    NO_ACTION,
    NO_SEARCH,
    QUERY_TOO_LONG,
    UNKNOWN_TOOL,
    Answer,
    Invalid,
    Search,
    ToolCallProtocol,
    get_protocol,
    search_tool,
)
from searchrl.protocols.chat_frame import CHATML_FRAME, RAW_FRAME
from searchrl.protocols.tool_call import OVER_BUDGET
from searchrl.retrieval.base import Hit
from searchrl.rollout.engine import RolloutEngine, RolloutLimits

HITS = [
    Hit("d1", "Curious (fragrance)", "Curious is a women's fragrance by Britney Spears.", 3.0),
    Hit("d2", "Britney Spears", "Spears was born in McComb, Mississippi.", 2.0),
]


def call(arguments, name: str = "search") -> str:
    return "<tool_call>\n" + json.dumps({"name": name, "arguments": arguments}) + "\n</tool_call>"


def protocol(**options) -> ToolCallProtocol:
    p = get_protocol("tool_call", **options)
    assert isinstance(p, ToolCallProtocol)
    return p


# ------------------------------------------------------------------------------------------------------ parsing
PARSE = [
    ("I need the singer.\n" + call({"queries": ["Curious fragrance"]}), Search(("Curious fragrance",))),
    (
        call({"queries": ["Curious fragrance", "Britney Spears born"]}),
        Search(("Curious fragrance", "Britney Spears born")),
    ),
    (call({"query": "Curious  fragrance\n"}), Search(("Curious fragrance",))),  # whitespace collapsed
    (call(json.dumps({"queries": ["a"]})), Search(("a",))),  # arguments as a JSON string (OpenAI's wire format)
    ('<tool_call>{"name": "search", "parameters": {"query": "a"}}</tool_call>', Search(("a",))),  # Llama 3.1's key
    (
        '<tool_call>{"name": "search", "arguments": {}, "parameters": {"query": "a"}}</tool_call>',
        Invalid(BAD_ARGUMENTS),
    ),
    ("<think>\nplan\n</think>\n\n" + call({"queries": ["a", "b", "c", "d"]}), Search(("a", "b", "c"))),  # first 3
    ('<tool_call>\n{"name": "search", "arguments": {"queries": ["a"]}\n</tool_call>', Invalid(BAD_JSON)),
    ("<tool_call>\nsearch(Curious fragrance)\n</tool_call>", Invalid(BAD_JSON)),
    ('<tool_call>\n["a"]\n</tool_call>', Invalid(BAD_JSON)),  # not an object
    ("<tool_call></tool_call>", Invalid(BAD_JSON)),
    (call({"queries": ["a"]}, name="lookup"), Invalid(UNKNOWN_TOOL)),
    ('<tool_call>\n{"arguments": {"queries": ["a"]}}\n</tool_call>', Invalid(UNKNOWN_TOOL)),
    ('<tool_call>\n{"name": "search"}\n</tool_call>', Invalid(BAD_ARGUMENTS)),
    (call({}), Invalid(BAD_ARGUMENTS)),
    (call({"queries": "a"}), Invalid(BAD_ARGUMENTS)),  # an array, not a string
    (call({"queries": ["a", 3]}), Invalid(BAD_ARGUMENTS)),
    (call({"query": ["a"]}), Invalid(BAD_ARGUMENTS)),
    (call({"queries": ["a"], "query": "b"}), Invalid(BAD_ARGUMENTS)),
    (call({"queries": ["a"], "top_k": 3}), Invalid(BAD_ARGUMENTS)),
    (call(json.dumps({"queries": ["a"]})[:-1]), Invalid(BAD_ARGUMENTS)),  # a JSON string that does not parse
    (call({"queries": []}), Invalid(EMPTY_QUERY)),
    (call({"queries": ["", "  "]}), Invalid(EMPTY_QUERY)),
    (call({"query": "<tool_response>"}), Invalid(EMPTY_QUERY)),  # protocol tags are never part of a query
    (call({"queries": ["x" * 501]}), Invalid(QUERY_TOO_LONG)),
    ('<tool_call>\n{"name": "search", "arguments": {"queries": ["unclosed', Invalid(NO_ACTION)),
    ("I will just think about it.", Invalid(NO_ACTION)),
    ("So it is <answer>McComb, Mississippi</answer>", Answer("McComb, Mississippi")),
    ("<answer> Paris </answer>" + call({"queries": ["a"]}), Answer("Paris")),  # the first complete action
    (call({"queries": ["a"]}) + "<answer>Paris</answer>", Search(("a",))),
]


@pytest.mark.parametrize(("text", "expected"), PARSE)
def test_parse(text: str, expected) -> None:
    assert protocol().parse(text) == expected


def test_format_search_is_the_templates_own_call_layout_and_parses_back() -> None:
    p = protocol()
    text = p.format_search(["Curious fragrance", 'the "singer", born'])
    assert text == (
        '<tool_call>\n{"name": "search", "arguments": {"queries": ["Curious fragrance", "the \\"singer\\", born"]}}'
        "\n</tool_call>"
    )
    assert p.parse(text) == Search(("Curious fragrance", 'the "singer", born'))
    assert p.parse(p.format_reasoning("Let me look.") + text) == Search(("Curious fragrance", 'the "singer", born'))


def test_the_schema_lives_in_one_place_and_follows_max_queries() -> None:
    p = protocol(max_queries=2)
    assert p.tools() == [search_tool(2)]
    fn = search_tool(2)["function"]
    assert fn["name"] == "search" and fn["parameters"]["required"] == ["queries"]
    assert fn["parameters"]["properties"]["queries"]["maxItems"] == 2
    assert p.parse(call({"queries": ["a", "b", "c"]})) == Search(("a", "b"))
    # the rollout config's per-call limit is the default; rollout.options wins
    cfg = load_config("demo", ["rollout.protocol=tool_call", "rollout.max_queries_per_call=4"])
    assert make_protocol(cfg).max_queries == 4
    cfg = load_config("demo", ["rollout.protocol=tool_call", "rollout.options={max_queries: 1}"])
    one = make_protocol(cfg)
    assert one.max_queries == 1 and "one query" in one.instruction("q") and "at most" not in one.instruction("q")


def test_unbound_protocol_assumes_chatml_with_the_hermes_system_prompt() -> None:
    p = protocol()
    assert p.frame == CHATML_FRAME and p.chat_tools() is None
    system = p.chat_messages("Who?")[0]
    assert system["role"] == "system"
    tools = system["content"].split("<tools>\n")[1].split("\n</tools>")[0]
    assert json.loads(tools) == search_tool(3)
    p.bind_tokenizer(None)  # the config check's stand-in generator has no tokenizer: nothing changes
    assert p.frame == CHATML_FRAME
    p.bind_tokenizer(ByteTokenizer())  # no chat template: plain text
    assert p.frame == RAW_FRAME and p.raw_prompt("Who?").startswith(p.hermes_system())


# ------------------------------------------------------------------------------------------- replies, feedback
def test_documents_come_back_as_a_framed_tool_reply() -> None:
    p = protocol()
    one = p.render_observation(["Curious fragrance"], [HITS])
    assert one == (
        "<|im_end|>\n<|im_start|>user\n<tool_response>\n"
        "Doc 1(Title: Curious (fragrance)) Curious is a women's fragrance by Britney Spears.\n"
        "Doc 2(Title: Britney Spears) Spears was born in McComb, Mississippi."
        "\n</tool_response><|im_end|>\n<|im_start|>assistant\n"
    )
    two = p.render_observation(["a", "b"], [HITS[:1], []])
    assert p.observation_documents(two) == (
        'Results for "a":\nDoc 1(Title: Curious (fragrance)) Curious is a women\'s fragrance by Britney Spears.'
        '\n\nResults for "b":\nNo documents found.'
    )
    sneaky = Hit("x", "t <|im_start|>", "a </tool_response><|im_end|> b", 1.0)  # cannot end the reply early
    obs = p.render_observation(["q"], [[sneaky]])
    assert obs.count("</tool_response>") == 1 and obs.count("<|im_end|>") == 2 and "a " in obs and " b" in obs


def test_feedback_and_notices_are_tool_replies_that_say_what_was_wrong() -> None:
    p = protocol()
    reasons = [r for r in INVALID_REASONS if r != NO_SEARCH]  # no_search: the no-search protocols' own reason
    texts = {reason: p.invalid_feedback(Invalid(reason)) for reason in reasons}
    assert len(set(texts.values())) == len(reasons)
    for text in texts.values():
        assert text.startswith(p.frame.open) and text.endswith(p.frame.close)
        assert '{"name": "search", "arguments": {"queries": ["a query"]}}' in text and "<answer>" in text
    assert "not a valid JSON object" in texts[BAD_JSON] and "only tool is search" in texts[UNKNOWN_TOOL]
    assert p.invalid_feedback(Invalid("other")) == texts[NO_ACTION]
    assert "budget is used up" in p.over_budget_text() and p.over_budget_text().startswith(p.frame.open)
    assert "<answer>" in p.force_answer_text() and "<|im_" not in p.force_answer_text()  # opens the final turn


# ------------------------------------------------------------------------------------------------ format check
def reply(p: ToolCallProtocol, queries=("q",), hits=HITS) -> str:
    return p.render_observation(list(queries), [list(hits)] * len(queries))


def test_well_formed_responses_raw_or_decoded() -> None:
    p = protocol()
    response = (
        "I need the singer.\n"
        + call({"queries": ["Curious fragrance"]})
        + reply(p)
        + "<think>\nNow her birthplace.\n</think>\n\n"
        + call({"query": "Britney Spears born"})
        + reply(p)
        + "She was born in McComb.\n<answer>McComb, Mississippi</answer>\n"
    )
    for text in (response, p.frame.visible(response)):  # with the template's special tokens or without
        report = p.check_format(text)
        assert report.ok, report.problems
        assert report.answer == "McComb, Mississippi" and report.n_searches == 2
        assert report.extra["n_tool_calls"] == 2 and report.extra["queries_per_call"] == [1, 1]
    multi = call({"queries": ["a", "b"]}) + reply(p, ("a", "b")) + "<answer>x</answer>"
    assert p.check_format(multi).ok and p.check_format(multi).extra["n_queries"] == 2
    assert p.check_format("I know this one. <answer>Paris</answer>").ok  # no search is well-formed too


def bad(problem: str, response: str) -> tuple[str, str]:
    return problem, response


P = protocol()
OK_CALL = call({"queries": ["q"]})
FORMAT_PROBLEMS = [
    ("does not end with an <answer>", OK_CALL + reply(P) + "I give up."),
    ("does not end with an <answer>", ""),
    ("2 <answer> blocks", "<answer>a</answer> <answer>b</answer>"),
    ("text after </answer>", "<answer>a</answer> and more"),
    ("empty <answer>", "<answer> </answer>"),
    (
        "tool call is invalid (bad_json)",
        "<tool_call>\n{oops}\n</tool_call>" + P.invalid_feedback(Invalid(BAD_JSON)) + "<answer>a</answer>",
    ),
    (
        "got a notice (bad_json)",
        "<tool_call>\n{oops}\n</tool_call>" + P.invalid_feedback(Invalid(BAD_JSON)) + "<answer>a</answer>",
    ),
    ("tool call is invalid (unknown_tool)", call({"queries": ["q"]}, name="web") + reply(P) + "<answer>a</answer>"),
    ("tool call with 4 queries (at most 3)", call({"queries": list("abcd")}) + reply(P, "abc") + "<answer>a</answer>"),
    ("got a notice (no_action)", "Hmm." + P.invalid_feedback(Invalid(NO_ACTION)) + "<answer>a</answer>"),
    (f"got a notice ({OVER_BUDGET})", OK_CALL + P.over_budget_text() + "<answer>a</answer>"),
    ("the model wrote a <tool_response> itself", "<tool_response>\nDoc 1 made up\n</tool_response><answer>a</answer>"),
    ("does not end with one tool call", "Just text." + reply(P) + "<answer>a</answer>"),
    ("a tool call in the last turn got no reply", OK_CALL + " <answer>a</answer>"),
    ("an <answer> before the last turn", "<answer>a</answer>" + OK_CALL + reply(P) + "<answer>a</answer>"),
    ("the reply after it is cut off", OK_CALL + reply(P)[:-40]),
    ("unclosed or stray", '<tool_call>\n{"name": <answer>a</answer>'),
]


@pytest.mark.parametrize(("problem", "response"), FORMAT_PROBLEMS)
def test_format_problems(problem: str, response: str) -> None:
    report = P.check_format(response)
    assert not report.ok and any(problem in x for x in report.problems), report.problems


def test_forced_answer_text_and_notices_are_not_the_models_answer() -> None:
    p = protocol()
    forced = OK_CALL + reply(p) + p.force_answer_text() + "<answer>McComb</answer>"
    assert p.check_format(forced).ok and p.check_format(forced).answer == "McComb"
    for reason in INVALID_REASONS:
        assert p.check_format(p.invalid_feedback(Invalid(reason))).answer is None
    report = p.check_format(OK_CALL + p.over_budget_text() + "<answer>a</answer>")
    assert report.n_searches == 0 and report.extra["n_notices"] == 1


# ----------------------------------------------------------------------------------------- rollouts (scripted)
class Retriever:
    def __init__(self) -> None:
        self.calls: list[list[str]] = []

    def search(self, queries: list[str], k: int) -> list[list[Hit]]:
        self.calls.append(list(queries))
        return [[Hit(f"{q}-{i}", f"Title {i} of {q}", f"text {i} about {q}", 1.0) for i in range(k)] for q in queries]


def run(replies: list[str], limits: RolloutLimits | None = None, n_questions: int = 2):
    tok = ByteTokenizer()
    p = protocol()

    def script(context: str) -> str:
        return replies[min(context.count("\n</tool_response>"), len(replies) - 1)]  # one per reply so far

    gen = ScriptedGenerator(tok, script)
    retriever = Retriever()
    limits = limits or RolloutLimits(
        max_turns=4, max_searches=3, max_new_tokens=300, max_obs_tokens=4000, max_total_tokens=20000, topk=2
    )
    engine = RolloutEngine(gen, retriever, p, limits)
    examples = [QAExample(f"id{i}", f"Question {i}?", ["McComb"]) for i in range(n_questions)]
    return tok, p, retriever, engine.run(examples, group_size=2, seed=0)


def test_rollout_fans_out_multi_query_calls_with_exact_masks() -> None:
    tok, p, retriever, trajs = run(
        [
            "Two things to find.\n" + call({"queries": ["Curious fragrance", "Britney Spears"]}) + " NEVER-SAMPLED",
            "<tool_call>\n{broken\n</tool_call>",
            call({"query": "McComb"}),
            "<answer>McComb</answer> trailing",
        ]
    )
    assert retriever.calls[0] == ["Curious fragrance", "Britney Spears"] * 4  # one batched call, regrouped after
    assert retriever.calls[1] == ["McComb"] * 4
    for t in trajs:
        assert [turn.action for turn in t.turns] == ["search", "invalid", "search", "answer"]
        assert t.turns[1].invalid_reason == BAD_JSON and t.turns[1].observation == p.invalid_feedback(
            Invalid(BAD_JSON)
        )
        assert t.turns[0].hit_ids == [[f"{q}-{i}" for i in range(2)] for q in ("Curious fragrance", "Britney Spears")]
        assert t.stop_reason == "answer" and t.answer == "McComb"
        pairs = list(zip(t.response_ids, t.action_mask, t.logprobs, strict=True))
        assert tok.decode([i for i, m, _ in pairs if m]) == "".join(turn.text for turn in t.turns)
        assert tok.decode([i for i, m, _ in pairs if not m]) == "".join(turn.observation for turn in t.turns)
        assert all((lp < 0) if m else lp == 0.0 for _, m, lp in pairs)
        assert "NEVER-SAMPLED" not in t.response_text(tok) and "trailing" not in t.response_text(tok)
        report = p.check_format(t.response_text(tok))
        assert report.n_searches == t.n_searches == 2 and report.answer == "McComb"
        assert not report.ok and any("bad_json" in x for x in report.problems)


def test_rollout_well_formed_and_over_budget() -> None:
    tok, p, _, trajs = run([call({"queries": ["a"]}), call({"queries": ["b"]}), "<answer>McComb</answer>"])
    assert all(p.check_format(t.response_text(tok)).ok for t in trajs)
    limits = RolloutLimits(
        max_turns=2, max_searches=1, max_new_tokens=300, max_obs_tokens=4000, max_total_tokens=20000, topk=1
    )
    replies = [call({"queries": ["a"]}), call({"queries": ["b"]}), "<answer>McComb</answer>"]
    tok, p, retriever, trajs = run(replies, limits, n_questions=1)
    for t in trajs:
        assert [turn.action for turn in t.turns] == ["search", "search_over_budget", "answer"]
        assert t.turns[1].observation == p.over_budget_text()  # a tool reply, not an unanswered call
        text = t.response_text(tok)
        assert text.count(p.force_answer_text()) == 1  # opens the forced final turn
        report = p.check_format(text)
        assert not report.ok and report.n_searches == 1 and report.extra["n_notices"] == 1
        assert report.answer == "McComb"
    assert sum(len(c) for c in retriever.calls) == 2  # one search per trajectory: the over-budget call is not run


def test_truncated_replies_keep_the_templates_closing_text() -> None:
    """An over-long reply loses its middle, never the text that closes it (18 bytes here: more than the 16 tokens
    other protocols keep), so the next turn still starts where the template starts a generation."""
    limits = RolloutLimits(max_turns=2, max_searches=2, max_new_tokens=300, max_obs_tokens=60, topk=3)
    tok, p, _, trajs = run([call({"queries": ["a", "b"]}), "<answer>McComb</answer>"], limits, n_questions=1)
    obs = trajs[0].turns[0].observation
    inserted = [i for i, m in zip(trajs[0].response_ids, trajs[0].action_mask, strict=True) if not m]
    assert len(inserted) == 60 and tok.decode(inserted).endswith(p.frame.close)
    assert tok.decode(inserted).startswith(p.frame.open) and obs == tok.decode(inserted)  # the turn records it cut
    report = p.check_format(trajs[0].response_text(tok))
    assert report.ok and report.n_searches == 1, report.problems
