"""`searchrl run`: stages in order, DONE markers, --only / --from, ${stage} references, run.log and summary.json."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from searchrl import runner
from searchrl.config import ConfigError, validate_dict
from searchrl.eval.diagnostics import choice_options
from searchrl.runner import run_pipeline
from searchrl.stages import chain


def _cfg(stages: list[dict]):
    return validate_dict({"name": "t", "pipeline": stages})


STAGES = [
    {"name": "world", "kind": "data", "op": "synth"},
    {"name": "index", "kind": "data", "op": "index"},
    {"name": "oracle", "kind": "data", "op": "oracle"},
    {"name": "sft", "kind": "sft", "data": "${oracle}"},
    {"name": "rl", "kind": "rl", "set": {"training.steps": 3}},
    {"name": "eval", "kind": "eval", "data": ["${world}/dev.jsonl"]},
]


def test_an_sft_stage_takes_several_data_sources(tmp_path: Path, fake_handlers) -> None:
    stages = [*STAGES[:3], {"name": "sft", "kind": "sft", "data": ["oracle", "${oracle}"]}]
    run_pipeline(_cfg(stages), tmp_path)
    assert fake_handlers[-1]["data"] == ["oracle", str(tmp_path / "oracle" / "data.jsonl")]


def test_stages_run_in_order_and_chain(tmp_path: Path, fake_handlers) -> None:
    results = run_pipeline(_cfg(STAGES), tmp_path)
    assert [c["name"] for c in fake_handlers] == ["world", "index", "oracle", "sft", "rl", "eval"]
    by = {c["name"]: c for c in fake_handlers}
    assert by["world"]["model"] == "smollm2-135m-instruct" and by["world"]["world"] is None
    assert by["oracle"]["world"] == str(tmp_path / "world") and by["oracle"]["index"] == str(tmp_path / "index/index")
    assert by["sft"]["data"] == str(tmp_path / "oracle" / "data.jsonl")
    assert by["rl"]["model"] == str(tmp_path / "sft" / "final") and by["rl"]["steps"] == 3
    assert by["sft"]["steps"] == 20  # a stage's set: is its own
    assert by["rl"]["source"] == str(tmp_path / "world")  # data.source follows the synth stage
    assert by["eval"]["model"] == str(tmp_path / "rl" / "final")
    assert by["eval"]["data"] == [str(tmp_path / "world" / "dev.jsonl")]
    assert all(r.status == "ran" for r in results)
    assert all((tmp_path / s["name"] / "DONE").exists() for s in STAGES)
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert [s["name"] for s in summary["stages"]] == [s["name"] for s in STAGES] and summary["failed"] is None
    assert all(s["cpu_seconds"] >= 0 for s in summary["stages"])  # CPU time beside wall time, per stage
    assert "cpu_seconds" in json.loads((tmp_path / "rl" / "DONE").read_text())
    log = (tmp_path / "run.log").read_text()
    assert "stage rl: done in" in log and "finished in" in log


def test_done_stages_are_skipped(tmp_path: Path, fake_handlers) -> None:
    run_pipeline(_cfg(STAGES), tmp_path)
    fake_handlers.clear()
    results = run_pipeline(_cfg(STAGES), tmp_path)
    assert fake_handlers == [] and all(r.status == "skipped" for r in results)
    (tmp_path / "rl" / "DONE").unlink()  # an unfinished stage runs again, and so do those made from its output
    run_pipeline(_cfg(STAGES), tmp_path)
    assert [c["name"] for c in fake_handlers] == ["rl", "eval"]
    assert fake_handlers[0]["model"] == str(tmp_path / "sft" / "final")  # a skipped stage still feeds the next


def test_a_done_stage_whose_settings_changed_runs_again_and_the_stages_after_it(tmp_path: Path, fake_handlers) -> None:
    """DONE records a stage's settings: a rerun with other settings for it runs it (and what follows) again, instead
    of reporting the old results as this run's. Where it runs (model.device) changes nothing it makes."""
    run_pipeline(_cfg(STAGES), tmp_path)
    fake_handlers.clear()
    changed = [dict(s) for s in STAGES]
    changed[3] = {**changed[3], "set": {"sft.limit": 500}}
    run_pipeline(_cfg(changed), tmp_path)
    assert [c["name"] for c in fake_handlers] == ["sft", "rl", "eval"]
    assert (
        "stage sft: settings changed since it ran (config.sft.limit); running it again"
        in (tmp_path / "run.log").read_text()
    )
    fake_handlers.clear()
    moved = [{**s, "set": {**s.get("set", {}), "model.device": "cpu"}} for s in changed]
    assert all(r.status == "skipped" for r in run_pipeline(_cfg(moved), tmp_path)) and fake_handlers == []
    marker = json.loads((tmp_path / "rl" / "DONE").read_text())
    del marker["settings"]  # a marker from before settings were recorded is trusted
    (tmp_path / "rl" / "DONE").write_text(json.dumps(marker))
    run_pipeline(_cfg(changed), tmp_path)
    assert fake_handlers == []


def test_a_corpus_or_question_file_edited_in_place_runs_the_stages_that_read_it_again(
    tmp_path: Path, fake_handlers
) -> None:
    """The same path with other contents: the index and split made from the old file are not reused (their settings
    did not change, the files did); a file only touched keeps them."""
    data = tmp_path / "mydata"
    data.mkdir()
    (data / "corpus.jsonl").write_text('{"id": "d1", "contents": "A\\na"}\n')
    (data / "questions.jsonl").write_text('{"question": "q?", "answer": "a"}\n')
    stages = [
        {"name": "split", "kind": "data", "op": "split", "data": "${cfg.data.source}/${cfg.data.train}"},
        {"name": "index", "kind": "data", "op": "index"},  # data.corpus
        {"name": "rl", "kind": "rl", "data": "${split}/train.jsonl"},
    ]
    cfg = validate_dict({"name": "t", "data": {"source": str(data), "train": "questions.jsonl"}, "pipeline": stages})
    run_pipeline(cfg, tmp_path / "run")
    fake_handlers.clear()
    (data / "corpus.jsonl").touch()
    assert all(r.status == "skipped" for r in run_pipeline(cfg, tmp_path / "run"))
    with (data / "corpus.jsonl").open("a") as f:
        f.write('{"id": "d2", "contents": "B\\nb"}\n')
    run_pipeline(cfg, tmp_path / "run")
    assert [c["name"] for c in fake_handlers] == ["index", "rl"]
    assert (
        f"stage index: settings changed since it ran (file {data / 'corpus.jsonl'})"
        in (tmp_path / "run" / "run.log").read_text()
    )
    fake_handlers.clear()
    (data / "questions.jsonl").write_text('{"question": "other?", "answer": "b"}\n')
    run_pipeline(cfg, tmp_path / "run")
    assert [c["name"] for c in fake_handlers] == ["split", "index", "rl"]


