"""The GPU path: device placement, mixed precision, one step of every algorithm and every recipe's RL stage.

Each test runs twice where it can: on the CPU with a toy body over the real Qwen vocabulary (always, so the code paths
are checked in CI), and under the ``cuda`` marker on a GPU with the papers' shapes (skipped without CUDA). Policies
are random-init models of published shapes (``random:<shape>:<tokenizer>``, no download). ``benchmarks/gpu_check.sh``
runs the ``cuda`` ones on a GPU machine; ``SEARCHRL_GPU_SHAPE`` / ``SEARCHRL_GPU_RECIPE_SHAPE`` pick the shapes there.

Tolerances of the decode-vs-forward log-prob parity: fp32 max |diff| <= 1e-4; bf16 mixed precision mean |diff| <=
0.02 and max <= 0.25 nats (bf16 keeps 8 bits of mantissa: the decode step and the full forward round differently).
"""

from __future__ import annotations

import json
import math
import os
import shutil
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from searchrl import device as placement
from searchrl.cli import app
from searchrl.generation.base import SamplingParams
from searchrl.generation.hf import HFGenerator
from searchrl.rl.batch import TokenScorer, collate, score_tokens
from searchrl.shapes import random_policy

CUDA = torch.cuda.is_available()
cuda_only = [pytest.mark.cuda, pytest.mark.skipif(not CUDA, reason="needs a CUDA device")]
TOL = {"fp32": (1e-4, 1e-4), "bf16": (0.02, 0.25)}  # (mean, max) |log-prob difference|, nats

DEVICES = [
    pytest.param("cpu", "qwen2.5-tiny", id="cpu"),
    pytest.param("cuda", os.environ.get("SEARCHRL_GPU_SHAPE", "qwen2.5-1.5b"), marks=cuda_only, id="cuda"),
]
RECIPE_SHAPE = os.environ.get("SEARCHRL_GPU_RECIPE_SHAPE", "qwen2.5-3b")


@pytest.fixture(scope="module")
def tokenizer_dir(shared_data: Path) -> str:
    path = shared_data / "tokenizers" / "qwen3"
    if not path.is_dir():
        pytest.skip(f"no Qwen tokenizer at {path}")
    return str(path)


@pytest.fixture(autouse=True)
def _fresh_placement():
    placement.reset()
    yield
    placement.reset()


OPENING = (  # an instruction every prompt opens with, longer than the 32 tokens that make it a shared prefix
    "You are answering questions about a small invented world. Think step by step, search when a fact is missing, "
    "and give the final answer in a few words only, with no explanation after it. "
)


def _prompts(tok, opening: str = "") -> list[list[int]]:
    texts = ["Question: who wrote the novel? Answer:", "The capital of the fictional land is", "Search for: river"]
    return [tok(opening + t)["input_ids"] for t in texts]


@pytest.mark.parametrize("opening", ["", OPENING], ids=["own", "shared-opening"])
@pytest.mark.parametrize("precision", ["fp32", "bf16"])
@pytest.mark.parametrize(("device", "shape"), DEVICES)
def test_decode_logprobs_match_a_forward(
    tokenizer_dir: str, device: str, shape: str, precision: str, opening: str
) -> None:
    """The log-prob the decode loop records for each sampled token equals a full forward's, within the tolerance;
    with a shared opening, the decode steps read it once for all rows (``common_opening_tokens``)."""
    place = placement.configure(device, precision)
    model, tok = random_policy(f"random:{shape}:{tokenizer_dir}", torch.float32, place.device)
    model.eval()
    gen = HFGenerator(model, tok)
    prompts = _prompts(tok, opening)
    comps = gen.generate(prompts, SamplingParams(max_new_tokens=12, temperature=1.0, seed=3))
    assert all(c.token_ids for c in comps)
    assert (gen.stats["common_opening_tokens"] > 0) == bool(opening)
    if device == "cuda":  # the decode steps were replayed from a CUDA graph, not run eagerly after a failed capture
        assert gen.stats["graph_captures"] >= 1
    _assert_forward_agrees(model, place.device, prompts, comps, precision)


