"""Config-layer behaviours a mutation audit found untested: each test fails on a concrete change to the config
loading, validation or preflight code (the mutant named in its docstring)."""

from __future__ import annotations

from pathlib import Path

import pytest

from searchrl.config import ConfigError, load_config


def test_an_empty_mapping_in_a_profile_empties_the_recipes_mapping(tmp_path: Path) -> None:
    """A profile's ``{}`` empties a key as a command-line ``{}`` does (mutant: ``deep_merge`` merging an empty dict
    into the recipe's, which kept the recipe's oracle mix)."""
    prof = tmp_path / "p.yaml"
    prof.write_text("all: {sft: {oracle_mix: {}, limit: 16}}\n")
    cfg = load_config("multihop_cpu", profile=prof)
    assert (cfg.sft.oracle_mix, cfg.sft.limit) == ({}, 16)


def test_an_override_value_may_hold_an_equals_sign() -> None:
    """The key ends at the first ``=`` (mutant: splitting at the last one made ``train=a`` the key)."""
    cfg = load_config("demo", ["data.train=a=b.jsonl", "model.policy=x==y"])
    assert (cfg.data.train, cfg.model.policy) == ("a=b.jsonl", "x==y")


def test_recipes_and_profiles_may_end_in_yml(tmp_path: Path) -> None:
    """``.yml`` names a file as ``.yaml`` does (mutants: only ``.yaml`` read as a path: a profile ``p.yml`` was looked
    up among the shipped profiles, a missing ``r.yml`` was called an unknown recipe name)."""
    prof = tmp_path / "p.yml"
    prof.write_text("all: {training: {steps: 2}}\n")
    assert load_config("demo", profile=str(prof)).training.steps == 2
    with pytest.raises(ConfigError, match=r"^recipe file not found: .*missing\.yml "):
        load_config(str(tmp_path / "missing.yml"))
    (tmp_path / "r.yml").write_text("name: r\ntraining: {steps: 3}\n")
    assert load_config(str(tmp_path / "r.yml")).training.steps == 3


def test_a_bad_top_level_value_is_blamed_on_its_override() -> None:
    """A value of a top-level key (no section) is its override's (mutant: the layers looked up only down to a
    section's key, so the recipe file was blamed)."""
    with pytest.raises(ConfigError) as err:
        load_config("demo", ["description=[1]"])
    assert str(err.value).startswith("command-line override 'description=[1]': description: "), err.value


def test_a_check_naming_two_keys_blames_the_layer_of_the_longer(tmp_path: Path) -> None:
    """kl_target refused beside a profile's kl_ctrl=fixed is the override's (mutant: the shortest named key's layer,
    the profile's, was blamed)."""
    prof = tmp_path / "p.yaml"
    prof.write_text("all: {algorithm: {kl_ctrl: fixed}}\n")
    with pytest.raises(ConfigError) as err:
        load_config("demo", ["algorithm.kl_target=0.2"], profile=str(prof))
    assert str(err.value) == (
        "command-line override 'algorithm.kl_target=0.2': algorithm: algorithm.kl_target applies with "
        "algorithm.kl_ctrl=adaptive, so here it would do nothing: remove it"
    )


def test_an_unknown_key_like_no_valid_one_lists_the_valid_keys() -> None:
    """No close match: the section's keys are listed (mutant: the line ended at the unknown key)."""
    with pytest.raises(ConfigError) as err:
        load_config("demo", ["model.qqqqqq=1"])
    assert str(err.value) == (
        "command-line override 'model.qqqqqq=1': unknown key 'model.qqqqqq'; valid keys: policy, dtype, device, lora, "
        "prompt_style, reader, reader_temperature, reader_top_p, reader_max_new_tokens"
    )


@pytest.mark.parametrize("device", ["cuda:", "cuda:x", "gpu", "cuda:0,1"])
def test_a_device_that_is_none_is_refused(device: str) -> None:
    """auto, cpu, cuda or cuda:N (mutant: ``cuda:`` with no number passed, failing where torch reads it)."""
    with pytest.raises(ConfigError, match="is not a device; use auto, cpu, cuda or cuda:N"):
        load_config("demo", [f"model.device='{device}'"])
    assert load_config("demo", ["model.device=cuda:1"]).model.device == "cuda:1"


def test_a_field_mapped_to_an_empty_name_is_refused() -> None:
    """data.fields maps a part to a field name (mutant: an empty name passed, and no row has that field)."""
    with pytest.raises(ConfigError, match=r"data\.fields: fields: 'answers' must name a field \(a non-empty string\)"):
        load_config("demo", ["data.fields={answers: ''}"])
    assert load_config("demo", ["data.fields={answers: gold}"]).data.fields == {"answers": "gold"}


