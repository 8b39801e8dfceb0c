"""QA loading: FlashRAG and R1-Searcher layouts, HF datasets (local), errors that name file:line and the field."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from searchrl.data.loaders import load_qa, parse_hf_source, question_text
from searchrl.data.records import QAExample


def _write(path: Path, rows: list[dict | str]) -> Path:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows), encoding="utf-8")
    return path


def test_flashrag_rows_keep_ids_answers_and_extra_fields(tmp_path: Path) -> None:
    f = _write(
        tmp_path / "dev.jsonl",
        [
            {"id": "q1", "question": "who wrote it", "golden_answers": ["A", "B"], "metadata": {"type": "bridge"}},
            {"id": "q2", "question": "where?", "golden_answers": ["C"], "level": "hard"},
        ],
    )
    got = load_qa(f)
    assert got[0] == QAExample("q1", "who wrote it", ["A", "B"], {"type": "bridge"})
    assert got[1].metadata == {"level": "hard"}  # extra top-level fields go to metadata
    assert got[1].to_flashrag() == {
        "id": "q2",
        "question": "where?",
        "golden_answers": ["C"],
        "metadata": {"level": "hard"},
    }


def test_r1_searcher_rows_string_or_list_answer_and_line_ids(tmp_path: Path) -> None:
    f = _write(
        tmp_path / "stage_2.jsonl",
        [{"question": "q one", "answer": "x"}, "", {"question": "q two", "answer": ["y", 1990]}],
    )
    got = load_qa(f)
    assert [g.answers for g in got] == [["x"], ["y", "1990"]]
    assert [g.id for g in got] == ["stage_2-1", "stage_2-3"]  # file stem + line number (blank line 2 skipped)


def test_the_datasets_own_releases_load(tmp_path: Path) -> None:
    """HotpotQA/2Wiki ``_id``, MuSiQue aliases, TriviaQA's answer dict, SQuAD's answers dict, PopQA's string list."""
    rows = [
        {"_id": "5a8b", "question": "Which magazine came first?", "answer": "Arthur's Magazine", "type": "comparison"},
        {"id": "2hop__1", "question": "Who?", "answer": "Bob Dylan", "answer_aliases": ["Dylan", "Bob Dylan"]},
        {"question_id": "tc_1", "question": "Where?", "answer": {"value": "Paris", "aliases": ["Paris, France"]}},
        {"id": "s1", "question": "When?", "answers": {"text": ["1990", "in 1990"], "answer_start": [3, 0]}},
        {"id": 4222362, "question": "What?", "possible_answers": '["cellist", "cello player"]'},
    ]
    got = load_qa(_write(tmp_path / "mixed.jsonl", rows))
    assert [g.id for g in got] == ["5a8b", "2hop__1", "tc_1", "s1", "4222362"]
    assert [g.answers for g in got] == [
        ["Arthur's Magazine"],
        ["Bob Dylan", "Dylan"],
        ["Paris", "Paris, France"],
        ["1990", "in 1990"],
        ["cellist", "cello player"],
    ]
    assert got[0].metadata == {"type": "comparison"}  # the id and answer fields are not repeated in metadata
    assert [g.kind for g in got] == ["comparison", "2hop", None, None, None]  # HotpotQA's type, MuSiQue's hops
    assert got[1].metadata == {} and got[3].metadata == {}
    bad = _write(tmp_path / "bad.jsonl", [{"id": "p", "question": "q", "possible_answers": "['single quotes']"}])
    assert load_qa(bad)[0].answers == ["['single quotes']"]  # not JSON: the string is the answer


