"""``searchrl data oracle``, ``rejection-sample``, ``select-difficulty`` and ``text``: the commands that build
training data.

With ``--recipe`` (and ``--set`` overrides) the rollout limits come from the recipe's ``rollout`` section through
``RolloutLimits.from_config`` (observation cap, turns, searches, token budgets, forced answer), as do the protocol
and its options, top-k, the policy, the prompt style, the questions (the train split) and the index; a flag that is
given wins over the recipe. Without a recipe the same config defaults apply (``searchrl config show`` prints them).
The policy is a local model (``--model``, run with transformers) or, with ``--url``, an OpenAI-compatible
completions server (a teacher; ``--model`` then only names the tokenizer, which must be the served model's). Each
command calls its stage in :mod:`searchrl.stages`.
"""

from __future__ import annotations

from pathlib import Path

import typer

from searchrl.commands.common import load, not_an_input, result, said_when_stopped, with_protocol, writable_file
from searchrl.config import RunConfig
from searchrl.pipeline import with_retriever


def _config(recipe, overrides, profile, protocol, options, index, **flags) -> RunConfig:
    """The recipe with its overrides and the given flags (dotted keys), protocol and index."""
    from searchrl.validation import validate_deep

    cfg = with_protocol(load(recipe, overrides, profile, **flags), protocol, options)
    validate_deep(cfg)
    return with_retriever(cfg, index)


def _when_stopped(command: str, out: Path):
    """A sampling command's way on after a stop: the same command, when questions sampled so far wait in its
    ``<out>.<tag>.partial`` files (:mod:`searchrl.sft.attempts`)."""
    import glob

    def go_on() -> str | None:
        if any(out.parent.glob(f"{glob.escape(out.name)}.*.partial")):
            return f"the same searchrl data {command} (it keeps the questions sampled so far)"
        return None

    return said_when_stopped(f"searchrl data {command} into {out}", go_on)


def _rollout_flags(
    model, prompt_style, topk, max_turns, max_searches, max_new_tokens, max_obs_tokens, max_total_tokens
) -> dict:
    return {
        "model.policy": model,
        "model.prompt_style": prompt_style,
        "retrieval.topk": topk,
        "rollout.max_turns": max_turns,
        "rollout.max_searches": max_searches,
        "rollout.max_new_tokens": max_new_tokens,
        "rollout.max_obs_tokens": max_obs_tokens,
        "rollout.max_total_tokens": max_total_tokens,
    }


# Options shared by the commands (typer reads defaults from the signature, so they are spelled out in each).
_RECIPE = typer.Option(
    None, "--recipe", "--config", "-r", help="recipe name or YAML: rollout limits, protocol, top-k, model, data, index"
)
_PROFILE = typer.Option(None, "--profile", help="profile overlay of --recipe, e.g. laptop (recipes/profiles/)")
_SET = typer.Option(None, "--set", help="dotted recipe override, e.g. rollout.max_obs_tokens=1000 (repeatable)")
_DATA = typer.Option(
    None, "--data", help="QA file (FlashRAG / R1-Searcher JSONL, or hf:NAME[:CONFIG]:SPLIT); default: recipe's train"
)
_INDEX = typer.Option(None, "--index", help="index directory (from `searchrl index build`); default: recipe's")
_PROTOCOL = typer.Option(None, "--protocol", help="text protocol: search_r1, r1_searcher, r1_searcher_pp, ...")
_OPTION = typer.Option(None, "--option", help="protocol option KEY=VALUE, repeatable (e.g. multi_query=true)")
_MODEL = typer.Option(None, "--model", help="policy spec (default: the recipe's model.policy); with --url, tokenizer")
_URL = typer.Option(None, "--url", help="OpenAI-compatible server base URL (e.g. http://127.0.0.1:8001/v1)")
_SERVED = typer.Option(None, "--served-model", help="model name on the --url server (default: --model)")
_MAX_NEW = typer.Option(None, help="tokens per turn (default: rollout.max_new_tokens)")
_MAX_OBS = typer.Option(None, help="tokens per observation (default: rollout.max_obs_tokens)")
_MAX_TOTAL = typer.Option(None, help="prompt + response tokens (default: rollout.max_total_tokens)")
_TOPK = typer.Option(None, help="passages per query (default: retrieval.topk)")
_STYLE = typer.Option(None, help="auto, chat or raw (default: model.prompt_style)")
_QUOTA = typer.Option(
    None,
    "--quota",
    help="at most N per source / bucket, drawn at random: SOURCE/BUCKET=N, SOURCE=N or */BUCKET=N "
    "(repeatable; the source is each row's source or dataset field; items no quota covers are dropped)",
)