def test_a_style_both_kept_and_held_out_is_refused() -> None:
    """(mutant: no check; the held-out style was trained on and dropped at once, which of them won unsaid)"""
    with pytest.raises(ConfigError) as err:
        load_config("demo", ["data.styles=[single_hop, comparison]", "data.held_out_styles=[comparison]"])
    assert "data.styles and data.held_out_styles both name ['comparison']: keep each style in one of them" in str(
        err.value
    )
    cfg = load_config("demo", ["data.styles=[single_hop]", "data.held_out_styles=[comparison]"])
    assert (cfg.data.styles, cfg.data.held_out_styles) == (["single_hop"], ["comparison"])


@pytest.mark.parametrize(("value", "mode"), [("true", "hint"), ("false", "off"), ("off", "off"), ("silent", "silent")])
def test_force_answer_true_is_hint_and_false_is_off(value: str, mode: str) -> None:
    """As documented (mutant: true and false swapped). YAML reads ``off`` as false."""
    assert load_config("demo", [f"rollout.force_answer={value}"]).rollout.force_answer == mode


def test_vllm_takes_less_than_the_whole_gpu() -> None:
    """The trainer has the rest of the GPU (mutant: 1, the whole GPU, passed)."""
    for share, says in (("1", "less than 1"), ("0", "greater than 0")):
        with pytest.raises(ConfigError, match=says):
            load_config("demo", [f"rollout.vllm_gpu_memory_utilization={share}"])
    assert (
        load_config("demo", ["rollout.vllm_gpu_memory_utilization=0.95"]).rollout.vllm_gpu_memory_utilization == 0.95
    )


def test_an_oracle_mix_refuses_template_balancing_beside_it() -> None:
    """oracle_mix sets the trajectories itself (mutant: only a different sft.limit was refused)."""
    assert load_config("multihop_cpu").sft.oracle_mix  # the recipe's kind mix
    with pytest.raises(
        ConfigError, match=r"leave sft\.limit unset \(or equal to that sum\) and sft\.oracle_balance off"
    ):
        load_config("multihop_cpu", ["sft.oracle_balance=true"])
    assert load_config("multihop_cpu", ["sft.oracle_balance=true", "sft.oracle_mix={}"]).sft.oracle_balance


def test_stage_names_name_directories_and_are_unique(tmp_path: Path) -> None:
    """Each stage writes into <run>/<name>/ (mutants: a name with a path in it passed; two stages of one name
    passed, the second writing over the first's directory)."""
    recipe = tmp_path / "r.yaml"
    recipe.write_text("pipeline: [{name: ../x, kind: sft}]\n")
    with pytest.raises(ConfigError, match=r"stage name '\.\./x' must be letters, digits, '_' or '-'"):
        load_config(recipe)
    recipe.write_text("pipeline: [{name: a, kind: sft}, {name: b-2_c, kind: rl}, {name: a, kind: eval}]\n")
    with pytest.raises(ConfigError, match=r"pipeline: two stages are named 'a'; stage names must be unique"):
        load_config(recipe)
    recipe.write_text("pipeline: [{name: a, kind: sft}, {name: b-2_c, kind: rl}]\n")
    assert [s.name for s in load_config(recipe).pipeline] == ["a", "b-2_c"]


def test_off_policy_rollouts_refuse_the_hf_generate_backend() -> None:
    """hf_generate samples from torch's global generator, shared with the update (mutant: no check)."""
    with pytest.raises(ConfigError, match=r"training\.off_policy_steps=1 needs rollout\.backend=hf or vllm"):
        load_config(None, ["training.off_policy_steps=1", "rollout.backend=hf_generate"])
    assert load_config(None, ["training.off_policy_steps=1", "rollout.backend=vllm"]).training.off_policy_steps == 1


def test_an_op_is_for_data_stages_only(tmp_path: Path) -> None:
    """(mutant: an op on an sft stage passed, and did nothing)"""
    recipe = tmp_path / "r.yaml"
    recipe.write_text("pipeline: [{name: a, kind: sft, op: synth}]\n")
    with pytest.raises(ConfigError, match=r"stage 'a': op is for data stages only \(kind is sft\)"):
        load_config(recipe)