def test_an_index_or_an_evaluation_set_outside_the_run_changed_in_place_runs_the_stages_that_read_it_again(
    tmp_path: Path, fake_handlers
) -> None:
    """An index rebuilt in place (its manifest rewritten) re-runs the stages that search it, not the index-free ones;
    an evaluation set's file, or its own index, edited in place re-runs the evaluation."""
    index, other = tmp_path / "index", tmp_path / "other-index"
    for d in (index, other):
        d.mkdir()
        (d / "manifest.json").write_text('{"created": "1"}')
    dev = tmp_path / "dev.jsonl"
    dev.write_text('{"question": "q?", "answer": "a"}\n')
    stages = [
        {"name": "world", "kind": "data", "op": "synth"},
        {"name": "rl", "kind": "rl"},
        {"name": "eval", "kind": "eval"},
    ]
    datasets = [str(dev), {"data": str(dev), "name": "own", "index": str(other)}]
    raw = {"name": "t", "retrieval": {"index": str(index)}, "evaluation": {"datasets": datasets}, "pipeline": stages}
    cfg = validate_dict(raw)
    run_pipeline(cfg, tmp_path / "run")
    fake_handlers.clear()
    assert all(r.status == "skipped" for r in run_pipeline(cfg, tmp_path / "run"))
    (index / "manifest.json").write_text('{"created": "2"}')
    run_pipeline(cfg, tmp_path / "run")
    assert [c["name"] for c in fake_handlers] == ["rl", "eval"]
    assert (
        f"stage rl: settings changed since it ran (file {index / 'manifest.json'})"
        in (tmp_path / "run" / "run.log").read_text()
    )
    for edit in (other / "manifest.json", dev):
        fake_handlers.clear()
        edit.write_text(edit.read_text() + " ")
        run_pipeline(cfg, tmp_path / "run")
        assert [c["name"] for c in fake_handlers] == ["eval"]


def test_an_evaluation_sets_own_index_under_data_source_rebuilt_in_place_runs_the_evaluation_again(
    tmp_path: Path, fake_handlers, monkeypatch
) -> None:
    """A set's own ``index:`` named relative to data.source (where the evaluation finds it, not the current
    directory) counts by its manifest too."""
    data = tmp_path / "data"
    (data / "own-index").mkdir(parents=True)
    (data / "own-index" / "manifest.json").write_text('{"created": "1"}')
    (data / "dev.jsonl").write_text('{"question": "q?", "answer": "a"}\n')
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")
    evaluation = {"datasets": [{"data": "dev", "name": "own", "index": "own-index"}]}
    stages = [{"name": "eval", "kind": "eval"}]
    cfg = validate_dict({"name": "t", "data": {"source": str(data)}, "evaluation": evaluation, "pipeline": stages})
    run_pipeline(cfg, tmp_path / "run")
    fake_handlers.clear()
    (data / "own-index" / "manifest.json").write_text('{"created": "2"}')
    run_pipeline(cfg, tmp_path / "run")
    assert [c["name"] for c in fake_handlers] == ["eval"]


