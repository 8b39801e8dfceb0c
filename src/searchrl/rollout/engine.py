"""Batched multi-turn rollouts: generate until a search call, retrieve for the whole batch at once, insert, continue.

One turn of the state machine, for all active trajectories together:

1. generate (one generator call) until a stop string (end of a search call), EOS, or the turn's token budget;
2. parse each turn's text into ``Search`` / ``Answer`` / ``Invalid`` with the protocol;
3. send every query of every searching trajectory to the retriever in ONE batched call (a multi-query call fans out
   into several queries and is regrouped afterwards);
4. append the rendered observation (or the invalid-action feedback) as inserted tokens (mask 0);
5. trajectories that answered, hit EOS, or ran out of room leave the batch.

Limits and truncation policy (documented in docs/rollout.md):
- ``force_answer`` says what happens at the budget (a search call past ``max_searches`` is never executed):
  ``hint``: the protocol's over-budget text (by default its force-answer text) is inserted after an over-budget
  call, and its force-answer text before one final turn after ``max_turns``; ``silent``: one final turn with
  nothing inserted and search disabled, after ``max_turns`` or straight after an over-budget call (Search-R1,
  R-Search, RAG-R1); ``end``: no final turn, an over-budget call ends the sample (R1-Searcher); ``off``: no final
  turn, an over-budget call gets the over-budget text.
- Nothing is inserted after the last turn a trajectory will get (no feedback, no observation, no search run): the
  policy would never read it, yet it would be scored and trained on.
- ``max_new_tokens`` per turn; ``max_obs_tokens`` per observation: an over-long observation keeps its head and its
  last ``observation._OBS_TAIL`` tokens (so closing tags survive; more when the protocol's ``observation_suffix``,
  e.g. the chat template's text after a tool reply, needs them) and drops the middle.
- ``max_total_tokens`` (prompt + response): the context is never cut from the left, so the question is never
  dropped; a trajectory that reaches the limit stops with ``stop_reason == "length"``, as one does whose feedback or
  hint text does not fit whole (a cut copy of its quoted answer syntax would read as an answer).
- A turn that ends in EOS without an answer ends the trajectory (``"eos"``) unless ``continue_after_eos`` (Search-R1's
  loop); an invalid action that did not end in EOS gets the protocol's feedback text and the trajectory continues.

With ``continuous`` (``rollout.continuous``) and a generator that supports it, the same per-trajectory state machine
runs without the turn barrier: :mod:`searchrl.rollout.continuous`.
"""

from __future__ import annotations

import functools
import inspect
import logging
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from searchrl.data.records import QAExample, Questions, as_examples
from searchrl.data.unitext import decoded_head
from searchrl.generation.base import Completion, Generator, SamplingParams, mix_seed
from searchrl.generation.prompts import render_prompt, special_strings, wants_chat
from searchrl.protocols._tags import hit_contents
from searchrl.protocols.base import Answer, Invalid, Protocol, Search
from searchrl.retrieval.base import Hit, Retriever, check_hits
from searchrl.rollout.limits import RolloutLimits, force_mode
from searchrl.rollout.observation import cut_observation, observation_tail
from searchrl.rollout.trajectory import Trajectory, Turn

if TYPE_CHECKING:
    from searchrl.config import RunConfig

log = logging.getLogger(__name__)

_MIN_ROOM = 8  # a trajectory with less room than this for new tokens stops with "length"
NO_RETRIEVER = "the policy issued a search but no retriever is configured (pass --index or --url)"


def build_prompt_text(protocol: Protocol, tokenizer, question: str, style: str = "auto") -> str:
    """The protocol's prompt, wrapped in the chat template (with the protocol's tools, if any) for chat models or as
    raw text for base models, followed by the protocol's prefill (``response_prefix``, never sampled; none when the
    template's generation prompt already opened it, :attr:`Protocol.template_opening`, set by ``bind_tokenizer``)."""
    messages = protocol.chat_messages(question)
    raw = None if wants_chat(tokenizer, style) else protocol.raw_prompt(question)
    tools = protocol.chat_tools()
    return render_prompt(tokenizer, messages, style, raw, prefill=protocol.prefill, tools=tools)


