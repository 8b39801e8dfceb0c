"""RAG-R1 (Tan et al. 2025, arXiv 2507.02962; spec 004): Search-R1's tags, single- and multi-query modes.

Same tags as Search-R1 (spec 004 §1.1). Options:

* ``multi_query`` (default False): one ``<search>`` may carry several comma-separated queries
  (``<search> query_1,query_2 </search>``, §1.4); they are retrieved in one batched call and the
  ``<information>`` block maps each query to its documents as JSON:
  ``{"query": [q1, q2], "documents": ["Doc 1: ... Doc 2: ...", "Doc 1: ..."]}`` (``json.dumps(indent=2)``).
* ``max_queries`` (default 3, the paper's limit): more queries in one call are cut to the first ``max_queries``
  (the paper enforces the limit only through the prompt and the authors' code not at all; keeping the first
  ones serves the model's plan and still caps retrieval cost). ``check_format`` flags such calls.
* ``max_query_chars`` (default 500): see ``TagProtocol``; ``question_mark`` (default True): see Search-R1 (RAG-R1's
  data script adds the ``?`` too).

Layouts follow the authors' code (§1.4 [CODE]): each query's documents are
``"".join(f"Doc {i}: {contents}\\n").strip()``; the observation is ``"\\n<information>\\n" + body +
"\\n</information>\\n"``, where body is the JSON (multi-query) or the documents string (single-query).
Query splitting is the code's ``split(',')``, strip, drop empties, so a query cannot contain a comma. Lenient
additions: the full-width comma ``，`` (the same character in the width of Chinese and Japanese text, which a model
writing such queries types) separates queries too (the ideographic ``、`` does not: it also joins words inside one
Japanese phrase); a call whose content is a JSON list of strings (models imitating the information block) is accepted;
JSON of another shape is ``Invalid("bad_json")``; content that only starts like JSON (``[Jr.] Sammy Davis, Rat
Pack``) is split on commas, as the code splits everything.

Deviations: our own prompt wording; JSON is written with ``ensure_ascii=False`` so non-ASCII titles stay readable
to the model (the code escapes them); no format reward exists in the paper (§3), so ``check_format`` is
Search-R1's structural check plus the multi-query counts.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

from searchrl.protocols._tags import BAD_JSON, Event, blocks, hit_contents
from searchrl.protocols.base import Invalid
from searchrl.protocols.search_r1 import INSTRUCTION as SINGLE_QUERY_INSTRUCTION
from searchrl.protocols.search_r1 import SearchR1Protocol
from searchrl.retrieval.base import Hit

#: what separates the queries of a multi-query call: the comma and its full-width and small forms (NFKC: a comma)
_COMMAS = re.compile("[,\uff0c\ufe50]")
_NUMBER_WORDS = {2: "two", 3: "three", 4: "four", 5: "five", 6: "six", 7: "seven", 8: "eight", 9: "nine", 10: "ten"}

MULTI_QUERY_INSTRUCTION = (
    "Answer the question below. Every time you receive new information, first reason about it inside <think> and "
    "</think>. If that reasoning shows you are missing some knowledge, you can query a search engine by writing "
    "<search> query_1,query_2 </search>, and the top results for each query will come back between <information> "
    "and </information>. You may search as often as you need, with up to {n} queries in each search. When no more "
    "outside knowledge is needed, give the answer directly inside <answer> and </answer>, without a detailed "
    "explanation, e.g. <answer> Beijing </answer>. Question: {question}\n"
)


class RAGR1Protocol(SearchR1Protocol):
    name = "rag_r1"
    document_start = re.compile(r"(?m)^Doc (?P<n>\d+): ")
    option_defaults = {**SearchR1Protocol.option_defaults, "multi_query": False, "max_queries": 3}

    @classmethod
    def options_from_rollout(cls, rollout: Any) -> dict[str, Any]:
        return {"max_queries": rollout.max_queries_per_call}

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self.multi_query: bool = self.options["multi_query"]
        self.max_queries = self.options["max_queries"] if self.multi_query else 1

    def instruction(self, question: str) -> str:
        if not self.multi_query:
            return self._retag(SINGLE_QUERY_INSTRUCTION).format(question=self.prompt_question(question))
        n = _NUMBER_WORDS.get(self.max_queries, str(self.max_queries))
        return self._retag(MULTI_QUERY_INSTRUCTION).format(n=n, question=self.prompt_question(question))

    def format_search(self, queries: list[str] | tuple[str, ...]) -> str:
        if not self.multi_query:
            return super().format_search(queries)
        if any(_COMMAS.search(q) for q in queries):
            raise ValueError("multi-query search calls separate queries with commas; a query cannot contain one")
        s_open, s_close = self.search_tags
        return f"{s_open} {', '.join(queries)} {s_close}"

    def _split_queries(self, content: str) -> list[str] | Invalid:
        if not self.multi_query:
            return [content]
        stripped = content.strip()
        if stripped[:1] in ("[", "{"):
            try:
                loaded = json.loads(stripped)
            except (ValueError, RecursionError):  # "[Jr.] Sammy Davis, Rat Pack": the authors' comma split
                return _COMMAS.split(content)
            if isinstance(loaded, dict):
                loaded = loaded.get("query", loaded.get("queries"))
            if not isinstance(loaded, list) or not all(isinstance(q, str) for q in loaded):
                return Invalid(BAD_JSON)
            return loaded
        return _COMMAS.split(content)

    def _docs(self, hits: list[Hit]) -> str:
        return "".join(f"Doc {i}: {hit_contents(h)}\n" for i, h in enumerate(hits, start=1)).strip()

    def render_observation(
        self, queries: list[str], hits: list[list[Hit]], fit_docs: Callable[[str], str] | None = None
    ) -> str:
        """``fit_docs`` cuts each query's documents string (the engine's ``rollout.max_obs_tokens_per_query``: the
        authors' code truncates each query's documents to 1,000 tokens before building the JSON)."""
        hits = self._prepared(queries, hits)
        fit = fit_docs or (lambda text: text)
        if self.multi_query:
            payload = {"query": list(queries), "documents": [fit(self._docs(h)) for h in hits]}
            body = json.dumps(payload, indent=2, ensure_ascii=False)
        else:
            body = fit(self._docs(hits[0]))
        r_open, r_close = self.result_tags
        return f"\n{r_open}\n{body}\n{r_close}\n"

    def split_documents(self, observation: str) -> list[tuple[str, bool]]:
        """As :meth:`Protocol.split_documents`; a multi-query observation's JSON is decoded: each query's line, then
        its documents (these parts show the observation but do not join back to its JSON text)."""
        r_open, r_close = self.result_tags
        body = observation.strip().removeprefix(r_open).removesuffix(r_close)
        try:
            payload = json.loads(body) if body.lstrip().startswith("{") else None
        except (ValueError, RecursionError):
            payload = None
        queries, docs = (payload.get("query"), payload.get("documents")) if isinstance(payload, dict) else (0, 0)
        if not (isinstance(queries, list) and isinstance(docs, list) and len(queries) == len(docs)):
            return super().split_documents(observation)
        parts = [(r_open + "\n", False)]
        for q, text in zip(queries, docs, strict=True):
            parts += [(f"query: {q}\n", False), *super().split_documents(str(text) + "\n")]
        return [*parts, (r_close, False)]

    def _feedback_how(self) -> str:
        if not self.multi_query:
            return super()._feedback_how()
        return self._retag(
            f"To search, I should write up to {self.max_queries} comma-separated queries between <search> and "
            "</search>; to give the final answer, I should write it between <answer> and </answer>."
        )

    def _extra(self, events: list[Event]) -> tuple[dict[str, Any], list[str]]:
        """``n_queries`` (all queries of complete search calls), ``queries_per_call``; problems: calls that do not
        parse (empty / too long / bad JSON) and, in multi-query mode, calls with more than ``max_queries``."""
        per_call: list[int] = []
        problems: list[str] = []
        for content in blocks(events, *self.search_tags).contents:
            split = self._split_queries(content)
            if isinstance(split, Invalid):
                problems.append(f"search call is invalid ({split.reason})")
                per_call.append(0)
                continue
            queries = [q for q in (self._clean_query(raw) for raw in split) if q]
            if not queries:
                problems.append("search call is invalid (empty_query)")
            elif any(len(q) > self.max_query_chars for q in queries):
                problems.append("search call is invalid (query_too_long)")
            if len(queries) > self.max_queries and self.multi_query:
                problems.append(f"search call with {len(queries)} queries (at most {self.max_queries})")
            per_call.append(len(queries))
        return {"n_queries": sum(min(n, self.max_queries) for n in per_call), "queries_per_call": per_call}, problems
