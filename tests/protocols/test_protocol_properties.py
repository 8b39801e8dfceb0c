"""Property tests: every protocol's parser and format checker on random and adversarial text.

Parsers never raise and always return Search / Answer / Invalid; search queries are non-empty, clean (no tags,
no runs of whitespace) and within the limits; the format checker never raises and its report is self-consistent;
well-formed calls written with ``format_search`` parse back to the same queries; rendered observations are seen
as retrievals by ``check_format`` whatever the documents contain.
"""

from __future__ import annotations

import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from searchrl.protocols import INVALID_REASONS, PROTOCOLS, Answer, FormatReport, Invalid, Search, get_protocol
from searchrl.protocols._tags import TagProtocol, boxed_spans
from searchrl.retrieval.base import Hit

CONFIGS = [
    ("search_r1", {}),
    ("r1_searcher", {}),
    ("r1_searcher", {"prefill_think": False}),
    ("r1_searcher_pp", {}),
    ("r_search", {}),
    ("rag_r1", {}),
    ("rag_r1", {"multi_query": True}),
    ("rag_r1", {"multi_query": True, "max_queries": 2, "max_query_chars": 40}),
    ("search_o1", {}),
    ("tool_call", {}),
    ("tool_call", {"max_queries": 1, "max_query_chars": 40}),
    ("reason", {}),
    ("rag", {}),
]
#: the protocols that search during a rollout (the others never write a search call)
SEARCHING = [(name, opts) for name, opts in CONFIGS if PROTOCOLS[name].searches]
IDS = [name + "".join(f"-{k}={v}" for k, v in opts.items()) for name, opts in CONFIGS]
SEARCHING_IDS = [i for i, (name, _) in zip(IDS, CONFIGS, strict=True) if PROTOCOLS[name].searches]
PROPS = settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _protocol(name: str, opts: dict) -> TagProtocol:
    p = get_protocol(name, **opts)
    assert isinstance(p, TagProtocol)
    return p


