"""Curve PNGs: one labelled panel per logged metric, integer step ticks, an optional moving average, the run's name."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from typer.testing import CliRunner

from searchrl.cli import app
from searchrl.viz import plots
from searchrl.viz.plots import moving_average, plot_run

runner = CliRunner()


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


def test_metrics_are_read_a_line_at_a_time(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A long run's metrics.jsonl is not read whole into memory (its text, then its lines, then the rows)."""
    run = _run(tmp_path, [{"step": s, "reward/total": 0.1} for s in range(1, 4)])

    def whole(self, *args, **kwargs):
        raise AssertionError(f"{self} read whole")

    monkeypatch.setattr(Path, "read_text", whole)
    monkeypatch.setattr(Path, "read_bytes", whole)
    assert [r["step"] for r in plots.load_metrics(run)] == [1, 2, 3]


def test_the_printed_path_is_the_file_written(tmp_path: Path) -> None:
    """``--out DIR`` (existing or not) writes DIR/curves.png and ``--out name.pdf`` that file; the returned path is
    the file written."""
    run = _run(tmp_path, [{"step": 1, "reward/total": 0.1}, {"step": 2, "reward/total": 0.2}])
    assert plot_run(run, tmp_path) == tmp_path / "curves.png" and (tmp_path / "curves.png").is_file()
    assert plot_run(run, tmp_path / "new") == tmp_path / "new" / "curves.png"  # no image suffix: a directory
    assert (tmp_path / "new" / "curves.png").is_file()
    assert plot_run(run, tmp_path / "c.pdf") == tmp_path / "c.pdf" and (tmp_path / "c.pdf").read_bytes()[:4] == b"%PDF"
    (tmp_path / "notes").write_text("mine")
    with pytest.raises(ValueError, match="is a file without an image suffix"):
        plot_run(run, tmp_path / "notes")  # not made a directory over a file of the user's
    assert (tmp_path / "notes").read_text() == "mine"


def test_a_resumed_run_plots_each_step_once_and_lost_values_are_counted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A resumed run appends the steps after its last checkpoint again: the last value of a step is drawn, in step
    order; values logged as null (NaN, inf) are counted aloud, and a row that is not an object names its line."""
    from searchrl import utils

    first = [{"step": s, "reward/total": 0.1 * s} for s in range(1, 6)]
    again = [{"step": s, "reward/total": 1.0 + s} for s in range(3, 8)] + [{"step": 8, "reward/total": None}]
    run = _run(tmp_path, first + again)
    points = plots._series(plots.load_metrics(run))[0]["reward/total"]
    assert points[:-1] == [(1, 0.1), (2, 0.2), *[(s, 1.0 + s) for s in range(3, 8)]]
    assert points[-1][0] == 8 and math.isnan(points[-1][1])  # null: not finite, a break in the line
    monkeypatch.setattr(utils.console, "width", 400)
    with utils.console.capture() as cap:
        plot_run(run)
    assert "1 value not finite (NaN, inf): the line breaks there, marked x (reward/total at step 8)" in cap.get()
    (run / "metrics.jsonl").write_text('{"step": 1}\n[1, 2]\n')
    with pytest.raises(ValueError, match=r"metrics\.jsonl:2: not a JSON object"):
        plots.load_metrics(run)


def _figure(monkeypatch: pytest.MonkeyPatch):
    """The figures plot_runs draws, kept from being closed so a test can read them."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figures: list = []
    monkeypatch.setattr(plt, "close", lambda fig: figures.append(fig))
    return figures


def _axes(fig) -> dict:
    return {a.get_title(): a for a in fig.get_axes()}


