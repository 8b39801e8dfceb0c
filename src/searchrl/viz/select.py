"""Which records a viewer page shows: a window over the records read (the first ``limit``, or the last ones).
Records are offered one at a time as the files are read; a window keeps at most ``limit`` of them, so a page of a
file of gigabytes needs the memory of the page, not of the file."""

from __future__ import annotations

from collections import deque

from searchrl.viz.records import ViewRecord


class Window:
    """The records a page shows among those offered, in file order: the first ``limit``; with ``last``, the last
    ``limit``. ``limit <= 0``: every record."""

    def __init__(self, limit: int, *, last: bool = False):
        self.limit, self.last = limit, last
        self.n = 0  # records offered
        keep = limit if last and limit > 0 else None
        self._kept: deque[ViewRecord] | list[ViewRecord] = deque(maxlen=keep) if last else []

    def offer(self, rec: ViewRecord) -> None:
        self.n += 1
        if self.limit <= 0 or self.last or len(self._kept) < self.limit:
            self._kept.append(rec)  # a deque of limit drops the oldest

    def records(self) -> list[ViewRecord]:
        return list(self._kept)
