"""Stage behaviours a mutation audit of the training, sampling, data and evaluation stages found unpinned."""

from __future__ import annotations

from pathlib import Path

import pytest

from searchrl import runner
from searchrl.config import record_run, validate_dict
from searchrl.data.records import QAExample


def _ctx(stage: dict, cfg, run_dir: Path, model: str = "m", resume: bool = False):
    st = runner.StageConfig.model_validate(stage)
    sdir = run_dir / st.name
    sdir.mkdir(parents=True, exist_ok=True)
    return runner.StageContext(st, cfg, sdir, run_dir, model, None, None, resume)


def _fake_sft_run(monkeypatch, seen: list) -> None:
    """run_sft's model, data and trainer stood in for: the trainer records the config and whether it resumed."""
    import searchrl.models
    import searchrl.sft.trainer
    from searchrl.stages import train

    class Trainer:
        def __init__(self, cfg, model, tok, data, out):
            self.cfg, self.out = cfg, Path(out)

        def train(self, resume=False):
            seen.append(resume)
            record_run(self.cfg, self.out)
            return []

    monkeypatch.setattr(searchrl.models, "load_policy", lambda spec, dtype=None: ("model", "tok"))
    monkeypatch.setattr(train, "sft_examples", lambda cfg, protocol, tok: ["example"])
    monkeypatch.setattr(searchrl.sft.trainer, "SFTTrainer", Trainer)


def test_an_sft_run_whose_starting_model_was_retrained_in_place_does_not_resume(tmp_path: Path, monkeypatch) -> None:
    from searchrl.stages import run_sft
    from searchrl.stages.resume import sft_resume_mismatch

    model = tmp_path / "base"
    model.mkdir()
    (model / "model.safetensors").write_bytes(b"weights v1")
    cfg = validate_dict({"name": "t", "model": {"policy": str(model)}})
    seen: list[bool] = []
    _fake_sft_run(monkeypatch, seen)
    run_sft(cfg, tmp_path / "out")
    assert sft_resume_mismatch(cfg, tmp_path / "out") is None  # the same weights: it may go on
    (model / "model.safetensors").write_bytes(b"weights v2, longer")
    assert sft_resume_mismatch(cfg, tmp_path / "out") == (
        f"the starting model {model} changed since the checkpoint (an earlier stage ran again)"
    )
    run_sft(cfg, tmp_path / "out", resume=True)  # a resume leaves the noted model as the run started from it
    assert sft_resume_mismatch(cfg, tmp_path / "out") is not None
    assert seen == [False, True]


def test_an_sft_stage_whose_starting_model_was_retrained_in_place_starts_again(tmp_path: Path, monkeypatch) -> None:
    from searchrl import stages
    from searchrl.stages.resume import note_start

    model = tmp_path / "base"
    model.mkdir()
    (model / "model.safetensors").write_bytes(b"weights v1")
    seen: list[bool] = []
    monkeypatch.setattr(stages, "run_sft", lambda cfg, out, resume=False: seen.append(resume) or [])
    cfg = validate_dict({"name": "t"})
    ctx = _ctx({"name": "sft", "kind": "sft"}, cfg, tmp_path / "run", model=str(model), resume=True)
    started = validate_dict({"name": "t", "model": {"policy": str(model)}})  # the config the stage ran with
    record_run(started, ctx.dir)
    note_start(ctx.dir, started.model.policy)
    (ctx.dir / "checkpoint").mkdir()
    runner._sft(ctx)
    assert seen == [True] and ctx.resume is True
    (model / "model.safetensors").write_bytes(b"weights v2, longer")
    runner._sft(ctx)
    assert seen == [True, False] and ctx.resume is False and not (ctx.dir / "checkpoint").exists()
    assert f"stage sft: the starting model {model} changed since the checkpoint" in (
        (tmp_path / "run" / "run.log").read_text()
    )


def _questions(n: int) -> list[QAExample]:
    return [QAExample(f"q{i}", f"Question {i}?", [f"gold {i}"]) for i in range(n)]