@pytest.mark.parametrize(
    ("recipe", "goes_on"),
    [
        ("search_r1_grpo", True),
        ("search_r1_ppo", True),
        ("r_search", True),
        ("rag_r1", True),
        ("r1_searcher_stage1", False),  # the default: the R1-Searcher recipes do not set it
        ("r1_searcher_stage2", False),
        ("r1_searcher_pp", False),
    ],
)
def test_a_turn_ending_in_eos_goes_on_only_in_the_loops_that_do(recipe: str, goes_on: bool) -> None:
    """Search-R1's, R-Search's and RAG-R1's loops give an EOS turn with no answer the invalid-action text;
    R1-Searcher's stops there (mutant: the default continue_after_eos true, changing the three R1-Searcher recipes)."""
    assert load_config(recipe).rollout.continue_after_eos is goes_on
    assert load_config(None).rollout.force_answer == "hint"  # the documented default (docs/rollout.md)


def test_a_dual_clip_of_one_is_refused() -> None:
    """The dual-clip constant bounds a negative advantage's loss at c * |A| and must exceed 1 (mutant: 1 passed)."""
    with pytest.raises(ConfigError, match=r"algorithm\.dual_clip must be > 1 \(e\.g\. 3\.0\) or null"):
        load_config(None, ["algorithm.dual_clip=1.0"])
    assert load_config(None, ["algorithm.dual_clip=1.5"]).algorithm.dual_clip == 1.5


def test_a_split_must_leave_a_question_to_train_on() -> None:
    """The preflight's split check, by hand (mutants: heldout == the file's size passed, leaving no training
    question; ``heldout: true`` passed as 1; args.limit ignored; heldout_fraction checked against the default 100)."""
    from searchrl.preflight import _split_too_small

    assert _split_too_small("split", "q.jsonl", 30, {"heldout": 30}) == [
        "stage 'split' holds out 30 of the 30 questions in q.jsonl, leaving none to train on; hold out fewer: "
        "pipeline.split.args.heldout=N with N below 30 (or pipeline.split.args.heldout_fraction=0.2)"
    ]
    assert _split_too_small("split", "q.jsonl", 30, {"heldout": 29}) == []
    assert _split_too_small("s", "q.jsonl", 30, {"heldout": True}) == [
        "stage 's': args heldout must be a whole number of questions, got True"
    ]
    assert "holds out 20 of the 10 questions" in _split_too_small("s", "q", 500, {"limit": 10, "heldout": 20})[0]
    assert _split_too_small("s", "q", 5, {"heldout_fraction": 0.2}) == []
    assert "holds out 100 of the 100" in _split_too_small("s", "q", 100, {})[0]  # split_questions' default
    assert _split_too_small("s", "q", 101, {}) == []


def test_a_path_is_under_a_directory_only_below_a_separator() -> None:
    """(mutant: a plain prefix test put runs/ab under runs/a: a missing file there was taken for a stage's output)"""
    from searchrl.preflight import _under

    assert _under("runs/a/x.jsonl", ["runs/a"]) and _under("runs/a", ["runs/a"]) and _under("runs/a/x", ["runs/a/"])
    assert not _under("runs/ab/x.jsonl", ["runs/a"]) and not _under("runs/ab", ["runs/a"])


def test_refill_rounds_need_dropped_groups() -> None:
    """(mutant: max_sampling_rounds=3 passed alone, and did nothing)"""
    with pytest.raises(ConfigError, match=r"refills dropped groups: set algorithm\.drop_uniform_groups=true"):
        load_config(None, ["algorithm.max_sampling_rounds=3"])
    cfg = load_config(None, ["algorithm.max_sampling_rounds=3", "algorithm.drop_uniform_groups=true"])
    assert cfg.algorithm.max_sampling_rounds == 3


def test_dropping_uniform_groups_needs_a_group_baseline() -> None:
    """Without one no group's advantages are all 0 (mutant: no check)."""
    with pytest.raises(ConfigError) as err:
        load_config(None, ["algorithm.name=ppo", "algorithm.drop_uniform_groups=true"])
    assert str(err.value).endswith(
        "algorithm.drop_uniform_groups needs a group baseline: grpo, rloo, dr_grpo, gspo, or reinforce_pp with "
        "reinforce_estimator=reinforce_baseline or group_norm"
    )
    base = ["algorithm.name=reinforce_pp", "algorithm.drop_uniform_groups=true"]
    with pytest.raises(ConfigError, match="needs a group baseline"):
        load_config(None, base)
    assert load_config(None, [*base, "algorithm.reinforce_estimator=group_norm"]).algorithm.drop_uniform_groups


