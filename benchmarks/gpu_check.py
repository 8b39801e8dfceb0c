"""Assemble ``gpu_check.{json,md}`` from one run of ``benchmarks/gpu_check.sh`` (its output directory).

Reads the cuda tests' JUnit XML, the per-recipe records the tests append (``recipes.jsonl``), the TRL comparison
(``peer_trl_gpu.json``) and the device line, and writes ``gpu_check.json`` / ``gpu_check.md`` into the run
directory (and, with ``--results``, into benchmarks/results/ as well). Nothing here is measured: it only reports.

JSON keys: ``device``, ``torch``, ``transformers``, ``cuda_tests`` {``passed``, ``failed``, ``skipped``, ``tests``},
``recipes`` {name: {``ok``, ``rl_steps``, ``peak_gb``}}, ``peer_trl`` {shape: {``ours_s``, ``trl_s``, ``ratio``}}.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import re
import shutil
import xml.etree.ElementTree as ET
from pathlib import Path

from searchrl.utils import write_portable

RESULTS = Path(__file__).parent / "results"


def junit(path: Path) -> dict:
    """{passed, failed, skipped, tests: {test id: outcome}} from a pytest JUnit XML file (empty if absent)."""
    out = {"passed": 0, "failed": 0, "skipped": 0, "tests": {}}
    if not path.exists():
        return out
    for case in ET.parse(path).getroot().iter("testcase"):
        if not case.get("name"):  # pytest interrupted (the phase's timeout): the test that was running, unnamed
            name, outcome = "interrupted", "failed"
            out[outcome] += 1
            out["tests"][name] = outcome
            continue
        name = f"{case.get('classname', '')}::{case.get('name', '')}".rsplit(".", 1)[-1]
        if case.find("failure") is not None or case.find("error") is not None:
            outcome = "failed"
        elif case.find("skipped") is not None:
            outcome = "skipped"
        else:
            outcome = "passed"
        out[outcome] += 1
        out["tests"][name] = outcome
    return out


def records(run: Path) -> dict[str, dict]:
    """The per-recipe records the cuda tests appended to ``recipes.jsonl`` (the last per recipe)."""
    out = {}
    log = run / "recipes.jsonl"
    if log.exists():
        for line in log.read_text().splitlines():
            rec = json.loads(line)
            out[rec["recipe"]] = rec
    return out


def recipes(records: dict[str, dict], tests: dict[str, str]) -> dict:
    """Per recipe: ``ok`` from its test's outcome, ``rl_steps`` / ``peak_gb`` / ``step_s`` from its record."""
    out = {}
    for test, outcome in tests.items():
        if "test_recipe_rl_stage_on_cuda[" in test and outcome != "skipped":  # skipped: not measured, kept as was
            name = test.split("[", 1)[1].rstrip("]")
            rec = records.get(name, {})
            out[name] = {
                "ok": outcome == "passed",
                "rl_steps": rec.get("rl_steps", 0),
                "peak_gb": rec.get("peak_gb"),
                "reserved_gb": rec.get("reserved_gb"),
                "step_s": rec.get("step_s"),
                "shape": rec.get("shape"),
            }
    lora = next((outcome for test, outcome in tests.items() if "test_7b_lora_grpo_step" in test), None)
    lora = None if lora == "skipped" else lora  # not measured: an earlier report's record stays
    if "7b_lora_grpo" in records or lora is not None:
        rec = records.get("7b_lora_grpo", {"rl_steps": 0, "peak_gb": None, "step_s": None, "shape": None})
        out["7b_lora_grpo"] = {
            "ok": lora == "passed",
            "rl_steps": rec["rl_steps"],
            "peak_gb": rec["peak_gb"],
            "step_s": rec["step_s"],
            "shape": rec["shape"],
        }
    return out


