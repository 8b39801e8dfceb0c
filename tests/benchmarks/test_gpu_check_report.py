"""benchmarks/gpu_check.py turns one GPU check's files into the report's JSON keys (no GPU needed)."""

from __future__ import annotations

import json
from pathlib import Path

import gpu_check
import pytest

JUNIT = """<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite name="pytest">
<testcase classname="tests.gpu.test_cuda" name="test_recipe_rl_stage_on_cuda[r_search]" time="9.1"/>
<testcase classname="tests.gpu.test_cuda" name="test_recipe_rl_stage_on_cuda[rag_r1]" time="3.0">
  <failure message="OOM">trace</failure></testcase>
<testcase classname="tests.gpu.test_cuda" name="test_decode_logprobs_match_a_forward[cpu-fp32]" time="1">
  <skipped message="not cuda"/></testcase>
</testsuite></testsuites>"""


def test_report_counts_outcomes_and_joins_recipe_records(tmp_path: Path, monkeypatch) -> None:
    (tmp_path / "cuda_tests.xml").write_text(JUNIT)
    (tmp_path / "recipes.jsonl").write_text(
        json.dumps({"recipe": "r_search", "shape": "qwen2.5-3b", "rl_steps": 1, "peak_gb": 41.5, "step_s": 7.0}) + "\n"
    )
    (tmp_path / "peer_trl_gpu.json").write_text(
        json.dumps({"qwen2.5-3b": {"ours_s": 2.0, "trl_s": 4.0, "ratio": 0.5}})
    )
    (tmp_path / "device.txt").write_text("NVIDIA H100 80GB HBM3, 81559 MiB, 580.159.04\n")
    monkeypatch.setattr("sys.argv", ["gpu_check.py", str(tmp_path), "--seconds", "400"])
    gpu_check.main()
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


def test_runs_merge_with_later_rollout_records_replacing_earlier_ones(tmp_path: Path, monkeypatch) -> None:
    """A later run's decode record of a (shape, batch) replaces the earlier one; the others stay; columns a run did
    not measure (HF static, the multi-turn rollout) show as "-"."""
    first, second = tmp_path / "a", tmp_path / "b"
    for d in (first, second):
        d.mkdir()
    rec = {"shape": "qwen2.5-1.5b", "bound_step_ms": 2.0, "hf_static_step_ms": 20.0, "rollout_tokens_per_s": 7000}
    old_runs = [
        {**rec, "batch": 16, "ours_step_ms": 7.0, "decode_vs_bound": 3.5},
        {**rec, "batch": 512, "ours_step_ms": 17.0, "decode_vs_bound": 8.5},
        {"shape": "qwen2.5-1.5b", "update_s": 0.2, "update_tokens": 8192, "update_mfu": 0.43},
    ]
    base = {"matmul_peak_tflops": 770.0, "copy_bandwidth_gbs": 4200.0}
    (first / "gpu_rollout.json").write_text(json.dumps({**base, "runs": old_runs, "update_mfu_3b": 0.5}))
    new_run = {"shape": "qwen2.5-1.5b", "batch": 512, "ours_step_ms": 12.0, "bound_step_ms": 2.0}
    new_run.update(decode_vs_bound=6.0, ours_step_ms_with_capture=12.2, graph_capture_ms=50.0)
    (second / "gpu_rollout.json").write_text(json.dumps({**base, "runs": [new_run], "decode_vs_bound_b512_1.5b": 6.0}))
    monkeypatch.setattr("sys.argv", ["gpu_check.py", str(first), str(second)])
    gpu_check.main()
    ro = json.loads((second / "gpu_check.json").read_text())["rollout"]
    steps = {r.get("batch"): r.get("ours_step_ms") for r in ro["runs"]}
    assert steps == {16: 7.0, 512: 12.0, None: None}
    assert ro["decode_vs_bound_b512_1.5b"] == 6.0 and ro["update_mfu_3b"] == 0.5
    md = (second / "gpu_check.md").read_text()
    assert "| qwen2.5-1.5b | bf16 | 512 | 12.0 | 12.20 | 50.00 | - | - | 2.00 | 6.0 | - | - |" in md
    assert "| qwen2.5-1.5b | bf16 | 16 | 7.0 | - | - | - | 20.00 | 2.00 | 3.5 | - | 7000.00 |" in md