def select_difficulty(
    recipe: str = _RECIPE,
    overrides: list[str] = _SET,
    profile: str = _PROFILE,
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
    unsolved_as: str = typer.Option(
        "unsolved", help="r1_searcher: a question no attempt answered is 'unsolved' (its own bucket) or 'hard'"
    ),
    easy_fraction: float = typer.Option(0.25, help="rag_r1: share of the initially correct questions kept"),
    temperature: float = typer.Option(None, help="sampling temperature (default: 1.0 r1_searcher, 1.2 rag_r1)"),
    top_p: float = typer.Option(1.0, help="nucleus sampling"),
    seed: int = typer.Option(0, help="sampling, easy-subset and quota seed"),
    quota: list[str] = _QUOTA,
    limit: int = typer.Option(None, help="use only the first N questions"),
    max_turns: int = typer.Option(None, help="generation turns per rollout (default: rollout.max_turns; rag_r1: 10)"),
    max_searches: int = typer.Option(
        None, help="searches per rollout (default: rollout.max_searches; rag_r1: 10, RAG-R1's filter)"
    ),
    max_new_tokens: int = _MAX_NEW,
    max_obs_tokens: int = _MAX_OBS,
    max_total_tokens: int = _MAX_TOTAL,
    topk: int = _TOPK,
    prompt_style: str = _STYLE,
    batch_size: int = typer.Option(32, help="questions rolled out together"),
    timeout_s: float = typer.Option(120.0, help="--url request timeout, seconds"),
    concurrency: int = typer.Option(8, min=1, help="--url requests in flight at once"),
    out: Path = typer.Option(..., "--out", help="kept questions, FlashRAG JSONL", callback=writable_file),
    records: Path = typer.Option(None, help="per-question records JSONL (default: <out>.records.jsonl)"),
) -> None:
    """Select training questions by difficulty: R1-Searcher's attempt buckets or RAG-R1's answerability filter.

    Example: searchrl data select-difficulty --recipe r1_searcher_stage1 --data world/train.jsonl --index indexes/bm25 --rule r1_searcher --n 24 --out train_selected.jsonl
    """  # noqa: E501
    from searchrl.stages import Teacher, difficulty_selection

    not_an_input(out, [data])
    if records is not None:
        not_an_input(records, [data], "--records")
        if records.resolve() == out.resolve():
            raise typer.BadParameter(f"{records} is also --out; give the records another path", param_hint="--records")
    flags = _rollout_flags(model, prompt_style, topk, None, None, max_new_tokens, max_obs_tokens, max_total_tokens)
    cfg = _config(recipe, overrides, profile, protocol, option, index, **flags)
    with _when_stopped("select-difficulty", out):
        res = difficulty_selection(
            cfg,
            out,
            data=data,
            teacher=Teacher(url, served_model, timeout_s, concurrency),
            rule=rule,
            n=n,
            metric=metric,
            easy_below=easy_below,
            hard_above=hard_above,
            unsolved_as=unsolved_as,
            keep=keep,
            easy_fraction=easy_fraction,
            temperature=temperature,
            top_p=top_p,
            seed=seed,
            quota=quota or (),
            limit=limit,
            batch_size=batch_size,
            max_turns=max_turns,
            max_searches=max_searches,
            records=records,
        )
    summary = ", ".join(f"{b} {c}" for b, c in res.buckets.items())
    records = records or out.with_name(out.stem + ".records.jsonl")
    result(f"{rule}: {summary}; kept {len(res.kept)} of {len(res.rows)} questions -> {out} (records: {records})")