def test_editing_your_reward_function_or_plugin_runs_the_stages_that_use_it_again(
    tmp_path: Path, fake_handlers, monkeypatch
) -> None:
    """A stage records a digest of the code of yours it ran: an edited reward file re-runs the stages that score
    (rl and after), an edited plugin every stage that can call it; an unchanged one nothing."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "mine.py").write_text("def bonus(inputs):\n    return [1.0] * len(inputs), {}\n")
    (tmp_path / "ext.py").write_text("X = 1\n")

    def cfg():
        return validate_dict(
            {
                "name": "t",
                "plugins": ["ext.py"],
                "reward": {"components": [{"name": "mine.py:bonus"}]},
                "pipeline": STAGES,
            }
        )

    run = tmp_path / "run"
    run_pipeline(cfg(), run)
    fake_handlers.clear()
    run_pipeline(cfg(), run)
    assert fake_handlers == []
    (tmp_path / "mine.py").write_text("def bonus(inputs):\n    return [2.0] * len(inputs), {}\n")
    run_pipeline(cfg(), run)
    assert [c["name"] for c in fake_handlers] == ["rl", "eval"]
    assert (
        f"stage rl: settings changed since it ran (code.{tmp_path / 'mine.py'}:bonus)" in (run / "run.log").read_text()
    )
    fake_handlers.clear()
    (tmp_path / "ext.py").write_text("X = 2\n")
    run_pipeline(cfg(), run)
    assert [c["name"] for c in fake_handlers] == ["oracle", "sft", "rl", "eval"]  # not the world or its index


def test_only_and_from(tmp_path: Path, fake_handlers) -> None:
    run_pipeline(_cfg(STAGES), tmp_path)
    (tmp_path / "sft" / "stale.txt").write_text("x")
    fake_handlers.clear()
    run_pipeline(_cfg(STAGES), tmp_path, only=["sft"])
    assert [c["name"] for c in fake_handlers] == ["sft"]
    assert not (tmp_path / "sft" / "stale.txt").exists()  # a re-run stage starts from an empty directory
    fake_handlers.clear()
    run_pipeline(_cfg(STAGES), tmp_path, start="rl")
    assert [c["name"] for c in fake_handlers] == ["rl", "eval"]
    with pytest.raises(ConfigError, match="no stage 'nope'"):
        run_pipeline(_cfg(STAGES), tmp_path, only=["nope"])


def _stopped_part_way(stage_dir: Path) -> None:
    """As a stage stopped after saving a checkpoint leaves its directory: no DONE marker, a checkpoint."""
    (stage_dir / "DONE").unlink()
    (stage_dir / "checkpoint").mkdir()
    (stage_dir / "checkpoint" / "trainer_state.pt").write_bytes(b"x")


def test_an_rl_stage_stopped_part_way_goes_on_from_its_checkpoint(tmp_path: Path, fake_handlers) -> None:
    run_pipeline(_cfg(STAGES), tmp_path)
    _stopped_part_way(tmp_path / "rl")
    fake_handlers.clear()
    run_pipeline(_cfg(STAGES), tmp_path)
    assert [(c["name"], c["resume"]) for c in fake_handlers] == [("rl", True), ("eval", False)]  # eval: a new model
    assert (tmp_path / "rl" / "checkpoint" / "trainer_state.pt").exists()  # the directory was kept
    assert json.loads((tmp_path / "rl" / "DONE").read_text())["resumed"] is True
    assert "stage rl (rl): resuming from its checkpoint" in (tmp_path / "run.log").read_text()
    (tmp_path / "rl" / "DONE").unlink()
    fake_handlers.clear()
    run_pipeline(_cfg(STAGES), tmp_path, start="rl")  # asked to run again: from scratch
    assert [(c["name"], c["resume"]) for c in fake_handlers] == [("rl", False), ("eval", False)]
    assert not (tmp_path / "rl" / "checkpoint").exists()


def test_an_sft_stage_stopped_part_way_goes_on_from_its_checkpoint(tmp_path: Path, fake_handlers, monkeypatch) -> None:
    run_pipeline(_cfg(STAGES), tmp_path)
    _stopped_part_way(tmp_path / "sft")
    fake_handlers.clear()
    run_pipeline(_cfg(STAGES), tmp_path)
    assert [(c["name"], c["resume"]) for c in fake_handlers][:1] == [("sft", True)]
    assert "stage sft (sft): resuming from its checkpoint" in (tmp_path / "run.log").read_text()
    # the handler itself: the same settings go on, others start again from an emptied directory
    from searchrl import stages
    from searchrl.config import dump_config

    seen: list[bool] = []
    monkeypatch.setattr(stages, "run_sft", lambda cfg, out, resume=False: seen.append(resume) or [{"step": 1}])
    cfg = validate_dict({"name": "t"})
    stage = runner.StageConfig.model_validate({"name": "sft", "kind": "sft"})
    sdir = tmp_path / "sft2"
    rl_only = cfg.model_copy(update={"training": cfg.training.model_copy(update={"lr": 3 * cfg.training.lr})})
    for base, lr, expect in [(cfg, cfg.sft.lr, True), (rl_only, cfg.sft.lr, True), (cfg, 2 * cfg.sft.lr, False)]:
        (sdir / "checkpoint").mkdir(parents=True, exist_ok=True)
        (sdir / "checkpoint" / "trainer_state.pt").write_bytes(b"x")
        started = runner._sampling_cfg(runner.StageContext(stage, cfg, sdir, tmp_path, "m", None, None))
        dump_config(started, sdir / "config.yaml")
        # a setting only RL reads (training.lr) may change; one SFT reads (sft.lr) starts the stage again
        now = base.model_copy(update={"sft": base.sft.model_copy(update={"lr": lr, "save_every": 7})})
        runner._sft(runner.StageContext(stage, now, sdir, tmp_path, "m", None, None, resume=True))
        assert seen[-1] is expect and (sdir / "checkpoint").exists() is expect


@pytest.mark.parametrize("cut_between_renames", [False, True])
def test_a_stage_that_runs_again_leaves_no_checkpoint_after_it_to_go_on_from(
    tmp_path: Path, fake_handlers, cut_between_renames: bool
) -> None:
    """Its output changed: a later stage stopped part-way made its checkpoint from the old one (also one left at
    checkpoint.old by a save cut between its renames, which the stage would otherwise put back and go on from)."""
    run_pipeline(_cfg(STAGES), tmp_path)
    (tmp_path / "sft" / "DONE").unlink()  # the SFT stage runs again (from scratch: it left no checkpoint)
    _stopped_part_way(tmp_path / "rl")
    if cut_between_renames:
        (tmp_path / "rl" / "checkpoint").rename(tmp_path / "rl" / "checkpoint.old")
    fake_handlers.clear()
    run_pipeline(_cfg(STAGES), tmp_path)
    assert [(c["name"], c["resume"]) for c in fake_handlers] == [("sft", False), ("rl", False), ("eval", False)]


def test_rl_resumes_only_with_the_settings_it_was_started_with(tmp_path: Path, monkeypatch) -> None:
    """Same settings (a larger training.steps allowed): resume; anything else changed: the stage starts again."""
    from searchrl import stages
    from searchrl.config import dump_config

    seen: list[bool] = []
    monkeypatch.setattr(stages, "run_train", lambda cfg, resume=False: seen.append(resume) or [{"step": 1}])
    cfg = validate_dict({"name": "t", "training": {"steps": 4}})
    stage = runner.StageConfig.model_validate({"name": "rl", "kind": "rl"})
    sdir = tmp_path / "rl"
    for steps, lr, expect in [(8, cfg.training.lr, True), (4, 2 * cfg.training.lr, False)]:
        (sdir / "checkpoint").mkdir(parents=True, exist_ok=True)
        (sdir / "checkpoint" / "trainer_state.pt").write_bytes(b"x")
        (sdir / "metrics.jsonl").write_text("{}\n")  # the interrupted run's metrics
        raw = cfg.model_dump()  # started with 4 steps
        raw["training"].update(init_from="m", output_dir=str(sdir))
        dump_config(validate_dict(raw), sdir / "config.yaml")  # what the interrupted stage's trainer wrote
        now = cfg.model_copy(update={"training": cfg.training.model_copy(update={"steps": steps, "lr": lr})})
        runner._rl(runner.StageContext(stage, now, sdir, tmp_path, "m", None, None, resume=True))
        assert seen[-1] is expect
        assert (sdir / "checkpoint").exists() is expect  # a stale checkpoint is removed, not loaded
        assert (sdir / "metrics.jsonl").exists() is expect  # a restarted run does not append to the old metrics
    runner._rl(runner.StageContext(stage, cfg, tmp_path / "fresh", tmp_path, "m", None, None, resume=True))
    assert seen[-1] is False  # no saved config: nothing to compare with


def test_rl_starts_again_when_its_training_questions_were_edited_in_place(tmp_path: Path, monkeypatch) -> None:
    """The checkpoint's data position counts in the training questions: a question file edited since (same path,
    same settings) makes the interrupted RL stage start again rather than resume into other questions."""
    from searchrl import stages
    from searchrl.config import dump_config
    from searchrl.stages.resume import record_init, resume_mismatch

    seen: list[bool] = []
    monkeypatch.setattr(stages, "run_train", lambda cfg, resume=False: seen.append(resume) or [{"step": 1}])
    data = tmp_path / "data"
    data.mkdir()
    (data / "train.jsonl").write_text('{"question": "q1", "answer": "a"}\n')
    sdir = tmp_path / "rl"
    training = {"output_dir": str(sdir), "init_from": "m"}
    cfg = validate_dict({"name": "t", "data": {"source": str(data)}, "training": training})
    stage = runner.StageConfig.model_validate({"name": "rl", "kind": "rl"})
    for edit, expect in [(False, True), (True, False)]:
        (sdir / "checkpoint").mkdir(parents=True, exist_ok=True)
        (sdir / "checkpoint" / "trainer_state.pt").write_bytes(b"x")
        dump_config(cfg, sdir / "config.yaml")
        record_init(cfg)  # what the interrupted stage's trainer noted when it started
        if edit:
            (data / "train.jsonl").write_text('{"question": "q1 edited", "answer": "a"}\n')
            assert f"training questions {data / 'train.jsonl'} changed since" in resume_mismatch(cfg)
        runner._rl(runner.StageContext(stage, cfg, sdir, tmp_path, "m", None, None, resume=True))
        assert seen[-1] is expect


def test_a_checkpoint_save_cut_between_its_renames_is_resumed_from(tmp_path: Path, fake_handlers) -> None:
    """The save renames checkpoint to checkpoint.old, then the new one into place: a stop between the two leaves the
    whole previous checkpoint at checkpoint.old, which the stage goes on from."""
    run_pipeline(_cfg(STAGES), tmp_path)
    (tmp_path / "rl" / "DONE").unlink()
    (tmp_path / "rl" / "checkpoint.old").mkdir()
    (tmp_path / "rl" / "checkpoint.old" / "trainer_state.pt").write_bytes(b"x")
    fake_handlers.clear()
    run_pipeline(_cfg(STAGES), tmp_path)
    assert [(c["name"], c["resume"]) for c in fake_handlers] == [("rl", True), ("eval", False)]
    assert (tmp_path / "rl" / "checkpoint" / "trainer_state.pt").exists()


def test_rl_starts_again_when_its_starting_model_changed(tmp_path: Path, monkeypatch) -> None:
    """An earlier stage that ran again wrote new weights at the same path: the checkpoint is stale."""
    from searchrl import stages
    from searchrl.config import dump_config
    from searchrl.stages.resume import record_init

    seen: list[bool] = []
    monkeypatch.setattr(stages, "run_train", lambda cfg, resume=False: seen.append(resume) or [{"step": 1}])
    model = tmp_path / "sft" / "final"
    model.mkdir(parents=True)
    (model / "model.safetensors").write_bytes(b"weights v1")
    stage = runner.StageConfig.model_validate({"name": "rl", "kind": "rl"})
    sdir = tmp_path / "rl"
    raw = validate_dict({"name": "t"}).model_dump()
    raw["training"].update(init_from=str(model), output_dir=str(sdir))
    cfg = validate_dict(raw)
    for trained_again in (False, True):
        (sdir / "checkpoint").mkdir(parents=True, exist_ok=True)
        (sdir / "checkpoint" / "trainer_state.pt").write_bytes(b"x")
        dump_config(cfg, sdir / "config.yaml")  # what the interrupted stage wrote when it started
        record_init(cfg)
        if trained_again:
            (model / "model.safetensors").write_bytes(b"weights v2")
        expect = not trained_again
        runner._rl(runner.StageContext(stage, cfg, sdir, tmp_path, str(model), None, None, resume=True))
        assert seen[-1] is expect
    assert "rl: the starting model" in (tmp_path / "run.log").read_text()


def test_only_needs_its_inputs(tmp_path: Path, fake_handlers) -> None:
    with pytest.raises(ConfigError, match="has not run yet"):
        run_pipeline(_cfg(STAGES), tmp_path, only=["rl"])


def test_only_a_first_part_of_a_fresh_pipeline(tmp_path: Path, fake_handlers) -> None:
    """The stages after the last --only stage are neither needed nor asked for: they do not run, and no error."""
    run_pipeline(_cfg(STAGES), tmp_path, only=["world", "index", "oracle", "sft"])
    assert [c["name"] for c in fake_handlers] == ["world", "index", "oracle", "sft"]
    assert not (tmp_path / "rl").exists()


def test_failed_stage_leaves_no_marker(tmp_path: Path, fake_handlers, monkeypatch) -> None:
    def boom(ctx):
        raise ValueError("broken stage")

    monkeypatch.setitem(runner.HANDLERS, "rl", boom)
    with pytest.raises(ValueError, match="broken stage"):
        run_pipeline(_cfg(STAGES), tmp_path)
    assert (tmp_path / "sft" / "DONE").exists() and not (tmp_path / "rl" / "DONE").exists()
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert (summary["failed"], summary["stopped"], summary["stages"][-1]["status"]) == ("rl", None, "failed")
    assert "stage rl: FAILED" in (tmp_path / "run.log").read_text()


def test_bad_pipelines_fail_with_a_named_fix(tmp_path: Path, fake_handlers) -> None:
    with pytest.raises(ConfigError, match=r"\$\{later\} is not an earlier stage"):
        run_pipeline(
            _cfg([{"name": "a", "kind": "sft", "data": "${later}"}, {"name": "later", "kind": "rl"}]), tmp_path
        )
    with pytest.raises(ConfigError, match="needs op"):
        _cfg([{"name": "a", "kind": "data"}])
    with pytest.raises(ConfigError, match="unique"):
        _cfg([{"name": "a", "kind": "sft"}, {"name": "a", "kind": "rl"}])
    # a list of files is for sft and eval stages; the others read one (the rl stage once trained on "['a', 'b']")
    with pytest.raises(ConfigError, match=r"'r' \(rl\) takes one file .* give one, e.g. data: a.jsonl"):
        _cfg([{"name": "r", "kind": "rl", "data": ["a.jsonl", "b.jsonl"]}])
    with pytest.raises(ConfigError, match=r"'o' \(data oracle\) takes one file or directory in data:"):
        _cfg([{"name": "o", "kind": "data", "op": "oracle", "data": ["w1", "w2"]}])
    assert _cfg(
        [{"name": "e", "kind": "eval", "data": ["a.jsonl", "b.jsonl"]}, {"name": "s", "kind": "sft", "data": ["x"]}]
    )
    with pytest.raises(ConfigError, match="no pipeline"):
        run_pipeline(validate_dict({}), tmp_path)


def test_a_stage_arg_its_function_does_not_take_fails_before_any_stage(tmp_path: Path, fake_handlers) -> None:
    """``args:`` are keyword arguments of the stage function; a misspelt one fails before the first stage runs (and
    in the preflight plan), naming the ones it takes."""
    from searchrl.preflight import plan_pipeline

    sel = {"name": "sel", "kind": "data", "op": "select-difficulty", "args": {"rule": "rag_r1", "kepe": ["easy"]}}
    cfg = _cfg([STAGES[0], sel])
    for check in (lambda: run_pipeline(cfg, tmp_path), lambda: plan_pipeline(cfg, tmp_path)):
        with pytest.raises(ConfigError, match=r"unknown args \['kepe'\].*'keep'"):
            check()
    assert fake_handlers == []  # the world stage did not run either
    oracle = {"name": "o", "kind": "data", "op": "oracle", "args": {"max_obs_tokens": 120}}
    with pytest.raises(ConfigError, match="config settings go in set:"):
        run_pipeline(_cfg([oracle]), tmp_path / "o")
    ok = {"name": "sel", "kind": "data", "op": "select-difficulty", "args": {"rule": "rag_r1", "keep": ["easy"]}}
    run_pipeline(_cfg([ok]), tmp_path / "ok")
    assert [c["name"] for c in fake_handlers] == ["sel"]


def test_synth_stage_args_are_validated_as_data_world(tmp_path: Path) -> None:
    """A synth stage's args are read as data.world's fields: "false" is False, a bad share is a one-line error."""
    world = {"name": "world", "kind": "data", "op": "synth", "args": {"entities": 60, "deaths": "false"}}
    result = run_pipeline(_cfg([world]), tmp_path / "w")[0].result
    assert result["deaths"] is False and result["entities"] == 60
    bad = {"name": "world", "kind": "data", "op": "synth", "args": {"entities": 60, "yes_no": 2}}
    with pytest.raises(ConfigError, match=r"stage 'world': args\.yes_no: .*fix that value"):
        run_pipeline(_cfg([bad]), tmp_path / "bad")


@pytest.mark.slow
def test_real_data_stages_and_eval(tmp_path: Path) -> None:
    """synth -> index -> split -> oracle -> eval with the bundled model: the real handlers, tiny sizes."""
    stages = [
        {"name": "world", "kind": "data", "op": "synth", "args": {"entities": 60}},
        {"name": "index", "kind": "data", "op": "index"},
        {"name": "split", "kind": "data", "op": "split", "data": "${world}/dev.jsonl", "args": {"heldout": 4}},
        {
            "name": "oracle",
            "kind": "data",
            "op": "oracle",
            "args": {"limit": 3},
            "set": {"rollout.max_obs_tokens": 120},
        },
        {  # the split's questions as a QA directory, only those that name their options ("..., A or B?")
            "name": "choices",
            "kind": "data",
            "op": "oracle",
            "data": "${split}",
            "args": {"limit": 1, "forms": ["choice"]},
            "set": {"rollout.max_obs_tokens": 120},
        },
        {
            "name": "eval",
            "kind": "eval",
            "data": "${split}/heldout.jsonl",
            "set": {"evaluation.methods": ["naive_rag"], "evaluation.max_new_tokens": 8},
        },
    ]
    results = run_pipeline(_cfg(stages), tmp_path)
    assert [r.status for r in results] == ["ran"] * 6
    choices = [json.loads(line) for line in (tmp_path / "choices" / "data.jsonl").read_text().splitlines()]
    assert len(choices) == 1 and all(choice_options(r["question"]) for r in choices)
    assert (tmp_path / "index" / "index" / "manifest.json").exists()
    assert len((tmp_path / "split" / "heldout.jsonl").read_text().splitlines()) == 4
    rows = [json.loads(line) for line in (tmp_path / "oracle" / "data.jsonl").read_text().splitlines()]
    assert len(rows) == 3 and all("action_mask" in r for r in rows)
    summary = json.loads((tmp_path / "eval" / "summary.json").read_text())
    assert summary and results[-1].result["rows"][0]["method"] == "naive_rag"


def test_cfg_references_resolve_from_the_run_config() -> None:
    from searchrl.config import ConfigError
    from searchrl.stages.chain import _subst

    cfg = {"data": {"source": "/data/hotpot", "train": "qa.jsonl"}}
    assert _subst({"data": "${cfg.data.source}/${cfg.data.train}"}, {}, "split", cfg) == {
        "data": "/data/hotpot/qa.jsonl"
    }
    with pytest.raises(ConfigError, match="not a config value"):
        _subst("${cfg.data.nope}", {}, "split", cfg)
    for name in ("/elsewhere/qa.jsonl", "hf:org/qa:train"):  # a data file given whole is not joined to the source
        assert (
            _subst("${cfg.data.source}/${cfg.data.train}", {}, "split", {"data": {**cfg["data"], "train": name}})
            == name
        )


def test_multihop_cpu_without_user_data_names_the_fix(tmp_path) -> None:
    from searchrl.config import ConfigError, load_config
    from searchrl.runner import run_pipeline

    cfg = load_config("multihop_cpu", ["data.world.entities=120"])
    cfg = cfg.model_copy(update={"pipeline": [s for s in cfg.pipeline if s.name == "split"]})
    with pytest.raises(ConfigError, match="data.source=DIR data.train="):
        run_pipeline(cfg, tmp_path / "run")


def test_a_stage_can_run_with_another_recipe(tmp_path: Path, monkeypatch) -> None:
    """R1-Searcher's pipeline runs stage 1 with r1_searcher_stage1's config (same profile), stage 2 with its own."""
    from searchrl.config import load_config

    seen = {}

    def handler(ctx):
        runner.stage_output(ctx.stage, ctx.run_dir).mkdir(parents=True, exist_ok=True)
        seen[ctx.stage.name] = ([c.name for c in ctx.cfg.reward.components], ctx.cfg.model.policy, ctx.model)
        return {}

    for key in runner.HANDLERS:
        monkeypatch.setitem(runner.HANDLERS, key, handler)
    cfg = load_config("r1_searcher_stage2", profile="laptop")
    run_pipeline(cfg, tmp_path, load=lambda name: load_config(name, [], "laptop"))
    assert seen["stage1"][0] == ["retrieval", "format"] and seen["stage2"][0] == ["answer", "format"]
    assert seen["stage1"][1] == "smollm2-135m-instruct"  # the profile applies to the other recipe too
    assert seen["stage2"][2] == str(tmp_path / "stage1" / "final")


def test_a_world_stage_reads_the_worlds_own_files_whatever_the_users_data_override(tmp_path: Path) -> None:
    """`data.train=dev.jsonl` names the user's question file; the world stages (cold start, its evaluation) must
    still train on the world's train split and score its dev split, never the reverse."""
    from searchrl.config import load_config
    from searchrl.data.synth import generate_world, write_world
    from searchrl.pipeline import load_split, make_retriever_for
    from searchrl.stages.data import oracle_data
    from searchrl.testing import ByteTokenizer

    world = tmp_path / "world"
    write_world(generate_world(120, 0), world)
    base = load_config("multihop_cpu", [f"data.source={tmp_path / 'user'}", "data.train=dev.jsonl"])
    coldstart = next(s for s in base.pipeline if s.name == "coldstart")
    cfg = chain.stage_config(base, coldstart, str(world), None)
    assert (cfg.data.source, cfg.data.train, cfg.data.dev) == (str(world), "train.jsonl", "dev.jsonl")
    train_q = {ex.question for ex in load_split(cfg, "train", None)}
    dev_q = {ex.question for ex in load_split(cfg, "dev", None)}
    assert train_q and dev_q and not train_q & dev_q
    # the cold start's own SFT data, built as the stage builds it: every example is a world training question
    small = {"comparison": 3, "bridge": 3, "three_hop": 3, "single_hop": 3}  # the recipe's kind mix, scaled down
    cfg = cfg.model_copy(update={"sft": cfg.sft.model_copy(update={"oracle_mix": small})})
    examples = oracle_data(cfg, ByteTokenizer(), retriever=make_retriever_for(cfg, str(world / "corpus.jsonl")))
    asked = {t.question for t in examples}
    assert len(asked) == 12 and asked <= train_q and not asked & dev_q  # none from the world's dev split


