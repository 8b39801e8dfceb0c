"""``searchrl plot``: PNG training curves of a run."""

from __future__ import annotations

import typer


def plot(run_dir: str = typer.Argument(..., help="a run directory with metrics.jsonl"),
         out: str = typer.Option(None, help="PNG path (default: RUN_DIR/curves.png)")) -> None:  # fmt: skip
    """Write reward / length / searches curves over steps as a PNG.

    Example: searchrl plot runs/demo-grpo
    """
    from searchrl.viz.plots import plot_run

    print(plot_run(run_dir, out))


def register(app: typer.Typer) -> None:
    app.command("plot")(plot)
