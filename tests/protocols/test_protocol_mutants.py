"""Behaviours a mutation audit of the protocols found unpinned, each with the code it pins."""

from __future__ import annotations

import pytest

from searchrl.protocols import (
    NO_ACTION,
    NO_SEARCH,
    Answer,
    FormatReport,
    Invalid,
    Search,
    SearchR1Protocol,
    get_protocol,
)
from searchrl.protocols._tags import last_box, unbox
from searchrl.protocols.base import FORMAT_SCHEMES
from searchrl.retrieval.base import Hit


# --------------------------------------------------------------------------------- inserted feedback and notices
@pytest.mark.parametrize(
    ("name", "response"),
    [
        ("search_r1", "<think> a </think><answer> Paris{fb}Rome </answer>"),
        ("rag_r1", "<think> a </think><answer> Paris{fb}Rome </answer>"),
        ("reason", "<think> a </think><answer> Paris{fb}Rome </answer>"),
        ("r1_searcher", "a</think>\n\n<answer> Paris{fb}Rome </answer>"),
        ("search_r1", "<think> a{fb}b </think><answer> Rome </answer>"),
        ("reason", "<think> a{fb}b </think><answer> Rome </answer>"),
    ],
)
def test_a_block_cut_by_inserted_feedback_fails_the_format(name: str, response: str) -> None:
    """The engine reads each turn on its own: an answer block that feedback cuts was never read as an answer, so a
    response whose only answer is such a block is not well-formed, and has no answer."""
    p = get_protocol(name)
    report = p.check_format(response.format(fb=p.invalid_feedback(Invalid(NO_ACTION))))
    assert not report.ok, report
    if "Paris" in response:
        assert report.answer is None and not report.has_answer


@pytest.mark.parametrize(
    ("name", "response"),
    [
        ("search_r1", "<think> a </think>{fb}<answer> Rome </answer>"),
        ("reason", "<think> a </think>{fb}<answer> Rome </answer>"),
        ("r1_searcher", "a{fb}b</think>\n\n<answer> Rome </answer>"),  # R1-Searcher reasons across turns
    ],
)
def test_feedback_between_blocks_keeps_the_format(name: str, response: str) -> None:
    p = get_protocol(name)
    report = p.check_format(response.format(fb=p.invalid_feedback(Invalid(NO_ACTION))))
    assert report.ok and report.answer == "Rome", report.problems


# ------------------------------------------------------------------------------------------------ boxed answers
def test_last_box_is_the_box_opened_last_so_a_nested_box_yields_the_inner_one() -> None:
    assert last_box(r"\boxed{a \boxed{b}} then") == "b"
    assert last_box(r"\boxed{a \boxed{b} c}") == "b"
    assert last_box(r"\boxed{a} and \boxed{b}") == "b"
    assert last_box(r"\boxed{x} \boxed{y \boxed{z}") == "z"  # the outer box never closes
    assert last_box(r"\boxed{\frac{1}{2}} and \boxed{\sqrt{2}}") == r"\sqrt{2}"  # nested braces stay
    assert get_protocol("search_o1").parse(r"So \boxed{Rome \boxed{Paris}}.") == Answer("Paris")
    assert get_protocol("r1_searcher_pp").check_format(r"So the answer is \boxed{a \boxed{Paris}}.").answer == "Paris"


def test_a_blank_box_is_no_answer() -> None:
    assert unbox("   ") is None and unbox("") is None
    report = get_protocol("r1_searcher_pp").check_format(r"So the answer is \boxed{ }.")
    assert (report.has_answer, report.answer, report.ok) == (False, None, False)
    report = get_protocol("search_o1").check_format(r"So the answer is \boxed{  }.")
    assert (report.has_answer, report.answer) == (False, None)
    assert get_protocol("search_o1").parse(r"So \boxed{ }.") == Answer("")


def test_a_box_never_spans_inserted_feedback() -> None:
    o1 = get_protocol("search_o1")
    feedback = o1.invalid_feedback(Invalid(NO_ACTION))
    report = o1.check_format(r"Reasoning \boxed{Paris" + feedback + "Rome}.")
    assert (report.answer, report.has_answer) == (None, False)
    # a whole box after the feedback is the answer
    assert o1.check_format(r"\boxed{Paris" + feedback + r"So \boxed{Rome}.").answer == "Rome"


def test_an_answer_block_never_spans_inserted_feedback() -> None:
    sr1 = get_protocol("search_r1")
    feedback = sr1.invalid_feedback(Invalid(NO_ACTION))
    report = sr1.check_format("<think> a </think><answer> Paris" + feedback + "Rome </answer>")
    assert (report.answer, report.has_answer, report.ok) == (None, False, False)