def test_a_pair_cut_short_keeps_ours_without_replacing_a_full_pair(tmp_path: Path, monkeypatch) -> None:
    """A run whose TRL side timed out leaves ours alone (shown with "-" for TRL); merged after a full pair of the
    same shape, it does not replace it, and it fills in a shape no run paired."""
    full, cut = tmp_path / "full", tmp_path / "cut"
    for d in (full, cut):
        d.mkdir()
    (full / "peer_trl_gpu.json").write_text(json.dumps({"qwen2.5-3b": {"ours_s": 2.0, "trl_s": 4.0, "ratio": 0.5}}))
    alone = {"ours_s": 3.0, "trl_s": None, "ratio": None}
    (cut / "peer_trl_gpu.json").write_text(json.dumps({"qwen2.5-3b": alone, "qwen2.5-1.5b": alone}))
    monkeypatch.setattr("sys.argv", ["gpu_check.py", str(full), str(cut), "--seconds", "1"])
    gpu_check.main()
    res = json.loads((cut / "gpu_check.json").read_text())  # the report goes to the last run
    assert res["peer_trl"]["qwen2.5-3b"]["ratio"] == 0.5
    assert res["peer_trl"]["qwen2.5-1.5b"]["trl_s"] is None
    assert "| qwen2.5-1.5b | 3.0 | - | - |" in (cut / "gpu_check.md").read_text()


def test_runs_update_an_earlier_report_onto_which_they_merge(tmp_path: Path, monkeypatch) -> None:
    """``--onto`` keeps an earlier report's test outcomes, recipes, TRL pairs and device where the new run (here a
    decode benchmark alone) did not measure them again; its decode record replaces the earlier one."""
    earlier, run = tmp_path / "earlier", tmp_path / "run"
    for d in (earlier, run):
        d.mkdir()
    (earlier / "cuda_tests.xml").write_text(JUNIT)
    (earlier / "peer_trl_gpu.json").write_text(json.dumps({"qwen2.5-3b": {"ours_s": 2.0, "trl_s": 4.0, "ratio": 0.5}}))
    (earlier / "device.txt").write_text("NVIDIA H200, 143771 MiB\n")
    (earlier / "versions.json").write_text(json.dumps({"torch": "2.11.0+cu130", "transformers": "5.17"}))
    old = {"shape": "qwen2.5-1.5b", "batch": 512, "ours_step_ms": 17.0, "bound_step_ms": 2.0, "decode_vs_bound": 8.5}
    mfu = {"shape": "qwen2.5-3b", "update_s": 0.4, "update_tokens": 8192, "update_mfu": 0.49}
    peak = {"matmul_peak_tflops": 770.0, "copy_bandwidth_gbs": 4200.0}
    (earlier / "gpu_rollout.json").write_text(json.dumps({**peak, "runs": [old, mfu], "update_mfu_3b": 0.49}))
    monkeypatch.setattr("sys.argv", ["gpu_check.py", str(earlier)])
    gpu_check.main()
    (run / "gpu_rollout.json").write_text(
        json.dumps(
            {**peak, "runs": [{**old, "ours_step_ms": 7.0, "decode_vs_bound": 3.5}], "decode_vs_bound_b512_1.5b": 3.5}
        )
    )
    monkeypatch.setattr("sys.argv", ["gpu_check.py", str(run), "--onto", str(earlier / "gpu_check.json")])
    gpu_check.main()
    res = json.loads((run / "gpu_check.json").read_text())
    assert res["device"].startswith("NVIDIA H200") and res["torch"] == "2.11.0+cu130"
    assert (res["cuda_tests"]["passed"], res["cuda_tests"]["failed"], res["cuda_tests"]["skipped"]) == (1, 1, 1)
    assert res["recipes"]["r_search"]["ok"] and not res["recipes"]["rag_r1"]["ok"]
    assert res["peer_trl"]["qwen2.5-3b"]["ratio"] == 0.5
    ro = res["rollout"]
    assert (ro["decode_vs_bound_b512_1.5b"], ro["update_mfu_3b"]) == (3.5, 0.49)
    assert sorted(r.get("ours_step_ms", 0) for r in ro["runs"]) == [0, 7.0]


def test_the_pair_passes_repeated_settings_to_ours(tmp_path: Path, monkeypatch) -> None:
    """``--ours-args`` (repeatable) lands at the end of ours' `searchrl train` command, as separate settings."""
    import argparse
    import sys

    import peer_trl_gpu

    seen: list[list[str]] = []
    monkeypatch.setattr(peer_trl_gpu, "run", lambda cmd, *a, **k: seen.append(cmd) or 1)
    (tmp_path / "ours-qwen2.5-tiny.log").write_text("failed\n")
    args = argparse.Namespace(python=sys.executable, tokenizer="tok", device="cpu", prompts=2, group=2)
    args.__dict__.update(max_new_tokens=8, steps=2, profile=False, timeout=10)
    args.ours_args = ["training.compile_layers=true", "rollout.compile_decode=false rollout.cuda_graphs=false"]
    with pytest.raises(SystemExit):
        peer_trl_gpu.ours(args, "qwen2.5-tiny", tmp_path, {})
    assert seen[0][-3:] == [
        "training.compile_layers=true",
        "rollout.compile_decode=false",
        "rollout.cuda_graphs=false",
    ]


