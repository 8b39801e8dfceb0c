"""Recipes hold the papers' values, each marked; the laptop profile shrinks every recipe to this machine."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from searchrl.cli import app
from searchrl.config import ConfigError, load_config, recipe_names, recipe_path
from searchrl.models import ModelResolutionError, check_fetchable

RECIPES = recipe_names()
METHODS = [
    "search_r1_ppo",
    "search_r1_grpo",
    "r1_searcher_stage1",
    "r1_searcher_stage2",
    "r1_searcher_pp",
    "r_search",
    "rag_r1",
]
MARK = re.compile(r"#.*\[(P|C|O)\]")


def test_the_methods_recipes_are_shipped() -> None:
    assert set(METHODS) | {"demo"} <= set(RECIPES)


@pytest.mark.parametrize("recipe", RECIPES)
def test_config_show_with_the_laptop_profile(recipe: str) -> None:
    res = CliRunner().invoke(app, ["config", "show", recipe, "--profile", "laptop"])
    assert res.exit_code == 0, res.output
    cfg = load_config(recipe, profile="laptop")
    assert cfg.model.policy == "smollm2-135m-instruct" and cfg.retrieval.kind == "bm25"
    assert cfg.training.steps <= 5 and cfg.training.prompts_per_step <= 4 and cfg.evaluation.limit <= 10
    if recipe in [*METHODS, "demo"]:  # each method's chain, on this machine
        kinds = [s.kind for s in cfg.pipeline]
        assert kinds[0] == "data" and kinds[-1] == "eval" and "rl" in kinds and "sft" in kinds
    assert "policy: smollm2-135m-instruct" in res.output
    # a stage's own step count would override the profile's: laptop pipelines leave it to the profile
    assert not [s.name for s in cfg.pipeline if "training.steps" in s.set]


def test_an_oracle_mix_beside_another_sft_limit_is_refused_when_the_config_loads() -> None:
    """multihop_cpu's oracle_mix sets its cold start's trajectories; the laptop profile's sft.limit (32) beside it
    once passed `config validate` and `run --dry-run` and failed at the cold start. The profile scales the mix to
    its limit, and a limit that differs from the mix is refused at load (a file SFT's limit is its own)."""
    cfg = load_config("multihop_cpu", profile="laptop")
    assert sum(cfg.sft.oracle_mix.values()) == cfg.sft.limit == 32
    with pytest.raises(ConfigError, match=r"sft.oracle_mix \(sums to 128\) sets the whole trajectories"):
        load_config("multihop_cpu", ["sft.limit=10"])
    assert load_config("multihop_cpu", ["sft.limit=10", "sft.data=teacher.jsonl"]).sft.limit == 10


@pytest.mark.parametrize("profile", [None, "laptop"])
@pytest.mark.parametrize("recipe", RECIPES)
def test_difficulty_selection_stages_can_see_every_bucket(recipe: str, profile: str | None) -> None:
    """The select-difficulty stages' args pass the selector's own checks before any model runs (a laptop run once
    failed after 2.5 minutes on n <= hard_above)."""
    for stage in load_config(recipe, profile=profile).pipeline:
        if stage.op == "select-difficulty" and stage.args.get("rule", "r1_searcher") == "r1_searcher":
            n, easy, hard = stage.args.get("n", 24), stage.args.get("easy_below", 10), stage.args.get("hard_above", 20)
            assert 1 <= easy <= hard < n, (recipe, profile, stage.name, stage.args)


@pytest.mark.parametrize("recipe", METHODS)
def test_recipes_hold_the_papers_models_and_retrievers(recipe: str) -> None:
    cfg = load_config(recipe)
    assert cfg.model.policy.startswith(("Qwen/", "meta-llama/"))  # the paper's backbone, not the laptop model
    assert cfg.retrieval.kind == "dense" and cfg.retrieval.encoder in ("intfloat/e5-base-v2", "BAAI/bge-large-en-v1.5")
    assert cfg.pipeline and cfg.pipeline[-1].kind == "eval"


def test_values_the_audit_found_wrong() -> None:
    s1 = load_config("r1_searcher_stage1").algorithm
    assert s1.name == "reinforce_pp" and s1.reinforce_estimator == "group_norm"
    assert load_config("r1_searcher_stage2").algorithm.reinforce_estimator == "reinforce_baseline"
    assert load_config("r_search").training.weight_decay == load_config("rag_r1").training.weight_decay == 0.01
    ppo = load_config("search_r1_ppo").training
    assert ppo.critic_warmup_steps == round(0.05 * ppo.steps)
    reader = load_config("r_search").model
    assert (reader.reader_temperature, reader.reader_top_p, reader.reader_max_new_tokens) == (0.1, 0.9, 512)
    rag = load_config("rag_r1").rollout
    assert rag.max_obs_tokens_per_query == 1000 and rag.max_obs_tokens >= 3 * 1000
    # the two methods that the audit found without their SFT stage now have it in their pipeline
    for name in ("r1_searcher_pp", "rag_r1"):
        stages = load_config(name).pipeline
        sft = next(s for s in stages if s.kind == "sft")
        rl = next(s for s in stages if s.kind == "rl")
        assert stages.index(sft) < stages.index(rl) and rl.init_from == "${sft}"


@pytest.mark.parametrize("recipe", RECIPES)
def test_every_recipe_value_carries_its_mark(recipe: str) -> None:
    """Each value line up to the pipeline (name and description aside) says [P] paper, [C] code or [O] our choice;
    a recipe that states "Every value here is our choice [O]" marks them all at once."""
    text = recipe_path(recipe).read_text()
    if "every value here is our choice [o]" in " ".join(text.lower().replace("#", " ").split()):
        return
    unmarked, in_description = [], False
    for line in text.splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        if line.startswith("pipeline:"):
            break
        if in_description and line.startswith(" "):
            continue
        in_description = line.startswith("description:")
        if line.startswith(("name:", "description:")):
            continue
        body = line.split("#", 1)[0].rstrip()
        is_header = body.endswith(":") and not body.lstrip().startswith("-")
        if not is_header and not MARK.search(line):
            unmarked.append(line.strip())
    assert not unmarked, f"{recipe}: values without a [P]/[C]/[O] mark: {unmarked}"


def test_unknown_profile_names_the_close_one() -> None:
    with pytest.raises(ConfigError, match="did you mean 'laptop'"):
        load_config("demo", profile="lapto")


def test_a_profile_from_a_file_and_its_recipe_section(tmp_path: Path) -> None:
    prof = tmp_path / "tiny.yaml"
    prof.write_text("all: {training: {steps: 1}}\nrecipes: {rag_r1: {training: {steps: 3}}}\n")
    assert load_config("demo", profile=str(prof)).training.steps == 1
    assert load_config("rag_r1", profile=str(prof)).training.steps == 3
    assert load_config("rag_r1", ["training.steps=7"], profile=str(prof)).training.steps == 7  # overrides win


def test_a_hub_model_that_cannot_be_fetched_fails_naming_the_profile(monkeypatch, tmp_path: Path) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path))  # an empty HF cache
    with pytest.raises(ModelResolutionError, match=r"model.policy 'Qwen/Qwen2.5-7B-Instruct'.*--profile laptop"):
        check_fetchable(load_config("rag_r1"))
    cfg = load_config("rag_r1", ["model.policy=Qwen/Qwen2.5-7B-Instruct"], profile="laptop")
    with pytest.raises(ModelResolutionError, match="profile 'laptop' still names it"):
        check_fetchable(cfg, "laptop")
    check_fetchable(load_config("rag_r1", profile="laptop"), "laptop")  # the bundled model: no error
    res = CliRunner().invoke(app, ["run", "--recipe", "rag_r1", "--out", str(tmp_path / "run")])
    assert res.exit_code != 0 and isinstance(res.exception, ModelResolutionError)
    assert not (tmp_path / "run").exists()  # nothing ran


def test_a_renamed_copy_of_a_recipe_is_warned_that_the_profile_has_no_section_for_it(
    tmp_path: Path, monkeypatch
) -> None:
    from searchrl.utils import console

    text = recipe_path("search_r1_grpo").read_text()
    (tmp_path / "mine.yaml").write_text(re.sub(r"(?m)^name: search_r1_grpo", "name: my_search_r1", text))
    monkeypatch.setattr(console, "width", 400)
    with console.capture() as cap:
        mine = load_config(str(tmp_path / "mine.yaml"), profile="laptop")
        load_config("search_r1_grpo", profile="laptop")  # a bundled recipe: no warning
    out = cap.get()
    assert out.count("profile 'laptop' has no section for recipe 'my_search_r1'") == 1, out
    assert "search_r1_grpo, search_r1_ppo" in out and "keeps that name: to take its section" in out
    assert len(mine.pipeline) < len(load_config("search_r1_grpo", profile="laptop").pipeline)
