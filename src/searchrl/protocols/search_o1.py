"""Search-o1 (Li et al. 2025, arXiv 2501.05366): a prompted reasoning model that searches mid-thought.

Tags (as in the paper and its code): a search call is ``<|begin_search_query|> query <|end_search_query|>``
(generation stops at the closing tag); what comes back is inserted as ``<|begin_search_result|> ...
<|end_search_result|>``; the final answer is the last complete ``\\boxed{...}`` of the response.

Search-o1 inserts the output of its Reason-in-Documents step (a separate call to the same model that condenses the
retrieved documents), not the documents themselves; that step lives in the evaluation method ``search_o1``
(``searchrl.eval.search_o1.ReasonInDocuments``). This protocol's ``render_observation`` inserts the raw documents, so
the plain ``agent`` method with ``rollout.protocol: search_o1`` is the paper's agentic-RAG ablation (RAgent, search
without Reason-in-Documents); ``format_result`` wraps any text (refined information, notes) in the result tags.

Prompt: one user message (the paper puts instruction and question together), our own wording, the paper's tags,
the search limit (option ``max_searches``, default 10 as in the paper) and the ``\\boxed{}`` answer form. Layout
(as in the code): ``"\\n\\n<|begin_search_result|>{text}<|end_search_result|>\\n\\n"`` right after the call.
Like Search-o1, a repeated query is not searched again (``repeated_query_text``) and a call past the search limit
gets a note that the limit is reached (``force_answer_text``).

``parse``: a complete search call in the turn is the action (the turn ends at it; a ``\\boxed{}`` before it was a
tentative answer the model chose to check); otherwise the turn's last complete ``\\boxed{}`` is the answer.
"""

from __future__ import annotations

import re
from typing import Any

from searchrl.protocols._tags import (
    NO_ACTION,
    TagProtocol,
    blocks,
    count_tag,
    first_action,
    last_box,
    last_policy_box,
    unanswered_searches,
    unbox,
    word_count,
)
from searchrl.protocols.base import Action, Answer, FormatReport, Invalid
from searchrl.retrieval.base import Hit

QUERY = ("<|begin_search_query|>", "<|end_search_query|>")
RESULT = ("<|begin_search_result|>", "<|end_search_result|>")

INSTRUCTION = (
    "You are a reasoning assistant who can consult a search engine in the middle of your reasoning, so that your "
    "answer rests on facts you have checked.\n\n"
    "To search, write {qo} your query {qc}. The system runs the search, reads the documents it finds and gives you "
    "the information in them that helps with your query, in the form {ro} ...helpful information... {rc}.\n"
    "Search as many times as you need, but no more than {limit} times in total. When you have what you need, go "
    "on reasoning.\n\n"
    "Example:\n"
    'Question: "In which city was the composer of the opera Winter Harbour born?"\n'
    "Reasoning: I first need to find out who composed Winter Harbour.\n"
    "{qo}Winter Harbour opera composer{qc}\n\n"
    "{ro}Winter Harbour was composed by Ella Marsh.{rc}\n\n"
    "Now I need Ella Marsh's birthplace.\n"
    "{qo}Ella Marsh composer birthplace{qc}\n\n"
    "{ro}...{rc}\n\n"
    "(and so on, until the final answer)\n\n"
    "Remember: a search starts with {qo} and ends with {qc}; the system alone writes the {ro} {rc} blocks.\n\n"
    "Answer the question below. Think it through step by step, and give your final answer in the form "
    "\\boxed{{YOUR_ANSWER}}.\n\n"
    "Question:\n{question}\n"
)


