"""``searchrl data select-difficulty`` and ``searchrl data rejection-sample``: the trajectory-data pipelines.

``register(data_app)`` adds both commands to the ``searchrl data`` sub-app. The policy is a local model (``--model``,
run with transformers) or, with ``--url``, an OpenAI-compatible completions server (a teacher; ``--model`` then only
names the tokenizer, which must be the served model's).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from searchrl.generation.base import Generator
from searchrl.rollout.engine import RolloutEngine, RolloutLimits

_RULES = ("r1_searcher", "rag_r1")


def _parse_options(items: list[str] | None) -> dict[str, Any]:
    """``["multi_query=true", "max_queries=3"]`` -> ``{"multi_query": True, "max_queries": 3}`` (YAML scalars)."""
    import yaml

    out: dict[str, Any] = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ValueError(f"protocol option {item!r} is not KEY=VALUE (e.g. --option multi_query=true)")
        out[key.strip()] = yaml.safe_load(value)
    return out


def _load_generator(model: str, url: str | None, served_model: str | None, timeout_s: float) -> Generator:
    """A transformers generator for ``model``, or an OpenAI-compatible client of ``url`` with ``model``'s tokenizer."""
    if url:
        from transformers import AutoTokenizer

        from searchrl.generation.openai_compat import OpenAICompatGenerator
        from searchrl.models import resolve_policy

        tokenizer = AutoTokenizer.from_pretrained(resolve_policy(model))
        return OpenAICompatGenerator(url, served_model or model, tokenizer, timeout_s=timeout_s)
    from searchrl.generation.hf import HFGenerator
    from searchrl.models import load_policy

    policy, tokenizer = load_policy(model)
    return HFGenerator(policy, tokenizer)


def _setup(
    data: str, index: Path, protocol: str, options: list[str] | None, model: str, url: str | None,
    served_model: str | None, limit: int | None, limits: RolloutLimits, prompt_style: str, timeout_s: float,
):  # fmt: skip
    from searchrl.data.loaders import load_qa
    from searchrl.protocols import get_protocol
    from searchrl.retrieval.index import load_index

    examples = load_qa(data, limit=limit)
    if not examples:
        raise ValueError(f"{data} holds no questions; check the file (or --limit)")
    proto = get_protocol(protocol, **_parse_options(options))
    retriever = load_index(index)
    generator = _load_generator(model, url, served_model, timeout_s)
    return examples, RolloutEngine(generator, retriever, proto, limits, prompt_style)


# Options shared by both commands (typer reads defaults from the signature, so they are spelled out in each).
_DATA = typer.Option(..., "--data", help="QA file (FlashRAG / R1-Searcher JSONL, or hf:NAME[:CONFIG]:SPLIT)")
_INDEX = typer.Option(..., "--index", help="index directory (from `searchrl index build`)")
_PROTOCOL = typer.Option("search_r1", "--protocol", help="text protocol: search_r1, r1_searcher, r1_searcher_pp, ...")
_OPTION = typer.Option(None, "--option", help="protocol option KEY=VALUE, repeatable (e.g. multi_query=true)")
_MODEL = typer.Option("smollm2-135m-instruct", "--model", help="policy spec; with --url, the tokenizer to use")
_URL = typer.Option(None, "--url", help="OpenAI-compatible server base URL (e.g. http://127.0.0.1:8001/v1)")
_SERVED = typer.Option(None, "--served-model", help="model name on the --url server (default: --model)")


