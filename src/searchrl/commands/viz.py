"""``searchrl plot``: PNG training curves of a run; ``searchrl view``: an HTML page of trajectories."""

from __future__ import annotations

import typer


def plot(
    run_dirs: list[str] = typer.Argument(
        ..., help="run directories with metrics.jsonl; several: overlaid, a colour each"
    ),
    out: str = typer.Option(
        None,
        "--out",
        "-o",
        help="image file (.png, .pdf, .svg, ...), or a directory (created) for curves.png; default: "
        "RUN_DIR/curves.png, for several runs ./curves.png",
    ),
    smooth: int = typer.Option(
        0, "--smooth", min=0, help="overlay a trailing mean over each metric's last N logged points (0: none)"
    ),
    title: str = typer.Option(None, "--title", help="figure title (default: the run directory's name)"),
) -> None:
    """Write reward / EM / length / searches curves over steps as an image; several runs share each panel.

    NaN / inf values break the line and are marked with a red x. --smooth counts logged points, not steps: an
    eval metric logged every 20 steps averages over 20*N steps.

    Example: searchrl plot runs/demo/rl --smooth 5
    Example: searchrl plot runs/grpo runs/ppo --out compare.png
    """
    from searchrl.viz.plots import plot_runs

    print(plot_runs(run_dirs, out, smooth=smooth, title=title))


def view(
    paths: list[str] = typer.Argument(..., help="JSONL files: trajectories, rollouts.jsonl or eval predictions"),
    out: str = typer.Option(None, "--out", "-o", help="HTML path (default: <first path stem>.html beside it)"),
    limit: int = typer.Option(
        500, min=0, help="render at most N records (the first ones, or the last with --last); 0 = all"
    ),
    skip_bad: bool = typer.Option(False, "--skip-bad", help="skip malformed rows (counted) instead of failing"),
    title: str = typer.Option(None, help="page title (default: the file names)"),
    last: bool = typer.Option(
        False, "--last", help="render the last --limit records (a run's latest steps), not the first"
    ),
    offset: int = typer.Option(
        0, "--offset", min=0, help="skip the first N records (with --last, the last N): --offset 500 is the next page"
    ),
    sample: bool = typer.Option(
        False, "--sample", help="render a random sample of --limit records from all the files (seeded), not the first"
    ),
    dataset: list[str] = typer.Option(None, "--dataset", help="only rows of this dataset (repeat for several)"),
    method: list[str] = typer.Option(None, "--method", help="only rows of this method (repeat for several)"),
    only: str = typer.Option(None, "--only", help="only the correct, wrong or invalid rows"),
    step: str = typer.Option(None, "--step", help="only rows of this step or range of steps: 200, 100:200, 1000:"),
) -> None:
    """Write one self-contained HTML page to browse trajectories: policy text vs inserted documents, queries,
    invalid turns, correctness, with a filter box and sorting by step or reward.

    Reads raw trajectories (searchrl demo / ask --json), training rollout rows and eval prediction rows. The summary
    follows the filter. Several files (or row sources, datasets, methods) also get a row each. EM and F1 are each
    row's own scores when it has them. A view can be linked: PAGE.html#sort=reward:desc&q=london&only=wrong.

    Files are read one row at a time (gigabytes are fine). --dataset / --method / --only / --step choose the rows the
    page shows and sums up; --offset pages through them, --sample draws a random sample of them.

    Example: searchrl view runs/demo/rl/rollouts.jsonl --out demo.html

    Example: searchrl view runs/eval/predictions/*.jsonl --dataset nq --only wrong --sample

    Example: searchrl view runs/my-run/rollouts.jsonl --step 1000:1200
    """
    from rich.markup import escape

    from searchrl.utils import console
    from searchrl.viz.select import RowFilter, parse_steps
    from searchrl.viz.viewer import write_viewer

    where = RowFilter(tuple(dataset or ()), tuple(method or ()), only, parse_steps(step))
    errors: list[str] = []
    path = write_viewer(
        paths,
        out,
        limit=limit,
        skip_bad=skip_bad,
        title=title,
        errors=errors,
        last=last,
        offset=offset,
        sample=sample,
        where=where,
    )
    if errors:
        console.print(f"[yellow]skipped {len(errors)} malformed row(s)[/yellow]; first: {escape(errors[0])}")
    print(path)


def register(app: typer.Typer) -> None:
    app.command("plot")(plot)
    app.command("view")(view)
