"""The protocols of the trained baselines, which never call a search engine during the rollout.

Search-R1 (spec 003) compares its agent with baselines trained on the same data: ``R1`` (RL, reasoning without
search) and RAG trained to answer from documents retrieved once with the question. Both keep Search-R1's tags so the
same answer extraction, rewards and format penalty apply:

* ``reason`` (the R1 baseline): the model reasons inside ``<think></think>`` and answers inside
  ``<answer></answer>``; nothing is retrieved. A ``<search>`` call is an invalid action (``no_search``) with feedback
  that asks for the answer, unless the turn goes on to a complete answer (generation does not stop at a search call
  here), which is then the action, as the format check's answer (the search tag fails the check).
* ``rag`` (the RAG-SFT and RAG-RL baselines): as ``reason``, but the prompt holds the top-k documents retrieved
  once with the question (``retrieval.topk`` of them, one batched retriever call per rollout). The rollout engine
  retrieves them (``prompt_documents``) and records them on the trajectory (``metadata.prompt_docs``), so the
  evaluation's diagnostics see what the model read.

The prompts are our own wording; the question ends with ``?`` as in Search-R1's prompts (option
``question_mark``). The format check is Search-R1's think -> answer state machine with an optional think block;
any search tag fails it.
"""

from __future__ import annotations

from collections.abc import Sequence

from searchrl.protocols._tags import NO_SEARCH, Event, first_action
from searchrl.protocols.base import Action, Answer, Invalid, Search
from searchrl.protocols.search_r1 import SearchR1Protocol
from searchrl.retrieval.base import Hit

REASON_INSTRUCTION = (
    "Answer the question below from what you know; there is no search engine. First reason briefly inside <think> "
    "and </think>, then give the answer only inside <answer> and </answer>, without a detailed explanation, e.g. "
    "<answer> Beijing </answer>. Question: {question}\n"
)
RAG_INSTRUCTION = (
    "Answer the question below using the documents. First reason briefly inside <think> and </think>, then give "
    "the answer only inside <answer> and </answer>, without a detailed explanation, e.g. <answer> Beijing </answer>."
    "\n\n{question}\n"
)


class ReasonProtocol(SearchR1Protocol):
    """Think, then answer; no search (Search-R1's R1 baseline)."""

    name = "reason"
    stop_strings = ()
    searches = False

    def instruction(self, question: str) -> str:
        return self._retag(REASON_INSTRUCTION).format(question=self.prompt_question(question))

    def parse(self, turn_text: str) -> Action:
        """The turn's answer, also after a search call (no stop string ends the turn there); else why not."""
        action = super().parse(turn_text)
        if not isinstance(action, Answer) and (found := first_action(turn_text, {"answer": self.answer_tags})):
            return Answer(found.content.strip())
        return Invalid(NO_SEARCH) if isinstance(action, Search) else action

    def format_search(self, queries: list[str] | tuple[str, ...]) -> str:
        raise ValueError(f"the {self.name} protocol has no search call")

    def _feedback_how(self) -> str:
        return self._retag(
            "I should reason inside <think> and </think>, then give the answer between <answer> and </answer>."
        )

    def force_answer_text(self) -> str:
        return self._retag("\nI will now give the final answer between <answer> and </answer>.\n")

    def _sequence_problem(self, events: list[Event]) -> str | None:
        """Optional think block, then the answer, then nothing; no search tag anywhere; no block cut by feedback."""
        state = "start"
        (t_open, t_close), (a_open, a_close) = self.think_tags, self.answer_tags
        moves = {
            ("start", t_open): "in_think",
            ("in_think", t_close): "after_think",
            ("start", a_open): "in_answer",
            ("after_think", a_open): "in_answer",
            ("in_answer", a_close): "end",
        }
        for ev in events:
            if ev.kind.startswith("obs"):
                return "inserted documents in a protocol without search"
            if ev.kind == "inserted" and state.startswith("in_"):
                return f"inserted text inside an open block (state {state})"
            if ev.kind == "tag":
                nxt = moves.get((state, ev.value))
                if nxt is None:
                    return f"unexpected {ev.value} in state {state}"
                state = nxt
            elif ev.value.strip() and state not in ("in_think", "in_answer"):
                return f"text outside any tag in state {state}"
        return None if state == "end" else f"response does not end with a complete {a_open} block (state {state})"


class RAGProtocol(ReasonProtocol):
    """Documents retrieved once with the question in the prompt, then think and answer (RAG-SFT / RAG-RL)."""

    name = "rag"
    prompt_documents = True

    def instruction(self, question: str) -> str:
        # ``question`` is what ``frame_question`` returned (the documents, then the question), or a bare question
        framed = question.strip()
        question = framed if framed.startswith(_DOCS) else f"Question: {self.prompt_question(framed)}"
        return self._retag(RAG_INSTRUCTION).format(question=question)

    def frame_question(self, question: str, hits: Sequence[Hit]) -> str:
        docs = self._docs(list(hits)).strip() or "(none)"  # Search-R1's document lines
        return f"{_DOCS}\n{docs}\n\nQuestion: {self.prompt_question(question)}"


_DOCS = "Documents:"
