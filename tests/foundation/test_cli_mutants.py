"""Each flag of the command line reaches the function it names: the heavy function a command calls is replaced by one
that records what it received (no model, index or corpus is loaded)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from searchrl import cli
from searchrl.commands.common import dotted
from searchrl.utils import write_jsonl

runner = CliRunner()


class Stop(Exception):
    """Raised by a fake once it has recorded its arguments: the command goes no further."""


def record(seen: dict):
    def fake(*args, **kwargs):
        seen.update(kwargs, args=args)
        raise Stop

    return fake


def test_dotted_keeps_zero_and_false_and_drops_only_none() -> None:
    flags = {"retrieval.topk": 0, "sft.shuffle": False, "model.policy": None, "rollout.protocol": "rag"}
    assert dotted(**flags) == ["retrieval.topk=0", "sft.shuffle=false", 'rollout.protocol="rag"']


def test_index_build_passes_every_bm25_flag(tmp_path: Path, monkeypatch) -> None:
    from searchrl.retrieval import index

    seen: dict = {}

    def fake_build(corpus, kind, out, **kwargs):
        seen.update(kwargs, corpus=corpus, kind=kind, out=out)
        out.mkdir(parents=True)
        (out / "manifest.json").write_text(json.dumps({"counts": {"passages": 3}, "build_seconds": 0.5}))
        return out

    monkeypatch.setattr(index, "build_index", fake_build)
    out = tmp_path / "idx"
    args = ["index", "build", "--corpus", "c.jsonl", "--out", str(out), "--device", "cpu"]
    res = runner.invoke(cli.app, [*args, "--stemmer", "none", "--stopwords", "NONE", "--max-words", "50", "--force"])
    assert res.exit_code == 0, res.output + repr(res.exception)
    assert seen["kind"] == "bm25" and seen["corpus"] == Path("c.jsonl") and seen["out"] == out
    assert seen["stemmer"] is None and seen["stopwords"] is None
    assert seen["max_words"] == 50 and seen["overwrite"] is True
    assert "built bm25 index of 3 passages" in res.stdout

    seen.clear()
    out2 = tmp_path / "idx2"
    res = runner.invoke(cli.app, ["index", "build", "--corpus", "c.jsonl", "--out", str(out2), "--stemmer", "german"])
    assert res.exit_code == 0, res.output + repr(res.exception)
    assert seen["stemmer"] == "german" and seen["stopwords"] == "en"  # the given one; the default
    assert seen["max_words"] is None and seen["overwrite"] is False


def test_rescore_passes_seed_resamples_and_compare_to(tmp_path: Path, monkeypatch) -> None:
    from searchrl.eval import stats

    path = tmp_path / "set.jsonl"
    write_jsonl(path, [{"question": "Q1", "answer": "Paris", "pred_ans": "paris"}])
    seen: dict = {}

    def fake_uncertainty(rows, items, names, *, seed, resamples, reference):
        seen.update(seed=seed, resamples=resamples, reference=reference)
        return {}, ["## intervals"]

    monkeypatch.setattr(stats, "uncertainty", fake_uncertainty)
    res = runner.invoke(
        cli.app, ["eval", "rescore", str(path), "--seed", "7", "--resamples", "5", "--compare-to", "prediction"]
    )
    assert res.exit_code == 0, res.output + repr(res.exception)
    assert seen == {"seed": 7, "resamples": 5, "reference": "prediction"}  # R1-Searcher's rows: one method
    res = runner.invoke(cli.app, ["eval", "rescore", str(path)])
    assert res.exit_code == 0, res.output + repr(res.exception)
    assert seen == {"seed": 0, "resamples": 1000, "reference": None}  # auto: nothing to compare one method with


def test_ask_passes_seed_temperature_and_rollout_limits(monkeypatch) -> None:
    from searchrl import device, models, pipeline
    from searchrl.generation import hf
    from searchrl.rollout import engine, render

    seen: dict = {}

    class FakeEngine:
        def __init__(self, generator, retriever, protocol, limits, prompt_style) -> None:
            seen["limits"] = limits

        def run(self, examples, *, temperature, seed):
            seen.update(temperature=temperature, seed=seed, question=examples[0].question)
            return [object()]

    monkeypatch.setattr(models, "check_fetchable", lambda *a, **k: None)
    monkeypatch.setattr(models, "load_policy", lambda spec, frozen: (None, None))
    monkeypatch.setattr(device, "configure_from", lambda cfg: None)
    monkeypatch.setattr(pipeline, "make_retriever_for", lambda cfg: None)
    monkeypatch.setattr(hf, "HFGenerator", lambda policy, tok: None)
    monkeypatch.setattr(engine, "RolloutEngine", FakeEngine)
    monkeypatch.setattr(render, "render_trajectory", lambda traj, tok: None)
    args = ["ask", "Who?", "--seed", "11", "--temperature", "0.7", "--max-turns", "3", "--max-new-tokens", "40"]
    res = runner.invoke(cli.app, [*args, "--topk", "2"])
    assert res.exit_code == 0, res.output + repr(res.exception)
    assert seen["seed"] == 11 and seen["temperature"] == 0.7 and seen["question"] == "Who?"
    limits = seen["limits"]
    assert (limits.max_turns, limits.max_new_tokens, limits.topk) == (3, 40, 2)


def test_demo_flags_are_overrides_of_the_demo_recipe(tmp_path: Path, monkeypatch) -> None:
    from searchrl import demo

    seen: dict = {}
    monkeypatch.setattr(demo, "run_demo", lambda cfg, out: seen.update(cfg=cfg, out=out))
    args = ["demo", "--questions", "7", "--sft-examples", "9", "--rl-steps", "2", "--out", str(tmp_path / "d")]
    res = runner.invoke(cli.app, args)
    assert res.exit_code == 0, res.output + repr(res.exception)
    cfg = seen["cfg"]
    assert (cfg.training.eval_limit, cfg.sft.limit, cfg.training.steps) == (7, 9, 2)
    assert seen["out"] == tmp_path / "d"


def test_select_difficulty_passes_seed_limit_and_sampling(tmp_path: Path, monkeypatch) -> None:
    from searchrl import stages

    seen: dict = {}
    monkeypatch.setattr(stages, "difficulty_selection", record(seen))
    args = ["data", "select-difficulty", "--data", "q.jsonl", "--out", str(tmp_path / "o.jsonl"), "--seed", "5"]
    args += ["--limit", "12", "--n", "4", "--rule", "rag_r1", "--temperature", "0.9", "--max-turns", "6"]
    res = runner.invoke(cli.app, [*args, "--easy-fraction", "0.5", "--batch-size", "3"])
    assert isinstance(res.exception, Stop), res.output + repr(res.exception)
    assert (seen["seed"], seen["limit"], seen["n"], seen["rule"]) == (5, 12, 4, "rag_r1")
    assert (seen["temperature"], seen["max_turns"], seen["easy_fraction"], seen["batch_size"]) == (0.9, 6, 0.5, 3)
    assert seen["data"] == "q.jsonl"


def test_rejection_sample_passes_seed_limit_and_k(tmp_path: Path, monkeypatch) -> None:
    from searchrl import stages

    seen: dict = {}
    monkeypatch.setattr(stages, "rejection_sampling", record(seen))
    args = ["data", "rejection-sample", "--data", "q.jsonl", "--out", str(tmp_path / "o.jsonl"), "--seed", "5"]
    res = runner.invoke(cli.app, [*args, "--limit", "12", "--k", "3", "--max-turns", "6", "--slice"])
    assert isinstance(res.exception, Stop), res.output + repr(res.exception)
    assert (seen["seed"], seen["limit"], seen["k"], seen["slice"]) == (5, 12, 3, True)
    cfg = seen["args"][0]
    assert cfg.rollout.max_turns == 6


def test_oracle_and_text_pass_limit_as_sft_limit(tmp_path: Path, monkeypatch) -> None:
    from searchrl import stages

    seen: dict = {}
    monkeypatch.setattr(stages, "write_oracle_data", record(seen))
    args = ["data", "oracle", "--world", str(tmp_path), "--out", str(tmp_path / "o.jsonl"), "--limit", "8"]
    res = runner.invoke(cli.app, [*args, "--kind", "single_hop", "--split", "dev"])
    assert isinstance(res.exception, Stop), res.output + repr(res.exception)
    cfg, _, split, _ = seen["args"]
    assert (cfg.sft.limit, cfg.sft.kinds, split) == (8, ["single_hop"], "dev")

    seen.clear()
    monkeypatch.setattr(stages, "write_text_data", record(seen))
    source = tmp_path / "t.jsonl"
    write_jsonl(source, [{"question": "q", "response": "r"}])
    res = runner.invoke(cli.app, ["data", "text", str(source), "--out", str(tmp_path / "x.jsonl"), "--limit", "4"])
    assert isinstance(res.exception, Stop), res.output + repr(res.exception)
    assert seen["args"][0].sft.limit == 4


@pytest.mark.parametrize("given, expected", [(["--resume"], True), ([], False)])
def test_sft_passes_out_and_resume(tmp_path: Path, monkeypatch, given, expected) -> None:
    from searchrl import models, stages
    from searchrl.commands import train

    seen: dict = {}
    monkeypatch.setattr(models, "check_fetchable", lambda *a, **k: None)
    monkeypatch.setattr(train, "check_resumable", lambda cfg, out, sft: seen.update(checked=out))
    monkeypatch.setattr(stages, "run_sft", lambda cfg, out, resume: seen.update(out=out, resume=resume))
    out = tmp_path / "cold"
    res = runner.invoke(cli.app, ["sft", "--recipe", "demo", "--out", str(out), *given])
    assert res.exit_code == 0, res.output + repr(res.exception)
    assert seen["out"] == str(out) and seen["resume"] is expected
    assert ("checked" in seen) is expected


def test_eval_passes_corpus_and_contexts(tmp_path: Path, monkeypatch) -> None:
    from searchrl import models, stages, validation

    seen: dict = {}
    monkeypatch.setattr(validation, "validate_deep", lambda cfg: None)
    monkeypatch.setattr(models, "check_fetchable", lambda cfg, profile: None)
    monkeypatch.setattr(stages, "evaluation", lambda cfg, corpus: seen.update(cfg=cfg, corpus=corpus))
    args = ["eval", "--data", "dev.jsonl", "--methods", "direct", "--out", str(tmp_path / "e")]
    res = runner.invoke(cli.app, [*args, "--corpus", "wiki.jsonl", "--limit", "3"])
    assert res.exit_code == 0, res.output + repr(res.exception)
    assert seen["corpus"] == "wiki.jsonl" and seen["cfg"].evaluation.limit == 3
    res = runner.invoke(cli.app, [*args, "--corpus", "contexts"])
    assert res.exit_code == 0, res.output + repr(res.exception)
    assert seen["corpus"] is None  # each set searches its own paragraphs
    (entry,) = seen["cfg"].evaluation.datasets
    assert (entry.data, entry.corpus) == ("dev.jsonl", "contexts")


def test_eval_refuses_contexts_without_data_sets_of_its_own(tmp_path: Path, monkeypatch) -> None:
    """Without --data, 'contexts' would be read as a corpus file of that name: refused, naming both fixes."""
    from searchrl import stages

    monkeypatch.setattr(stages, "evaluation", lambda cfg, corpus: pytest.fail("evaluation ran"))
    config = tmp_path / "c.yaml"
    config.write_text("name: t\n")
    res = runner.invoke(cli.app, ["eval", "--config", str(config), "--corpus", "contexts"])
    assert res.exit_code == 2
    assert "give --data FILE, or set corpus: contexts on the" in " ".join(res.output.split())


def test_synth_and_split_pass_seed_entities_and_heldout(tmp_path: Path, monkeypatch) -> None:
    from searchrl import stages

    seen: dict = {}
    monkeypatch.setattr(stages, "synth_world", record(seen))
    args = ["data", "synth", "--out", str(tmp_path / "w"), "--entities", "40", "--seed", "9", "--surface", "varied"]
    res = runner.invoke(cli.app, args)
    assert isinstance(res.exception, Stop), res.output + repr(res.exception)
    assert seen["args"][:4] == (tmp_path / "w", 40, 9, "varied")

    seen.clear()
    monkeypatch.setattr(stages, "split_questions", record(seen))
    res = runner.invoke(cli.app, ["data", "split", "qa.jsonl", "--out", str(tmp_path / "s"), "--heldout", "17"])
    assert isinstance(res.exception, Stop), res.output + repr(res.exception)
    assert seen["args"] == ("qa.jsonl", tmp_path / "s", 17)


@pytest.mark.parametrize(
    "given, only, start", [(["--only", "rl"], ["rl"], None), (["--from", "coldstart"], None, "coldstart")]
)
def test_run_passes_only_from_sets_and_out(tmp_path: Path, monkeypatch, given, only, start) -> None:
    from searchrl import models, preflight, validation
    from searchrl import runner as pipeline_runner

    seen: dict = {}
    monkeypatch.setattr(validation, "validate_deep", lambda cfg, load: None)
    monkeypatch.setattr(models, "check_fetchable", lambda *a, **k: None)
    monkeypatch.setattr(preflight, "plan_pipeline", lambda *a, **k: [])
    monkeypatch.setattr(
        pipeline_runner, "run_pipeline", lambda cfg, out, **kw: seen.update(kw, cfg=cfg, out=out) or []
    )
    out = tmp_path / "r"
    res = runner.invoke(cli.app, ["run", "--recipe", "demo", "--out", str(out), "--set", "training.steps=4", *given])
    assert res.exit_code == 0, res.output + repr(res.exception)
    assert (seen["only"], seen["start"], seen["out"], seen["recipe"]) == (only, start, str(out), "demo")
    assert seen["cfg"].training.steps == 4


def test_run_without_out_writes_into_runs_recipe_profile(monkeypatch) -> None:
    from searchrl import models, preflight, validation
    from searchrl import runner as pipeline_runner

    seen: dict = {}
    monkeypatch.setattr(validation, "validate_deep", lambda cfg, load: None)
    monkeypatch.setattr(models, "check_fetchable", lambda *a, **k: None)
    monkeypatch.setattr(preflight, "plan_pipeline", lambda *a, **k: [])
    monkeypatch.setattr(pipeline_runner, "run_pipeline", lambda cfg, out, **kw: seen.update(kw, out=out) or [])
    res = runner.invoke(cli.app, ["run", "--recipe", "demo", "--profile", "laptop"])
    assert res.exit_code == 0, res.output + repr(res.exception)
    assert (seen["out"], seen["profile"]) == ("runs/demo-laptop", "laptop")


def test_inspect_limit_reads_only_the_first_passages(tmp_path: Path) -> None:
    path = tmp_path / "corpus.jsonl"
    write_jsonl(path, [{"id": str(i), "contents": "a b"} for i in range(3)])
    res = runner.invoke(cli.app, ["data", "inspect", str(path), "--limit", "2", "--n", "0"])
    assert res.exit_code == 0, res.output + repr(res.exception)
    assert "(first 2 passages)" in res.output
    assert "│ passages                 │ 2 " in res.output  # 3 in the file, 2 read