def test_an_index_of_shipped_paragraphs_after_a_world_stage_reads_the_users_questions(tmp_path: Path) -> None:
    """multihop_cpu with data.corpus=contexts: its index stage runs after the world stage, whose files replace the
    data names of later stages. The paragraphs must still come from the user's questions (HotpotQA's context), not
    from the world's, which ship none (the stage failed after the cold start: 'no question carries passages')."""
    from searchrl.config import load_config
    from searchrl.data.synth import generate_world, write_world
    from searchrl.stages.data import build_index_for

    world, user = tmp_path / "world", tmp_path / "user"
    write_world(generate_world(120, 0), world)
    user.mkdir()
    rows = [
        {"_id": f"h{i}", "question": f"Who made Film {i}?", "answer": f"Maker {i}", "type": "bridge",
         "context": [[f"Film {i}", [f"Film {i} is a film by Maker {i}."]], ["Other", ["Nothing here."]]]}
        for i in range(3)
    ]  # fmt: skip
    (user / "hotpot.json").write_text(json.dumps(rows), encoding="utf-8")
    base = load_config("multihop_cpu", [f"data.source={user}", "data.train=hotpot.json", "data.corpus=contexts"])
    raw = next(s for s in base.pipeline if s.name == "index")
    stage = runner.StageConfig.model_validate(chain._subst(raw.model_dump(), {}, raw.name, base.model_dump()))
    cfg = chain.stage_config(base, stage, str(world), None)
    assert cfg.data.train == str(user / "hotpot.json") and cfg.data.source == str(world)
    built = build_index_for(cfg, tmp_path / "index", stage.data)
    assert built["passages"] == 4  # three films' paragraphs and the one shared distractor
    coldstart = next(s for s in base.pipeline if s.name == "coldstart")  # the world stages keep the world's files
    assert chain.stage_config(base, coldstart, str(world), None).data.train == "train.jsonl"


