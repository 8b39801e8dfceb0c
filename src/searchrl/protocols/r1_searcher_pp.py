"""R1-Searcher++ (Song et al. 2025, arXiv 2505.17005; spec 000): internal steps vs external search, boxed answer.

For every sub-question the model either writes what it already knows inside
``<|begin_internal_answer|> ... <|end_internal_answer|>`` (plain text, not an environment action) or searches with
``<|begin_external_search|> query <|end_external_search|>`` (the ``Search`` action); documents come back inside
``<|begin_search_result|> ... <|end_search_result|>``; the final answer is ``\\boxed{...}`` (spec 000 §1.1).

Prompt: the paper's "System Prompt for Generation" becomes our system prompt (own wording, same two tools, same
tags and rules); the question follows in the user turn after ``Question:`` (§1.2; chat placement is not stated).
Observation layout (App. C Table 6, §1.3), right after the closing search tag:
``" <|begin_search_result|>\\n(1)title text\\n(2)...\\n<|end_search_result|>"``; the model continues right
after the closing result tag. Stop string: ``<|end_external_search|>`` (implied; not stated). The answer is the
last complete ``\\boxed{}`` with nested braces handled; ``parse`` returns a turn's complete external search when it
has one (generation pauses at its end tag, as in the paper's loop), else its last complete ``\\boxed{}``.
"""

from __future__ import annotations

import re

from searchrl.protocols._tags import (
    NO_ACTION,
    TagProtocol,
    blocks,
    count_tag,
    first_action,
    garbled_problems,
    hit_contents,
    last_box,
    last_policy_box,
    unanswered_searches,
    unbox,
    word_count,
)
from searchrl.protocols.base import Action, Answer, FormatReport, Invalid, format_scheme
from searchrl.retrieval.base import Hit

INTERNAL = ("<|begin_internal_answer|>", "<|end_internal_answer|>")
EXTERNAL = ("<|begin_external_search|>", "<|end_external_search|>")
RESULT = ("<|begin_search_result|>", "<|end_search_result|>")

SYSTEM_PROMPT = (
    "You are a reasoning assistant. For each question, think the problem through before giving the final answer. "
    "Split a complex question into simple sub-questions and settle them one at a time. For every sub-question you "
    "MUST use one of these two tools:\n"
    "1. **Internal reasoning:** if what you already know is enough for the sub-question, answer it directly in the "
    "form <|begin_internal_answer|>your reasoning and answer<|end_internal_answer|>. Use this for every important "
    "step that rests only on your own knowledge.\n"
    "2. **External search:** if your own knowledge is not enough, may be out of date, or needs checking against "
    "outside sources, you MUST search in the form <|begin_external_search|>your search query<|end_external_search|>. "
    "The system then returns results in the form <|begin_search_result|>...results...<|end_search_result|>, "
    "which will help you answer the sub-question.\n"
    "Keep in mind:\n"
    "- Whenever a sub-question needs explaining, checking or looking up, first judge whether your own knowledge is "
    "enough. **Prefer your own knowledge.**\n"
    "- Show reasoning that rests on your own knowledge inside <|begin_internal_answer|>... <|end_internal_answer|>.\n"
    "- Use <|begin_external_search|>... <|end_external_search|> **only** when outside information is truly needed.\n"
    "- Wait for the system to supply <|begin_search_result|>... <|end_search_result|>. **Never** write these result "
    "tags yourself.\n"
    "- After a search or an internal step, keep working towards the final answer."
)

INSTRUCTION = (
    "Answer the question below, following every rule above about the two tools. Give your final answer in the form "
    "\\boxed{{YOUR_ANSWER}}.\nQuestion: {question}"
)