@dataclass
class SearchCall:
    """One executed search call of a turn: its trajectory and turn, its queries, and each query's hits."""

    traj: Trajectory
    turn: Turn
    queries: tuple[str, ...]
    hits: list[list[Hit]]


#: ``(calls, timing) -> the observation text of each call``: how retrieved documents become inserted text. The
#: default renders the raw documents with the protocol; Search-o1 passes its Reason-in-Documents step
#: (``searchrl.eval.search_o1.ReasonInDocuments``), which refines them with a second model call first.
DocumentStep = Callable[[list[SearchCall], dict[str, float]], list[str]]


class RolloutEngine:
    """Rolls questions out with a policy, a retriever and a protocol: ``engine.run(questions)`` -> trajectories.

    Args:
        generator: the policy's sampler (:class:`~searchrl.generation.base.Generator`; ``make_generator("hf", model,
            tokenizer)`` wraps a transformers model); its tokenizer tokenizes prompts and inserted text.
        retriever: any object with ``search(queries, k) -> list[list[Hit]]``; ``None`` when the protocol never
            searches (a search call then fails).
        protocol: the tags and prompts of the method (``get_protocol("search_r1")``).
        limits: turns, searches and token budgets (:class:`RolloutLimits`; ``RolloutLimits.from_config(cfg)``).
        prompt_style: ``auto`` (the chat template when the tokenizer has one), ``chat`` or ``raw``.
        document_step: replaces how documents become observations (see :data:`DocumentStep`).
        repeated_query_text: when set, inserted instead of running a search call whose queries the trajectory
            already searched (the turn's action becomes ``search_repeated``, not counted against the search limit).

    :meth:`from_config` builds one from a run config.
    """

    def __init__(
        self,
        generator: Generator,
        retriever: Retriever | None,
        protocol: Protocol,
        limits: RolloutLimits = RolloutLimits(),
        prompt_style: str = "auto",
        *,
        document_step: DocumentStep | None = None,
        repeated_query_text: str | None = None,
    ) -> None:
        if retriever is not None and not callable(getattr(retriever, "search", None)):
            raise TypeError(
                f"the retriever ({type(retriever).__name__}) has no search method: give an object with "
                "search(queries: list[str], k: int) -> list[list[Hit]] (searchrl.retrieval.base.Retriever)"
            )
        self.generator = generator
        self.retriever = retriever
        self.protocol = protocol
        self.limits = limits
        self.prompt_style = prompt_style
        self.document_step = document_step
        self.repeated_query_text = repeated_query_text
        self.tokenizer = generator.tokenizer
        protocol.bind_tokenizer(self.tokenizer, prompt_style)  # tool_call: its replies come from the template
        self._obs_tail = observation_tail(protocol, self.tokenizer)
        #: blanked out of documents: a tokenizer reads them as its control tokens (a turn's end, a role, EOS)
        self._special = special_strings(self.tokenizer)
        self.stats: dict[str, float] = {}
        #: called before each turn (each decode step, continuous) and after the last: raises to drop the rollout
        self.check_stop: Callable[[], None] = lambda: None  # (the trainer's background rollout when a run ends)
        self._render_kwargs: dict = {}
        if limits.max_obs_tokens_per_query is not None:
            if "fit_docs" not in inspect.signature(protocol.render_observation).parameters:
                raise ValueError(
                    f"rollout.max_obs_tokens_per_query is not supported by the {protocol.name} protocol "
                    "(only rag_r1 builds observations per query); set it to null"
                )
            self._render_kwargs = {"fit_docs": self._fit_docs}

    @classmethod
    def from_config(
        cls,
        cfg: RunConfig,
        generator: Generator | None = None,
        retriever: Retriever | None = None,
        *,
        protocol: Protocol | None = None,
        limits: RolloutLimits | None = None,
    ) -> RolloutEngine:
        """The engine a run config describes: its protocol (``rollout.protocol`` and options), limits (``rollout.*``,
        ``retrieval.topk``) and prompt style (``model.prompt_style``). What is not given is built from the config:
        the retriever (``retrieval.*``; none for a protocol that never searches), and the policy
        (``model.policy`` with transformers, placed by ``model.device``)."""
        from searchrl.pipeline import load_generator, make_protocol, make_retriever_for

        protocol = protocol or make_protocol(cfg)
        wants_retriever = retriever is None and (protocol.searches or protocol.prompt_documents)
        if generator is None:
            from searchrl.device import configure_from
            from searchrl.models import check_fetchable

            if wants_retriever:  # every model the config names will load: an unfetchable one fails here, in a line
                check_fetchable(cfg)
            configure_from(cfg)  # model.device places the policy (and a dense retriever's encoder)
        if wants_retriever:
            retriever = make_retriever_for(cfg)  # before the policy loads: a missing index fails fast
        if generator is None:
            generator = load_generator(cfg.model.policy)
        limits = limits or RolloutLimits.from_config(cfg)
        return cls(generator, retriever, protocol, limits, cfg.model.prompt_style)

    # -------------------------------------------------------------------------------------------- helpers
    def _encode(self, text: str) -> list[int]:
        return list(self.tokenizer.encode(text, add_special_tokens=False))

    def prompt_ids(self, question: str) -> list[int]:
        return self._encode(build_prompt_text(self.protocol, self.tokenizer, question, self.prompt_style))

    def _insert(self, traj: Trajectory, text: str, whole: bool = False) -> tuple[str, int]:
        """Append ``text`` as inserted tokens; returns what the policy reads and its token count. ``whole`` (feedback,
        hints): uncut or not at all, and then the trajectory stops (the module docstring says why)."""
        room, cap = self._room(traj), None if whole else self.limits.max_obs_tokens
        ids, text = cut_observation(self.tokenizer, text, cap, self._obs_tail, None if whole else room)
        if len(ids) > room or (whole and len(ids) + _MIN_ROOM > room):  # no turn could follow a whole text
            self._stop(traj, "length")
            return "", 0
        traj.append(ids, sampled=False)
        return text, len(ids)

    def _fit_docs(self, text: str) -> str:
        """One query's documents cut to ``max_obs_tokens_per_query`` tokens (the head, as RAG-R1's code)."""
        cap = self.limits.max_obs_tokens_per_query
        ids = self._encode(text)
        return text if cap is None or len(ids) <= cap else decoded_head(self.tokenizer, ids, cap, text)

    @functools.cached_property
    def _eos_ids(self) -> frozenset[int]:
        """The ids that end a generation: the generator's own (from the generation config), the tokenizer's."""
        ids = set(getattr(self.generator, "eos_ids", ()) or ())
        ids |= set(getattr(self.tokenizer, "all_special_ids", ()) or ())
        if (eos := getattr(self.tokenizer, "eos_token_id", None)) is not None:
            ids.add(eos)
        return frozenset(ids)

    def _room(self, traj: Trajectory) -> int:
        return self.limits.max_total_tokens - len(traj.prompt_ids) - len(traj.response_ids)

    # ------------------------------------------------------------------------------------------------ run
    def run(
        self,
        examples: Questions,
        group_size: int = 1,
        temperature: float = 1.0,
        top_p: float = 1.0,
        seed: int | None = None,
        group_prefix: str = "",
    ) -> list[Trajectory]:
        """Roll out ``group_size`` trajectories per example. ``examples``: :class:`QAExample` records, question
        strings (ids ``q0``, ``q1``...; no gold answers) or dataset rows (``{"question", "golden_answers"}``), or one
        of them. Group ids are ``f"{group_prefix}{example.id}"``; give each dataset / step a distinct prefix so ids
        stay globally unique when data sets are merged."""
        examples = as_examples(examples)
        trajs: list[Trajectory] = []
        timing = {"generate_s": 0.0, "retrieve_s": 0.0, "engine_s": 0.0, "gen_tokens": 0.0, "retrieve_calls": 0.0}
        framed, docs = self._prompt_documents(examples, timing)
        seen: dict[str, int] = {}  # a question twice in one call (a step that wraps its data) gets other uids
        for ex, question, hits in zip(examples, framed, docs, strict=True):
            first = seen[ex.id] = seen.get(ex.id, -group_size) + group_size
            pids = self.prompt_ids(question)
            meta = dict(ex.metadata)
            if hits is not None:  # what a ``rag`` trajectory read (the diagnostics look for the gold there)
                meta["prompt_docs"] = [hit_contents(h) for h in hits]
                meta["prompt_hit_ids"] = [h.id for h in hits]
            for j in range(group_size):
                trajs.append(
                    Trajectory(
                        uid=f"{group_prefix}{ex.id}#{first + j}",
                        group_id=f"{group_prefix}{ex.id}",
                        question_id=ex.id,
                        question=ex.question,
                        golds=list(ex.answers),
                        prompt_ids=list(pids),
                        metadata=dict(meta),
                        protocol=self.protocol.name,
                    )
                )
        base_seed = seed if seed is not None else random.getrandbits(63)  # a row's stream: (seed, turn, its uid)
        t_start = time.perf_counter()
        try:
            if self.limits.continuous and self.generator.supports_continuous:
                from searchrl.rollout.continuous import run_continuous

                run_continuous(self, trajs, timing, temperature, top_p, base_seed)
            else:
                if self.limits.continuous:
                    log.info("%s decodes turn by turn: continuous batching is off", type(self.generator).__name__)
                self._loop(trajs, timing, temperature, top_p, seed, base_seed)
            self.check_stop()
        finally:
            self.generator.reset()  # cached prefixes are only useful within one rollout
        timing["engine_s"] = time.perf_counter() - t_start
        self.stats = timing
        return trajs

    def _prompt_documents(
        self, examples: Sequence[QAExample], timing: dict[str, float]
    ) -> tuple[list[str], list[list[Hit] | None]]:
        """Each example's prompt question, and the documents retrieved with it (one batched call) when the protocol
        puts documents in the prompt (``prompt_documents``); else the questions and Nones."""
        questions = [ex.question for ex in examples]
        if not self.protocol.prompt_documents or not examples:
            return questions, [None] * len(examples)
        if self.retriever is None:
            raise ValueError(
                f"the {self.protocol.name} protocol puts retrieved documents in the prompt: configure a retriever "
                "(retrieval.kind / retrieval.index)"
            )
        hits, _ = self._retrieve(questions, timing)
        return [self.protocol.frame_question(q, hs) for q, hs in zip(questions, hits, strict=True)], list(hits)

    def _loop(self, trajs: list[Trajectory], timing: dict[str, float], temperature, top_p, seed, base_seed) -> None:
        active, lim, n_turns = list(trajs), self.limits, self.n_turns()
        final_next: set[int] = set()  # silent: trajectories whose next turn is their final one (over budget)
        for turn_no in range(n_turns):
            self.check_stop()
            for t in active:
                self.open_turn(t, turn_no)
            active = [t for t in active if not t.stop_reason]
            if not active:
                break
            max_new = min(lim.max_new_tokens, max(self._room(t) for t in active))
            params = SamplingParams(
                max_new_tokens=max_new,
                temperature=temperature,
                top_p=top_p,
                stop=self.stop_strings(),
                seed=None if seed is None else seed + turn_no,
                row_seeds=tuple(mix_seed(base_seed, turn_no, t.stream_key) for t in active),
                keep_cache=turn_no < n_turns - 1,  # a last turn's caches would serve no later call
                keep_eos_rows=lim.continue_after_eos,
            )
            t0 = time.perf_counter()
            completions = self.generator.generate([t.prompt_ids + t.response_ids for t in active], params)
            timing["generate_s"] += time.perf_counter() - t0
            # ---- parse
            searches: list[tuple[Trajectory, Turn, tuple[str, ...]]] = []
            still: list[Trajectory] = []
            for traj, comp in zip(active, completions, strict=True):
                turn, follow = self.take_turn(traj, comp, turn_no, id(traj) in final_next, timing)
                if follow == "search":
                    searches.append((traj, turn, tuple(turn.queries)))
                elif follow == "final":
                    final_next.add(id(traj))
                if follow != "stop":
                    still.append(traj)
            # ---- one batched retrieval call for every query of the turn
            if searches:
                self._observe(searches, timing)
            active = [t for t in still if not t.stop_reason]
            if not active:
                break
        for t in active:
            self._stop(t, "max_turns")

    # ------------------------------------------------------------------ one trajectory's turn (both schedules)
    def n_turns(self) -> int:
        """Turns a trajectory may get: ``max_turns``, plus the final forced one under ``hint`` and ``silent``."""
        return self.limits.max_turns + (1 if force_mode(self.limits.force_answer) in ("hint", "silent") else 0)

    def stop_strings(self) -> tuple[str, ...]:
        return tuple(self.protocol.stop_strings) + tuple(self.protocol.answer_stop_strings)

    def open_turn(self, traj: Trajectory, turn_no: int) -> int:
        """Start turn ``turn_no``: the hint before the forced final turn, then the room check. Returns the turn's
        token budget; 0 when the trajectory stopped (``length``)."""
        lim = self.limits
        if turn_no == lim.max_turns and force_mode(lim.force_answer) == "hint" and not traj.stop_reason:
            text, n = self._insert(traj, self.protocol.force_answer_text(), whole=True)
            if n and traj.turns:  # recorded with the turn it follows: a trajectory's turns account for its tokens
                traj.turns[-1].hint, traj.turns[-1].n_hint_tokens = text, n
        if traj.stop_reason:  # its last insertion did not fit
            return 0
        if self._room(traj) < _MIN_ROOM:
            self._stop(traj, "length")
            return 0
        return min(lim.max_new_tokens, self._room(traj))

    def take_turn(
        self, traj: Trajectory, comp: Completion, turn_no: int, final: bool, timing: dict[str, float]
    ) -> tuple[Turn, str]:
        """Record turn ``turn_no``'s completion and act on it (``final``: a silent over-budget call made this the
        final turn). Returns the turn and what follows: ``"stop"``, ``"search"`` (run ``turn.queries``, insert the
        observation, next turn), ``"next"`` (whatever text is due was inserted: next turn) or ``"final"`` (silent:
        the next turn is the final one)."""
        lim = self.limits
        mode = force_mode(lim.force_answer)
        forced = turn_no == lim.max_turns or final
        last = turn_no == self.n_turns() - 1  # nothing inserted after this turn: the policy would never read it
        room = self._room(traj)
        ids, lps, text, finish = comp.token_ids[:room], comp.logprobs[:room], comp.text, comp.finish_reason
        if len(ids) < len(comp.token_ids):  # cut by the total-length limit
            text = self.tokenizer.decode(ids, skip_special_tokens=True, clean_up_tokenization_spaces=False)
            finish = "length"
        action = self.protocol.parse(text)
        # continue_after_eos: text follows a turn that ended in EOS with no answer (feedback, a hint, documents), so
        # its EOS token is dropped; an answer, or an over-budget search that ends the sample, keeps it. A search call
        # that is run drops it too (a backend that missed the stop string): its documents follow
        runs = isinstance(action, Search) and not last and not forced and traj.n_searches < lim.max_searches
        over_budget_end = isinstance(action, Search) and mode == "end" and traj.n_searches >= lim.max_searches
        goes_on = finish == "eos" and lim.continue_after_eos and not last and not forced
        goes_on = goes_on and not isinstance(action, Answer) and not over_budget_end
        if (goes_on or runs) and ids and ids[-1] in self._eos_ids:
            ids, lps = ids[:-1], lps[:-1]
        traj.append(ids, sampled=True, logprobs=lps)
        timing["gen_tokens"] += len(ids)
        turn = Turn(text=text, action="none", finish_reason=finish, n_gen_tokens=len(ids))
        traj.turns.append(turn)
        if isinstance(action, Answer):
            turn.action = "answer"
            traj.answer = action.text
            self._stop(traj, "answer")
            return turn, "stop"
        if runs:
            turn.action = "search"
            turn.queries = list(action.queries)
            return turn, "search"
        if finish == "eos" and not goes_on:  # a call past the budget is recorded as one; its EOS ends the sample
            over = isinstance(action, Search) and not last and not forced
            turn.action = "search_over_budget" if over else "invalid" if isinstance(action, Invalid) else "none"
            turn.invalid_reason = action.reason if isinstance(action, Invalid) else ""
            self._stop(traj, "max_searches" if over and mode == "end" else "eos")
            return turn, "stop"
        if last or forced:  # no turn follows: no feedback, no observation, the search is not run
            turn.action = "invalid" if isinstance(action, Invalid) else "none"
            turn.invalid_reason = action.reason if isinstance(action, Invalid) else ""
            self._stop(traj, "no_answer" if forced else "max_turns")
            return turn, "stop"
        if isinstance(action, Search) and mode == "end":  # over the budget: the sample ends here
            turn.action = "search_over_budget"
            self._stop(traj, "max_searches")
            return turn, "stop"
        if isinstance(action, Search) and mode == "silent":  # over the budget: one final turn, no text
            turn.action = "search_over_budget"
            return turn, "final"
        if isinstance(action, Search):  # over the search budget: not executed, told to answer
            turn.action = "search_over_budget"
            turn.observation = self.protocol.over_budget_text()
        else:
            turn.action = "invalid"
            turn.invalid_reason = action.reason
            turn.observation = self.protocol.invalid_feedback(action)
        turn.observation, turn.n_obs_tokens = self._insert(traj, turn.observation, whole=True)
        return turn, "stop" if traj.stop_reason else "next"

    def _retrieve(self, queries: list[str], timing: dict[str, float]) -> tuple[list[list[Hit]], float]:
        """ONE batched retriever call for ``queries``; returns the hits and the call's wall time (also added to
        ``timing``)."""
        hits, dt = self.search(queries)
        timing["retrieve_s"] += dt
        timing["retrieve_calls"] += 1
        return hits, dt

    def search(self, queries: list[str]) -> tuple[list[list[Hit]], float]:
        """One retriever call: the hits and the call's wall time (safe to run in a worker thread)."""
        if self.retriever is None:
            raise ValueError(NO_RETRIEVER)
        t0 = time.perf_counter()
        found = self.retriever.search(queries, self.limits.topk)
        hits = check_hits(found, len(queries), self.retriever, self.limits.topk, self._special)
        return hits, time.perf_counter() - t0

    def _observe(self, searches: list[tuple[Trajectory, Turn, tuple[str, ...]]], timing: dict[str, float]) -> None:
        """Run this turn's search calls (every query in one retriever call) and insert each observation."""
        searches = self.screen_repeats(searches)
        if not searches:
            return
        hits, dt = self._retrieve([q for _, _, qs in searches for q in qs], timing)
        calls = self.search_calls(searches, hits)
        self.insert_observations(calls, [dt] * len(calls), timing)

    def screen_repeats(
        self, searches: list[tuple[Trajectory, Turn, tuple[str, ...]]]
    ) -> list[tuple[Trajectory, Turn, tuple[str, ...]]]:
        """With ``repeated_query_text``: a call whose queries the trajectory already searched is not run (the text is
        inserted instead, action ``search_repeated``); returns the calls to run."""
        if self.repeated_query_text is None:
            return searches
        fresh = []
        for traj, turn, qs in searches:
            searched = {q for t in traj.turns if t is not turn and t.action == "search" for q in t.queries}
            if all(q in searched for q in qs):
                turn.action = "search_repeated"  # not executed, not counted against the search limit
                turn.observation = self.repeated_query_text
                turn.observation, turn.n_obs_tokens = self._insert(traj, turn.observation, whole=True)
            else:
                fresh.append((traj, turn, qs))
        return fresh

    @staticmethod
    def search_calls(
        searches: list[tuple[Trajectory, Turn, tuple[str, ...]]], hits: list[list[Hit]]
    ) -> list[SearchCall]:
        """Each call with its queries' hits (``hits``: one list per query, the calls' queries in order)."""
        calls, pos = [], 0
        for traj, turn, qs in searches:
            calls.append(SearchCall(traj, turn, qs, hits[pos : pos + len(qs)]))
            pos += len(qs)
        return calls

    def insert_observations(self, calls: list[SearchCall], dts: list[float], timing: dict[str, float]) -> None:
        """Insert each call's observation (``dts``: the wall time of the retriever call that served it).

        The one place where retrieved documents become inserted text: the protocol renders them, or
        ``document_step`` does (Search-o1's Reason-in-Documents)."""
        if self.document_step is not None:
            texts = self.document_step(calls, timing)
        else:
            texts = [self.protocol.render_observation(list(c.queries), c.hits, **self._render_kwargs) for c in calls]
        for c, text, dt in zip(calls, texts, dts, strict=True):
            c.turn.hit_ids = [[h.id for h in hs] for hs in c.hits]
            c.turn.observation, c.turn.n_obs_tokens = self._insert(c.traj, text)
            c.turn.timings["retrieve_s"] = dt

    @staticmethod
    def _stop(traj: Trajectory, reason: str) -> None:
        if not traj.stop_reason:
            traj.stop_reason = reason
