"""Continuous batching across turns (``rollout.continuous``): the rollout engine without its turn barrier.

The turn-synchronous loop (``RolloutEngine._loop``) generates a turn for every active trajectory, waits for the
longest, runs one retriever call and starts the next turn. Here each trajectory moves through the same state machine
on its own (``RolloutEngine.open_turn`` / ``take_turn``, shared with that loop, so every limit, force-answer mode,
stop reason and inserted text is the same), inside one :meth:`~searchrl.generation.base.Generator.decode_continuous`
loop:

- a row that finishes a turn leaves the decode batch at once (:meth:`ContinuousRollout.finished`): it answered or
  ran out of room (it stops), or its feedback / hint text is inserted and its next turn is ready at once, or it
  searches;
- the searches of the rows that finished at the same decode step go to the retriever as one call, in a worker thread
  (:data:`RETRIEVAL_WORKERS` calls may run at once), while the other rows keep decoding;
- between decode steps (:meth:`ContinuousRollout.ready`) the finished retriever calls are turned into observations
  (the protocol's renderer, or ``document_step`` for the calls that finished together) and inserted, and those rows
  re-enter the batch; the generator prefills only the new tokens.

Each row's turn ``t`` samples from its own stream, seeded by (the run's seed, ``t``, its trajectory's uid), as the
synchronous loop seeds it, so with a generator whose rows do not interact (``HFGenerator``) both loops give the same
trajectories (up to floating-point differences between batch layouts). Timings in ``engine.stats``: ``generate_s`` is
the decode loop's own time (without the engine's work between steps and without ``wait_s``); ``wait_s`` the time it
had no row to decode and waited on the retriever; ``retrieve_s`` the retriever calls' summed wall time (they overlap
decoding).
"""

from __future__ import annotations

import time
from concurrent import futures
from dataclasses import dataclass

from searchrl.generation.base import Completion, SamplingParams, Segment, mix_seed
from searchrl.rollout.engine import NO_RETRIEVER
from searchrl.rollout.trajectory import Trajectory, Turn

#: retriever calls that may run at once (each is one batched call for the rows that searched at one decode step).
RETRIEVAL_WORKERS = 4

_Search = tuple[Trajectory, Turn, tuple[str, ...]]


@dataclass
class _Row:
    traj: Trajectory
    turn_no: int = 0
    final: bool = False  # silent: a call over the search budget made the next turn the final one


class ContinuousRollout:
    """The engine's side (a :class:`~searchrl.generation.base.ContinuousScheduler`) of one continuous rollout."""

    def __init__(self, engine, trajs: list[Trajectory], timing: dict[str, float], base_seed: int, pool) -> None:
        self.engine, self.timing, self.base_seed, self.pool = engine, timing, base_seed, pool
        self.rows = [_Row(t) for t in trajs]
        self.waiting: list[Segment] = []  # ready to enter the batch
        self.to_search: list[tuple[int, _Search]] = []  # searches of the rows finished since the last ready()
        self.inflight: dict[futures.Future, list[tuple[int, _Search]]] = {}
        self.engine_s = 0.0  # time spent here between decode steps (parsing, inserting, document steps)
        self.wait_s = 0.0  # time blocked on the retriever with nothing to decode
        for key in range(len(self.rows)):
            self._open(key)

    def _open(self, key: int) -> bool:
        """Start the row's next turn (its segment waits to enter the batch); False when the row stopped."""
        row, engine = self.rows[key], self.engine
        if row.turn_no >= engine.n_turns():
            engine._stop(row.traj, "max_turns")
            return False
        budget = engine.open_turn(row.traj, row.turn_no)
        if not budget:
            return False
        context = row.traj.prompt_ids + row.traj.response_ids
        self.waiting.append(Segment(key, context, budget, mix_seed(self.base_seed, row.turn_no, row.traj.stream_key)))
        return True

    def _next(self, key: int) -> bool:
        self.rows[key].turn_no += 1
        return self._open(key)

    # ------------------------------------------------------------------------------------ the scheduler side
    def finished(self, key: int, completion: Completion) -> bool:
        t0 = time.perf_counter()
        try:
            return self._finished(key, completion)
        finally:
            self.engine_s += time.perf_counter() - t0

    def _finished(self, key: int, completion: Completion) -> bool:
        row, engine = self.rows[key], self.engine
        turn, follow = engine.take_turn(row.traj, completion, row.turn_no, row.final, self.timing)
        if follow == "stop":
            return False
        if follow == "final":
            row.final = True
        if follow == "search":
            search = (row.traj, turn, tuple(turn.queries))
            if engine.screen_repeats([search]):
                if engine.retriever is None:
                    raise ValueError(NO_RETRIEVER)
                self.to_search.append((key, search))
                return True
        return self._next(key)

    def ready(self, wait: bool) -> list[Segment] | None:
        t0, waited = time.perf_counter(), 0.0
        self.engine.check_stop()
        try:
            if self.to_search:  # one retriever call for the rows that searched since the last step
                batch, self.to_search = self.to_search, []
                queries = [q for _, (_, _, qs) in batch for q in qs]
                self.inflight[self.pool.submit(self.engine.search, queries)] = batch
            self._collect([f for f in self.inflight if f.done()])
            while wait and not self.waiting and self.inflight:
                t1 = time.perf_counter()
                done, _ = futures.wait(list(self.inflight), return_when=futures.FIRST_COMPLETED)
                waited += time.perf_counter() - t1
                self._collect(list(done))
            if not self.waiting and not self.inflight:
                return None
            out, self.waiting = self.waiting, []
            return out
        finally:
            self.wait_s += waited
            self.engine_s += time.perf_counter() - t0 - waited

    def _collect(self, done: list[futures.Future]) -> None:
        """Insert the observations of the finished retriever calls (one document step for all of them); their rows'
        next turns are ready."""
        if not done:
            return
        calls, dts, keys = [], [], []
        for fut in done:
            batch = self.inflight.pop(fut)
            hits, dt = fut.result()
            self.timing["retrieve_s"] += dt
            self.timing["retrieve_calls"] += 1
            searches = [s for _, s in batch]
            new = self.engine.search_calls(searches, hits)
            calls += new
            dts += [dt] * len(new)
            keys += [k for k, _ in batch]
        self.engine.insert_observations(calls, dts, self.timing)
        for key in keys:
            self._next(key)


def run_continuous(engine, trajs: list[Trajectory], timing: dict[str, float], temperature, top_p, base_seed) -> None:
    """Roll ``trajs`` out with ``engine``'s generator decoding continuously (see the module docstring)."""
    params = SamplingParams(temperature=temperature, top_p=top_p, stop=engine.stop_strings())
    t0 = time.perf_counter()
    with futures.ThreadPoolExecutor(RETRIEVAL_WORKERS, thread_name_prefix="retrieve") as pool:
        run = ContinuousRollout(engine, trajs, timing, base_seed, pool)
        try:
            engine.generator.decode_continuous(run, params)
        except BaseException:
            for fut in run.inflight:
                fut.cancel()
            raise
    for t in trajs:  # every row stops inside the loop; this only guards the invariant
        engine._stop(t, "max_turns")
    timing["wait_s"] = run.wait_s
    timing["generate_s"] += time.perf_counter() - t0 - run.engine_s - run.wait_s