def test_search_r1_training_rows_read_their_prompt_and_targets(tmp_path: Path) -> None:
    """verl rows without the original question column: the question after the template's "Question:", the gold
    answers from ``reward_model.ground_truth.target``; with the column, the column wins."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    template = "Answer the given question. Use <search> query </search> when needed. Question: who wrote Hamlet?\n"
    rows = [
        {
            "data_source": "nq",
            "prompt": [{"role": "user", "content": template}],
            "ability": "fact-reasoning",
            "reward_model": {"style": "rule", "ground_truth": {"target": ["Shakespeare", "William Shakespeare"]}},
            "extra_info": {"split": "train", "index": 0},
        },
        {
            "id": "train_1",
            "question": "where is Elsinore?",
            "golden_answers": ["Denmark"],
            "prompt": [{"role": "user", "content": "Question: where is Elsinore?\n"}],
            "reward_model": {"style": "rule", "ground_truth": {"target": ["Denmark"]}},
        },
    ]
    pq.write_table(pa.Table.from_pylist(rows[:1]), tmp_path / "train.parquet")
    (first,) = load_qa(tmp_path / "train.parquet")
    assert (first.question, first.answers) == ("who wrote Hamlet?", ["Shakespeare", "William Shakespeare"])
    assert first.metadata["data_source"] == "nq" and "prompt" not in first.metadata
    assert first.id == "nq-0"  # extra_info.index, unique across the sources of a merged test.parquet
    second = load_qa(_write(tmp_path / "with_question.jsonl", rows[1:]))[0]
    assert (second.id, second.question, second.answers) == ("train_1", "where is Elsinore?", ["Denmark"])
    bad = dict(rows[0], prompt=[{"role": "user", "content": "no marker here"}])
    with pytest.raises(ValueError, match=r"bad\.jsonl:1: field 'question' .*'Question: \.\.\.' in its user message"):
        load_qa(_write(tmp_path / "bad.jsonl", [bad]))


def test_csv_and_capitalised_fields_as_bamboogle_and_triviaqa_release_them(tmp_path: Path) -> None:
    """Bamboogle's CSV (``Question,Answer``), a TSV, and TriviaQA's ``{"Data": [{"Question", "Answer": {"Value",
    "Aliases"}, "QuestionId"}]}``."""
    (tmp_path / "bamboogle.csv").write_text(
        'Question,Answer\n"Who was president when the Eiffel Tower opened?",Benjamin Harrison\n', encoding="utf-8"
    )
    (got,) = load_qa(tmp_path / "bamboogle.csv")
    assert (got.id, got.question, got.answers) == (
        "bamboogle-2",
        "Who was president when the Eiffel Tower opened?",
        ["Benjamin Harrison"],
    )  # the line of the row in the file
    (tmp_path / "excel.csv").write_text("\ufeffQuestion,Answer\nq,a\n", encoding="utf-8")  # a byte-order mark
    assert load_qa(tmp_path / "excel.csv")[0].answers == ["a"]
    (tmp_path / "t.tsv").write_text("id\tquestion\tanswer\nq1\twhere?\tOslo\n", encoding="utf-8")
    assert [(e.id, e.answers) for e in load_qa(tmp_path / "t.tsv")] == [("q1", ["Oslo"])]
    trivia = {
        "Data": [
            {
                "QuestionId": "tc_3",
                "Question": "Which city?",
                "Answer": {"Value": "Paris", "Aliases": ["Paris", "City of Light"]},  # the value is an alias too
            }
        ]
    }
    (tmp_path / "wikipedia-dev.json").write_text(json.dumps(trivia), encoding="utf-8")
    (ex,) = load_qa(tmp_path / "wikipedia-dev.json")
    assert (ex.id, ex.question, ex.answers) == ("tc_3", "Which city?", ["Paris", "City of Light"])
    (tmp_path / "bad.csv").write_text("Text,Answer\nq,a\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"bad\.csv:2: missing field 'question'"):
        load_qa(tmp_path / "bad.csv")


def test_list_cells_in_csv_dpr_question_files_and_non_string_answers(tmp_path: Path) -> None:
    """A list column written to CSV (pandas' Python literal, or JSON) is that list, not one literal answer; DPR's
    header-less ``question<TAB>["answer"]`` files load; booleans are yes/no and whole floats integers."""
    pandas_csv = tmp_path / "pandas.csv"
    pandas_csv.write_text(
        'id,question,golden_answers\nq1,How many moons?,"[\'2\', \'two\']"\n\nq2,Which?,"[""Ayn Rand""]"\n',
        encoding="utf-8",
    )
    assert [(e.id, e.answers) for e in load_qa(pandas_csv)] == [("q1", ["2", "two"]), ("q2", ["Ayn Rand"])]
    dpr = tmp_path / "nq-test.qa.csv"  # DPR's own files hold Python lists
    dpr.write_text("who found x rays\t['Wilhelm Röntgen']\nwhen, then?\t[\"May 18, 2018\", '2018']\n")
    got = [(e.id, e.question, e.answers) for e in load_qa(dpr)]
    assert got == [
        ("nq-test.qa-1", "who found x rays", ["Wilhelm Röntgen"]),
        ("nq-test.qa-2", "when, then?", ["May 18, 2018", "2018"]),
    ]
    json_dpr = tmp_path / "trivia-test.qa.csv"
    json_dpr.write_text('which city?\t["Oslo"]\n')
    assert [e.answers for e in load_qa(json_dpr)] == [["Oslo"]]
    text = tmp_path / "bracketed.csv"  # a bracketed answer that is not a list stays as it is; numbers are a list
    text.write_text('question,answer\nq?,[citation needed]\nr?,"[1990, 1991]"\n', encoding="utf-8")
    assert [e.answers for e in load_qa(text)] == [["[citation needed]"], ["1990", "1991"]]
    empty = tmp_path / "empty.csv"
    empty.write_text("question,answer\nq?,[]\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"empty\.csv:2: field 'answer' is empty; give at least one gold answer"):
        load_qa(empty)
    rows = [{"question": "a?", "answer": True}, {"question": "b?", "answer": [False, 6.0, 7.5]}]
    assert [e.answers for e in load_qa(_write(tmp_path / "typed.jsonl", rows))] == [["yes"], ["no", "6", "7.5"]]
    with pytest.raises(ValueError, match=r"nan\.jsonl:1: field 'answer' holds NaN"):
        load_qa(_write(tmp_path / "nan.jsonl", ['{"question": "c?", "answer": NaN}']))


def test_other_names_of_the_question_and_kilt_outputs(tmp_path: Path) -> None:
    """KILT's ``{"id", "input", "output": [{"answer", "provenance"}]}``, SimpleQA's ``problem``, a ``query`` and
    Frames' capitalised ``Prompt, Answer``; a KILT row whose outputs hold no answer is missing its gold answers."""
    kilt = {
        "id": "k1",
        "input": "who sang hey jude",
        "output": [{"answer": "The Beatles", "provenance": [{"wikipedia_id": "1"}]}, {"answer": "Beatles"}, {}],
    }
    rows = [kilt, {"problem": "Which year?", "answer": "1968"}, {"query": "capital of Peru", "answers": ["Lima"]}]
    got = load_qa(_write(tmp_path / "mixed.jsonl", rows))
    assert [(e.id, e.question, e.answers) for e in got] == [
        ("k1", "who sang hey jude", ["The Beatles", "Beatles"]),
        ("mixed-2", "Which year?", ["1968"]),
        ("mixed-3", "capital of Peru", ["Lima"]),
    ]
    assert got[0].metadata == {"provenance": [{"wikipedia_id": "1"}]}
    (tmp_path / "frames.csv").write_text('Prompt,Answer,wiki_links\n"Who?",Ada,"[]"\n', encoding="utf-8")
    (ex,) = load_qa(tmp_path / "frames.csv")
    assert (ex.question, ex.answers, ex.metadata) == ("Who?", ["Ada"], {"wiki_links": "[]"})
    no_answer = {"id": "k2", "input": "q?", "output": [{"provenance": []}]}
    with pytest.raises(ValueError, match=r"nogold\.jsonl:1: no 'golden_answers'.*'output'"):
        load_qa(_write(tmp_path / "nogold.jsonl", [no_answer]))


def test_json_arrays_as_hotpotqa_and_2wiki_release_them(tmp_path: Path) -> None:
    """A ``.json`` file: one array of rows, an object with a ``data`` array, or JSON lines under a .json name."""
    rows = [{"_id": "a1", "question": "q one", "answer": "x"}, {"_id": "a2", "question": "q two", "answer": "y"}]
    (tmp_path / "dev.json").write_text(json.dumps(rows, indent=1), encoding="utf-8")
    assert [(e.id, e.answers) for e in load_qa(tmp_path / "dev.json")] == [("a1", ["x"]), ("a2", ["y"])]
    assert [e.id for e in load_qa(tmp_path, split="dev")] == ["a1", "a2"]  # <dir>/<split>.json
    (tmp_path / "wrapped.json").write_text(json.dumps({"version": 1, "data": rows}), encoding="utf-8")
    assert len(load_qa(tmp_path / "wrapped.json")) == 2
    _write(tmp_path / "lines.json", rows)
    assert [e.id for e in load_qa(tmp_path / "lines.json")] == ["a1", "a2"]
    (tmp_path / "bad.json").write_text(json.dumps([rows[0], {"_id": "a3", "answer": "z"}]), encoding="utf-8")
    with pytest.raises(ValueError, match=r"bad\.json:row 2: missing field 'question'"):
        load_qa(tmp_path / "bad.json")
    (tmp_path / "broken.json").write_text('[{"question": "q", ', encoding="utf-8")
    with pytest.raises(ValueError, match=r"broken\.json: not valid JSON .*fix the file"):
        load_qa(tmp_path / "broken.json")
    (tmp_path / "scalar.json").write_text('"just a string"', encoding="utf-8")
    with pytest.raises(ValueError, match="expected a JSON array of question rows"):
        load_qa(tmp_path / "scalar.json")


def test_limit_and_normalize(tmp_path: Path) -> None:
    f = _write(tmp_path / "t.jsonl", [{"question": f" q{i} ", "answer": "a"} for i in range(5)])
    assert len(load_qa(f, limit=2)) == 2
    assert load_qa(f, limit=0) == []
    assert load_qa(f, limit=1)[0].question == "q0"  # off by default: only stripped
    assert load_qa(f, limit=1, normalize=True)[0].question == "q0?"
    assert question_text("Is it?") == "Is it?"


@pytest.mark.parametrize(
    ("row", "field"),
    [
        ({"id": "a", "golden_answers": ["x"]}, "'question'"),
        ({"id": "a", "question": "q"}, "'golden_answers'"),
        ({"id": "a", "question": "q", "golden_answers": []}, "'golden_answers'"),
        ({"id": "a", "question": "q", "answer": {"span": "x"}}, "'answer'"),
        ({"id": "a", "question": "", "answer": "x"}, "'question'"),
    ],
)
def test_malformed_row_names_file_line_and_field(tmp_path: Path, row: dict, field: str) -> None:
    good = {"id": "ok", "question": "fine", "golden_answers": ["y"]}
    f = _write(tmp_path / "bad.jsonl", [good, good, row])
    with pytest.raises(ValueError) as err:
        load_qa(f)
    msg = str(err.value)
    assert f"{f}:3:" in msg and field in msg, msg


@pytest.mark.parametrize(
    ("row", "field"),
    [
        ({"id": "a", "question": "who directed \ud800 it?", "golden_answers": ["x"]}, "'question'"),
        ({"id": "a", "question": "q", "golden_answers": ["fine", "half \udc00"]}, "'golden_answers'"),
    ],
)
def test_a_lone_surrogate_in_a_question_or_answer_names_file_line_and_field(tmp_path, row, field) -> None:
    """JSON's ``\\ud800`` escape without its other half is not Unicode that a tokenizer encodes: refused at loading
    with file:line, as a corpus refuses it, rather than a TypeError from the tokenizer once the model is loaded."""
    f = _write(tmp_path / "bad.jsonl", [{"question": "fine", "answer": "y"}, row])
    with pytest.raises(ValueError, match=rf"bad\.jsonl:2: lone surrogate .* in field {field}; remove that escape"):
        load_qa(f)


def test_missing_field_message_lists_expected_layouts(tmp_path: Path) -> None:
    f = _write(tmp_path / "bad.jsonl", [{"text": "q", "golden_answers": ["y"]}])
    with pytest.raises(ValueError, match=r"bad\.jsonl:1: missing field 'question'.*golden_answers.*found fields"):
        load_qa(f)


def test_invalid_json_line_and_missing_file(tmp_path: Path) -> None:
    f = _write(tmp_path / "bad.jsonl", [{"question": "q", "answer": "a"}, "{not json"])
    with pytest.raises(ValueError, match=r"bad\.jsonl:2: not valid JSON"):
        load_qa(f)
    with pytest.raises(FileNotFoundError, match="hf:NAME"):
        load_qa(tmp_path / "nope.jsonl")
    with pytest.raises(ValueError, match="split="):
        load_qa(f, split="dev")


def test_directory_with_split_files_and_parquet(tmp_path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    _write(tmp_path / "dev.jsonl", [{"id": "d1", "question": "q", "golden_answers": ["a"]}])
    pq.write_table(
        pa.Table.from_pylist([{"id": "t1", "question": "q", "golden_answers": ["b"]}]), tmp_path / "test.parquet"
    )
    assert [e.id for e in load_qa(tmp_path, split="dev")] == ["d1"]
    assert load_qa(tmp_path, split="test")[0].answers == ["b"]
    with pytest.raises(ValueError, match="split="):
        load_qa(tmp_path)
    with pytest.raises(FileNotFoundError, match="train.jsonl"):
        load_qa(tmp_path, split="train")


def test_parse_hf_source() -> None:
    assert parse_hf_source("hf:RUC-NLPIR/FlashRAG_datasets:hotpotqa:dev") == (
        "RUC-NLPIR/FlashRAG_datasets",
        "hotpotqa",
        "dev",
    )
    assert parse_hf_source("hf:org/name:test") == ("org/name", None, "test")
    assert parse_hf_source("hf:org/name", split="dev") == ("org/name", None, "dev")
    for bad in ("hf:org/name", "hf:a:b:c:d", "hf::dev"):
        with pytest.raises(ValueError, match="hf:NAME"):
            parse_hf_source(bad)
    with pytest.raises(ValueError, match="keep one"):
        parse_hf_source("hf:org/name:dev", split="test")


@pytest.fixture()
def hf_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Keep datasets' cache inside the test's tmp dir."""
    import datasets

    cache = tmp_path / "hf-cache"
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", cache)
    return cache


def test_hf_saved_dataset_dict_by_split(tmp_path: Path, hf_cache: Path) -> None:
    import datasets

    rows = [{"id": f"h{i}", "question": f"q{i}", "golden_answers": [f"a{i}"], "type": "comparison"} for i in range(4)]
    dd = datasets.DatasetDict({"dev": datasets.Dataset.from_list(rows), "test": datasets.Dataset.from_list(rows[:1])})
    dd.save_to_disk(str(tmp_path / "saved"))
    got = load_qa(f"hf:{tmp_path / 'saved'}:dev", limit=3)
    assert [g.id for g in got] == ["h0", "h1", "h2"]
    assert got[0].answers == ["a0"] and got[0].metadata == {"type": "comparison"}
    assert len(load_qa(tmp_path / "saved", split="test")) == 1  # a saved dataset directory works without hf:
    with pytest.raises(ValueError, match=r"not 'train'; name one as hf:.*saved:SPLIT, e\.g\. hf:.*saved:dev$"):
        load_qa(f"hf:{tmp_path / 'saved'}:train")


def test_hf_load_dataset_with_config_like_flashrag(tmp_path: Path, hf_cache: Path) -> None:
    """A local copy of the FlashRAG_datasets layout (one config per dataset, declared in the README) goes through
    the same ``datasets.load_dataset(name, config, split=...)`` call as the hub id."""
    repo = tmp_path / "FlashRAG_datasets"
    (repo / "hotpotqa").mkdir(parents=True)
    _write(
        repo / "hotpotqa" / "dev.jsonl",
        [{"id": "hp1", "question": "q?", "golden_answers": ["yes"], "metadata": {"type": "comparison"}}],
    )  # noqa: E501
    (repo / "README.md").write_text(
        "---\nconfigs:\n- config_name: hotpotqa\n  data_files:\n  - split: dev\n    path: hotpotqa/dev.jsonl\n---\n"
    )
    got = load_qa(f"hf:{repo}:hotpotqa:dev")
    assert got == [QAExample("hp1", "q?", ["yes"], {"type": "comparison"})]


def test_hf_local_copy_without_declared_configs_reads_the_config_folder(tmp_path: Path, hf_cache: Path) -> None:
    """A downloaded FlashRAG_datasets copy whose README declares no configs: ``hf:DIR:nq:test`` reads
    ``DIR/nq/test.jsonl`` instead of failing on datasets' "BuilderConfig 'nq' not found"; a missing split names the
    folder and the split."""
    repo = tmp_path / "FlashRAG_datasets"
    (repo / "nq").mkdir(parents=True)
    _write(repo / "nq" / "test.jsonl", [{"id": "nq1", "question": "who?", "golden_answers": ["me"]}])
    assert load_qa(f"hf:{repo}:nq:test") == [QAExample("nq1", "who?", ["me"], {})]
    with pytest.raises(FileNotFoundError, match=r"no dev\.jsonl.* in .*nq; check the split name"):
        load_qa(f"hf:{repo}:nq:dev")


def test_shared_qa_files_load(shared_data: Path) -> None:
    """Every QA file under ../shared/data loads: one example per non-empty line, unique ids, answers present."""
    files = [
        "2wiki-mini/dev.jsonl",
        "r1-searcher-train/stage_1.jsonl",
        "r1-searcher-train/stage_2.jsonl",
        "fixtures/flashrag_nq_sample.jsonl",
    ]
    for rel in files:
        path = shared_data / rel
        lines = sum(1 for line in path.open(encoding="utf-8") if line.strip())
        got = load_qa(path)
        assert len(got) == lines > 0, rel
        assert len({g.id for g in got}) == lines and all(g.answers and g.question for g in got), rel
        print(f"{rel}: {len(got)} questions")


def test_a_dataset_the_hub_cannot_give_is_one_line_naming_the_download(tmp_path: Path, monkeypatch) -> None:
    """Offline (or no such dataset), ``hf:`` questions and corpora fail in one line that says how to download the
    files, whatever ``datasets`` raised."""
    import datasets

    from searchrl.data.corpus import local_corpus

    def offline(*args, **kwargs):
        raise ConnectionError("Couldn't reach 'org/qa' on the Hub (LocalEntryNotFoundError)\nmore detail")

    monkeypatch.setattr(datasets, "load_dataset", offline)
    monkeypatch.setenv("SEARCHRL_CACHE", str(tmp_path))
    for call in (lambda: load_qa("hf:org/qa:dev"), lambda: local_corpus("hf:org/qa:corpus")):
        with pytest.raises(ValueError) as err:
            call()
        msg = str(err.value)
        assert "\n" not in msg and "Couldn't reach 'org/qa'" in msg
        assert "huggingface-cli download --repo-type dataset org/qa --local-dir DIR" in msg
    assert not list(tmp_path.rglob("*.jsonl*"))  # no corpus file, not even a partial one


def test_an_id_repeated_for_another_question_is_made_unique(tmp_path: Path, monkeypatch) -> None:
    from searchrl.utils import console

    monkeypatch.setattr(console, "width", 400)
    # FlashRAG's per-dataset files each number from train_0; merged, two questions would share one rollout group
    f = _write(
        tmp_path / "merged.jsonl",
        [
            {"id": "train_0", "question": "who wrote it", "golden_answers": ["A"]},
            {"id": "train_1", "question": "where?", "golden_answers": ["B"]},
            {"id": "train_0", "question": "when was it built", "golden_answers": ["C"]},
            {"id": "train_1", "question": "where?", "golden_answers": ["B"]},  # the same question again: kept
        ],
    )
    with console.capture() as cap:
        got = load_qa(f)
    assert [e.id for e in got] == ["train_0", "train_1", "train_0@3", "train_1"]
    assert [e.question for e in got] == ["who wrote it", "where?", "when was it built", "where?"]
    assert got[2].metadata == {"id_in_file": "train_0"} and got[0].metadata == {}
    out = cap.get()
    assert out.count("already names another question") == 1 and "merged.jsonl:3" in out


def test_searchrl_records_load_their_golds_not_the_models_answer(tmp_path) -> None:
    """A trajectory or prediction row holds the model's answer in ``answer`` and the gold in ``golds``."""
    rows = [{"id": "t1", "question": "Where?", "golds": ["Oslo"], "answer": "Bergen", "turns": []}]
    path = tmp_path / "traj.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    (ex,) = load_qa(path)
    assert ex.answers == ["Oslo"]


def test_a_parquet_question_set_with_a_date_column_is_written_back_as_json(tmp_path: Path) -> None:
    """Metadata read from parquet keeps the column's type (a date, a list as an array); the files written from the
    questions (a split, predictions rows) write it as JSON's nearest type instead of stopping with a TypeError."""
    import datetime

    import pyarrow as pa
    import pyarrow.parquet as pq

    from searchrl.stages import split_questions

    table = pa.table(
        {
            "id": [f"q{i}" for i in range(4)],
            "question": [f"question {i}?" for i in range(4)],
            "golden_answers": [[f"a{i}"] for i in range(4)],
            "asked_on": [datetime.date(2024, 1, i + 1) for i in range(4)],
        }
    )
    pq.write_table(table, tmp_path / "qs.parquet")
    assert isinstance(load_qa(tmp_path / "qs.parquet")[0].metadata["asked_on"], datetime.date)
    split_questions(str(tmp_path / "qs.parquet"), tmp_path / "out", 1)
    rows = [json.loads(line) for f in ("train", "heldout") for line in (tmp_path / "out" / f"{f}.jsonl").open()]
    assert sorted(r["metadata"]["asked_on"] for r in rows) == [f"2024-01-0{i}" for i in range(1, 5)]