class R1SearcherPPProtocol(TagProtocol):
    name = "r1_searcher_pp"
    stop_strings = (EXTERNAL[1],)
    search_tags = EXTERNAL
    result_tags = RESULT
    answer_marker = "\\boxed"
    answer_tags = None
    other_tags = INTERNAL
    document_start = re.compile(r"(?m)^\((?P<n>\d+)\)")
    #: cjk_garbled: as R1-Searcher's (false for questions in Chinese or Japanese)
    option_defaults = {**TagProtocol.option_defaults, "cjk_garbled": True}

    def system_prompt(self) -> str:
        return SYSTEM_PROMPT

    def instruction(self, question: str) -> str:
        return INSTRUCTION.format(question=question.strip())

    def format_search(self, queries: list[str] | tuple[str, ...]) -> str:
        return f"{EXTERNAL[0]}{queries[0]}{EXTERNAL[1]}"

    def format_answer(self, answer: str) -> str:
        return f"Therefore, the answer is \\boxed{{{answer}}}."

    def format_recalled(self, text: str) -> str:
        return f"{INTERNAL[0]}{text}{INTERNAL[1]}\n"

    def marked_blocks(self) -> dict[str, tuple[str, str]]:
        return {"internal": INTERNAL}

    def parse(self, turn_text: str) -> Action:
        """The turn's first complete external search call (generation pauses at its end tag, so a box written
        before it is a tentative answer the search goes on from), else its last complete ``\\boxed{...}`` (the
        answer :meth:`check_format` scores)."""
        search = first_action(turn_text, {"search": EXTERNAL})
        if search is not None:
            return self._search_from(search.content)
        box = last_box(turn_text)
        return Invalid(NO_ACTION) if box is None else Answer(unbox(box) or "")

    def render_observation(self, queries: list[str], hits: list[list[Hit]]) -> str:
        hits = self._prepared(queries, hits)
        docs = "".join(f"({i}){hit_contents(h)}\n" for i, h in enumerate(hits[0], start=1))
        return f" {RESULT[0]}\n{docs}{RESULT[1]}"

    def _feedback_how(self) -> str:
        return (
            f"To look something up, I should write {EXTERNAL[0]}query{EXTERNAL[1]}; to finish, I should give the "
            "final answer as \\boxed{answer}."
        )

    def force_answer_text(self) -> str:
        return (
            "\nI have reached the search limit, so I will finish with what I know and give the final answer as "
            "\\boxed{answer}.\n"
        )

    def check_format(self, response: str) -> FormatReport:
        """The format reward's conditions (spec 000 §3.1, Eq. 3: 0 if all hold, -2 otherwise).

        1. Queries are inside the external-search tags: those tags are balanced and every call holds a valid
           query (non-empty, at most ``max_query_chars``).
        2. No documents without retrieval: no search-result tag written by the policy (every result block follows
           a search call) and no unclosed result block.
        3. A final answer in ``\\boxed{}``: a complete, non-empty ``\\boxed{...}`` in the policy's text.
        4. No garbled or unreadable content (``garbled_problems``, as for R1-Searcher; the paper gives no test).

        ``answer`` = content of the last complete ``\\boxed{}`` outside retrieved documents (stripped).
        ``n_searches`` = retrievals made (t_i of the group reward, §3.3). ``extra``: ``n_internal`` (complete
        internal blocks), ``n_external`` (complete external-search calls), ``internal_balanced`` (reported only;
        the format reward does not check internal tags), ``n_unanswered_searches``, ``answer_words`` (the answer
        reward's 10-word cap, §3.2).
        """
        events = self.scan_response(response)
        problems: list[str] = []
        external = blocks(events, *EXTERNAL)
        if not external.balanced:
            problems.append("unbalanced external-search tags")
        invalid = [self._search_from(c) for c in external.contents]
        if any(isinstance(a, Invalid) for a in invalid):
            problems.append("external search call without a valid query")
        if count_tag(events, RESULT[0]) or count_tag(events, RESULT[1]):
            problems.append("search-result tag written by the policy (documents without retrieval)")
        if any(ev.kind == "obs_unclosed" for ev in events):
            problems.append("unclosed search-result block")
        answer = unbox(last_policy_box(events))
        if not answer:
            problems.append("no non-empty \\boxed{} final answer")
        problems.extend(garbled_problems(events, cjk=self.options["cjk_garbled"]))
        internal = blocks(events, *INTERNAL)
        return FormatReport(
            ok=not problems,
            has_answer=answer is not None,
            answer=answer,
            n_searches=sum(1 for ev in events if ev.kind.startswith("obs")),
            problems=tuple(problems),
            extra={
                "n_internal": len(internal.contents),
                "n_external": len(external.contents),
                "internal_balanced": internal.balanced,
                "n_unanswered_searches": unanswered_searches(events, EXTERNAL[1]),
                "answer_words": word_count(answer) if answer is not None else None,
            },
        )


@format_scheme("r1_searcher_pp")
def pp_format(report: FormatReport, n_searches: int, evidence: str | None, *, penalty: float = -2.0) -> float:
    """R1-Searcher++'s format reward (spec 000 §3.1 Eq. 3): 0 if the format check passes, else ``penalty`` (-2)."""
    return 0.0 if report.ok else penalty
