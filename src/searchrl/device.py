"""Where models run and in what precision: the one place that decides, for every command and model.

- ``model.device``: ``auto`` (the process's accelerate device: ``cuda:<local rank>`` when CUDA is present, else the
  CPU), ``cpu``, ``cuda`` or ``cuda:N``. Every model (policy, reference, critic, reader, rewriter, judge, summariser,
  dense query encoder) and every sampler's ``torch.Generator`` follows it; faiss indexes stay on the CPU.
- ``training.precision``: ``auto`` (``bf16`` on CUDA, ``fp32`` on the CPU, where bf16 matmuls are slower), ``fp32``
  or ``bf16``. ``bf16`` is mixed precision as the field runs it (TRL's ``bf16=True``, verl's FSDP mixed precision):
  trainable weights and optimizer state stay fp32 (``model.dtype``), matmuls run in bf16 under autocast, log-probs
  entering a loss are computed in fp32 from the logits; frozen models (reference, reader, rewriter, judge, a policy
  only evaluated) are held in bf16 outright, with no fp32 copy.

Commands call :func:`configure` once with their run config; library code asks :func:`current` and friends, so a
function called without a config (a notebook, a test) still lands on the GPU when there is one.
"""

from __future__ import annotations

import contextlib
import copy
import os
from dataclasses import dataclass

import torch

_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


@dataclass(frozen=True)
class Placement:
    device: torch.device
    precision: str  # "fp32" | "bf16"

    @property
    def autocast_dtype(self) -> torch.dtype | None:
        """The compute dtype of autocast regions, or None for plain fp32."""
        return torch.bfloat16 if self.precision == "bf16" else None

    @property
    def frozen_dtype(self) -> torch.dtype | None:
        """The dtype frozen models are held in (None: as loaded)."""
        return torch.bfloat16 if self.precision == "bf16" else None


def resolve_device(spec: str = "auto") -> torch.device:
    """``auto`` -> this process's CUDA device (``LOCAL_RANK`` under ``accelerate launch``) or the CPU."""
    if spec == "auto":
        if not torch.cuda.is_available():
            return torch.device("cpu")
        return torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")) % torch.cuda.device_count())
    try:
        dev = torch.device(spec)
    except RuntimeError:
        dev = None
    if dev is None or dev.type not in ("cpu", "cuda") or (dev.index is not None and dev.index < 0):
        raise ValueError(f"model.device={spec}: use auto, cpu, cuda or cuda:N (--device)")
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(
            f"model.device={spec} but this torch build sees no CUDA device; use model.device=cpu "
            "(or install a CUDA build of torch)"
        )
    if dev.type == "cuda" and (dev.index or 0) >= torch.cuda.device_count():
        raise ValueError(f"model.device={spec} but there are {torch.cuda.device_count()} CUDA devices (cuda:0...)")
    return dev


def native_bf16(device: torch.device) -> bool:
    """Whether ``device`` is a CUDA GPU with bf16 arithmetic (compute capability 8.0 on, Ampere): a V100 or T4
    only emulates bf16, slowly, and vLLM refuses it there."""
    return device.type == "cuda" and torch.cuda.get_device_capability(device) >= (8, 0)


def resolve_precision(spec: str, device: torch.device) -> str:
    """``auto`` -> ``bf16`` on a GPU with bf16 arithmetic (:func:`native_bf16`), ``fp32`` elsewhere (fp16 training,
    which needs loss scaling, is refused)."""
    if spec == "auto":
        return "bf16" if native_bf16(device) else "fp32"
    if spec not in ("fp32", "bf16"):
        raise ValueError(f"training.precision={spec}: use auto, fp32 or bf16")
    return spec


_current: Placement | None = None


def configure(device: str = "auto", precision: str = "auto") -> Placement:
    """Set the process-wide placement (commands call this once, from ``model.device`` / ``training.precision``)."""
    global _current
    dev = resolve_device(device)
    _current = Placement(dev, resolve_precision(precision, dev))
    attention_kernels(dev)
    return _current


def attention_kernels(device: torch.device) -> None:
    """On CUDA, ``scaled_dot_product_attention`` without its cuDNN backend (flash and memory-efficient attention
    remain), unless ``SEARCHRL_CUDNN_ATTENTION=1``. cuDNN builds an execution graph for every new shape and spends
    more host time per call even once built: on an H200 (torch 2.11) its calls averaged 1.5 ms of host time in a
    GRPO step, whose passes change shape at every micro-batch and every prefill (2.3 s forward + 1.0 s backward of a
    16 s step at the 1.5B shape), while its kernels took 70-110 us."""
    if device.type == "cuda" and os.environ.get("SEARCHRL_CUDNN_ATTENTION") != "1":
        torch.backends.cuda.enable_cudnn_sdp(False)


def configure_from(cfg) -> Placement:
    return configure(cfg.model.device, cfg.training.precision)


