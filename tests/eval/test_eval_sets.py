"""Evaluation over several datasets, each with its own index, a seeded random subset, the per-dataset table with
an Average column (plain text off a terminal), and one-line errors for missing files."""

from __future__ import annotations

import json

import pytest

from searchrl.config import load_config
from searchrl.eval import harness
from searchrl.eval.datasets import limit_note, resolve_eval_sets, seeded_subset, where_to_get
from searchrl.eval.report import plain_table


def write_jsonl(path, rows) -> str:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


@pytest.fixture
def two_worlds(tmp_path):
    """The same questions in two worlds whose corpora disagree: only a set's own index gives its gold answers."""
    qs = [("Which city is the capital of Avalon?", "Avalon"), ("Who founded the Order of Brill?", "Brill")]
    facts = {"a": {"Avalon": "Zorgrad", "Brill": "Mira Tan"}, "b": {"Avalon": "Kelmar", "Brill": "Osk Vey"}}
    filler = [{"id": f"f{i}", "contents": f"Filler {i}\nThe river number {i} flows past hills."} for i in range(6)]
    entries = []
    for world, answers in facts.items():
        corpus = write_jsonl(
            tmp_path / f"corpus_{world}.jsonl",
            [
                {"id": f"{world}-avalon", "contents": f"Avalon\nThe capital of Avalon is {answers['Avalon']}."},
                {"id": f"{world}-brill", "contents": f"Brill\nThe Order of Brill was founded by {answers['Brill']}."},
                *filler,
            ],
        )
        data = write_jsonl(
            tmp_path / f"qa_{world}.jsonl",
            [{"id": f"{world}{i}", "question": q, "golden_answers": [answers[key]]} for i, (q, key) in enumerate(qs)],
        )
        entries.append(
            {
                "name": f"World{world.upper()}",
                "data": data,
                "index": str(tmp_path / f"index_{world}"),
                "corpus": corpus,
            }
        )
    return entries


def reader(answers=("Zorgrad", "Kelmar", "Mira Tan", "Osk Vey")):
    """Answers with whichever known answer the documents in its prompt mention."""

    def reply(ctx: str) -> str:
        return next((a for a in answers if a in ctx), "unknown")

    return reply


def test_two_datasets_with_their_own_indexes(tmp_path, two_worlds, fakes, monkeypatch, capsys) -> None:
    overrides = [
        f"evaluation.datasets={json.dumps(two_worlds)}",
        "evaluation.methods=[direct, naive_rag]",
        "evaluation.metrics=[em]",
        f"evaluation.output_dir={tmp_path / 'out'}",
        "retrieval.kind=bm25",
        "retrieval.topk=1",
        "evaluation.limit=null",
    ]
    cfg = load_config(None, overrides)
    monkeypatch.setattr(harness, "eval_generator", lambda cfg: fakes.scripted(reader()))
    result = harness.run_from_config(cfg)
    rows = {(r["dataset"], r["method"]): r for r in result.rows}
    assert rows[("WorldA", "naive_rag")]["em"] == 1.0 and rows[("WorldB", "naive_rag")]["em"] == 1.0
    assert rows[("average", "naive_rag")]["em"] == 1.0 and rows[("average", "direct")]["em"] == 0.0
    preds = (tmp_path / "out" / "predictions" / "WorldB__naive_rag.jsonl").read_text().splitlines()
    assert [json.loads(p)["trajectory"]["hit_ids"] for p in preds] == [[["b-avalon"]], [["b-brill"]]]
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert set(summary["indexes"]) == {"WorldA", "WorldB"} and summary["datasets"] == {"WorldA": 2, "WorldB": 2}
    md = (tmp_path / "out" / "summary.md").read_text()
    assert "| method | WorldA EM | WorldB EM | Average EM |" in md
    err = capsys.readouterr().out  # the result on stdout; not a terminal: the plain table, nothing wrapped
    header = next(line for line in err.splitlines() if line.startswith("method"))
    assert header.split()[:7] == ["method", "WorldA", "EM", "WorldB", "EM", "Average", "EM"]
    rag_line = next(line for line in err.splitlines() if line.startswith("naive_rag"))
    assert rag_line.split()[1:4] == ["100.0", "100.0", "100.0"]


