"""The vLLM backend against a stand-in ``vllm`` package shaped like vLLM's V1 API (0.10 on): ``LLM`` keeps its engine
core in a child process unless ``VLLM_ENABLE_V1_MULTIPROCESSING=0`` (only then is ``llm_engine.model_executor`` there),
``collective_rpc`` refuses a function without ``VLLM_ALLOW_INSECURE_SERIALIZATION=1``, bfloat16 is refused below
compute capability 8.0, and sleep mode needs ``enable_sleep_mode``. No vLLM install is needed."""

from __future__ import annotations

import os
import sys
import types
from datetime import timedelta

import pytest
import torch

from searchrl.generation.base import SamplingParams
from searchrl.generation.vllm import VLLMGenerator


class FakeModel:
    def __init__(self) -> None:
        self.loaded: list[tuple[str, torch.Tensor]] = []

    def load_weights(self, weights) -> set[str]:
        self.loaded.extend(weights)
        return {name for name, _ in self.loaded}


class FakeLLM:
    def __init__(self, model: str, **kwargs) -> None:
        cuda = torch.cuda.is_available()
        if kwargs.get("dtype") == "bfloat16" and cuda and torch.cuda.get_device_capability() < (8, 0):  # vLLM's
            raise ValueError("Bfloat16 is only supported on GPUs with compute capability of at least 8.0.")
        self.kwargs = kwargs
        self.calls: list[str] = []
        self.model = FakeModel()
        self.llm_engine = types.SimpleNamespace()
        if os.environ.get("VLLM_ENABLE_V1_MULTIPROCESSING", "1") == "0":  # vLLM's default: the core in a child
            runner = types.SimpleNamespace(model=self.model)
            worker = types.SimpleNamespace(worker=types.SimpleNamespace(model_runner=runner))
            self.llm_engine.model_executor = types.SimpleNamespace(driver_worker=worker)

    def collective_rpc(self, method, timeout=None, args=(), kwargs=None):
        if callable(method) and os.environ.get("VLLM_ALLOW_INSECURE_SERIALIZATION") != "1":
            raise TypeError(
                f"Object of type {type(method)} is not serializableSet VLLM_ALLOW_INSECURE_SERIALIZATION=1 to allow "
                "fallback to pickle-based serialization."
            )
        raise AssertionError("the weights must not travel through collective_rpc")

    def reset_prefix_cache(self, reset_running_requests: bool = False, reset_connector: bool = False) -> bool:
        self.calls.append("reset_prefix_cache")
        return True

    def generate(self, prompts, sampling_params, *, use_tqdm=True, lora_request=None):
        self.calls.append("generate")
        self.sampling = list(sampling_params)
        outs = []
        for p in prompts:
            ids = [5, 6]
            out = types.SimpleNamespace(
                token_ids=ids,
                logprobs=[{i: types.SimpleNamespace(logprob=-0.25)} for i in ids],
                stop_reason=None,
                finish_reason="length",
            )
            outs.append(types.SimpleNamespace(prompt_token_ids=p["prompt_token_ids"], outputs=[out]))
        return outs


@pytest.fixture
def fake_vllm(monkeypatch):
    """The stand-in package in sys.modules; the vLLM environment variables restored after the test."""
    for name in ("VLLM_ENABLE_V1_MULTIPROCESSING", "VLLM_ALLOW_INSECURE_SERIALIZATION", "WORLD_SIZE"):
        monkeypatch.delenv(name, raising=False)
    vllm = types.ModuleType("vllm")
    inputs = types.ModuleType("vllm.inputs")
    vllm.LLM = FakeLLM
    vllm.SamplingParams = lambda **kw: types.SimpleNamespace(**kw)
    inputs.TokensPrompt = lambda prompt_token_ids: {"prompt_token_ids": prompt_token_ids}
    monkeypatch.setitem(sys.modules, "vllm", vllm)
    monkeypatch.setitem(sys.modules, "vllm.inputs", inputs)
    return vllm


