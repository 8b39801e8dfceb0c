"""Search-R1 (Jin et al. 2025, arXiv 2503.09516; spec 003): think / search / information / answer.

The model reasons inside ``<think></think>``, calls the search engine with ``<search> query </search>``, receives
the top documents inside ``<information></information>`` and ends with ``<answer> ... </answer>`` (spec 003 §2.1).

Layouts follow the authors' code (spec 003 §2.4-2.5 [R]):

* observation: ``"\\n\\n<information>" + docs.strip() + "</information>\\n\\n"`` with one
  ``"Doc {i}(Title: \"{title}\") {text}\\n"`` per document (the title quoted, as wiki-18's contents hold it);
* the prompt is one user message (no system prompt), the same text for base and instruct models; the question is
  stripped and gets a ``?`` when it does not end a sentence, as the authors' data scripts do (option
  ``question_mark``, default True; they also add one after a ``.`` or ``!``);
* parse: the first complete ``<search>``/``<answer>`` block of the turn, content stripped.

Deviations: the prompt is our own wording (same tags, rules and example answer); queries have their whitespace
collapsed and protocol tags removed; an empty query or one over ``max_query_chars`` is invalid; the block is the one
that closes first, read from its innermost opening tag (the authors' regex starts at the outermost one), and
generation also stops at ``</answer>`` (the authors' loop cuts after the first ``</search>`` even when an
``</answer>`` comes before it). These touch malformed turns only (``docs/recipes.md``).

The paper uses no format reward (§4), so ``check_format`` is a structural check, taken from the state machine the
authors later added to their repository (``qa_em_format.is_valid_sequence``; not part of the paper): see
``SearchR1Protocol.check_format``.
"""

from __future__ import annotations

import re
from typing import Any

from searchrl.protocols._tags import (
    Event,
    TagProtocol,
    blocks,
    count_tag,
    quoted_title,
    unanswered_searches,
)
from searchrl.protocols.base import FormatReport
from searchrl.retrieval.base import Hit

THINK = ("<think>", "</think>")
SEARCH = ("<search>", "</search>")
INFORMATION = ("<information>", "</information>")
ANSWER = ("<answer>", "</answer>")

INSTRUCTION = (
    "Answer the question below. Every time you receive new information, first reason about it inside <think> and "
    "</think>. If that reasoning shows you are missing some knowledge, you can query a search engine by writing "
    "<search> query </search>, and the top results will come back between <information> and </information>. You "
    "may search as often as you need. When no more outside knowledge is needed, give the answer directly inside "
    "<answer> and </answer>, without a detailed explanation, e.g. <answer> Beijing </answer>. "
    "Question: {question}\n"
)


#: what ends a question already, so that no ``?`` is added (``?`` and the CJK full-width marks too)
_SENTENCE_END = "?.!？。！"