def test_result_tags_after_the_force_answer_notice_are_the_models_own() -> None:
    sr1 = get_protocol("search_r1")
    response = (
        "<think> a </think><search> q </search>" + sr1.force_answer_text() + "<information> made up </information>"
    )
    report = sr1.check_format(response + "<think> b </think><answer> x </answer>")
    assert report.n_searches == 0
    assert report.extra["n_fabricated_information"] == 1
    assert report.extra["n_unanswered_searches"] == 1
    assert not report.ok


# ------------------------------------------------------------------------------------------ balanced call tags
def test_a_reopened_call_tag_unbalances_the_calls() -> None:
    r1s = get_protocol("r1_searcher")
    obs = r1s.render_observation(["q"], [[]])
    response = "a <|begin_of_query|> x <|begin_of_query|> q<|end_of_query|>" + obs + "</think>\n\n<answer> y </answer>"
    report = r1s.check_format(response)
    assert not report.ok and "unbalanced query tags" in report.problems


def test_a_stray_closing_call_tag_unbalances_the_calls() -> None:
    report = get_protocol("search_o1").check_format(r"I think <|end_search_query|> so \boxed{Rome}.")
    assert not report.ok and "unbalanced search-query tags" in report.problems
    report = get_protocol("r1_searcher_pp").check_format(r"Known <|end_external_search|> so \boxed{Rome}.")
    assert not report.ok and "unbalanced external-search tags" in report.problems


def test_a_search_call_that_ends_the_response_is_unanswered() -> None:
    report = get_protocol("search_r1").check_format("<think> a </think><search> q </search>")
    assert report.extra["n_unanswered_searches"] == 1 and report.n_searches == 0
    report = get_protocol("r1_searcher").check_format("a <|begin_of_query|> q<|end_of_query|>\n")
    assert report.extra["n_unanswered_queries"] == 1
    assert "1 query call(s) without inserted documents" in report.problems


def test_an_answer_block_never_spans_documents() -> None:
    sr1 = get_protocol("search_r1")
    obs = sr1.render_observation(["q"], [[]])
    report = sr1.check_format("<think> a </think><answer> Paris <search> q </search>" + obs + "Rome </answer>")
    assert (report.answer, report.has_answer) == (None, False)
    rs = get_protocol("r_search")
    report = rs.check_format(
        "<answer> Paris <search> q </search>" + rs.render_observation(["q"], [[]]) + "Rome </answer>"
    )
    assert (report.answer, report.extra["answer_ok"]) == (None, False)


# ------------------------------------------------------------------------------------------ garbled content
def test_only_a_role_marker_with_its_colon_is_garbled() -> None:
    r1s = get_protocol("r1_searcher")
    assert r1s.check_format("a</think>\n\n<answer> assistant manager </answer>").ok
    report = r1s.check_format("a assistant: b</think>\n\n<answer> x </answer>")
    assert "chat-role marker in the policy's text" in report.problems


# ------------------------------------------------------------------------------------ prompts and openings
def test_strip_opening_keeps_the_space_after_a_prefill_without_one() -> None:
    r1s = get_protocol("r1_searcher")  # pre-fills "<think>" (no space after it)
    assert r1s.strip_opening("<think> I know.</think>") == " I know.</think>"
    assert r1s.strip_opening("I know.</think>") == "I know.</think>"
    r1s.template_opening = "<think>\n"  # a chat template that opens the think block with a line break
    assert r1s.prefill == ""
    assert r1s.strip_opening("<think>\n I know.</think>") == "I know.</think>"


def test_a_system_prompt_and_the_instruction_are_joined_by_a_blank_line_without_a_chat_template() -> None:
    pp = get_protocol("r1_searcher_pp")
    assert pp.raw_prompt("Who? ") == pp.system_prompt() + "\n\n" + pp.instruction("Who?")
    assert pp.raw_prompt("Who?").endswith(
        "\n\nAnswer the question below, following every rule above about the two "
        "tools. Give your final answer in the form \\boxed{YOUR_ANSWER}.\nQuestion: Who?"
    )


def test_an_untitled_document_has_no_leading_space() -> None:
    untitled = [Hit("d", "", "Plain text.", 1.0)]
    assert get_protocol("r1_searcher").render_observation(["q"], [untitled]) == (
        "\n\n<|begin_of_documents|>\n(1)Plain text.\n<|end_of_documents|>\n\n"
    )
    assert get_protocol("rag_r1").render_observation(["q"], [untitled]) == (
        "\n<information>\nDoc 1: Plain text.\n</information>\n"
    )


# -------------------------------------------------------------------------------------------------- Search-R1
def test_answer_tags_stop_generation_in_the_answer_tag_protocols() -> None:
    for name in ("search_r1", "rag_r1", "r_search", "r1_searcher", "reason", "tool_call"):
        assert get_protocol(name).answer_stop_strings == ("</answer>",), name