@pytest.fixture
def selection(monkeypatch):
    """difficulty_selection with its questions, engine and selection rule stood in for: what each got."""
    import searchrl.sft.pipelines as pipelines
    from searchrl.stages import sampling

    seen: dict = {}
    monkeypatch.setattr(sampling, "load_questions", lambda cfg, data, limit: _questions(3))
    monkeypatch.setattr(
        sampling, "rollout_engine", lambda cfg, teacher, limits: seen.update(limits=limits) or "engine"
    )

    def rule(name):
        def select(engine, examples, n, *args, **kwargs):
            seen.update(rule=name, n=n, args=args, **kwargs)
            rows = [
                {"id": e.id, "bucket": b, "kept": True}
                for e, b in zip(examples, ["easy", "hard", "hard"], strict=True)
            ]
            return examples, rows

        return select

    monkeypatch.setattr(pipelines, "select_by_attempts", rule("attempts"))
    monkeypatch.setattr(pipelines, "select_answerable", rule("answerable"))
    return seen


def test_r1_searchers_selection_samples_24_attempts_by_cover_em_at_temperature_1_within_the_configs_limits(
    tmp_path: Path, selection: dict
) -> None:
    from searchrl.stages import difficulty_selection
    from searchrl.stages.sampling import attempt_log

    cfg = validate_dict({"name": "t", "rollout": {"max_turns": 3, "max_searches": 2}})
    result = difficulty_selection(cfg, tmp_path / "sel.jsonl")
    s = selection
    assert (s["rule"], s["n"], s["metric"], s["temperature"]) == ("attempts", 24, "cover_em", 1.0)
    assert (s["limits"].max_turns, s["limits"].max_searches) == (3, 2)
    assert (s["out"], s["records_out"]) == (tmp_path / "sel.jsonl", tmp_path / "sel.records.jsonl")
    assert s["log"].key != attempt_log(cfg, tmp_path / "sel.jsonl", None).key  # keyed on the rule's limits too
    assert result.buckets == {"easy": 1, "hard": 2}


def test_rag_r1s_filter_retries_10_times_by_em_at_temperature_1_2_with_up_to_10_turns_and_searches(
    tmp_path: Path, selection: dict
) -> None:
    from searchrl.stages import difficulty_selection

    cfg = validate_dict({"name": "t", "rollout": {"max_turns": 3, "max_searches": 2}})
    difficulty_selection(cfg, tmp_path / "sel.jsonl", rule="rag_r1", easy_fraction=0.5)
    s = selection
    assert (s["rule"], s["n"], s["args"], s["metric"], s["temperature"]) == ("answerable", 10, (0.5,), "em", 1.2)
    assert (s["limits"].max_turns, s["limits"].max_searches) == (10, 10)
    difficulty_selection(cfg, tmp_path / "sel.jsonl", rule="rag_r1", max_turns=4, max_searches=5, n=6, metric="f1")
    assert (s["limits"].max_turns, s["limits"].max_searches, s["n"], s["metric"]) == (4, 5, 6, "f1")
    difficulty_selection(cfg, tmp_path / "sel.jsonl", max_turns=6, temperature=0.7)  # r1_searcher under given limits
    assert (s["limits"].max_turns, s["limits"].max_searches, s["temperature"]) == (6, 2, 0.7)


