"""Command-line conventions: results on stdout, logs on stderr, --version, help pages with examples, one flag set."""

from __future__ import annotations

import re

import pytest
from typer.testing import CliRunner

from searchrl import __version__
from searchrl.cli import app

runner = CliRunner()


def test_version_flag_and_command() -> None:
    for args in (["--version"], ["-V"], ["version"]):
        res = runner.invoke(app, args)
        assert res.exit_code == 0 and __version__ in res.stdout and not res.stderr


def test_models_list_is_a_result_on_stdout() -> None:
    res = runner.invoke(app, ["models", "list"])
    assert res.exit_code == 0 and "smollm2-135m-instruct" in res.stdout and "cache:" in res.stdout
    assert not res.stderr


@pytest.mark.parametrize("group", [[], ["models"], ["config"], ["data"], ["index"], ["eval"], ["mcp"]])
def test_group_help_pages_have_an_example_and_no_bool_metavar(group: list[str]) -> None:
    res = runner.invoke(app, [*group, "--help"], env={"COLUMNS": "200"})
    assert res.exit_code == 0 and "Example: searchrl" in res.stdout
    assert "<bool>" not in res.stdout


def test_every_help_page_has_an_example() -> None:
    """The README says every subcommand's --help has an example: each command's help text holds one."""
    import typer

    helps: dict[str, str] = {}

    def walk(command, path: str) -> None:  # noqa: ANN001 -- click's command
        for name, sub in getattr(command, "commands", {}).items():
            helps[f"{path} {name}".strip()] = sub.help or ""
            walk(sub, f"{path} {name}")

    walk(typer.main.get_command(app), "")
    bare = [c for c, text in helps.items() if not re.search(r"Example: .*searchrl ", text)]
    assert len(helps) > 30 and not bare, f"help pages without an example of the command: {bare}"
    assert "Example: searchrl" in runner.invoke(app, ["version", "--help"]).stdout  # the help text is the page's


@pytest.mark.parametrize("command", [["run"], ["train"], ["sft"], ["eval"], ["config", "show"]])
def test_recipe_and_override_flags_are_the_same_everywhere(command: list[str]) -> None:
    page = runner.invoke(app, [*command, "--help"], env={"COLUMNS": "200"}).stdout
    assert "--recipe" in page and "--config" in page and "--set" in page, command
    assert "<bool>" not in page


def test_train_takes_out() -> None:
    page = runner.invoke(app, ["train", "--help"], env={"COLUMNS": "200"}).stdout
    assert "--out" in page and "--resume" in page


def test_help_defaults_name_the_recipe_key_and_train_names_every_algorithm() -> None:
    """A flag whose default comes from the recipe names that key, not one recipe's value."""
    page = " ".join(runner.invoke(app, ["eval", "--help"], env={"COLUMNS": "200"}).stdout.split())
    assert "(default: evaluation.metrics)" in page and "em,f1,cover_em" not in page
    page = " ".join(runner.invoke(app, ["train", "--help"], env={"COLUMNS": "200"}).stdout.split())
    assert "(default: training.output_dir)" in page and "runs/default" not in page
    assert "(PPO / GRPO / Dr. GRPO / GSPO / REINFORCE++ / RLOO)" in page


def test_help_text_wraps_to_the_terminal_not_to_the_docstring() -> None:
    """A docstring's line breaks are not kept in the command lists: at 200 columns each command's summary in
    ``searchrl --help`` is one line, and a paragraph of ``view --help`` that spans docstring lines reads as one."""
    page = runner.invoke(app, ["--help"], env={"COLUMNS": "200"}).stdout
    row = next(line for line in page.splitlines() if "│ ask " in line)
    assert "The rollout limits" in row, row  # not cut where the docstring's line ends
    page = runner.invoke(app, ["view", "--help"], env={"COLUMNS": "200"}).stdout
    assert "eval prediction rows. The summary follows the filter." in page


def test_demo_help_states_the_demo_recipes_own_values() -> None:
    """`searchrl demo --help` gives the recipe's values in brackets; a change to the recipe must show there."""
    import inspect

    from searchrl.commands.run import demo
    from searchrl.config import load_config

    cfg = load_config("demo")
    helps = {name: p.default.help for name, p in inspect.signature(demo).parameters.items()}
    want = {"questions": cfg.training.eval_limit, "sft_examples": cfg.sft.limit, "rl_steps": cfg.training.steps}
    for flag, value in want.items():
        assert helps[flag].endswith(f"({value})"), (flag, helps[flag], value)