class Tok:
    def decode(self, ids, **kw) -> str:
        return " ".join(map(str, ids))


def test_weights_reach_the_engine_model_in_this_process(fake_vllm) -> None:
    """vLLM V1 keeps its engine core in a child process by default, where a function sent through collective_rpc
    is refused (vLLM >= 0.9): the engine must run in-process, and the weights go straight to its model."""
    gen = VLLMGenerator("policy-dir", Tok())
    w = {"model.embed_tokens.weight": torch.ones(3, 2), "lm_head.weight": torch.zeros(3, 2, requires_grad=True)}
    gen.load_weights(w)
    assert os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] == "0"
    assert "distributed_executor_backend" not in gen.llm.kwargs  # one process: vLLM's own single-process executor
    loaded = dict(gen.llm.model.loaded)
    assert list(loaded) == list(w) and all(not t.requires_grad for t in loaded.values())
    assert torch.equal(loaded["model.embed_tokens.weight"], w["model.embed_tokens.weight"])
    assert gen.llm.calls == ["reset_prefix_cache"]  # keys/values of the old weights are dropped


def test_an_engine_out_of_reach_is_one_clear_error(fake_vllm, monkeypatch) -> None:
    gen = VLLMGenerator("policy-dir", Tok())
    del gen.llm.llm_engine.model_executor  # as if the core ran in a child process after all
    with pytest.raises(RuntimeError, match="VLLM_ENABLE_V1_MULTIPROCESSING=0"):
        gen.load_weights({"lm_head.weight": torch.zeros(3, 2)})


def test_each_launched_process_starts_its_engine_with_the_external_launcher(fake_vllm, monkeypatch) -> None:
    """Under ``accelerate launch`` each process's engine must use its own GPU (LOCAL_RANK) and the launcher's
    process group: vLLM's external_launcher backend; its single-process executor would put every engine on GPU 0."""
    monkeypatch.setenv("WORLD_SIZE", "2")
    gen = VLLMGenerator("policy-dir", Tok())
    assert gen.llm.kwargs["distributed_executor_backend"] == "external_launcher"


def test_the_process_group_is_started_before_the_engine_joins_it(monkeypatch) -> None:
    from searchrl.device import process_group

    made: list[dict] = []
    accelerate = types.ModuleType("accelerate")
    accelerate.PartialState = lambda **kw: made.append(kw)
    monkeypatch.setitem(sys.modules, "accelerate", accelerate)
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    process_group(120)
    assert made == []  # one process: nothing to start
    monkeypatch.setenv("WORLD_SIZE", "4")
    process_group(120)
    assert made == [{"timeout": timedelta(seconds=120)}]  # the run's collective timeout, as the trainer sets it


@pytest.mark.parametrize(("capability", "dtype"), [((7, 0), "float16"), ((7, 5), "float16"), ((8, 0), "bfloat16")])
def test_the_engine_dtype_follows_the_gpu(fake_vllm, monkeypatch, capability, dtype) -> None:
    """A V100 (7.0) or T4 (7.5) has no bf16: vLLM refuses dtype=bfloat16 there, so the engine takes float16 (as
    training.precision=auto takes fp32); Ampere (8.0) on keeps bfloat16."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *a: capability)
    assert VLLMGenerator("policy-dir", Tok()).llm.kwargs["dtype"] == dtype
    assert VLLMGenerator("policy-dir", Tok(), dtype="float32").llm.kwargs["dtype"] == "float32"  # one given wins


def test_generate_returns_ids_logprobs_and_reason(fake_vllm) -> None:
    gen = VLLMGenerator("policy-dir", Tok())
    a, b = gen.generate([[1, 2, 3], [1, 2, 3]], SamplingParams(max_new_tokens=2, seed=7))
    assert (a.token_ids, a.logprobs, a.finish_reason, a.text) == ([5, 6], [-0.25, -0.25], "length", "5 6")
    sp = gen.llm.sampling
    assert [s.seed for s in sp] == [7, 8] and sp[0].logprobs == 0 and sp[0].include_stop_str_in_output