def test_rejection_sampling_judges_by_the_metric_and_score_given_and_writes_what_it_kept(
    tmp_path: Path, monkeypatch
) -> None:
    from types import SimpleNamespace

    import searchrl.sft.pipelines as pipelines
    from searchrl.stages import rejection_sampling, sampling

    seen: dict = {}
    kept = [SimpleNamespace(question_id="q0", metadata={}, to_dict=lambda: {"uid": "q0#0"})]

    def sample(engine, examples, k, **kwargs):
        seen.update(k=k, **kwargs)
        return kept, {"kept": 1, "sampled": 4, "questions": 3, "questions_with_kept": 1}

    monkeypatch.setattr(sampling, "load_questions", lambda cfg, data, limit: _questions(3))
    monkeypatch.setattr(sampling, "rollout_engine", lambda cfg, teacher: "engine")
    monkeypatch.setattr(pipelines, "rejection_sample", sample)
    out = tmp_path / "rs.jsonl"
    (tmp_path / "rs.jsonl.abc.partial").write_text("{}\n")  # a stopped run's attempts: gone once out is written
    cfg = validate_dict({"name": "t"})
    result = rejection_sampling(cfg, out, k=2, metric="f1", min_score=0.6, max_per_question=1, seed=5, top_p=0.9)
    c = seen["correctness"]
    assert (seen["k"], c.metric, c.threshold, seen["max_per_question"], seen["seed"], seen["top_p"]) == (
        2,
        "f1",
        0.6,
        1,
        5,
        0.9,
    )
    assert out.read_text() == '{"uid": "q0#0"}\n' and result.rows == [{"uid": "q0#0"}]
    assert not (tmp_path / "rs.jsonl.abc.partial").exists()
    rejection_sampling(cfg, out, min_score=0.5)  # the recipe's answer rule, at the score given
    assert (seen["correctness"].metric, seen["correctness"].threshold) == ("em", 0.5)


def test_a_protocol_takes_its_options_from_the_rollout_unless_rollout_options_set_them() -> None:
    from searchrl.pipeline import make_protocol

    cfg = validate_dict({"name": "t", "rollout": {"protocol": "search_o1", "max_searches": 4}})
    assert make_protocol(cfg).max_searches == 4
    over = validate_dict(
        {"name": "t", "rollout": {"protocol": "search_o1", "max_searches": 4, "options": {"max_searches": 2}}}
    )
    assert make_protocol(over).max_searches == 2


def test_the_cached_worlds_directory_names_every_world_setting(tmp_path: Path, monkeypatch) -> None:
    from searchrl import pipeline

    monkeypatch.setattr(pipeline, "cache_dir", lambda: tmp_path)
    world = {"entities": 150, "seed": 3, "surface": "varied", "relations": "open", "yes_no": 0.5}
    world |= {"bridge_comparisons": 0.25, "deaths": True}
    name = "e150-s3-varied-open-relations-yn0.5-bc0.25-deaths"
    (tmp_path / "worlds" / name).mkdir(parents=True)
    (tmp_path / "worlds" / name / "world.json").write_text("{}")  # there already: not generated again
    assert pipeline.data_dir(validate_dict({"name": "t", "data": {"world": world}})) == tmp_path / "worlds" / name


def test_pointing_a_service_config_at_an_index_takes_the_indexs_kind_else_bm25(tmp_path: Path) -> None:
    from searchrl.pipeline import with_retriever

    cfg = validate_dict({"name": "t", "retrieval": {"kind": "remote", "urls": ["http://r:8000"]}})
    empty = with_retriever(cfg, index=tmp_path / "new").retrieval
    assert (empty.kind, empty.index) == ("bm25", str(tmp_path / "new"))  # a service has no index kind: bm25
    (tmp_path / "idx").mkdir()
    (tmp_path / "idx" / "manifest.json").write_text('{"kind": "dense"}')
    assert with_retriever(cfg, index=tmp_path / "idx").retrieval.kind == "dense"  # the index's own kind


