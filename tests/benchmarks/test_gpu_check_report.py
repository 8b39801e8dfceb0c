"""benchmarks/gpu_check.py turns one GPU check's files into the report's JSON keys (no GPU needed)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _module():
    spec = importlib.util.spec_from_file_location("gpu_check", ROOT / "benchmarks" / "gpu_check.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


JUNIT = """<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite name="pytest">
<testcase classname="tests.gpu.test_cuda" name="test_recipe_rl_stage_on_cuda[r_search]" time="9.1"/>
<testcase classname="tests.gpu.test_cuda" name="test_recipe_rl_stage_on_cuda[rag_r1]" time="3.0">
  <failure message="OOM">trace</failure></testcase>
<testcase classname="tests.gpu.test_cuda" name="test_decode_logprobs_match_a_forward[cpu-fp32]" time="1">
  <skipped message="not cuda"/></testcase>
</testsuite></testsuites>"""


def test_report_counts_outcomes_and_joins_recipe_records(tmp_path: Path, monkeypatch) -> None:
    mod = _module()
    (tmp_path / "cuda_tests.xml").write_text(JUNIT)
    (tmp_path / "recipes.jsonl").write_text(
        json.dumps({"recipe": "r_search", "shape": "qwen2.5-3b", "rl_steps": 1, "peak_gb": 41.5, "step_s": 7.0}) + "\n"
    )
    (tmp_path / "peer_trl_gpu.json").write_text(
        json.dumps({"qwen2.5-3b": {"ours_s": 2.0, "trl_s": 4.0, "ratio": 0.5}})
    )
    (tmp_path / "device.txt").write_text("NVIDIA H100 80GB HBM3, 81559 MiB, 580.159.04\n")
    monkeypatch.setattr("sys.argv", ["gpu_check.py", str(tmp_path), "--seconds", "400"])
    mod.main()
    res = json.loads((tmp_path / "gpu_check.json").read_text())
    assert res["device"].startswith("NVIDIA H100")
    assert (res["cuda_tests"]["passed"], res["cuda_tests"]["failed"], res["cuda_tests"]["skipped"]) == (1, 1, 1)
    assert res["recipes"]["r_search"] == {
        "ok": True,
        "rl_steps": 1,
        "peak_gb": 41.5,
        "reserved_gb": None,
        "step_s": 7.0,
        "shape": "qwen2.5-3b",
    }
    assert res["recipes"]["rag_r1"]["ok"] is False and res["recipes"]["rag_r1"]["rl_steps"] == 0
    assert res["peer_trl"]["qwen2.5-3b"]["ratio"] == 0.5
    assert {"torch", "transformers"} <= res.keys()
    assert "| r_search | qwen2.5-3b | True | 1 | 41.50 |" in (tmp_path / "gpu_check.md").read_text()
