"""Pipeline-stage behaviours a mutation audit found unpinned: how stages chain, resume and record what they ran."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from searchrl import runner
from searchrl.config import ConfigError, validate_dict
from searchrl.runner import run_pipeline

STAGES = [
    {"name": "world", "kind": "data", "op": "synth"},
    {"name": "index", "kind": "data", "op": "index"},
    {"name": "oracle", "kind": "data", "op": "oracle"},
    {"name": "sft", "kind": "sft", "data": "${oracle}"},
    {"name": "rl", "kind": "rl", "set": {"training.steps": 3}},
    {"name": "eval", "kind": "eval", "data": ["${world}/dev.jsonl"]},
]


def _cfg(stages: list[dict], **extra):
    return validate_dict({"name": "t", "pipeline": stages, **extra})


def test_only_and_from_together_are_refused(tmp_path: Path, fake_handlers) -> None:
    with pytest.raises(ConfigError, match="give --only or --from, not both"):
        run_pipeline(_cfg(STAGES), tmp_path, only=["sft"], start="rl")
    assert fake_handlers == []


def test_a_finished_rl_stage_whose_own_set_grows_its_steps_goes_on_from_its_checkpoint(
    tmp_path: Path, fake_handlers
) -> None:
    """More steps given in the stage's own set: (it shows as stage.set.training.steps and config.training.steps)
    go on from the last checkpoint, as more steps given run-wide do."""
    run_pipeline(_cfg(STAGES), tmp_path)
    (tmp_path / "rl" / "checkpoint").mkdir()
    (tmp_path / "rl" / "checkpoint" / "trainer_state.pt").write_bytes(b"x")
    longer = [*STAGES[:4], {"name": "rl", "kind": "rl", "set": {"training.steps": 6}}, STAGES[5]]
    fake_handlers.clear()
    run_pipeline(_cfg(longer), tmp_path)
    assert [(c["name"], c["resume"]) for c in fake_handlers] == [("rl", True), ("eval", False)]
    assert (tmp_path / "rl" / "checkpoint" / "trainer_state.pt").exists()


def test_a_stages_own_index_wins_over_the_latest_index_stages(tmp_path: Path, fake_handlers) -> None:
    own = tmp_path / "elsewhere" / "index"
    stages = [*STAGES[:2], {"name": "eval", "kind": "eval", "index": str(own)}, {"name": "eval2", "kind": "eval"}]
    run_pipeline(_cfg(stages), tmp_path / "run")
    by = {c["name"]: c["cfg"] for c in fake_handlers}
    assert by["eval"].retrieval.index == str(own)
    assert by["eval2"].retrieval.index == str(tmp_path / "run" / "index" / "index")  # the latest index stage's


def _ctx(stage: dict, cfg, tmp_path: Path, model: str = "m", world: str | None = None, resume: bool = False):
    st = runner.StageConfig.model_validate(stage)
    sdir = tmp_path / st.name
    sdir.mkdir(parents=True, exist_ok=True)
    return runner.StageContext(st, cfg, sdir, tmp_path, model, world, None, resume)


def test_an_rl_stage_trains_on_its_data_from_its_model_into_its_directory(tmp_path: Path, monkeypatch) -> None:
    from searchrl import stages

    seen = {}

    def train(cfg, resume=False):
        seen.update(train=cfg.data.train, init=cfg.training.init_from, out=cfg.training.output_dir, resume=resume)
        return [{"step": 1, "loss": 2.0}, {"step": 7, "reward/total": 0.5, "eval/em": 0.25, "loss": 1.0, "kl": 0.1}]

    monkeypatch.setattr(stages, "run_train", train)
    cfg = validate_dict({"name": "t"})
    ctx = _ctx({"name": "rl", "kind": "rl", "data": "/q/selected.jsonl"}, cfg, tmp_path, model="/models/sft")
    result = runner._rl(ctx)
    assert seen == {"train": "/q/selected.jsonl", "init": "/models/sft", "out": str(tmp_path / "rl"), "resume": False}
    assert result == {"step": 7, "reward/total": 0.5, "eval/em": 0.25}  # the last step's, training's own aside


def test_an_eval_stage_evaluates_its_model_on_its_data_into_its_directory(tmp_path: Path, monkeypatch) -> None:
    from types import SimpleNamespace

    from searchrl import stages

    seen = {}

    def evaluation(cfg, *, model=None, out=None, datasets=None):
        seen.update(model=model, out=out, datasets=datasets)
        return SimpleNamespace(rows=3, runtime_s=1.234)

    monkeypatch.setattr(stages, "evaluation", evaluation)
    cfg = validate_dict({"name": "t"})
    one = _ctx({"name": "ev", "kind": "eval", "data": "/d/dev.jsonl"}, cfg, tmp_path, model="/models/rl")
    assert runner._eval(one) == {"rows": 3, "runtime_s": 1.23}
    assert seen == {"model": "/models/rl", "out": tmp_path / "ev", "datasets": ["/d/dev.jsonl"]}
    runner._eval(_ctx({"name": "ev2", "kind": "eval"}, cfg, tmp_path))
    assert seen["datasets"] is None  # none named: evaluation.datasets


def test_an_oracle_stage_reads_its_own_world_then_the_latest_synth_stages(tmp_path: Path, monkeypatch) -> None:
    from searchrl import stages

    seen = {}

    def write(cfg, out, split="train", forms=None):
        seen.update(source=cfg.data.source, split=split, forms=forms, limit=cfg.sft.limit, kinds=cfg.sft.kinds)
        seen.update(policy=cfg.model.policy, train=cfg.data.train)
        out.write_text('{"a": 1}\n\n{"b": 2}\n')  # a blank line is no example

    monkeypatch.setattr(stages, "write_oracle_data", write)
    cfg = validate_dict({"name": "t", "data": {"train": "mine.jsonl"}})
    stage = {"name": "oracle", "kind": "data", "op": "oracle", "data": "/w/own"}
    assert runner._op_oracle(_ctx(stage, cfg, tmp_path, model="/models/m", world="/w/synth")) == {"examples": 2}
    assert seen == {
        "source": "/w/own",
        "split": "train",
        "forms": None,
        "limit": None,
        "kinds": [],
        "policy": "/models/m",
        "train": "train.jsonl",
    }
    args = {"split": "dev", "limit": 5, "kinds": ["comparison"], "forms": ["choice"]}
    runner._op_oracle(_ctx({"name": "o2", "kind": "data", "op": "oracle", "args": args}, cfg, tmp_path, world="/w/s"))
    assert (seen["source"], seen["split"], seen["forms"], seen["limit"], seen["kinds"]) == (
        "/w/s",
        "dev",
        ["choice"],
        5,
        ["comparison"],
    )


def test_only_data_stages_take_args(tmp_path: Path, fake_handlers) -> None:
    stages = [*STAGES[:3], {"name": "sft", "kind": "sft", "args": {"epochs": 2}}]
    with pytest.raises(ConfigError, match="stage 'sft': args: are for data stages; use set: for sft settings"):
        run_pipeline(_cfg(stages), tmp_path)
    assert fake_handlers == []  # refused before any stage ran


def test_a_split_stage_reads_the_questions_by_the_data_fields(tmp_path: Path) -> None:
    qa = tmp_path / "mine.jsonl"
    rows = [{"id": f"q{i}", "q": f"Who is {i}?", "golden_answers": [str(i)]} for i in range(3)]
    qa.write_text("".join(json.dumps(r) + "\n" for r in rows))
    split = {"name": "split", "kind": "data", "op": "split", "data": str(qa), "args": {"heldout": 1}}
    results = run_pipeline(_cfg([split], data={"fields": {"question": "q"}}), tmp_path / "run")
    assert results[0].result == {"source": str(qa), "train": 2, "heldout": 1}
    written = [json.loads(line) for line in (tmp_path / "run" / "split" / "train.jsonl").read_text().splitlines()]
    assert sorted(r["question"] for r in written) == sorted(
        r["q"] for r in rows if r["id"] in {w["id"] for w in written}
    )


def test_an_sft_stage_trains_its_model_on_its_data(tmp_path: Path, monkeypatch) -> None:
    from searchrl import stages

    seen = {}

    def sft(cfg, out, resume=False):
        seen.update(data=cfg.sft.data, policy=cfg.model.policy, out=out, resume=resume)
        return [{"step": 1, "loss": 2.0}, {"step": 3, "loss": 0.5, "note": "text is no result"}]

    monkeypatch.setattr(stages, "run_sft", sft)
    cfg = validate_dict({"name": "t"})
    ctx = _ctx({"name": "sft", "kind": "sft", "data": ["oracle", "/d/real.jsonl"]}, cfg, tmp_path, model="/models/b")
    assert runner._sft(ctx) == {"step": 3, "loss": 0.5}
    assert seen == {
        "data": ["oracle", "/d/real.jsonl"],
        "policy": "/models/b",
        "out": str(tmp_path / "sft"),
        "resume": False,
    }


def test_a_pipeline_under_two_processes_is_refused_before_any_stage(
    tmp_path: Path, fake_handlers, monkeypatch
) -> None:
    monkeypatch.setenv("WORLD_SIZE", "2")
    with pytest.raises(ConfigError, match="searchrl run drives its stages from one process"):
        run_pipeline(_cfg(STAGES[:1]), tmp_path / "run")
    assert fake_handlers == [] and not (tmp_path / "run").exists()


def test_each_stage_kinds_reference_names_its_output(tmp_path: Path, fake_handlers) -> None:
    """``${name}``: a synth or split stage's directory, an index stage's index, a data stage's data.jsonl, a model
    stage's final model, an evaluation's directory."""
    stages = [
        {"name": "world", "kind": "data", "op": "synth"},
        {"name": "split", "kind": "data", "op": "split"},
        {"name": "index", "kind": "data", "op": "index"},
        {"name": "oracle", "kind": "data", "op": "oracle"},
        {"name": "sft", "kind": "sft"},
        {"name": "eval", "kind": "eval"},
        {
            "name": "refs",
            "kind": "eval",
            "data": ["${world}", "${split}", "${index}", "${oracle}", "${sft}", "${eval}"],
        },
    ]
    run = tmp_path / "run"
    run_pipeline(_cfg(stages), run)
    data = json.loads((run / "refs" / "DONE").read_text())["settings"]
    assert data["stage.data"] == [
        "${run}/world",
        "${run}/split",
        "${run}/index/index",
        "${run}/oracle/data.jsonl",
        "${run}/sft/final",
        "${run}/eval",
    ]


def test_after_a_synth_stage_every_stage_reads_the_worlds_corpus(tmp_path: Path, fake_handlers) -> None:
    cfg = _cfg(STAGES[:2], data={"source": str(tmp_path), "corpus": "mine.jsonl", "train": "q.jsonl"})
    run_pipeline(cfg, tmp_path / "run")
    data = fake_handlers[-1]["cfg"].data
    assert (data.source, data.corpus, data.train, data.dev, data.test) == (
        str(tmp_path / "run" / "world"),
        "corpus.jsonl",
        "train.jsonl",
        "dev.jsonl",
        "test.jsonl",
    )


def test_the_model_a_stage_starts_from(tmp_path: Path, fake_handlers) -> None:
    """Its own init_from, else the latest SFT / RL stage's model, else (RL, eval) the recipe's checkpoint, else
    model.policy."""
    stages = [
        {"name": "ev0", "kind": "eval"},
        {"name": "sft", "kind": "sft"},
        {"name": "ev1", "kind": "eval"},
        {"name": "rl", "kind": "rl", "init_from": "/models/own"},
        {"name": "ev2", "kind": "eval"},
    ]
    run_pipeline(_cfg(stages, training={"init_from": "/ckpt/recipe"}), tmp_path)
    assert [(c["name"], c["model"]) for c in fake_handlers] == [
        ("ev0", "/ckpt/recipe"),
        ("sft", "smollm2-135m-instruct"),  # SFT starts from model.policy, not an RL checkpoint
        ("ev1", str(tmp_path / "sft" / "final")),
        ("rl", "/models/own"),
        ("ev2", str(tmp_path / "rl" / "final")),
    ]


def test_another_policy_leaves_the_stages_that_use_no_model_done(tmp_path: Path, fake_handlers) -> None:
    run_pipeline(_cfg(STAGES[:2]), tmp_path)
    fake_handlers.clear()
    results = run_pipeline(_cfg(STAGES[:2], model={"policy": "qwen2.5-0.5b-instruct"}), tmp_path)
    assert fake_handlers == [] and [r.status for r in results] == ["skipped", "skipped"]
    assert json.loads((tmp_path / "world" / "DONE").read_text())["settings"]["model"] is None


@pytest.mark.parametrize("op", ["rejection-sample", "select-difficulty"])
def test_a_sampling_stages_model_outside_the_run_trained_again_in_place_runs_it_again(
    tmp_path: Path, fake_handlers, op: str
) -> None:
    model = tmp_path / "teacher"
    model.mkdir()
    (model / "model.safetensors").write_bytes(b"weights v1")
    stages = [{"name": "sample", "kind": "data", "op": op, "init_from": str(model)}]
    run_pipeline(_cfg(stages), tmp_path / "run")
    log = (tmp_path / "run" / "run.log").read_text()
    assert f"stage sample ({op}): start, model {model}" in log
    (model / "model.safetensors").write_bytes(b"weights v2, longer")
    fake_handlers.clear()
    run_pipeline(_cfg(stages), tmp_path / "run")
    assert [c["name"] for c in fake_handlers] == ["sample"]


def test_a_setting_saved_on_one_side_only_counts_only_when_it_is_set(tmp_path: Path) -> None:
    """A checkpoint's config.yaml from a version without a setting: an empty value of it is no change, a set one is."""
    import yaml

    from searchrl.stages.resume import settings_diff

    cfg = validate_dict({"name": "t", "training": {"steps": 4}})
    saved = json.loads(cfg.model_dump_json())
    del saved["plugins"]  # [] now: no change
    del saved["training"]["lr"]  # set now: a change
    saved["rollout"]["gone"] = {}  # an old empty setting: no change
    saved["rollout"]["old_flag"] = True  # an old set one: a change
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(saved))
    assert settings_diff(cfg, tmp_path / "config.yaml") == ["rollout.old_flag", "training.lr"]