def test_a_search_r1_subclass_with_its_own_tags_stops_at_them() -> None:
    class Renamed(SearchR1Protocol):
        search_tags = ("<query>", "</query>")
        answer_tags = ("<final>", "</final>")

    p = Renamed()
    assert (p.stop_strings, p.answer_stop_strings) == (("</query>",), ("</final>",))
    assert p.parse("<think> a </think><query> q </query>") == Search(("q",))


def test_search_r1_answer_is_the_last_block_and_needs_a_think_block_first() -> None:
    sr1 = get_protocol("search_r1")
    report = sr1.check_format("<think> a </think><answer> x </answer><answer> y </answer>")
    assert report.answer == "y" and not report.ok
    report = sr1.check_format("<answer> McComb </answer>")
    assert report.answer == "McComb" and not report.ok


def test_search_r1_counts_a_cut_observation_and_only_opening_result_tags_as_fabricated() -> None:
    sr1 = get_protocol("search_r1")
    report = sr1.check_format("<think> a </think><search> q </search>\n\n<information>Doc 1(Title: cut")
    assert report.n_searches == 1 and "unclosed <information> block" in report.problems
    assert sr1.check_format("<think> a </think><information> made up").extra["n_fabricated_information"] == 1
    assert sr1.check_format("<think> a </think> made up </information>").extra["n_fabricated_information"] == 0


# ------------------------------------------------------------------------------------------------ R1-Searcher
def test_r1_searcher_without_prefill_needs_think_first() -> None:
    r1s = get_protocol("r1_searcher", prefill_think=False)
    assert r1s.check_format("<think> a </think>\n\n<answer> x </answer>").ok
    assert not r1s.check_format("Sure. <think> a </think>\n\n<answer> x </answer>").ok


def test_r1_searcher_answer_word_limit_is_inclusive() -> None:
    r1s = get_protocol("r1_searcher")
    ten = "one two three four five six seven eight nine ten"
    report = r1s.check_format(f"a</think>\n\n<answer> {ten} </answer>")
    assert report.ok and report.extra["answer_words"] == 10
    assert not get_protocol("r1_searcher", max_answer_words=9).check_format(f"a</think><answer> {ten} </answer>").ok


def test_r1_searcher_documents_rules() -> None:
    r1s = get_protocol("r1_searcher")
    report = r1s.check_format("a made up <|end_of_documents|></think>\n\n<answer> x </answer>")
    assert report.extra["n_fabricated_documents"] == 1 and not report.ok
    report = r1s.check_format("a <|begin_of_query|> q<|end_of_query|>\n\n<|begin_of_documents|>\n(1)cut")
    assert "unclosed documents block" in report.problems and report.n_searches == 1
    obs = r1s.render_observation(["q"], [[]])
    report = r1s.check_format("a</think>\n\n<answer> x <|begin_of_query|> q<|end_of_query|>" + obs + "y </answer>")
    assert report.answer is None and not report.ok


def test_r1_searcher_format_rewards() -> None:
    stage1, _ = FORMAT_SCHEMES["r1_searcher_stage1"]
    stage2, _ = FORMAT_SCHEMES["r1_searcher_stage2"]
    empty = FormatReport(ok=True, has_answer=True, answer=" ", n_searches=1)
    good = FormatReport(ok=True, has_answer=True, answer="x", n_searches=1)
    bad = FormatReport(ok=False, has_answer=True, answer="x", n_searches=1)
    assert (stage1(empty, 1, None), stage1(empty, 1, None, require_answer=False), stage1(good, 1, None)) == (
        0.0,
        0.5,
        0.5,
    )
    assert (stage2(good, 1, None), stage2(bad, 1, None), stage2(bad, 1, None, penalty=-1.0)) == (0.0, -2.0, -1.0)


# --------------------------------------------------------------------------------------------- R1-Searcher++
def test_r1_searcher_pp_result_tags_and_boxes() -> None:
    pp = get_protocol("r1_searcher_pp")
    report = pp.check_format(r"Known. <|end_search_result|> So \boxed{x}.")
    assert not report.ok and any("search-result tag written by the policy" in p for p in report.problems)
    report = pp.check_format("<|begin_external_search|>q<|end_external_search|> <|begin_search_result|>\n(1)cut")
    assert "unclosed search-result block" in report.problems and report.n_searches == 1
    feedback = pp.invalid_feedback(Invalid(NO_ACTION))
    assert pp.check_format(r"\boxed{Paris" + feedback + "Rome}").answer is None
    scheme, _ = FORMAT_SCHEMES["r1_searcher_pp"]
    bad = FormatReport(ok=False, has_answer=False, answer=None, n_searches=0)
    assert (scheme(bad, 0, None), scheme(pp.check_format(r"\boxed{x}"), 0, None)) == (-2.0, 0.0)