def test_a_set_searches_the_paragraphs_its_questions_ship_with(tmp_path, fakes, monkeypatch) -> None:
    """``corpus: contexts`` (``searchrl eval --corpus contexts``): each set's own corpus of the paragraphs its
    questions carry, all of the file's questions (not only the sampled ones), written once into the cache."""
    from searchrl.commands.eval import build_config

    monkeypatch.setenv("SEARCHRL_CACHE", str(tmp_path / "cache"))
    rows = [
        {
            "_id": f"h{i}",
            "question": f"Who founded the Order of {name}?",
            "answer": founder,
            "type": "bridge",
            "context": [[f"Order of {name}", [f"The Order of {name} was founded by {founder}."]], ["Filler", ["x."]]],
        }
        for i, (name, founder) in enumerate([("Brill", "Mira Tan"), ("Avalon", "Osk Vey"), ("Kelm", "Ada Roe")])
    ]
    data = tmp_path / "hotpot.json"
    data.write_text(json.dumps(rows), encoding="utf-8")
    cfg = build_config(
        None,
        ["evaluation.methods=[naive_rag]", "evaluation.metrics=[em]", "retrieval.kind=bm25", "retrieval.topk=1"],
        data=[{"data": str(data), "corpus": "contexts", "sample": 2}],
        out=str(tmp_path / "out"),
    )
    (s,) = resolve_eval_sets(cfg)
    assert len(s.examples) == 2 and s.corpus.startswith(str(tmp_path / "cache" / "contexts"))
    corpus = [json.loads(line)["contents"] for line in open(s.corpus, encoding="utf-8")]
    assert len(corpus) == 4  # three foundings and the filler, once: every question's paragraphs, not the sample's
    monkeypatch.setattr(
        harness, "eval_generator", lambda cfg: fakes.scripted(reader(("Mira Tan", "Osk Vey", "Ada Roe")))
    )
    result = harness.run_from_config(cfg)
    assert next(r for r in result.rows if r["method"] == "naive_rag" and r["dataset"] == "hotpot")["em"] == 1.0


def test_eval_corpus_contexts_gives_each_data_set_its_own(tmp_path, monkeypatch) -> None:
    from typer.testing import CliRunner

    import searchrl.stages
    from searchrl.commands.eval import app

    seen = {}
    monkeypatch.setattr(searchrl.stages, "evaluation", lambda cfg, corpus=None: seen.update(cfg=cfg, corpus=corpus))
    args = ["--data", "a.json", "--data", "b.jsonl", "--corpus", "contexts", "--methods", "naive_rag"]
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.output
    sets = seen["cfg"].evaluation.datasets
    assert [(e.data, e.corpus) for e in sets] == [("a.json", "contexts"), ("b.jsonl", "contexts")]
    assert seen["corpus"] is None  # no run-wide corpus


def test_seeded_subset_and_limit(tmp_path) -> None:
    data = write_jsonl(
        tmp_path / "qa.jsonl",
        [{"id": f"q{i}", "question": f"Question {i}?", "golden_answers": [str(i)]} for i in range(20)],
    )
    entry = {"name": "Q", "data": data, "sample": 5}
    sets = f"evaluation.datasets=[{json.dumps(entry)}]"
    one = resolve_eval_sets(load_config(None, [sets, "evaluation.limit=null"]))
    ids = [e.id for e in one[0].examples]
    assert len(ids) == 5 and ids == sorted(ids, key=lambda s: int(s[1:]))  # file order kept
    assert ids != [f"q{i}" for i in range(5)]  # not the first five
    same = resolve_eval_sets(load_config(None, [sets, "evaluation.limit=null"]))
    other = resolve_eval_sets(load_config(None, [sets, "evaluation.limit=null", "evaluation.seed=1"]))
    assert [e.id for e in same[0].examples] == ids and [e.id for e in other[0].examples] != ids
    limited = resolve_eval_sets(load_config(None, [sets, "evaluation.limit=2"]))
    assert [e.id for e in limited[0].examples] == ids[:2]
    # the limit cut the set: the summary says so; a limit that cuts nothing says nothing
    assert limit_note(limited) == ["Only the first questions of a set (evaluation.limit): Q 2 of 5."]
    assert limit_note(resolve_eval_sets(load_config(None, [sets, "evaluation.limit=5"]))) == [] == limit_note(one)
    everything = {**entry, "sample": 125}  # more than the file holds: all of it (Bamboogle's 125)
    (s,) = resolve_eval_sets(
        load_config(None, [f"evaluation.datasets=[{json.dumps(everything)}]", "evaluation.limit=null"])
    )
    assert len(s.examples) == 20 and seeded_subset(s.examples, None, 0) == s.examples