@pytest.mark.slow
@pytest.mark.parametrize("precision", ["fp32", "bf16"])
@pytest.mark.parametrize(("device", "shape"), DEVICES)
def test_compiled_decode_logprobs_match_a_forward(
    tokenizer_dir: str, device: str, shape: str, precision: str, tmp_path, monkeypatch
) -> None:
    """``rollout.compile_decode``: every layer runs through the one compiled layer graph (replayed from a CUDA graph
    on a GPU), with a shared opening, and the recorded log-probs agree with a full forward as the plain step's do."""
    if device == "cpu" and precision == "bf16":
        pytest.skip("one CPU case keeps the suite short: the compiled arithmetic is the same in both precisions")
    # a compile cache of its own: a half-written kernel left in the machine's shared cache by a killed process
    # makes the compile fail (and the generator fall back to eager decoding) whatever this code does
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "inductor"))
    place = placement.configure(device, precision)
    model, tok = random_policy(f"random:{shape}:{tokenizer_dir}", torch.float32, place.device)
    model.eval()
    gen = HFGenerator(model, tok)
    gen.step.compile()
    calls, layer = [], gen.step._compiled
    gen.step._compiled = lambda *a: calls.append(1) or layer(*a)
    prompts = _prompts(tok, OPENING)
    comps = gen.generate(prompts, SamplingParams(max_new_tokens=12, temperature=1.0, seed=3))
    assert len(calls) >= len(model.model.layers)  # every layer of a step, at least once
    if device == "cuda":
        assert gen.stats["graph_captures"] >= 1
    _assert_forward_agrees(model, place.device, prompts, comps, precision)


def _assert_forward_agrees(model, device, prompts, comps, precision: str) -> None:
    batch = collate(prompts, [c.token_ids for c in comps], [[1] * len(c.token_ids) for c in comps], pad_id=0)
    batch = batch.to(device)
    with torch.no_grad(), placement.autocast(device):
        ref_BT = score_tokens(TokenScorer(model), batch, batch.response_mask)[0].float()
    diffs = torch.cat(
        [(ref_BT[b, : len(c.logprobs)].cpu() - torch.tensor(c.logprobs)).abs() for b, c in enumerate(comps)]
    )
    mean_tol, max_tol = TOL[precision]
    assert float(diffs.mean()) <= mean_tol and float(diffs.max()) <= max_tol, (diffs.mean(), diffs.max())


@pytest.mark.cuda
@pytest.mark.skipif(not CUDA, reason="needs a CUDA device")
def test_cpu_and_cuda_forward_agree_in_fp32(tokenizer_dir: str) -> None:
    """The same weights give the same token log-probs on the CPU and on the GPU (fp32, TF32 off)."""
    torch.backends.cuda.matmul.allow_tf32 = False
    model, tok = random_policy(f"random:qwen2.5-0.5b:{tokenizer_dir}", torch.float32, torch.device("cpu"))
    prompts = _prompts(tok)
    responses = [p[::-1][:8] for p in prompts]
    batch = collate(prompts, responses, [[1] * len(r) for r in responses], pad_id=0)
    with torch.no_grad():
        cpu_BT = score_tokens(TokenScorer(model), batch, batch.response_mask)[0]
        model.to("cuda")
        gpu_BT = score_tokens(TokenScorer(model), batch.to("cuda"), batch.response_mask.to("cuda"))[0].cpu()
    assert float((cpu_BT - gpu_BT).abs().max()) <= 1e-4


def _train(tmp: Path, recipe: str, spec: str, device: str, *extra: str) -> list[dict]:
    """One `searchrl train` run; nothing written at the end (a 3B checkpoint with Adam state is ~36 GB)."""
    out = tmp / f"run-{recipe}"
    args = [
        "train",
        "--recipe",
        recipe,
        "--profile",
        "laptop",
        f"model.policy={spec}",
        f"model.device={device}",
        "data.world.entities=120",
        "training.steps=1",
        "training.prompts_per_step=2",
        "rollout.group_size=2",
        "rollout.max_new_tokens=16",
        "rollout.max_turns=2",
        "rollout.max_searches=1",
        "algorithm.mini_batch_size=4",
        f"training.output_dir={out}",
        "training.tensorboard=false",
        "training.eval_limit=2",
        "training.save_at_end=false",
        *extra,
    ]
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.output + repr(res.exception)
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    trained = [r for r in rows if "reward/total" in r]
    assert trained and trained[-1]["step"] == 1
    return rows