@pytest.mark.parametrize(
    ("change", "reruns"),
    [
        ({"training": {"seed": 7}}, ["sft", "rl", "eval"]),  # SFT shuffles by the seed
        ({"training": {"max_grad_norm": 0.5}}, ["sft", "rl", "eval"]),
        ({"memorization": {"coef": 0.1}}, ["rl", "eval"]),  # only RL reads it
        ({"model": {"policy": "qwen2.5-0.5b-instruct"}}, ["oracle", "sft", "rl", "eval"]),  # its tokenizer cuts docs
        ({"sft": {"lr": 1e-4}}, ["oracle", "sft", "rl", "eval"]),
    ],
)
def test_a_run_wide_change_reruns_the_first_stage_that_reads_it_and_those_after(
    tmp_path: Path, fake_handlers, change: dict, reruns: list[str]
) -> None:
    run_pipeline(_cfg(STAGES), tmp_path)
    fake_handlers.clear()
    run_pipeline(_cfg(STAGES, **change), tmp_path)
    assert [c["name"] for c in fake_handlers] == reruns


def test_an_sft_stage_with_a_checkpoint_but_no_saved_config_starts_again(tmp_path: Path, monkeypatch) -> None:
    from searchrl import stages

    seen: list[bool] = []
    monkeypatch.setattr(stages, "run_sft", lambda cfg, out, resume=False: seen.append(resume) or [])
    ctx = _ctx({"name": "sft", "kind": "sft"}, validate_dict({"name": "t"}), tmp_path, resume=True)
    (ctx.dir / "checkpoint").mkdir()
    (ctx.dir / "checkpoint" / "trainer_state.pt").write_bytes(b"x")
    assert runner._sft(ctx) == {}
    assert seen == [False] and not (ctx.dir / "checkpoint").exists() and ctx.resume is False
    assert (
        "stage sft: settings differ from the checkpoint's (no saved config); starting it again"
        in (tmp_path / "run.log").read_text()
    )


