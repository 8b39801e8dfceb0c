"""Curve PNGs: one labelled panel per logged metric, integer step ticks, an optional moving average, the run's name."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from searchrl.viz import plots
from searchrl.viz.plots import moving_average, plot_run


def _run(tmp: Path, rows: list[dict]) -> Path:
    run = tmp / "my-run"
    run.mkdir()
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return run


def test_moving_average_is_trailing() -> None:
    assert moving_average([1.0, 3.0, 5.0, 7.0], 3) == [1.0, 2.0, 3.0, 5.0]
    assert moving_average([2.0, 4.0], 0) == [2.0, 4.0]


def test_panels_have_labels_integer_ticks_and_title(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [{"step": s, "reward/total": 0.1 * s, "kl/mean": 0.01 * s} for s in range(1, 8)]
    rows.append({"step": 8, "eval/em": float("nan")})  # a metric with no finite value gets no panel
    run = _run(tmp_path, rows)
    figures = []
    monkeypatch.setattr(plt, "close", lambda fig: figures.append(fig))
    out = plot_run(run, smooth=3)
    assert out == run / "curves.png" and out.stat().st_size > 0
    (fig,) = figures
    axes = fig.get_axes()
    assert [a.get_title() for a in axes] == ["reward", "KL to reference"]  # no empty or NaN-only panel
    assert all(a.get_ylabel() and a.get_xlabel() == "step" for a in axes)
    assert fig._suptitle.get_text() == "my-run"
    for a in axes:
        ticks = [t for t in a.get_xticks() if a.get_xlim()[0] <= t <= a.get_xlim()[1]]
        assert ticks and all(float(t).is_integer() for t in ticks)
        assert len(a.get_lines()) == 2  # per step + moving average


def test_no_plottable_metric_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="no plottable metrics"):
        plot_run(_run(tmp_path, [{"step": 1, "other": 1.0}]))
    assert plots.PANELS[0][0] == "reward/total"


def test_a_run_still_writing_its_last_line_plots_what_is_complete(tmp_path: Path) -> None:
    """A half-written last line (the run is still going) is left out; a broken line before it names file:line."""
    run = _run(tmp_path, [{"step": 1, "reward/total": 0.1}, {"step": 2, "reward/total": 0.2}])
    with (run / "metrics.jsonl").open("a") as f:
        f.write('{"step": 3, "rew')
    assert [r["step"] for r in plots.load_metrics(run)] == [1, 2]
    (run / "metrics.jsonl").write_text('{"step": 1}\n{oops\n{"step": 2}\n')
    with pytest.raises(ValueError, match=r"metrics\.jsonl:2: not valid JSON"):
        plots.load_metrics(run)


def test_the_printed_path_is_the_file_written(tmp_path: Path) -> None:
    """``--out DIR`` writes DIR/curves.png and ``--out name`` writes name.png; the returned path is that file."""
    run = _run(tmp_path, [{"step": 1, "reward/total": 0.1}, {"step": 2, "reward/total": 0.2}])
    assert plot_run(run, tmp_path) == tmp_path / "curves.png" and (tmp_path / "curves.png").is_file()
    assert plot_run(run, tmp_path / "noext") == tmp_path / "noext.png" and (tmp_path / "noext.png").is_file()


def test_a_resumed_run_plots_each_step_once_and_lost_values_are_counted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A resumed run appends the steps after its last checkpoint again: the last value of a step is drawn, in step
    order; values logged as null (NaN, inf) are counted aloud, and a row that is not an object names its line."""
    from searchrl import utils

    first = [{"step": s, "reward/total": 0.1 * s} for s in range(1, 6)]
    again = [{"step": s, "reward/total": 1.0 + s} for s in range(3, 8)] + [{"step": 8, "reward/total": None}]
    run = _run(tmp_path, first + again)
    assert plots._points(plots.load_metrics(run), "reward/total") == [
        (1, 0.1),
        (2, 0.2),
        *[(s, 1.0 + s) for s in range(3, 8)],
    ]
    monkeypatch.setattr(utils.console, "width", 400)
    with utils.console.capture() as cap:
        plot_run(run)
    assert "1 logged values are not finite numbers" in cap.get()
    (run / "metrics.jsonl").write_text('{"step": 1}\n[1, 2]\n')
    with pytest.raises(ValueError, match=r"metrics\.jsonl:2: not a JSON object"):
        plots.load_metrics(run)
