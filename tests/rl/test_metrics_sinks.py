"""Optional metric sinks: a missing package or a failing W&B login is one warning and the run goes on; a resumed run
logs into the same W&B run; the logs are trimmed for a resume row by row; a full disk is one line naming the log."""

from __future__ import annotations

import errno
import json
import sys
import types
from pathlib import Path

import pytest

from searchrl.rl.metrics_log import MetricsWriter
from searchrl.storage import DiskFull


def _fake_wandb(fail: bool) -> types.ModuleType:
    mod = types.ModuleType("wandb")
    mod.run = None
    mod.calls = []

    def init(**kwargs):
        mod.calls.append(("init", kwargs))
        if fail:
            raise RuntimeError("api_key not configured (no-tty)")
        mod.run = object()

    mod.init = init
    mod.log = lambda m, step: mod.calls.append(("log", step))
    return mod


def test_a_failing_wandb_login_warns_once_and_the_metrics_file_goes_on(tmp_path: Path, monkeypatch, capsys) -> None:
    fake = _fake_wandb(fail=True)
    monkeypatch.setitem(sys.modules, "wandb", fake)
    w = MetricsWriter(tmp_path, wandb=True)
    for step in (1, 2, 3):
        w.write({"step": step, "reward/total": 0.5})
    w.close()
    err = " ".join(capsys.readouterr().err.split())
    assert err.count("Weights & Biases failed (api_key not configured (no-tty))") == 1 and "WANDB_MODE=offline" in err
    assert [c[0] for c in fake.calls] == ["init"]  # tried once
    assert [json.loads(line)["step"] for line in (tmp_path / "metrics.jsonl").read_text().splitlines()] == [1, 2, 3]


def test_wandb_keeps_one_run_per_output_directory_and_a_missing_package_is_said(tmp_path, monkeypatch, capsys):
    fake = _fake_wandb(fail=False)
    monkeypatch.setitem(sys.modules, "wandb", fake)
    MetricsWriter(tmp_path / "a", wandb=True).write({"step": 1})
    first = fake.calls[0][1]
    fake.run = None  # a resumed process
    MetricsWriter(tmp_path / "a", wandb=True).write({"step": 2})
    again = [c for c in fake.calls if c[0] == "init"][1][1]
    assert first["id"] == again["id"] and first["resume"] == "allow"
    monkeypatch.setitem(sys.modules, "wandb", None)  # not installed
    MetricsWriter(tmp_path / "b", wandb=True).write({"step": 1})
    assert "wandb is not installed (pip install wandb)" in " ".join(capsys.readouterr().err.split())


def test_the_closing_line_summarises_the_whole_run_not_its_last_step(tmp_path: Path) -> None:
    import doctest

    from searchrl.rl import metrics_log

    assert doctest.testmod(metrics_log).failed == 0
    rows = [{"step": 0, "eval/em": 0.05}]  # the held-out point before training
    rows += [
        {"step": s, "reward/total": float(s % 2), **({"eval/em": s / 100} if s % 5 == 0 else {})} for s in range(1, 21)
    ]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows) + '{"step": 21, "rew')
    from searchrl.viz.plots import load_metrics

    line = metrics_log.run_summary(load_metrics(tmp_path))
    assert line == (
        "step 20, reward 0.500 (mean of the last 10 steps), held-out EM 0.200 at the end, best 0.200 at step 20"
    )
    (tmp_path / "metrics.jsonl").write_text("")
    assert metrics_log.run_summary(load_metrics(tmp_path)) == "no steps logged"


def test_counts_of_groups_rows_and_memorized_paths_are_summed_over_processes() -> None:
    """Two processes' shares of a step: counts add up (as one process would count the whole step), rates average."""
    from searchrl.rl.metrics_log import combine_process_metrics

    shares = [
        {"grpo/groups": 2.0, "filter/rows": 8.0, "memorization/valid": 3.0, "reward/total": 0.5, "time/step_s": 2.0},
        {"grpo/groups": 2.0, "filter/rows": 0.0, "memorization/valid": 1.0, "reward/total": 0.7, "time/step_s": 3.0},
    ]
    step = combine_process_metrics(shares)
    assert step["grpo/groups"] == 4.0 and step["filter/rows"] == 8.0 and step["memorization/valid"] == 4.0
    assert step["reward/total"] == 0.6 and step["time/step_s"] == 3.0
    assert combine_process_metrics([{"rloo/singleton_groups": 1.0}, {}])["rloo/singleton_groups"] == 1.0