class SearchR1Protocol(TagProtocol):
    name = "search_r1"
    stop_strings = ("</search>",)
    answer_stop_strings = ("</answer>",)
    search_tags = SEARCH
    result_tags = INFORMATION
    answer_tags = ANSWER
    other_tags = THINK
    document_start = re.compile(r"Doc (?P<n>\d+)\(Title: ")
    think_tags = THINK
    option_defaults = {**TagProtocol.option_defaults, "question_mark": True}

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """A subclass that renames the search or answer tags stops generation at its own closing tags."""
        super().__init_subclass__(**kwargs)
        if "think_tags" in vars(cls) and "other_tags" not in vars(cls):
            cls.other_tags = cls.think_tags
        if "search_tags" in vars(cls) and "stop_strings" not in vars(cls):
            cls.stop_strings = (cls.search_tags[1],)
        if "answer_tags" in vars(cls) and "answer_stop_strings" not in vars(cls):
            cls.answer_stop_strings = (cls.answer_tags[1],)

    def _retag(self, template: str) -> str:
        """One of this module's constant texts with Search-R1's tags replaced by this class's own, in one pass (a
        subclass that renames its tags, e.g. ``search_tags = ("<query>", "</query>")``, gets prompts and feedback in
        them). Never applied to text that holds the model's or the user's words."""
        mine = (*self.think_tags, *self.search_tags, *self.result_tags, *self.answer_tags)
        ours = dict(zip((*THINK, *SEARCH, *INFORMATION, *ANSWER), mine, strict=True))
        if all(k == v for k, v in ours.items()):
            return template
        return re.sub("|".join(map(re.escape, sorted(ours, key=len, reverse=True))), lambda m: ours[m[0]], template)

    def prompt_question(self, question: str) -> str:
        """The question as the prompt states it: stripped, ending with ``?`` unless option ``question_mark`` is off
        (the authors' scripts add one to every question that lacks it, e.g. NQ's). One that ends a sentence
        otherwise ("Name the film's director.") is left as written, where the authors' rule would write ``.?``."""
        q = question.strip()
        return q + "?" if self.options["question_mark"] and q and q[-1] not in _SENTENCE_END else q

    def instruction(self, question: str) -> str:
        return self._retag(INSTRUCTION).format(question=self.prompt_question(question))

    def format_search(self, queries: list[str] | tuple[str, ...]) -> str:
        s_open, s_close = self.search_tags
        return f"{s_open} {queries[0]} {s_close}"

    def format_answer(self, answer: str) -> str:
        a_open, a_close = self.answer_tags
        return f"{a_open} {answer} {a_close}"

    def format_reasoning(self, text: str) -> str:
        t_open, t_close = self.think_tags
        return f"{t_open} {text} {t_close}\n"

    def _docs(self, hits: list[Hit]) -> str:
        return "".join(f"Doc {i}(Title: {quoted_title(h)}) {h.text}\n" for i, h in enumerate(hits, start=1))

    def render_observation(self, queries: list[str], hits: list[list[Hit]]) -> str:
        hits = self._prepared(queries, hits)
        r_open, r_close = self.result_tags
        return f"\n\n{r_open}{self._docs(hits[0]).strip()}{r_close}\n\n"

    def _feedback_how(self) -> str:
        return self._retag(
            "To search, I should write the query between <search> and </search>; to give the final answer, I "
            "should write it between <answer> and </answer>."
        )

    def force_answer_text(self) -> str:
        return self._retag(
            "\nI have used up my searches, so after a last bit of reasoning I will give the final answer between "
            "<answer> and </answer>.\n"
        )

    # ------------------------------------------------------------------------------------------- format
    def _sequence_problem(self, events: list[Event]) -> str | None:
        """Walk the events through the think -> (search -> information -> think)* -> answer state machine.

        Rules (authors' later ``is_valid_sequence``): the response starts with ``<think>``; a think block is
        followed by a search call or the answer; a search call is followed by its inserted information; after
        information comes a new think block; only whitespace between blocks; nothing after ``</answer>``. Feedback
        or a hint may come between blocks, but a block it interrupts is broken (the engine reads each turn on its
        own, so an answer cut by feedback is no answer).
        Returns the first violation, or None.
        """
        t_open, t_close = self.think_tags
        s_open, s_close = self.search_tags
        a_open, a_close = self.answer_tags
        moves = {
            ("start", t_open): "in_think",
            ("information", t_open): "in_think",
            ("in_think", t_close): "after_think",
            ("after_think", s_open): "in_search",
            ("in_search", s_close): "after_search",
            ("after_think", a_open): "in_answer",
            ("in_answer", a_close): "end",
        }
        state = "start"
        for ev in events:
            if ev.kind == "obs":
                if state != "after_search":
                    return f"inserted documents in state {state}"
                state = "information"
            elif ev.kind == "obs_unclosed":
                return f"unclosed {self.result_tags[0]} block"
            elif ev.kind == "inserted" and state.startswith("in_"):
                return f"inserted text inside an open block (state {state})"
            elif ev.kind == "tag":
                nxt = moves.get((state, ev.value))
                if nxt is None:
                    return f"unexpected {ev.value} in state {state}"
                state = nxt
            elif ev.value.strip() and state not in ("in_think", "in_search", "in_answer"):
                return f"text outside any tag in state {state}"
        if state != "end":
            return f"response does not end with a complete {a_open} block (state {state})"
        return None

    def _extra(self, events: list[Event]) -> tuple[dict[str, Any], list[str]]:
        """Protocol-specific counts and problems added to the report (none for Search-R1)."""
        return {}, []

    def check_format(self, response: str) -> FormatReport:
        """Structural check (Search-R1 has no format reward, spec 003 §4); ``ok`` iff ``_sequence_problem`` is None.

        ``answer`` = content of the last complete ``<answer>`` block written by the policy (stripped), as in the
        authors' EM scorer (spec 003 §4 [R]); ``n_searches`` = search calls answered by inserted documents.
        ``extra``: ``n_think`` (complete think blocks), ``n_unanswered_searches``, ``n_fabricated_information``
        (``<information>`` tags the policy wrote itself).
        """
        events = self.scan_response(response)
        answers = blocks(events, *self.answer_tags, across_documents=False).contents
        answer = answers[-1].strip() if answers else None
        problems = []
        seq = self._sequence_problem(events)
        if seq:
            problems.append(seq)
        extra, more = self._extra(events)
        problems.extend(more)
        extra.update(
            n_think=len(blocks(events, *self.think_tags).contents),
            n_unanswered_searches=unanswered_searches(events, self.search_tags[1]),
            n_fabricated_information=count_tag(events, self.result_tags[0]),
        )
        return FormatReport(
            ok=not problems,
            has_answer=answer is not None,
            answer=answer,
            n_searches=sum(1 for ev in events if ev.kind.startswith("obs")),
            problems=tuple(problems),
            extra=extra,
        )