def accelerator(place: Placement, collective_timeout_s: float):
    """The trainer's ``accelerate.Accelerator`` on ``place`` (bf16 mixed precision or none); over several processes
    a collective waits ``collective_timeout_s`` for the others (accelerate's default: 10 minutes with NCCL)."""
    from datetime import timedelta

    from accelerate import Accelerator
    from accelerate.utils import InitProcessGroupKwargs

    return Accelerator(
        gradient_accumulation_steps=1,
        cpu=place.device.type == "cpu",
        mixed_precision="bf16" if place.precision == "bf16" else "no",
        kwargs_handlers=[InitProcessGroupKwargs(timeout=timedelta(seconds=collective_timeout_s))],
    )


def process_group(collective_timeout_s: float) -> None:
    """Under a multi-process launch (``WORLD_SIZE`` > 1), start accelerate's process group now, with the run's
    collective timeout. A vLLM engine built before the trainer joins the group it finds (its ``external_launcher``
    backend, as TRL's colocated engines do); without one it would start a group of its own, sized for its
    tensor-parallel ranks alone. The trainer's accelerator later takes this same group. A no-op in one process."""
    if int(os.environ.get("WORLD_SIZE", "1")) <= 1:
        return
    from datetime import timedelta

    from accelerate import PartialState

    PartialState(timeout=timedelta(seconds=collective_timeout_s))


def current() -> Placement:
    """The configured placement, else ``auto`` / ``auto``."""
    return _current if _current is not None else configure()


def reset() -> None:
    """Forget the configured placement (tests)."""
    global _current
    _current = None


def weights_dtype(name: str, frozen: bool) -> torch.dtype:
    """The dtype to load a model's weights in: ``model.dtype`` for trainable weights (fp32 master weights by default),
    the placement's frozen dtype (bf16 under mixed precision) for models that are never updated."""
    frozen_dt = current().frozen_dtype
    return frozen_dt if frozen and frozen_dt is not None else _DTYPES[name]


def model_device(model: torch.nn.Module) -> torch.device:
    return next(model.parameters()).device


def autocast(device: torch.device | None = None, precision: str | None = None) -> contextlib.AbstractContextManager:
    """bf16 autocast on ``device`` under mixed precision; a no-op context in fp32."""
    place = current()
    prec = precision or place.precision
    dev = device or place.device
    if prec != "bf16":
        return contextlib.nullcontext()
    return torch.autocast(device_type=dev.type, dtype=torch.bfloat16)


def sampler(device: torch.device, seed: int | None) -> torch.Generator:
    """A ``torch.Generator`` on ``device`` (CUDA logits need a CUDA generator), seeded or fresh."""
    gen = torch.Generator(device=device)
    if seed is not None:
        gen.manual_seed(seed)
    else:
        gen.seed()
    return gen


def micro_batch_defaults(device: torch.device) -> tuple[int, int]:
    """(rows, tokens) per RL micro-batch when the config leaves them unset: 16 / 2048 on the CPU, where a larger pass
    is no faster per token; 64 / 8192 on a GPU, whose kernels need more work per launch to run near their rate (the
    output head's logits stay bounded: scoring runs it 4096 positions at a time)."""
    return (64, 8192) if device.type == "cuda" else (16, 2048)


def decode_batch_default(device: torch.device) -> int:
    """Rows decoded together when ``rollout.max_batch_size`` is unset: 64 on the CPU; 512 on a GPU, whose decode step
    costs well under twice as much for 512 rows as for 16 (it streams the weights once either way), so a GRPO step's
    rollouts (e.g. 64 prompts x 5) decode in one pass rather than two."""
    return 512 if device.type == "cuda" else 64


def reset_peak_memory() -> None:
    if torch.cuda.is_available():
        torch.cuda.reset_peak_memory_stats()


def peak_memory_metrics() -> dict[str, float]:
    """``mem/peak_allocated_gb`` and ``mem/peak_reserved_gb`` since the last reset (CUDA only; empty on the CPU)."""
    if not torch.cuda.is_available():
        return {}
    return {
        "mem/peak_allocated_gb": torch.cuda.max_memory_allocated() / 2**30,
        "mem/peak_reserved_gb": torch.cuda.max_memory_reserved() / 2**30,
    }


def frozen_copy(model: torch.nn.Module, device: torch.device) -> torch.nn.Module:
    """A gradient-free copy of ``model`` on ``device``, in the frozen dtype (bf16 under mixed precision)."""
    ref = copy.deepcopy(model).eval().requires_grad_(False)
    dtype = current().frozen_dtype
    return ref.to(device=device, dtype=dtype) if dtype is not None else ref.to(device)


@contextlib.contextmanager
def unsharded(module: torch.nn.Module):
    """FSDP2's root parameters (embeddings, final norm, output head) gathered for the block. A decode loop calls the
    policy's submodules itself, which skips the root's forward hook that gathers them (the decoder layers, sharded
    on their own, still gather in their hooks). A no-op for a module that is not FSDP2's."""
    try:
        from torch.distributed.fsdp import FSDPModule
    except ImportError:  # torch without FSDP2
        FSDPModule = ()  # noqa: N806
    if not isinstance(module, FSDPModule):
        yield
        return
    module.unshard()
    try:
        yield
    finally:
        module.reshard()