def portable_commands(rec: dict) -> dict:
    """A peer record with its commands written as a user would type them: ``python``, not the GPU machine's
    interpreter path, and ``<workdir>`` for the scratch directory."""
    out = dict(rec)
    for key in ("ours_command", "trl_command"):
        if isinstance(out.get(key), str):
            cmd = re.sub(r"^\S*/python3?\b", "python", out[key])
            out[key] = re.sub(r"=/\S*/((?:ours|trl)-[\w.-]+)", r"=<workdir>/\1", cmd)
    return out


def versions(run: Path) -> dict[str, str]:
    """torch / transformers of the GPU machine (``versions.json``, written there), else of this interpreter."""
    if (run / "versions.json").exists():
        return json.loads((run / "versions.json").read_text())
    import torch
    import transformers

    return {"torch": torch.__version__, "transformers": transformers.__version__}


def markdown(res: dict) -> str:
    lines = [
        f"# GPU check ({res['date']})",
        "",
        f"Device: {res['device']}; torch {res['torch']}, transformers "
        f"{res['transformers']}; {res['seconds']} s in all (`bash benchmarks/gpu_check.sh`).",
        *([f"{res['note']}"] if res.get("note") else []),
        "",
        f"## CUDA tests: {res['cuda_tests']['passed']} passed, {res['cuda_tests']['failed']} failed, "
        f"{res['cuda_tests']['skipped']} skipped",
        "",
        "| test | outcome |",
        "|---|---|",
    ]
    lines += [f"| `{t}` | {o} |" for t, o in sorted(res["cuda_tests"]["tests"].items())]
    lines += [
        "",
        "## Recipes: one RL step with evaluation, bf16 mixed precision",
        "",
        "| recipe | shape | ok | RL steps | peak allocated GB | peak reserved GB | step s |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, r in res["recipes"].items():
        lines.append(
            f"| {name} | {r.get('shape')} | {r['ok']} | {r['rl_steps']} | {_f(r.get('peak_gb'))} | "
            f"{_f(r.get('reserved_gb'))} | {_f(r.get('step_s'))} |"
        )
    lines += [
        "",
        "## GRPO step against TRL on the same GPU",
        "",
        "| shape | ours s | TRL s | ours / TRL | ours peak GB | TRL peak GB | work |",
        "|---|---|---|---|---|---|---|",
    ]
    for shape, p in res["peer_trl"].items():
        lines.append(
            f"| {shape} | {p['ours_s']} | {p['trl_s'] or '-'} | {p['ratio'] or '-'} | {_f(p.get('ours_peak_gb'))} | "
            f"{_f(p.get('trl_peak_gb'))} | {p.get('work', '')} |"
        )
    ro = res.get("rollout") or {}
    if ro:
        head = f"matmul peak {ro['matmul_peak_tflops']:.1f} TFLOP/s, copy {ro['copy_bandwidth_gbs']:.0f} GB/s"
        lines += [
            "",
            f"## Decode and update against the bound ({head})",
            "",
            "| shape | weights | batch | ours ms/step | with the call's capture | graph capture ms "
            "| compiled ms/step | HF static ms/step | bound ms | ours / bound | compiled / bound | rollout tokens/s |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|",
        ]
        for r in ro["runs"]:
            if "batch" in r:
                with_capture, capture = _f(r.get("ours_step_ms_with_capture")), _f(r.get("graph_capture_ms"))
                weights = "fp32 + bf16 autocast" if r.get("layout") == "master" else "bf16"
                lines.append(
                    f"| {r['shape']} | {weights} | {r['batch']} | {r['ours_step_ms']:.1f} | {with_capture} "
                    f"| {capture} | {_f(r.get('compiled_step_ms'))} | {_f(r.get('hf_static_step_ms'))} "
                    f"| {r['bound_step_ms']:.2f} | {r['decode_vs_bound']:.1f} | {_f(r.get('compiled_vs_bound'))} "
                    f"| {_f(r.get('rollout_tokens_per_s'))} |"
                )
        lines += [f"- update MFU {r['shape']}: {r['update_mfu']:.2f}" for r in ro["runs"] if "update_mfu" in r]
    return "\n".join(lines) + "\n"


def merge_rollout(old: dict, new: dict) -> dict:
    """``new``'s runs replace ``old``'s of the same shape, batch and weights (or the same shape's update); the other
    keys are ``new``'s, the acceptance keys kept from ``old`` where ``new`` did not measure them."""
    if not old:
        return new
    key = lambda r: (r["shape"], r.get("batch", "update"), r.get("layout", "bf16"))  # noqa: E731
    runs = {key(r): r for r in old.get("runs", [])}
    runs.update({key(r): r for r in new.get("runs", [])})
    return {**old, **new, "runs": list(runs.values())}


def _f(x) -> str:
    return "-" if x is None else f"{x:.2f}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument(
        "runs",
        nargs="+",
        help="output directories of benchmarks/gpu_check.sh (their logs unpacked), oldest first: several runs merge, "
        "a later run's test outcome, record or shape replacing an earlier one's; the report goes to the last",
    )
    ap.add_argument("--seconds", type=int, default=0, help="the check's wall time")
    ap.add_argument("--results", action="store_true", help="also copy the report into benchmarks/results/")
    ap.add_argument(
        "--onto",
        type=Path,
        help="an earlier report (e.g. benchmarks/results/gpu_check.json) that these runs update: its test outcomes, "
        "recipes, TRL pairs and rollout records stay where the runs did not measure them again",
    )
    ap.add_argument("--note", default="", help="a line for the report (e.g. how several runs were combined)")
    args = ap.parse_args()
    runs = [Path(r) for r in args.runs]
    run = runs[-1]
    base = json.loads(args.onto.read_text()) if args.onto else {}
    outcomes: dict[str, str] = {}
    recs: dict[str, dict] = {}
    peer: dict = dict(base.get("peer_trl", {}))
    rollout: dict = base.get("rollout", {})
    for r in runs:
        ran = junit(r / "cuda_tests.xml")["tests"]
        if ran:  # a run of the tests: an earlier run's cut test is not carried on
            outcomes.pop("interrupted", None)
        outcomes.update(ran)
        recs.update(records(r))
        if (r / "peer_trl_gpu.json").exists():
            shapes = json.loads((r / "peer_trl_gpu.json").read_text())
            for shape, rec in shapes.items():  # ours alone (TRL's side cut short) never replaces a full pair
                if rec.get("trl_s") is not None or shape not in peer:
                    peer[shape] = portable_commands(rec)
        if (r / "gpu_rollout.json").exists():
            rollout = merge_rollout(rollout, json.loads((r / "gpu_rollout.json").read_text()))
    measured = recipes(recs, outcomes)
    earlier = {
        k: v for k, v in base.get("cuda_tests", {}).get("tests", {}).items() if k != "interrupted" or not outcomes
    }
    outcomes = {**earlier, **outcomes}
    tests = {o: sum(v == o for v in outcomes.values()) for o in ("passed", "failed", "skipped")}
    first = next((r for r in runs if (r / "device.txt").exists()), None)
    res = {
        "date": dt.date.today().isoformat(),
        "device": (first / "device.txt").read_text().strip() if first else base.get("device", "unknown"),
        **({k: base[k] for k in ("torch", "transformers")} if base and not first else versions(first or run)),
        "seconds": args.seconds,
        "note": args.note,
        "cuda_tests": {**tests, "tests": outcomes},
        "recipes": {**base.get("recipes", {}), **measured},
        "peer_trl": peer,
        "rollout": rollout,
    }
    write_portable(run / "gpu_check.json", json.dumps(res, indent=1))  # no machine paths in shared results
    write_portable(run / "gpu_check.md", markdown(res))
    if args.results:
        for name in ("gpu_check.json", "gpu_check.md"):
            shutil.copy(run / name, RESULTS / name)
        if any((r / "gpu_rollout.json").exists() for r in runs):  # the decode records, merged as in the report
            write_portable(RESULTS / "gpu_rollout.json", json.dumps(rollout, indent=1))
    print(markdown(res))


if __name__ == "__main__":
    main()