def _fragments(p: TagProtocol) -> list[str]:
    tags = list(p.all_tags)
    partial = [t[: len(t) // 2] for t in tags] + [t[1:] for t in tags]
    json_bits = ['{"query": [', '["a", "b"]', "[", "]", "{", "}", '"', ",", ", ,", "null", '{"query": "x"}', "\\"]
    misc = [
        "\\boxed{",
        "\\boxed{x}",
        "}",
        " ",
        "\n",
        "\n\n",
        "Paris",
        "capital of France",
        "é",
        "北京",
        "\ufffd",
        "\x00",
    ]
    return tags * 3 + partial + json_bits + misc


def _adversarial(p: TagProtocol) -> st.SearchStrategy[str]:
    piece = st.one_of(st.sampled_from(_fragments(p)), st.text(max_size=12))
    return st.lists(piece, max_size=40).map("".join)


def _check_action(p: TagProtocol, action) -> None:
    assert isinstance(action, Search | Answer | Invalid)
    if isinstance(action, Search):
        assert 1 <= len(action.queries) <= p.max_queries
        for q in action.queries:
            assert q and q == q.strip() and len(q) <= p.max_query_chars
            assert " ".join(q.split()) == q  # whitespace collapsed
            assert not any(tag in q for tag in p.all_tags)
    elif isinstance(action, Answer):
        assert action.text == action.text.strip()
    else:
        assert action.reason in INVALID_REASONS


def _check_report(report: FormatReport) -> None:
    assert isinstance(report, FormatReport)
    assert report.has_answer == (report.answer is not None)
    assert report.ok == (not report.problems)
    assert report.n_searches >= 0
    assert all(isinstance(x, str) and x for x in report.problems)


@pytest.mark.parametrize(("name", "opts"), CONFIGS, ids=IDS)
def test_parser_and_checker_on_random_unicode(name: str, opts: dict) -> None:
    p = _protocol(name, opts)

    @PROPS
    @given(st.text(max_size=300))
    def run(text: str) -> None:
        _check_action(p, p.parse(text))
        _check_report(p.check_format(text))

    run()


@pytest.mark.parametrize(("name", "opts"), CONFIGS, ids=IDS)
def test_parser_and_checker_on_tag_soup(name: str, opts: dict) -> None:
    """Random interleavings of the protocol's tags, partial tags, JSON garbage, braces and unicode."""
    p = _protocol(name, opts)

    @PROPS
    @given(_adversarial(p))
    def run(text: str) -> None:
        _check_action(p, p.parse(text))
        _check_report(p.check_format(text))
        # inserted feedback / forced-answer texts never create an answer or a search by themselves
        for inserted in (p.invalid_feedback(Invalid(r)) for r in INVALID_REASONS):
            assert p.check_format(inserted).answer is None

    run()


@pytest.mark.parametrize(("name", "opts"), SEARCHING, ids=SEARCHING_IDS)
def test_format_search_round_trip(name: str, opts: dict) -> None:
    """Any clean query set written with ``format_search`` after tag-free text parses back to itself."""
    p = _protocol(name, opts)
    forbidden = set(',"[{') if getattr(p, "multi_query", False) else set('"')
    query = (
        st.text(st.characters(blacklist_categories=("Cs", "Cf")), min_size=1, max_size=60)  # Cf: dropped from queries
        .map(lambda s: " ".join(s.split()))
        .filter(lambda s: s and not (set(s) & forbidden) and "\\boxed{" not in s)
        .filter(lambda s: not any(t in s or t.strip("<>|/") in s for t in p.all_tags))
    )
    prefix = st.text(st.characters(blacklist_characters="<>{}\\"), max_size=80)

    @PROPS
    @given(st.lists(query, min_size=1, max_size=p.max_queries), prefix)
    def run(queries: list[str], before: str) -> None:
        action = p.parse(before + p.format_search(queries))
        if any(len(q) > p.max_query_chars for q in queries):
            assert action == Invalid("query_too_long")
        else:
            assert action == Search(tuple(queries))

    run()


@pytest.mark.parametrize(("name", "opts"), SEARCHING, ids=SEARCHING_IDS)
def test_rendered_observations_count_as_retrievals(name: str, opts: dict) -> None:
    """think/search/observation/answer built from the protocol's own pieces: one retrieval per call, whatever
    the documents contain (tags, braces, answers of their own)."""
    p = _protocol(name, opts)
    doc_text = st.one_of(st.text(max_size=40), _adversarial(p))
    hit = st.builds(Hit, id=st.just("d"), title=st.text(max_size=15), text=doc_text, score=st.just(1.0))

    @PROPS
    @given(st.lists(st.lists(hit, max_size=3), min_size=1, max_size=3))
    def run(calls: list[list[Hit]]) -> None:
        response = _opening(p)
        for i, hits in enumerate(calls):
            queries = [f"query {i}"]
            response += p.format_search(queries) + p.render_observation(queries, [hits]) + _step(p)
        response += _closing(p) + p.format_answer("Paris")
        report = p.check_format(response)
        assert report.n_searches == len(calls)
        assert report.answer == "Paris"
        assert report.ok, report.problems

    run()


def _opening(p: TagProtocol) -> str:
    if p.name in ("search_r1", "rag_r1"):
        return "<think> plan </think>"
    if p.name == "r1_searcher" and not p.response_prefix:
        return "<think> Let me look. "
    return "Let me look. "


def _step(p: TagProtocol) -> str:
    return "<think> next </think>" if p.name in ("search_r1", "rag_r1") else " Next step. "


def _closing(p: TagProtocol) -> str:
    if p.name == "r_search":
        return "<original_evidence>- a fact</original_evidence>\n"
    return ""


@pytest.mark.parametrize(("name", "opts"), CONFIGS, ids=IDS)
def test_huge_adversarial_inputs_stay_fast(name: str, opts: dict) -> None:
    p = _protocol(name, opts)
    open_s, close_s = p.search_tags
    texts = [
        open_s * 20_000,
        close_s * 20_000,
        (open_s + "x") * 10_000 + close_s,
        "\\boxed{" * 20_000,
        "{" * 50_000 + "}" * 49_999,
        (p.result_tags[0] + p.result_tags[1]) * 5_000,
        (close_s + p.result_tags[0]) * 5_000,
        "a" * 200_000,
    ]
    start = time.perf_counter()
    for text in texts:
        _check_action(p, p.parse(text))
        _check_report(p.check_format(text))
    assert time.perf_counter() - start < 10.0


def test_every_registered_protocol_is_covered() -> None:
    assert {name for name, _ in CONFIGS} == set(PROTOCOLS)


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet="\\boxed{}ab ", max_size=60))
def test_boxed_spans_match_a_reference_brace_matcher(text: str) -> None:
    """The one-pass stack matcher agrees with a slow scan-forward reference on random brace soup."""
    expected = []
    for start in range(len(text)):
        if text.startswith("\\boxed{", start):
            depth, i = 1, start + len("\\boxed{")
            while i < len(text) and depth:
                depth += {"{": 1, "}": -1}.get(text[i], 0)
                i += 1
            if depth == 0:
                expected.append((start, i, text[start + len("\\boxed{") : i - 1]))
    assert sorted((s, e, text[cs:ce]) for s, e, cs, ce in boxed_spans(text)) == sorted(expected)
