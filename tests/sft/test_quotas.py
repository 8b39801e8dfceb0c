"""Per-source / per-bucket quotas with a per-question cap (R1-Searcher's Table 1, R1-Searcher++'s 720 + 85)."""

from __future__ import annotations

from collections import Counter

import pytest

from searchrl.sft.quotas import apply_quotas, parse_quotas, shortfall, source_of


def items():
    """(question id, source, bucket): 10 HotpotQA medium, 6 HotpotQA hard, 8 2Wiki medium; 3 samples per question."""
    rows = []
    for i in range(24):
        source = "hotpotqa" if i < 16 else "2wikimultihopqa"
        bucket = "hard" if 10 <= i < 16 else "medium"
        rows += [(f"q{i}", source, bucket)] * 3
    return rows


def test_parse_quotas() -> None:
    assert parse_quotas(["HotpotQA/medium=200", "2wikimultihopqa=85", "*/hard=3"]) == {
        ("hotpotqa", "medium"): 200,
        ("2wikimultihopqa", "*"): 85,
        ("*", "hard"): 3,
    }
    assert parse_quotas({"hotpotqa": 720}) == {("hotpotqa", "*"): 720}
    for bad in (["hotpotqa"], ["hotpotqa=-1"], ["hotpotqa=many"], ["=3"]):
        with pytest.raises(ValueError, match="SOURCE/BUCKET=N"):
            parse_quotas(bad)


def test_source_and_bucket_quotas_with_a_per_question_cap() -> None:
    quotas = parse_quotas(["hotpotqa/medium=4", "2wikimultihopqa/medium=5"])
    kept, counts = apply_quotas(
        items(), quotas, source=lambda r: r[1], bucket=lambda r: r[2], group=lambda r: r[0], max_per_group=1, seed=3
    )
    assert counts == {"hotpotqa/medium": 4, "2wikimultihopqa/medium": 5}
    assert Counter((s, b) for _, s, b in kept) == {("hotpotqa", "medium"): 4, ("2wikimultihopqa", "medium"): 5}
    assert len({q for q, _, _ in kept}) == len(kept)  # one sample per question
    assert kept == sorted(kept, key=items().index)  # input order
    again, _ = apply_quotas(
        items(), quotas, source=lambda r: r[1], bucket=lambda r: r[2], group=lambda r: r[0], max_per_group=1, seed=3
    )
    other, _ = apply_quotas(
        items(), quotas, source=lambda r: r[1], bucket=lambda r: r[2], group=lambda r: r[0], max_per_group=1, seed=4
    )
    assert again == kept and other != kept  # the seed fixes the draw
    assert not any(b == "hard" for _, _, b in kept)  # no quota covers the hard bucket: dropped


def test_source_quota_counts_samples_and_reports_a_shortfall() -> None:
    quotas = parse_quotas(["hotpotqa=40", "2wikimultihopqa=5"])
    kept, counts = apply_quotas(items(), quotas, source=lambda r: r[1], group=lambda r: r[0], max_per_group=2)
    assert counts == {"hotpotqa/*": 32, "2wikimultihopqa/*": 5}  # 16 questions x cap 2 < 40
    assert max(Counter(q for q, _, _ in kept).values()) == 2
    assert shortfall(quotas, counts) == "hotpotqa/* 32 of 40"
    with pytest.raises(ValueError, match="cap must be >= 1"):
        apply_quotas(items(), quotas, source=lambda r: r[1], group=lambda r: r[0], max_per_group=0)


def test_cap_alone_and_source_fields() -> None:
    kept, counts = apply_quotas(items(), {}, source=lambda r: r[1], group=lambda r: r[0], max_per_group=1)
    assert len(kept) == 24 and counts == {}
    assert source_of({"source": "HotpotQA "}) == "hotpotqa" and source_of({"data_source": "nq"}) == "nq"
    assert source_of({"kind": "bridge"}) == "all"


def test_selection_quotas_rewrite_the_kept_file_and_records(tmp_path) -> None:
    import json

    from searchrl.data.records import QAExample
    from searchrl.stages.sampling import _apply_selection_quotas

    kept = [
        QAExample(f"q{i}", f"Q{i}?", ["a"], metadata={"source": s, "difficulty": b})
        for i, (_, s, b) in enumerate(items()[::3])
    ]
    rows = [{"id": e.id, "bucket": e.metadata["difficulty"], "kept": True} for e in kept]
    out, records = tmp_path / "kept.jsonl", tmp_path / "records.jsonl"
    chosen = _apply_selection_quotas(kept, rows, ["hotpotqa/hard=2", "2wikimultihopqa/medium=3"], 0, out, records)
    assert [(e.metadata["source"], e.metadata["difficulty"]) for e in chosen].count(("hotpotqa", "hard")) == 2
    assert len(chosen) == 5 and len(out.read_text().splitlines()) == 5
    assert sum(json.loads(line)["kept"] for line in records.read_text().splitlines()) == 5


def test_quotas_that_can_fill_nothing_fail_before_sampling(tmp_path, monkeypatch) -> None:
    """A bucket the stage does not keep (the paper's word "difficult" for hard), a bucket in rejection sampling, or a
    source no question has (rows without a source field) fails at once, naming the fix, before any model loads."""
    import json

    from searchrl.config import RunConfig
    from searchrl.sft.quotas import check_quotas
    from searchrl.stages import sampling

    quotas = parse_quotas(["hotpotqa/medium=2", "2wikimultihopqa/hard=1"])
    check_quotas(quotas, ["hotpotqa", "2wikimultihopqa", "hotpotqa"], ["medium", "hard"])  # all can fill
    with pytest.raises(ValueError, match="bucket 'difficult'; use one of medium, hard"):
        check_quotas(parse_quotas(["hotpotqa/difficult=2"]), ["hotpotqa"], ["medium", "hard"])
    with pytest.raises(ValueError, match="no difficulty buckets; write hotpotqa=N"):
        check_quotas(parse_quotas(["hotpotqa/medium=2"]), ["hotpotqa"], None)
    with pytest.raises(ValueError, match=r"no question has source '2wikimultihopqa' \(sources: hotpotqa\)"):
        check_quotas(quotas, ["hotpotqa"], ["medium", "hard"])
    with pytest.raises(ValueError, match=r"\(no row has a source field\); give each row a source field"):
        check_quotas(parse_quotas(["hotpotqa=720"]), ["all", "all"], None)
    check_quotas(parse_quotas(["*/medium=3", "*=2"]), ["all"], ["medium"])  # any source: no field needed

    data = tmp_path / "qa.jsonl"
    data.write_text("".join(json.dumps({"id": f"q{i}", "question": f"Q{i}?", "answer": "a"}) + "\n" for i in range(3)))

    def no_model(*args, **kwargs):
        raise AssertionError("the model was loaded for quotas that can fill nothing")

    monkeypatch.setattr(sampling, "rollout_engine", no_model)
    cfg = RunConfig()
    with pytest.raises(ValueError, match="no question has source 'hotpotqa'"):
        sampling.rejection_sampling(cfg, tmp_path / "rs.jsonl", data=str(data), quota=["hotpotqa=720"])
    with pytest.raises(ValueError, match="bucket 'hard'; use one of medium"):
        sampling.difficulty_selection(cfg, tmp_path / "s.jsonl", data=str(data), keep=["medium"], quota=["*/hard=5"])
    with pytest.raises(ValueError, match="bucket 'unanswerable'; use one of easy, answerable"):
        sampling.difficulty_selection(
            cfg, tmp_path / "s.jsonl", data=str(data), rule="rag_r1", quota=["*/unanswerable=5"]
        )
