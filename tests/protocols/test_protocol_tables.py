"""Table tests: exact observation layouts, parser verdicts, format-checker verdicts per paper rule, the registry."""

from __future__ import annotations

import json

import pytest

from searchrl.protocols import (
    BAD_JSON,
    EMPTY_QUERY,
    NO_ACTION,
    PROTOCOLS,
    QUERY_TOO_LONG,
    Answer,
    Invalid,
    Search,
    get_protocol,
)
from searchrl.retrieval.base import Hit

HITS = [
    Hit("d1", "Curious (fragrance)", "Curious is a women's fragrance by Britney Spears.", 3.0),
    Hit("d2", "Britney Spears", "Spears was born in McComb, Mississippi.", 2.0),
]
Q = ["Curious fragrance"]

#: the protocols that search during a rollout (the no-search baselines have their own tests)
SEARCHING = [name for name, cls in PROTOCOLS.items() if cls.searches]


# ------------------------------------------------------------------------------------------ observation layouts
def test_search_r1_observation_layout() -> None:
    obs = get_protocol("search_r1").render_observation(Q, [HITS])
    assert obs == (
        '\n\n<information>Doc 1(Title: "Curious (fragrance)") Curious is a women\'s fragrance by Britney Spears.\n'
        'Doc 2(Title: "Britney Spears") Spears was born in McComb, Mississippi.</information>\n\n'
    )


def test_r1_searcher_observation_layout() -> None:
    obs = get_protocol("r1_searcher").render_observation(Q, [HITS])
    assert obs == (
        "\n\n<|begin_of_documents|>\n"
        "(1)Curious (fragrance) Curious is a women's fragrance by Britney Spears.\n"
        "(2)Britney Spears Spears was born in McComb, Mississippi.\n"
        "<|end_of_documents|>\n\n"
    )
    # a search that finds nothing: "None", as the authors' rollout writes it
    assert get_protocol("r1_searcher").render_observation(Q, [[]]) == (
        "\n\n<|begin_of_documents|>\nNone<|end_of_documents|>\n\n"
    )


def test_r1_searcher_pp_observation_layout() -> None:
    obs = get_protocol("r1_searcher_pp").render_observation(Q, [HITS])
    assert obs == (
        " <|begin_search_result|>\n"
        "(1)Curious (fragrance) Curious is a women's fragrance by Britney Spears.\n"
        "(2)Britney Spears Spears was born in McComb, Mississippi.\n"
        "<|end_search_result|>"
    )


def test_r_search_observation_layout() -> None:
    obs = get_protocol("r_search").render_observation(Q, [HITS])
    assert obs == (
        '\n\n<observation>(Title: "Curious (fragrance)") Curious is a women\'s fragrance by Britney Spears.\n'
        '(Title: "Britney Spears") Spears was born in McComb, Mississippi.</observation>\n\n'
    )  # the documents stripped, as R-Search's code does (no line break before the closing tag)


def test_rag_r1_single_query_observation_layout() -> None:
    obs = get_protocol("rag_r1").render_observation(Q, [HITS])
    assert obs == (
        "\n<information>\nDoc 1: Curious (fragrance) Curious is a women's fragrance by Britney Spears.\n"
        "Doc 2: Britney Spears Spears was born in McComb, Mississippi.\n</information>\n"
    )


def test_rag_r1_multi_query_observation_maps_each_query_to_its_documents_as_json() -> None:
    p = get_protocol("rag_r1", multi_query=True)
    obs = p.render_observation(["Curious fragrance", "Britney Spears birthplace"], [HITS[:1], HITS[1:]])
    assert obs.startswith("\n<information>\n{\n") and obs.endswith("\n}\n</information>\n")
    body = obs[len("\n<information>\n") : -len("\n</information>\n")]
    assert body == json.dumps(json.loads(body), indent=2, ensure_ascii=False)
    assert json.loads(body) == {
        "query": ["Curious fragrance", "Britney Spears birthplace"],
        "documents": [
            "Doc 1: Curious (fragrance) Curious is a women's fragrance by Britney Spears.",
            "Doc 1: Britney Spears Spears was born in McComb, Mississippi.",
        ],
    }


@pytest.mark.parametrize("name", list(PROTOCOLS))
def test_empty_hits_and_untitled_documents_render(name: str) -> None:
    p = get_protocol(name)
    empty = p.render_observation(Q, [[]])
    assert p.result_tags[0] in empty and p.result_tags[1] in empty
    untitled = p.render_observation(Q, [[Hit("x", "", "just text", 1.0)]])
    assert "just text" in untitled


