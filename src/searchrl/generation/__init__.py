"""Generator backends; :func:`make_generator` picks one from ``rollout.backend``."""

from __future__ import annotations

from searchrl.generation.base import Completion, Generator, SamplingParams

__all__ = ["Completion", "Generator", "SamplingParams", "make_generator", "rollout_generator"]


def make_generator(backend: str, model, tokenizer, model_path: str | None = None, **kwargs) -> Generator:
    """The generator for ``backend``: "hf" (our decode loop on ``model``'s own weights), "hf_generate"
    (transformers' ``generate``), or "vllm" (a separate engine loaded from ``model_path``)."""
    if backend == "hf":
        from searchrl.generation.hf import HFGenerator

        return HFGenerator(model, tokenizer, **kwargs)
    if backend == "hf_generate":
        from searchrl.generation.hf import HFGenerateGenerator

        return HFGenerateGenerator(model, tokenizer, **kwargs)
    if backend == "vllm":
        if model_path is None:
            raise ValueError("rollout.backend=vllm needs the policy's directory (model_path) to start the engine")
        from searchrl.generation.vllm import VLLMGenerator

        return VLLMGenerator(model_path, tokenizer, **kwargs)
    raise ValueError(f"unknown rollout.backend '{backend}' (choose hf, hf_generate or vllm)")


def rollout_generator(rollout, model, tokenizer, device) -> Generator:
    """The training policy's generator from a ``RolloutConfig``: ``rollout.backend``, with the "hf" backends decoding
    at most ``rollout.max_batch_size`` rows together (unset: the device's default), keeping up to
    ``rollout.prefix_cache_gib`` of a turn's keys/values for the next turn."""
    from searchrl import device as placement

    if rollout.backend not in ("hf", "hf_generate"):
        return make_generator(rollout.backend, model, tokenizer)
    rows = rollout.max_batch_size or placement.decode_batch_default(device)
    if rollout.backend == "hf_generate":
        return make_generator(rollout.backend, model, tokenizer, max_batch_size=rows)
    graphs = "auto" if rollout.cuda_graphs else "off"
    kept = int(rollout.prefix_cache_gib * 2**30)
    gen = make_generator(rollout.backend, model, tokenizer, max_batch_size=rows, graphs=graphs, store_bytes=kept)
    compile_decode = rollout.compile_decode if rollout.compile_decode is not None else device.type == "cuda"
    if compile_decode and getattr(gen, "step", None) is not None:
        gen.step.compile()
    return gen