def test_an_index_stage_builds_the_configs_kind_encoder_and_faiss_unless_its_args_say_otherwise(
    tmp_path: Path, monkeypatch
) -> None:
    import json

    import searchrl.retrieval.index as index
    from searchrl.stages import build_index_for

    seen: dict = {}

    def build(corpus, kind, out, **options):
        seen.update(corpus=corpus, kind=kind, out=out, **options)
        Path(out).mkdir(parents=True, exist_ok=True)
        (Path(out) / "manifest.json").write_text(json.dumps({"counts": {"passages": 7}}))
        return Path(out)

    monkeypatch.setattr(index, "build_index", build)
    retrieval = {"kind": "dense", "encoder": "e5-small-v2", "faiss": "hnsw"}
    cfg = validate_dict({"name": "t", "retrieval": retrieval})
    got = build_index_for(cfg, tmp_path / "idx", "/c/corpus.jsonl")
    assert got == {"kind": "dense", "corpus": "/c/corpus.jsonl", "passages": 7}
    assert (seen["kind"], seen["encoder"], seen["faiss"], seen["overwrite"]) == ("dense", "e5-small-v2", "hnsw", True)
    seen.clear()
    build_index_for(cfg, tmp_path / "idx", "/c/corpus.jsonl", kind="bm25", k1=1.2)
    assert (seen["kind"], seen["k1"], "faiss" in seen) == ("bm25", 1.2, False)  # bm25 has no faiss index
    seen.clear()
    build_index_for(cfg, tmp_path / "idx", "/c/corpus.jsonl", kind="hybrid")
    assert (seen["kind"], seen["faiss"]) == ("hybrid", "hnsw")  # its dense half has one
    build_index_for(cfg, tmp_path / "idx", "/c/corpus.jsonl", faiss="flat")
    assert seen["faiss"] == "flat"


@pytest.mark.parametrize(
    "option",
    [{"surface": "varied"}, {"relations": "open"}, {"yes_no": 0.5}, {"bridge_comparisons": 0.5}, {"deaths": True}],
)
def test_a_synth_stage_makes_the_world_of_its_options(tmp_path: Path, option: dict) -> None:
    from searchrl.data.synth import generate_world, write_world
    from searchrl.stages import synth_world

    synth_world(tmp_path / "a", entities=150, seed=1, **option)
    write_world(generate_world(150, 1, **option), tmp_path / "b")
    write_world(generate_world(150, 1), tmp_path / "c")
    train = {d: (tmp_path / d / "train.jsonl").read_text() for d in "abc"}
    assert train["a"] == train["b"] != train["c"]


def test_the_rl_trainer_starts_from_init_from_on_the_train_split_with_the_dev_split_held_out(monkeypatch) -> None:
    import searchrl.models
    import searchrl.rl.trainer as trainer_module
    from searchrl.stages import train

    seen: dict = {"splits": []}

    def split(cfg, name, limit=None, kinds=None):
        seen["splits"].append((name, limit))
        return [name]

    class Trainer:
        def __init__(self, cfg, model, tok, protocol, retriever, examples, **kwargs):
            seen.update(model=model, retriever=retriever, examples=examples, **kwargs)

    monkeypatch.setattr(searchrl.models, "load_policy", lambda spec, dtype=None: (f"model of {spec}", "tok"))
    monkeypatch.setattr(train, "load_split", split)
    monkeypatch.setattr(train, "make_retriever_for", lambda cfg, simulate=False: f"retriever, simulate={simulate}")
    monkeypatch.setattr(trainer_module, "Trainer", Trainer)
    data = {"train_limit": 5}
    cfg = validate_dict(
        {"name": "t", "data": data, "training": {"init_from": "/m/sft", "eval_every": 2, "eval_limit": 3}}
    )
    train.build_trainer(cfg)
    assert seen["splits"] == [("train", 5), ("dev", 3)]
    assert (seen["model"], seen["retriever"], seen["examples"], seen["eval_examples"]) == (
        "model of /m/sft",
        "retriever, simulate=True",
        ["train"],
        ["dev"],
    )
    assert (seen["reward_fn"], seen["aux_nll_hook"], seen["generator"]) == (None, None, None)
    seen["splits"].clear()
    train.build_trainer(validate_dict({"name": "t", "training": {"eval_every": 0}}))
    assert seen["splits"] == [("train", None)] and seen["eval_examples"] is None
    assert seen["model"] == "model of smollm2-135m-instruct"  # no init_from: model.policy