@pytest.mark.parametrize("name", list(PROTOCOLS))
def test_documents_cannot_close_the_result_block_early(name: str) -> None:
    p = get_protocol(name)
    sneaky = Hit("x", "t", f"before {p.result_tags[1]} after {p.result_tags[0]}", 1.0)
    obs = p.render_observation(Q, [[sneaky]])
    assert obs.count(p.result_tags[1]) == 1 and obs.count(p.result_tags[0]) == 1
    assert "before" in obs and "after" in obs


@pytest.mark.parametrize("name", list(PROTOCOLS))
def test_render_rejects_mismatched_inputs(name: str) -> None:
    p = get_protocol(name)
    with pytest.raises(ValueError):
        p.render_observation(Q, [HITS, HITS])
    too_many = [f"q{i}" for i in range(p.max_queries + 1)]  # single-query protocols take one query per call
    with pytest.raises(ValueError):
        p.render_observation(too_many, [HITS] * len(too_many))


# ------------------------------------------------------------------------------------------------------ parsing
SEARCH_R1_PARSE = [
    ("<think> x </think> <search> Britney Spears </search>", Search(("Britney Spears",))),
    ("<search>a\n\t b</search>", Search(("a b",))),
    ("<search></search>", Invalid(EMPTY_QUERY)),
    ("<search>  \n </search>", Invalid(EMPTY_QUERY)),
    ("<search> <think> </search>", Invalid(EMPTY_QUERY)),
    ("<search>" + "x" * 500 + "</search>", Search(("x" * 500,))),
    ("<search>" + "x" * 501 + "</search>", Invalid(QUERY_TOO_LONG)),
    ("<search> unclosed query", Invalid(NO_ACTION)),
    ("<search> outer <search> inner </search>", Search(("inner",))),
    ("<search> a <answer> b </search>", Search(("a b",))),
    ("<answer> McComb, Mississippi </answer> <search> q </search>", Answer("McComb, Mississippi")),
    ("<answer>  </answer>", Answer("")),
    ("<answer> unclosed", Invalid(NO_ACTION)),
    ("no tags at all", Invalid(NO_ACTION)),
    ("stray </search> then nothing", Invalid(NO_ACTION)),
    ("stray </answer> <search> q </search>", Search(("q",))),
    ("<search> a </answer>", Invalid(NO_ACTION)),
    ("", Invalid(NO_ACTION)),
]


@pytest.mark.parametrize(("text", "expected"), SEARCH_R1_PARSE)
def test_search_r1_parse(text: str, expected) -> None:
    assert get_protocol("search_r1").parse(text) == expected


def test_max_query_chars_option() -> None:
    p = get_protocol("r_search", max_query_chars=10)
    assert p.parse("<search> 0123456789 </search>") == Search(("0123456789",))
    assert p.parse("<search> 0123456789A </search>") == Invalid(QUERY_TOO_LONG)


def test_r1_searcher_parse() -> None:
    p = get_protocol("r1_searcher")
    assert p.parse('Let me check. <|begin_of_query|> "Hanover" last king<|end_of_query|>') == Search(
        ("Hanover last king",)
    )
    assert p.parse("...done.</think>\n\n<answer> 20 June 1837 </answer>") == Answer("20 June 1837")
    # double quotes are deleted, not turned into spaces, as in the authors' rollout
    assert p.parse('<|begin_of_query|> "a","b" O"Neil<|end_of_query|>') == Search(("a,b ONeil",))
    assert p.parse("<|begin_of_query|><|end_of_query|>") == Invalid(EMPTY_QUERY)
    assert p.parse("<search> wrong tags </search>") == Invalid(NO_ACTION)


