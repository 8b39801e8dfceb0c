"""Decode and update speed against the hardware's bound, measured on one device (a GPU; the CPU for a smoke run).

For each shape (random-init Qwen2.5 shapes, the real tokenizer) and batch size:

- decode: our decode loop (``HFGenerator``) on ``batch`` prompts of the synthetic world, stop strings off, timed as
  (generation of 2N tokens - generation of N tokens) / N per step (N = ``--new-tokens``), both warm calls after a
  first N-token call at the same batch (which captures the CUDA graphs): the per-call costs (prefill, launch) cancel;
  they are reported apart (``ours_call_overhead_ms``, ``graph_capture_ms``), and ``ours_step_ms_with_capture`` is
  (the first N-token call - a 1-token call) / (N - 1), which spreads the capture over its steps.
  Beside it HF ``generate`` with a static cache on the same prompts, and with ``--compile`` the same loop
  with its step through ``torch.compile`` (``rollout.compile_decode``; the compilation timed apart, as a warm-up).
- its bound: the larger of the weight-streaming time (weights' bytes / the measured device-to-device copy bandwidth,
  bytes read + written per second) and the FLOP time (2 x parameters x batch / the measured matmul peak).
- multi-turn: the rollout engine with the synthetic world's BM25 index (Search-R1 protocol, up to 3 turns) at the
  same batch, tokens generated per second.
- update: one forward + backward in bf16 autocast over ``--update-rows`` rows of ``--update-len`` tokens, MFU =
  6 x parameters x tokens / time / the measured peak (attention's context term not counted).

Writes ``--out`` (JSON) with per-run records and the keys ``decode_vs_bound_b512_1.5b`` and ``update_mfu_3b`` when
those runs were made.

    python benchmarks/gpu_rollout.py --tokenizer QWEN_TOKENIZER_DIR [--shapes qwen2.5-1.5b,qwen2.5-3b]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def matmul_peak(device: torch.device, dtype: torch.dtype, n: int) -> float:
    """FLOP/s of an n x n x n matmul (best of 5 after warm-up)."""
    a = torch.randn(n, n, device=device, dtype=dtype)
    b = torch.randn(n, n, device=device, dtype=dtype)
    for _ in range(2):
        a @ b
    best = float("inf")
    for _ in range(5):
        _sync(device)
        t = time.perf_counter()
        a @ b
        _sync(device)
        best = min(best, time.perf_counter() - t)
    return 2 * n**3 / best


def copy_bandwidth(device: torch.device, nbytes: int) -> float:
    """Bytes read + written per second of a device-to-device copy (best of 5)."""
    src = torch.empty(nbytes // 2, dtype=torch.bfloat16, device=device)
    dst = torch.empty_like(src)
    dst.copy_(src)
    best = float("inf")
    for _ in range(5):
        _sync(device)
        t = time.perf_counter()
        dst.copy_(src)
        _sync(device)
        best = min(best, time.perf_counter() - t)
    return 2 * nbytes / best


class World:
    """The synthetic world's questions, protocol and BM25 retriever, loaded once for every run of the benchmark."""

    def __init__(self) -> None:
        from searchrl.config import load_config
        from searchrl.pipeline import load_split, make_protocol, make_retriever_for

        cfg = load_config("demo", ["data.source=synthetic", "data.world.entities=600", "retrieval.kind=bm25"])
        self.cfg = cfg
        self.questions = load_split(cfg, "train", None)
        self.protocol = make_protocol(cfg)
        self.retriever = make_retriever_for(cfg)

    def examples(self, n: int) -> list:
        return [self.questions[i % len(self.questions)] for i in range(n)]

    def prompts(self, tok, n: int) -> list[list[int]]:
        from searchrl.rollout.engine import build_prompt_text

        return [tok(build_prompt_text(self.protocol, tok, ex.question))["input_ids"] for ex in self.examples(n)]


def timed(device: torch.device, fn) -> float:
    _sync(device)
    t = time.perf_counter()
    fn()
    _sync(device)
    return time.perf_counter() - t


