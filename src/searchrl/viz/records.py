"""Trajectory records for the viewer: the record rows every writer emits (:mod:`searchrl.rollout.record`:
``{source, score, metrics, trajectory}``, eval prediction rows included) and the older bare-trajectory and
``{step, reward, trajectory}`` rows, parsed into one :class:`ViewRecord`; and their summary."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from searchrl.eval.diagnostics import FLAGS
from searchrl.rewards import exact_match, f1_score
from searchrl.rollout.record import is_record
from searchrl.utils import console, open_lines

DEFAULT_LIMIT = 500
COLLAPSE_CHARS = 600  # observations longer than this (or with more lines than COLLAPSE_LINES) start collapsed
COLLAPSE_LINES = 12
_CONTEXT_KEYS = ("context", "contexts", "documents", "docs", "retrieved", "passages")

EXPECTED = (
    "expected a trajectory (question, turns), a training rollout row (step, reward, trajectory) "
    "or an eval prediction row (question, golds, prediction)"
)


@dataclass
class ViewTurn:
    text: str
    action: str
    finish_reason: str = ""
    queries: list[str] = field(default_factory=list)
    hit_ids: list[list[str]] = field(default_factory=list)
    observation: str = ""
    invalid_reason: str = ""
    n_gen_tokens: int = 0
    n_obs_tokens: int = 0
    timings: dict[str, float] = field(default_factory=dict)
    hint: str = ""
    n_hint_tokens: int = 0


@dataclass
class ViewRecord:
    """One row of any accepted format, normalised for display."""

    source: str  # "file:line"
    kind: str  # "trajectory" | "rollout" | "prediction"
    question: str
    golds: list[str]
    answer: str | None
    stop_reason: str = ""
    turns: list[ViewTurn] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)  # searches, queries, turns, invalid, policy/inserted tokens
    uid: str = ""
    step: int | None = None
    reward: float | None = None
    reward_components: dict[str, Any] = field(default_factory=dict)
    dataset: str | None = None
    method: str | None = None
    protocol: str | None = None
    row_metrics: dict[str, Any] = field(default_factory=dict)  # the row's own metrics (scores, correct, reward)
    raw: str = ""  # an eval row's model output, shown when there are no turns
    trace: dict[str, Any] = field(default_factory=dict)  # a non-agent method's retrieval trace
    context: list[str] = field(default_factory=list)  # documents/context text an eval row carries
    metadata: dict[str, Any] = field(default_factory=dict)
    #: the row's own ``source`` field ("train", "eval/step_20", "demo/before", "eval/<dataset>/<method>")
    row_source: str | None = None
    #: the writer's verdict (its run's Correctness rule), when the row carries one; else EM decides
    correct: float | None = None
    #: an evaluation row's failure flags (searchrl.eval.diagnostics): why its answer is wrong
    diagnostics: dict[str, Any] = field(default_factory=dict)

    @property
    def em(self) -> float | None:
        """Exact match of the answer against the golds: the row's own ``metrics.em`` (scored with its run's answer
        normalisation) when it has one, else recomputed; None when there are no golds (e.g. ``searchrl ask``)."""
        return self._stored_or("em", exact_match)

    @property
    def f1(self) -> float | None:
        """Token F1, as :attr:`em`: the row's ``metrics.f1`` when it has one, else recomputed."""
        return self._stored_or("f1", f1_score)

    def _stored_or(self, name: str, score: Any) -> float | None:
        if not self.golds:
            return None
        stored = _opt_float(self.row_metrics.get(name))
        return stored if stored is not None else score(self.answer, self.golds)

    @property
    def verdict(self) -> bool | None:
        """Correct by the writer's own rule (``metrics.correct``) when the row has one, else by EM; None without
        golds."""
        em = self.em
        if em is None:
            return None
        return (self.correct if self.correct is not None else em) >= 1.0

    @property
    def file(self) -> str:
        """The file the record was read from (its ``source`` without the line number)."""
        return self.source.rpartition(":")[0] or self.source

    @property
    def answered(self) -> bool:
        return self.answer is not None and bool(self.answer.strip())

    @property
    def n_invalid(self) -> int:
        return self.counts.get("invalid", 0)


# ------------------------------------------------------------------------------------------------ loading


def _str(x: Any) -> str:
    return "" if x is None else str(x)


def _int(x: Any, default: int = 0) -> int:
    try:
        return int(x)
    except (TypeError, ValueError):
        return default


def _opt_float(x: Any) -> float | None:
    if isinstance(x, bool) or x is None:
        return None
    try:
        v = float(x)
    except (TypeError, ValueError):
        return None
    return v if math.isfinite(v) else None


def _str_list(x: Any, name: str = "value") -> list[str]:
    if x is None:
        return []
    if isinstance(x, (str, int, float, bool)):
        x = [x]
    if not isinstance(x, list):
        raise ValueError(f"{name}: expected a list of strings, got {type(x).__name__}")
    return [_str(v) for v in x if v is not None]