def test_an_interrupted_test_run_counts_the_test_it_cut_as_failed(tmp_path: Path) -> None:
    """pytest interrupted by the phase's timeout writes the finished tests and one unnamed test case."""
    (tmp_path / "cuda_tests.xml").write_text(JUNIT.replace("</testsuite>", '<testcase time="0.000" /></testsuite>'))
    res = gpu_check.junit(tmp_path / "cuda_tests.xml")
    assert (res["passed"], res["failed"], res["skipped"]) == (1, 2, 1) and res["tests"]["interrupted"] == "failed"


LORA = '<testcase classname="tests.gpu.test_cuda" name="test_7b_lora_grpo_step_fits_one_gpu" time="30"/>'
LORA_RECORD = {"recipe": "7b_lora_grpo", "shape": "qwen2.5-7b", "rl_steps": 1, "peak_gb": 60.0, "step_s": 9.0}


def _report(run: Path, cases: str, monkeypatch, onto: Path | None = None, record: bool = False) -> dict:
    """The report of a run whose JUnit XML holds JUNIT's cases plus ``cases`` (with the LoRA step's record)."""
    run.mkdir()
    (run / "cuda_tests.xml").write_text(JUNIT.replace("</testsuite>", cases + "</testsuite>"))
    if record:
        (run / "recipes.jsonl").write_text(json.dumps(LORA_RECORD) + "\n")
    monkeypatch.setattr("sys.argv", ["gpu_check.py", str(run), *(["--onto", str(onto)] if onto else [])])
    gpu_check.main()
    return json.loads((run / "gpu_check.json").read_text())


def test_a_failing_lora_step_is_not_ok_onto_an_earlier_report_where_it_was(tmp_path: Path, monkeypatch) -> None:
    earlier = _report(tmp_path / "earlier", LORA, monkeypatch, record=True)
    assert earlier["recipes"]["7b_lora_grpo"]["ok"] is True
    failed = LORA.replace("/>", '><failure message="OOM">trace</failure></testcase>')
    lora_now = _report(tmp_path / "run", failed, monkeypatch, onto=tmp_path / "earlier" / "gpu_check.json")
    assert lora_now["recipes"]["7b_lora_grpo"]["ok"] is False and lora_now["recipes"]["7b_lora_grpo"]["rl_steps"] == 0


def test_a_later_run_of_the_tests_drops_the_cut_test_and_a_skipped_lora_step_is_not_measured(
    tmp_path: Path, monkeypatch
) -> None:
    cut = _report(tmp_path / "cut", LORA + '<testcase time="0.000" />', monkeypatch, record=True)
    assert cut["cuda_tests"]["tests"]["interrupted"] == "failed"
    skipped = LORA.replace("/>", '><skipped message="no GPU memory"/></testcase>')
    res = _report(tmp_path / "clean", skipped, monkeypatch, onto=tmp_path / "cut" / "gpu_check.json")
    assert "interrupted" not in res["cuda_tests"]["tests"]
    assert res["recipes"]["7b_lora_grpo"]["ok"] is True and res["recipes"]["7b_lora_grpo"]["rl_steps"] == 1


def test_a_skipped_recipe_test_keeps_the_earlier_record(tmp_path: Path, monkeypatch) -> None:
    earlier = tmp_path / "earlier"
    earlier.mkdir()
    (earlier / "cuda_tests.xml").write_text(JUNIT)
    (earlier / "recipes.jsonl").write_text(
        json.dumps({"recipe": "r_search", "shape": "qwen2.5-3b", "rl_steps": 1, "peak_gb": 41.5, "step_s": 7.0}) + "\n"
    )
    monkeypatch.setattr("sys.argv", ["gpu_check.py", str(earlier)])
    gpu_check.main()
    later = tmp_path / "later"
    later.mkdir()
    skipped = JUNIT.replace('time="9.1"/>', 'time="0"><skipped message="not enough memory"/></testcase>')
    (later / "cuda_tests.xml").write_text(skipped)
    monkeypatch.setattr("sys.argv", ["gpu_check.py", str(later), "--onto", str(earlier / "gpu_check.json")])
    gpu_check.main()
    res = json.loads((later / "gpu_check.json").read_text())
    assert res["recipes"]["r_search"]["ok"] is True and res["recipes"]["r_search"]["peak_gb"] == 41.5
