"""The sections of a run config: one frozen pydantic model per concern (model, data, retrieval, rollout, reward,
algorithm, training, sft, memorization, evaluation, pipeline stages) and ``RunConfig``, which holds them all and checks
the settings that are valid alone but not together."""

from __future__ import annotations

from typing import Annotated, Any, Literal, get_args

from pydantic import AfterValidator, Field, field_validator, model_validator

from searchrl.config.algorithms import AlgorithmConfig, algorithm, critic_algorithms, ungrouped
from searchrl.config.base import DeviceSpec, Section, check_fields
from searchrl.config.evaluation import EvaluationConfig
from searchrl.config.extensions import absolute_file, import_plugin, known
from searchrl.config.retrieval import RetrievalConfig
from searchrl.config.rewards import RewardConfig


class LoraConfig(Section):
    r: int = 16
    alpha: int = 32
    dropout: float = 0.05
    target_modules: list[str] = Field(default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj"])


class ModelConfig(Section):
    """The policy (and optional reference / reader models), as spec strings: HF id, local dir or alias."""

    policy: str = "smollm2-135m-instruct"
    #: the trained policy's weights (fp32 = master weights under bf16 mixed precision; see training.precision);
    #: float16 only for models that are not trained (evaluation): with no loss scaling, training refuses it.
    dtype: Literal["float32", "bfloat16", "float16"] = "float32"
    #: auto (CUDA when present, else CPU), cpu, cuda, cuda:N: every model and sampler follows it (searchrl.device).
    device: DeviceSpec = "auto"
    lora: LoraConfig | None = None
    #: chat template for instruct models, plain text for base models; "auto" asks the tokenizer.
    prompt_style: Literal["auto", "chat", "raw"] = "auto"
    #: R-Search's frozen reader for the evidence reward; None means "the initial policy".
    reader: str | None = None
    #: the reader's decoding (0 = greedy); R-Search's code: temperature 0.1, top-p 0.9, 512 tokens.
    reader_temperature: float = Field(default=0.0, ge=0.0)
    reader_top_p: float = Field(default=1.0, gt=0.0, le=1.0)
    reader_max_new_tokens: int = Field(default=32, ge=1)


class WorldConfig(Section):
    """Synthetic world used when ``data.source == 'synthetic'``."""

    entities: int = 600
    seed: int = 0
    #: question wording: "fixed" (one per question shape) or "varied" (several per shape; searchrl.data.synth_surface)
    surface: Literal["fixed", "varied"] = "fixed"
    #: "fixed" (the world's twelve relations) or "open" (also a broad pool of further ones; searchrl.data.synth_open)
    relations: Literal["fixed", "open"] = "fixed"
    #: shares of the comparison questions asked as yes/no ("Were A and B born in the same country?") and as bridge
    #: comparisons ("Which film has the director who was born earlier, A or B?"); 0 keeps the earlier world.
    yes_no: float = Field(default=0.0, ge=0.0, le=1.0)
    bridge_comparisons: float = Field(default=0.0, ge=0.0, le=1.0)
    deaths: bool = False  #: also compare people, and works by their creators, on the year they died

    @model_validator(mode="after")
    def _comparison_shares(self) -> WorldConfig:
        if (total := self.yes_no + self.bridge_comparisons) > 1.0:
            raise ValueError(f"yes_no + bridge_comparisons = {total}: shares of the comparison questions, at most 1")
        return self


class DataConfig(Section):
    #: "synthetic" builds (or reuses) a generated world under the run's cache; otherwise a path to a world dir.
    source: str = "synthetic"
    world: WorldConfig = WorldConfig()
    #: QA files (paths or ``hf:NAME[:CONFIG]:SPLIT``); relative to ``source`` when it is a directory.
    train: str = "train.jsonl"
    dev: str = "dev.jsonl"
    test: str = "test.jsonl"
    corpus: str = "corpus.jsonl"
    #: your QA files' names for a question's parts where they differ from the usual ones (question, golden_answers
    #: / answer, id): e.g. {question: query_text, answers: gold, id: uid}.
    fields: dict[str, str] = Field(default_factory=dict)
    #: restrict the training questions to these synthetic kinds (empty = all).
    kinds: list[str] = Field(default_factory=list)
    #: keep only training questions of these styles (empty = all): a synthetic question's template (e.g.
    #: bridge:born_in.country) or kind, any other question's generic template from its text (e.g. "who is the
    #: father of <e>?"; see searchrl.data.styles; `searchrl data inspect FILE --styles` lists a file's).
    styles: list[str] = Field(default_factory=list)
    #: drop training questions of these styles (same names as data.styles): held out, to measure at evaluation how
    #: the trained agent does on question styles it never trained on (the per-style table of the eval summary).
    held_out_styles: list[str] = Field(default_factory=list)
    train_limit: int | None = Field(default=None, ge=1)

    @field_validator("fields")
    @classmethod
    def _check_fields(cls, v: dict[str, str]) -> dict[str, str]:
        return check_fields(v)

    @model_validator(mode="after")
    def _check_styles(self) -> DataConfig:
        both = sorted(set(self.styles) & set(self.held_out_styles))
        if both:
            raise ValueError(f"data.styles and data.held_out_styles both name {both}: keep each style in one of them")
        return self


class RolloutConfig(Section):
    #: the text protocol; "reason" and "rag" are the trained baselines' (no search; rag: documents in the prompt).
    protocol: Annotated[str, AfterValidator(known("protocol"))] = "search_r1"
    #: the policy's generator during training: "hf" (our decode loop on the training weights), "hf_generate"
    #: (transformers' generate; slower fallback), "vllm" (a separate engine; weights pushed before each rollout).
    backend: Literal["hf", "hf_generate", "vllm"] = "hf"
    #: "vllm": the share of the GPU's whole memory the engine takes (weights, activations, KV cache); vLLM refuses to
    #: start when that much is not free, and the trainer has the rest (docs/gpu.md).
    vllm_gpu_memory_utilization: float = Field(default=0.6, gt=0.0, lt=1.0)
    #: "vllm": vLLM's sleep mode: after each rollout the engine's weights go to CPU memory and its KV cache is freed,
    #: so the update has that GPU memory; it wakes for the next weight push or rollout (vLLM >= 0.8 on CUDA).
    vllm_sleep: bool = False
    #: rows the "hf" backends decode together at most (a step's rollouts beyond it decode in further passes); null:
    #: 64 on the CPU, 512 on a GPU (a Qwen2.5-3B row of 1,280 tokens keeps 46 MB of keys/values: 24 GB for 512).
    max_batch_size: int | None = Field(default=None, ge=1)
    #: "hf" backend on CUDA: replay each decode step from a CUDA graph (searchrl.generation.graph_decode).
    cuda_graphs: bool = True
    #: "hf" backend: GiB of keys/values a row keeps from one turn for the next, so the next turn prefills only the
    #: observation and what follows (rows past the cap prefill their whole context again; 0: none kept). Freed after
    #: each rollout. At a GPU paper scale a turn's rows hold more (Qwen2.5-3B, 512 rows of 800 tokens: ~15 GiB).
    prefix_cache_gib: float = Field(default=2.0, ge=0.0)
    #: "hf" backend: compile the decode step's layers (torch.compile, one graph for every layer), fusing the small
    #: kernels (norms, rotary, casts, masking) that dominate a GPU decode step; replayed from CUDA graphs on CUDA.
    #: null: on CUDA, off on the CPU. Compiling costs ~7 s a graph on an H200; without a compiler it decodes eagerly.
    compile_decode: bool | None = None
    #: continuous batching across turns (searchrl.rollout.continuous): a row that finishes a turn leaves the decode
    #: batch, its search runs in a background thread, and it re-enters with only the new tokens prefilled while the
    #: other rows keep decoding. Same trajectories as turn-by-turn decoding up to floating-point rounding; needs the
    #: "hf" backend on a Llama-architecture model (other generators decode turn by turn) and runs without CUDA
    #: graphs. See docs/rollout.md.
    continuous: bool = False
    #: rollouts per question: the GRPO/RLOO group (must be > 1: a group of one is its own baseline, advantage 0);
    #: PPO and REINFORCE++ work with any size (Search-R1's PPO uses 1).
    group_size: int = Field(default=4, ge=1)
    max_turns: int = Field(default=4, ge=1)
    max_searches: int = Field(default=4, ge=0)
    max_new_tokens: int = Field(default=128, ge=1)
    max_obs_tokens: int = Field(default=256, ge=1)
    #: each query's documents cut to this many tokens (head kept) before the observation is built; null = no cap.
    #: RAG-R1's code (max_obs_length = 1000 per query); only protocols that take ``fit_docs`` (rag_r1) support it.
    max_obs_tokens_per_query: int | None = Field(default=None, ge=1)
    max_total_tokens: int = Field(default=1536, ge=1)
    temperature: float = Field(default=1.0, ge=0.0)
    #: nucleus sampling: the smallest set of tokens holding this much probability (1 = the whole vocabulary).
    top_p: float = Field(default=1.0, gt=0.0, le=1.0)
    #: at the budget: "hint" (the protocol's answer-now text, then one final turn), "silent" (one final turn, nothing
    #: inserted, search disabled), "end" (the sample ends; an over-budget search is not run), "off" (no final turn;
    #: an over-budget search gets the hint). true = hint, false = off. See searchrl.rollout.engine.
    force_answer: Literal["hint", "silent", "end", "off"] = "hint"
    #: a turn ending in EOS with no answer gets the protocol's invalid-action text and the trajectory goes on, the
    #: EOS dropped (Search-R1's, R-Search's, RAG-R1's loops); false: it ends the trajectory (stop_reason eos).
    continue_after_eos: bool = False
    #: RAG-R1 multi-query mode and tool_call: at most this many queries in one search call.
    max_queries_per_call: int = Field(default=3, ge=1)
    #: protocol-specific options (e.g. {"multi_query": true} for rag_r1).
    options: dict[str, Any] = Field(default_factory=dict)

    @field_validator("force_answer", mode="before")
    @classmethod
    def _force_mode(cls, v: Any) -> Any:
        return ("hint" if v else "off") if isinstance(v, bool) else v


_Beta = Annotated[float, Field(ge=0.0, lt=1.0)]


class TrainingConfig(Section):
    steps: int = Field(default=20, ge=1)
    #: questions per RL step over all processes (must be divisible by the number of processes).
    prompts_per_step: int = Field(default=4, ge=1)
    lr: float = Field(default=1e-6, gt=0.0)
    critic_lr: float = Field(default=1e-5, gt=0.0)
    warmup_steps: int = Field(default=0, ge=0)
    critic_warmup_steps: int = Field(default=0, ge=0)  #: linear warm-up of the critic's learning rate (PPO), in steps
    weight_decay: float = Field(default=0.0, ge=0.0)  #: AdamW's, for the policy and the critic
    adam_betas: tuple[_Beta, _Beta] = (0.9, 0.999)  #: AdamW's, policy and critic (veRL's; OpenRLHF's: 0.9, 0.95)
    #: gradients are clipped to this global norm (a negative one would flip them, 0 would zero them)
    max_grad_norm: float = Field(default=1.0, gt=0.0)
    #: an optimizer step whose gradient norm is not finite (NaN / inf: an overflow, a loss gone NaN) is skipped, the
    #: weights and optimizer state left as they were, and counted (RL: update/skipped_steps; SFT: skipped_steps);
    #: this many skipped in a row stop the run (RL and SFT) with an error.
    max_skipped_steps: int = Field(default=3, ge=1)
    #: sequences per forward/backward micro-batch at most (gradients accumulate over a mini-batch's micro-batches);
    #: null: 16 on the CPU, 64 on a GPU.
    micro_batch_size: int | None = Field(default=None, ge=1)
    #: tokens per micro-batch at most: distinct prompts x longest prompt + rows x longest response (a shared prompt
    #: runs once; rows length-bucketed; no-grad scoring uses 4x this and 4x the rows). Bounds activation memory.
    #: null: 2048 on the CPU (larger passes gain nothing there), 8192 on a GPU (small passes leave it idle).
    micro_batch_tokens: int | None = Field(default=None, ge=1)
    seed: int = 0
    #: compute precision: auto (bf16 mixed on a GPU with bf16 arithmetic, Ampere on; else fp32), fp32, bf16
    #: (autocast; fp32 weights and optimizer).
    precision: Literal["auto", "fp32", "bf16"] = "auto"
    gradient_checkpointing: bool = False  #: recompute activations in the backward pass (long rows, large models)
    #: torch.compile each decoder layer of the policy for its scoring and update passes (one graph serves every
    #: layer), fusing the norms, rotary embedding and activation kernels around the matmuls: fewer kernel launches
    #: where a GPU step is bound by the host. The first passes pay the compilation (a few graphs until the changing
    #: micro-batch shapes are treated as dynamic). Same values up to float rounding (tested on the CPU). One process
    #: only; off by default until measured on a GPU.
    compile_layers: bool = False
    output_dir: str = "runs/default"
    #: a resumable checkpoint (weights, optimizer, data position, RNG) every this many steps; 0: only at the end.
    save_every: int = Field(default=10, ge=0)
    #: also keep the model (weights only, as <output_dir>/models/step_<k>) every this many steps, to go back to a step
    #: before a collapse; 0: none. The checkpoint above is only ever the latest.
    keep_models_every: int = Field(default=0, ge=0)
    #: at the end, write the resumable checkpoint and the trained model (<output_dir>/final, what a pipeline's next
    #: stage loads); false for runs that only time steps (a 3B policy's checkpoint with its Adam state is ~36 GB).
    save_at_end: bool = True
    tensorboard: bool = True
    wandb: bool = False
    init_from: str | None = None  #: a checkpoint / model dir to start from instead of model.policy (e.g. an SFT's)
    #: trajectories per step appended to <output_dir>/rollouts.jsonl (for `searchrl view`); 0 disables.
    log_rollouts: int = Field(default=4, ge=0)
    #: greedy held-out evaluation (data.dev questions) before training, every this many steps and at the end;
    #: 0 disables. Logged as eval/* in metrics.jsonl; trajectories in <output_dir>/evals/step_<k>.jsonl.
    eval_every: int = Field(default=0, ge=0)
    eval_limit: int | None = Field(default=100, ge=1)  #: held-out questions evaluated (the first N of data.dev)
    #: several processes: how long a process waits in a collective for the others before the run fails. Meanwhile
    #: the main process alone runs the held-out evaluation and writes checkpoints and models (a 7B checkpoint with its
    #: Adam state is ~84 GB); accelerate's own limit is 10 minutes with NCCL. A process that crashes ends the launch
    #: at once whatever this is; only a process that hangs is waited for this long.
    collective_timeout_s: int = Field(default=3600, ge=1)
    #: 1: one-step off-policy. Step t+1's rollouts are made in a background thread while step t updates, by a frozen
    #: copy of the weights step t started from (staleness 1; that copy's log-probs are the ratio's old log-probs).
    #: 0: on-policy. One process only; docs/recipes.md "One-step off-policy rollouts".
    off_policy_steps: Literal[0, 1] = 0
    #: profile this step (1-based; 0: none) with torch.profiler: <output_dir>/profile_step<k>.txt lists the operators
    #: by host and device time, the step's phases (rollout, score, update) labelled (the main process's). Runs slower.
    profile_step: int = Field(default=0, ge=0)


class MemorizationConfig(Section):
    """R1-Searcher++'s memorization loss (spec 000 §4.2.2, Eq. 8-9): L = -J + coef * NLL(rewritten paths | q).

    A frozen rewriter turns correct, retrieval-using rollouts into internal-only reasoning paths (the rollout's
    documents sit in the rewriter's prompt); paths that pass the protocol's format check, make no search call and
    reach a correct answer become NLL targets for the policy, conditioned on the question alone. The paper leaves
    the choices below open (NOT STATED); the defaults are ours.
    """

    #: mu, the NLL weight (paper: 0.1); 0 disables the loss and the rewriter.
    coef: float = Field(default=0.0, ge=0.0)
    #: rewriter model spec (HF id, local dir, alias); None = a frozen copy of the initial policy. The paper
    #: fine-tunes a separate model first: `searchrl sft --recipe r1_searcher_pp sft.data=rewriter_oracle`.
    rewriter: str | None = None
    max_new_tokens: int = Field(default=256, ge=1)
    temperature: float = Field(default=0.0, ge=0.0)  #: rewriter decoding (0 = greedy).
    #: correctness test of a rollout and of its rewrite (a name in searchrl.rewards.METRICS); null = the answer
    #: reward's own rule (searchrl.rewards.Correctness.from_reward_config), so "correct" means one thing per run.
    metric: str | None = None
    #: rewrites whose answer has more words fail validation; null = the answer reward's ``max_words``.
    max_answer_words: int | None = None
    #: also rewrite correct rollouts that made no search (the paper's Fig. 1 shows "Info: None"); off by default.
    include_no_retrieval: bool = False
    #: rewrites requested per question per step (correct rollouts of one group are near duplicates).
    per_question: int = 1
    #: rewriter calls per step at most (bounds its cost); per process when several train.
    max_rewrites_per_step: int = 16
    #: a rewrite that mentions any of these (case-insensitive) reveals the documents and fails validation.
    reject_phrases: list[str] = Field(
        default_factory=lambda: (
            "provided|given documents|the documents|the document|knowledge matrix|search result|"
            "according to the".split("|")
        )
    )
    #: validated paths are kept in a FIFO pool of this size across steps (0 = only this step's paths).
    pool_size: int = 256
    #: paths drawn from the pool for each step's NLL term.
    batch_size: int = 16


class SFTConfig(Section):
    epochs: int = Field(default=1, ge=1)
    lr: float = Field(default=5e-5, gt=0)
    #: examples per optimizer step; the loss is the token-mean over all their loss_mask == 1 tokens, whatever the
    #: micro-batches (their size changes memory, not the gradient).
    batch_size: int = Field(default=4, ge=1)
    #: examples per forward/backward pass, in validation too (null = batch_size)
    micro_batch_size: int | None = Field(default=None, ge=1)
    #: padded tokens per micro-batch at most (rows x longest row; rows of similar length go together).
    micro_batch_tokens: int = Field(default=4096, ge=1)
    warmup_steps: int = Field(default=5, ge=0)
    #: after warm-up: "constant", or "linear" / "cosine" decay to 0 at the last step (a steadier final model).
    lr_schedule: Literal["constant", "linear", "cosine"] = "constant"
    #: linear / cosine: the decay's floor, a share of lr (OpenRLHF's 0.1); constant has none.
    min_lr_ratio: float = Field(default=0.0, ge=0.0, lt=1.0)
    adam_betas: tuple[_Beta, _Beta] = (0.9, 0.999)  #: AdamW's betas, each in [0, 1) (OpenRLHF's SFT: 0.9, 0.95)
    #: freeze the embeddings and the bottom N transformer blocks (backward stops above them; 0 = full fine-tuning).
    freeze_layers: int = Field(default=0, ge=0)
    #: prompt + target tokens at most; longer targets are cut (counted in the log), too-long prompts dropped.
    max_length: int = Field(default=2048, ge=1)
    #: held-out fraction scored every epoch; ``final`` = the lowest-loss epoch (RAG-R1's checkpoint selection).
    val_fraction: float = Field(default=0.0, ge=0.0, lt=1.0)
    #: steps between checkpoints (``<out>/checkpoint``: weights, optimizer, data order) that an interrupted run goes
    #: on from (``searchrl sft --resume``, or the same ``searchrl run``); 0: none but the one a SIGTERM writes.
    save_every: int = Field(default=0, ge=0)
    #: "oracle" (synthetic world), a JSONL of trajectories or step-level examples, R1-Searcher++'s rewriter data
    #: ("rewriter_oracle": the world; "rewriter:FILE": trajectories), or a list of these trained on together.
    data: str | list[str] = "oracle"
    #: oracle SFT only on these synthetic question kinds (empty = all), e.g. [single_hop] for a short cold start.
    kinds: list[str] = Field(default_factory=list)
    #: oracle reasoning: "none" (sub-question per hop), "count" ("Search 2 of 2"; ``true``), "decompose" (the plan
    #: first, then one step of it per search) and its variants (sft/oracle.py PLAN_STYLES says more).
    oracle_plan: bool | Literal["none", "count", "decompose", "decompose_explicit", "decompose_facts"] = False
    #: oracle SFT: this many more questions (after ``limit`` whole ones) add only their first turn (~1/4 the tokens).
    oracle_first_turns: int = Field(default=0, ge=0)
    oracle_balance: bool = False  #: oracle SFT: questions round-robin over templates (each shape equally often)
    oracle_mix: dict[str, int] = Field(default_factory=dict)  #: oracle SFT: whole trajectories per kind
    #: oracle SFT: documents per search (null = retrieval.topk); fewer make a cheaper cold start.
    oracle_topk: int | None = Field(default=None, ge=1)
    #: oracle SFT on questions without a recorded chain (a real QA file): "error"; "question": one search with the
    #: question itself, then the gold; "options": a choice question ("..., A or B?") searches each option instead.
    oracle_unchained: Literal["error", "question", "options"] = "error"
    #: oracle SFT without a chain: keep a question only when its documents hold the gold (quoted in the closing), or
    #: for a choice question under oracle_unchained=options, when its options' years decide it (sft.option_years).
    oracle_grounded: bool = False
    oracle_name_options: bool = False  #: oracle SFT: a choice comparison's closing step names its two options first
    limit: int | None = Field(default=None, ge=1)

    @model_validator(mode="after")
    def _check_mix(self) -> SFTConfig:
        """``oracle_mix`` sets the oracle's whole trajectories itself: a different ``limit`` (a profile's) or
        ``oracle_balance`` beside it is refused when the config loads, not when the cold start begins."""
        total = sum(self.oracle_mix.values())
        oracle = "oracle" in ([self.data] if isinstance(self.data, str) else self.data)
        if oracle and self.oracle_mix and ((self.limit is not None and self.limit != total) or self.oracle_balance):
            raise ValueError(
                f"sft.oracle_mix (sums to {total}) sets the whole trajectories itself: leave sft.limit unset (or "
                "equal to that sum) and sft.oracle_balance off"
            )
        return self


_CRITIC_FIELDS = {
    "algorithm": ("value_clip", "value_coef", "critic_mask_observations", "lam"),
    "training": ("critic_lr", "critic_warmup_steps"),
}


StageOp = Literal["synth", "index", "split", "oracle", "rejection-sample", "select-difficulty"]
_STAGE_OPS = get_args(StageOp)


class StageConfig(Section):
    """One stage of a method's pipeline (``searchrl run``): data building, SFT, RL or evaluation.

    Each stage writes into ``<run dir>/<name>/``. String values may reference an earlier stage's output as
    ``${stage_name}`` (a data stage's file or directory, an SFT / RL stage's final model, an eval stage's report
    directory), e.g. ``init_from: ${sft}`` or ``data: ${split}/train.jsonl``. See ``searchrl.runner``.
    """

    name: str
    kind: Literal["data", "sft", "rl", "eval"]
    op: StageOp | None = None
    #: run this stage with another recipe's config (same profile and overrides), e.g. R1-Searcher's stage 1
    #: inside the two-stage pipeline; null = the pipeline's own recipe.
    recipe: str | None = None
    #: the model a stage starts from / samples with (sft, rl, eval, rejection-sample, select-difficulty); null =
    #: the previous sft/rl stage's model, else model.policy.
    init_from: str | None = None
    #: input: a QA file (rl: the training questions; eval and sft: a list allowed; rejection-sample / select-difficulty
    #: / split: the questions), sft.data (sft), a world or QA directory (oracle) or a corpus file (index).
    data: str | list[str] | None = None
    #: index directory (null = the latest index stage's output, else the recipe's retriever).
    index: str | None = None
    #: dotted config overrides for this stage only, e.g. {training.steps: 5}; values may use ${stage}.
    set: dict[str, Any] = Field(default_factory=dict)
    #: op-specific options (the flags of the matching `searchrl data` command, e.g. {k: 4, heldout: 100}).
    args: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _check(self) -> StageConfig:
        if self.kind == "data" and self.op is None:
            raise ValueError(f"data stage '{self.name}' needs op: one of {', '.join(_STAGE_OPS)}")
        if self.kind != "data" and self.op is not None:
            raise ValueError(f"stage '{self.name}': op is for data stages only (kind is {self.kind})")
        if isinstance(self.data, list) and self.kind not in ("sft", "eval"):
            kind = f"data {self.op}" if self.kind == "data" else self.kind
            raise ValueError(
                f"stage '{self.name}' ({kind}) takes one file or directory in data: (a list is for sft and eval "
                f"stages); give one, e.g. data: {self.data[0] if self.data else 'FILE'}"
            )
        if not self.name.replace("_", "").replace("-", "").isalnum():
            raise ValueError(f"stage name '{self.name}' must be letters, digits, '_' or '-' (it names a directory)")
        return self


class RunConfig(Section):
    name: str = "default"
    description: str = ""
    #: Python files (in the working directory or beside the recipe) or modules imported before the rest of the
    #: config is validated; they register your own protocols, retrievers, evaluation methods and algorithms
    #: (searchrl.config.extensions).
    plugins: list[str] = Field(default_factory=list)
    model: ModelConfig = ModelConfig()
    data: DataConfig = DataConfig()
    retrieval: RetrievalConfig = RetrievalConfig()
    rollout: RolloutConfig = RolloutConfig()
    reward: RewardConfig = RewardConfig()
    algorithm: AlgorithmConfig = AlgorithmConfig()
    training: TrainingConfig = TrainingConfig()
    sft: SFTConfig = SFTConfig()
    memorization: MemorizationConfig = MemorizationConfig()
    evaluation: EvaluationConfig = EvaluationConfig()
    #: the method's stages for ``searchrl run`` (data building -> SFT -> RL -> evaluation), in order.
    pipeline: list[StageConfig] = Field(default_factory=list)

    def __repr__(self) -> str:
        """The recipe and its main choices; IPython shows every field (:meth:`_repr_pretty_`)."""
        return (
            f"RunConfig(name={self.name!r}, protocol={self.rollout.protocol!r}, algorithm={self.algorithm.name!r}, "
            f"policy={self.model.policy!r}, retrieval={self.retrieval.kind!r})"
        )

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        """IPython and Jupyter show the resolved config as YAML, as ``dump_config`` writes it."""
        from searchrl.config.loading import to_yaml

        printer.text(repr(self) if cycle else to_yaml(self).rstrip())

    @field_validator("plugins")
    @classmethod
    def _import_plugins(cls, plugins: list[str]) -> list[str]:
        """Plugins run first (fields are validated in order): the names they register are then valid values of the
        sections below. A file is kept by its absolute path, so a dumped config loads from any directory."""
        for spec in plugins:
            import_plugin(spec)
        return [absolute_file(p) for p in plugins]

    @model_validator(mode="after")
    def _check_pipeline(self) -> RunConfig:
        names = [s.name for s in self.pipeline]
        dup = next((n for n in names if names.count(n) > 1), None)
        if dup is not None:
            raise ValueError(f"pipeline: two stages are named '{dup}'; stage names must be unique")
        return self

    @model_validator(mode="after")
    def _check_combinations(self) -> RunConfig:
        """Settings that are valid alone but not together; each error names the fix. (That prompts_per_step divides
        among the processes is checked when the trainer knows the process count.)"""
        alg = self.algorithm
        traits = algorithm(alg.name)
        if self.training.off_policy_steps and self.rollout.backend == "hf_generate":
            raise ValueError(
                "training.off_policy_steps=1 needs rollout.backend=hf or vllm (hf_generate samples from torch's "
                "global random generator, which the background rollout would share with the update)"
            )
        if self.training.off_policy_steps and not alg.mask_observations:
            raise ValueError(
                "training.off_policy_steps=1 takes the behaviour log-probs from the rollout, which has none for the "
                "retrieved tokens that algorithm.mask_observations=false trains on: set training.off_policy_steps=0"
            )
        if traits.has_group_baseline(alg.reinforce_estimator) and self.rollout.group_size < 2:
            est = "" if traits.grouped else f" with reinforce_estimator={alg.reinforce_estimator}"
            other = f"name={' or '.join(ungrouped())}" if traits.grouped else "reinforce_estimator=reinforce"
            raise ValueError(
                f"algorithm.name={alg.name}{est} needs rollout.group_size > 1 (with groups of one every advantage "
                f"is 0); set rollout.group_size=5, or use algorithm.{other}"
            )
        if traits.critic:
            return self
        for section, fields in _CRITIC_FIELDS.items():
            sec = getattr(self, section)
            for f in fields:  # a resolved config (dump_config) repeats the defaults: only other values fail
                if getattr(sec, f) != type(sec).model_fields[f].default:
                    raise ValueError(
                        f"{section}.{f} configures the critic, which only {'/'.join(critic_algorithms())} trains; "
                        f"remove it or set algorithm.name={critic_algorithms()[0]}"
                    )
        if alg.gamma != 1.0:
            raise ValueError(
                f"algorithm.gamma={alg.gamma} is the discount of the critic's GAE; {alg.name} is undiscounted "
                f"here: remove it or set algorithm.name={critic_algorithms()[0]}"
            )
        return self