def _timings(x: Any) -> dict[str, float]:
    if not isinstance(x, dict):
        return {}
    return {str(k): v for k, v in ((k, _opt_float(v)) for k, v in x.items()) if v is not None}


def _turn(d: Any, i: int) -> ViewTurn:
    if not isinstance(d, dict):
        raise ValueError(f"turn {i} is a {type(d).__name__}, not an object")
    hits = d.get("hit_ids") or []
    return ViewTurn(
        text=_str(d.get("text")),
        action=_str(d.get("action")) or "none",
        finish_reason=_str(d.get("finish_reason")),
        queries=_str_list(d.get("queries"), f"turn {i} queries"),
        hit_ids=[_str_list(h, f"turn {i} hit_ids") for h in hits] if isinstance(hits, list) else [],
        observation=_str(d.get("observation")),
        invalid_reason=_str(d.get("invalid_reason")),
        n_gen_tokens=_int(d.get("n_gen_tokens")),
        n_obs_tokens=_int(d.get("n_obs_tokens")),
        timings=_timings(d.get("timings")),
        hint=_str(d.get("hint")),
        n_hint_tokens=_int(d.get("n_hint_tokens")),
    )


def _is_trajectory(d: Any) -> bool:
    return isinstance(d, dict) and "turns" in d and "question" in d


def _counts(traj: dict[str, Any], turns: list[ViewTurn]) -> dict[str, int]:
    """The record's counts; computed from the turns for whatever ``counts`` does not give."""
    computed = {
        "searches": sum(1 for t in turns if t.action == "search" and t.queries),
        "queries": sum(len(t.queries) for t in turns),
        "turns": len(turns),
        "invalid": sum(1 for t in turns if t.action == "invalid"),
        "policy_tokens": sum(t.n_gen_tokens for t in turns),
        "inserted_tokens": sum(t.n_obs_tokens + t.n_hint_tokens for t in turns),
    }
    given = traj.get("counts") if isinstance(traj.get("counts"), dict) else {}
    out = {**computed, **{k: _int(v) for k, v in given.items() if _int(v, -1) >= 0}}
    if "policy_tokens" not in given and traj.get("action_mask"):
        mask = traj["action_mask"]
        out["policy_tokens"] = sum(1 for m in mask if m)
        out["inserted_tokens"] = len(mask) - out["policy_tokens"]
    return out


def _from_trajectory(traj: dict[str, Any], source: str, kind: str) -> ViewRecord:
    turns_raw = traj.get("turns")
    if not isinstance(turns_raw, list):
        raise ValueError(f"'turns' must be a list, got {type(turns_raw).__name__}")
    turns = [_turn(t, i) for i, t in enumerate(turns_raw, 1)]
    answer = traj.get("answer")
    meta = traj.get("metadata")
    return ViewRecord(
        source=source,
        kind=kind,
        question=_str(traj.get("question")),
        golds=_str_list(traj.get("golds"), "golds"),
        answer=None if answer is None else _str(answer),
        stop_reason=_str(traj.get("stop_reason")),
        turns=turns,
        counts=_counts(traj, turns),
        uid=_str(traj.get("uid")),
        protocol=_str(traj.get("protocol")) or None,
        metadata=meta if isinstance(meta, dict) else {},
    )


def _from_prediction(row: dict[str, Any], source: str) -> ViewRecord:
    traj = row.get("trajectory")
    pred = row.get("prediction")
    if _is_trajectory(traj):
        rec = _from_trajectory(traj, source, "prediction")
        rec.answer = None if pred is None else _str(pred)  # the scored prediction (the agent's stripped answer)
    else:
        rec = ViewRecord(source=source, kind="prediction", question="", golds=[], answer=None)
        rec.answer = None if pred is None else _str(pred)
        rec.raw = _str(row.get("raw"))
        rec.trace = traj if isinstance(traj, dict) else {}
        rec.counts = {
            "searches": _int(row.get("searches")),
            "queries": _int(row.get("queries", row.get("searches"))),  # files written before queries: one a search
            "turns": 0,
            "invalid": 0,
            "policy_tokens": _int(row.get("gen_tokens")),
            "inserted_tokens": 0,
        }
    rec.question = _str(row.get("question")) or rec.question
    rec.golds = _str_list(row.get("golds"), "golds") or rec.golds
    rec.uid = _str(row.get("id")) or rec.uid
    rec.dataset = _str(row.get("dataset")) or None
    rec.method = _str(row.get("method")) or None
    rec.row_source = _str(row.get("source")) or None
    if isinstance(row.get("metrics"), dict):
        rec.row_metrics = dict(row["metrics"])
        rec.correct = _opt_float(row["metrics"].get("correct"))
    if isinstance(row.get("diagnostics"), dict):
        rec.diagnostics = dict(row["diagnostics"])
    rec.step = _row_step(row)
    # an eval row has no reward: its score (or its correctness) is what the page sorts on
    sorts_on = (row.get("score"), rec.row_metrics.get("correct"), rec.row_metrics.get("em"))  # the first one set
    rec.reward = next((v for v in map(_opt_float, sorts_on) if v is not None), None)
    for key in _CONTEXT_KEYS:
        value = row.get(key)
        if isinstance(value, str) and value:
            rec.context.append(value)
        elif isinstance(value, list):
            rec.context.extend(v if isinstance(v, str) else json.dumps(v, ensure_ascii=False) for v in value)
    return rec