def test_sampling_stages_get_their_teacher_from_args(tmp_path: Path, monkeypatch) -> None:
    """``args: {url, served_model, timeout_s}`` name a served teacher; the other args go to the stage function."""
    from searchrl import stages

    seen = {}

    def fake(cfg, out, *, data=None, teacher=None, k=4, slice=False):  # noqa: A002
        seen.update(teacher=teacher, k=k, slice=slice, model=cfg.model.policy)
        out.write_text("{}\n")

    monkeypatch.setattr(stages, "rejection_sampling", fake)
    args = {"k": 1, "slice": True, "url": "http://127.0.0.1:8001/v1", "served_model": "qwen"}
    run_pipeline(_cfg([{"name": "rs", "kind": "data", "op": "rejection-sample", "args": args}]), tmp_path)
    assert seen["teacher"] == stages.Teacher("http://127.0.0.1:8001/v1", "qwen") and (seen["k"], seen["slice"]) == (
        1,
        True,
    )
    assert seen["model"] == "smollm2-135m-instruct"  # the tokenizer of the served model: the stage's model


@pytest.mark.parametrize(("rule", "fix"), [("rag_r1", "raise args.n or args.easy_fraction"), ("r1_searcher", "widen")])
def test_an_empty_selection_names_the_fix_of_its_rule(tmp_path: Path, monkeypatch, rule: str, fix: str) -> None:
    """RAG-R1's answerability filter has no args.keep (that is R1-Searcher's): its empty result names its own
    settings."""
    from searchrl import stages

    def nothing_kept(cfg, out, *, data=None, teacher=None, rule="r1_searcher"):
        out.write_text("")

    monkeypatch.setattr(stages, "difficulty_selection", nothing_kept)
    sel = {"name": "sel", "kind": "data", "op": "select-difficulty", "args": {"rule": rule}}
    with pytest.raises(ValueError, match=f"stage 'sel': .*kept no question; {fix}"):
        run_pipeline(_cfg([sel]), tmp_path)


