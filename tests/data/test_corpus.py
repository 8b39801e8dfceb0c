"""Corpora: KILT pages chunked into ~100-word passages that keep their title; every shared corpus file loads."""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path

import pytest

from searchrl.data.corpus import PassageStore, chunk_kilt_page, iter_passages


def test_kilt_page_chunking_matches_reference_chunker() -> None:
    page = {
        "wikipedia_id": "42",
        "wikipedia_title": "Zed",
        "text": ["Zed\n", "Zed is a letter. " * 30 + "\n", "Section::::History.\n", "BULLET::::- first item\n"]
        + ["word " * 90 + "\n"],
    }
    chunks = chunk_kilt_page(page, size=100)
    words = [len(c.text.split()) for c in chunks]
    total = 1 + 4 * 30 + 1 + 3 + 90  # title paragraph + body + heading + bullet + last paragraph
    assert sum(words) == total and words == [100, 100, total - 200]
    assert [c.id for c in chunks] == ["42-0", "42-1", "42-2"]
    assert all(c.title == "Zed" for c in chunks)
    joined = " ".join(c.text for c in chunks)
    assert joined.startswith("Zed Zed is a letter.")  # the title paragraph stays, as in the released corpora
    assert "History." in joined and "- first item" in joined and "::::" not in joined