_STEP_IN_SOURCE = re.compile(r"step_(\d+)")


def _row_step(row: dict[str, Any]) -> int | None:
    """The training step a row belongs to: its ``step`` field, else ``step_<k>`` in its record source (the held-out
    evaluations a training run writes, ``eval/step_20``)."""
    step = _opt_float(row.get("step"))
    if step is not None:
        return int(step)
    m = _STEP_IN_SOURCE.search(_str(row.get("source")))
    return int(m.group(1)) if m else None


def _from_rollout(row: dict[str, Any], source: str) -> ViewRecord:
    metrics = row.get("metrics") if isinstance(row.get("metrics"), dict) else {}
    kind = "trajectory" if is_record(row) and row.get("source") != "train" else "rollout"
    rec = _from_trajectory(row["trajectory"], source, kind)
    rec.step = _row_step(row)
    # a training row's reward; an evaluation record's score (its EM), so eval pages sort by it too
    rec.reward = _opt_float(metrics.get("reward", row.get("reward", row.get("score"))))
    rec.correct = _opt_float(metrics.get("correct"))
    rec.row_metrics = dict(metrics)
    rec.row_source = _str(row.get("source")) or None
    comps = row.get("reward_components")
    rec.reward_components = dict(comps) if isinstance(comps, dict) else {}
    return rec


def parse_row(row: Any, source: str) -> ViewRecord:
    """One JSON row -> a :class:`ViewRecord`; ValueError naming ``source`` when it is none of the formats."""
    if not isinstance(row, dict):
        raise ValueError(f"{source}: a JSON {type(row).__name__}; {EXPECTED}")
    try:
        if "prediction" in row and "question" in row and "golds" in row:
            return _from_prediction(row, source)
        if _is_trajectory(row.get("trajectory")):
            return _from_rollout(row, source)
        if _is_trajectory(row):
            return _from_trajectory(row, source, "trajectory")
    except (ValueError, TypeError, AttributeError) as err:
        raise ValueError(f"{source}: malformed row ({err}); {EXPECTED}") from None
    keys = ", ".join(sorted(map(str, row))[:12]) or "none"
    raise ValueError(f"{source}: unrecognised row (keys: {keys}); {EXPECTED}")


def iter_records(
    path: str | Path, *, skip_bad: bool = False, errors: list[str] | None = None, display: str | None = None
) -> Iterator[ViewRecord]:
    """Each row of a JSONL file as a :class:`ViewRecord` (formats detected per row), read one line at a time: a
    file of gigabytes (a long run's ``rollouts.jsonl``) never sits in memory.

    Each record's ``source`` is ``display:line`` (``display`` defaults to ``path`` as given).
    A row that is not JSON or not one of the formats raises ValueError naming ``file:line``; with ``skip_bad`` it is
    skipped instead and its message appended to ``errors`` (when given). A last line without its newline that is
    not JSON (a run still writing it) is left out with a warning.
    """
    path = Path(path)
    if path.is_dir():  # a run directory: name the files in it that the viewer reads
        found = sorted(str(f) for f in path.rglob("*.jsonl") if f.name in ("rollouts.jsonl", "trajectories.jsonl"))
        found += sorted(str(f) for f in path.glob("predictions/*.jsonl"))
        hint = f"; e.g. {found[0]}" if found else "; give its rollouts.jsonl or predictions/*.jsonl"
        raise FileNotFoundError(f"{path} is a directory: the viewer reads JSONL files{hint}")
    if not path.is_file():
        raise FileNotFoundError(f"trajectory file not found: {path}")
    for line_no, line in open_lines(path):  # plain or .gz; a line that is not UTF-8 is one error naming it
        if not line.strip():
            continue
        where = f"{display or path}:{line_no}"
        try:
            try:
                row = json.loads(line)
            except json.JSONDecodeError as err:
                if not line.endswith("\n"):  # the last line, still being written (a run in progress): not an error
                    console.log(f"[yellow]warning:[/yellow] {where}: the last line is incomplete; left out")
                    return
                raise ValueError(f"{where}: not valid JSON ({err.msg}, column {err.colno}); {EXPECTED}") from None
            rec = parse_row(row, where)
        except ValueError as err:
            if not skip_bad:
                raise
            if errors is not None:
                errors.append(str(err))
            continue
        yield rec


