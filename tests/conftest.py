"""Shared fixtures. Tests that need ../shared/data skip with a clear reason when it is absent (a user's machine)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import settings

# Property tests: no per-example deadline (a garbage-collection pause late in a long run is not a failure), and in
# CI the same examples on every run, so one run's luck cannot turn the suite red. Locally they explore anew.
settings.register_profile("searchrl", deadline=None, derandomize=bool(os.environ.get("CI")))
settings.load_profile("searchrl")

_DEFAULT = Path(__file__).resolve().parents[1].parent / "shared" / "data"
SHARED_DATA = Path(os.environ.get("SEARCHRL_SHARED_DATA", _DEFAULT))


@pytest.fixture(scope="session")
def shared_data() -> Path:
    if not SHARED_DATA.is_dir():
        pytest.skip(f"../shared/data not found at {SHARED_DATA} (set SEARCHRL_SHARED_DATA to run these tests)")
    return SHARED_DATA


@pytest.fixture(autouse=True, scope="session")
def _quiet_progress() -> None:
    os.environ.setdefault("SEARCHRL_NO_PROGRESS", "1")


@pytest.fixture
def trickling(monkeypatch: pytest.MonkeyPatch):
    """``(transport, pieces)``: an httpx transport whose reply never ends, a byte a piece, under a deadline clock
    (``searchrl.httputil``'s) that moves one second a piece; ``pieces`` counts the bytes sent."""
    import httpx

    from searchrl import httputil

    clock, pieces = {"t": 0.0}, []
    monkeypatch.setattr(httputil.time, "monotonic", lambda: clock["t"])

    def drip():
        for _ in range(1000):
            clock["t"] += 1.0
            pieces.append(1)
            yield b" "

    return httpx.MockTransport(lambda request: httpx.Response(200, content=drip())), pieces