def decode_run(
    model, tok, device, world: World, batch: int, new_tokens: int, static: bool, compiled: bool = False
) -> dict:
    from searchrl.generation.base import SamplingParams
    from searchrl.generation.hf import HFGenerateGenerator, HFGenerator

    prompts = world.prompts(tok, batch)
    gen = HFGenerator(model, tok, max_batch_size=batch, reuse_prefixes=False)
    n = SamplingParams(max_new_tokens=new_tokens, temperature=1.0, seed=0)
    n2 = SamplingParams(max_new_tokens=2 * new_tokens, temperature=1.0, seed=0)
    one = SamplingParams(max_new_tokens=1, temperature=1.0, seed=0)
    before = dict(gen.stats)
    # the first call at this batch size captures its graphs and grows the allocator's pools: timed apart, so the
    # measured calls below all run warm and (t_2N - t_N) / N is a decode step's cost alone
    t_first = timed(device, lambda: gen.generate(prompts, n))
    t_n, t_1 = timed(device, lambda: gen.generate(prompts, n)), timed(device, lambda: gen.generate(prompts, one))
    t_2n = timed(device, lambda: gen.generate(prompts, n2))
    step_s = (t_2n - t_n) / new_tokens  # per decode step, the per-call costs (prefill, launch) cancelled
    rec = {
        "method": "(t_2N - t_N) / N, warm calls after a first full-batch N-token call",
        "ours_step_ms": 1e3 * step_s,
        # the first N-token call per step, prefill taken out, capture and warm-up in
        "ours_step_ms_with_capture": 1e3 * (t_first - t_1) / (new_tokens - 1),
        "ours_call_overhead_ms": 1e3 * (t_n - t_1 - (new_tokens - 1) * step_s),
        "ours_first_call_ms": 1e3 * t_first,
        "ours_prefill_ms": 1e3 * t_1,
        "graph_captures": gen.stats["graph_captures"] - before.get("graph_captures", 0),
        "graph_capture_ms": 1e3 * (gen.stats["graph_capture_s"] - before.get("graph_capture_s", 0.0)),
        "ours_tokens_per_s": batch * new_tokens / t_n,
    }
    if compiled:  # rollout.compile_decode: the same loop with each layer through torch.compile
        cgen = HFGenerator(model, tok, max_batch_size=batch, reuse_prefixes=False)
        cgen.step.compile()
        warm = timed(device, lambda: (cgen.generate(prompts, n), cgen.generate(prompts, n2)))  # compiles
        c_n, c_2n = timed(device, lambda: cgen.generate(prompts, n)), timed(device, lambda: cgen.generate(prompts, n2))
        rec.update(
            compiled_step_ms=1e3 * (c_2n - c_n) / new_tokens,
            compiled_warmup_s=warm,
            compiled_tokens_per_s=batch * new_tokens / c_n,
            compiled_active=cgen.step.compiled,  # False: compiling failed and the loop decoded eagerly
        )
    if static:
        hf = HFGenerateGenerator(model, tok, max_batch_size=batch)
        kw = {"cache_implementation": "static"}
        orig = model.generate

        def generate(*a, **k):
            return orig(*a, **{**k, **kw})

        model.generate = generate
        try:
            h_n, h_1 = timed(device, lambda: hf.generate(prompts, n)), timed(device, lambda: hf.generate(prompts, one))
        finally:
            del model.generate
        rec.update(
            hf_static_step_ms=1e3 * (h_n - h_1) / (new_tokens - 1), hf_static_tokens_per_s=batch * new_tokens / h_n
        )
    return rec