def rejection_sample_cmd(
    recipe: str = _RECIPE,
    overrides: list[str] = _SET,
    profile: str = _PROFILE,
    data: str = _DATA,
    index: Path = _INDEX,
    protocol: str = _PROTOCOL,
    option: list[str] = _OPTION,
    model: str = _MODEL,
    url: str = _URL,
    served_model: str = _SERVED,
    k: int = typer.Option(4, help="samples per question"),
    metric: str = typer.Option(
        None, help="correctness metric: em, f1, cover_em, cover_em_tokens (default: the recipe's answer reward rule)"
    ),
    min_score: float = typer.Option(1.0, help="a sample is correct when its metric is at least this"),
    require_internal_and_external: bool = typer.Option(
        False,
        "--require-internal-and-external",
        help="r1_searcher_pp: keep only samples with both kinds of step (and every internal tag closed)",
    ),
    max_per_question: int = typer.Option(None, help="keep at most this many samples per question"),
    quota: list[str] = _QUOTA,
    slice_steps: bool = typer.Option(
        False, "--slice", help="write RAG-R1 step-level SFT examples instead of whole trajectories"
    ),
    temperature: float = typer.Option(1.0, help="sampling temperature"),
    top_p: float = typer.Option(1.0, help="nucleus sampling"),
    seed: int = typer.Option(0, help="sampling seed"),
    limit: int = typer.Option(None, help="use only the first N questions"),
    max_turns: int = typer.Option(None, help="generation turns per rollout (default: rollout.max_turns)"),
    max_searches: int = typer.Option(None, help="searches per rollout (default: rollout.max_searches)"),
    max_new_tokens: int = _MAX_NEW,
    max_obs_tokens: int = _MAX_OBS,
    max_total_tokens: int = _MAX_TOTAL,
    topk: int = _TOPK,
    prompt_style: str = _STYLE,
    batch_size: int = typer.Option(32, help="questions rolled out together"),
    timeout_s: float = typer.Option(120.0, help="--url request timeout, seconds"),
    concurrency: int = typer.Option(8, min=1, help="--url requests in flight at once"),
    out: Path = typer.Option(
        ..., "--out", help="output JSONL (trajectories, or SFT examples with --slice)", callback=writable_file
    ),
) -> None:
    """Sample K trajectories per question and keep the correct, well-formed ones (R1-Searcher++ cold start data;
    with --url and --slice, RAG-R1 teacher data cut into step-level samples).

    Example: searchrl data rejection-sample --recipe r1_searcher_pp --data world/train.jsonl --index indexes/bm25 --k 8 --require-internal-and-external --out sft_rs.jsonl
    """  # noqa: E501
    from searchrl.stages import Teacher, rejection_sampling

    flags = _rollout_flags(
        model, prompt_style, topk, max_turns, max_searches, max_new_tokens, max_obs_tokens, max_total_tokens
    )
    not_an_input(out, [data])
    cfg = _config(recipe, overrides, profile, protocol, option, index, **flags)
    with _when_stopped("rejection-sample", out):
        res = rejection_sampling(
            cfg,
            out,
            data=data,
            teacher=Teacher(url, served_model, timeout_s, concurrency),
            k=k,
            metric=metric,
            min_score=min_score,
            require_internal_and_external=require_internal_and_external,
            max_per_question=max_per_question,
            quota=quota or (),
            slice=slice_steps,
            temperature=temperature,
            top_p=top_p,
            seed=seed,
            limit=limit,
            batch_size=batch_size,
        )
    stats = res.stats
    rejected = ", ".join(f"{key[9:]} {int(v)}" for key, v in stats.items() if key.startswith("rejected_") and v)
    what = "step-level examples" if slice_steps else "trajectories"
    questions = len({t.question_id for t in res.kept})  # after the quotas, as the kept samples
    result(
        f"kept {len(res.kept)} of {int(stats['sampled'])} samples ({questions} of {int(stats['questions'])} "
        f"questions); rejected: {rejected or 'none'}; wrote {len(res.rows)} {what} -> {out}"
    )


