"""Peer benchmark: TRL's GRPOTrainer and `searchrl train` on the identical RL work, in one run.

Work (both sides): SmolLM2-135M (the bundled model's directory), 16 questions of 2wiki-mini dev rendered with our
Search-R1 chat prompt, 4 prompts x group 4 per step, one turn, <= 64 new tokens at T = 1, KL coefficient 0.001 (k3),
one optimizer step per RL step, lr 1e-6, fp32 on the CPU. Each side runs ``--steps`` steps in its own process; the
first ``--warmup`` are dropped and the rest reported as medians.

TRL needs transformers >= 5, so it runs in a throwaway virtualenv (default ``runs/peer-trl-venv``, created on first
use: torch 2.13.0 from the machine's local CPU wheel first, then ``trl==<--trl-version>``) through a driver script
this file writes to a temp dir. The driver times TRL's phases by wrapping its own methods: ``_generate`` (generation),
``_get_per_token_logps_and_entropies`` under no_grad (reference / old log-probs), ``_calculate_rewards`` (reward);
"update" is the rest of the optimizer step (loss forward + backward + optimizer + TRL's bookkeeping).

FLOP bounds use the fp32 matmul peak measured in this run (best of 1024^3 and 4096x576x1536, before and after the
two sides). Formula, with N_body = non-embedding parameters and N_head = hidden x vocab (the output projection):
  a forward pass over S positions that computes logits at L of them costs 2*N_body*S + 2*N_head*L;
  backward is 2x forward (update = 3x forward); attention's context-length term is left out (<10% at these lengths).
- "nominal" (2N FLOPs per token): every row in full. generate = P + G positions, G logits; log-probs = two passes
  (old policy + reference) over P + R positions; update = one forward + backward over P + R. P, G, R = the side's own
  prompt, generated and response tokens summed over rows.
- "executed": the positions each side actually computes. Ours: the generator's prefill + decode row-steps (group
  rows share their prompt's prefill), and the trainer's per-phase scored positions (shared prompt prefixes, no
  old-log-prob pass, length-bucketed micro-batches). TRL: left-padded batches, B x (P_max + C_max) per scoring pass
  and B x P_max prefill + B x C_max decode steps in generation.

    flock /tmp/searchrl-cpu.lock python benchmarks/peer_trl_grpo.py [--steps 5] [--warmup 1] [--venv DIR]
    python benchmarks/peer_trl_grpo.py --device cuda --tokenizer QWEN_TOKENIZER_DIR   # the GPU comparison, see
                                                                                    # benchmarks/peer_trl_gpu.py

Writes benchmarks/results/peer_trl_grpo.{json,md}. Slow: ~10 min on 2 cores plus the venv install on first use.
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

import torch

from searchrl.utils import write_portable

ROOT = Path(__file__).resolve().parents[1]
RESULTS = Path(__file__).parent / "results"
DEFAULT_DATA = ROOT.parent / "shared" / "data" / "2wiki-mini"
LOCAL_TORCH = "torch==2.13.0"  # resolved from the machine's local CPU wheel; never a CUDA build
PHASES = ("generate", "logprob", "update")

DRIVER = r'''
"""TRL GRPOTrainer on the rendered prompts; phase timings by wrapping TRL's own methods. Args: one JSON file."""
import json, re, string, sys, time

import torch
from datasets import Dataset
from transformers import TrainerCallback
from trl import GRPOConfig, GRPOTrainer

a = json.load(open(sys.argv[1]))
torch.manual_seed(a["seed"])
rows = [json.loads(line) for line in open(a["prompts"])]
ds = Dataset.from_list([{"prompt": r["prompt"], "golds": r["golds"]} for r in rows])
ANSWER = re.compile(r"<answer>(.*?)</answer>", re.S)


def norm(s):
    s = "".join(ch for ch in s.lower() if ch not in set(string.punctuation))
    return " ".join(w for w in s.split() if w not in ("a", "an", "the"))


def exact_match(completions, golds, **_):
    out = []
    for c, g in zip(completions, golds):
        m = ANSWER.findall(c)
        out.append(float(bool(m) and norm(m[-1]) in {norm(x) for x in g}))
    return out