def test_flashrag_folders_name_their_sets_and_a_merged_file_splits_by_data_source(tmp_path) -> None:
    """FlashRAG's ``nq/test.jsonl`` and ``popqa/test.jsonl`` are ``nq_test`` and ``popqa_test``, not ``test`` and
    ``test_2``; Search-R1's merged ``test.parquet`` is scored per ``data_source``, each limited on its own."""
    files = []
    for name in ("nq", "popqa"):
        (tmp_path / name).mkdir()
        rows = [{"id": f"{name}{i}", "question": f"{name} {i}?", "golden_answers": ["a"]} for i in range(3)]
        files.append(write_jsonl(tmp_path / name / "test.jsonl", rows))
    sets = resolve_eval_sets(load_config(None, [f"evaluation.datasets=[{','.join(files)}]"]))
    assert [s.name for s in sets] == ["nq_test", "popqa_test"]
    sources = ["nq", "hotpotqa", "nq", "bamboogle", "nq"]
    merged = write_jsonl(
        tmp_path / "test.jsonl",
        [{"question": f"q{i}?", "golden_answers": ["a"], "data_source": d} for i, d in enumerate(sources)],
    )
    sets = resolve_eval_sets(load_config(None, [f"evaluation.datasets=[{merged}]", "evaluation.limit=2"]))
    assert [(s.name, len(s.examples), s.of) for s in sets] == [("nq", 2, 3), ("hotpotqa", 1, 0), ("bamboogle", 1, 0)]
    named = {"data": merged, "name": "sr1"}
    sets = resolve_eval_sets(load_config(None, [f"evaluation.datasets=[{json.dumps(named)}]"]))
    assert [s.name for s in sets] == ["sr1_nq", "sr1_hotpotqa", "sr1_bamboogle"]
    whole = {"data": merged, "group_by": None}
    (s,) = resolve_eval_sets(load_config(None, [f"evaluation.datasets=[{json.dumps(whole)}]"]))
    assert (s.name, len(s.examples)) == ("test", 5)


def test_missing_dataset_names_where_to_get_it(tmp_path) -> None:
    cfg = load_config(None, [f"evaluation.datasets=[{tmp_path / 'bamboogle' / 'test.jsonl'}]"])
    with pytest.raises(FileNotFoundError) as err:
        resolve_eval_sets(cfg)
    msg = str(err.value)
    assert "\n" not in msg and "RUC-NLPIR/FlashRAG_datasets" in msg and "bamboogle/test.jsonl" in msg
    assert "musique/dev.jsonl" in where_to_get("musique_dev.jsonl")
    assert "huggingface.co/datasets/RUC-NLPIR/FlashRAG_datasets" in where_to_get("my_questions.jsonl")


def test_own_index_without_corpus_or_index_is_a_one_line_error(tmp_path, fakes, monkeypatch) -> None:
    data = write_jsonl(tmp_path / "qa.jsonl", [{"id": "q", "question": "Q?", "golden_answers": ["a"]}])
    entry = {"data": data, "index": str(tmp_path / "empty_index")}
    cfg = load_config(
        None, [f"evaluation.datasets=[{json.dumps(entry)}]", "evaluation.methods=[naive_rag]", "retrieval.kind=bm25"]
    )
    monkeypatch.setattr(harness, "eval_generator", lambda cfg: fakes.scripted(lambda ctx: "a"))
    with pytest.raises(FileNotFoundError, match="searchrl index build") as err:
        harness.run_from_config(cfg)
    assert "\n" not in str(err.value)


def test_plain_table_pads_columns() -> None:
    text = plain_table(["method", "NQ EM", "Average EM"], [["agent", "41.0", "40.5"], ["naive_rag", "3.5", "12.0"]])
    lines = text.splitlines()
    assert len({len(line) for line in lines}) == 1 and lines[1].startswith("---------")
    assert lines[3].split() == ["naive_rag", "3.5", "12.0"]


def test_unreachable_hf_source_is_a_one_line_error(monkeypatch) -> None:
    from searchrl.data import loaders

    def offline(source, **_):
        raise ConnectionError("Couldn't reach the Hub.\nCheck your connection.")

    monkeypatch.setattr(loaders, "load_qa", offline)
    cfg = load_config(None, ['evaluation.datasets=["hf:RUC-NLPIR/FlashRAG_datasets:musique:dev"]'])
    with pytest.raises(ValueError) as err:
        resolve_eval_sets(cfg)
    msg = str(err.value)
    assert "\n" not in msg and "ConnectionError" in msg and "--include 'musique/*'" in msg
    assert "musique/dev.jsonl" in msg
