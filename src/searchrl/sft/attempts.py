"""Sampling attempts per question, one round at a time, resumable.

Round ``r`` rolls out each question still being sampled once, with a seed derived from ``(seed, tag, r)``. Each
trajectory's tokens come from its own stream (its uid and the round's seed), so a question's attempts are the same
whichever batch it is rolled out in.

With an :class:`AttemptLog`, each question's attempts are appended to ``<out>.<tag>.partial`` as its batch finishes.
Sampling a model over thousands of questions takes hours; a rerun with the same settings (the log's key, plus the
tag, the number of attempts, the sampling settings, the stopping rule and the questions themselves) keeps the
questions finished before the interruption and samples only the rest. The pipeline that writes the final file
discards the log (:meth:`AttemptLog.discard`).
"""

from __future__ import annotations

import glob
import json
import zlib
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from searchrl import partial
from searchrl.data.records import QAExample
from searchrl.rollout.engine import RolloutEngine
from searchrl.rollout.trajectory import Trajectory
from searchrl.utils import console, progress


@dataclass(frozen=True)
class AttemptLog:
    """Where a sampling pipeline keeps finished questions' attempts: ``<out>.<tag>.partial`` beside its output file
    ``out``, under ``key`` (the settings that shape the samples beyond those :func:`sample_attempts` adds itself: the
    model, its retriever and the rollout limits)."""

    out: Path
    key: str

    def path(self, tag: str) -> Path:
        return self.out.with_name(f"{self.out.name}.{tag}.partial")

    def keyed(self, *parts: object) -> AttemptLog:
        """The same log under a key that also holds ``parts`` (e.g. the rule that judges an attempt correct)."""
        return AttemptLog(self.out, partial.digest(self.key, *map(repr, parts)))

    def discard(self) -> None:
        """The final output is written: the partial files go."""
        for p in self.out.parent.glob(f"{glob.escape(self.out.name)}.*.partial"):
            p.unlink(missing_ok=True)


def _round_seed(seed: int, tag: str, r: int) -> int:
    """A seed per (seed, tag, round), stable across runs; 27 bits leave room for the engine's per-turn offset."""
    return zlib.crc32(f"{seed}/{tag}/{r}".encode()) & 0x7FFFFFF


def sample_attempts(
    engine: RolloutEngine,
    examples: Sequence[QAExample],
    n: int,
    *,
    temperature: float = 1.0,
    top_p: float = 1.0,
    seed: int = 0,
    stop_when: Callable[[Trajectory], bool] | None = None,
    batch_size: int = 32,
    tag: str = "attempt",
    log: AttemptLog | None = None,
) -> list[list[Trajectory]]:
    """Up to ``n`` rollouts per example, one per round: ``out[i][a]`` is attempt ``a`` of ``examples[i]``.

    With ``stop_when``, an example is not sampled again after an attempt for which ``stop_when(traj)`` holds (the
    ``log``'s key must name that rule: :meth:`AttemptLog.keyed`). Questions are rolled out ``batch_size`` at a time
    (one progress step each). Group ids are ``f"{tag}/{example.id}"`` and uids ``f"{tag}/{example.id}#{a}"``. With
    ``log``, resumable as the module says.
    """
    if n < 1:
        raise ValueError(f"the number of attempts per question must be >= 1, got {n}")
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    counts = Counter(ex.id for ex in examples)
    dup = next((i for i, c in counts.items() if c > 1), None)
    if dup is not None:
        raise ValueError(f"question id {dup!r} occurs {counts[dup]} times; give every question a unique id")
    out: list[list[Trajectory]] = [[] for _ in examples]
    path = key = None
    if log is not None:
        path = log.path(tag)
        settings = json.dumps([tag, n, temperature, top_p, seed, stop_when is not None])
        key = partial.digest(log.key, settings, *(json.dumps([e.id, e.question, list(e.answers)]) for e in examples))
        done = partial.kept(path, key)
        for i, ex in enumerate(examples):
            if ex.id in done:
                out[i] = [Trajectory.from_dict(t) for t in done[ex.id]["attempts"]]
        if done:
            console.log(
                f"{tag}: the attempts of {len(done)} of {len(examples)} questions kept from an interrupted run"
            )
        else:
            partial.start(path, key)
    todo = [i for i, ex in enumerate(examples) if not out[i]]
    with progress() as bar:
        task = bar.add_task(tag, total=len(examples), completed=len(examples) - len(todo))
        for start in range(0, len(todo), batch_size):
            batch = todo[start : start + batch_size]
            active = list(batch)
            for r in range(n):
                if not active:
                    break
                trajs = engine.run(
                    [examples[i] for i in active],
                    group_size=1,
                    temperature=temperature,
                    top_p=top_p,
                    seed=_round_seed(seed, tag, r),
                    group_prefix=f"{tag}/",
                )
                still = []
                for i, traj in zip(active, trajs, strict=True):
                    traj.uid = f"{traj.group_id}#{r}"  # the engine numbers within one call; we number attempts
                    out[i].append(traj)
                    if stop_when is None or not stop_when(traj):
                        still.append(i)
                active = still
            if path is not None:
                rows = [(examples[i].id, {"attempts": [t.to_dict() for t in out[i]]}) for i in batch]
                partial.write(path, None, rows, "a")
            bar.advance(task, len(batch))
    return out