def test_a_blow_up_breaks_the_line_and_is_marked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """NaN / inf are gaps in the line and red x marks at the panel's edge; strings and rows without an integer step
    are named apart in the warning."""
    from searchrl import utils

    figures = _figure(monkeypatch)
    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics.jsonl").write_text(
        '{"step": 1, "reward/total": 0.1}\n{"step": 2, "reward/total": NaN}\n{"step": 3, "reward/total": Infinity}\n'
        '{"step": 4, "reward/total": 0.4}\n{"step": 5, "reward/total": "0.5"}\n{"step": "6", "reward/total": 0.6}\n'
        '{"step": 6.5, "reward/total": 0.6}\n{"reward/total": 0.7}\n{"step": 7, "reward/total": 0.7}\n'
    )
    monkeypatch.setattr(utils.console, "width", 400)
    with utils.console.capture() as cap:
        plot_run(run)
    log = cap.get()
    assert "2 values not finite (NaN, inf): the line breaks there, marked x" in log
    assert "1 value not a number: not drawn (reward/total = '0.5' at step 5)" in log
    assert "3 rows without an integer step: not drawn (step '6'; step 6.5; ...)" in log
    ax = _axes(figures[0])["reward"]
    (line,) = ax.get_lines()
    ys = list(line.get_ydata())
    assert list(line.get_xdata()) == [1, 2, 3, 4, 5, 7] and all(math.isnan(y) for y in ys[1:3] + ys[4:5])
    (marks,) = ax.collections
    assert [list(p) for p in marks.get_offsets()] == [[2, 1.0], [3, 1.0]]  # at the top edge, in axes coordinates
    assert ax.get_xlim()[0] < 1 and ax.get_xlim()[1] > 7


def test_rate_panels_share_the_unit_range_and_one_step_gets_integer_ticks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    figures = _figure(monkeypatch)
    rows = [{"step": 3, "rollout/em": 0.2, "eval/f1": 0.25, "reward/total": 0.4, "rollout/well_formed": 1.0}]
    plot_run(_run(tmp_path, rows))
    axes = _axes(figures[0])
    for name in ("EM (rollouts)", "F1 (held-out, greedy)", "well-formed rate"):
        assert axes[name].get_ylim() == (-0.05, 1.05)
    assert axes["reward"].get_ylim() != (-0.05, 1.05)  # a reward is not a rate
    for ax in axes.values():
        assert ax.get_xlim() == (2, 4) and ax.get_lines()[0].get_markersize() >= 5
        assert all(float(t).is_integer() for t in ax.get_xticks())


def test_several_runs_overlay_with_a_colour_and_a_legend_entry_each(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    figures = _figure(monkeypatch)
    runs = []
    for name, scale in (("grpo", 1.0), ("ppo", 2.0)):
        run = tmp_path / "runs" / name
        run.mkdir(parents=True)
        rows = [{"step": s, "reward/total": scale * s} for s in range(1, 6)] + [{"step": 5, "eval/em": 0.1 * scale}]
        (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        runs.append(run)
    monkeypatch.chdir(tmp_path)
    out = plots.plot_runs(runs, smooth=2)
    assert out == Path("curves.png") and out.is_file()  # in the working directory, not inside one of the runs
    (fig,) = figures
    reward = _axes(fig)["reward"]
    colours = {line.get_color() for line in reward.get_lines()}
    assert colours == {"C0", "C1"} and len(reward.get_lines()) == 4  # per step and mean, per run
    (legend,) = fig.legends
    assert [t.get_text() for t in legend.get_texts()] == ["grpo", "ppo"]
    assert fig._suptitle.get_text() == "grpo vs ppo"
    res = runner.invoke(app, ["plot", *map(str, runs), "--out", str(tmp_path / "cmp.svg")])
    assert res.exit_code == 0 and res.stdout.strip() == str(tmp_path / "cmp.svg"), res.output


def test_smoothing_skips_gaps_and_its_help_says_points() -> None:
    assert moving_average([1.0, float("nan"), 5.0, 7.0], 2)[2:] == [5.0, 6.0]
    assert math.isnan(moving_average([1.0, float("nan")], 3)[1])
    res = runner.invoke(app, ["plot", "--help"])
    assert "logged points" in " ".join(res.output.split())