def test_kilt_sample_chunks_into_titled_100_word_passages(shared_data: Path) -> None:
    """Acceptance 2: the KILT page sample -> ~100-word passages, each carrying its page title."""
    path = shared_data / "fixtures" / "kilt_pages_sample.jsonl"
    pages = [json.loads(line) for line in path.open(encoding="utf-8") if line.strip()]
    passages = list(iter_passages(path))
    words = [len(p.text.split()) for p in passages]
    per_title = Counter(p.title for p in passages)
    page_words = {  # words once the markup markers are gone ("Section::::History." -> "History.")
        pg["wikipedia_title"]: len(re.sub(r"(Section|BULLET)::::", " ", " ".join(pg["text"])).split()) for pg in pages
    }
    # Every page is present and yields ceil(words / 100) passages; only each page's last passage is short.
    assert set(per_title) == set(page_words)
    assert all(per_title[t] == -(-page_words[t] // 100) for t in page_words)
    assert max(words) == 100 and sum(w == 100 for w in words) >= len(passages) - len(pages)
    assert all(p.title and p.id for p in passages) and len({p.id for p in passages}) == len(passages)
    mean = sum(words) / len(words)
    assert 90 <= mean <= 100
    print(
        f"KILT sample: {len(pages)} pages -> {len(passages)} passages; words min {min(words)} / mean {mean:.1f} / "
        f"max {max(words)}; {sum(w == 100 for w in words)} passages of exactly 100 words"
    )


def test_shared_corpus_files_load(shared_data: Path) -> None:
    """Acceptance 1 (corpora): every corpus file under ../shared/data streams through iter_passages."""
    for rel in ["2wiki-mini/corpus.jsonl", "fixtures/search_r1_example_corpus.jsonl"]:
        path = shared_data / rel
        rows = [json.loads(line) for line in path.open(encoding="utf-8") if line.strip()]
        passages = list(iter_passages(path))
        assert len(passages) == len(rows) > 0, rel
        assert [p.id for p in passages] == [str(r["id"]) for r in rows]
        assert all(p.title and p.text for p in passages), rel
        # Search-R1 wraps the title in double quotes; they are not part of the title.
        assert not any(p.title.startswith('"') and p.title.endswith('"') for p in passages), rel
        print(f"{rel}: {len(passages)} passages")


def test_every_shared_jsonl_file_is_readable(shared_data: Path) -> None:
    """No file under ../shared/data is left out: each JSONL is a QA file or a corpus, and loads as one."""
    from searchrl.data.loaders import load_qa

    files = sorted(shared_data.rglob("*.jsonl"))
    assert files
    for f in files:
        first = json.loads(next(line for line in f.open(encoding="utf-8") if line.strip()))
        n = len(load_qa(f)) if "question" in first else sum(1 for _ in iter_passages(f))
        assert n > 0, f


def test_passage_store_roundtrip(tmp_path: Path) -> None:
    corpus = tmp_path / "c.jsonl"
    corpus.write_text(
        "".join(json.dumps({"id": f"p{i}", "contents": f'"T{i}"\nbody {i} ünïcode'}) + "\n" for i in range(50))
    )
    store = PassageStore.build(iter_passages(corpus), tmp_path / "store")
    assert len(store) == 50
    assert store[7].title == "T7" and store[7].text == "body 7 ünïcode"
    assert store.index_of("p31") == 31
    store.close()


def test_beir_pyserini_and_untitled_rows_load(tmp_path: Path) -> None:
    """The layouts retrieval researchers bring: BEIR's ``_id``, ir_datasets' ``doc_id``, Pyserini's one-line
    ``contents`` (no title), a ``text`` with no ``title``; a row with no id at all names the fix."""
    import pytest

    from searchrl.data.corpus import CorpusFormatError

    corpus = tmp_path / "mixed.jsonl"
    rows = [
        {"_id": "b1", "title": "Hamlet", "text": "A tragedy by Shakespeare.", "metadata": {}},
        {"doc_id": "d1", "text": "Untitled passage."},
        {"id": "m1", "contents": "The presence of communication amid scientific minds."},
        {"id": 7, "contents": '"Elsinore"\nA castle.'},
    ]
    corpus.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    got = [(p.id, p.title, p.text) for p in iter_passages(corpus)]
    assert got == [
        ("b1", "Hamlet", "A tragedy by Shakespeare."),
        ("d1", "", "Untitled passage."),
        ("m1", "", "The presence of communication amid scientific minds."),
        ("7", "Elsinore", "A castle."),
    ]
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps(rows[0]) + "\n" + json.dumps({"title": "T", "text": "x"}) + "\n", encoding="utf-8")
    with pytest.raises(CorpusFormatError, match=r"bad\.jsonl:2: row has 'title'/'text' but no 'id'.*add an id"):
        list(iter_passages(bad))


def test_tab_separated_corpora_as_dpr_and_ms_marco_ship_them(tmp_path: Path) -> None:
    """DPR's ``psgs_w100.tsv`` (header ``id text title``, CSV-quoted cells; gzip too) and MS MARCO's headerless
    ``collection.tsv`` (``pid<TAB>passage``, quotes are text); a row with the wrong number of columns names its line.
    ``data inspect`` tells such a corpus from a QA table by its header."""
    import gzip

    import pytest

    from searchrl.commands.data import _detect
    from searchrl.data.corpus import CorpusFormatError

    dpr = 'id\ttext\ttitle\n1\t"Aaron ( or ; ""Aharon"") is a prophet"\tAaron\n2\tSecond passage.\tB\n'
    (tmp_path / "psgs_w100.tsv.gz").write_bytes(gzip.compress(dpr.encode()))
    got = [(p.id, p.title, p.text) for p in iter_passages(tmp_path / "psgs_w100.tsv.gz")]
    assert got == [("1", "Aaron", 'Aaron ( or ; "Aharon") is a prophet'), ("2", "B", "Second passage.")]
    (tmp_path / "collection.tsv").write_text('0\t"The Hunger Games is a novel\n1\tsecond\tTitled\n', encoding="utf-8")
    got = [(p.id, p.title, p.text) for p in iter_passages(tmp_path / "collection.tsv")]
    assert got == [("0", "", '"The Hunger Games is a novel'), ("1", "Titled", "second")]
    (tmp_path / "bad.tsv").write_text("id\ttext\ttitle\n1\ta\tA\n2\tb\n", encoding="utf-8")
    with pytest.raises(
        CorpusFormatError, match=r"bad\.tsv:3: 2 tab-separated columns, expected 3 \(id, text, title\)"
    ):
        list(iter_passages(tmp_path / "bad.tsv"))
    (tmp_path / "qa.tsv").write_text("id\tquestion\tanswer\nq1\twhere?\tOslo\n", encoding="utf-8")
    assert [_detect(tmp_path / f) for f in ("psgs_w100.tsv.gz", "collection.tsv", "qa.tsv")] == [
        "corpus",
        "corpus",
        "qa",
    ]


def test_a_datasets_corpus_is_written_once_into_the_cache_and_indexed(tmp_path: Path, monkeypatch) -> None:
    """``hf:NAME[:CONFIG]:SPLIT`` (here a dataset saved with ``save_to_disk``, as BEIR's corpora load) becomes a
    FlashRAG-layout file in the cache, reused by a second call; ``index build`` and the corpus check take it, and
    a run's preflight accepts it as ``data.corpus``."""
    import datasets
    from typer.testing import CliRunner

    from searchrl.commands import app
    from searchrl.config import load_config
    from searchrl.data.corpus import local_corpus
    from searchrl.preflight import plan_pipeline
    from searchrl.retrieval.index import build_index, check_corpus, read_manifest

    monkeypatch.setenv("SEARCHRL_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "hf-cache")
    rows = [{"_id": "d1", "title": "Hamlet", "text": "A play."}, {"_id": "d2", "title": "", "text": "Untitled."}]
    datasets.DatasetDict({"corpus": datasets.Dataset.from_list(rows)}).save_to_disk(str(tmp_path / "beir"))
    source = f"hf:{tmp_path / 'beir'}:corpus"
    path = local_corpus(source)
    assert path.is_relative_to(tmp_path / "cache" / "corpora") and path.suffix == ".jsonl"
    assert [(p.id, p.title, p.text) for p in iter_passages(source)] == [
        ("d1", "Hamlet", "A play."),
        ("d2", "", "Untitled."),
    ]
    stamp = path.stat().st_mtime_ns
    assert local_corpus(source) == path and path.stat().st_mtime_ns == stamp
    build_index(source, "bm25", tmp_path / "index")
    check_corpus(read_manifest(tmp_path / "index"), source, tmp_path / "index")
    qa = tmp_path / "qa.jsonl"
    qa.write_text(json.dumps({"id": "q", "question": "Who?", "golden_answers": ["x"]}) + "\n", encoding="utf-8")
    cfg = load_config("multihop_cpu", [f"data.source={tmp_path}", "data.train=qa.jsonl", f"data.corpus={source}"])
    cfg = cfg.model_copy(update={"pipeline": [s for s in cfg.pipeline if s.name == "index"]})
    (plan,) = plan_pipeline(cfg, tmp_path / "run")
    assert plan.inputs == [("corpus (stage data:)", source)]
    out = CliRunner().invoke(app, ["data", "inspect", source])
    assert out.exit_code == 0 and "passages without a title" in out.output and "Hamlet" in out.output


def test_a_json_array_of_passages_is_a_corpus(tmp_path: Path) -> None:
    """A ``.json`` file holding one array of passages reads like JSONL; ``data inspect`` tells it from an array of
    questions (HotpotQA's release) by its first row."""
    from searchrl.commands.data import _detect

    rows = [{"id": "1", "title": "A", "text": "a b"}, {"id": "2", "contents": "B\nc"}]
    (tmp_path / "corpus.json").write_text(json.dumps(rows), encoding="utf-8")
    assert [(p.id, p.title, p.text) for p in iter_passages(tmp_path / "corpus.json")] == [
        ("1", "A", "a b"),
        ("2", "B", "c"),
    ]
    (tmp_path / "hotpot.json").write_text(
        json.dumps([{"_id": "h", "question": "Q?", "answer": "a"}]), encoding="utf-8"
    )
    assert (_detect(tmp_path / "corpus.json"), _detect(tmp_path / "hotpot.json")) == ("corpus", "qa")


def test_a_null_or_non_text_contents_or_text_is_refused_with_its_line(tmp_path: Path) -> None:
    """Rather than indexed as the text "None" (contents) or reported as an unknown row layout (text)."""
    import pytest

    from searchrl.data.corpus import CorpusFormatError

    good = json.dumps({"id": "ok", "contents": "T\nfine"})
    cases = [
        ({"id": "a", "contents": None}, "'contents' is null; give it text"),
        ({"id": "a", "contents": 7}, "'contents' is not text (a int); give it text"),
        ({"id": "a", "title": "T", "text": None}, "'text' is null; give it text"),
        ({"id": "a", "title": "T", "text": ["x", "y"]}, "'text' is not text (a list); give it text"),
    ]
    for row, message in cases:
        path = tmp_path / "c.jsonl"
        path.write_text(good + "\n" + json.dumps(row) + "\n", encoding="utf-8")
        with pytest.raises(CorpusFormatError, match=re.escape(f"{path}:2: {message}")) as err:
            list(iter_passages(path))
        assert "\n" not in str(err.value)


def test_a_lone_surrogate_escape_names_its_line(tmp_path: Path) -> None:
    """JSON's "\\ud800" decodes to a lone surrogate, which cannot be written as UTF-8: refused while reading,
    with file:line, instead of an encode error from deep in the build."""
    import pytest

    from searchrl.data.corpus import CorpusFormatError

    path = tmp_path / "c.jsonl"
    lines = ['{"id": "a", "contents": "T\\nfine \\ud83d\\ude00 pair"}', '{"id": "b", "contents": "T\\nbad \\ud800 x"}']
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    with pytest.raises(CorpusFormatError, match=re.escape(f"{path}:2: lone surrogate \\ud800")) as err:
        list(iter_passages(path))
    assert "\n" not in str(err.value) and "remove that escape" in str(err.value)
    title_only = tmp_path / "t.jsonl"
    title_only.write_text('{"id": "c", "title": "\\udfff", "text": "x"}\n', encoding="utf-8")
    with pytest.raises(CorpusFormatError, match=re.escape(f"{title_only}:1: lone surrogate \\udfff")):
        list(iter_passages(title_only))
    path.write_text(lines[0] + "\n", encoding="utf-8")  # a proper surrogate pair is one character: fine
    assert [p.text for p in iter_passages(path)] == ["fine \U0001f600 pair"]


def test_ids_that_repeat_after_cutting_long_passages_are_refused(tmp_path: Path) -> None:
    """A 250-word passage ``d`` cut at 100 words gives ``d#0``, ``d#1``, ``d#2``; a passage already called ``d#1``
    then repeats an id, which must be caught after the cut, not before it."""
    import pytest

    from searchrl.data.corpus import CorpusFormatError

    rows = [{"id": "d", "title": "Long", "text": " ".join(f"w{i}" for i in range(250))}]
    rows.append({"id": "d#1", "title": "Other", "text": "a short passage"})
    path = tmp_path / "docs.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    assert [p.id for p in iter_passages(path)] == ["d", "d#1"]  # no cut: no repeat
    with pytest.raises(CorpusFormatError) as err:
        list(iter_passages(path, max_words=100))
    message = str(err.value)
    assert "passage id 'd#1' occurs twice, at lines 1 and 2" in message and "give every passage its own id" in message
    assert "longer than 100 words" in message and "\n" not in message


def test_a_corrupt_parquet_corpus_names_the_file(tmp_path: Path) -> None:
    from searchrl.data.corpus import CorpusFormatError

    bad = tmp_path / "corpus.parquet"
    bad.write_bytes(b"not parquet at all")
    with pytest.raises(CorpusFormatError, match=rf"^{re.escape(str(bad))}: not a readable parquet .*re-export it$"):
        next(iter_passages(bad))


def test_passages_with_nothing_in_them_are_kept_and_counted_in_one_warning(tmp_path: Path, capsys) -> None:
    rows = [
        {"id": "a", "contents": "T\nfine"},
        {"id": "b", "contents": ""},
        {"id": "c", "title": " ", "text": "  "},
        {"id": "d", "title": "Only a title", "text": ""},
    ]
    path = tmp_path / "c.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    assert [p.id for p in iter_passages(path)] == ["a", "b", "c", "d"]
    err = " ".join(capsys.readouterr().err.split())
    assert "2 passage(s) have no title and no text (first at line 2)" in err
    path.write_text(json.dumps(rows[0]) + "\n", encoding="utf-8")
    list(iter_passages(path))
    assert "warning" not in capsys.readouterr().err


def test_a_long_passage_in_a_script_without_spaces_is_cut_and_counted_by_its_characters(tmp_path: Path) -> None:
    """Chinese has no spaces, so a whole Chinese document was one 'word': --max-words never cut it and the build's
    long-passage check never saw it. Each of its characters now counts as a word; spaced text is cut as before."""
    import doctest

    import searchrl.data.corpus as corpus_module
    from searchrl.data.corpus import count_words

    text = "红楼梦是曹雪芹的小说。" * 30  # 330 characters
    rows = [{"id": "zh", "title": "红楼梦", "text": text}, {"id": "en", "title": "E", "text": "one two three"}]
    path = tmp_path / "zh.jsonl"
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    cut = list(iter_passages(path, max_words=100))
    assert [p.id for p in cut] == ["zh#0", "zh#1", "zh#2", "zh#3", "en"]
    assert "".join(p.text for p in cut[:4]) == text and [count_words(p.text) for p in cut[:4]] == [100, 100, 100, 30]
    assert {p.title for p in cut[:4]} == {"红楼梦"} and cut[4].text == "one two three"
    assert doctest.testmod(corpus_module).failed == 0


def test_an_ideographic_space_is_a_space_not_a_word() -> None:
    """Japanese text is often spaced or indented with U+3000, the ideographic space: it separates words as a space
    does. Before, it counted as a word of its own, so a chunk could hold one character fewer than --max-words asked."""
    from searchrl.data.corpus import chunk_text, count_words

    assert count_words("東京\u3000大阪") == count_words("東京 大阪") == 4
    assert chunk_text("東京\u3000大阪", 2) == ["東京", "大阪"]
    assert count_words("\u3000東京。") == 3  # CJK punctuation still counts, as before


@pytest.mark.parametrize("size,where", [(3 << 19, 5 << 18), (100, 50), (5 << 20, 1 << 10), (5 << 20, (5 << 20) - 10)])
def test_file_fingerprint_sees_a_same_size_edit_in_the_parts_it_hashes(tmp_path, size, where):
    """Up to 2 MiB the whole file counts (a 1.5 MiB corpus edited past its first MiB once kept its fingerprint);
    past that, the first and last MiB."""
    from searchrl.data.corpus import file_fingerprint

    path = tmp_path / "corpus.jsonl"
    data = bytearray(b"a" * size)
    path.write_bytes(bytes(data))
    before = file_fingerprint(path)
    data[where] = ord("b")
    path.write_bytes(bytes(data))
    assert file_fingerprint(path) != before