def profile_decode(model, tok, device, world: World, batch: int, new_tokens: int, path: Path) -> None:
    """torch.profiler over one generation call, as the trainer runs it (fp32 master weights under bf16 autocast on
    CUDA): the operators by their own CPU time and by their device time, to ``path``."""
    from torch.profiler import ProfilerActivity, profile

    from searchrl import device as placement
    from searchrl.generation.base import SamplingParams
    from searchrl.generation.hf import HFGenerator

    placement.configure(str(device), "bf16" if device.type == "cuda" else "fp32")
    gen = HFGenerator(model, tok, max_batch_size=batch, reuse_prefixes=False)
    prompts, params = world.prompts(tok, batch), SamplingParams(max_new_tokens=new_tokens, temperature=1.0, seed=0)
    gen.generate(prompts, params)  # warm-up
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    with profile(activities=acts) as prof:
        dt = timed(device, lambda: gen.generate(prompts, params))
    avg = prof.key_averages()
    text = [f"batch {batch}, {new_tokens} new tokens: {dt:.3f} s ({1e3 * dt / new_tokens:.1f} ms per token)", ""]
    text.append(avg.table(sort_by="self_cpu_time_total", row_limit=30))
    if device.type == "cuda":
        text.append(avg.table(sort_by="self_device_time_total", row_limit=30))
    path.write_text("\n".join(text))


def rollout_run(model, tok, world: World, batch: int) -> dict:
    from searchrl.generation.hf import HFGenerator
    from searchrl.rollout.engine import RolloutEngine, RolloutLimits

    limits = RolloutLimits(max_turns=3, max_searches=2, max_new_tokens=64, max_obs_tokens=256, max_total_tokens=2048)
    engine = RolloutEngine(HFGenerator(model, tok, max_batch_size=batch), world.retriever, world.protocol, limits)
    t = time.perf_counter()
    trajs = engine.run(world.examples(batch), temperature=1.0, seed=0)
    dt = time.perf_counter() - t
    gen = sum(sum(t.action_mask) for t in trajs)
    return {"rollout_s": dt, "rollout_tokens_per_s": gen / dt, "turns_per_row": sum(t.n_turns for t in trajs) / batch}