def test_a_text_data_stage_writes_sft_limit_rows_as_trajectories_or_as_step_samples(
    tmp_path: Path, monkeypatch
) -> None:
    import json

    from searchrl.generation.fake import ByteTokenizer
    from searchrl.stages import data, write_text_data

    monkeypatch.setattr(data, "load_tokenizer", lambda model: ByteTokenizer())
    response = (
        "<think>I need the capital.</think>\n<search>capital of France</search>\n\n"
        "<information>Doc 1(Title: Paris) Paris is the capital.</information>\n\n"
        "<think>Paris.</think>\n<answer>Paris</answer>"
    )
    rows = [{"question": f"Question {i}?", "response": response} for i in range(3)]
    source = tmp_path / "text.jsonl"
    source.write_text("".join(json.dumps(r) + "\n" for r in rows))
    cfg = validate_dict({"name": "t", "model": {"prompt_style": "raw"}, "sft": {"limit": 2}})
    assert write_text_data(cfg, source, tmp_path / "whole.jsonl") == 2
    whole = [json.loads(line) for line in (tmp_path / "whole.jsonl").read_text().splitlines()]
    assert len(whole) == 2 and all("action_mask" in r for r in whole)
    assert write_text_data(cfg, source, tmp_path / "steps.jsonl", slice_steps=True) == 4  # a search and an answer each


def test_an_unsolved_bucket_counted_as_hard_takes_no_quota_of_its_own(tmp_path: Path, selection: dict) -> None:
    from searchrl.stages import difficulty_selection

    cfg = validate_dict({"name": "t"})
    keep = ["medium", "unsolved"]
    with pytest.raises(ValueError, match=r"no kept question is in bucket 'unsolved'; use one of medium$"):
        difficulty_selection(cfg, tmp_path / "s.jsonl", keep=keep, unsolved_as="hard", quota=["*/unsolved=1"])
    assert "rule" not in selection  # refused before sampling
    difficulty_selection(cfg, tmp_path / "s.jsonl", keep=keep, quota=["*/unsolved=1"])
    assert selection["keep"] == keep


def test_data_kinds_keep_kinds_in_the_train_split_only(tmp_path: Path) -> None:
    import json

    from searchrl.pipeline import load_split

    rows = [
        {"id": f"q{i}", "question": f"Q{i}?", "golden_answers": ["A"], "metadata": {"kind": k}}
        for i, k in enumerate(["comparison", "bridge", "comparison"])
    ]
    for split in ("train", "dev"):
        (tmp_path / f"{split}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    cfg = validate_dict({"name": "t", "data": {"source": str(tmp_path), "kinds": ["comparison"]}})
    assert [e.id for e in load_split(cfg, "train")] == ["q0", "q2"]
    assert [e.id for e in load_split(cfg, "dev")] == ["q0", "q1", "q2"]


def test_an_index_of_a_corpus_in_the_cache_lives_beside_it_and_one_elsewhere_in_the_cache(
    tmp_path: Path, monkeypatch
) -> None:
    from searchrl import pipeline

    monkeypatch.setattr(pipeline, "cache_dir", lambda: tmp_path / "cache")
    world = tmp_path / "cache" / "worlds" / "w"
    world.mkdir(parents=True)
    (world / "corpus.jsonl").write_text("{}\n")
    assert pipeline.default_index_dir(world / "corpus.jsonl", "bm25") == world / "index-bm25"
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "corpus.jsonl").write_text("{}\n")
    user = pipeline.default_index_dir(tmp_path / "mine" / "corpus.jsonl", "dense")
    assert (user.parent.parent, user.parent.name.startswith("mine-"), user.name) == (
        tmp_path / "cache" / "indexes",
        True,
        "index-dense",
    )


def test_a_relative_data_file_in_both_the_data_directory_and_the_working_directory_is_the_data_directorys(
    tmp_path: Path, monkeypatch
) -> None:
    from searchrl.pipeline import data_file

    (tmp_path / "data").mkdir()
    for where in (tmp_path, tmp_path / "data"):
        (where / "q.jsonl").write_text("{}\n")
    (tmp_path / "only_here.jsonl").write_text("{}\n")
    monkeypatch.chdir(tmp_path)
    assert data_file("data", "q.jsonl") == "data/q.jsonl"
    assert data_file("data", "only_here.jsonl") == str(tmp_path / "only_here.jsonl")