acc = {"generate_s": 0.0, "logprob_s": 0.0, "reward_s": 0.0, "prompt_tokens": 0, "generated_tokens": 0,
       "prompt_max": 0, "completion_max": 0, "rows": 0, "logprob_positions": 0, "logprob_logits": 0,
       "update_positions": 0, "update_logits": 0}


def wrap(name, fn, after=None):
    def inner(self, *args, **kw):
        grad = torch.is_grad_enabled()
        t0 = time.perf_counter()
        out = fn(self, *args, **kw)
        dt = time.perf_counter() - t0
        if after is not None:
            after(dt, grad, out, args, kw)
        else:
            acc[name] += dt
        return out
    return inner


def after_generate(dt, grad, out, args, kw):
    acc["generate_s"] += dt
    prompt_ids, completion_ids = out[0], out[1]
    acc["prompt_tokens"] += sum(len(p) for p in prompt_ids)
    acc["generated_tokens"] += sum(len(c) for c in completion_ids)
    acc["prompt_max"] = max(len(p) for p in prompt_ids)
    acc["completion_max"] = max(len(c) for c in completion_ids)
    acc["rows"] = len(completion_ids)


def after_logps(dt, grad, out, args, kw):
    input_ids = args[1] if len(args) > 1 else kw["input_ids"]
    keep = args[3] if len(args) > 3 else kw["logits_to_keep"]
    phase = "update" if grad else "logprob"
    if not grad:
        acc["logprob_s"] += dt
    acc[phase + "_positions"] += input_ids.numel()
    acc[phase + "_logits"] += input_ids.shape[0] * keep


GRPOTrainer._generate = wrap("generate_s", GRPOTrainer._generate, after_generate)
GRPOTrainer._get_per_token_logps_and_entropies = wrap(
    "logprob_s", GRPOTrainer._get_per_token_logps_and_entropies, after_logps)
GRPOTrainer._calculate_rewards = wrap("reward_s", GRPOTrainer._calculate_rewards)


class StepTimer(TrainerCallback):
    def __init__(self):
        self.steps, self.t0 = [], None

    def on_step_begin(self, args, state, control, **kw):
        for k in acc:
            acc[k] = 0.0 if k.endswith("_s") else 0
        self.t0 = time.perf_counter()

    def on_step_end(self, args, state, control, **kw):
        step_s = time.perf_counter() - self.t0
        rec = dict(acc, step=state.global_step, step_s=step_s)
        rec["update_s"] = step_s - acc["generate_s"] - acc["logprob_s"] - acc["reward_s"]
        self.steps.append(rec)
        print(json.dumps(rec), flush=True)


cfg = GRPOConfig(
    output_dir=a["output_dir"], max_steps=a["steps"], per_device_train_batch_size=a["rows"],
    gradient_accumulation_steps=1, num_generations=a["group"], max_completion_length=a["max_new_tokens"],
    beta=a["beta"], learning_rate=a["lr"], temperature=1.0, num_iterations=1, bf16=False, fp16=False,
    use_cpu=True, logging_steps=1, save_strategy="no", report_to="none", seed=a["seed"],
    dataloader_num_workers=0, disable_tqdm=True,
    gradient_checkpointing=False,  # TRL's default is on; ours is off: the same work on both sides
)
timer = StepTimer()
trainer = GRPOTrainer(model=a["model"], reward_funcs=exact_match, args=cfg, train_dataset=ds, callbacks=[timer])
trainer.train()
import trl, transformers
json.dump({"steps": timer.steps, "trl": trl.__version__, "transformers": transformers.__version__,
           "torch": torch.__version__, "torch_threads": torch.get_num_threads(),
           "loss_type": cfg.loss_type, "gradient_checkpointing": cfg.gradient_checkpointing},
          open(a["out"], "w"), indent=1)