ALGORITHMS = {"ppo": "search_r1_ppo", "grpo": "search_r1_grpo", "reinforce_pp": "r1_searcher_stage1", "rloo": "demo"}
#: on the CPU two algorithms (the critic's path and a group baseline) keep the suite short; on a GPU all four
ALGORITHM_CASES = [pytest.param("cpu", "qwen2.5-tiny", a, id=f"cpu-{a}") for a in ("ppo", "rloo")] + [
    pytest.param("cuda", DEVICES[1].values[1], a, marks=cuda_only, id=f"cuda-{a}") for a in ALGORITHMS
]


@pytest.mark.slow
@pytest.mark.parametrize(("device", "shape", "algorithm"), ALGORITHM_CASES)
def test_one_step_of_each_algorithm(
    tmp_path: Path, tokenizer_dir: str, device: str, shape: str, algorithm: str, monkeypatch
) -> None:
    """One RL step per algorithm (PPO with its critic): finite loss, and the trained policy differs from its init."""
    from searchrl.rl.trainer import Trainer

    trainers: list[Trainer] = []
    train = Trainer.train
    monkeypatch.setattr(Trainer, "train", lambda self, *a, **k: trainers.append(self) or train(self, *a, **k))
    spec = f"random:{shape}:{tokenizer_dir}"
    # an entropy bonus: a random policy's rewards are all alike (zero advantages), the bonus still has a gradient
    rows = _train(
        tmp_path,
        ALGORITHMS[algorithm],
        spec,
        device,
        f"algorithm.name={algorithm}",
        "training.lr=1e-3",
        "algorithm.kl_coef=0.001",
        "algorithm.entropy_coef=0.01",
        "training.eval_every=0",
        *(["algorithm.tis_cap=2.0"] if algorithm == "grpo" else []),  # bf16 sampler vs training forward on a GPU
    )
    last = [r for r in rows if "reward/total" in r][-1]
    if algorithm == "grpo":
        assert 0 < last["tis/weight_mean"] <= 2.0 and 0 <= last["tis/capped_frac"] < 0.5, last
    losses = {k: v for k, v in last.items() if k.startswith(("loss/", "actor/", "critic/")) and "loss" in k}
    assert losses and all(math.isfinite(v) for v in losses.values()), last
    if device == "cuda":
        assert last["mem/peak_allocated_gb"] > 0
    init = random_policy(spec, torch.float32, torch.device("cpu"))[0].state_dict()
    trained = trainers[-1].policy.named_parameters()
    changed = [n for n, p in trained if not torch.equal(p.detach().float().cpu(), init[n])]
    assert changed, "no weight changed after one RL step"


@pytest.mark.parametrize(("device", "shape"), DEVICES)
def test_sft_steps_in_mixed_precision(tmp_path: Path, tokenizer_dir: str, device: str, shape: str, monkeypatch):
    """SFT on the synthetic world's oracle trajectories: the loss is finite and falls on a repeated batch."""
    from searchrl.config import load_config
    from searchrl.sft import trainer as sft_trainer
    from searchrl.stages import run_sft

    monkeypatch.setattr(sft_trainer.SFTTrainer, "save", lambda self, path: None)  # no multi-GB checkpoint
    cfg = load_config(
        "demo",
        [
            f"model.policy=random:{shape}:{tokenizer_dir}",
            f"model.device={device}",
            "training.precision=bf16" if device == "cuda" else "training.precision=fp32",
            "data.world.entities=120",
            "sft.limit=2",
            "sft.batch_size=2",
            "sft.epochs=4",
            "sft.lr=1e-3",
            "sft.val_fraction=0.0",
            "sft.max_length=512",
        ],
        "laptop",
    )
    hist = run_sft(cfg, str(tmp_path / "sft"))
    losses = [h["loss"] for h in hist]
    assert all(math.isfinite(x) for x in losses) and losses[-1] < losses[0], losses
    if device == "cuda":
        assert hist[-1]["mem/peak_allocated_gb"] > 0


