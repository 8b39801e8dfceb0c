"""``training.profile_step``: one RL step under ``torch.profiler``, written as text tables next to the metrics.

The tables list the operators by their own host time and, on a GPU, by their device time, with each phase of the step
(``rollout``, ``score``, ``update``) as a labelled range, so a slow phase points at its operators.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from pathlib import Path

import torch


@contextmanager
def profiled_step(path: Path, rows: int = 40) -> Iterator[None]:
    """Profile the block; write ``path`` (operators by self CPU time, then by self device time on CUDA)."""
    from torch.profiler import ProfilerActivity, profile

    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if torch.cuda.is_available() else [])
    with profile(activities=acts) as prof:
        yield
        if torch.cuda.is_available():
            torch.cuda.synchronize()
    avg = prof.key_averages()
    text = [avg.table(sort_by="self_cpu_time_total", row_limit=rows)]
    if torch.cuda.is_available():
        text.append(avg.table(sort_by="self_device_time_total", row_limit=rows))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n\n".join(text))


def maybe_profiled(step: int, profile_step: int, out_dir: Path):
    """``profiled_step`` for step ``profile_step`` (1-based), else a no-op context."""
    if profile_step and step == profile_step:
        return profiled_step(out_dir / f"profile_step{step}.txt")
    return nullcontext()


def phase(name: str):
    """A labelled range in a profile (free when no profiler runs)."""
    return torch.profiler.record_function(name)
