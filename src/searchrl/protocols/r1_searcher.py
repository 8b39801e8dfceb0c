"""R1-Searcher (Song et al. 2025, arXiv 2503.05592; spec 001): think/answer tags, begin/end-of-query calls.

Tags (spec 001 §1.1, the pipe-delimited spellings of the prompts and case study): reasoning in ``<think>``,
final answer in ``<answer>``, search calls ``<|begin_of_query|> keywords <|end_of_query|>`` made while thinking,
documents inserted as ``<|begin_of_documents|> ... <|end_of_documents|>``.

Prompts (§1.2, §11.2): instruct models get a system message and the question as the user turn; base models get
raw text ending ``User:{question}\\nAssistant:``. As in the authors' code the assistant turn is pre-filled with
``<think>`` (``response_prefix``; option ``prefill_think``, default True). Observation layout (§11.4): the
documents follow the query as ``"\\n\\n<|begin_of_documents|>\\n(1){doc}\\n(2){doc}\\n<|end_of_documents|>\\n\\n"``,
where ``{doc}`` is ``title text`` (``None`` in place of the documents when nothing was found). Queries have ``"``
deleted and whitespace collapsed (as in the code).

Option ``prompt: selection`` gives the instruct model that labels difficulty the paper's data-selection prompt.

Deviations: our own prompt wording; the paper's rollout simply ends when a turn has no query (code); here such a
turn is ``Invalid`` and the engine may insert ``invalid_feedback`` (the engine's budget still bounds the loop).
"""

from __future__ import annotations

import re
from typing import Any

from searchrl.protocols._tags import (
    TagProtocol,
    blocks,
    count_tag,
    garbled_problems,
    hit_contents,
    unanswered_searches,
    word_count,
)
from searchrl.protocols.base import FormatReport, format_scheme
from searchrl.retrieval.base import Hit

THINK = ("<think>", "</think>")
ANSWER = ("<answer>", "</answer>")
QUERY = ("<|begin_of_query|>", "<|end_of_query|>")
DOCUMENTS = ("<|begin_of_documents|>", "<|end_of_documents|>")

_FORMAT_RULES = (
    "Put your reasoning inside <think> </think> and the final answer inside <answer> </answer>, like this: "
    '"<think> reasoning goes here </think>\n\n<answer> final answer goes here </answer>". '
)
_SEARCH_RULES = (
    'for facts {who} unsure of, using the form "<|begin_of_query|> search query (keywords only, for example '
    '"keyword_1 keyword_2 ...")<|end_of_query|>". Each query must cover only a single triple. The search system '
    'then returns what it found to {whom} in the form "<|begin_of_documents|> ...search results... '
    '<|end_of_documents|>".'
)

SYSTEM_PROMPT = (
    "You are a helpful assistant. For every question, first work through the reasoning in your mind and then give "
    "the final answer. "
    + _FORMAT_RULES
    + "While reasoning, you may search "
    + _SEARCH_RULES.format(who="you are", whom="you")
)

#: the paper's "System Prompt for Data Selection" (§1.2a), in our words: the instruct model that labels difficulty
#: reasons by decomposing, reflecting, brainstorming, verifying, refining and revising, and searches with keywords
#: (no single-triple rule); option ``prompt: selection``.
SELECTION_PROMPT = (
    "You are a helpful assistant. For every question, first work through the reasoning in your mind and then give "
    "the final answer. "
    + _FORMAT_RULES
    + "Reason by breaking the question down, reflecting, brainstorming, checking, refining and revising. When you "
    'are unsure of a fact you may search, using the form "<|begin_of_query|> search query (keywords only) here '
    '<|end_of_query|>". The search system then returns what it found to you in the form '
    '"<|begin_of_documents|> ...search results... <|end_of_documents|>".'
)

BASE_PROMPT = (
    "The User asks a question and the Assistant answers it. The Assistant first works through the reasoning in its "
    "mind and then gives the User the final answer. "
    + _FORMAT_RULES.replace("Put your", "The Assistant puts its")
    + "While reasoning, the Assistant may search "
    + _SEARCH_RULES.format(who="it is", whom="the Assistant")
)