# --------------------------------------------------------------------------------------------------- R-Search
def test_r_search_answer_and_evidence_indicators() -> None:
    rs = get_protocol("r_search")
    report = rs.check_format("<answer> x <answer> y </answer>")
    assert report.answer == "y" and not report.extra["answer_ok"]
    assert rs.check_format("<answer> x </answer>").extra["evidence_before_answer"] is False
    report = rs.check_format("<original_evidence> </original_evidence><answer> x </answer>")
    assert report.extra["evidence_without_search"] and report.extra["evidence"] == ""
    fake = rs.check_format("I know. <observation> made up </observation><answer> x </answer>")
    assert fake.extra["n_fabricated_observations"] == 1 and fake.n_searches == 0


def test_r_search_format_reward_without_search() -> None:
    scheme, _ = FORMAT_SCHEMES["r_search"]

    def report(evidence_without_search: bool) -> FormatReport:
        extra = {"answer_ok": True, "evidence_ok": False, "evidence_without_search": evidence_without_search}
        return FormatReport(ok=True, has_answer=True, answer="x", n_searches=0, extra=extra)

    assert scheme(report(False), 0, None) == pytest.approx(0.4)  # g_e granted without a search, g_a for the answer
    assert scheme(report(True), 0, None) == pytest.approx(0.4)  # Eq. 5 grants g_e even so
    assert scheme(report(True), 0, None, evidence_without_search="code") == pytest.approx(0.2)
    assert scheme(report(False), 0, None, evidence_without_search="code") == pytest.approx(0.4)


# ----------------------------------------------------------------------------------------------------- RAG-R1
def test_rag_r1_multi_query_json_object_and_limit() -> None:
    mq = get_protocol("rag_r1", multi_query=True, max_queries=3)
    assert mq.parse('<search> {"queries": ["a", "b"]} </search>') == Search(("a", "b"))
    obs = mq.render_observation(["a", "b", "c"], [[], [], []])
    report = mq.check_format(
        f"<think> t </think><search> a, b, c </search>{obs}<think> u </think><answer> x </answer>"
    )
    assert report.ok and report.extra["queries_per_call"] == [3], report.problems
    zurich = mq.render_observation(["a"], [[Hit("d", "Zürich", "Stadt.", 1.0)]])
    assert '"Doc 1: Zürich Stadt."' in zurich


def test_rag_r1_flags_a_call_with_a_query_too_long() -> None:
    p = get_protocol("rag_r1", max_query_chars=5)
    obs = p.render_observation(["q"], [[]])
    report = p.check_format(
        f"<think> t </think><search> much too long </search>{obs}<think> u </think><answer> x </answer>"
    )
    assert "search call is invalid (query_too_long)" in report.problems and not report.ok


# -------------------------------------------------------------------------------------------------- Search-o1
def test_search_o1_a_closing_result_tag_written_by_the_model_fails() -> None:
    report = get_protocol("search_o1").check_format(r"Known. <|end_search_result|> So \boxed{x}.")
    assert not report.ok and report.answer == "x"


# ------------------------------------------------------------------------------------------ no-search baselines
def test_reason_takes_an_answer_after_a_search_call_and_refuses_a_lone_call() -> None:
    reason = get_protocol("reason")
    assert reason.parse("<think> a </think><search> q </search> <answer> Rome </answer>") == Answer("Rome")
    assert reason.parse("<think> a </think><search> q </search>") == Invalid(NO_SEARCH)


def test_rag_prompt_frames_the_documents_once() -> None:
    rag = get_protocol("rag")
    prompt = rag.instruction(rag.frame_question("who wrote Hamlet", [Hit("d", "Hamlet", "A play.", 1.0)]))
    assert prompt.endswith('\n\nDocuments:\nDoc 1(Title: "Hamlet") A play.\n\nQuestion: who wrote Hamlet?\n')
    assert rag.frame_question("who?", []) == "Documents:\n(none)\n\nQuestion: who?"


# -------------------------------------------------------------------------------------------------- tool_call
def test_tool_call_documents_must_follow_a_turn_that_ends_with_its_call() -> None:
    tc = get_protocol("tool_call")
    obs = tc.render_observation(["a"], [[]])
    assert tc.check_format(tc.format_search(["a"]) + obs + "<answer>x</answer>").ok
    report = tc.check_format(tc.format_search(["a"]) + " and more" + obs + "<answer>x</answer>")
    assert "turn 1: documents follow a turn that does not end with one tool call" in report.problems


def test_tool_call_a_reply_the_model_writes_after_its_call_is_fabricated() -> None:
    tc = get_protocol("tool_call")
    report = tc.check_format(tc.format_search(["a"]) + "<tool_response>made up</tool_response><answer>x</answer>")
    assert report.extra["n_fabricated_responses"] == 1 and report.n_searches == 0 and not report.ok
