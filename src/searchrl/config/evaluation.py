"""The ``evaluation`` section of a run config: which datasets, methods and metrics, and how the questions are
answered and timed."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import AfterValidator, Field, field_validator, model_validator

from searchrl.config.base import Section, check_fields
from searchrl.config.extensions import known

#: ``corpus:`` of an evaluation set that searches the paragraphs its own questions ship with
CONTEXTS = "contexts"


class EvalDataset(Section):
    """One entry of ``evaluation.datasets`` written as a mapping; a plain string ``S`` is ``{data: S}``."""

    #: a split name (train / dev / test), a QA file (under data.source when relative) or hf:NAME[:CONFIG]:SPLIT.
    data: str
    name: str | None = None  #: the table's column (null = the file's name)
    #: a random subset of this many questions, seeded by evaluation.seed (null, or more than the file holds = all).
    sample: int | None = Field(default=None, ge=1)
    #: this set's own index directory (null = the run's retriever); built from ``corpus`` when empty.
    index: str | None = None
    #: this set's own corpus (under data.source when relative); without ``index`` its index is built on demand.
    #: ``contexts``: the paragraphs the set's questions ship with (HotpotQA, 2Wiki, MuSiQue, DPR files).
    corpus: str | None = None
    #: a field whose values split the file into sets scored apart, named by the value (Search-R1's merged
    #: ``test.parquet`` holds nq, hotpotqa, ... in ``data_source``); a file with one value is one set. null: never.
    group_by: str | None = "data_source"
    #: this file's names of a question's parts where they differ from the usual ones (null: data.fields), e.g.
    #: {question: query_text, answers: gold}.
    fields: dict[str, str] | None = None

    @field_validator("fields")
    @classmethod
    def _check_fields(cls, v: dict[str, str] | None) -> dict[str, str] | None:
        return None if v is None else check_fields(v)

    @field_validator("name")
    @classmethod
    def _check_name(cls, v: str | None) -> str | None:
        if v is not None and (not v.strip() or v.strip(".") == "" or any(c in v for c in "/\\\0")):
            raise ValueError(
                f"evaluation dataset name {v!r} names its files (predictions/<name>__<method>.jsonl); give a name "
                "without / or \\ that is not . or .."
            )
        return v

    @model_validator(mode="after")
    def _split_fields(self) -> EvalDataset:
        if self.fields is not None and self.data in ("train", "dev", "test"):
            raise ValueError(f"the {self.data} split is read with data.fields: set those, not this set's fields")
        return self


class EvaluationConfig(Section):
    #: evaluation sets, each scored separately, plus their unweighted average (see EvalDataset).
    datasets: list[str | EvalDataset] = Field(default_factory=lambda: ["dev"])
    #: direct, cot, naive_rag, iterative_rag, iter_retgen, search_o1, agent, prior, or a method a plugin registered.
    methods: list[Annotated[str, AfterValidator(known("method"))]] = Field(
        default_factory=lambda: ["direct", "naive_rag", "agent"]
    )
    limit: int | None = Field(default=100, ge=1)
    #: the ``prior`` method's training answers: a QA file (FlashRAG JSONL or a split name) whose answer priors it
    #: applies (the choice position most often gold, the commoner yes/no answer, the commonest open answer).
    prior_data: str | None = None
    metrics: list[str] = Field(default_factory=lambda: ["em", "f1", "cover_em", "cover_em_tokens"])
    judge_url: str | None = None
    judge_model: str | None = None
    #: seconds one judge request may take (the whole answer; retried 3 times), and requests sent at once.
    judge_timeout_s: float = Field(default=30.0, gt=0)
    judge_concurrency: int = Field(default=4, ge=1)
    #: an OpenAI-compatible completions server (vLLM, SGLang, TGI) that answers for the policy, e.g.
    #: http://127.0.0.1:8001/v1; null: the policy runs here with transformers. The prompts are token ids from the
    #: policy's tokenizer (model.policy / training.init_from names it), so the server must serve that model.
    policy_url: str | None = None
    #: the policy's model name on policy_url (null: the policy spec as given)
    served_model: str | None = None
    #: requests sent to policy_url at once (each question's turn is one request)
    policy_concurrency: int = Field(default=16, ge=1)
    #: seconds a request to policy_url may take before it is retried (3 tries)
    policy_timeout_s: float = Field(default=300.0, gt=0)
    output_dir: str = "runs/eval"
    #: token budget of the answer-only baselines (direct, naive_rag) and of each IRCoT reasoning sentence.
    max_new_tokens: int = Field(default=64, ge=1)
    #: direct and naive_rag: read the answer span out of a reply that restates the question as a sentence ("The
    #: father of X is Y." -> "Y"; searchrl.eval.method.answer_span), as the papers' answer-only baselines are
    #: scored on short answers; false: the reply's first line as it is.
    answer_span: bool = True
    #: token budget of the chain-of-thought baseline's whole reasoning plus answer.
    cot_max_new_tokens: int = Field(default=256, ge=1)
    #: IRCoT: reason-then-retrieve steps before a final answer is asked for.
    iterative_steps: int = 4
    #: ITER-RETGEN: retrieval-generation rounds (FlashRAG's default is 3).
    iter_retgen_iterations: int = 3
    #: Search-o1: token budget of each Reason-in-Documents call; its reasoning turns use the limits below.
    search_o1_refine_max_new_tokens: int = Field(default=512, ge=1)
    #: questions per batch: one generate call per step for the whole batch; the progress bar advances per batch.
    batch_size: int = Field(default=16, ge=1)
    #: 0 = greedy decoding, the evaluation default; the agent's rollout.temperature is not used here.
    temperature: float = Field(default=0.0, ge=0.0)
    #: nucleus sampling at evaluation (matters only when temperature > 0); every method and the agent use it.
    top_p: float = Field(default=1.0, gt=0.0, le=1.0)
    #: answer normalisation: "auto" = the method's own evaluation code by rollout.protocol (r1_searcher's script,
    #: rag_r1's, else SQuAD's; cover_em_tokens keeps R1-Searcher's), or squad / r1_searcher / rag_r1 for all;
    #: unicode / unicode_fold: SQuAD's extended to Unicode text, the latter also folding accents (rewards.metrics).
    normalize: Literal["auto", "squad", "r1_searcher", "rag_r1", "unicode", "unicode_fold"] = "auto"
    #: cover_em match: "auto" = the method's code (char, a plain substring test, for search_r1, r1_searcher,
    #: r1_searcher_pp, r_search and Search-R1's reason / rag baselines; word otherwise), or word / char.
    boundary: Literal["auto", "word", "char"] = "auto"
    #: how latency_s is measured: "batch" = each batch's wall time divided by its size (fast); "single" = every
    #: question answered alone at batch size 1, its own wall time, retrieval included (RAG-R1's Table 5).
    timing: Literal["batch", "single"] = "batch"
    #: passages per query at evaluation (null = retrieval.topk); some papers evaluate with more than they train.
    topk: int | None = None
    #: the agent's and Search-o1's limits at evaluation (null: the agent takes rollout's, Search-o1 its own: 10
    #: searches, 15 turns, 1,024 tokens a turn; rollout.max_total_tokens still bounds the whole).
    max_turns: int | None = None
    max_searches: int | None = None
    agent_max_new_tokens: int | None = None
    #: seeds the policy's sampling, a dataset's ``sample:`` and the bootstrap draws of the intervals and comparisons.
    seed: int = 0
    #: bootstrap resamples (and sign-flip permutations) behind each score's 95% interval and each paired comparison
    #: (searchrl.eval.stats); 0 leaves both out.
    bootstrap_resamples: int = Field(default=1000, ge=0)
    #: the method every other one is compared with, question by question (the mean difference, its 95% interval and
    #: a paired p-value): a method of ``methods``; auto = naive_rag when it runs, else the first method; null = none.
    compare_to: str | None = "auto"

    @field_validator("compare_to")
    @classmethod
    def _none_is_null(cls, v: str | None) -> str | None:
        return None if v is not None and v.lower() in ("none", "null") else v  # as `eval rescore --compare-to none`

    @model_validator(mode="after")
    def _check_compare_to(self) -> EvaluationConfig:
        if self.compare_to not in (None, "auto") and self.compare_to not in self.methods:
            raise ValueError(
                f"compare_to {self.compare_to!r} is not one of evaluation.methods {self.methods}; name one of them, "
                "auto (naive_rag when it runs, else the first method) or null (no comparisons)"
            )
        return self