def select_difficulty(
    data: str = _DATA,
    index: Path = _INDEX,
    protocol: str = _PROTOCOL,
    option: list[str] = _OPTION,
    model: str = _MODEL,
    url: str = _URL,
    served_model: str = _SERVED,
    rule: str = typer.Option("r1_searcher", help="r1_searcher (bucket by attempts) or rag_r1 (answerability)"),
    n: int = typer.Option(None, help="attempts (r1_searcher, default 24) or retries (rag_r1, default 10)"),
    metric: str = typer.Option(None, help="correctness metric (default: cover_em for r1_searcher, em for rag_r1)"),
    easy_below: int = typer.Option(10, help="r1_searcher: first correct attempt below this is easy"),
    hard_above: int = typer.Option(20, help="r1_searcher: first correct attempt above this is hard"),
    keep: list[str] = typer.Option(["medium", "hard"], help="r1_searcher: buckets to keep (repeatable)"),
    easy_fraction: float = typer.Option(0.25, help="rag_r1: share of the initially correct questions kept"),
    temperature: float = typer.Option(None, help="sampling temperature (default: 1.0 r1_searcher, 1.2 rag_r1)"),
    top_p: float = typer.Option(1.0, help="nucleus sampling"),
    seed: int = typer.Option(0, help="sampling and easy-subset seed"),
    limit: int = typer.Option(None, help="use only the first N questions"),
    max_turns: int = typer.Option(None, help="generation turns per rollout (default: 4; rag_r1: 10)"),
    max_searches: int = typer.Option(None, help="searches per rollout (default: 4; rag_r1: 10, RAG-R1's filter)"),
    max_new_tokens: int = typer.Option(256, help="tokens per turn"),
    max_total_tokens: int = typer.Option(2048, help="prompt + response tokens"),
    topk: int = typer.Option(3, help="passages per query"),
    prompt_style: str = typer.Option("auto", help="auto, chat or raw"),
    batch_size: int = typer.Option(32, help="questions rolled out together"),
    timeout_s: float = typer.Option(120.0, help="--url request timeout, seconds"),
    out: Path = typer.Option(..., "--out", help="kept questions, FlashRAG JSONL"),
    records: Path = typer.Option(None, help="per-question records JSONL (default: <out>.records.jsonl)"),
) -> None:
    """Select training questions by difficulty: R1-Searcher's attempt buckets or RAG-R1's answerability filter.

    Example: searchrl data select-difficulty --data world/train.jsonl --index indexes/bm25 --protocol r1_searcher --rule r1_searcher --n 24 --out train_selected.jsonl
    """  # noqa: E501
    from searchrl.sft.pipelines import select_answerable, select_by_attempts
    from searchrl.utils import console

    if rule not in _RULES:
        raise ValueError(f"unknown --rule {rule!r}; choose r1_searcher or rag_r1")
    budget = 10 if rule == "rag_r1" else 4  # RAG-R1's answerability filter allowed up to 10 retrievals
    limits = RolloutLimits(max_turns=max_turns or budget, max_searches=max_searches or budget,
                           max_new_tokens=max_new_tokens, max_total_tokens=max_total_tokens, topk=topk)  # fmt: skip
    examples, engine = _setup(data, index, protocol, option, model, url, served_model, limit, limits, prompt_style,
                              timeout_s)  # fmt: skip
    records = records or out.with_name(out.stem + ".records.jsonl")
    if rule == "r1_searcher":
        kept, rows = select_by_attempts(
            engine, examples, 24 if n is None else n, easy_below=easy_below, hard_above=hard_above, keep=keep,
            metric=metric or "cover_em", temperature=1.0 if temperature is None else temperature, top_p=top_p,
            seed=seed, batch_size=batch_size, out=out, records_out=records,
        )  # fmt: skip
    else:
        kept, rows = select_answerable(
            engine, examples, 10 if n is None else n, easy_fraction, metric=metric or "em",
            temperature=1.2 if temperature is None else temperature, top_p=top_p, seed=seed, batch_size=batch_size,
            out=out, records_out=records,
        )  # fmt: skip
    buckets: dict[str, int] = {}
    for row in rows:
        buckets[row["bucket"]] = buckets.get(row["bucket"], 0) + 1
    summary = ", ".join(f"{b} {c}" for b, c in sorted(buckets.items()))
    console.print(f"{rule}: {summary}; kept {len(kept)} of {len(rows)} questions -> {out} (records: {records})")


