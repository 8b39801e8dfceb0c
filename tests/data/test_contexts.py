"""A corpus from the passages QA datasets ship with their questions (HotpotQA, 2Wiki, MuSiQue, DPR layouts)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from searchrl.commands.data import app
from searchrl.data.contexts import passage_id, shipped_passages
from searchrl.data.corpus import iter_passages

HOTPOT = {
    "_id": "h1",
    "question": "Which magazine was started first, Arthur's Magazine or First for Women?",
    "answer": "Arthur's Magazine",
    "context": [
        ["Arthur's Magazine", ["Arthur's Magazine (1844-1846) was a periodical.", " It was edited by T.S. Arthur."]],
        ["First for Women", ["First for Women is a woman's magazine.", " It was started in 1989."]],
    ],
}
MUSIQUE = {
    "id": "2hop__1",
    "question": "Who founded the magazine?",
    "answer": "T.S. Arthur",
    "paragraphs": [
        {
            "idx": 0,
            "title": "Arthur's Magazine",
            "paragraph_text": "Arthur's Magazine (1844-1846) was a periodical. It was edited by T.S. Arthur.",
            "is_supporting": True,
        },
        {
            "idx": 1,
            "title": "Bauer Media",
            "paragraph_text": "Bauer Media Group is a publisher.",
            "is_supporting": False,
        },
    ],
}
DPR = {
    "question": "who publishes first for women",
    "answers": ["Bauer Media Group"],
    "positive_ctxs": [{"title": "Bauer Media", "text": "Bauer Media Group is a publisher.", "passage_id": "9"}],
    "hard_negative_ctxs": [{"title": "", "text": "An untitled passage."}, {"title": "Empty", "text": "  "}],
}


def test_each_layout_gives_its_passages_once_in_order() -> None:
    rows = [("a", {k: v for k, v in r.items() if k not in ("question", "answer")}) for r in (HOTPOT, MUSIQUE, DPR)]
    got = [(p.title, p.text) for p in shipped_passages(rows)]
    assert got == [
        ("Arthur's Magazine", "Arthur's Magazine (1844-1846) was a periodical. It was edited by T.S. Arthur."),
        ("First for Women", "First for Women is a woman's magazine. It was started in 1989."),
        ("Bauer Media", "Bauer Media Group is a publisher."),  # MuSiQue's copy of Arthur's Magazine is the same
        ("", "An untitled passage."),  # DPR's copy of Bauer Media is the same; the blank passage is dropped
    ]
    assert all(p.id == passage_id(p.title, p.text) for p in shipped_passages(rows))


def test_hugging_face_copies_hold_the_context_as_columns() -> None:
    """The hub's hotpot_qa keeps ``context`` as ``{"title": [...], "sentences": [[...], ...]}``."""
    columns = {
        "title": [t for t, _ in HOTPOT["context"]],
        "sentences": [sents for _, sents in HOTPOT["context"]],
    }
    from_rows = [(p.id, p.title, p.text) for p in shipped_passages([("a", {"context": HOTPOT["context"]})])]
    from_columns = [(p.id, p.title, p.text) for p in shipped_passages([("b", {"context": columns})])]
    assert from_columns == from_rows and len(from_rows) == 2


def test_malformed_or_missing_passages_name_the_fix() -> None:
    with pytest.raises(ValueError, match=r"q7: field 'context' holds .*expected \[title, \[sentences\]\]"):
        list(shipped_passages([("q7", {"context": [{"no_text": 1}]})]))
    with pytest.raises(ValueError, match="field 'paragraphs' must be a list"):
        list(shipped_passages([("q8", {"paragraphs": "text"})]))
    with pytest.raises(ValueError, match=r"no question carries passages .*data\.corpus=FILE"):
        list(shipped_passages([("q9", {"type": "bridge"})]))


def test_cli_writes_a_corpus_the_index_reads(tmp_path: Path) -> None:
    (tmp_path / "hotpot.json").write_text(json.dumps([HOTPOT]), encoding="utf-8")
    unanswered = {k: v for k, v in MUSIQUE.items() if k != "answer"}  # a test set's row: paragraphs, no answer
    (tmp_path / "musique.jsonl").write_text(json.dumps(unanswered) + "\n", encoding="utf-8")
    out = tmp_path / "corpus.jsonl"
    res = CliRunner().invoke(
        app, ["contexts", str(tmp_path / "hotpot.json"), str(tmp_path / "musique.jsonl"), "--out", str(out)]
    )
    assert res.exit_code == 0, res.output
    assert "3 passages from" in res.output
    passages = list(iter_passages(out))
    assert [p.title for p in passages] == ["Arthur's Magazine", "First for Women", "Bauer Media"]
    assert len({p.id for p in passages}) == 3


def test_a_run_indexes_the_paragraphs_its_questions_ship_with(tmp_path: Path, monkeypatch) -> None:
    """``data.corpus=contexts`` in ``searchrl run``: the recipe's index stage builds the corpus of ``data.train``'s
    own paragraphs (cached), and the preflight takes the value as a corpus, not as a missing file."""
    from searchrl.config import load_config
    from searchrl.preflight import plan_pipeline
    from searchrl.stages import build_index_for
    from searchrl.stages.chain import _subst

    monkeypatch.setenv("SEARCHRL_CACHE", str(tmp_path / "cache"))
    (tmp_path / "hotpot.json").write_text(json.dumps([HOTPOT]), encoding="utf-8")
    cfg = load_config("multihop_cpu", [f"data.source={tmp_path}", "data.train=hotpot.json", "data.corpus=contexts"])
    (stage,) = [s for s in cfg.pipeline if s.name == "index"]
    corpus = _subst(stage.data, {}, "index", cfg.model_dump())
    assert corpus == "contexts"
    plans = plan_pipeline(cfg.model_copy(update={"pipeline": [stage]}), tmp_path / "run")
    assert plans[0].inputs == [("corpus (stage data:)", "contexts")]
    res = build_index_for(cfg, tmp_path / "index", corpus, kind="bm25")
    assert res["passages"] == 2 and Path(res["corpus"]).is_relative_to(tmp_path / "cache" / "contexts")