class R1SearcherProtocol(TagProtocol):
    name = "r1_searcher"
    stop_strings = (QUERY[1],)
    answer_stop_strings = (ANSWER[1],)
    search_tags = QUERY
    result_tags = DOCUMENTS
    answer_tags = ANSWER
    other_tags = THINK
    document_start = re.compile(r"(?m)^\((?P<n>\d+)\)")
    #: cjk_garbled: CJK characters in the policy's text break the format, as in the authors' reward code (false
    #: for questions in Chinese or Japanese)
    option_defaults = {
        **TagProtocol.option_defaults,
        "prefill_think": True,
        "max_answer_words": 10,
        "prompt": "rl",
        "cjk_garbled": True,
    }

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        if self.options["prompt"] not in ("rl", "selection"):
            raise ValueError(f"r1_searcher option prompt={self.options['prompt']!r}: use rl or selection")
        self.prefill_think: bool = self.options["prefill_think"]
        self.max_answer_words: int = self.options["max_answer_words"]
        self.response_prefix = THINK[0] if self.prefill_think else ""

    # ----------------------------------------------------------------------------------------------- prompt
    def system_prompt(self) -> str:
        return SELECTION_PROMPT if self.options["prompt"] == "selection" else SYSTEM_PROMPT

    def instruction(self, question: str) -> str:
        return question.strip()

    def raw_prompt(self, question: str) -> str:
        tail = "Assistant: " if self.prefill_think else "Assistant:"
        return f"{BASE_PROMPT}\n\nUser:{question.strip()}\n{tail}"

    def format_search(self, queries: list[str] | tuple[str, ...]) -> str:
        return f"{QUERY[0]} {queries[0]}{QUERY[1]}"

    def format_answer(self, answer: str) -> str:
        return f"{THINK[1]}\n\n{ANSWER[0]} {answer} {ANSWER[1]}"

    # ---------------------------------------------------------------------------------------------- actions
    def _clean_query(self, raw: str) -> str:
        # The authors' rollout deletes double quotes from queries before retrieval (spec 001 §11.4): '"a","b"' is
        # searched as 'a,b'.
        return super()._clean_query(raw.replace('"', ""))

    def render_observation(self, queries: list[str], hits: list[list[Hit]]) -> str:
        hits = self._prepared(queries, hits)
        # a search that finds nothing reads "None", as in the authors' rollout
        docs = "".join(f"({i}){hit_contents(h)}\n" for i, h in enumerate(hits[0], start=1)) or "None"
        return f"\n\n{DOCUMENTS[0]}\n{docs}{DOCUMENTS[1]}\n\n"

    def _feedback_how(self) -> str:
        return (
            f"To search, I should write {QUERY[0]} keywords {QUERY[1]}; to finish, I should close my reasoning with "
            f"{THINK[1]} and write the final answer between {ANSWER[0]} and {ANSWER[1]}."
        )

    def force_answer_text(self) -> str:
        return (
            f"\n\nI have reached the search limit, so I will stop searching, close my reasoning with {THINK[1]} and "
            f"give the final answer between {ANSWER[0]} and {ANSWER[1]}.\n\n"
        )

    # ----------------------------------------------------------------------------------------------- format
    def check_format(self, response: str) -> FormatReport:
        """The format rules of R1-Searcher's rewards (spec 001 §3.1; the same rules give Stage-1's +0.5 and
        Stage-2's -2 penalty, §3.2), made operational as in the authors' reward code (§11.3).

        ``response`` is the text after the prompt, so the pre-filled ``<think>`` (``response_prefix``, or the chat
        template's own opening) is put back in front before checking (``scan_response``), as the authors' reward
        code does.

        * Rule 1 (think and answer tags; only a short answer): exactly one ``<think>`` (first), one ``</think>``,
          one ``<answer>`` and one ``</answer>``, in that order, forming one answer block (not cut by inserted
          feedback); the answer holds no query or document tag and at most ``max_answer_words`` (10) words.
        * Rule 2 (no garbled content): no CJK (unless the option ``cjk_garbled`` is false), control/replacement
          characters or chat-role markers in the policy's text (``garbled_problems``).
        * Rule 3 (queries in query tags; no documents without retrieval): query tags balanced, every query
          answered by inserted documents, no documents tag written by the policy.

        ``answer`` = last complete answer block (stripped). ``n_searches`` = retrievals made (Stage-1's
        R_retrieval needs ``n_searches >= 1``; also ``extra["retrieval_invoked"]``). ``extra`` also has
        ``answer_words``, ``n_unanswered_queries``, ``n_fabricated_documents``.
        """
        events = self.scan_response(response)
        problems: list[str] = []

        # Rule 1: think and answer structure.
        tags = [ev.value for ev in events if ev.kind == "tag" and ev.value in (*THINK, *ANSWER)]
        first = next((ev for ev in events if ev.kind == "tag" or ev.value.strip()), None)
        answers = blocks(events, *ANSWER, across_documents=False).contents
        if tags != [THINK[0], THINK[1], ANSWER[0], ANSWER[1]] or first is None or first.value != THINK[0]:
            problems.append("expected exactly <think> ... </think> then <answer> ... </answer>, <think> first")
        elif not answers:  # the one answer block was cut by inserted feedback: the engine never read an answer
            problems.append("the answer block is cut by inserted text")
        answer = answers[-1].strip() if answers else None
        words = word_count(answer) if answer is not None else None
        if answer is not None:
            if any(tag in answer for tag in (*QUERY, *DOCUMENTS)):
                problems.append("query or document tags inside the answer")
            if words > self.max_answer_words:
                problems.append(f"answer has {words} words (at most {self.max_answer_words})")
        # Rule 2: garbled content.
        problems.extend(garbled_problems(events, cjk=self.options["cjk_garbled"]))
        # Rule 3: queries and documents.
        n_searches = sum(1 for ev in events if ev.kind.startswith("obs"))
        n_fabricated = count_tag(events, DOCUMENTS[0]) + count_tag(events, DOCUMENTS[1])
        n_unanswered = unanswered_searches(events, QUERY[1])
        if not blocks(events, *QUERY).balanced:
            problems.append("unbalanced query tags")
        if n_unanswered:
            problems.append(f"{n_unanswered} query call(s) without inserted documents")
        if n_fabricated:
            problems.append("documents tag written by the policy (documents without retrieval)")
        if any(ev.kind == "obs_unclosed" for ev in events):
            problems.append("unclosed documents block")
        return FormatReport(
            ok=not problems,
            has_answer=answer is not None,
            answer=answer,
            n_searches=n_searches,
            problems=tuple(problems),
            extra={
                "retrieval_invoked": n_searches >= 1,
                "answer_words": words,
                "n_unanswered_queries": n_unanswered,
                "n_fabricated_documents": n_fabricated,
            },
        )