@pytest.mark.cuda
@pytest.mark.skipif(not CUDA, reason="needs a CUDA device")
def test_7b_lora_grpo_step_fits_one_gpu(tmp_path: Path, tokenizer_dir: str) -> None:
    """A Qwen2.5-7B-shaped GRPO step with LoRA r=16 (the base model is the reference: no second copy) and
    gradient checkpointing, on one 80 GB GPU; its peak memory is reported."""
    rows = _train(
        tmp_path,
        "search_r1_grpo",
        f"random:qwen2.5-7b:{tokenizer_dir}",
        "cuda",
        "training.precision=bf16",
        'model.lora={"r": 16, "alpha": 32}',
        "training.gradient_checkpointing=true",
        "algorithm.kl_coef=0.001",
        "training.eval_every=0",
    )
    last = [r for r in rows if "reward/total" in r][-1]
    assert last["mem/peak_allocated_gb"] < 80
    if log := os.environ.get("SEARCHRL_GPU_LOG"):
        with open(log, "a") as f:
            f.write(
                json.dumps(
                    {
                        "recipe": "7b_lora_grpo",
                        "shape": "qwen2.5-7b",
                        "rl_steps": int(last["step"]),
                        "peak_gb": last["mem/peak_allocated_gb"],
                        "step_s": last["time/step_s"],
                    }
                )
                + "\n"
            )


@pytest.mark.cuda
@pytest.mark.skipif(not CUDA, reason="needs a CUDA device")
def test_accelerate_fsdp_launch_one_process(tmp_path: Path, tokenizer_dir: str) -> None:
    """`accelerate launch` with the shipped fsdp.yaml and one process runs two GRPO steps."""
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[2]
    out = tmp_path / "fsdp"
    cmd = [
        sys.executable,
        "-m",
        "accelerate.commands.launch",
        "--config_file",
        str(root / "src/searchrl/recipes/accelerate/fsdp.yaml"),
        "--num_processes",
        "1",
        "-m",
        "searchrl.cli",
        "train",
        "--recipe",
        "demo",
        "--profile",
        "laptop",
        f"model.policy=random:qwen2.5-0.5b:{tokenizer_dir}",
        "data.world.entities=120",
        "training.steps=2",
        "training.prompts_per_step=2",
        "rollout.group_size=2",
        "rollout.max_new_tokens=16",
        "rollout.max_turns=1",
        "rollout.max_searches=1",
        "algorithm.mini_batch_size=4",
        f"training.output_dir={out}",
        "training.tensorboard=false",
        "training.save_at_end=false",
    ]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=root)
    assert res.returncode == 0, res.stderr[-3000:]
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [int(r["step"]) for r in rows if "reward/total" in r] == [1, 2]


@pytest.mark.skipif(CUDA, reason="checks the error a CPU-only machine gives")
@pytest.mark.parametrize("command", [["train", "--recipe", "demo"], ["sft", "--recipe", "demo"]])
def test_device_flag_reaches_the_placement_and_names_the_fix_without_cuda(command: list[str]) -> None:
    res = CliRunner().invoke(app, [*command, "--device", "cuda", "--profile", "laptop"])
    assert res.exit_code != 0
    assert "model.device=cuda" in str(res.exception) and "model.device=cpu" in str(res.exception)


@pytest.mark.parametrize("spec", ["tpu", "CPU", "mps", "cuda:-1", "cuda:99"])
def test_a_device_that_is_none_is_one_line_naming_the_choices(spec: str) -> None:
    """An unknown device fails in the config (so a dry run says so) and in the placement, never as torch's
    traceback; a CUDA index past the machine's devices names how many there are."""
    from searchrl.config import ConfigError, load_config
    from searchrl.device import resolve_device

    if spec != "cuda:99":
        with pytest.raises(ConfigError, match=r"is not a device; use auto, cpu, cuda or cuda:N"):
            load_config("demo", [f"model.device={spec}"])
    with pytest.raises(ValueError, match=rf"model.device={spec}"):
        resolve_device(spec)


