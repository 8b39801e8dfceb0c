"""Deep validation (searchrl.validation): the free-form parts of a recipe (rollout.options, reward params, a stage's
set: and args:) fail at `searchrl config validate` and before any command loads a model, naming the key and the
valid choices."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from searchrl.config import ConfigError, load_config, recipe_names
from searchrl.runner import stage_arg_names
from searchrl.validation import dotted_key_problem, validate_deep


@pytest.fixture
def no_models(monkeypatch: pytest.MonkeyPatch) -> None:
    """Loading any model fails the test: validation must not need one."""

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("a model was loaded during validation")

    import transformers

    import searchrl.models

    monkeypatch.setattr(searchrl.models, "load_policy", refuse)
    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", refuse)
    monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained", refuse)


def _recipe(tmp_path: Path, body: dict[str, Any], name: str = "r") -> Path:
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump({"name": name, **body}))
    return path


def _problems(tmp_path: Path, body: dict[str, Any]) -> list[str]:
    with pytest.raises(ConfigError) as err:
        validate_deep(load_config(_recipe(tmp_path, body)))
    return str(err.value).splitlines()


_PIPELINE = [
    {"name": "world", "kind": "data", "op": "synth", "args": {"entities": 50}},
    {"name": "rs", "kind": "data", "op": "rejection-sample", "args": {"k": 2, "slice": True}},
    {"name": "rl", "kind": "rl", "data": "${rs}", "set": {"training.steps": 2}},
]


def test_reward_param_typo_rejected_by_config_validate_without_a_model(tmp_path: Path, no_models: None) -> None:
    from searchrl.cli import app

    typo = _recipe(tmp_path, {"reward": {"components": [{"name": "answer", "params": {"metirc": "em"}}]}})
    res = CliRunner().invoke(app, ["config", "validate", str(typo)])
    assert res.exit_code == 1, res.output
    assert "reward.components[0].params: unknown key 'metirc' for component 'answer'" in res.output
    assert "did you mean 'metric'?" in res.output and "valid: metric, normalize" in res.output
    assert res.exception is None or isinstance(res.exception, SystemExit)


def test_train_rejects_the_typo_before_loading_the_policy(tmp_path: Path, no_models: None) -> None:
    from searchrl.cli import app

    typo = _recipe(tmp_path, {"reward": {"components": [{"name": "format", "params": {"paper": "r_search",
                                                                                     "gama": 0.2}}]}})  # fmt: skip
    res = CliRunner().invoke(app, ["train", "--recipe", str(typo), "--out", str(tmp_path / "out")])
    assert isinstance(res.exception, ConfigError), res.output
    assert "reward.components[0].params: unknown key 'gama' for component 'format' (did you mean 'gamma'?)" in str(
        res.exception
    )
    assert not (tmp_path / "out").exists()


def test_unknown_rollout_option_rejected(tmp_path: Path) -> None:
    (line,) = _problems(tmp_path, {"rollout": {"protocol": "rag_r1", "options": {"multi_qeury": True}}})
    assert line == ("rollout.options: unknown key 'multi_qeury' for protocol 'rag_r1' (did you mean 'multi_query'?); "
                    "valid: max_queries, max_query_chars, multi_query, question_mark")  # fmt: skip


def test_bad_rollout_option_value_and_unsupported_limit_rejected(tmp_path: Path) -> None:
    (line,) = _problems(tmp_path, {"rollout": {"protocol": "rag_r1", "options": {"multi_query": "yes"}}})
    assert line.startswith("rollout.options: protocol option multi_query must be true or false")
    (line,) = _problems(tmp_path, {"rollout": {"protocol": "search_r1", "max_obs_tokens_per_query": 100}})
    assert "rollout.max_obs_tokens_per_query is not supported by the search_r1 protocol" in line


def test_bad_reward_value_and_duplicate_components_rejected(tmp_path: Path) -> None:
    (line,) = _problems(tmp_path, {"reward": {"components": [{"name": "answer", "params": {"metric": "bleu"}}]}})
    assert line.startswith("reward.components[0].params:") and "bleu" in line
    twice = [{"name": "answer"}, {"name": "answer", "params": {"metric": "f1"}}]
    (line,) = _problems(tmp_path, {"reward": {"components": twice}})
    assert line.startswith("reward.components: reward component(s) ['answer'] listed twice")


def test_bad_pipeline_set_keys_rejected(tmp_path: Path) -> None:
    from searchrl.config import RunConfig, TrainingConfig

    stages = [{"name": "rl", "kind": "rl", "set": {"training.stpes": 5, "training.steps.max": 1, "nosuch.x": 1}}]
    lines = _problems(tmp_path, {"pipeline": stages})
    assert sorted(lines) == [
        "pipeline.rl.set: unknown key 'nosuch.x'; valid: " + ", ".join(RunConfig.model_fields),
        "pipeline.rl.set: unknown key 'training.steps.max': 'training.steps' is a value, not a section",
        "pipeline.rl.set: unknown key 'training.stpes' (did you mean 'training.steps'?); valid: "
        + ", ".join(f"training.{f}" for f in TrainingConfig.model_fields),
    ]


def test_stage_set_values_are_validated_in_the_merged_config(tmp_path: Path) -> None:
    stages = [{"name": "rl", "kind": "rl", "set": {"training.steps": 0}},
              {"name": "rl2", "kind": "rl", "set": {"rollout.protocol": "rag_r1", "rollout.options.multi_qeury": 1}},
              {"name": "ev", "kind": "eval", "data": "${nope}/test.jsonl"}]  # fmt: skip
    lines = _problems(tmp_path, {"pipeline": stages})
    assert len(lines) == 3, lines
    assert lines[0].startswith("pipeline.rl: stage 'rl': training.steps: Input should be greater")
    assert lines[1].startswith("pipeline.rl2: rollout.options: unknown key 'multi_qeury'")
    assert lines[2].startswith("pipeline.ev: stage 'ev': ${nope} is not an earlier stage")


def test_unknown_pipeline_args_rejected(tmp_path: Path) -> None:
    stages = [*_PIPELINE[:2], {"name": "sel", "kind": "data", "op": "select-difficulty",
                               "args": {"rule": "r1_searcher", "kepe": ["medium"], "model": "x"}},
              {"name": "rl", "kind": "rl", "args": {"steps": 2}}]  # fmt: skip
    lines = _problems(tmp_path, {"pipeline": stages})
    assert len(lines) == 3, lines
    head = "pipeline.sel.args: unknown key 'kepe' for op 'select-difficulty' (did you mean 'keep'?); valid: "
    assert lines[0].startswith(head + "batch_size, concurrency, easy_below, easy_fraction, hard_above, keep, ")
    assert lines[1].startswith("pipeline.sel.args: unknown key 'model' for op 'select-difficulty'")
    assert lines[1].endswith("('model' is set by the runner from the stage's init_from:)")
    assert lines[2] == "pipeline.rl.args: unknown key 'steps' for rl stages; valid: none (config values go in set:)"


def test_stage_arg_names_follow_the_ops() -> None:
    assert stage_arg_names("data", "synth") == {
        "entities",
        "seed",
        "surface",
        "relations",
        "yes_no",
        "bridge_comparisons",
        "deaths",
    }
    assert {"kind", "encoder", "k1", "faiss"} <= stage_arg_names("data", "index")
    assert "overwrite" not in stage_arg_names("data", "index")  # the runner passes it
    sampling = stage_arg_names("data", "rejection-sample")
    assert {"k", "slice", "require_internal_and_external", "quota", "url", "min_score"} <= sampling
    assert not {"model", "out", "data", "index", "recipe", "config", "set", "profile", "slice_steps"} & sampling
    assert stage_arg_names("data", "oracle") == {"kinds", "split", "limit", "forms"}
    assert stage_arg_names("rl", None) == stage_arg_names("sft", None) == set()


def test_dotted_key_problem() -> None:
    assert dotted_key_problem("retrieval.web.pages") is None
    assert dotted_key_problem("rollout.options.anything") is None  # free-form: judged by the merged config
    assert dotted_key_problem("model.lora.r") is None
    assert "did you mean 'retrieval.web.pages'?" in str(dotted_key_problem("retrieval.web.pagse"))
    assert dotted_key_problem("nosuch") is not None


def test_a_stage_set_key_may_name_a_list_entry_by_its_index_in_brackets() -> None:
    """``reward.components[1].params.penalty`` is how r1_searcher_stage2's description says to set the penalty, and a
    stage applies a ``set:`` key written so; validation refused it as an unknown key, failing `searchrl run`."""
    assert dotted_key_problem("reward.components[1].params.penalty") is None
    assert "did you mean 'reward.components.1.weight'" in str(dotted_key_problem("reward.components[1].wieght"))
    cfg = load_config("r1_searcher_stage2", ["pipeline.stage2.set.reward.components[1].params.penalty=-1"])
    validate_deep(cfg)


def test_problems_are_prefixed_with_the_source(tmp_path: Path) -> None:
    body = {"rollout": {"protocol": "rag_r1", "options": {"x": 1}},
            "reward": {"components": [{"name": "retrieval", "params": {"valeu": 1}}]}}  # fmt: skip
    with pytest.raises(ConfigError) as err:
        validate_deep(load_config(_recipe(tmp_path, body)), source="my.yaml")
    lines = str(err.value).splitlines()
    assert len(lines) == 2 and all(line.startswith("my.yaml: ") for line in lines)


@pytest.mark.parametrize("profile", [None, "laptop"])
@pytest.mark.parametrize("recipe", recipe_names())
def test_bundled_recipes_validate(recipe: str, profile: str | None, no_models: None) -> None:
    validate_deep(load_config(recipe, profile=profile), lambda name: load_config(name, profile=profile))


def test_config_validate_checks_every_bundled_recipe_with_a_profile(no_models: None) -> None:
    from searchrl.cli import app

    res = CliRunner().invoke(app, ["config", "validate", "--profile", "laptop"])
    assert res.exit_code == 0, res.output
    assert res.output.count("ok   ") == len(recipe_names())
    for name in recipe_names():  # each recipe's description, as one line under its ok line
        about = " ".join(load_config(name).description.split())
        assert about and f".yaml)\n     {about}\n" in res.output, name


def test_config_validate_prints_no_description_line_for_a_recipe_without_one(tmp_path: Path) -> None:
    from searchrl.cli import app

    bare, described = _recipe(tmp_path, {}, "bare"), _recipe(tmp_path, {"description": "Two\n lines.\n"}, "told")
    res = CliRunner().invoke(app, ["config", "validate", str(bare), str(described)])
    assert res.exit_code == 0, res.output
    assert res.output == f"ok   {bare} ({bare})\nok   {described} ({described})\n     Two lines.\n"
