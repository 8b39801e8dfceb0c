"""Search-o1 (Li et al. 2025) as an evaluation method: reasoning with search calls on the rollout engine, each
step's documents refined by Reason-in-Documents (a second call to the same model) before insertion. See the
``search_o1`` entry of ``searchrl.eval.baselines`` for the method and its deviations; the registry of every method
is ``searchrl.eval.methods``."""

from __future__ import annotations

import dataclasses
import re
import time
from collections.abc import Sequence
from typing import Any

from searchrl.data.records import QAExample
from searchrl.eval.method import Method, Prediction, executed_queries, render_documents, render_prompt
from searchrl.generation.base import Generator, SamplingParams, mix_seed
from searchrl.protocols.search_o1 import QUERY, RESULT, SearchO1Protocol
from searchrl.retrieval.base import Hit, Retriever
from searchrl.rollout.engine import RolloutEngine, RolloutLimits, SearchCall
from searchrl.rollout.trajectory import Trajectory

# --------------------------------------------------------------------------------------------- Search-o1


REASON_IN_DOCUMENTS_PROMPT = (
    "You are helping a reasoning assistant that is answering a question step by step and has just run a search. "
    "Read the documents the search returned and work out what they say that helps with the current search query, "
    "given the reasoning so far.\n\n"
    "Guidelines:\n"
    "1. Go through the documents one by one and note what bears on the current search query.\n"
    "2. Keep only facts the documents actually state that are accurate, relevant to the query and useful for the "
    "next reasoning step.\n"
    "3. End your reply with a line that says Final Information, followed by those facts in a few short sentences. "
    "If the documents contain nothing useful, write 'No helpful information found.' after that line instead.\n\n"
    "Previous reasoning steps:\n{previous}\n\n"
    "Current search query: {query}\n\n"
    "Retrieved documents:\n{documents}\n\n"
    'Now analyse the documents for the current search query "{query}", in the light of the previous reasoning '
    "steps, and finish with the Final Information part."
)
NO_HELPFUL_INFORMATION = "No helpful information found."
_FINAL_INFORMATION = re.compile(r"final information", re.IGNORECASE)


def previous_steps(response: str, keep_last: int = 3) -> str:
    """The reasoning so far for the Reason-in-Documents prompt: one numbered step per non-empty line; when there
    are more than ``keep_last + 1``, only the first, the last ``keep_last`` and those that open a search call or a
    result block are kept, each gap shown as ``...`` (the rule of Search-o1's code: at most four steps whole, else
    the first, the last three and the tagged ones).

    >>> previous_steps("a\\nb\\n\\nc")
    'Step 1: a\\n\\nStep 2: b\\n\\nStep 3: c'
    >>> previous_steps("a\\nb\\nc\\nd", keep_last=1)
    'Step 1: a\\n\\n...\\n\\nStep 4: d'
    """
    lines = [ln.strip() for ln in response.split("\n") if ln.strip()]
    steps = [f"Step {i}: {line}" for i, line in enumerate(lines, start=1)]
    if len(steps) <= keep_last + 1:
        return "\n\n".join(steps)
    tags = (QUERY[0], RESULT[0])  # the opening tags, as Search-o1's code tests
    kept: list[str] = []
    for i, step in enumerate(steps):
        if i == 0 or i >= len(steps) - keep_last or any(tag in step for tag in tags):
            kept.append(step)
        elif kept[-1] != "...":
            kept.append("...")
    return "\n\n".join(kept)


def final_information(analysis: str) -> tuple[str, bool]:
    """(refined text, marker_found): what follows the last "Final Information" of a Reason-in-Documents reply
    (markdown emphasis and a colon around the marker dropped, whitespace collapsed); without the marker (or with
    nothing after it), "No helpful information found.", as in Search-o1's code.

    >>> final_information("Doc 1 is about X.\\n**Final Information**\\n\\nAnna was born in Rome.")
    ('Anna was born in Rome.', True)
    >>> final_information("I could not decide.")
    ('No helpful information found.', False)
    """
    found = list(_FINAL_INFORMATION.finditer(analysis))
    if not found:
        return NO_HELPFUL_INFORMATION, False
    text = " ".join(analysis[found[-1].end() :].strip(" \t\r\n*:：#`").split())
    return (text or NO_HELPFUL_INFORMATION), True