def test_r1_searcher_pp_parse() -> None:
    p = get_protocol("r1_searcher_pp")
    internal = "<|begin_internal_answer|>Boba Fett is a clone of Jango Fett.<|end_internal_answer|>"
    assert p.parse(internal) == Invalid(NO_ACTION)  # internal steps are text, not actions
    call = "<|begin_external_search|> who raised Boba Fett<|end_external_search|>"
    assert p.parse(internal + call) == Search(("who raised Boba Fett",))
    assert p.parse("So the answer is \\boxed{Jango Fett}.") == Answer("Jango Fett")
    assert p.parse("\\boxed{\\text{Jango {Fett}}}") == Answer("Jango {Fett}")  # LaTeX's \\text{} unwrapped
    # generation pauses at the end of a search call: a box before it is tentative, the search runs
    assert p.parse("\\boxed{A} then " + call) == Search(("who raised Boba Fett",))
    # a turn that boxes twice answers with its last box, the answer the format reward scores
    two = "So \\boxed{Lyon}. No, the records say \\boxed{Paris}."
    assert p.parse(two) == Answer("Paris") and p.check_format(two).answer == "Paris"
    assert p.parse("\\boxed{A}, \\boxed{B} then " + call + " \\boxed{C}") == Search(("who raised Boba Fett",))
    assert p.parse(call + " and \\boxed{A}") == Search(("who raised Boba Fett",))
    assert p.parse("\\boxed{unclosed") == Invalid(NO_ACTION)
    assert p.parse("<|begin_external_search|>  <|end_external_search|>") == Invalid(EMPTY_QUERY)


RAG_MQ_PARSE = [
    (
        "<search> Arthur's Magazine founding year, First for Women founding year </search>",
        Search(("Arthur's Magazine founding year", "First for Women founding year")),
    ),
    ("<search>a,b</search>", Search(("a", "b"))),
    ("<search> a, b ,, c, d </search>", Search(("a", "b", "c"))),  # empties dropped, first 3 kept
    ("<search> , , </search>", Invalid(EMPTY_QUERY)),
    ('<search> ["a", "b, with comma"] </search>', Search(("a", "b, with comma"))),
    ('<search> {"query": ["a"], "documents": []} </search>', Search(("a",))),
    ("<search> [a, b </search>", Search(("[a", "b"))),  # not JSON after all: the authors' comma split
    ("<search> [Jr.] Sammy Davis, Rat Pack </search>", Search(("[Jr.] Sammy Davis", "Rat Pack"))),
    ("<search> a, b, c, " + "x" * 501 + " </search>", Search(("a", "b", "c"))),  # a 4th, dropped, is not checked
    ("<search> \u200b\u202e </search>", Invalid(EMPTY_QUERY)),  # invisible format characters only
    ('<search> {"x": 1} </search>', Invalid(BAD_JSON)),
    ("<search> [1, 2] </search>", Invalid(BAD_JSON)),
    ("<search> " + "[" * 5000 + " </search>", Invalid(QUERY_TOO_LONG)),  # not JSON: one long query
    ('<search> ["", " "] </search>', Invalid(EMPTY_QUERY)),
    ("<search> ok, " + "x" * 501 + " </search>", Invalid(QUERY_TOO_LONG)),
]


@pytest.mark.parametrize(("text", "expected"), RAG_MQ_PARSE)
def test_rag_r1_multi_query_parse(text: str, expected) -> None:
    assert get_protocol("rag_r1", multi_query=True).parse(text) == expected


def test_rag_r1_single_query_keeps_commas_and_option_max_queries() -> None:
    assert get_protocol("rag_r1").parse("<search> a, b </search>") == Search(("a, b",))
    p = get_protocol("rag_r1", multi_query=True, max_queries=2)
    assert p.max_queries == 2
    assert p.parse("<search> a, b, c </search>") == Search(("a", "b"))
    assert "up to two queries" in p.instruction("Q?")
    with pytest.raises(ValueError, match="comma"):
        p.format_search(["a, b"])


@pytest.mark.parametrize("name", SEARCHING)
def test_stop_strings_end_a_search_call(name: str) -> None:
    p = get_protocol(name)
    assert p.stop_strings == (p.search_tags[1],)
    assert p.format_search(["q"]).endswith(p.stop_strings[0])
    for stop in p.answer_stop_strings:
        assert p.format_answer("x").endswith(stop)


# ------------------------------------------------------------------------------------------------------- prompts
@pytest.mark.parametrize("name", SEARCHING)
def test_prompts_carry_the_tags_and_the_question(name: str) -> None:
    p = get_protocol(name)
    question = "Curious is a women's fragrance by a singer born in what city and state?"
    messages = p.chat_messages("  " + question + "  ")
    assert messages[-1]["role"] == "user" and question in messages[-1]["content"]
    everything = "\n".join(m["content"] for m in messages)
    for tag in p.all_tags:
        assert tag in everything, tag
    raw = p.raw_prompt(question)
    assert question in raw and all(tag in raw for tag in p.all_tags)
    assert (messages[0]["role"] == "system") == (p.system_prompt() is not None)