def test_a_declared_algorithm_may_set_norm_adv_by_std(monkeypatch: pytest.MonkeyPatch) -> None:
    """A plugin's algorithm may read it (mutant: only grpo and gspo could set it, so a declared one was refused)."""
    from searchrl.config.algorithms import ALGORITHMS, Algorithm

    monkeypatch.setitem(ALGORITHMS, "audit_grpo", Algorithm("audit_grpo", grouped=True))
    cfg = load_config(None, ["algorithm.name=audit_grpo", "algorithm.norm_adv_by_std=false"])
    assert cfg.algorithm.norm_adv_by_std is False


def test_a_built_in_algorithm_cannot_be_declared_again() -> None:
    """Declaring the same traits again is a no-op for a plugin's algorithm only (mutant: for a built-in one too, so
    a plugin's ``grpo`` with other code behind it passed silently)."""
    from searchrl.config.algorithms import Algorithm, declare

    with pytest.raises(ValueError, match="algorithm 'grpo' is declared twice; give the new one another name"):
        declare(Algorithm("grpo", grouped=True))


def test_a_reward_param_typo_in_a_stage_set_is_caught(tmp_path: Path) -> None:
    """A stage's set: changing reward params builds that stage's rewards again (mutant: only rollout and retrieval
    keys did, so ``metirc`` passed validation and failed when the stage began)."""
    from searchrl.validation import validate_deep

    recipe = tmp_path / "r.yaml"
    recipe.write_text("pipeline: [{name: rl, kind: rl, set: {reward.components.0.params.metirc: f1}}]\n")
    with pytest.raises(ConfigError) as err:
        validate_deep(load_config(recipe))
    assert str(err.value).startswith(
        "pipeline.rl: reward.components[0].params: unknown key 'metirc' for component 'answer' "
        "(did you mean 'metric'?)"
    ), err.value


def test_an_index_names_an_entry_of_a_list_only() -> None:
    """(mutant: an index was skipped after any section, so ``training.0.steps`` passed as a stage's set: key)"""
    from searchrl.validation import dotted_key_problem

    assert str(dotted_key_problem("training.0.steps")).startswith("unknown key 'training.0.steps'")
    assert dotted_key_problem("reward.components.0.weight") is None


def test_a_stage_switching_to_an_algorithm_without_an_estimator_is_caught(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An rl stage's set: naming a declared algorithm with no advantage estimator (mutant: only the run's own
    algorithm was checked, so the stage failed when it began)."""
    from searchrl.config.algorithms import ALGORITHMS, Algorithm
    from searchrl.validation import validate_deep

    monkeypatch.setitem(ALGORITHMS, "audit_noest", Algorithm("audit_noest", grouped=True))
    recipe = tmp_path / "r.yaml"
    recipe.write_text("pipeline: [{name: rl, kind: rl, set: {algorithm.name: audit_noest}}]\n")
    with pytest.raises(ConfigError) as err:
        validate_deep(load_config(recipe))
    assert str(err.value) == (
        "pipeline.rl: algorithm.name: audit_noest is declared but has no advantage estimator; add "
        "@register('audit_noest') (searchrl.rl.advantages) beside its declare()"
    )


@pytest.mark.parametrize("server", ["''", "[]", "['  ', serve]"])
def test_an_empty_mcp_server_command_is_refused(server: str) -> None:
    """(mutant: a command list whose program is blank passed, failing when the subprocess starts)"""
    with pytest.raises(ConfigError, match=r"retrieval\.mcp\.server is empty; give a command line"):
        load_config("demo", ["retrieval.kind=mcp", f"retrieval.mcp.server={server}"])
    cfg = load_config("demo", ["retrieval.kind=mcp", "retrieval.mcp.server=[searchrl, mcp, serve]"])
    assert cfg.retrieval.mcp.server == ["searchrl", "mcp", "serve"]


@pytest.mark.parametrize("name", ["..", "."])
def test_an_evaluation_set_named_like_a_directory_step_is_refused(name: str) -> None:
    """The name names its prediction files (mutant: '..' passed, and its files went to the directory above)."""
    with pytest.raises(ConfigError, match="that is not . or .."):
        load_config("demo", [f"evaluation.datasets=[{{data: dev, name: '{name}'}}]"])


def test_a_split_evaluation_set_takes_data_fields_not_its_own() -> None:
    """(mutant: a split's own fields passed, though the split is read with data.fields)"""
    with pytest.raises(ConfigError, match="the dev split is read with data.fields: set those, not this set's fields"):
        load_config("demo", ["evaluation.datasets=[{data: dev, fields: {answers: gold}}]"])