def test_an_sft_stage_whose_examples_changed_since_its_checkpoint_starts_again(tmp_path: Path, monkeypatch) -> None:
    """Its data file edited in place: the trainer refuses the resume, and the stage starts again (as RL's does)."""
    from searchrl import stages
    from searchrl.utils import ResumeRefused

    seen: list[bool] = []

    def run_sft(cfg, out, resume=False):
        seen.append(resume)
        if resume:
            raise ResumeRefused("the SFT examples differ", "start afresh")
        return [{"loss": 0.5, "note": "x"}]

    monkeypatch.setattr(stages, "run_sft", run_sft)
    monkeypatch.setattr(runner, "sft_resume_mismatch", lambda cfg, out: None)
    ctx = _ctx({"name": "sft", "kind": "sft"}, validate_dict({"name": "t"}), tmp_path, resume=True)
    (ctx.dir / "checkpoint").mkdir()
    (ctx.dir / "checkpoint" / "trainer_state.pt").write_bytes(b"x")
    assert runner._sft(ctx) == {"loss": 0.5}
    assert seen == [True, False] and not (ctx.dir / "checkpoint").exists() and ctx.resume is False
    assert "stage sft: the SFT examples differ; starting it again" in (tmp_path / "run.log").read_text()


def test_a_model_beside_the_run_whose_path_shares_its_prefix_counts_as_outside(tmp_path: Path, fake_handlers) -> None:
    """``run-old/model`` is not inside ``run``: its weights retrained in place run the stage again."""
    model = tmp_path / "run-old" / "model"
    model.mkdir(parents=True)
    (model / "model.safetensors").write_bytes(b"weights v1")
    stages = [{"name": "ev", "kind": "eval", "init_from": str(model)}]
    run_pipeline(_cfg(stages), tmp_path / "run")
    (model / "model.safetensors").write_bytes(b"weights v2, longer")
    fake_handlers.clear()
    run_pipeline(_cfg(stages), tmp_path / "run")
    assert [c["name"] for c in fake_handlers] == ["ev"]