'''


# ------------------------------------------------------------------------------------------------ measurement helpers
def matmul_peak(repeats: int = 5) -> dict[str, float]:
    """fp32 GFLOP/s of torch matmul on the issue's two shapes (best of ``repeats`` after a warm-up)."""
    out = {}
    for m, k, n in [(1024, 1024, 1024), (4096, 576, 1536)]:
        a, b = torch.randn(m, k), torch.randn(k, n)
        reps = max(1, int(2e10 // (2 * m * k * n)))  # ~20 GFLOP per timing
        torch.mm(a, b)
        best = float("inf")
        for _ in range(repeats):
            t0 = time.perf_counter()
            for _ in range(reps):
                torch.mm(a, b)
            best = min(best, time.perf_counter() - t0)
        out[f"{m}x{k}x{n}"] = round(2 * m * k * n * reps / best / 1e9, 1)
    return out


def run_child(cmd: list[str], log: Path, env: dict[str, str] | None = None, timeout: float = 3600) -> dict:
    """Run ``cmd`` with output to ``log``; wall seconds and the child's own peak RSS (wait4's rusage)."""
    t0 = time.perf_counter()
    with log.open("w") as f:
        proc = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT, env=env, cwd=ROOT)
        deadline = time.time() + timeout
        while True:
            pid, status, ru = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            if time.time() > deadline:
                proc.kill()
                pid, status, ru = os.wait4(proc.pid, 0)
                break
            time.sleep(0.2)
    proc.returncode = os.waitstatus_to_exitcode(status)
    wall = time.perf_counter() - t0
    # cpu_s / wall_s well under the thread count means other processes took the cores (a contended measurement)
    return {
        "exit": proc.returncode,
        "wall_s": round(wall, 1),
        "cpu_s": round(ru.ru_utime + ru.ru_stime, 1),
        "peak_rss_mb": round(ru.ru_maxrss / 1024, 1),
        "load_1m_after": round(os.getloadavg()[0], 2),
    }


def tail(log: Path, n: int = 1) -> str:
    lines = [ln for ln in log.read_text(errors="replace").splitlines() if ln.strip()]
    return " | ".join(lines[-n:]) if lines else "(no output)"


def ensure_venv(venv: Path, trl_version: str) -> Path:
    """A throwaway virtualenv with TRL (transformers >= 5) and the local CPU torch; created once, reused after."""
    py = venv / "bin" / "python"
    check = [str(py), "-c", "import trl, sys; sys.exit(trl.__version__ != sys.argv[1])", trl_version]
    if py.exists() and subprocess.run(check, capture_output=True, timeout=120).returncode == 0:
        return py
    venv.parent.mkdir(parents=True, exist_ok=True)
    print(f"creating {venv} (torch 2.13.0 CPU from the local wheel, then trl=={trl_version}) ...", flush=True)
    steps = [
        [sys.executable, "-m", "venv", str(venv)],
        [str(py), "-m", "pip", "install", "-q", "--disable-pip-version-check", LOCAL_TORCH],
        [str(py), "-m", "pip", "install", "-q", "--disable-pip-version-check", f"trl=={trl_version}"],
    ]
    for cmd in steps:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
        if r.returncode:
            last = (r.stderr.strip().splitlines() or ["?"])[-1]
            raise SystemExit(f"peer venv: '{shlex.join(cmd)}' failed ({last}); delete {venv} and retry")
    if subprocess.run(check, capture_output=True, timeout=120).returncode:
        raise SystemExit(f"peer venv: trl=={trl_version} does not import in {venv}; delete it and retry")
    return py


def model_sizes(model_dir: str) -> dict[str, int]:
    """N_body (non-embedding parameters) and N_head (hidden x vocab) of the policy, counted from its weights."""
    from transformers import AutoModelForCausalLM

    m = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    emb = m.get_input_embeddings().weight
    head = m.get_output_embeddings().weight
    total = sum(p.numel() for p in {id(p): p for p in m.parameters()}.values())
    body = total - emb.numel() - (0 if head is emb else head.numel())
    return {"n_body": body, "n_head": head.numel(), "tied_embeddings": int(head is emb), "total": total}


def forward_flops(sizes: dict[str, int], positions: float, logits: float) -> float:
    return 2 * sizes["n_body"] * positions + 2 * sizes["n_head"] * logits


def med(rows: list[dict], key: str) -> float:
    return float(statistics.median(r[key] for r in rows))


# ------------------------------------------------------------------------------------------------ the two sides
def render_prompts(data_dir: Path, n: int, model_dir: str) -> list[dict]:
    from transformers import AutoTokenizer

    from searchrl.protocols import get_protocol
    from searchrl.rollout.engine import build_prompt_text

    tok = AutoTokenizer.from_pretrained(model_dir)
    protocol = get_protocol("search_r1")
    rows = [json.loads(line) for line in (data_dir / "dev.jsonl").open()][:n]
    return [{"prompt": build_prompt_text(protocol, tok, r["question"]), "golds": r["golden_answers"]} for r in rows]


def ours_command(args, out_dir: Path) -> list[str]:
    return [
        sys.executable,
        "-m",
        "searchrl.cli",
        "train",
        "--recipe",
        "demo",
        f"data.source={args.data}",
        "data.train=dev.jsonl",
        f"data.train_limit={args.prompts}",
        "training.prompts_per_step=4",
        "rollout.group_size=4",
        "rollout.max_new_tokens=64",
        "rollout.max_turns=1",
        "rollout.max_searches=0",
        "rollout.force_answer=false",
        "algorithm.mini_batch_size=16",
        "training.lr=1e-6",
        "algorithm.kl_coef=0.001",
        f"training.steps={args.steps}",
        f"training.output_dir={out_dir}",
        f"retrieval.index={out_dir.parent / 'index-bm25'}",
    ]


def run_ours(args, tmp: Path, sizes: dict[str, int]) -> dict:
    out_dir = tmp / "ours"
    cmd = ours_command(args, out_dir)
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
    print("ours:", shlex.join(cmd), flush=True)
    proc = run_child(cmd, tmp / "ours.log", env=env)
    if proc["exit"]:
        raise SystemExit(f"searchrl train failed (exit {proc['exit']}): {tail(tmp / 'ours.log', 3)}")
    rows = [json.loads(line) for line in (out_dir / "metrics.jsonl").open()]
    steps = []
    for r in rows:
        P, G, R = r["tokens/prompt"], r["tokens/generated"], r["tokens/response"]
        steps.append(
            {
                "step": int(r["step"]),
                "step_s": r["time/step_s"],
                "generate_s": r["time/generate_s"],
                "logprob_s": r["time/logprob_s"],
                "update_s": r["time/update_s"],
                "reward_s": r["time/reward_s"] + r["time/retrieve_s"],
                "prompt_tokens": P,
                "generated_tokens": G,
                "response_tokens": R,
                "flops_executed": {
                    # decode row-steps compute one position each; logits at every sampled token
                    "generate": forward_flops(
                        sizes, r.get("gen/prefill_tokens", P) + r.get("gen/decode_row_steps", G), G
                    ),
                    # one no-grad pass here (the reference; old log-probs come from the rollout): logits at G tokens
                    "logprob": forward_flops(sizes, r.get("tokens/scored_logprob", 0.0), G),
                    "update": 3 * forward_flops(sizes, r.get("tokens/scored_update", P + R), G),
                },
                "scored_positions": {
                    "logprob": r.get("tokens/scored_logprob"),
                    "update": r.get("tokens/scored_update"),
                },
            }
        )
    return {"process": proc, "command": shlex.join(cmd), "steps": steps}


def run_trl(args, tmp: Path, py: Path, model_dir: str, prompts_file: Path, sizes: dict[str, int]) -> dict:
    driver, cfg = tmp / "trl_driver.py", tmp / "trl_args.json"
    driver.write_text(DRIVER)
    out = tmp / "trl_out.json"
    cfg.write_text(
        json.dumps(
            {
                "model": model_dir,
                "prompts": str(prompts_file),
                "steps": args.steps,
                "rows": 16,
                "group": 4,
                "max_new_tokens": 64,
                "beta": 0.001,
                "lr": 1e-6,
                "seed": 0,
                "output_dir": str(tmp / "trl"),
                "out": str(out),
            }
        )
    )
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
    cmd = [str(py), str(driver), str(cfg)]
    print("trl:", shlex.join(cmd), flush=True)
    proc = run_child(cmd, tmp / "trl.log", env=env)
    if proc["exit"] or not out.exists():
        raise SystemExit(f"TRL driver failed (exit {proc['exit']}): {tail(tmp / 'trl.log', 3)}")
    res = json.loads(out.read_text())
    steps = []
    for s in res["steps"]:
        B, P, G = s["rows"], s["prompt_tokens"], s["generated_tokens"]
        C = s["completion_max"]
        steps.append(
            {
                "step": s["step"],
                "step_s": s["step_s"],
                "generate_s": s["generate_s"],
                "logprob_s": s["logprob_s"],
                "update_s": s["update_s"],
                "reward_s": s["reward_s"],
                "prompt_tokens": P,
                "generated_tokens": G,
                "response_tokens": G,
                "flops_executed": {
                    "generate": forward_flops(sizes, B * (s["prompt_max"] + C), B * C),
                    "logprob": forward_flops(sizes, s["logprob_positions"], s["logprob_logits"]),
                    "update": 3 * forward_flops(sizes, s["update_positions"], s["update_logits"]),
                },
                "scored_positions": {"logprob": s["logprob_positions"], "update": s["update_positions"]},
            }
        )
    meta = {
        k: res[k] for k in ("trl", "transformers", "torch", "torch_threads", "loss_type", "gradient_checkpointing")
    }
    return {"process": proc, "command": shlex.join(cmd), "driver": DRIVER, "steps": steps, **meta}


def nominal_flops(sizes: dict[str, int], s: dict) -> dict[str, float]:
    P, G, R = s["prompt_tokens"], s["generated_tokens"], s["response_tokens"]
    full = forward_flops(sizes, P + R, R)
    return {"generate": forward_flops(sizes, P + G, G), "logprob": 2 * full, "update": 3 * full}


def summarise(side: dict, sizes: dict[str, int], peak: float, warmup: int) -> dict:
    timed = side["steps"][warmup:]
    for s in timed:
        s["flops_nominal"] = nominal_flops(sizes, s)
    out: dict = {"steps_timed": len(timed), "step_s": round(med(timed, "step_s"), 2)}
    for ph in (*PHASES, "reward"):
        out[f"{ph}_s"] = round(med(timed, f"{ph}_s"), 2)
    for k in ("prompt_tokens", "generated_tokens", "response_tokens"):
        out[k] = med(timed, k)
    out["scored_positions"] = {
        ph: statistics.median(s["scored_positions"][ph] or 0 for s in timed) for ph in ("logprob", "update")
    }
    for kind in ("nominal", "executed"):
        bound = {ph: statistics.median(s[f"flops_{kind}"][ph] for s in timed) / (peak * 1e9) for ph in PHASES}
        total = sum(bound.values())
        out[kind] = {
            "tflop": {ph: round(statistics.median(s[f"flops_{kind}"][ph] for s in timed) / 1e12, 3) for ph in PHASES},
            "bound_s": {ph: round(v, 2) for ph, v in bound.items()} | {"step": round(total, 2)},
            "share_of_bound": {ph: round(bound[ph] / out[f"{ph}_s"], 3) if out[f"{ph}_s"] else None for ph in PHASES}
            | {"step": round(total / out["step_s"], 3)},
            "step_over_bound": round(out["step_s"] / total, 2),
        }
    return out


# ------------------------------------------------------------------------------------------------ report
def write_report(result: dict) -> None:
    RESULTS.mkdir(parents=True, exist_ok=True)
    write_portable(RESULTS / "peer_trl_grpo.json", json.dumps(result, indent=2) + "\n")
    o, t = result["ours"]["summary"], result["trl"]["summary"]
    peak = result["matmul_peak_gflops"]
    acc = result["acceptance"]

    def row(name, s, proc):
        n, e = s["nominal"]["share_of_bound"], s["executed"]["share_of_bound"]
        return (
            f"| {name} | {s['step_s']} | {s['generate_s']} / {s['logprob_s']} / {s['update_s']} | "
            f"{s['generated_tokens']:.0f} | {s['scored_positions']['logprob']:.0f} / "
            f"{s['scored_positions']['update']:.0f} | "
            + " / ".join(f"{n[p]:.0%}" for p in PHASES)
            + f" ({n['step']:.0%}) | "
            + " / ".join(f"{e[p]:.0%}" for p in PHASES)
            + f" ({e['step']:.0%}) | {proc['peak_rss_mb']:.0f} |"
        )

    lines = [
        "# Peer benchmark: searchrl train vs TRL GRPOTrainer",
        "",
        f"One run, {result['torch_threads']} torch threads, {result['steps']} steps per side, first "
        f"{result['warmup']} dropped, medians of the rest. Work: {result['work']}.",
        f"fp32 matmul peak measured in this run: {peak['used']} GFLOP/s (before: {peak['before']}, after: "
        f"{peak['after']}). Model: N_body = {result['model_sizes']['n_body'] / 1e6:.1f} M non-embedding parameters, "
        f"N_head = {result['model_sizes']['n_head'] / 1e6:.1f} M (output projection).",
        "",
        "| side | s / step | generate / log-probs / update s | generated tokens | scored positions (log-probs / "
        "update) | share of nominal bound (gen / lp / upd (step)) | share of executed bound (gen / lp / upd (step)) "
        "| peak RSS MB |",
        "|---|---|---|---|---|---|---|---|",
        row("searchrl train", o, result["ours"]["process"]),
        row(f"TRL {result['trl']['trl']} GRPOTrainer", t, result["trl"]["process"]),
        "",
        f"Ours / TRL step time: **{acc['ratio_to_trl']:.2f}x** (target <= 0.5x).",
        "",
        "Whole process, start-up included (CPU s / wall s; a ratio well under the thread count means other processes "
        "took cores during the run): "
        + "; ".join(
            f"{n} {result[k]['process']['cpu_s']} / {result[k]['process']['wall_s']}, 1-min load after "
            f"{result[k]['process']['load_1m_after']}"
            for n, k in (("ours", "ours"), ("TRL", "trl"))
        )
        + ".",
        "",
        "| FLOP bound (s, at the measured peak) | generate | log-probs | update | step | measured step / bound |",
        "|---|---|---|---|---|---|",
    ]
    for name, s in (("ours", o), ("TRL", t)):
        for kind in ("nominal", "executed"):
            b = s[kind]["bound_s"]
            lines.append(
                f"| {name}, {kind} | {b['generate']} | {b['logprob']} | {b['update']} | {b['step']} | "
                f"{s[kind]['step_over_bound']}x |"
            )
    lines += [
        "",
        "## Targets, ours",
        "",
        "| target | measured | met |",
        "|---|---|---|",
        *[f"| {k} | {v['measured']} | {'yes' if v['met'] else 'no'} |" for k, v in acc["targets"].items()],
        "",
        "## How counted",
        "",
        *[f"- {line}" for line in result["notes"]],
        "",
        "## Commands",
        "",
        "```",
        result["command"],
        "# ours (run by the benchmark):",
        result["ours"]["command"],
        "# TRL (driver written by the benchmark; see the JSON for its text):",
        result["trl"]["command"],
        "```",
    ]
    write_portable(RESULTS / "peer_trl_grpo.md", "\n".join(lines) + "\n")
    print("\n".join(lines))


def acceptance(o: dict, t: dict) -> dict:
    ratio = o["step_s"] / t["step_s"]
    targets = {"ours / TRL step <= 0.5": (round(ratio, 2), ratio <= 0.5)}
    # targets on the executed work only: the nominal bound counts passes neither side runs (an old-policy pass, every
    # row in full), so a share of it is no measure of speed; it stays in the report as a reference
    for kind in ("executed",):
        s = o[kind]
        targets[f"step <= 1.4x {kind} bound"] = (s["step_over_bound"], s["step_over_bound"] <= 1.4)
        sh = s["share_of_bound"]
        targets[f"generation >= 40% of {kind} bound"] = (sh["generate"], sh["generate"] >= 0.40)
        targets[f"log-probs >= 70% of {kind} bound"] = (sh["logprob"], sh["logprob"] >= 0.70)
        targets[f"update >= 70% of {kind} bound"] = (sh["update"], sh["update"] >= 0.70)
    return {
        "ratio_to_trl": round(ratio, 3),
        "targets": {k: {"measured": m, "met": bool(ok)} for k, (m, ok) in targets.items()},
    }


def main() -> None:
    if "--device" in sys.argv:  # --device cuda: the GPU comparison (random-init Qwen2.5 shapes, bf16 mixed precision)
        i = sys.argv.index("--device")
        device = sys.argv[i + 1] if i + 1 < len(sys.argv) else ""
        rest = sys.argv[1:i] + sys.argv[i + 2 :]
        if device == "cuda":
            sys.path.insert(0, str(Path(__file__).parent))
            from peer_trl_gpu import main as gpu_main

            gpu_main(rest)
            return
        if device != "cpu":
            raise SystemExit(f"--device {device}: use cpu (the default) or cuda")
        sys.argv = [sys.argv[0], *rest]
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--prompts", type=int, default=16, help="questions of dev.jsonl both sides train on")
    ap.add_argument("--data", default=str(DEFAULT_DATA), help="the 2wiki-mini directory (dev.jsonl, corpus.jsonl)")
    ap.add_argument("--venv", default=str(ROOT / "runs" / "peer-trl-venv"))
    ap.add_argument("--trl-version", default="1.16.0")
    ap.add_argument("--model", default="smollm2-135m-instruct")
    args = ap.parse_args()
    if args.steps <= args.warmup:
        raise SystemExit("--steps must exceed --warmup (at least one timed step)")
    data = Path(args.data)
    if not (data / "dev.jsonl").exists():
        raise SystemExit(f"{data}/dev.jsonl not found; pass --data <2wiki-mini directory>")
    args.data = str(data.resolve())
    from searchrl.models import resolve_policy

    model_dir = str(resolve_policy(args.model))
    py = ensure_venv(Path(args.venv), args.trl_version)
    sizes = model_sizes(model_dir)
    peak_before = matmul_peak()
    with tempfile.TemporaryDirectory(prefix="peer-trl-") as tmp_s:
        tmp = Path(tmp_s)
        prompts = render_prompts(data, args.prompts, model_dir)
        prompts_file = tmp / "prompts.jsonl"
        prompts_file.write_text("".join(json.dumps(p) + "\n" for p in prompts))
        ours = run_ours(args, tmp, sizes)
        trl = run_trl(args, tmp, py, model_dir, prompts_file, sizes)
    peak_after = matmul_peak()
    peak = max(*peak_before.values(), *peak_after.values())
    ours["summary"] = summarise(ours, sizes, peak, args.warmup)
    trl["summary"] = summarise(trl, sizes, peak, args.warmup)
    result = {
        "command": "flock /tmp/searchrl-cpu.lock " + shlex.join([Path(sys.executable).name, *sys.argv]),
        "steps": args.steps,
        "warmup": args.warmup,
        "torch_threads": torch.get_num_threads(),
        "work": f"{model_dir.rsplit('/', 1)[-1]}, {args.prompts} questions of 2wiki-mini dev (Search-R1 chat prompt), "
        "4 prompts x group 4, one turn, <= 64 new tokens, KL 0.001, one optimizer step per RL step, lr 1e-6",
        "model_dir": model_dir,
        "model_sizes": sizes,
        "matmul_peak_gflops": {"before": peak_before, "after": peak_after, "used": peak},
        "ours": ours,
        "trl": trl,
        "acceptance": acceptance(ours["summary"], trl["summary"]),
        "notes": [
            "forward FLOPs over S positions with logits at L of them = 2*N_body*S + 2*N_head*L; update = 3x forward "
            "(forward + backward); attention's context term is not counted.",
            "nominal: every row in full (generate P+G positions; log-probs = old-policy + reference passes over "
            "P+R; update over P+R), 2N FLOPs per token plus the output projection at response positions.",
            "executed: ours = generator prefill + decode row-steps and the trainer's scored positions per phase "
            "(shared prompt prefixes, old log-probs from the rollout, so one reference pass); TRL = its padded "
            "batches (B x (P_max + C_max) per scoring pass; generation B x P_max prefill + B x C_max decode).",
            "TRL's phases come from wrapping its methods: generate = _generate, log-probs = no-grad "
            "_get_per_token_logps_and_entropies (reference pass; TRL skips the old-policy pass at one iteration), "
            "update = the rest of the optimizer step (loss forward/backward, optimizer, bookkeeping).",
            "TRL stops a completion at EOS or 64 tokens; ours also stops at the protocol's stop strings "
            "(</search>, </answer>), so the sides generate different token counts; the bounds use each side's own.",
            "TRL runs with bf16=False (fp32, like ours: bf16 matmul is slower on this CPU), its default loss_type "
            f"({trl.get('loss_type')}), gradient_checkpointing={trl.get('gradient_checkpointing')} (TRL's default "
            "is on, ours off: set off so both sides do the same work), exact-match reward written in the driver; "
            "glibc's default allocator (ours "
            "raises the malloc trim/mmap thresholds, searchrl.utils.tune_allocator).",
            "peak RSS: each side's process, from wait4's rusage (ru_maxrss); both hold a policy and a frozen "
            "reference copy.",
        ],
    }
    write_report(result)


if __name__ == "__main__":
    main()