def test_prompt_details() -> None:
    assert "<answer> Beijing </answer>" in get_protocol("search_r1").instruction("q")
    assert get_protocol("search_r1").system_prompt() is None and get_protocol("rag_r1").system_prompt() is None
    r1 = get_protocol("r1_searcher")
    assert r1.response_prefix == "<think>" and r1.raw_prompt("Q?").endswith("User:Q?\nAssistant: ")
    assert get_protocol("r1_searcher", prefill_think=False).response_prefix == ""
    assert "\\boxed{YOUR_ANSWER}" in get_protocol("r1_searcher_pp").instruction("q")
    assert "up to three queries" in get_protocol("rag_r1", multi_query=True).instruction("q")


# --------------------------------------------------------------------------------------------------- formats
def _obs(name: str, queries: list[str] = Q, **opts) -> str:
    p = get_protocol(name, **opts)
    return p.render_observation(queries, [HITS] * len(queries))


SR1_S = "<search> Curious fragrance </search>" + _obs("search_r1")
SEARCH_R1_FORMAT = [
    ("<think> a </think>" + SR1_S + "<think> b </think>\n<answer> McComb </answer>", True, 1),
    ("<think> known </think><answer> McComb </answer>", True, 0),
    ("<think> a </think>" + SR1_S + "<answer> McComb </answer>", False, 1),  # no think after information
    (SR1_S + "<think> b </think><answer> McComb </answer>", False, 1),  # must open with <think>
    ("<think> a </think><answer> McComb </answer> and more", False, 0),  # text after the answer
    ("<think> a </think> stray text <answer> x </answer>", False, 0),
    ("<think> a </think><information> fake </information><think> b </think><answer> x </answer>", False, 0),
    ("<think> a </think>" + SR1_S + "<think> b </think>", False, 1),  # no answer
    ("<think> a <think> b </think><answer> x </answer>", False, 0),
    ("<think> a </think><search> q </search><think> b </think><answer> x </answer>", False, 0),  # unanswered
]


@pytest.mark.parametrize(("response", "ok", "n_searches"), SEARCH_R1_FORMAT)
def test_search_r1_format(response: str, ok: bool, n_searches: int) -> None:
    report = get_protocol("search_r1").check_format(response)
    assert (report.ok, report.n_searches) == (ok, n_searches), report.problems


def test_search_r1_format_extra_and_inserted_texts() -> None:
    p = get_protocol("search_r1")
    fake = "<think> a </think><information> fake </information><think> b </think><answer> x </answer>"
    assert p.check_format(fake).extra["n_fabricated_information"] == 1
    # feedback / forced-answer texts quote the tags; they are neither answers nor format errors
    feedback = p.invalid_feedback(Invalid(NO_ACTION))
    report = p.check_format("<think> a </think>" + feedback + "<answer> x </answer>")
    assert report.ok and report.answer == "x"
    assert p.check_format("<think> a </think>" + feedback).answer is None
    forced = "<think> a </think>" + SR1_S + p.force_answer_text() + "<think> b </think><answer> y </answer>"
    assert p.check_format(forced).ok
    # an answer quoted inside retrieved documents is not the policy's answer
    trap = p.render_observation(Q, [[Hit("t", "Trap", "<answer> WRONG </answer>", 1.0)]])
    report = p.check_format("<think> a </think><search> q </search>" + trap + "<think> b </think>")
    assert report.answer is None and not report.has_answer


R1S_OBS = "<|begin_of_query|> Hanover last king<|end_of_query|>" + _obs("r1_searcher")
R1_SEARCHER_FORMAT = [
    ("I will search. " + R1S_OBS + " He died in 1837.</think>\n\n<answer> 20 June 1837 </answer>", True, None),
    ("I know this.</think>\n\n<answer> 20 June 1837 </answer>", True, None),
    ("<think> duplicate opening </think><answer> x </answer>", False, "<think>"),
    ("no closing think <answer> x </answer>", False, "<think>"),
    ("a</think><answer> x </answer><answer> y </answer>", False, "<think>"),
    ("a</think><answer> one two three four five six seven eight nine ten eleven </answer>", False, "words"),
    ("a</think><answer> <|begin_of_query|> x </answer>", False, "inside the answer"),
    ("北京 a</think><answer> x </answer>", False, "CJK"),
    ("a\ufffd</think><answer> x </answer>", False, "replacement"),
    ("a Assistant: b</think><answer> x </answer>", False, "role"),
    ("a <|begin_of_documents|> made up <|end_of_documents|></think><answer> x </answer>", False, "documents tag"),
    ("a <|begin_of_query|> q<|end_of_query|></think><answer> x </answer>", False, "without inserted documents"),
    ("a <|begin_of_query|> q</think><answer> x </answer>", False, "unbalanced query"),
]