@pytest.mark.parametrize(
    "stage",
    [
        {"name": "s", "kind": "rl"},  # data.train
        {"name": "s", "kind": "data", "op": "index", "data": "contexts"},  # the paragraphs data.train ships with
        {"name": "s", "kind": "sft"},  # sft.data
        {"name": "s", "kind": "sft", "set": {"sft.data": "rewriter:${cfg.data.source}/q.jsonl"}},
    ],
)
def test_the_file_a_stage_reads_by_default_edited_in_place_runs_it_again(
    tmp_path: Path, fake_handlers, stage: dict
) -> None:
    data = tmp_path / "data"
    data.mkdir()
    (data / "q.jsonl").write_text('{"question": "Who?", "golden_answers": ["A"]}\n')
    (data / "corpus.jsonl").write_text('{"id": "1", "contents": "A\\nA is."}\n')
    cfg = _cfg([stage], data={"source": str(data), "train": "q.jsonl"}, sft={"data": str(data / "q.jsonl")})
    run_pipeline(cfg, tmp_path / "run")
    fake_handlers.clear()
    assert [r.status for r in run_pipeline(cfg, tmp_path / "run")] == ["skipped"]
    (data / "q.jsonl").write_text('{"question": "Who else?", "golden_answers": ["B"]}\n')
    run_pipeline(cfg, tmp_path / "run")
    assert [c["name"] for c in fake_handlers] == ["s"]
    assert f"file {data / 'q.jsonl'}" in (tmp_path / "run" / "run.log").read_text()


