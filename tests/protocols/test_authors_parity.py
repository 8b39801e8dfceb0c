"""Our turn parsing and observation layouts against the papers' own rollout code, case by case.

Every expected value below was obtained by running the authors' code on the case (their code is not vendored here),
so a change to a parser or a layout that breaks parity with a paper's rollout fails this table:

- Search-R1 ``search_r1/llm_agent/generation.py`` (``_postprocess_responses``: the generated turn is cut after its
  first ``</search>``, else its first ``</answer>``; ``postprocess_predictions``: the regex
  ``<(search|answer)>(.*?)</\\1>``, content stripped; ``execute_predictions``, ``_passages2string``); R-Search
  ``src/train/generation.py`` and RAG-R1 ``rag_r1/llm_agent/generation_sq.py`` parse alike, and RAG-R1's
  multi-query ``generation_mq.py`` splits the content in ``batch_search``;
- R1-Searcher ``experience_maker.py::_generate_vllm_with_retrieve`` (training: vLLM stops at ``<|end_of_query|>``,
  the query is the text after the last ``<|begin_of_query|>``, ``"`` deleted, whitespace collapsed) and
  ``evaluation/eval_search_loacl.py`` (which also stops at ``</answer>``);
- Search-o1 ``scripts/run_search_o1.py`` (stops at ``<|end_search_query|>``; ``extract_between``).

A turn here is the raw continuation cut after the first of our stop strings, as the rollout engine's generator
cuts it. Where we knowingly differ (queries with whitespace collapsed and protocol tags removed, an empty query
invalid, the innermost of nested opening tags, a stray ``</answer>`` ending the turn; ``docs/recipes.md``,
"Remaining differences from each paper") no case is listed.
"""

from __future__ import annotations

import json

import pytest

from searchrl.protocols import Answer, Invalid, Search, get_protocol
from searchrl.retrieval.base import Hit


def turn(protocol, raw: str) -> str:
    """``raw`` as the engine's turn: cut right after the first stop string (search call or answer end)."""
    ends = [raw.find(s) + len(s) for s in (*protocol.stop_strings, *protocol.answer_stop_strings) if s in raw]
    return raw[: min(ends)] if ends else raw


# raw continuation -> the authors' action (Search-R1, R-Search and RAG-R1 single-query return the same): a query,
# an answer, or None for their invalid action
SEARCH_R1_FAMILY = [
    (
        "<think> I need her birthplace </think> <search> Britney Spears birthplace </search>",
        Search,
        "Britney Spears birthplace",
    ),
    (
        "<search>Britney Spears birthplace</search>\n\n<information> made up </information>",
        Search,
        "Britney Spears birthplace",
    ),
    ("<answer> McComb, Mississippi </answer>", Answer, "McComb, Mississippi"),
    ("<answer>McComb</answer> and more <search> q </search>", Answer, "McComb"),
    ("<search> first </search> <search> second </search>", Search, "first"),
    ("<search> q </search> <answer> a </answer>", Search, "q"),
    ("<answer> unclosed <search> q </search>", Search, "q"),
    ("<answer></answer>", Answer, ""),
    ("<answer> a, b </answer> trailing text", Answer, "a, b"),
    ("</search> <answer> a </answer>", None, None),
    ("<search> a </answer>", None, None),
    ("<search> unclosed", None, None),
    ("<SEARCH> q </SEARCH>", None, None),
    ("<search > q </search >", None, None),
    ("no tags at all", None, None),
    ("", None, None),
]


@pytest.mark.parametrize("name", ["search_r1", "r_search", "rag_r1"])
@pytest.mark.parametrize(("raw", "kind", "content"), SEARCH_R1_FAMILY, ids=[c[0][:40] for c in SEARCH_R1_FAMILY])
def test_search_r1_family_turns_parse_as_the_authors_loop(name: str, raw: str, kind, content) -> None:
    p = get_protocol(name)
    action = p.parse(turn(p, raw))
    if kind is None:
        assert isinstance(action, Invalid)
    else:
        assert action == (Search((content,)) if kind is Search else Answer(content))


