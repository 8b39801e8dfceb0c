"""What the commands share: options spelled once, and flags turned into dotted overrides of a recipe."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import typer

from searchrl.config import RunConfig, load_config

RECIPE = typer.Option(None, "--recipe", "--config", "-r", help="recipe name or YAML path")
SET = typer.Option(None, "--set", help="a dotted override, like a positional KEY=VALUE (repeatable)")
PROFILE = typer.Option(None, "--profile", help="profile overlay, e.g. laptop (recipes/profiles/)")
DEVICE = typer.Option(None, "--device", help="auto (CUDA if present), cpu, cuda, cuda:N")
FIELD = typer.Option(
    None, "--field", help="your file's name of a part: question=NAME, answers=NAME or id=NAME (repeatable)"
)


def field_map(values: list[str] | None) -> dict[str, str]:
    """``--field question=query_text --field answers=gold`` -> ``{"question": "query_text", "answers": "gold"}``."""
    from searchrl.config.base import check_fields

    pairs = {}
    for v in values or []:
        part, eq, name = v.partition("=")
        if not eq:
            raise typer.BadParameter(f"{v!r}: write PART=NAME, e.g. question=query_text", param_hint="--field")
        pairs[part.strip()] = name.strip()
    try:
        return check_fields(pairs)
    except ValueError as err:
        raise typer.BadParameter(str(err), param_hint="--field") from None


def dotted(**flags: Any) -> list[str]:
    """Given flags as dotted overrides: ``dotted(**{"rollout.max_turns": 3, "retrieval.topk": None})`` ->
    ``["rollout.max_turns=3"]`` (None: not given; values as JSON, which the override parser reads back)."""
    return [f"{key}={json.dumps(value)}" for key, value in flags.items() if value is not None]


def load(
    recipe: str | None,
    overrides: list[str] | None = None,
    profile: str | None = None,
    *,
    device: str | None = None,
    **flags: Any,
) -> RunConfig:
    """The recipe (or the defaults) with its profile, the ``--set`` overrides, then the flags that were given
    (``flags``: dotted keys as in :func:`dotted`)."""
    return load_config(recipe, [*(overrides or []), *dotted(**{"model.device": device}, **flags)], profile)


def model_settings(recipe: str | None, model: str | None, protocol: str | None = None) -> list[str]:
    """How the model in ``--model DIR`` was trained to run (its ``searchrl.json``: protocol, prompt style, documents
    per search, rollout limits), as overrides for the command to apply before its ``--set`` and flags, when no
    recipe is given; with one, the recipe's settings hold, and a protocol other than the model's is noted."""
    from searchrl.rollout.agent_file import agent_overrides, read_agent_settings

    if recipe is None:
        if settings := agent_overrides(model, protocol):
            from pathlib import Path

            from searchrl.utils import console

            where = Path(str(model)) / "searchrl.json"
            console.print(f"{where}: running the model with the settings it was trained with; flags replace them")
        return settings
    try:
        trained = (read_agent_settings(model) or {}).get("rollout.protocol")
    except ValueError as e:  # the recipe's settings hold: the record was only for a note
        from searchrl.utils import console

        console.print(f"note: {e}")
        return []
    if trained is not None and trained != (used := protocol or load_config(recipe).rollout.protocol):
        from searchrl.utils import console

        console.print(
            f"note: {model} was trained with protocol {trained}, not the {used} it runs with here (leave out "
            "--recipe to run it with its own settings)"
        )
    return []


def description_line(cfg: RunConfig) -> str:
    """The recipe's ``description:`` as one line ("" when it has none), as ``config validate`` and ``run --dry-run``
    print it."""
    return " ".join(cfg.description.split())


def with_protocol(cfg: RunConfig, protocol: str | None, options: list[str] | None) -> RunConfig:
    """``--protocol`` and ``--option KEY=VALUE`` (YAML values) applied: a protocol other than the recipe's drops the
    recipe's protocol options (they belong to its protocol); each option adds to them."""
    from searchrl.config import validate_dict
    from searchrl.config.loading import yaml_value

    if protocol is None and not options:
        return cfg
    raw = cfg.model_dump()
    ro = raw["rollout"]
    if protocol is not None and protocol != ro["protocol"]:
        ro["protocol"], ro["options"] = protocol, {}
    for item in options or []:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"protocol option {item!r} is not KEY=VALUE (e.g. --option multi_query=true)")
        ro["options"][key.strip()] = yaml_value(value, f"--option {item}")
    return validate_dict(raw, "--protocol / --option")


def result(text: str) -> None:
    """A command's closing summary line: its result, so stdout (progress and logs stay on stderr)."""
    from rich.console import Console

    Console(soft_wrap=True).print(text)


def writable_dir(value: Any) -> Any:
    """``--out`` callback for a directory a command writes into: an existing file there, or a path that cannot be
    made (a file on the way, a directory this user may not write) is refused in one line, before any work."""
    import os
    from pathlib import Path

    if value is None:
        return value
    path = Path(value)
    if path.is_file():
        raise typer.BadParameter(f"{value} is a file; give a directory path (it is made if missing)")
    have = path
    while not have.exists() and have != have.parent:  # the nearest part of the path that is there
        have = have.parent
    if have.exists() and not have.is_dir():
        raise typer.BadParameter(f"{value} cannot be made: {have} is a file; give another directory path")
    if have.is_dir() and not os.access(have, os.W_OK | os.X_OK):
        raise typer.BadParameter(f"{value} cannot be made or written: {have} is not writable by you")
    return value


def writable_file(value: Any) -> Any:
    """``--out`` callback for a file a command writes: an existing directory there is refused in one line."""
    from pathlib import Path

    if value is not None and Path(value).is_dir():
        raise typer.BadParameter(f"{value} is a directory; give a file path")
    return value


def not_an_input(out: Any, inputs: list[Any], flag: str = "--out") -> None:
    """Refuse an output path that is one of the command's own inputs (writing it would destroy what it reads); an
    input of None (the recipe's default) is none of them."""
    from pathlib import Path

    for source in inputs:
        if source is None or not (Path(source).exists() and Path(out).exists()):
            continue
        if Path(source).resolve() == Path(out).resolve():
            raise typer.BadParameter(
                f"{out} would overwrite the input {source}; choose another {flag}", param_hint=flag
            )


@contextmanager
def said_when_stopped(what: str, go_on: Callable[[], str | None] = lambda: None) -> Iterator[None]:
    """A command cut short by Ctrl-C says so in one line (typer ends it silently), with how to go on when ``go_on()``
    names it (None: nothing to go on from, e.g. no checkpoint yet), and exits with status 130 as before. A SIGTERM's
    stop gets the same hint unless it says how to go on already (RL's and SFT's do), as ``searchrl run``'s log does."""
    from rich.markup import escape

    from searchrl.utils import StopRequested, console

    try:
        yield
    except KeyboardInterrupt:
        how = go_on()
        line = f"{what} stopped (Ctrl-C)" + (f"; to go on: {how}" if how else "")
        console.print(f"[yellow]{escape(line)}[/yellow]", soft_wrap=True)
        raise typer.Exit(130) from None
    except StopRequested as err:
        if "to go on" in str(err) or not (how := go_on()):
            raise
        raise StopRequested(f"{err}; to go on: {how}") from None