def test_a_synth_stage_makes_the_world_of_its_seed(tmp_path: Path) -> None:
    from searchrl.data.synth import generate_world, write_world
    from searchrl.stages import synth_world

    synth_world(tmp_path / "a", entities=150, seed=7)
    write_world(generate_world(150, seed=7), tmp_path / "b")
    write_world(generate_world(150, seed=0), tmp_path / "c")
    corpus = {d: (tmp_path / d / "corpus.jsonl").read_text() for d in "abc"}
    assert corpus["a"] == corpus["b"] != corpus["c"]


def test_a_held_out_fraction_rounds_to_the_nearest_count(tmp_path: Path) -> None:
    from searchrl.stages import split_questions

    qa = tmp_path / "qa.jsonl"
    qa.write_text(
        "".join(json.dumps({"id": f"q{i}", "question": "Q?", "golden_answers": ["A"]}) + "\n" for i in range(4))
    )
    assert split_questions(str(qa), tmp_path, heldout_fraction=0.7) == (1, 3)  # 2.8 of 4 held out: 3
    assert split_questions(str(qa), tmp_path, heldout=1, limit=3) == (2, 1)  # the first 3 questions only


def test_the_evaluation_stage_runs_the_harness_on_its_model_datasets_and_directory(
    tmp_path: Path, monkeypatch
) -> None:
    from searchrl.eval import harness
    from searchrl.stages import evaluation

    seen = {}
    monkeypatch.setattr(harness, "run_from_config", lambda cfg, corpus=None: seen.update(cfg=cfg, corpus=corpus))
    evaluation(validate_dict({"name": "t"}), model="/m/rl", out=tmp_path / "ev", datasets=["/d/a.jsonl"], corpus="/c")
    cfg = seen["cfg"]
    assert (cfg.training.init_from, cfg.evaluation.output_dir, cfg.evaluation.datasets, seen["corpus"]) == (
        "/m/rl",
        str(tmp_path / "ev"),
        ["/d/a.jsonl"],
        "/c",
    )


def test_an_sft_file_named_relative_to_the_working_directory_edited_in_place_runs_the_stage_again(
    tmp_path: Path, fake_handlers, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``sft.data=steps.jsonl`` is read from the working directory, as the SFT stage reads it."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "steps.jsonl").write_text('{"question": "Who?", "response": "<answer> A </answer>"}\n')
    cfg = _cfg([{"name": "s", "kind": "sft"}], sft={"data": "steps.jsonl"})
    run_pipeline(cfg, tmp_path / "run")
    fake_handlers.clear()
    assert [r.status for r in run_pipeline(cfg, tmp_path / "run")] == ["skipped"]
    (tmp_path / "steps.jsonl").write_text('{"question": "Who else?", "response": "<answer> B </answer>"}\n')
    run_pipeline(cfg, tmp_path / "run")
    assert [c["name"] for c in fake_handlers] == ["s"]
