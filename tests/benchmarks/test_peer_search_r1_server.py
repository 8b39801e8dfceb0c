"""benchmarks/peer_search_r1_server.py --ours-only: a smoke run prints, a real one adds its section to the results."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import peer_search_r1_server as bench
import pytest


@pytest.fixture
def fake_measurement(tmp_path: Path, monkeypatch) -> Path:
    results = tmp_path / "results"
    results.mkdir()
    (results / "peer_search_r1_server.json").write_text(json.dumps({"rows": ["peer", "ours"]}))
    monkeypatch.setattr(bench, "RESULTS", results)
    monkeypatch.setattr(bench, "prepare_indexes", lambda corpus, big, index: (tmp_path / "index", None))
    monkeypatch.setattr(bench, "load_questions", lambda: ["q1", "q2"])
    monkeypatch.setattr(bench, "searchrl_server", lambda index, tmp: "server")
    monkeypatch.setattr(bench, "measure", lambda server, questions, a, b: {"loads": {"measured": 1}})
    monkeypatch.setattr(bench, "encoder_only", lambda index, questions: {"batch_1": 2})
    monkeypatch.setattr(bench, "fractions", lambda ours, encoder: {"measured": 0.5})
    monkeypatch.setattr(bench, "render", lambda result: "report\n")
    return results


def _args(smoke: bool) -> argparse.Namespace:
    return argparse.Namespace(corpus=Path("corpus.jsonl"), index=None, smoke=smoke)


def test_a_smoke_run_of_ours_only_leaves_the_stored_results_as_they_were(fake_measurement: Path, capsys) -> None:
    before = {p.name: p.read_text() for p in fake_measurement.iterdir()}
    bench.ours_only(_args(smoke=True))
    assert {p.name: p.read_text() for p in fake_measurement.iterdir()} == before
    assert '"measured": 0.5' in capsys.readouterr().out  # what it measured is printed


def test_ours_only_adds_what_it_measured_beside_the_peer_comparison(fake_measurement: Path) -> None:
    bench.ours_only(_args(smoke=False))
    stored = json.loads((fake_measurement / "peer_search_r1_server.json").read_text())
    assert stored["rows"] == ["peer", "ours"]
    assert stored["ours_vs_encoder_only"]["row"] == {"loads": {"measured": 1}}
    assert stored["ours_vs_encoder_only"]["fraction_of_encoder_only"] == {"measured": 0.5}
    assert (fake_measurement / "peer_search_r1_server.md").read_text() == "report\n"


def test_a_run_without_the_start_up_index_does_not_describe_one() -> None:
    stored = json.loads((Path(bench.__file__).parent / "results" / "peer_search_r1_server.json").read_text())
    stored["big_passages"] = None  # --big-passages 0
    text = bench.render(stored)
    assert "passage index for start-up" not in text
    assert "Search-R1's `datasets` cache of each corpus is built before timing." in text