def test_a_stopped_stage_keeps_what_its_build_or_evaluation_goes_on_from(tmp_path: Path, fake_handlers) -> None:
    """A stage with no DONE starts again from an emptied directory, but a dense build's staging directory and an
    evaluation's answered batches stay (each keyed to its settings), so the rerun goes on from them."""
    run_pipeline(_cfg(STAGES), tmp_path)
    for name in ("index", "eval"):
        (tmp_path / name / "DONE").unlink()
    staging, answered = tmp_path / "index" / ".index.partial", tmp_path / "eval" / "predictions" / "dev__agent.jsonl"
    staging.mkdir()
    (staging / "vectors.f32").write_bytes(b"encoded")
    answered.parent.mkdir(parents=True)
    answered.with_name(answered.name + ".partial").write_text('{"resume_key": "k"}\n')
    answered.write_text("an old complete file\n")
    (tmp_path / "eval" / "summary.md").write_text("an old summary")
    fake_handlers.clear()
    run_pipeline(_cfg(STAGES), tmp_path)
    assert [c["name"] for c in fake_handlers] == ["index", "oracle", "sft", "rl", "eval"]
    assert (staging / "vectors.f32").read_bytes() == b"encoded"
    assert answered.with_name(answered.name + ".partial").exists()
    assert not answered.exists() and not (tmp_path / "eval" / "summary.md").exists()


def test_a_stopped_sampling_stage_keeps_its_finished_questions(tmp_path: Path) -> None:
    from searchrl.stages.resume import clear_stage

    (tmp_path / "data.jsonl").write_text("an old output\n")
    (tmp_path / "data.records.jsonl").write_text("old records\n")
    attempts = tmp_path / "data.jsonl.difficulty.partial"
    attempts.write_text('{"resume_key": "k"}\n')
    clear_stage(tmp_path)
    assert [p.name for p in tmp_path.iterdir()] == [attempts.name]


def test_the_same_run_by_a_relative_or_an_absolute_path_is_skipped(tmp_path: Path, fake_handlers, monkeypatch) -> None:
    """Stage references hold the run directory as given; DONE records it as ``${run}``, so naming the same run
    directory another way is not a change of settings."""
    monkeypatch.chdir(tmp_path)
    stages = [*STAGES[:-1], {**STAGES[-1], "data": ["runs/mine/world/dev.jsonl"]}]  # a literal path in the recipe
    run_pipeline(_cfg(stages), Path("runs/mine"))
    fake_handlers.clear()
    results = run_pipeline(_cfg(stages), tmp_path / "runs" / "mine")
    assert fake_handlers == [] and all(r.status == "skipped" for r in results)
    assert (
        json.loads((tmp_path / "runs/mine/sft/DONE").read_text())["settings"]["stage.data"]
        == "${run}/oracle/data.jsonl"
    )