RAG_R1_MULTI_QUERY = [
    (
        "<search> Arthur's Magazine founding year, First for Women founding year </search>",
        ["Arthur's Magazine founding year", "First for Women founding year"],
    ),
    ("<search>a,b</search>", ["a", "b"]),
    ("<search> a, b ,, c </search>", ["a", "b", "c"]),
    ("<search> [Jr.] Sammy Davis, Rat Pack </search>", ["[Jr.] Sammy Davis", "Rat Pack"]),
    ("<search> single query </search>", ["single query"]),
]


@pytest.mark.parametrize(("raw", "queries"), RAG_R1_MULTI_QUERY)
def test_rag_r1_multi_query_splits_as_the_authors_batch_search(raw: str, queries: list[str]) -> None:
    p = get_protocol("rag_r1", multi_query=True)
    assert p.parse(turn(p, raw)) == Search(tuple(queries))


R1_SEARCHER_QUERIES = [
    ('Let me check. <|begin_of_query|> "Hanover" last king<|end_of_query|>', "Hanover last king"),
    ('<|begin_of_query|> "a","b" <|end_of_query|>', "a,b"),
    ('<|begin_of_query|> O"Neil <|end_of_query|>', "ONeil"),
    ("<|begin_of_query|> a <|begin_of_query|> b <|end_of_query|>", "b"),
    ("<|begin_of_query|>  first\n\tsecond <|end_of_query|> after", "first second"),
]


@pytest.mark.parametrize(("raw", "query"), R1_SEARCHER_QUERIES)
def test_r1_searcher_queries_as_the_authors_training_loop(raw: str, query: str) -> None:
    p = get_protocol("r1_searcher")
    assert p.parse(turn(p, raw)) == Search((query,))


@pytest.mark.parametrize("raw", ["<|begin_of_query|> q", "plain reasoning", "<search> q </search>"])
def test_r1_searcher_turns_without_a_query_do_not_search(raw: str) -> None:
    p = get_protocol("r1_searcher")  # the authors' loop finishes the sample; ours is no search either
    assert not isinstance(p.parse(turn(p, raw)), Search)


@pytest.mark.parametrize(
    ("raw", "expected"),
    [  # the authors' evaluation loop, which stops at </answer> as we do (its answer is then stripped by the scorer)
        ("done.</think>\n\n<answer> 20 June 1837 </answer>", Answer("20 June 1837")),
        ("<answer> a <answer> b </answer>", Answer("b")),
        ("<|begin_of_query|> q <|end_of_query|> <answer> a </answer>", Search(("q",))),
        ("<answer> x <|begin_of_query|> q <|end_of_query|>", Search(("q",))),
    ],
)
def test_r1_searcher_turns_as_the_authors_evaluation_loop(raw: str, expected) -> None:
    p = get_protocol("r1_searcher")
    assert p.parse(turn(p, raw)) == expected


@pytest.mark.parametrize(
    ("raw", "query"),
    [
        ("<|begin_search_query|> Winter Harbour composer <|end_search_query|>", "Winter Harbour composer"),
        ("\\boxed{A} then <|begin_search_query|> q <|end_search_query|>", "q"),
        ("<|begin_search_query|> q1 <|end_search_query|> <|begin_search_query|> q2 <|end_search_query|>", "q1"),
        ("So \\boxed{Paris}.", None),
    ],
)
def test_search_o1_queries_as_the_authors_loop(raw: str, query: str | None) -> None:
    p = get_protocol("search_o1")
    action = p.parse(turn(p, raw))
    assert action == Search((query,)) if query else not isinstance(action, Search)