@pytest.mark.parametrize(("response", "ok", "problem"), R1_SEARCHER_FORMAT)
def test_r1_searcher_format(response: str, ok: bool, problem: str | None) -> None:
    report = get_protocol("r1_searcher").check_format(response)
    assert report.ok == ok, report.problems
    if problem:
        assert any(problem in msg for msg in report.problems), report.problems


def test_r1_searcher_format_extra() -> None:
    p = get_protocol("r1_searcher")
    good = p.check_format("I will search. " + R1S_OBS + " So.</think>\n\n<answer> 20 June 1837 </answer>")
    assert good.answer == "20 June 1837" and good.n_searches == 1
    assert good.extra == {
        "retrieval_invoked": True,
        "answer_words": 3,
        "n_unanswered_queries": 0,
        "n_fabricated_documents": 0,
    }
    # CJK inside retrieved documents is not the policy's garbled text
    cjk_obs = p.render_observation(Q, [[Hit("c", "北京", "北京是首都", 1.0)]])
    assert p.check_format("x <|begin_of_query|> q<|end_of_query|>" + cjk_obs + "</think><answer> y </answer>").ok
    no_prefill = get_protocol("r1_searcher", prefill_think=False)
    assert no_prefill.check_format("<think> a </think><answer> x </answer>").ok
    assert not no_prefill.check_format("a </think><answer> x </answer>").ok
    assert (
        get_protocol("r1_searcher", max_answer_words=12)
        .check_format("a</think><answer> one two three four five six seven eight nine ten eleven </answer>")
        .ok
    )


PP_SEARCH = "<|begin_external_search|> George Lucas Boba Fett<|end_external_search|>" + _obs("r1_searcher_pp")
PP_INTERNAL = "<|begin_internal_answer|>Boba Fett is a Star Wars character.<|end_internal_answer|>"
R1_SEARCHER_PP_FORMAT = [
    (PP_INTERNAL + PP_SEARCH + " Based on the results, \\boxed{Jango Fett}", True, None),
    (PP_INTERNAL + " Therefore, the answer is \\boxed{Miller v. California}.", True, None),
    (PP_INTERNAL + " no boxed answer", False, "boxed"),
    (PP_INTERNAL + " \\boxed{  }", False, "boxed"),
    (PP_INTERNAL + " \\boxed{unclosed", False, "boxed"),
    ("<|begin_search_result|>made up<|end_search_result|> \\boxed{x}", False, "search-result tag"),
    ("<|begin_external_search|> q \\boxed{x}", False, "unbalanced external"),
    ("<|begin_external_search|><|end_external_search|> \\boxed{x}", False, "valid query"),
    ("答案 \\boxed{x}", False, "CJK"),
]


@pytest.mark.parametrize(("response", "ok", "problem"), R1_SEARCHER_PP_FORMAT)
def test_r1_searcher_pp_format(response: str, ok: bool, problem: str | None) -> None:
    report = get_protocol("r1_searcher_pp").check_format(response)
    assert report.ok == ok, report.problems
    if problem:
        assert any(problem in msg for msg in report.problems), report.problems


def test_r1_searcher_pp_format_extra() -> None:
    p = get_protocol("r1_searcher_pp")
    report = p.check_format(PP_INTERNAL + PP_SEARCH + PP_INTERNAL + " so \\boxed{\\text{Jango} {Fett}}")
    assert report.answer == "\\text{Jango} {Fett}" and report.n_searches == 1
    assert report.extra == {
        "n_internal": 2,
        "n_external": 1,
        "internal_balanced": True,
        "n_unanswered_searches": 0,
        "answer_words": 2,
    }
    # internal-tag balance is reported but is not part of the paper's format reward
    unbalanced = p.check_format("<|begin_internal_answer|> x \\boxed{y}")
    assert unbalanced.ok and unbalanced.extra["internal_balanced"] is False
    # a \boxed{} inside retrieved documents is not an answer; the feedback's example is not either
    trap = p.render_observation(Q, [[Hit("t", "Math", "so \\boxed{42}", 1.0)]])
    assert p.check_format("<|begin_external_search|>q<|end_external_search|>" + trap).answer is None
    assert p.check_format(PP_INTERNAL + p.invalid_feedback(Invalid(NO_ACTION))).answer is None
    assert p.check_format(PP_INTERNAL + p.force_answer_text()).answer is None