def test_the_step_number_stays_an_int_when_processes_are_combined() -> None:
    """metrics.jsonl says "step": 3 whatever the number of processes (a mean made it 3.0)."""
    from searchrl.rl.metrics_log import combine_process_metrics

    step = combine_process_metrics([{"step": 3, "lr": 0.1, "loss": 1.0}, {"step": 3, "lr": 0.1, "loss": 2.0}])
    assert type(step["step"]) is int and step["step"] == 3 and step["lr"] == 0.1 and step["loss"] == 1.5


def test_a_resume_keeps_earlier_rows_whose_text_holds_a_unicode_line_separator(tmp_path: Path) -> None:
    """rollouts.jsonl is written with ensure_ascii=False, so a row's text may hold U+2028 or U+0085 unescaped;
    trimming the logs for a resume cut lines at those too (str.splitlines) and dropped such rows of earlier steps.
    A last row that lost only its newline gets it back, so the resumed run's first row starts a line of its own."""
    from searchrl.rl.metrics_log import trim_logs

    rows = [{"step": 1, "text": "a\u2028b"}, {"step": 2, "text": "c\x85d"}, {"step": 3, "text": "later"}]
    lines = [json.dumps(r, ensure_ascii=False) for r in rows]
    (tmp_path / "rollouts.jsonl").write_text("\n".join(lines[:2]) + "\n", encoding="utf-8")
    (tmp_path / "metrics.jsonl").write_text("\n".join(lines), encoding="utf-8")  # the last row: no newline
    trim_logs(tmp_path, 2)
    expected = "".join(line + "\n" for line in lines[:2]).encode()
    assert (tmp_path / "rollouts.jsonl").read_bytes() == expected
    assert (tmp_path / "metrics.jsonl").read_bytes() == expected
    (tmp_path / "metrics.jsonl").write_text(lines[0], encoding="utf-8")  # whole, but without its newline
    trim_logs(tmp_path, 2)
    assert (tmp_path / "metrics.jsonl").read_bytes() == (lines[0] + "\n").encode()


def test_trimming_the_logs_for_a_resume_reads_them_a_row_at_a_time(tmp_path: Path) -> None:
    """A long run's rollouts.jsonl holds gigabytes; the trim before a resume held the whole file twice in memory
    (its text and its lines). Its peak now stays far under the file's size."""
    import tracemalloc

    from searchrl.rl.metrics_log import trim_logs

    row = {"trajectory": {"response_ids": list(range(100_000, 106_000))}}
    with (tmp_path / "rollouts.jsonl").open("w") as f:
        for i in range(160):  # ~7 MB: 40 steps of 4 rows
            f.write(json.dumps({"step": i // 4 + 1, **row}) + "\n")
    size = (tmp_path / "rollouts.jsonl").stat().st_size
    tracemalloc.start()
    try:
        trim_logs(tmp_path, 30)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    steps = [json.loads(line)["step"] for line in (tmp_path / "rollouts.jsonl").read_text().splitlines()]
    assert steps == [i // 4 + 1 for i in range(120)]
    assert peak < size / 10, (peak, size)


def test_a_full_disk_while_logging_is_one_line_naming_the_log(tmp_path: Path) -> None:
    class FullDisk:
        def write(self, _text: str) -> None:
            raise OSError(errno.ENOSPC, "No space left on device")

    w = MetricsWriter(tmp_path)
    w.write({"step": 1, "reward/total": 0.5})
    w._f = FullDisk()  # the disk fills up after the first row
    with pytest.raises(DiskFull) as err:
        w.write({"step": 2, "reward/total": 0.6})
    assert str(err.value) == (
        f"cannot write {tmp_path / 'metrics.jsonl'}: the disk is full (no space left on it); the rows of the steps "
        "before are kept (a resume drops a row cut short): free some space, then run again"
    )