def test_placement_defaults_and_frozen_dtype() -> None:
    place = placement.configure("cpu", "auto")
    assert place.precision == "fp32" and place.autocast_dtype is None
    assert placement.weights_dtype("float32", frozen=True) == torch.float32
    placement.configure("cpu", "bf16")
    assert placement.weights_dtype("float32", frozen=True) == torch.bfloat16
    assert placement.weights_dtype("float32", frozen=False) == torch.float32  # master weights stay fp32
    with pytest.raises(ValueError, match="training.precision"):
        placement.configure("cpu", "fp8")


def test_cuda_placement_leaves_cudnn_attention_out_unless_asked(monkeypatch) -> None:
    """A CUDA placement turns off cuDNN's attention backend (a graph built per new shape); the environment
    variable keeps it; a CPU placement leaves the flag alone."""
    before = torch.backends.cuda.cudnn_sdp_enabled()
    try:
        torch.backends.cuda.enable_cudnn_sdp(True)
        placement.attention_kernels(torch.device("cpu"))
        assert torch.backends.cuda.cudnn_sdp_enabled()
        monkeypatch.setenv("SEARCHRL_CUDNN_ATTENTION", "1")
        placement.attention_kernels(torch.device("cuda"))
        assert torch.backends.cuda.cudnn_sdp_enabled()
        monkeypatch.delenv("SEARCHRL_CUDNN_ATTENTION")
        placement.attention_kernels(torch.device("cuda"))
        assert not torch.backends.cuda.cudnn_sdp_enabled()
    finally:
        torch.backends.cuda.enable_cudnn_sdp(before)


RECIPES = [
    "demo",
    "search_r1_ppo",
    "search_r1_grpo",
    "r1_searcher_stage1",
    "r1_searcher_stage2",
    "r1_searcher_pp",
    "r_search",
    "rag_r1",
    "multihop_cpu",
    "multihop_world",
    "multihop_world_tool_call",
]


#: stage 2 starts from stage 1's model in the recipe; here from the random policy, alone
RECIPE_EXTRA = {"r1_searcher_stage2": ["training.init_from=null"]}
#: recipes whose RL stage decodes with compiled layers (the CUDA default); the others decode eagerly, which keeps the
#: phase's time as it was (each compiled graph costs ~7 s), the compiled path's parity being tested apart
COMPILED_RECIPES = ("search_r1_grpo", "multihop_world")


def test_the_gpu_check_trains_every_recipe() -> None:
    """The docs say the GPU check runs every recipe's RL stage: a recipe added is added here too."""
    from searchrl.config import recipe_names

    assert sorted(RECIPES) == sorted(recipe_names())


@pytest.mark.cuda
@pytest.mark.skipif(not CUDA, reason="needs a CUDA device")
@pytest.mark.parametrize("recipe", RECIPES)
def test_recipe_rl_stage_on_cuda(tmp_path_factory, tokenizer_dir: str, recipe: str) -> None:
    """Each recipe's RL stage (its critic, reader or memorizer included) for one step in bf16 mixed precision, with
    its held-out evaluation before and after, at a paper shape; peak GPU memory lands in the metrics."""
    tmp = Path(os.environ.get("SEARCHRL_GPU_TMP", tmp_path_factory.mktemp(recipe)))
    rows = _train(
        tmp,
        recipe,
        f"random:{RECIPE_SHAPE}:{tokenizer_dir}",
        "cuda",
        "training.precision=bf16",
        "training.eval_every=1",
        f"rollout.compile_decode={recipe in COMPILED_RECIPES}",
        *RECIPE_EXTRA.get(recipe, ()),
    )
    last = [r for r in rows if "reward/total" in r][-1]
    assert last["mem/peak_allocated_gb"] > 0 and any(k.startswith("eval/") for r in rows for k in r)
    record = {
        "recipe": recipe,
        "shape": RECIPE_SHAPE,
        "rl_steps": int(last["step"]),
        "peak_gb": last["mem/peak_allocated_gb"],
        "reserved_gb": last["mem/peak_reserved_gb"],
        "step_s": last["time/step_s"],
    }
    if log := os.environ.get("SEARCHRL_GPU_LOG"):
        with open(log, "a") as f:
            f.write(json.dumps(record) + "\n")
    shutil.rmtree(tmp / f"run-{recipe}", ignore_errors=True)