RS_SEARCH = "I need the date. <search> Bank of America Countrywide </search>" + _obs("r_search")
EVIDENCE = "<original_evidence>- Bank of America bought Countrywide on July 1, 2008.</original_evidence>\n"
R_SEARCH_FORMAT = [
    # response, ok, searched, answer_ok, evidence_ok, evidence_without_search
    (RS_SEARCH + EVIDENCE + "<answer> July 1, 2008 </answer>", True, True, True, True, False),
    ("I know it. <answer> July 1, 2008 </answer>", True, False, True, False, False),
    (EVIDENCE + "<answer> x </answer>", True, False, True, True, True),  # Eq. 5 grants g_e; the code would not
    (RS_SEARCH + "<answer> x </answer>", False, True, True, False, False),
    (RS_SEARCH + EVIDENCE + EVIDENCE + "<answer> x </answer>", False, True, True, False, False),
    (RS_SEARCH + "<original_evidence> </original_evidence><answer> x </answer>", False, True, True, False, False),
    (RS_SEARCH + EVIDENCE + "<answer> x </answer><answer> y </answer>", False, True, False, True, False),
    (RS_SEARCH + EVIDENCE + "<answer>  </answer>", False, True, False, True, False),
    (RS_SEARCH + EVIDENCE, False, True, False, True, False),
    ("<answer> x", False, False, False, False, False),
]


@pytest.mark.parametrize(("response", "ok", "searched", "answer_ok", "evidence_ok", "ev_no_search"), R_SEARCH_FORMAT)
def test_r_search_format_indicators(
    response: str, ok: bool, searched: bool, answer_ok: bool, evidence_ok: bool, ev_no_search: bool
) -> None:
    r = get_protocol("r_search").check_format(response)
    got = (r.ok, r.extra["searched"], r.extra["answer_ok"], r.extra["evidence_ok"], r.extra["evidence_without_search"])
    assert got == (ok, searched, answer_ok, evidence_ok, ev_no_search), r.problems


def test_r_search_evidence_text_and_position() -> None:
    p = get_protocol("r_search")
    r = p.check_format(RS_SEARCH + EVIDENCE + "<answer> July 1, 2008 </answer>")
    assert r.extra["evidence"] == "- Bank of America bought Countrywide on July 1, 2008."
    assert r.extra["has_evidence"] and r.extra["evidence_before_answer"] and r.answer == "July 1, 2008"
    two = p.check_format(RS_SEARCH + "<original_evidence>old</original_evidence>" + EVIDENCE + "<answer> x </answer>")
    assert two.extra["evidence"].startswith("- Bank of America")  # the last block, as the reward code reads it
    after = p.check_format(RS_SEARCH + "<answer> x </answer>" + EVIDENCE)
    assert after.ok and not after.extra["evidence_before_answer"]
    assert p.check_format("no evidence <answer> x </answer>").extra["evidence"] is None


def test_r_search_evidence_block_around_a_search_fails_the_format_but_keeps_the_policys_text() -> None:
    """Opened before a search and closed after its observation: not one evidence box (as an answer block around
    documents is none); the reader still gets the policy's own text in it, the documents left out."""
    p = get_protocol("r_search")
    r = p.check_format("<original_evidence>- a" + RS_SEARCH + "- b</original_evidence>\n<answer> x </answer>")
    assert (r.ok, r.extra["searched"], r.extra["answer_ok"], r.extra["evidence_ok"]) == (False, True, True, False)
    assert r.problems == ("after searching, the response needs exactly one non-empty <original_evidence> block",)
    # the observation's own block is left out; the blank lines the engine frames it with stay
    assert r.extra["evidence"] == "- aI need the date. <search> Bank of America Countrywide </search>\n\n\n\n- b"


RAG_MQ_S = "<search> Arthur's Magazine founding year, First for Women founding year </search>"
RAG_MQ_OBS = _obs("rag_r1", ["Arthur's Magazine founding year", "First for Women founding year"], multi_query=True)