# --------------------------------------------------------------------------------------------- observations
HITS = [
    Hit("1", "Curious (fragrance)", "Curious is a fragrance.", 2.0),
    Hit("2", "Britney Spears", "Spears was born in McComb.", 1.0),
]
# the authors' text inserted after a search call, for these two documents (wiki-18's contents '"Title"\ntext' for
# Search-R1 and R-Search; 'title text' passages for RAG-R1 and R1-Searcher, whose code prints contents whole)
AUTHORS_OBSERVATIONS = {
    "search_r1": '\n\n<information>Doc 1(Title: "Curious (fragrance)") Curious is a fragrance.\n'
    'Doc 2(Title: "Britney Spears") Spears was born in McComb.</information>\n\n',
    "r_search": '\n\n<observation>(Title: "Curious (fragrance)") Curious is a fragrance.\n'
    '(Title: "Britney Spears") Spears was born in McComb.</observation>\n\n',
    "rag_r1": "\n<information>\nDoc 1: Curious (fragrance) Curious is a fragrance.\n"
    "Doc 2: Britney Spears Spears was born in McComb.\n</information>\n",
    "r1_searcher": "\n\n<|begin_of_documents|>\n(1)Curious (fragrance) Curious is a fragrance.\n"
    "(2)Britney Spears Spears was born in McComb.\n<|end_of_documents|>\n\n",
}
AUTHORS_EMPTY_OBSERVATIONS = {
    "search_r1": "\n\n<information></information>\n\n",
    "r_search": "\n\n<observation></observation>\n\n",
    "r1_searcher": "\n\n<|begin_of_documents|>\nNone<|end_of_documents|>\n\n",
}


@pytest.mark.parametrize("name", list(AUTHORS_OBSERVATIONS))
def test_observations_are_laid_out_as_the_authors_code(name: str) -> None:
    assert get_protocol(name).render_observation(["q"], [HITS]) == AUTHORS_OBSERVATIONS[name]


@pytest.mark.parametrize("name", list(AUTHORS_EMPTY_OBSERVATIONS))
def test_a_search_that_finds_nothing_is_laid_out_as_the_authors_code(name: str) -> None:
    assert get_protocol(name).render_observation(["q"], [[]]) == AUTHORS_EMPTY_OBSERVATIONS[name]


def test_rag_r1_multi_query_observation_is_the_authors_json() -> None:
    obs = get_protocol("rag_r1", multi_query=True).render_observation(["q", "r"], [HITS, HITS[:1]])
    docs = ["Doc 1: Curious (fragrance) Curious is a fragrance.\nDoc 2: Britney Spears Spears was born in McComb."]
    payload = {"query": ["q", "r"], "documents": [docs[0], "Doc 1: Curious (fragrance) Curious is a fragrance."]}
    assert obs == "\n<information>\n" + json.dumps(payload, indent=2) + "\n</information>\n"


# ------------------------------------------------------------------------------------------------------ prompts
@pytest.mark.parametrize(("name", "options"), [("search_r1", {}), ("rag_r1", {}), ("rag_r1", {"multi_query": True})])
def test_search_r1_family_prompt_ends_the_question_with_a_question_mark(name: str, options: dict) -> None:
    # Search-R1's and RAG-R1's data scripts (and Search-R1's infer.py) strip the question and add "?" when it does
    # not end with one, before the prompt is built (NQ's questions have none)
    p = get_protocol(name, **options)
    assert p.instruction("  who got the first nobel prize in physics ").endswith(
        "Question: who got the first nobel prize in physics?\n"
    )
    assert p.instruction("Who wrote Hamlet?").endswith("Question: Who wrote Hamlet?\n")
    # ours: an imperative question keeps its full stop (the authors' rule would write "Hamlet.?")
    assert p.instruction("Name the author of Hamlet.").endswith("Question: Name the author of Hamlet.\n")
    kept = get_protocol(name, question_mark=False, **options)
    assert kept.instruction("who wrote hamlet").endswith("Question: who wrote hamlet\n")


def test_r_search_prompt_without_a_chat_template_is_the_authors_join() -> None:
    # R-Search's rl_dataset.py and eval/main.py, for a tokenizer without a chat template: the system template, a
    # newline, then the question as it is
    p = get_protocol("r_search")
    assert p.raw_prompt(" Who wrote Hamlet? ") == p.system_prompt() + "\nWho wrote Hamlet?"
