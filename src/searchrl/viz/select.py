"""Which records a viewer page shows: a filter (dataset, method, correct / wrong / invalid, a range of steps) and a
window over the records that pass it (the first ``limit``, a page further on, the last ones, or a random sample).
Records are offered one at a time as the files are read; a window keeps at most ``limit`` (+ ``offset`` with
``last``) of them, so a page of a file of gigabytes needs the memory of the page, not of the file."""

from __future__ import annotations

import random
from collections import deque
from dataclasses import dataclass

from searchrl.viz.records import ViewRecord

ONLY = ("correct", "wrong", "invalid")


def parse_steps(text: str | None) -> tuple[int | None, int | None] | None:
    """``"200"`` -> (200, 200), ``"100:200"`` -> (100, 200) (both ends included), ``"1000:"`` / ``":50"`` open on
    one side; None or "" -> None (every step).

    >>> parse_steps("100:200"), parse_steps("1000:"), parse_steps("7")
    ((100, 200), (1000, None), (7, 7))
    """
    if text is None or not text.strip():
        return None
    lo, sep, hi = text.partition(":")
    try:
        bounds = (int(lo) if lo.strip() else None, int(hi) if hi.strip() else None) if sep else (int(text),) * 2
    except ValueError:
        raise ValueError(f"--step {text!r}: give a step (200) or a range (100:200, 1000:, :50)") from None
    if bounds[0] is not None and bounds[1] is not None and bounds[0] > bounds[1]:
        raise ValueError(f"--step {text!r}: the range is empty; give FIRST:LAST with FIRST <= LAST")
    return bounds


@dataclass(frozen=True)
class RowFilter:
    """Records of the given datasets and methods (any of each; all when none given), only the correct / wrong /
    invalid ones (``only``), of steps in ``steps`` (both ends included; a record without a step is left out)."""

    datasets: tuple[str, ...] = ()
    methods: tuple[str, ...] = ()
    only: str | None = None
    steps: tuple[int | None, int | None] | None = None

    def __post_init__(self) -> None:
        if self.only is not None and self.only not in ONLY:
            raise ValueError(f"--only {self.only!r}: choose one of {', '.join(ONLY)}")

    @property
    def active(self) -> bool:
        return bool(self.datasets or self.methods or self.only or self.steps)

    def matches(self, r: ViewRecord) -> bool:
        if self.datasets and r.dataset not in self.datasets:
            return False
        if self.methods and r.method not in self.methods:
            return False
        if self.only == "invalid" and r.n_invalid == 0:
            return False
        if self.only in ("correct", "wrong") and r.verdict is not (self.only == "correct"):
            return False
        if self.steps is not None:
            lo, hi = self.steps
            if r.step is None or (lo is not None and r.step < lo) or (hi is not None and r.step > hi):
                return False
        return True

    def describe(self) -> str:
        """``dataset nq or hotpotqa, only wrong, steps 100-200`` (``steps from 1000``, ``steps up to 50``)."""
        parts = []
        if self.datasets:
            parts.append("dataset " + " or ".join(self.datasets))
        if self.methods:
            parts.append("method " + " or ".join(self.methods))
        if self.only:
            parts.append(f"only {self.only}")
        if self.steps is not None:
            lo, hi = self.steps
            if lo == hi:
                parts.append(f"step {lo}")
            else:
                parts.append(
                    f"steps from {lo}" if hi is None else f"steps up to {hi}" if lo is None else f"steps {lo}-{hi}"
                )
        return ", ".join(parts)


class Window:
    """The records a page shows among those offered, in file order: the first ``limit`` after skipping ``offset``;
    with ``last``, the last ``limit`` before the last ``offset``; with ``sample``, a uniform random sample of
    ``limit`` (reservoir sampling, seeded: the same files give the same page). ``limit <= 0``: every record."""

    def __init__(self, limit: int, *, offset: int = 0, last: bool = False, sample: bool = False, seed: int = 0):
        if offset < 0:
            raise ValueError(f"--offset {offset}: give 0 or more records to skip")
        if sample and (last or offset):
            raise ValueError("--sample draws from every record: leave out --last and --offset")
        self.limit, self.offset, self.last, self.sample = limit, offset, last, sample
        self.n = 0  # records offered
        self._rng = random.Random(seed)
        keep = limit + offset if last and limit > 0 else None
        self._kept: deque[tuple[int, ViewRecord]] | list[tuple[int, ViewRecord]] = deque(maxlen=keep) if last else []

    def offer(self, rec: ViewRecord) -> None:
        i, self.n = self.n, self.n + 1
        kept = self._kept
        if self.limit <= 0 or self.last:
            kept.append((i, rec))  # a deque of limit + offset drops the oldest
        elif self.sample:
            if len(kept) < self.limit:
                kept.append((i, rec))
            elif (j := self._rng.randrange(i + 1)) < self.limit:
                kept[j] = (i, rec)
        elif self.offset <= i < self.offset + self.limit:
            kept.append((i, rec))

    def records(self) -> list[ViewRecord]:
        kept = sorted(self._kept, key=lambda x: x[0]) if self.sample else list(self._kept)
        if self.last and self.offset and self.limit > 0:
            kept = kept[: max(len(kept) - self.offset, 0)]
        elif self.limit <= 0 and self.offset:
            kept = kept[: len(kept) - self.offset] if self.last else kept[self.offset :]
        return [r for _, r in kept]

    def which(self, shown: int) -> str:
        """What the shown records are, for the page: ``the first 500``, ``records 501-1000``, ``a random sample of
        500``, ``the last 200``."""
        if self.sample:
            return f"a random sample of {shown}"
        if self.offset and shown:
            first = self.n - self.offset - shown + 1 if self.last else self.offset + 1
            return f"records {first}-{first + shown - 1}"
        return f"the {'last' if self.last else 'first'} {shown}"