def test_rag_r1_format() -> None:
    mq = get_protocol("rag_r1", multi_query=True)
    good = mq.check_format(
        "<think> compare </think>" + RAG_MQ_S + RAG_MQ_OBS + "<think> 1844 < 1989 </think><answer> Arthur's Magazine"
        " </answer>"
    )
    assert good.ok and good.n_searches == 1 and good.answer == "Arthur's Magazine"
    assert good.extra["n_queries"] == 2 and good.extra["queries_per_call"] == [2]
    four = "<search> a, b, c, d </search>"
    obs3 = mq.render_observation(["a", "b", "c"], [HITS] * 3)
    bad = mq.check_format("<think> x </think>" + four + obs3 + "<think> y </think><answer> z </answer>")
    assert not bad.ok and any("4 queries" in p for p in bad.problems)
    assert bad.extra["n_queries"] == 3
    sq = get_protocol("rag_r1")
    sq_obs = sq.render_observation(["a, b"], [HITS])
    report = sq.check_format(
        "<think> x </think><search> a, b </search>" + sq_obs + "<think> y </think><answer> z </answer>"
    )
    assert report.ok and report.extra["queries_per_call"] == [1]


# ------------------------------------------------------------------------------------------------------ registry
def test_registry_names_match_the_config_choices() -> None:
    from searchrl.config.extensions import NAMES, registered

    builtin = [n for n in PROTOCOLS if n not in registered("protocol")]
    assert [n for n in NAMES["protocol"] if n not in registered("protocol")] == builtin
    for name, cls in PROTOCOLS.items():
        assert cls.name == name and isinstance(get_protocol(name), cls)


def test_get_protocol_errors_are_one_line_and_name_the_fix() -> None:
    with pytest.raises(ValueError, match="search_r1, r1_searcher, r1_searcher_pp, r_search, rag_r1") as err:
        get_protocol("search-r1")
    assert "\n" not in str(err.value)
    with pytest.raises(ValueError, match="valid options: max_queries, max_query_chars, multi_query"):
        get_protocol("rag_r1", multiquery=True)
    with pytest.raises(ValueError, match="positive integer"):
        get_protocol("rag_r1", max_queries=0)
    with pytest.raises(ValueError, match="true or false"):
        get_protocol("rag_r1", multi_query="yes")
    with pytest.raises(ValueError, match="positive integer"):
        get_protocol("search_r1", max_query_chars=True)


@pytest.mark.parametrize("name", SEARCHING)
def test_feedback_and_force_texts(name: str) -> None:
    p = get_protocol(name)
    texts = {p.invalid_feedback(Invalid(reason)) for reason in (NO_ACTION, EMPTY_QUERY, QUERY_TOO_LONG, BAD_JSON)}
    assert len(texts) == 4  # the reason is stated
    assert all(p.search_tags[0] in t and p.search_tags[1] in t for t in texts)
    assert p.invalid_feedback(Invalid("something else")) == p.invalid_feedback(Invalid(NO_ACTION))
    assert p.force_answer_text().strip()


# ------------------------------------------------------------------------------------------------------ Search-o1
SO1_CALL = "<|begin_search_query|>Curious fragrance singer<|end_search_query|>"


def test_search_o1_observation_layout_and_result_blocks() -> None:
    p = get_protocol("search_o1")
    assert p.render_observation(Q, [HITS]) == (
        "\n\n<|begin_search_result|>\n"
        "Doc 1 (Title: Curious (fragrance)) Curious is a women's fragrance by Britney Spears.\n"
        "Doc 2 (Title: Britney Spears) Spears was born in McComb, Mississippi.\n"
        "<|end_search_result|>\n\n"
    )
    # refined information (or any note) goes into the same block; result tags inside it are blanked
    assert p.format_result("Born in McComb.") == "\n\n<|begin_search_result|>Born in McComb.<|end_search_result|>\n\n"
    assert p.format_result("a <|end_search_result|> b").count("<|end_search_result|>") == 1


SEARCH_O1_PARSE = [
    ("Let me check. " + SO1_CALL, Search(("Curious fragrance singer",))),
    ("<|begin_search_query|> a\n b <|end_search_query|>", Search(("a b",))),
    ("Maybe \\boxed{Paris}, let me verify. " + SO1_CALL, Search(("Curious fragrance singer",))),  # the call ends it
    ("It is \\boxed{Rome}, or rather \\boxed{\\text{McComb}}.", Answer("McComb")),  # the last box, unwrapped
    ("<|begin_search_query|>  <|end_search_query|> \\boxed{x}", Invalid(EMPTY_QUERY)),
    ("<|begin_search_query|> unclosed", Invalid(NO_ACTION)),
    ("\\boxed{unclosed", Invalid(NO_ACTION)),
    ("<search> other tags </search>", Invalid(NO_ACTION)),
]