class SearchO1Protocol(TagProtocol):
    name = "search_o1"
    stop_strings = (QUERY[1],)
    search_tags = QUERY
    result_tags = RESULT
    document_start = re.compile(r"Doc (?P<n>\d+) \(Title: ")
    answer_tags = None
    option_defaults = {**TagProtocol.option_defaults, "max_searches": 10}

    @classmethod
    def options_from_rollout(cls, rollout: Any) -> dict[str, Any]:
        return {"max_searches": rollout.max_searches}  # its prompt states the search limit

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self.max_searches: int = self.options["max_searches"]  # stated in the prompt; the engine enforces it

    # ----------------------------------------------------------------------------------------------- prompt
    def instruction(self, question: str) -> str:
        return INSTRUCTION.format(
            qo=QUERY[0], qc=QUERY[1], ro=RESULT[0], rc=RESULT[1], limit=self.max_searches, question=question.strip()
        )

    def raw_prompt(self, question: str) -> str:
        return f"{self.instruction(question)}\nReasoning:"

    def format_search(self, queries: list[str] | tuple[str, ...]) -> str:
        return f"{QUERY[0]}{queries[0]}{QUERY[1]}"

    def format_answer(self, answer: str) -> str:
        return f"So the final answer is \\boxed{{{answer}}}."

    # ---------------------------------------------------------------------------------------------- actions
    def parse(self, turn_text: str) -> Action:
        """A complete search call if the turn has one, else the turn's last complete ``\\boxed{...}``."""
        search = first_action(turn_text, {"search": QUERY})
        if search is not None:
            return self._search_from(search.content)
        box = last_box(turn_text)
        return Invalid(NO_ACTION) if box is None else Answer(unbox(box) or "")

    # ------------------------------------------------------------------------------------------ inserted texts
    def format_result(self, text: str) -> str:
        """Any text as an inserted result block (result tags inside it are blanked so it cannot end early)."""
        for tag in RESULT:
            text = text.replace(tag, " ")
        return f"\n\n{RESULT[0]}{text}{RESULT[1]}\n\n"

    def render_observation(self, queries: list[str], hits: list[list[Hit]]) -> str:
        hits = self._prepared(queries, hits)
        docs = "".join(f"\nDoc {i} (Title: {h.title}) {h.text}" for i, h in enumerate(hits[0], start=1))
        return self.format_result(docs + "\n")

    def repeated_query_text(self) -> str:
        """Inserted instead of results when the model repeats a query it already searched."""
        return self.format_result("\nThis query has already been searched; use the information found earlier.\n")

    def force_answer_text(self) -> str:
        return self.format_result(
            "\nThe search limit has been reached, so no more searches will be run. Continue from the information "
            "above and give the final answer as \\boxed{answer}.\n"
        )

    def _feedback_how(self) -> str:
        return (
            f"To search, I should write {QUERY[0]} query {QUERY[1]}; to finish, I should give the final answer as "
            "\\boxed{answer}."
        )

    def _inserted_texts(self) -> list[str]:
        return sorted({*super()._inserted_texts(), self.repeated_query_text()}, key=len, reverse=True)

    # ----------------------------------------------------------------------------------------------- format
    def check_format(self, response: str) -> FormatReport:
        """The conventions the prompt asks for (Search-o1 is prompted, so it has no format reward of its own).

        * search calls: query tags balanced and every call holds a valid query (non-empty, at most
          ``max_query_chars``);
        * result blocks only from the system: no result tag written by the model, no unclosed result block;
        * a final answer: a complete, non-empty ``\\boxed{...}`` in the model's text.

        ``answer`` = the last complete ``\\boxed{}`` outside inserted results (stripped). ``n_searches`` = inserted
        result blocks (the limit and repeated-query notes are not counted). ``extra``: ``n_search_calls``,
        ``n_unanswered_searches`` (calls with nothing inserted after them, e.g. past the search limit),
        ``answer_words``.
        """
        events = self.scan_response(response)
        problems: list[str] = []
        calls = blocks(events, *QUERY)
        if not calls.balanced:
            problems.append("unbalanced search-query tags")
        if any(isinstance(self._search_from(c), Invalid) for c in calls.contents):
            problems.append("search call without a valid query")
        if count_tag(events, RESULT[0]) or count_tag(events, RESULT[1]):
            problems.append("search-result tag written by the model (results without a search)")
        if any(ev.kind == "obs_unclosed" for ev in events):
            problems.append("unclosed search-result block")
        answer = unbox(last_policy_box(events))
        if not answer:
            problems.append("no non-empty \\boxed{} final answer")
        return FormatReport(
            ok=not problems,
            has_answer=answer is not None,
            answer=answer,
            n_searches=sum(1 for ev in events if ev.kind.startswith("obs")),
            problems=tuple(problems),
            extra={
                "n_search_calls": len(calls.contents),
                "n_unanswered_searches": unanswered_searches(events, QUERY[1]),
                "answer_words": word_count(answer) if answer is not None else None,
            },
        )
