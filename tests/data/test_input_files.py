"""Corpus and QA files as users have them: gzip-compressed, with a stray non-UTF-8 byte, with a repeated id."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from searchrl.data.corpus import CorpusFormatError, iter_passages
from searchrl.data.loaders import load_qa


def _rows(rows: list[dict]) -> bytes:
    return "".join(json.dumps(r) + "\n" for r in rows).encode("utf-8")


def test_gzip_corpus_and_qa_read_like_plain_files(tmp_path: Path) -> None:
    passages = [{"id": "a", "contents": '"Alpha"\nfirst'}, {"id": "b", "contents": '"Beta"\nsecond'}]
    (tmp_path / "corpus.jsonl.gz").write_bytes(gzip.compress(_rows(passages)))
    got = list(iter_passages(tmp_path / "corpus.jsonl.gz"))
    assert [(p.id, p.title, p.text) for p in got] == [("a", "Alpha", "first"), ("b", "Beta", "second")]

    qa = [{"id": "q1", "question": "Who?", "golden_answers": ["Ann"]}, {"question": "What?", "answer": "it"}]
    (tmp_path / "dev.jsonl.gz").write_bytes(gzip.compress(_rows(qa)))
    by_file = load_qa(tmp_path / "dev.jsonl.gz")
    by_dir = load_qa(tmp_path, split="dev")
    assert [(e.id, e.answers) for e in by_file] == [("q1", ["Ann"]), ("dev-2", ["it"])]
    assert by_dir == by_file


@pytest.mark.parametrize("kind", ["corpus", "qa"])
def test_non_utf8_line_names_file_and_line(tmp_path: Path, kind: str) -> None:
    good = {"id": "a", "contents": "A\nx"} if kind == "corpus" else {"question": "Q?", "answer": "x"}
    bad = b'{"id": "b", "contents": "B\\ncaf\xe9", "question": "caf\xe9?", "answer": "y"}\n'
    path = tmp_path / "f.jsonl"
    path.write_bytes(_rows([good, good | {"id": "c"}]) + bad)
    with pytest.raises(ValueError, match=r"f\.jsonl:3: not UTF-8 .*0xe9.*iconv"):
        list(iter_passages(path)) if kind == "corpus" else load_qa(path)


def test_duplicate_passage_ids_name_the_first_two_lines(tmp_path: Path) -> None:
    rows = [{"id": str(i), "contents": f"T{i}\ntext"} for i in range(6)]
    rows[4]["id"] = "1"  # line 5 repeats line 2's id
    rows.append({"id": "1", "contents": "again\nthird time"})
    path = tmp_path / "corpus.jsonl"
    path.write_bytes(_rows(rows))
    with pytest.raises(CorpusFormatError, match=r"passage id '1' occurs twice, at lines 2 and 5"):
        list(iter_passages(path))


def test_distinct_ids_pass(tmp_path: Path) -> None:
    path = tmp_path / "corpus.jsonl"
    path.write_bytes(_rows([{"id": f"p{i}", "title": "t", "text": "x"} for i in range(1000)]))
    assert len(list(iter_passages(path))) == 1000


def test_index_build_of_a_corpus_with_a_repeated_id_fails_and_leaves_nothing(tmp_path: Path) -> None:
    from searchrl.retrieval.index import build_index

    path = tmp_path / "corpus.jsonl.gz"
    path.write_bytes(gzip.compress(_rows([{"id": "a", "contents": "A\nx"}, {"id": "a", "contents": "B\ny"}])))
    with pytest.raises(CorpusFormatError, match="at lines 1 and 2"):
        build_index(path, "bm25", tmp_path / "idx")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["corpus.jsonl.gz"]


def test_a_byte_order_mark_is_dropped_and_a_broken_gzip_named(tmp_path: Path) -> None:
    """An editor's byte-order mark before the first row reads as nothing; a ``.gz`` that is not gzip, or is cut
    short, is one line naming the file and the fix, for questions, corpora and ``data inspect`` alike."""
    from typer.testing import CliRunner

    from searchrl.commands import app

    (tmp_path / "bom.jsonl").write_bytes(b"\xef\xbb\xbf" + _rows([{"id": "a", "contents": "A\nx"}]))
    assert [p.id for p in iter_passages(tmp_path / "bom.jsonl")] == ["a"]
    (tmp_path / "q.jsonl").write_bytes(b"\xef\xbb\xbf" + _rows([{"question": "Q?", "answer": "x"}]))
    assert load_qa(tmp_path / "q.jsonl")[0].question == "Q?"
    # a JSON array saved by an editor that writes one (Windows Notepad, PowerShell): json.loads refused the mark
    question = json.dumps([{"question": "Où est Zürich ?", "answer": "x"}], ensure_ascii=False)
    (tmp_path / "q.json").write_bytes(b"\xef\xbb\xbf" + question.encode("utf-8"))
    assert load_qa(tmp_path / "q.json")[0].question == "Où est Zürich ?"
    (tmp_path / "c.json").write_bytes(b"\xef\xbb\xbf" + json.dumps([{"id": "a", "contents": "A\nx"}]).encode())
    assert [p.id for p in iter_passages(tmp_path / "c.json")] == ["a"]
    (tmp_path / "not.jsonl.gz").write_bytes(b"plain text")
    (tmp_path / "cut.jsonl.gz").write_bytes(gzip.compress(_rows([{"id": "a", "contents": "A\nx"}]))[:20])
    for name in ("not.jsonl.gz", "cut.jsonl.gz"):
        with pytest.raises(ValueError, match=rf"{name}: cannot be read \(.*\); re-download or re-compress it"):
            list(iter_passages(tmp_path / name))
        with pytest.raises(ValueError, match=rf"{name}: cannot be read"):
            load_qa(tmp_path / name)
        res = CliRunner().invoke(app, ["data", "inspect", str(tmp_path / name)])
        assert isinstance(res.exception, ValueError) and "re-download" in str(res.exception)