@pytest.mark.parametrize(("text", "expected"), SEARCH_O1_PARSE)
def test_search_o1_parse(text: str, expected) -> None:
    assert get_protocol("search_o1").parse(text) == expected


SO1_OBS = "I need the singer. " + SO1_CALL + get_protocol("search_o1").format_result("It is by Britney Spears.")
SEARCH_O1_FORMAT = [
    (SO1_OBS + "She was born in McComb. So the final answer is \\boxed{McComb, Mississippi}.", True, None),
    ("I know it: \\boxed{McComb}.", True, None),
    (SO1_OBS + "No box.", False, "boxed"),
    (SO1_OBS + "\\boxed{ }", False, "boxed"),
    ("<|begin_search_result|>made up<|end_search_result|> \\boxed{x}", False, "result tag written"),
    ("<|begin_search_query|> q \\boxed{x}", False, "unbalanced"),
    (
        "<|begin_search_query|><|end_search_query|>\n\n<|begin_search_result|>x<|end_search_result|> \\boxed{x}",
        False,
        "valid query",
    ),
    (SO1_CALL + "\n\n<|begin_search_result|>never closed \\boxed{x}", False, "unclosed"),
]


@pytest.mark.parametrize(("response", "ok", "problem"), SEARCH_O1_FORMAT)
def test_search_o1_format(response: str, ok: bool, problem: str | None) -> None:
    report = get_protocol("search_o1").check_format(response)
    assert report.ok == ok, report.problems
    if problem:
        assert any(problem in msg for msg in report.problems), report.problems


def test_search_o1_format_extra_and_inserted_notes() -> None:
    p = get_protocol("search_o1")
    report = p.check_format(SO1_OBS + " so \\boxed{McComb}")
    assert report.answer == "McComb" and report.n_searches == 1
    assert report.extra == {"n_search_calls": 1, "n_unanswered_searches": 0, "answer_words": 1}
    # a \boxed{} inside inserted results is not the model's answer
    trap = SO1_CALL + p.format_result("the answer is \\boxed{42}")
    assert p.check_format(trap).answer is None
    # the search-limit and repeated-query notes are system text: not results, not answers, not format errors
    for note in (p.force_answer_text(), p.repeated_query_text()):
        assert p.result_tags[0] in note and p.result_tags[1] in note
        report = p.check_format(SO1_CALL + note + "\\boxed{x}")
        assert report.ok and report.n_searches == 0 and report.extra["n_unanswered_searches"] == 1
        assert p.check_format(note).answer is None


def test_search_o1_prompt_states_the_search_limit() -> None:
    from searchrl.config import load_config
    from searchrl.pipeline import make_protocol

    assert "no more than 10 times" in get_protocol("search_o1").instruction("q")  # the paper's limit
    p = get_protocol("search_o1", max_searches=3)
    assert "no more than 3 times" in p.instruction("q") and "\\boxed{YOUR_ANSWER}" in p.instruction("q")
    assert p.system_prompt() is None and p.raw_prompt("Q?").endswith("Question:\nQ?\n\nReasoning:")
    cfg = load_config("demo", ["rollout.protocol=search_o1", "rollout.max_searches=2"])
    assert make_protocol(cfg).max_searches == 2  # a recipe's search budget is the one the prompt states
    with pytest.raises(ValueError, match="positive integer"):
        get_protocol("search_o1", max_searches=0)


def test_r1_searcher_labels_difficulty_with_the_data_selection_prompt() -> None:
    """The paper's two system prompts: the RL one (single triple per query) and the instruct labeller's (decompose,
    reflect, brainstorm, verify, refine, revise); the R1-Searcher recipes' selection stages take the latter."""
    rl, selection = get_protocol("r1_searcher"), get_protocol("r1_searcher", prompt="selection")
    assert "single triple" in rl.system_prompt() and "single triple" not in selection.system_prompt()
    assert "brainstorming" in selection.system_prompt() and "<|begin_of_query|>" in selection.system_prompt()
    with pytest.raises(ValueError, match="use rl or selection"):
        get_protocol("r1_searcher", prompt="other")
    from searchrl.config import load_config

    for recipe in ("r1_searcher_stage1", "r1_searcher_stage2"):
        stages = [s for s in load_config(recipe).pipeline if s.op == "select-difficulty"]
        assert stages and all(s.set == {"rollout.options.prompt": "selection"} for s in stages)
