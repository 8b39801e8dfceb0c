"""Answering one (dataset, method) pair of an evaluation, resumable.

With a resume key, each answered batch's rows are appended to ``predictions/<pair>.jsonl.partial`` as the batch
finishes (after a first line holding the key). A rerun whose key is the same keeps those rows and answers only the
questions they lack; another key starts the pair afresh. ``searchrl eval`` keys on the whole resolved config, a
local policy directory's files, the indexes' manifests and each pair's questions (ids, texts and golds). The partial
files stay until the whole evaluation has finished, so a run cut short in its fifth pair keeps the four it finished;
a line cut by the interruption is answered again.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

from rich.progress import Progress, TaskID

from searchrl import partial as partial_rows
from searchrl.config import RunConfig
from searchrl.config.extensions import code_digests
from searchrl.data.records import QAExample
from searchrl.eval.method import Method, Prediction
from searchrl.partial import digest
from searchrl.pipeline import eval_set_indexes
from searchrl.utils import console

Row = dict[str, Any]


def settings_key(cfg: RunConfig, policy: str | None = None, sections: Sequence[str] | None = None) -> str:
    """The whole resolved config (or only its ``sections``), the digests of its plugins' files and, for a policy in a
    local directory (``policy``, default ``training.init_from`` or ``model.policy``), its files' sizes and times, and
    the same of every index's manifest: answers of a model trained again into the same directory, or retrieved from
    an index rebuilt in place, are not taken for the new one's."""
    policy = Path(policy or cfg.training.init_from or cfg.model.policy)
    files = sorted(f for f in policy.iterdir() if f.is_file()) if policy.is_dir() else []
    indexes = [cfg.retrieval.index, *eval_set_indexes(cfg)]
    files += [m for d in indexes if d and (m := Path(d) / "manifest.json").is_file()]
    stamp = [(str(f), f.stat().st_size, f.stat().st_mtime_ns) for f in files]
    # a plugin's method or protocol edited since: its answers are not the new one's
    code = [json.dumps(code_digests(cfg.plugins), sort_keys=True)] if cfg.plugins else []
    some = None if sections is None else cfg.model_dump(mode="json", include=set(sections))
    config = cfg.model_dump_json() if some is None else json.dumps(some, sort_keys=True)
    return digest(config, json.dumps(stamp), *code)


def partial_path(path: Path) -> Path:
    return path.with_name(path.name + ".partial")


def _slots(examples: Sequence[QAExample]) -> list[str]:
    """One name per example, unique even where a file repeats a question under its id: the id and its occurrence."""
    seen: Counter[str] = Counter()
    out = []
    for ex in examples:
        out.append(f"{ex.id}#{seen[ex.id]}")
        seen[ex.id] += 1
    return out


def answer_pair(
    method: Method,
    examples: Sequence[QAExample],
    batch_size: int,
    to_row: Callable[[QAExample, Prediction], Row],
    path: Path,
    key: str | None = None,
    bar: Progress | None = None,
    task: TaskID | None = None,
) -> list[Row]:
    """Every example's row, in order: run ``method`` in batches (advancing ``task`` of ``bar``), ``to_row`` each
    prediction. With ``key`` (plus a digest of the pair's questions), resumable as the module says; ``path`` is the
    pair's predictions file."""
    slots, partial = _slots(examples), partial_path(path)
    if key:
        key = digest(key, *(json.dumps([ex.id, ex.question, list(ex.answers)]) for ex in examples))
    kept = partial_rows.kept(partial, key) if key else {}
    kept = {s: kept[s] for s in slots if s in kept}
    if kept:
        console.log(f"{path.stem}: {len(kept)} of {len(examples)} answers kept from an interrupted run")
    elif key:
        partial_rows.start(partial, key)
    if bar is not None and task is not None:
        bar.advance(task, len(kept))
    todo = [(s, ex) for s, ex in zip(slots, examples, strict=True) if s not in kept]
    for start in range(0, len(todo), batch_size):
        batch = todo[start : start + batch_size]
        preds = method.answer([ex for _, ex in batch])
        if len(preds) != len(batch):
            raise RuntimeError(f"method {method.name} returned {len(preds)} predictions for {len(batch)} questions")
        rows = [(s, to_row(ex, p)) for (s, ex), p in zip(batch, preds, strict=True)]
        kept.update(rows)
        if key:
            partial_rows.write(partial, None, rows, "a")
        if bar is not None and task is not None:
            bar.advance(task, len(batch))
    return [kept[s] for s in slots]


def finish(paths: Iterable[Path]) -> None:
    """The whole evaluation is written: the pairs' partial files go."""
    for path in paths:
        partial_path(path).unlink(missing_ok=True)
