"""TRL's GRPOTrainer and `searchrl train` on identical GRPO work on one GPU, in bf16 mixed precision.

Run through ``python benchmarks/peer_trl_grpo.py --device cuda`` (or this file directly). Work, both sides: a
random-init policy of a Qwen2.5 shape (``--shapes``; the real Qwen tokenizer, ``--tokenizer``), fp32 master weights
with bf16 autocast (TRL ``bf16=True``; ours ``training.precision=bf16``), ``--prompts`` questions of the synthetic
world rendered with our Search-R1 chat prompt, group ``--group``, one turn, ``--max-new-tokens`` new tokens at T = 1,
KL coefficient 0.001 (a frozen reference on both sides), one optimizer step per RL step over all rows, lr 1e-6.
A random policy rarely writes EOS or a stop string, so both sides generate close to the full length: equal work.

Each side runs ``--steps`` steps in its own process; the first ``--warmup`` are dropped, the rest reported as
medians. Peak memory: ``torch.cuda.max_memory_allocated`` / ``max_memory_reserved``: for TRL over its whole process,
for ours the largest of the timed steps' peaks (the trainer resets the counter at each step's start; the model and
optimizer state it holds are in every step's peak, the one-time setup before the first step is not).
TRL must import in the interpreter given by ``--python`` (on a GPU machine without a registry: carried wheels).

Writes ``--out`` (JSON): {shape: {ours_s, trl_s, ratio, ours_phases, trl_phases, ours_peak_gb, trl_peak_gb}}.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

DRIVER = r"""
import json, sys, time
import torch
from datasets import Dataset
from transformers import AutoTokenizer, AutoModelForCausalLM, Qwen2Config, TrainerCallback
from trl import GRPOConfig, GRPOTrainer

a = json.load(open(sys.argv[1]))
torch.manual_seed(0)
rows = [json.loads(line) for line in open(a["prompts"])]
ds = Dataset.from_list([{"prompt": r["prompt"]} for r in rows])
tok = AutoTokenizer.from_pretrained(a["tokenizer"])
tok.padding_side = "left"
if tok.pad_token is None:
    tok.pad_token = tok.eos_token
# TRL builds its reference model from the policy's path: the random-init policy goes to disk first, and TRL loads
# both from there (fp32, its default), as it would a hub checkpoint
with torch.device(a["device"]):
    AutoModelForCausalLM.from_config(Qwen2Config(**a["config"]), dtype=torch.float32).save_pretrained(a["model_dir"])
tok.save_pretrained(a["model_dir"])
sync = torch.cuda.synchronize if a["device"] == "cuda" else (lambda: None)


def zero_reward(completions, **_):
    return [0.0 for _ in completions]


class StepTimer(TrainerCallback):
    def __init__(self):
        self.steps, self.t0 = [], None

    def on_step_begin(self, args, state, control, **kw):
        sync()
        self.t0 = time.perf_counter()

    def on_step_end(self, args, state, control, **kw):
        sync()
        self.steps.append({"step": state.global_step, "step_s": time.perf_counter() - self.t0})
        print(json.dumps(self.steps[-1]), flush=True)


cfg = GRPOConfig(
    output_dir=a["output_dir"], max_steps=a["steps"], per_device_train_batch_size=a["rows"],
    gradient_accumulation_steps=1, num_generations=a["group"], max_completion_length=a["max_new_tokens"],
    beta=0.001, learning_rate=1e-6, temperature=1.0, num_iterations=1, bf16=a["device"] == "cuda", logging_steps=1,
    use_cpu=a["device"] == "cpu",
    save_strategy="no", report_to="none", seed=0, dataloader_num_workers=0, disable_tqdm=True,
    gradient_checkpointing=False,  # TRL's default is on; ours is off: the same work on both sides
)
timer = StepTimer()
trainer = GRPOTrainer(model=a["model_dir"], processing_class=tok, reward_funcs=zero_reward, args=cfg, train_dataset=ds,
                      callbacks=[timer])
trainer.train()
import trl, transformers
cuda = a["device"] == "cuda"
json.dump({"steps": timer.steps, "trl": trl.__version__, "transformers": transformers.__version__,
           "gradient_checkpointing": cfg.gradient_checkpointing,
           "peak_allocated_gb": torch.cuda.max_memory_allocated() / 2**30 if cuda else 0.0,
           "peak_reserved_gb": torch.cuda.max_memory_reserved() / 2**30 if cuda else 0.0}, open(a["out"], "w"))