def test_a_run_wide_change_reruns_only_the_stages_that_read_it(tmp_path: Path, fake_handlers) -> None:
    """A longer ``training.steps`` (or another ``evaluation.limit``) is no reason to rebuild the world, the index or
    the cold start: each stage compares only the config sections its kind reads."""
    stages = [{k: v for k, v in s.items() if k != "set"} for s in STAGES]
    run_pipeline(_cfg(stages), tmp_path)
    fake_handlers.clear()
    longer = validate_dict({"name": "t", "pipeline": stages, "training": {"steps": 40}})
    run_pipeline(longer, tmp_path)
    assert [c["name"] for c in fake_handlers] == ["rl", "eval"]  # RL goes on from its checkpoint; eval: a new model
    fake_handlers.clear()
    other_eval = validate_dict(
        {"name": "t", "pipeline": stages, "training": {"steps": 40}, "evaluation": {"limit": 7}}
    )
    run_pipeline(other_eval, tmp_path)
    assert [c["name"] for c in fake_handlers] == ["eval"]


def test_only_leaves_the_other_markers_and_the_dry_run_agrees_with_the_run(tmp_path: Path, fake_handlers) -> None:
    from searchrl.preflight import format_plan, plan_pipeline

    run_pipeline(_cfg(STAGES), tmp_path)
    run_pipeline(_cfg(STAGES), tmp_path, only=["sft"])
    assert all((tmp_path / s["name"] / "DONE").exists() for s in STAGES)  # --only re-runs one stage, no more
    changed = [dict(s) for s in STAGES]
    changed[3] = {**changed[3], "set": {"sft.limit": 500}}
    plans = plan_pipeline(_cfg(changed), tmp_path)
    planned = [p.name for p in plans if not p.skipped]
    # the dry run says why each stage that ran before runs again, as the run's log does
    assert [p.why for p in plans if not p.skipped] == [
        "settings changed since it ran (config.sft.limit)",
        "a stage before it runs again",
        "a stage before it runs again",
    ]
    assert "2. index [index] skip (DONE)" in format_plan(plans)
    assert "4. sft [sft] run again: settings changed since it ran (config.sft.limit) ->" in format_plan(plans)
    assert [p.why for p in plan_pipeline(_cfg(changed), tmp_path, forced={"eval"}, only=True)][-1] == (
        "named by --only / --from"
    )
    fake_handlers.clear()
    run_pipeline(_cfg(changed), tmp_path)
    assert planned == [c["name"] for c in fake_handlers] == ["sft", "rl", "eval"]
    assert "stage sft: settings changed since it ran (config.sft.limit)" in (tmp_path / "run.log").read_text()


def test_a_stage_stopped_by_sigterm_is_logged_as_stopped_and_the_rerun_goes_on(
    tmp_path: Path, fake_handlers, monkeypatch
) -> None:
    from searchrl.utils import StopRequested

    def stopped(ctx):
        raise StopRequested("stopped by SIGTERM at step 2 of 3, checkpoint in X; to go on: ...")

    monkeypatch.setitem(runner.HANDLERS, "rl", stopped)
    with pytest.raises(StopRequested):
        run_pipeline(_cfg(STAGES), tmp_path)
    log = (tmp_path / "run.log").read_text()
    assert "stage rl: stopped after" in log and "FAILED" not in log
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert (summary["stopped"], summary["failed"]) == ("rl", None)  # not a failure: the same run goes on
    assert [(s["name"], s["status"]) for s in summary["stages"]][-2:] == [("sft", "ran"), ("rl", "stopped")]
    assert not (tmp_path / "rl" / "DONE").exists()


@pytest.mark.parametrize("stop", [KeyboardInterrupt(), "SIGTERM"])
def test_a_stage_interrupted_says_in_run_log_how_to_go_on(tmp_path: Path, fake_handlers, monkeypatch, stop) -> None:
    """Ctrl-C, or a SIGTERM outside RL and SFT (whose stops name the resume themselves), in an evaluation stage:
    run.log says the stage stopped and that the same command goes on; the stage is not marked done."""
    from searchrl.utils import StopRequested

    err = StopRequested("stopped by SIGTERM") if stop == "SIGTERM" else stop

    def stopped(ctx):
        raise err

    monkeypatch.setitem(runner.HANDLERS, "eval", stopped)
    with pytest.raises(type(err)):
        run_pipeline(_cfg(STAGES), tmp_path)
    last = (tmp_path / "run.log").read_text().splitlines()[-1]
    said = "interrupted (Ctrl-C)" if stop != "SIGTERM" else "stopped by SIGTERM"
    assert last.endswith(f"s: {said}; to go on: the same searchrl run") and "stage eval: stopped after" in last
    assert not (tmp_path / "eval" / "DONE").exists()
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert (summary["stopped"], summary["failed"], summary["stages"][-1]["status"]) == ("eval", None, "stopped")


def test_a_finished_rl_stage_edited_other_than_in_its_steps_starts_again(tmp_path: Path, fake_handlers) -> None:
    """A finished RL stage keeps its last checkpoint (at training.steps): more steps go on from it, but any other
    change (an edited reward function here) would resume at the last step, train nothing and keep the old model."""
    reward = tmp_path / "mine.py"
    reward.write_text("def bonus(inputs):\n    return [1.0] * len(inputs), {}\n")
    stages = [{k: v for k, v in s.items() if k != "set"} for s in STAGES]
    stages[4]["set"] = {"training.eval_every": "${cfg.training.steps}"}  # as the demo recipe's: it follows the steps

    def cfg(steps: int = 20):
        components = [{"name": "answer"}, {"name": f"{reward}:bonus"}]
        return validate_dict(
            {"name": "t", "pipeline": stages, "reward": {"components": components}, "training": {"steps": steps}}
        )

    run_pipeline(cfg(), tmp_path / "run")
    (tmp_path / "run" / "rl" / "checkpoint").mkdir()  # as the trainer leaves it: saved at the last step
    (tmp_path / "run" / "rl" / "checkpoint" / "trainer_state.pt").write_bytes(b"x")
    fake_handlers.clear()
    run_pipeline(cfg(40), tmp_path / "run")
    assert [(c["name"], c["resume"]) for c in fake_handlers] == [("rl", True), ("eval", False)]
    reward.write_text("def bonus(inputs):\n    return [0.5] * len(inputs), {}\n")
    fake_handlers.clear()
    run_pipeline(cfg(40), tmp_path / "run")
    assert [(c["name"], c["resume"]) for c in fake_handlers] == [("rl", False), ("eval", False)]
    assert not (tmp_path / "run" / "rl" / "checkpoint").exists()


