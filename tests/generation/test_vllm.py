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
    def __init__(self, llm: FakeLLM) -> None:
        self.llm = llm
        self.loaded: list[tuple[str, torch.Tensor]] = []

    def load_weights(self, weights) -> set[str]:
        assert not self.llm.asleep, "weights loaded into a sleeping engine"
        self.llm.calls.append("load_weights")
        self.loaded.extend(weights)
        return {name for name, _ in self.loaded}


class FakeLLM:
    def __init__(self, model: str, **kwargs) -> None:
        cuda = torch.cuda.is_available()
        if kwargs.get("dtype") == "bfloat16" and cuda and torch.cuda.get_device_capability() < (8, 0):  # vLLM's
            raise ValueError("Bfloat16 is only supported on GPUs with compute capability of at least 8.0.")
        self.kwargs = kwargs
        self.calls: list[str] = []
        self.asleep = False
        self.model = FakeModel(self)
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

    def sleep(self, level: int = 1) -> None:
        assert self.kwargs.get("enable_sleep_mode"), "Sleep mode is not enabled"
        self.calls.append(f"sleep({level})")
        self.asleep = True

    def wake_up(self, tags: list[str] | None = None) -> None:
        self.calls.append("wake_up")
        self.asleep = False

    def generate(self, prompts, sampling_params, *, use_tqdm=True, lora_request=None):
        assert not self.asleep, "generate on a sleeping engine"
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
    assert gen.llm.calls == ["load_weights", "reset_prefix_cache"]  # keys/values of the old weights are dropped


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


def test_sleep_mode_frees_the_engine_between_rollouts(fake_vllm) -> None:
    gen = VLLMGenerator("policy-dir", Tok(), sleep=True)
    assert gen.llm.kwargs["enable_sleep_mode"] is True
    gen.generate([[1]], SamplingParams())
    gen.reset()  # the rollout engine's call at the end of each rollout
    gen.reset()
    gen.load_weights({"lm_head.weight": torch.zeros(3, 2)})  # woken before its weights are replaced
    gen.generate([[1]], SamplingParams())
    gen.reset()
    gen.generate([[1]], SamplingParams())  # a rollout with no push since (held-out evaluation) wakes it too
    assert gen.llm.calls == [
        "generate",
        "sleep(1)",
        "wake_up",
        "load_weights",
        "reset_prefix_cache",
        "generate",
        "sleep(1)",
        "wake_up",
        "generate",
    ]
    plain = VLLMGenerator("policy-dir", Tok())
    plain.generate([[1]], SamplingParams())
    plain.reset()  # without sleep mode the engine stays up (and keeps its prefix cache)
    assert "enable_sleep_mode" not in plain.llm.kwargs and plain.llm.calls == ["generate"]


def test_train_builds_the_engine_from_the_rollout_config(fake_vllm, tmp_path, monkeypatch) -> None:
    """``searchrl train`` with rollout.backend=vllm: the engine takes rollout.vllm_gpu_memory_utilization and
    rollout.vllm_sleep, sleeps after each rollout and is woken for each weight push."""
    import json

    import searchrl.models
    import searchrl.stages.train as train_stage
    from searchrl.config import load_config
    from searchrl.generation.fake import ByteTokenizer
    from searchrl.retrieval.base import Hit
    from searchrl.testing import tiny_model

    rows = [{"id": f"q{i}", "question": "Which country is Lyon in?", "golden_answers": ["France"]} for i in range(2)]
    (tmp_path / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    cfg = load_config(
        "search_r1_grpo",
        [
            f"data.source={tmp_path}",
            "data.train=train.jsonl",
            "model.policy=tiny",
            "training.init_from=null",
            "training.steps=2",
            "training.prompts_per_step=2",
            "training.warmup_steps=0",
            f"training.output_dir={tmp_path / 'run'}",
            "training.save_every=0",
            "training.save_at_end=false",
            "training.tensorboard=false",
            "rollout.group_size=2",
            "rollout.max_turns=1",
            "algorithm.mini_batch_size=4",
            "algorithm.kl_coef=0",
            "rollout.backend=vllm",
            "rollout.vllm_gpu_memory_utilization=0.3",
            "rollout.vllm_sleep=true",
        ],
    )

    class Retriever:
        def search(self, queries, k):
            return [[Hit("d", "Lyon", "Lyon is in France.", 1.0)] * k for _ in queries]

    monkeypatch.setattr(searchrl.models, "load_policy", lambda *a, **k: (tiny_model(), ByteTokenizer()))
    monkeypatch.setattr(searchrl.models, "resolve_policy", lambda spec: "policy-dir")
    monkeypatch.setattr(train_stage, "make_retriever_for", lambda *a, **k: Retriever())
    trainer = train_stage.build_trainer(cfg)
    llm = trainer.generator.llm
    assert llm.kwargs["gpu_memory_utilization"] == 0.3 and llm.kwargs["enable_sleep_mode"] is True
    trainer.train()
    first_sleep = llm.calls.index("sleep(1)")
    assert set(llm.calls[:first_sleep]) == {"generate"}  # step 1 rolls out on the engine's own initial weights
    assert llm.calls[first_sleep:][:4] == ["sleep(1)", "wake_up", "load_weights", "reset_prefix_cache"]
    assert llm.calls[-1] == "sleep(1)" and llm.model.loaded  # the update's weights pushed, then the engine slept