"""


def render_prompts(n: int, tokenizer: str) -> list[dict]:
    """The first ``n`` training questions of the 200-entity synthetic world in our Search-R1 chat prompt."""
    from transformers import AutoTokenizer

    from searchrl.config import load_config
    from searchrl.pipeline import load_split
    from searchrl.protocols import get_protocol
    from searchrl.rollout.engine import build_prompt_text

    cfg = load_config("demo", ["data.source=synthetic", "data.world.entities=200"])
    tok = AutoTokenizer.from_pretrained(tokenizer)
    protocol = get_protocol("search_r1")
    return [{"prompt": build_prompt_text(protocol, tok, ex.question)} for ex in load_split(cfg, "train", n)]


def run(cmd: list[str], log: Path, env: dict[str, str], timeout: float) -> int:
    with log.open("w") as f:
        return subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, env=env, timeout=timeout).returncode


def tail(log: Path, n: int = 3) -> str:
    return " | ".join([ln for ln in log.read_text(errors="replace").splitlines() if ln.strip()][-n:])


def ours(args, shape: str, tmp: Path, env: dict[str, str]) -> dict:
    out = tmp / f"ours-{shape}"
    cmd = [
        args.python,
        "-m",
        "searchrl.cli",
        "train",
        "--recipe",
        "demo",
        f"model.policy=random:{shape}:{args.tokenizer}",
        f"model.device={args.device}",
        f"training.precision={'bf16' if args.device == 'cuda' else 'fp32'}",
        "data.world.entities=200",
        "data.source=synthetic",
        f"training.prompts_per_step={args.prompts}",
        f"rollout.group_size={args.group}",
        f"rollout.max_new_tokens={args.max_new_tokens}",
        "rollout.max_turns=1",
        "rollout.max_searches=0",
        "rollout.force_answer=false",
        f"rollout.max_total_tokens={args.max_new_tokens + 1024}",
        f"algorithm.mini_batch_size={args.prompts * args.group}",
        "algorithm.kl_coef=0.001",
        "training.lr=1e-6",
        f"training.steps={args.steps + bool(args.profile)}",  # --profile: one more step, profiled, not timed
        f"training.profile_step={args.steps + 1 if args.profile else 0}",
        f"training.output_dir={out}",
        "training.tensorboard=false",
        "training.eval_every=0",
        "training.save_at_end=false",
        "training.log_rollouts=0",
        *(a for extra in args.ours_args for a in shlex.split(extra)),
    ]
    print("ours:", shlex.join(cmd), flush=True)
    if code := run(cmd, tmp / f"ours-{shape}.log", env, args.timeout):
        raise SystemExit(f"searchrl train ({shape}) failed with exit {code}: {tail(tmp / f'ours-{shape}.log')}")
    rows = [json.loads(line) for line in (out / "metrics.jsonl").open()][args.warmup : args.steps]
    phases = {p: statistics.median(r[f"time/{p}_s"] for r in rows) for p in ("generate", "logprob", "update")}
    return {
        "step_s": statistics.median(r["time/step_s"] for r in rows),
        "phases": phases,
        "peak_gb": max((r["mem/peak_allocated_gb"] for r in rows if "mem/peak_allocated_gb" in r), default=None),
        "reserved_gb": max((r["mem/peak_reserved_gb"] for r in rows if "mem/peak_reserved_gb" in r), default=None),
        "command": shlex.join(cmd),
    }


def trl(args, shape: str, tmp: Path, prompts: Path, env: dict[str, str]) -> dict:
    from searchrl.shapes import qwen2_config

    cfg = qwen2_config(shape).to_diff_dict()
    cfg.pop("transformers_version", None)
    driver, spec, out = tmp / "trl_driver.py", tmp / f"trl-{shape}.json", tmp / f"trl-{shape}-out.json"
    driver.write_text(DRIVER)
    spec.write_text(
        json.dumps(
            {
                "config": cfg,
                "tokenizer": args.tokenizer,
                "prompts": str(prompts),
                "steps": args.steps,
                "rows": args.prompts * args.group,
                "group": args.group,
                "max_new_tokens": args.max_new_tokens,
                "output_dir": str(tmp / f"trl-{shape}"),
                "out": str(out),
                "device": args.device,
                "model_dir": str(tmp / f"trl-{shape}-model"),
            }
        )
    )
    cmd = [args.python, str(driver), str(spec)]
    print("trl:", shlex.join(cmd), flush=True)
    if code := run(cmd, tmp / f"trl-{shape}.log", env, args.timeout):
        raise SystemExit(f"TRL driver ({shape}) failed with exit {code}: {tail(tmp / f'trl-{shape}.log')}")
    shutil.rmtree(tmp / f"trl-{shape}-model", ignore_errors=True)
    res = json.loads(out.read_text())
    steps = res["steps"][args.warmup :]
    return {
        "step_s": statistics.median(s["step_s"] for s in steps),
        "peak_gb": res["peak_allocated_gb"],
        "reserved_gb": res["peak_reserved_gb"],
        "trl": res["trl"],
        "transformers": res["transformers"],
    }


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shapes", default="qwen2.5-1.5b,qwen2.5-3b")
    ap.add_argument("--tokenizer", required=True, help="a Qwen tokenizer directory")
    ap.add_argument("--prompts", type=int, default=16)
    ap.add_argument("--group", type=int, default=5)
    ap.add_argument("--max-new-tokens", type=int, default=256)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--python", default=sys.executable, help="interpreter with TRL (and this repo's deps)")
    ap.add_argument("--timeout", type=float, default=900)
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "peer_trl_gpu.json"))
    ap.add_argument("--workdir", help="keep each side's log and metrics here (default: a temporary directory)")
    ap.add_argument(
        "--profile", action="store_true", help="ours runs one more step under torch.profiler (training.profile_step)"
    )
    ap.add_argument("--device", default="cuda", help="cuda; cpu only to smoke-test this script on a small shape")
    ap.add_argument(
        "--ours-args",
        action="append",
        default=[],
        help="further settings of ours, e.g. --ours-args=training.compile_layers=true (repeatable; in the report)",
    )
    args = ap.parse_args(argv)
    if args.steps <= args.warmup:
        raise SystemExit("--steps must exceed --warmup (at least one timed step)")
    env = dict(
        os.environ,
        PYTHONPATH=os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")]),
        HF_HUB_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
        TOKENIZERS_PARALLELISM="false",
    )
    result: dict = {}
    out_path = Path(args.out)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="peer-trl-gpu-") as tmp_s:
        tmp = Path(args.workdir or tmp_s)
        tmp.mkdir(parents=True, exist_ok=True)
        prompts = tmp / "prompts.jsonl"
        rendered = render_prompts(args.prompts, args.tokenizer)
        prompts.write_text("".join(json.dumps(p) + "\n" for p in rendered))
        for shape in args.shapes.split(","):
            o = ours(args, shape, tmp, env)
            work = (
                f"{args.prompts} prompts x G={args.group}, <= {args.max_new_tokens} new tokens, "
                f"{'bf16 mixed' if args.device == 'cuda' else 'fp32'}, KL 0.001, medians of steps "
                f"{args.warmup + 1}..{args.steps}"
            )
            result[shape] = {  # ours alone until TRL's side finishes: a timeout there keeps this
                "ours_s": round(o["step_s"], 3),
                "trl_s": None,
                "ratio": None,
                "ours_phases": o["phases"],
                "ours_peak_gb": o["peak_gb"],
                "ours_reserved_gb": o["reserved_gb"],
                "work": work,
                "ours_command": o["command"],
            }
            out_path.write_text(json.dumps(result, indent=1))
            t = trl(args, shape, tmp, prompts, env)
            result[shape] = {
                "ours_s": round(o["step_s"], 3),
                "trl_s": round(t["step_s"], 3),
                "ratio": round(o["step_s"] / t["step_s"], 3),
                "ours_phases": o["phases"],
                "ours_peak_gb": o["peak_gb"],
                "ours_reserved_gb": o["reserved_gb"],
                "trl_peak_gb": t["peak_gb"],
                "trl_reserved_gb": t["reserved_gb"],
                "trl_version": t["trl"],
                "transformers": t["transformers"],
                "work": work,
                "ours_command": o["command"],
            }
            print(json.dumps({shape: result[shape]}), flush=True)
            out_path.write_text(json.dumps(result, indent=1))  # after each shape: a timeout keeps what finished
    return result


if __name__ == "__main__":
    main()
