"""The ``searchrl`` command: the application layer. Each module here turns flags into dotted overrides of a recipe
(:func:`searchrl.config.load_config`) and calls a stage (:mod:`searchrl.stages`) or a library function; results
(answers, tables, JSON) go to stdout, logs and progress to stderr.
"""

from __future__ import annotations

import codecs
import inspect
import os
import sys

import typer
from rich.markup import escape
from typer.core import TyperOption

from searchrl import __version__
from searchrl.config import ConfigError
from searchrl.models import ModelResolutionError
from searchrl.storage import DiskFull
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
    """Print the SearchRL version.

    Example: searchrl version
    """
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


def reflow(text: str) -> str:
    r"""A docstring's paragraphs as single lines, so help pages wrap them to the terminal (typer's rich mode keeps
    a docstring's line breaks). Paragraphs with list items or indented lines keep theirs.

    >>> reflow("Answer one question. The rollout\n    limits are the recipe's.\n\n    - one\n    - two")
    "Answer one question. The rollout limits are the recipe's.\n\n- one\n- two"
    """
    paragraphs = escape(inspect.cleandoc(text)).split("\n\n")  # brackets as written: 'searchrl[mcp]', not markup
    keep = ("- ", "* ", " ", "\b")
    return "\n\n".join(
        p if any(line.startswith(keep) for line in p.split("\n")) else " ".join(p.split("\n")) for p in paragraphs
    )


def _reflow_help(group: typer.Typer) -> None:
    """Reflow the help of every command and group under ``group`` (their ``help`` or their docstring)."""
    for info in group.registered_commands:
        text = info.help if isinstance(info.help, str) else inspect.getdoc(info.callback)
        if text:
            info.help = reflow(text)
    for info in group.registered_groups:
        sub = info.typer_instance
        for holder in (info, sub.info, sub.registered_callback):
            if holder is not None and isinstance(holder.help, str):
                holder.help = reflow(holder.help)
        callback = sub.registered_callback
        if callback is not None and not isinstance(callback.help, str) and inspect.getdoc(callback.callback):
            callback.help = reflow(inspect.getdoc(callback.callback))
        _reflow_help(sub)


_register()
_reflow_help(app)


def _unicode_streams() -> None:
    """Results (answers, tables, JSON) and logs hold any text. Where stdout or stderr is not UTF-8 (Windows writes a
    pipe or a file in its ANSI code page, cp1252, unless PYTHONUTF8=1), a character outside it would end the command
    with UnicodeEncodeError: on Windows such a stream is made UTF-8 (as PYTHONUTF8=1 would; a console is UTF-8
    already), unless PYTHONIOENCODING chose its encoding; everywhere else it keeps its encoding and writes such a
    character as a backslash escape."""
    for stream in (sys.stdout, sys.stderr):
        encoding = getattr(stream, "encoding", None) or "ascii"
        if not hasattr(stream, "reconfigure") or codecs.lookup(encoding).name.startswith("utf"):
            continue
        if sys.platform == "win32" and not stream.isatty() and "PYTHONIOENCODING" not in os.environ:
            stream.reconfigure(encoding="utf-8")
        else:
            stream.reconfigure(errors="backslashreplace")


def main() -> None:
    from searchrl.utils import MissingDependency, StopRequested, on_sigterm

    _unicode_streams()
    if not sys.stderr.isatty():  # a job log: the hub's and transformers' bars would write carriage returns into it
        os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    try:
        with on_sigterm():  # a SIGTERM (a cluster's preemption) ends the run with a line saying so, not silently
            app()
    except StopRequested as err:
        console.print(f"[yellow]{escape(str(err))}[/yellow]", soft_wrap=True)
        sys.exit(err.code)
    except (
        ConfigError,
        ModelResolutionError,
        MissingDependency,
        FileNotFoundError,
        NotADirectoryError,  # a path through a file (an output directory under one)
        PermissionError,  # a path this user may not read or write
        DiskFull,  # a save (checkpoint, model, log) that filled the disk: what it would have replaced is kept
        ValueError,
        ConnectionError,
    ) as err:
        # User-caused errors: one line naming the fix, no traceback.
        console.print(f"[red]error:[/red] {escape(str(err))}", soft_wrap=True)  # "[title, [sentences]]" as written
        sys.exit(2)


if __name__ == "__main__":
    main()