def update_run(model, device, rows: int, length: int, peak: float, n_params: int) -> dict:
    from searchrl import device as placement

    ids = torch.randint(0, model.config.vocab_size - 1, (rows, length), device=device)
    model.train()

    def step():
        with placement.autocast(device, "bf16" if device.type == "cuda" else "fp32"):
            logits = model(input_ids=ids).logits
        loss = torch.nn.functional.cross_entropy(logits.float().flatten(0, 1), ids.flatten())
        loss.backward()
        model.zero_grad(set_to_none=True)

    step()
    dt = timed(device, step)
    model.eval()
    return {"update_s": dt, "update_tokens": rows * length, "update_mfu": 6 * n_params * rows * length / dt / peak}


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tokenizer", required=True)
    ap.add_argument("--shapes", default="qwen2.5-1.5b,qwen2.5-3b")
    ap.add_argument("--batches", default="16,128,512")
    ap.add_argument("--new-tokens", type=int, default=64)
    ap.add_argument("--update-rows", type=int, default=8)
    ap.add_argument("--update-len", type=int, default=1024)
    ap.add_argument("--device", default="auto")
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "gpu_rollout.json"))
    ap.add_argument(
        "--profile",
        help="write a torch.profiler table of one decode call (first shape, fp32 weights "
        "under autocast, as in training, --profile-batch rows) here, before the timed runs",
    )
    ap.add_argument("--profile-batch", type=int, default=80)
    ap.add_argument(
        "--profile-dtype",
        default="fp32",
        choices=["fp32", "bf16"],
        help="the profiled model's weights: fp32 (the trainer's master weights under autocast) or bf16 (as timed)",
    )
    ap.add_argument("--skip-rollout", action="store_true", help="leave out the multi-turn rollout runs")
    ap.add_argument("--hf-batches", default="all", help="batches to time HF generate at (comma list, or all)")
    ap.add_argument(
        "--compile", action="store_true", help="also time the decode step through torch.compile (compile_decode)"
    )
    ap.add_argument(
        "--layouts",
        default="bf16",
        help="weights of the timed decode runs, comma list: bf16 (a bf16 policy) and/or master (the trainer's fp32 "
        "master weights under bf16 autocast)",
    )
    ap.add_argument("--skip-update", action="store_true", help="leave out the update (MFU) runs")
    ap.add_argument("--decode-shapes", help="shapes to time decoding at (comma list; default: all of --shapes)")
    args = ap.parse_args(argv)
    from searchrl import device as placement
    from searchrl.shapes import n_params, random_policy

    place = placement.configure(args.device)
    dev = place.device
    cuda = dev.type == "cuda"
    peak = matmul_peak(dev, torch.bfloat16 if cuda else torch.float32, 8192 if cuda else 1024)
    bw = copy_bandwidth(dev, (2 << 30) if cuda else (256 << 20))
    result: dict = {
        "device": torch.cuda.get_device_name(dev) if cuda else "cpu",
        "torch": torch.__version__,
        "matmul_peak_tflops": peak / 1e12,
        "copy_bandwidth_gbs": bw / 1e9,
        "runs": [],
    }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    world = World()
    if args.profile:
        shape = args.shapes.split(",")[0]
        pdtype = torch.bfloat16 if args.profile_dtype == "bf16" and cuda else torch.float32
        model, tok = random_policy(f"random:{shape}:{args.tokenizer}", pdtype, dev)
        profile_decode(model.eval(), tok, dev, world, args.profile_batch, min(args.new_tokens, 32), Path(args.profile))
        del model
        if cuda:
            torch.cuda.empty_cache()
    for shape in args.shapes.split(","):
        dtype = torch.bfloat16 if cuda else torch.float32
        model, tok = random_policy(f"random:{shape}:{args.tokenizer}", dtype, dev)
        model.eval()
        N = n_params(shape)
        wbytes = sum(p.numel() * p.element_size() for p in model.parameters())
        placement.configure(args.device)  # bf16 autocast on CUDA, a no-op for the bf16 policy's own weights
        decode = args.decode_shapes is None or shape in args.decode_shapes.split(",")
        for layout in args.layouts.split(",") if decode else []:
            if layout == "master":  # the trainer's layout: fp32 master weights, bf16 autocast on CUDA
                model.float()
                placement.configure(args.device, "bf16" if cuda else "fp32")
            for b in [int(x) for x in args.batches.split(",")]:
                static = layout == "bf16" and (args.hf_batches == "all" or str(b) in args.hf_batches.split(","))
                timings = decode_run(model, tok, dev, world, b, args.new_tokens, static, args.compile)
                rec = {"shape": shape, "batch": b, **({"layout": layout} if layout != "bf16" else {}), **timings}
                bound_ms = 1e3 * max(wbytes / bw, 2 * N * b / peak)
                rec.update(bound_step_ms=bound_ms, decode_vs_bound=rec["ours_step_ms"] / bound_ms)
                if "compiled_step_ms" in rec:
                    rec["compiled_vs_bound"] = rec["compiled_step_ms"] / bound_ms
                if not args.skip_rollout and layout == "bf16":
                    rec.update(rollout_run(model, tok, world, b))
                result["runs"].append(rec)
                print(json.dumps(rec), flush=True)
                if b == 512 and shape == "qwen2.5-1.5b" and layout == "bf16":
                    result["decode_vs_bound_b512_1.5b"] = rec["decode_vs_bound"]
                    if "compiled_vs_bound" in rec:
                        result["compiled_decode_vs_bound_b512_1.5b"] = rec["compiled_vs_bound"]
                out.write_text(json.dumps(result, indent=1))  # after each run: a timeout keeps what finished
        if args.skip_update:
            del model
            if cuda:
                torch.cuda.empty_cache()
            continue
        model.float()  # the trainer's layout: fp32 master weights, bf16 autocast on CUDA
        upd = update_run(model, dev, args.update_rows, args.update_len, peak, N)
        result["runs"].append({"shape": shape, **upd})
        print(json.dumps({"shape": shape, **upd}), flush=True)
        if shape == "qwen2.5-3b":
            result["update_mfu_3b"] = upd["update_mfu"]
        out.write_text(json.dumps(result, indent=1))
        del model
        if cuda:
            torch.cuda.empty_cache()
    return result


if __name__ == "__main__":
    main()
