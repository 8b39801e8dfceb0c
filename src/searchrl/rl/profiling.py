"""``training.profile_step``: one RL step under ``torch.profiler``, written as text tables next to the metrics.

The tables list the operators by their own host time and, on a GPU, the kernels by their device time, with each phase
of the step (``rollout``, ``score``, ``update``) as a labelled range, so a slow phase points at its operators.

The tables are summed straight from the profiler's raw events (:func:`summarise`): torch's ``key_averages`` builds a
Python object tree over every event first, which took minutes for the million events of a GRPO step of 320 rows on
a GPU (28 s for 500k events on a laptop core, against 1 s for this sum).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from pathlib import Path

import torch


@contextmanager
def profiled_step(path: Path, rows: int = 40) -> Iterator[None]:
    """Profile the block; write ``path`` (phases, host operators by self time, device kernels by time)."""
    from torch.profiler import ProfilerActivity, profile

    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if torch.cuda.is_available() else [])
    with profile(activities=acts) as prof:
        yield
        if torch.cuda.is_available():
            torch.cuda.synchronize()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(summarise(prof.profiler.kineto_results.events(), rows), encoding="utf-8")


def summarise(events, rows: int = 40) -> str:
    """Text tables of raw profiler events (objects with ``name()``, ``device_type()``, ``start_ns()``,
    ``duration_ns()``, ``start_thread_id()`` and ``is_user_annotation()``): the labelled ranges, the host operators
    by self time (their time minus the operators nested in them, per thread) and the device work by time."""
    ranges: dict[str, list[float]] = defaultdict(lambda: [0.0, 0])
    host: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0, 0])  # self ns, total ns, calls
    device: dict[str, list[float]] = defaultdict(lambda: [0.0, 0])
    threads: dict[int, list] = defaultdict(list)
    for e in events:
        if e.device_type() != torch.autograd.DeviceType.CPU:
            d = device[e.name()]
            d[0] += e.duration_ns()
            d[1] += 1
        elif e.is_user_annotation():
            r = ranges[e.name()]
            r[0] += e.duration_ns()
            r[1] += 1
        else:
            threads[e.start_thread_id()].append((e.start_ns(), e.start_ns() + e.duration_ns(), e.name()))
    for evs in threads.values():
        evs.sort(key=lambda x: (x[0], -x[1]))  # a parent before the children that start with it
        stack: list[list] = []  # [end, name, children's ns]
        for start, end, name in evs:
            while stack and stack[-1][0] <= start:
                _close(stack.pop(), host, stack)
            stack.append([end, name, 0, end - start])
        while stack:
            _close(stack.pop(), host, stack)
    out = []
    if ranges:
        out.append(_table("labelled ranges (wall time on the host)", ranges, rows, lambda v: (v[0], v[0], v[1])))
    out.append(_table("host operators by self time", host, rows, lambda v: (v[0], v[1], v[2])))
    if device:
        out.append(_table("device work by time", device, rows, lambda v: (v[0], v[0], v[1])))
    return "\n\n".join(out) + "\n"


def _close(frame: list, host: dict, stack: list) -> None:
    end, name, children, duration = frame
    h = host[name]
    h[0] += duration - children
    h[1] += duration
    h[2] += 1
    if stack:
        stack[-1][2] += duration


def _table(title: str, agg: dict, rows: int, key) -> str:
    items = sorted(((name, *key(v)) for name, v in agg.items()), key=lambda r: -r[1])
    total = sum(r[1] for r in items) or 1
    lines = [
        f"## {title}: {total / 1e6:.1f} ms in all",
        "",
        f"{'name':<70} {'self ms':>10} {'%':>6} {'total ms':>10} {'calls':>8} {'avg us':>9}",
    ]
    for name, self_ns, total_ns, calls in items[:rows]:
        short = name if len(name) <= 70 else name[:67] + "..."
        lines.append(
            f"{short:<70} {self_ns / 1e6:>10.1f} {100 * self_ns / total:>6.1f} {total_ns / 1e6:>10.1f} "
            f"{int(calls):>8} {self_ns / 1e3 / max(calls, 1):>9.1f}"
        )
    return "\n".join(lines)


def maybe_profiled(step: int, profile_step: int, out_dir: Path):
    """``profiled_step`` for step ``profile_step`` (1-based), else a no-op context."""
    if profile_step and step == profile_step:
        return profiled_step(out_dir / f"profile_step{step}.txt")
    return nullcontext()


def phase(name: str):
    """A labelled range in a profile (free when no profiler runs)."""
    return torch.profiler.record_function(name)