def oracle_cmd(
    world: Path = typer.Option(..., "--world", help="synthetic world directory (`searchrl data synth --out DIR`)"),
    protocol: str = _PROTOCOL,
    index: Path = typer.Option(
        None, "--index", help="index directory (default: <world>/index-<retrieval.kind>, built when missing)"
    ),
    out: Path = typer.Option(
        ..., "--out", help="output JSONL of trajectories (an sft.data file)", callback=writable_file
    ),
    recipe: str = _RECIPE,
    overrides: list[str] = _SET,
    profile: str = _PROFILE,
    option: list[str] = _OPTION,
    model: str = typer.Option(None, "--model", help="tokenizer: policy spec (default: the recipe's model.policy)"),
    split: str = typer.Option("train", help="questions of this split of the world: train, dev or test"),
    kinds: list[str] = typer.Option(None, "--kind", help="only these question kinds (repeatable), e.g. single_hop"),
    limit: int = typer.Option(None, help="use only the first N questions"),
    forms: list[str] = typer.Option(
        None, "--form", help="only questions of these forms (repeatable): choice ('..., A or B?'), yes/no, open"
    ),
    max_obs_tokens: int = _MAX_OBS,
    topk: int = _TOPK,
    prompt_style: str = _STYLE,
) -> None:
    """Write oracle trajectories of a synthetic world: each question's recorded reasoning chain played out in a
    protocol's format, with the documents the index really returns for each hop (observations capped like the
    rollout engine caps them), shaped by the recipe's sft.oracle_* settings. The file is SFT data: `searchrl sft --recipe R sft.data=FILE`.

    A QA directory (train.jsonl, no recorded chains) needs --set sft.oracle_unchained=question (one search with the
    question itself, then the gold answer) or =options (a choice question looks up each of its options instead);
    --set sft.oracle_grounded=true then keeps only the questions whose documents support the answer (the sentence
    that holds it, or for a choice question the years its options' passages give, quoted in the closing step).

    Example: searchrl data oracle --world runs/world --protocol search_r1 --index runs/world/index-bm25 --out runs/oracle.jsonl
    """  # noqa: E501
    from searchrl.stages import write_oracle_data

    flags = {
        **_rollout_flags(model, prompt_style, topk, None, None, None, max_obs_tokens, None),
        "data.source": str(world),
        "sft.kinds": kinds or None,
        "sft.limit": limit,
    }
    cfg = _config(recipe, overrides, profile, protocol, option, index, **flags)
    trajs = write_oracle_data(cfg, out, split, forms or None)
    hops = sum(t.n_searches for t in trajs)
    result(
        f"wrote {len(trajs)} oracle trajectories ({cfg.rollout.protocol}, {hops} searches, top-"
        f"{cfg.sft.oracle_topk or cfg.retrieval.topk}, observations <= {cfg.rollout.max_obs_tokens} tokens) -> {out}"
    )


def text_cmd(
    source: Path = typer.Argument(
        ...,
        help="JSONL (or a .json array) of text rows: question + response, prompt + completion, messages, "
        "LLaMA-Factory alpaca or sharegpt",
    ),
    out: Path = typer.Option(
        ...,
        "--out",
        help="output JSONL of trajectories (or step-level SFT examples with --slice)",
        callback=writable_file,
    ),
    recipe: str = _RECIPE,
    overrides: list[str] = _SET,
    profile: str = _PROFILE,
    protocol: str = _PROTOCOL,
    option: list[str] = _OPTION,
    model: str = typer.Option(None, "--model", help="tokenizer: policy spec (default: the recipe's model.policy)"),
    prompt_style: str = _STYLE,
    slice_steps: bool = typer.Option(False, "--slice", help="write RAG-R1 step-level SFT examples"),
    limit: int = typer.Option(None, help="use only the first N rows"),
) -> None:
    """Tokenize SFT data written as text (a teacher's or another tool's trajectories) the way a rollout records it:
    the protocol's prompt for each question (or the row's own prompt), the policy's text trained on and each
    inserted result block (a result tag pair right after a search call) masked out. `searchrl sft --recipe R
    sft.data=FILE` reads such a file directly; this writes the trajectories to inspect (`searchrl view`) or to cut.

    Example: searchrl data text teacher.jsonl --recipe search_r1_grpo --out runs/teacher-trajectories.jsonl
    """
    from searchrl.stages import write_text_data

    not_an_input(out, [source])
    flags = {**_rollout_flags(model, prompt_style, None, None, None, None, None, None), "sft.limit": limit}
    cfg = _config(recipe, overrides, profile, protocol, option, None, **flags)
    n = write_text_data(cfg, source, out, slice_steps)
    what = "step-level examples" if slice_steps else "trajectories"
    result(f"wrote {n} {what} ({cfg.rollout.protocol}, tokenizer of {cfg.model.policy}) -> {out}")


def register(data_app: typer.Typer) -> None:
    data_app.command("select-difficulty")(select_difficulty)
    data_app.command("rejection-sample")(rejection_sample_cmd)
    data_app.command("oracle")(oracle_cmd)
    data_app.command("text")(text_cmd)
