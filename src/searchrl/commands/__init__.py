"""The ``searchrl`` command: the application layer. Each module here turns flags into dotted overrides of a recipe
(:func:`searchrl.config.load_config`) and calls a stage (:mod:`searchrl.stages`) or a library function; results
(answers, tables, JSON) go to stdout, logs and progress to stderr.
"""

from __future__ import annotations

import sys

import typer
from typer.core import TyperOption

from searchrl import __version__
from searchrl.config import ConfigError
from searchrl.models import ModelResolutionError
from searchrl.utils import console


def _flag_type(self, ctx):  # noqa: ANN001 - typer's signature
    """Help pages show a type only for options that take a value: an on/off flag gets no ``<bool>``."""
    return None if self.is_flag else _option_type(self, ctx)


_option_type = getattr(TyperOption, "display_type_rich", None)
if _option_type is not None:  # typer versions without it print help their own way
    TyperOption.display_type_rich = _flag_type

app = typer.Typer(
    name="searchrl",
    help="Train language models to reason with a search engine through reinforcement learning. Results (answers, "
    "tables, JSON) go to stdout; logs and progress to stderr.\n\n"
    "Example: searchrl run --recipe multihop_world --dry-run",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _print_version(value: bool) -> None:
    if value:
        print(f"searchrl {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(
        False, "--version", "-V", callback=_print_version, is_eager=True, help="print the version and exit"
    ),
) -> None:
    """The searchrl command: one subcommand per stage of the pipeline."""


@app.command("version")
def version() -> None:
    """Print the SearchRL version."""
    print(__version__)


def _register() -> None:
    """Attach every command (kept in one place so the tree stays readable)."""
    from searchrl.commands import ask, data, data_build, eval, index, mcp, run, setup, train, viz

    for mod in (setup, run, train, ask, viz):
        mod.register(app)
    data_build.register(data.app)
    app.add_typer(data.app, name="data")
    app.add_typer(index.app, name="index")
    index.register(app)  # serve
    app.add_typer(eval.app, name="eval")
    app.add_typer(mcp.app, name="mcp")


_register()


def main() -> None:
    try:
        app()
    except (ConfigError, ModelResolutionError, FileNotFoundError, ValueError, ConnectionError) as err:
        # User-caused errors: one line naming the fix, no traceback.
        console.print(f"[red]error:[/red] {err}", soft_wrap=True)
        sys.exit(2)


if __name__ == "__main__":
    main()
