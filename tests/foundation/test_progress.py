"""Progress in a non-interactive log: plain lines every few percent, whether a task is advanced or updated."""

from __future__ import annotations

import pytest

from searchrl import utils


@pytest.mark.parametrize("how", ["advance", "update"])
def test_plain_progress_lines_in_a_log(monkeypatch, capsys, how: str) -> None:
    monkeypatch.delenv("SEARCHRL_NO_PROGRESS", raising=False)
    with utils.progress(every=25.0) as bar:
        assert bar._plain  # pytest captures stderr: not a terminal
        task = bar.add_task("eval / agent", total=8)
        for _ in range(8):
            bar.advance(task, 1) if how == "advance" else bar.update(task, advance=1)
    lines = [line for line in capsys.readouterr().err.splitlines() if "eval / agent" in line]
    assert [line.split(": ")[1].split(" ")[0] for line in lines] == [
        "1/8",
        "3/8",
        "5/8",
        "7/8",
        "8/8",
    ]  # the first, then every 25%


def test_eta_of_a_resumed_task_counts_only_the_work_done_here(monkeypatch, capsys) -> None:
    """A run resumed at 12 of 20 steps: the rate comes from the steps this process ran, not from the 12 before."""
    monkeypatch.delenv("SEARCHRL_NO_PROGRESS", raising=False)
    clock = iter([100.0, 110.0])  # the task is added at t=100; one step ends at t=110
    monkeypatch.setattr(utils.time, "perf_counter", lambda: next(clock))
    with utils.progress() as bar:
        task = bar.add_task("rl steps", total=20, completed=12)
        bar.update(task, advance=1)
    line = next(line for line in capsys.readouterr().err.splitlines() if "rl steps" in line)
    assert "13/20" in line and "elapsed 10s eta 70s" in line  # 7 steps left at 10 s each


def test_a_slow_task_prints_a_line_after_a_quiet_spell_whatever_its_percent(monkeypatch, capsys) -> None:
    """1000 steps of 61 s: every 5% would be a line every 50 steps (51 minutes); one comes every 10 minutes."""
    monkeypatch.delenv("SEARCHRL_NO_PROGRESS", raising=False)
    clock = iter(61.0 * i for i in range(100))
    monkeypatch.setattr(utils.time, "perf_counter", lambda: next(clock))
    with utils.progress() as bar:
        task = bar.add_task("rl steps", total=1000)
        for _ in range(25):
            bar.update(task, advance=1)
    steps = [line.split(": ")[1].split(" ")[0] for line in capsys.readouterr().err.splitlines() if "rl steps" in line]
    assert steps == ["1/1000", "11/1000", "21/1000"]  # the first, then one after each 600 s without a line