def test_rl_with_fewer_steps_than_it_was_started_with_starts_again(tmp_path: Path, monkeypatch) -> None:
    """Only training.steps may grow: a checkpoint at or past the new, smaller training.steps would train nothing and
    leave the longer run's model as this one's."""
    from searchrl import stages
    from searchrl.config import dump_config
    from searchrl.stages.resume import resume_mismatch

    seen: list[bool] = []
    monkeypatch.setattr(stages, "run_train", lambda cfg, resume=False: seen.append(resume) or [{"step": 1}])
    sdir = tmp_path / "rl"
    raw = validate_dict({"name": "t", "training": {"steps": 4}}).model_dump()
    raw["training"].update(init_from="m", output_dir=str(sdir))
    started = validate_dict(raw)
    stage = runner.StageConfig.model_validate({"name": "rl", "kind": "rl"})
    for steps, expect in [(4, True), (2, False)]:
        (sdir / "checkpoint").mkdir(parents=True, exist_ok=True)
        (sdir / "checkpoint" / "trainer_state.pt").write_bytes(b"x")
        dump_config(started, sdir / "config.yaml")  # what the stopped stage's trainer wrote
        now = started.model_copy(update={"training": started.training.model_copy(update={"steps": steps})})
        if not expect:
            assert resume_mismatch(now) == "training.steps=2 is below the 4 the checkpoint's run was started with"
        runner._rl(runner.StageContext(stage, now, sdir, tmp_path, "m", None, None, resume=True))
        assert seen[-1] is expect and (sdir / "checkpoint").exists() is expect


def test_the_marker_says_resumed_only_when_the_stage_went_on_from_its_checkpoint(tmp_path: Path, monkeypatch) -> None:
    """A stopped RL stage whose checkpoint does not fit its settings starts again: its DONE must not say resumed."""
    from searchrl import stages

    def train(cfg, resume=False):
        (Path(cfg.training.output_dir) / "final").mkdir(parents=True, exist_ok=True)
        return [{"step": 1}]

    monkeypatch.setattr(stages, "run_train", train)
    (tmp_path / "rl" / "checkpoint").mkdir(parents=True)
    (tmp_path / "rl" / "checkpoint" / "trainer_state.pt").write_bytes(b"x")  # no config.yaml: nothing to compare
    run_pipeline(_cfg([{"name": "rl", "kind": "rl"}]), tmp_path)
    assert "stage rl: settings differ from the checkpoint's" in (tmp_path / "run.log").read_text()
    assert "resumed" not in json.loads((tmp_path / "rl" / "DONE").read_text())


def test_a_model_outside_the_run_trained_again_in_place_runs_the_stages_that_start_from_it(
    tmp_path: Path, fake_handlers
) -> None:
    """A stage's starting model named by path outside the run directory (``init_from``) is one of its inputs: new
    weights at the same path run it (and those after it) again; unchanged ones skip it."""
    model = tmp_path / "my-sft"
    model.mkdir()
    (model / "model.safetensors").write_bytes(b"weights v1")
    stages = [{"name": "rl", "kind": "rl", "init_from": str(model)}, {"name": "eval", "kind": "eval"}]
    run_pipeline(_cfg(stages), tmp_path / "run")
    fake_handlers.clear()
    assert all(r.status == "skipped" for r in run_pipeline(_cfg(stages), tmp_path / "run"))
    (model / "model.safetensors").write_bytes(b"weights v2, longer")
    run_pipeline(_cfg(stages), tmp_path / "run")
    assert [c["name"] for c in fake_handlers] == ["rl", "eval"]
    assert (
        f"stage rl: settings changed since it ran (weights of {model})" in (tmp_path / "run" / "run.log").read_text()
    )


def test_only_says_which_stages_it_keeps_although_their_settings_changed(tmp_path: Path, fake_handlers) -> None:
    """--only re-runs the named stages on the other stages' outputs as they are; one whose settings changed since it
    ran is kept as asked, but the log says so rather than reporting it as an ordinary skip."""
    run_pipeline(_cfg(STAGES), tmp_path)
    changed = [dict(s) for s in STAGES]
    changed[3] = {**changed[3], "set": {"sft.limit": 500}}
    fake_handlers.clear()
    run_pipeline(_cfg(changed), tmp_path, only=["rl"])
    assert [c["name"] for c in fake_handlers] == ["rl"]
    log = (tmp_path / "run.log").read_text()
    assert "stage sft: skipped (DONE, 0.0 s when it ran) although its settings changed since it ran " in log
    assert "(config.sft.limit): --only runs rl alone" in log
    assert "stage oracle: skipped (DONE, 0.0 s when it ran)\n" in log
    from searchrl.preflight import format_plan, plan_pipeline  # the dry run says the same

    plan = format_plan(plan_pipeline(_cfg(changed), tmp_path, forced={"rl"}, only=True))
    assert (
        "4. sft [sft] skip (DONE) although its settings changed since it ran (config.sft.limit): --only keeps" in plan
    )
    assert "3. oracle [oracle] skip (DONE) ->" in plan


def test_a_stage_stopped_by_ctrl_c_is_logged_as_stopped(tmp_path: Path, fake_handlers, monkeypatch) -> None:
    def interrupted(ctx):
        raise KeyboardInterrupt

    monkeypatch.setitem(runner.HANDLERS, "rl", interrupted)
    with pytest.raises(KeyboardInterrupt):
        run_pipeline(_cfg(STAGES), tmp_path)
    log = (tmp_path / "run.log").read_text()
    assert "stage rl: stopped after" in log and "interrupted (Ctrl-C)" in log and "FAILED" not in log
    assert not (tmp_path / "rl" / "DONE").exists()


def test_how_often_a_stage_saves_or_logs_never_counts_even_in_its_own_set(tmp_path: Path, fake_handlers) -> None:
    """``training.save_every`` and the like change nothing a stage makes, whether given run-wide or in its set:."""
    stages = [dict(s) for s in STAGES]
    stages[4] = {**stages[4], "set": {**stages[4]["set"], "training.save_every": 5, "training.log_rollouts": 2}}
    run_pipeline(_cfg(stages), tmp_path)
    stages[4] = {**stages[4], "set": {**stages[4]["set"], "training.save_every": 7, "training.log_rollouts": 0}}
    fake_handlers.clear()
    assert all(r.status == "skipped" for r in run_pipeline(_cfg(stages), tmp_path)) and fake_handlers == []