def rejection_sample_cmd(
    data: str = _DATA,
    index: Path = _INDEX,
    protocol: str = _PROTOCOL,
    option: list[str] = _OPTION,
    model: str = _MODEL,
    url: str = _URL,
    served_model: str = _SERVED,
    k: int = typer.Option(4, help="samples per question"),
    metric: str = typer.Option("cover_em", help="correctness metric: em, f1, cover_em, cover_em_tokens"),
    min_score: float = typer.Option(1.0, help="a sample is correct when its metric is at least this"),
    require_internal_and_external: bool = typer.Option(
        False, "--require-internal-and-external", help="r1_searcher_pp: keep only samples with both kinds of step"
    ),
    max_per_question: int = typer.Option(None, help="keep at most this many samples per question"),
    slice_steps: bool = typer.Option(
        False, "--slice", help="write RAG-R1 step-level SFT examples instead of whole trajectories"
    ),
    temperature: float = typer.Option(1.0, help="sampling temperature"),
    top_p: float = typer.Option(1.0, help="nucleus sampling"),
    seed: int = typer.Option(0, help="sampling seed"),
    limit: int = typer.Option(None, help="use only the first N questions"),
    max_turns: int = typer.Option(4, help="generation turns per rollout"),
    max_searches: int = typer.Option(4, help="searches per rollout"),
    max_new_tokens: int = typer.Option(256, help="tokens per turn"),
    max_total_tokens: int = typer.Option(2048, help="prompt + response tokens"),
    topk: int = typer.Option(3, help="passages per query"),
    prompt_style: str = typer.Option("auto", help="auto, chat or raw"),
    batch_size: int = typer.Option(32, help="questions rolled out together"),
    timeout_s: float = typer.Option(120.0, help="--url request timeout, seconds"),
    out: Path = typer.Option(..., "--out", help="output JSONL (trajectories, or SFT examples with --slice)"),
) -> None:
    """Sample K trajectories per question and keep the correct, well-formed ones (R1-Searcher++ cold start data;
    with --url and --slice, RAG-R1 teacher data cut into step-level samples).

    Example: searchrl data rejection-sample --data world/train.jsonl --index indexes/bm25 --protocol r1_searcher_pp --k 8 --require-internal-and-external --out sft_rs.jsonl
    """  # noqa: E501
    from searchrl.sft.pipelines import rejection_sample
    from searchrl.sft.pipelines import slice_steps as slice_fn
    from searchrl.utils import console, write_jsonl

    limits = RolloutLimits(max_turns=max_turns, max_searches=max_searches, max_new_tokens=max_new_tokens,
                           max_total_tokens=max_total_tokens, topk=topk)  # fmt: skip
    examples, engine = _setup(data, index, protocol, option, model, url, served_model, limit, limits, prompt_style,
                              timeout_s)  # fmt: skip
    kept, stats = rejection_sample(
        engine, examples, k, metric=metric, min_score=min_score,
        require_internal_and_external=require_internal_and_external, max_per_question=max_per_question,
        temperature=temperature, top_p=top_p, seed=seed, batch_size=batch_size,
    )  # fmt: skip
    if slice_steps:
        rows = [s.to_dict() for t in kept for s in slice_fn(t)]
    else:
        rows = [t.to_dict() for t in kept]
    write_jsonl(out, rows)
    rejected = ", ".join(f"{key[9:]} {int(v)}" for key, v in stats.items() if key.startswith("rejected_") and v)
    what = "step-level examples" if slice_steps else "trajectories"
    console.print(
        f"kept {int(stats['kept'])} of {int(stats['sampled'])} samples ({int(stats['questions_with_kept'])} of "
        f"{int(stats['questions'])} questions); rejected: {rejected or 'none'}; wrote {len(rows)} {what} -> {out}"
    )


def register(data_app: typer.Typer) -> None:
    data_app.command("select-difficulty")(select_difficulty)
    data_app.command("rejection-sample")(rejection_sample_cmd)