# ------------------------------------------------------------------------------------------- format rewards


@format_scheme("r1_searcher_stage1")
def stage1_format(
    report: FormatReport, n_searches: int, evidence: str | None, *, value: float = 0.5, require_answer: bool = True
) -> float:
    """Stage 1 (spec 001 §3.1 Eq. 2): ``value`` (0.5) if the format check passes, else 0.

    ``require_answer`` [O]: an empty answer block (``<answer> </answer>``) fails too. Rule 1 asks for the final answer
    inside the answer tags; the authors' code counts tags only. Stage 1 has no answer reward, so without this a
    rollout that never answers earns the stage's full reward (retrieval + format); ``false`` gives the code's rule.
    Stage 2 needs no such rule: an empty answer scores F1 0 there."""
    answered = report.answer is not None and bool(report.answer.strip())
    return value if report.ok and (answered or not require_answer) else 0.0


@format_scheme("r1_searcher_stage2")
def stage2_format(report: FormatReport, n_searches: int, evidence: str | None, *, penalty: float = -2.0) -> float:
    """Stage 2 (spec 001 §3.2 Eq. 3): 0 if the format check passes, else ``penalty`` (paper -2; the authors'
    released Llama stage-2 code uses -1, §11.3)."""
    return 0.0 if report.ok else penalty