def load_records(
    path: str | Path, *, skip_bad: bool = False, errors: list[str] | None = None, display: str | None = None
) -> list[ViewRecord]:
    """Every row of a JSONL file as a :class:`ViewRecord`: :func:`iter_records` as a list."""
    return list(iter_records(path, skip_bad=skip_bad, errors=errors, display=display))


# ------------------------------------------------------------------------------------------------ summary


@dataclass
class Summary:
    """The page's numbers over records added one at a time (nothing of a record is kept), so a summary of every
    row of a file of gigabytes needs no list of them; summaries of groups merge into their total."""

    n: int = 0
    n_scored: int = 0
    n_rollouts: int = 0
    n_ruled: int = 0  # scored records that carry their writer's verdict (metrics.correct)
    sums: dict[str, float] = field(default_factory=lambda: dict.fromkeys(_SUMMED, 0.0))
    n_rewards: int = 0
    flags: dict[str, list[int]] = field(default_factory=dict)  # failure flag -> [rows with it, rows it applies to]

    def add(self, r: ViewRecord) -> Summary:
        self.n += 1
        self.n_rollouts += r.kind == "rollout"
        s = self.sums
        if r.golds:
            self.n_scored += 1
            self.n_ruled += r.correct is not None
            s["em"] += r.em or 0.0
            s["f1"] += r.f1 or 0.0
            s["correct"] += float(bool(r.verdict))
        s["answered"] += float(r.answered)
        s["searches"] += r.counts.get("searches", 0)
        s["turns"] += r.counts.get("turns", 0)
        s["invalid"] += float(r.n_invalid > 0)
        if r.reward is not None:
            self.n_rewards += 1
            s["reward"] += r.reward
        if r.diagnostics:
            for name in FLAGS:
                if (v := r.diagnostics.get(name)) is not None:
                    counts = self.flags.setdefault(name, [0, 0])
                    counts[0] += bool(v)
                    counts[1] += 1
        return self

    def merge(self, other: Summary) -> Summary:
        for name in ("n", "n_scored", "n_rollouts", "n_ruled", "n_rewards"):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        for k, v in other.sums.items():
            self.sums[k] += v
        for name, (hit, applies) in other.flags.items():
            counts = self.flags.setdefault(name, [0, 0])
            counts[0] += hit
            counts[1] += applies
        return self

    def result(self) -> dict[str, Any]:
        """See :func:`summarize`."""

        def mean(key: str, n: int) -> float | None:
            return self.sums[key] / n if n else None

        return {
            "n": self.n,
            "n_scored": self.n_scored,
            "em": mean("em", self.n_scored),
            "f1": mean("f1", self.n_scored),
            "correct": mean("correct", self.n_scored) if self.n_ruled else None,
            "answered": mean("answered", self.n),
            "searches": mean("searches", self.n),
            "turns": mean("turns", self.n),
            "invalid": mean("invalid", self.n),
            "reward": mean("reward", self.n_rewards),
            "diagnostics": {k: self.flags[k][0] / self.flags[k][1] for k in FLAGS if k in self.flags},
        }


_SUMMED = ("em", "f1", "correct", "answered", "searches", "turns", "invalid", "reward")


def summarize(records: Iterable[ViewRecord]) -> dict[str, Any]:
    """n, EM / F1 (over records with golds; each row's own scores where it has them), the correct rate (the share
    the badges call correct; None unless some row carries its writer's ``metrics.correct``), answered rate, mean
    searches / turns, invalid rate, mean reward, and the share of evaluation rows with each failure flag (over the
    rows where the flag applies)."""
    total = Summary()
    for r in records:
        total.add(r)
    return total.result()


#: a record's group on the page: (input file, row source, dataset, method)
GroupKey = tuple[str, str, str | None, str | None]


class Tally:
    """A :class:`Summary` per group of records (input file, row source, dataset, method), in order of first
    appearance: the page's summary and its tables per group, from records added one at a time."""

    def __init__(self, records: Iterable[ViewRecord] = ()) -> None:
        self.groups: dict[GroupKey, Summary] = {}
        for r in records:
            self.add(r)

    def add(self, r: ViewRecord) -> None:
        key = (r.file, r.row_source or "-", r.dataset, r.method)
        group = self.groups.get(key)
        if group is None:
            group = self.groups[key] = Summary()
        group.add(r)

    def total(self, keys: Iterable[GroupKey] | None = None) -> Summary:
        """The summary over every group (or those of ``keys``)."""
        out = Summary()
        for k in self.groups if keys is None else keys:
            out.merge(self.groups[k])
        return out