class ReasonInDocuments:
    """Search-o1's document step (a :data:`~searchrl.rollout.engine.DocumentStep`): per turn, ONE generate call that
    refines each search call's documents (prompt: previous reasoning steps, query, documents); the "Final
    Information" of each reply is inserted in the result tags. Each refinement is recorded in
    ``refinements[trajectory uid]``; :meth:`start` resets them and sets the run's sampling."""

    def __init__(
        self,
        generator: Generator,
        protocol: SearchO1Protocol,
        prompt_style: str = "auto",
        *,
        refine_max_new_tokens: int = 512,
        keep_last_steps: int = 3,
    ) -> None:
        if refine_max_new_tokens < 1:
            raise ValueError(f"search_o1: refine_max_new_tokens must be >= 1 (got {refine_max_new_tokens})")
        self.generator, self.protocol, self.prompt_style = generator, protocol, prompt_style
        self.tokenizer = generator.tokenizer
        self.refine_max_new_tokens = refine_max_new_tokens
        self.keep_last_steps = keep_last_steps
        self.start()

    def start(self, temperature: float = 0.0, top_p: float = 1.0, seed: int | None = None) -> None:
        self.refinements: dict[str, list[dict[str, Any]]] = {}
        self._sampling: tuple[float, float, int | None] = (temperature, top_p, seed)
        self._n_calls = 0

    def _prompt(self, traj: Trajectory, query: str, hits: list[Hit]) -> list[int]:
        previous = previous_steps(traj.response_text(self.tokenizer), self.keep_last_steps)
        user = REASON_IN_DOCUMENTS_PROMPT.format(previous=previous, query=query, documents=render_documents(hits))
        text = render_prompt(self.tokenizer, user, self.prompt_style, raw_cue="Analysis:")
        return list(self.tokenizer.encode(text, add_special_tokens=False))

    def __call__(self, calls: list[SearchCall], timing: dict[str, float]) -> list[str]:
        prompts = [self._prompt(c.traj, c.queries[0], c.hits[0]) for c in calls]
        temperature, top_p, seed = self._sampling
        # each trajectory's own stream (its uid, its refinements so far), not its batch's
        done = [len(self.refinements.get(c.traj.uid, ())) for c in calls]
        rows = [mix_seed(seed or 0, 10_000 + n, c.traj.stream_key) for c, n in zip(calls, done, strict=True)]
        params = SamplingParams(
            max_new_tokens=self.refine_max_new_tokens,
            temperature=temperature,
            top_p=top_p,
            seed=None if seed is None else seed + 10_000 + self._n_calls,
            row_seeds=tuple(rows) if seed is not None else None,
        )
        self._n_calls += 1
        t0 = time.perf_counter()
        comps = self.generator.generate(prompts, params)  # ONE refinement call for the batch
        dt_refine = time.perf_counter() - t0
        timing["refine_s"] = timing.get("refine_s", 0.0) + dt_refine
        timing["refine_tokens"] = timing.get("refine_tokens", 0.0) + sum(len(c.token_ids) for c in comps)
        texts = []
        for call, c in zip(calls, comps, strict=True):
            refined, found = final_information(c.text)
            call.turn.timings["refine_s"] = dt_refine
            self.refinements.setdefault(call.traj.uid, []).append(
                {
                    "query": call.queries[0],
                    "hit_ids": [h.id for h in call.hits[0]],
                    "refined": refined,
                    "marker_found": found,
                    "analysis": c.text,
                    "gen_tokens": len(c.token_ids),
                    "finish_reason": c.finish_reason,
                }
            )
            texts.append(self.protocol.format_result(refined))
        return texts


class SearchO1Method(Method):
    """Search-o1: reasoning with search calls, retrieved documents refined by Reason-in-Documents (see above)."""

    name = "search_o1"
    needs_retriever = True
    #: Search-o1's own limits where ``evaluation.max_turns`` / ``max_searches`` / ``agent_max_new_tokens`` are
    #: unset (its code: 10 searches for multi-hop questions, 15 turns; a per-turn budget far larger than an agent's
    #: 128 tokens, 1,024 here), not the trained agent's ``rollout`` ones. Its top-10 documents are not taken: every
    #: method of a run reads the same ``topk``; nor its context: ``rollout.max_total_tokens`` still bounds a run.
    LIMITS = {"max_searches": 10, "max_turns": 15, "max_new_tokens": 1024}

    def __init__(
        self,
        generator: Generator,
        retriever: Retriever,
        *,
        limits: RolloutLimits = RolloutLimits(),
        max_searches: int | None = None,
        refine_max_new_tokens: int = 512,
        **kwargs: Any,
    ) -> None:
        if max_searches is not None:  # the search limit; by default the rollout limits' max_searches
            limits = dataclasses.replace(limits, max_searches=max_searches)
        # Search-o1's loop, whatever the trained agent's rollout section says (``end`` / ``silent`` / going on
        # after EOS): a call past the search limit gets a note and reasoning goes on; a turn with no search ends it
        limits = dataclasses.replace(limits, force_answer="hint", continue_after_eos=False)
        super().__init__(generator, max_new_tokens=limits.max_new_tokens, **kwargs)
        self.protocol = SearchO1Protocol(max_searches=limits.max_searches)  # the prompt states the limit
        self.reason_in_documents = ReasonInDocuments(
            generator, self.protocol, self.prompt_style, refine_max_new_tokens=refine_max_new_tokens
        )
        self.engine = RolloutEngine(
            generator,
            retriever,
            self.protocol,
            limits,
            self.prompt_style,
            document_step=self.reason_in_documents,
            repeated_query_text=self.protocol.repeated_query_text(),
        )

    def answer(self, examples: Sequence[QAExample]) -> list[Prediction]:
        t0 = time.perf_counter()
        self.reason_in_documents.start(self.temperature, self.top_p, self.seed)
        trajs = self.engine.run(examples, group_size=1, temperature=self.temperature, top_p=self.top_p, seed=self.seed)
        preds = []
        for t in trajs:
            response = t.response_text(self.tokenizer)
            report = self.protocol.check_format(response)  # the answer: the last \boxed{} outside inserted results
            refinements = self.reason_in_documents.refinements.get(t.uid, [])
            d = t.to_dict()
            d.update(
                protocol=self.protocol.name, reason_in_documents=refinements, format_problems=list(report.problems)
            )
            preds.append(
                Prediction(
                    report.answer,
                    raw=response,
                    trajectory=d,
                    searches=t.n_searches,
                    queries=executed_queries(t),
                    gen_tokens=t.n_policy_tokens + sum(r["gen_tokens"] for r in refinements),
                    well_formed=report.ok,
                )
            )
        return self._stamp(preds, t0)
