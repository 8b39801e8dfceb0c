"""vLLM backend (optional extra ``searchrl[vllm]``): same interface as the HF generator, much faster on GPUs.

Imported lazily. ``load_weights`` pushes the trainer's current policy weights into the engine between steps.
"""

from __future__ import annotations

import functools

from searchrl.generation.base import Completion, Generator, SamplingParams
from searchrl.generation.prompts import reply_end_ids
from searchrl.utils import MissingDependency


class VLLMGenerator(Generator):
    def __init__(
        self, model_path: str, tokenizer, gpu_memory_utilization: float = 0.6, dtype: str = "bfloat16"
    ) -> None:
        try:
            from vllm import LLM
        except ImportError as err:  # pragma: no cover - depends on an optional install
            raise MissingDependency("rollout.backend=vllm needs vllm: pip install 'searchrl[vllm]'") from err
        self.tokenizer = tokenizer
        self.model_path = model_path
        self.llm = LLM(
            model=model_path, gpu_memory_utilization=gpu_memory_utilization, dtype=dtype, enable_prefix_caching=True
        )

    @functools.cached_property
    def stop_ids(self) -> list[int]:
        """Stops besides the generation config's EOS ids (vLLM's own): the token the chat template ends a reply with
        (which SFT targets end with; a base model's generation config may lack it)."""
        return reply_end_ids(self.tokenizer)

    def generate(self, prompts: list[list[int]], params: SamplingParams) -> list[Completion]:
        from vllm import SamplingParams as VSP
        from vllm.inputs import TokensPrompt

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

    def load_weights(self, state_dict: dict) -> None:  # pragma: no cover - needs a vLLM install
        """Load new policy weights into the running engine, then drop its prefix cache (its keys/values came from
        the old weights). Works with the in-process engine (V0 and V1 with ``VLLM_ENABLE_V1_MULTIPROCESSING=0``)
        and, through ``collective_rpc``, with a multi-process V1 engine."""
        items = [(k, v.detach()) for k, v in state_dict.items()]
        executor = self.llm.llm_engine.model_executor if hasattr(self.llm.llm_engine, "model_executor") else None
        worker = getattr(executor, "driver_worker", None)
        runner = getattr(getattr(worker, "worker", worker), "model_runner", None)
        if runner is not None and hasattr(runner, "model"):
            runner.model.load_weights(items)
        else:
            self.llm.collective_rpc(_load_weights_rpc, args=(items,))
        if hasattr(self.llm, "reset_prefix_cache"):
            self.llm.reset_prefix_cache()


def _load_weights_rpc(worker, items) -> None:  # pragma: no cover - runs inside a vLLM worker process
    worker.model_runner.model.load_weights(items)
