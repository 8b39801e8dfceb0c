"""vLLM backend (optional extra ``searchrl[vllm]``): same interface as the HF generator, much faster on GPUs.

Imported lazily. The engine shares the trainer's process and GPU, as TRL's and veRL's colocated engines do: vLLM's V1
engine core runs in this process (``VLLM_ENABLE_V1_MULTIPROCESSING=0``), so ``load_weights`` hands the trainer's
tensors to the engine's model directly. In V1's default child process the model is out of reach, and sending it a
function through ``collective_rpc`` is refused from vLLM 0.9 on (unless ``VLLM_ALLOW_INSECURE_SERIALIZATION=1``),
the weights then pickled through a socket. Launched over several processes (``accelerate launch``), each process
starts its own engine on its own GPU with vLLM's ``external_launcher`` backend, which reads the launcher's ranks.
"""

from __future__ import annotations

import functools
import os

from searchrl.generation.base import Completion, Generator, SamplingParams
from searchrl.generation.prompts import reply_end_ids
from searchrl.utils import MissingDependency


def engine_dtype() -> str:
    """The engine's dtype: bfloat16 on a GPU with bf16 arithmetic (compute capability 8.0 on, as for
    ``training.precision=auto``), float16 below it, where vLLM refuses bfloat16 (a V100 or T4). The trainer
    recomputes the rollout's log-probs from its own forward, so the engine's rounding does not enter the ratio."""
    import torch

    from searchrl.device import native_bf16

    return "bfloat16" if torch.cuda.is_available() and native_bf16(torch.device("cuda")) else "float16"


class VLLMGenerator(Generator):
    """``gpu_memory_utilization``: the share of the GPU's whole memory the engine takes (weights, activations and
    KV cache; vLLM refuses to start if that much is not free). ``sleep``: vLLM's sleep mode, the engine's weights
    moved to CPU memory and its KV cache freed after each rollout (level 1), so the update has that GPU memory; the
    next generate or weight push wakes it."""

    _sleep = False
    _asleep = False

    def __init__(
        self,
        model_path: str,
        tokenizer,
        gpu_memory_utilization: float = 0.6,
        dtype: str | None = None,
        sleep: bool = False,
    ) -> None:
        try:
            from vllm import LLM
        except ImportError as err:  # pragma: no cover - depends on an optional install
            raise MissingDependency("rollout.backend=vllm needs vllm: pip install 'searchrl[vllm]'") from err
        self.tokenizer = tokenizer
        self.model_path = model_path
        os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"  # the engine core in this process: its model in reach
        extra: dict = {"enable_sleep_mode": True} if sleep else {}
        if int(os.environ.get("WORLD_SIZE", "1")) > 1:  # one engine per launched process, on its LOCAL_RANK's GPU
            extra["distributed_executor_backend"] = "external_launcher"
        self.llm = LLM(
            model=model_path,
            gpu_memory_utilization=gpu_memory_utilization,
            dtype=dtype or engine_dtype(),
            enable_prefix_caching=True,
            **extra,
        )
        self._sleep = sleep

    @functools.cached_property
    def stop_ids(self) -> list[int]:
        """Stops besides the generation config's EOS ids (vLLM's own): the token the chat template ends a reply with
        (which SFT targets end with; a base model's generation config may lack it)."""
        return reply_end_ids(self.tokenizer)

    def generate(self, prompts: list[list[int]], params: SamplingParams) -> list[Completion]:
        from vllm import SamplingParams as VSP
        from vllm.inputs import TokensPrompt

        self._wake()
        # One seed per prompt: identical prompts (a GRPO group) must not share a seed, or they sample alike. The
        # rollout engine's per-row streams (row_seeds) when given.
        sps = [
            VSP(
                max_tokens=params.max_new_tokens,
                temperature=max(params.temperature, 0.0),
                top_p=params.top_p,
                stop=list(params.stop),
                stop_token_ids=list(self.stop_ids),
                include_stop_str_in_output=True,
                logprobs=0,
                seed=params.row_seeds[i] if params.row_seeds else (None if params.seed is None else params.seed + i),
            )
            for i in range(len(prompts))
        ]
        results = self.llm.generate([TokensPrompt(prompt_token_ids=p) for p in prompts], sps, use_tqdm=False)
        out = []
        for r in results:
            o = r.outputs[0]
            ids = list(o.token_ids)
            logprobs = [lp[t].logprob for lp, t in zip(o.logprobs or [], ids, strict=False)] or [0.0] * len(ids)
            stop_str = o.stop_reason if isinstance(o.stop_reason, str) else None
            reason = "stop" if stop_str else ("length" if o.finish_reason == "length" else "eos")
            # vLLM cuts its text at the end of the stop string, inside the token that completed it (``>.`` after
            # ``</answer>``); the completion's text is its ids decoded, as the HF backends return it
            text = self.tokenizer.decode(ids, skip_special_tokens=True, clean_up_tokenization_spaces=False)
            out.append(Completion(ids, logprobs, text, reason, stop_str))
        return out

    def load_weights(self, state_dict: dict) -> None:
        """Load new policy weights (the base model's names, as ``save_pretrained`` writes them) into the engine's
        model, then drop its prefix cache (its keys/values came from the old weights)."""
        self._wake()
        executor = getattr(self.llm.llm_engine, "model_executor", None)  # absent while V1's core runs apart
        worker = getattr(executor, "driver_worker", None)
        runner = getattr(getattr(worker, "worker", worker), "model_runner", None)
        if runner is None:
            raise RuntimeError(
                "rollout.backend=vllm: the engine's model is not in this process; start it with "
                "VLLM_ENABLE_V1_MULTIPROCESSING=0 (VLLMGenerator sets it before it builds the engine)"
            )
        runner.model.load_weights([(k, v.detach()) for k, v in state_dict.items()])
        if hasattr(self.llm, "reset_prefix_cache"):  # vLLM >= 0.7
            self.llm.reset_prefix_cache()

    def reset(self) -> None:
        """After each rollout (the rollout engine calls it): with ``sleep``, the engine goes to sleep."""
        if self._sleep and not self._asleep:
            self.llm.sleep(level=1)  # weights backed up in CPU memory: a rollout with no push since still runs
            self._asleep = True

    def _wake(self) -> None:
        if self._asleep:
            self.llm.wake_up()
            self._asleep = False
