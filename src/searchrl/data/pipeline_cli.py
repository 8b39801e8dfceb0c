"""``searchrl data select-difficulty``, ``rejection-sample`` and ``oracle``: the trajectory-data pipelines.

``register(data_app)`` adds the commands to the ``searchrl data`` sub-app. With ``--recipe`` (and ``--set``
overrides) the rollout limits come from the recipe's ``rollout`` section through ``RolloutLimits.from_config``
(observation cap, turns, searches, token budgets, forced answer), as do the protocol and its options, top-k, the
policy, the prompt style, the questions (the train split) and the index; a flag that is given wins over the
recipe. Without a recipe the same config defaults apply (``searchrl config show`` prints them). The policy is a
local model (``--model``, run with transformers) or, with ``--url``, an OpenAI-compatible completions server (a
teacher; ``--model`` then only names the tokenizer, which must be the served model's).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from searchrl.config import RunConfig
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


def run_config(
    recipe: str | None,
    overrides: list[str] | None = None,
    *,
    protocol: str | None = None,
    options: list[str] | None = None,
    model: str | None = None,
    prompt_style: str | None = None,
    topk: int | None = None,
    profile: str | None = None,
    **rollout: int | None,
) -> RunConfig:
    """The recipe (or the defaults) with its ``--set`` overrides, then the flags that were given.

    ``rollout`` takes the ``rollout`` section's limits (``max_turns``, ``max_searches``, ``max_new_tokens``,
    ``max_obs_tokens``, ``max_total_tokens``); None leaves the recipe's value. A ``--protocol`` other than the
    recipe's drops the recipe's protocol options (they belong to its protocol); ``--option`` adds to them.
    """
    from searchrl.config import load_config, validate_dict
    from searchrl.validation import validate_deep

    raw = load_config(recipe, overrides or [], profile).model_dump()
    ro = raw["rollout"]
    if protocol is not None and protocol != ro["protocol"]:
        ro["protocol"], ro["options"] = protocol, {}
    ro["options"] = {**ro["options"], **_parse_options(options)}
    for key, value in rollout.items():
        if key not in ro:
            raise TypeError(f"unknown rollout limit {key!r}")
        if value is not None:
            ro[key] = value
    if model is not None:
        raw["model"]["policy"] = model
    if prompt_style is not None:
        raw["model"]["prompt_style"] = prompt_style
    if topk is not None:
        raw["retrieval"]["topk"] = topk
    cfg = validate_dict(raw, recipe or "<flags>")
    validate_deep(cfg)
    return cfg


def _load_generator(model: str, url: str | None, served_model: str | None, timeout_s: float) -> Generator:
    """A transformers generator for ``model``, or an OpenAI-compatible client of ``url`` with ``model``'s tokenizer."""
    if url:
        from searchrl.generation.openai_compat import OpenAICompatGenerator

        return OpenAICompatGenerator(url, served_model or model, _load_tokenizer(model), timeout_s=timeout_s)
    from searchrl.generation.hf import HFGenerator
    from searchrl.models import load_policy

    policy, tokenizer = load_policy(model, frozen=True)
    return HFGenerator(policy, tokenizer)


def _load_tokenizer(model: str):
    from transformers import AutoTokenizer

    from searchrl.models import resolve_policy

    return AutoTokenizer.from_pretrained(resolve_policy(model))


def _questions(cfg: RunConfig, data: str | None, limit: int | None):
    """``--data`` when given, else the recipe's train split."""
    if data is not None:
        from searchrl.data.loaders import load_qa

        examples = load_qa(data, limit=limit)
        where = data
    else:
        from searchrl.pipeline import load_split

        examples = load_split(cfg, "train", limit)
        where = f"the train split of {cfg.data.source} ({cfg.data.train})"
    if not examples:
        raise ValueError(f"{where} holds no questions; check the file (or --limit)")
    return examples


def _retriever(cfg: RunConfig, index: Path | None):
    """``--index`` when given, else the recipe's retriever (a local index is built from its corpus when missing)."""
    if index is not None:
        from searchrl.retrieval.index import load_index

        return load_index(index)
    from searchrl.pipeline import make_retriever_for

    return make_retriever_for(cfg)


def _setup(
    cfg: RunConfig, data: str | None, index: Path | None, url: str | None, served_model: str | None,
    limit: int | None, limits: RolloutLimits, timeout_s: float,
):  # fmt: skip
    from searchrl.device import configure_from
    from searchrl.models import check_fetchable
    from searchrl.pipeline import make_protocol
    from searchrl.utils import console

    check_fetchable(cfg)
    configure_from(cfg)  # --set model.device=cuda:1 places the sampling model
    console.log(
        f"{cfg.rollout.protocol} rollouts: {limits.max_turns} turns, {limits.max_searches} searches, "
        f"top-{limits.topk}, {limits.max_new_tokens} tokens per turn, observations <= {limits.max_obs_tokens} tokens, "
        f"<= {limits.max_total_tokens} tokens in all"
    )
    examples = _questions(cfg, data, limit)
    proto = make_protocol(cfg)
    retriever = _retriever(cfg, index)
    generator = _load_generator(cfg.model.policy, url, served_model, timeout_s)
    return examples, RolloutEngine(generator, retriever, proto, limits, cfg.model.prompt_style)


def _result(text: str) -> None:
    """A command's closing summary line: its result, so stdout (progress and logs stay on stderr)."""
    from rich.console import Console

    Console(soft_wrap=True).print(text)


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
    None, "--quota", help="at most N per source / bucket, drawn at random: SOURCE/BUCKET=N, SOURCE=N or */BUCKET=N "
    "(repeatable; the source is each row's source or dataset field; items no quota covers are dropped)",
)  # fmt: skip


def _apply_selection_quotas(kept, rows, quota: list[str], seed: int, out: Path, records: Path):
    """Difficulty selection under per-source / per-bucket quotas (a question is selected once at most)."""
    from searchrl.sft.pipelines import _write
    from searchrl.sft.quotas import apply_quotas, parse_quotas, shortfall, source_of
    from searchrl.utils import console

    quotas = parse_quotas(quota)
    kept, counts = apply_quotas(kept, quotas, source=lambda e: source_of(e.metadata),
                                bucket=lambda e: str(e.metadata.get("difficulty", "")), seed=seed)  # fmt: skip
    ids = {e.id for e in kept}
    for row in rows:
        row["kept"] = row["id"] in ids
    _write(kept, rows, out, records)
    short = shortfall(quotas, counts)
    console.print("quotas: " + ", ".join(f"{k} {v}" for k, v in counts.items())
                  + (f"; not filled: {short} (more questions or attempts fill them)" if short else ""))  # fmt: skip
    return kept


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
    out: Path = typer.Option(..., "--out", help="kept questions, FlashRAG JSONL"),
    records: Path = typer.Option(None, help="per-question records JSONL (default: <out>.records.jsonl)"),
) -> None:
    """Select training questions by difficulty: R1-Searcher's attempt buckets or RAG-R1's answerability filter.

    Example: searchrl data select-difficulty --recipe r1_searcher_stage1 --data world/train.jsonl --index indexes/bm25 --rule r1_searcher --n 24 --out train_selected.jsonl
    """  # noqa: E501
    from searchrl.sft.pipelines import select_answerable, select_by_attempts

    if rule not in _RULES:
        raise ValueError(f"unknown --rule {rule!r}; choose r1_searcher or rag_r1")
    if rule == "rag_r1":  # RAG-R1's answerability filter allowed up to 10 retrievals, whatever the recipe says
        max_turns, max_searches = max_turns or 10, max_searches or 10
    cfg = run_config(recipe, overrides, profile=profile, protocol=protocol, options=option, model=model,
                     prompt_style=prompt_style, topk=topk, max_turns=max_turns, max_searches=max_searches,
                     max_new_tokens=max_new_tokens, max_obs_tokens=max_obs_tokens,
                     max_total_tokens=max_total_tokens)  # fmt: skip
    limits = RolloutLimits.from_config(cfg.rollout, cfg.retrieval.topk)
    examples, engine = _setup(cfg, data, index, url, served_model, limit, limits, timeout_s)
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
    if quota:
        kept = _apply_selection_quotas(kept, rows, quota, seed, out, records)
    buckets: dict[str, int] = {}
    for row in rows:
        buckets[row["bucket"]] = buckets.get(row["bucket"], 0) + 1
    summary = ", ".join(f"{b} {c}" for b, c in sorted(buckets.items()))
    _result(f"{rule}: {summary}; kept {len(kept)} of {len(rows)} questions -> {out} (records: {records})")


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
        False, "--require-internal-and-external", help="r1_searcher_pp: keep only samples with both kinds of step"
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
    out: Path = typer.Option(..., "--out", help="output JSONL (trajectories, or SFT examples with --slice)"),
) -> None:
    """Sample K trajectories per question and keep the correct, well-formed ones (R1-Searcher++ cold start data;
    with --url and --slice, RAG-R1 teacher data cut into step-level samples).

    Example: searchrl data rejection-sample --recipe r1_searcher_pp --data world/train.jsonl --index indexes/bm25 --k 8 --require-internal-and-external --out sft_rs.jsonl
    """  # noqa: E501
    from searchrl.rewards.correctness import Correctness
    from searchrl.sft.pipelines import rejection_sample
    from searchrl.sft.pipelines import slice_steps as slice_fn
    from searchrl.utils import console, write_jsonl

    cfg = run_config(recipe, overrides, profile=profile, protocol=protocol, options=option, model=model,
                     prompt_style=prompt_style, topk=topk, max_turns=max_turns, max_searches=max_searches,
                     max_new_tokens=max_new_tokens, max_obs_tokens=max_obs_tokens,
                     max_total_tokens=max_total_tokens)  # fmt: skip
    limits = RolloutLimits.from_config(cfg.rollout, cfg.retrieval.topk)
    examples, engine = _setup(cfg, data, index, url, served_model, limit, limits, timeout_s)
    rule = (Correctness.from_reward_config(cfg.reward, threshold=min_score) if metric is None
            else Correctness(metric=metric, threshold=min_score))  # fmt: skip
    kept, stats = rejection_sample(
        engine, examples, k, correctness=rule,
        require_internal_and_external=require_internal_and_external, max_per_question=max_per_question,
        temperature=temperature, top_p=top_p, seed=seed, batch_size=batch_size,
    )  # fmt: skip
    if quota:
        from searchrl.sft.quotas import apply_quotas, parse_quotas, shortfall, source_of

        quotas = parse_quotas(quota)
        kept, counts = apply_quotas(kept, quotas, source=lambda t: source_of(t.metadata), seed=seed,
                                    group=lambda t: t.question_id, max_per_group=max_per_question)  # fmt: skip
        short = shortfall(quotas, counts)
        console.print("quotas: " + ", ".join(f"{k} {v}" for k, v in counts.items())
                      + (f"; not filled: {short} (raise --k or the questions)" if short else ""))  # fmt: skip
    if slice_steps:
        rows = [s.to_dict() for t in kept for s in slice_fn(t)]
    else:
        rows = [t.to_dict() for t in kept]
    write_jsonl(out, rows)
    rejected = ", ".join(f"{key[9:]} {int(v)}" for key, v in stats.items() if key.startswith("rejected_") and v)
    what = "step-level examples" if slice_steps else "trajectories"
    _result(
        f"kept {len(kept)} of {int(stats['sampled'])} samples ({int(stats['questions_with_kept'])} of "
        f"{int(stats['questions'])} questions); rejected: {rejected or 'none'}; wrote {len(rows)} {what} -> {out}"
    )


def oracle_cmd(
    world: Path = typer.Option(..., "--world", help="synthetic world directory (`searchrl data synth --out DIR`)"),
    protocol: str = _PROTOCOL,
    index: Path = typer.Option(
        None, "--index", help="index directory (default: <world>/index-<retrieval.kind>, built when missing)"
    ),
    out: Path = typer.Option(..., "--out", help="output JSONL of trajectories (an sft.data file)"),
    recipe: str = _RECIPE,
    overrides: list[str] = _SET,
    profile: str = _PROFILE,
    option: list[str] = _OPTION,
    model: str = typer.Option(None, "--model", help="tokenizer: policy spec (default: the recipe's model.policy)"),
    split: str = typer.Option("train", help="questions of this split of the world: train, dev or test"),
    kinds: list[str] = typer.Option(None, "--kind", help="only these question kinds (repeatable), e.g. single_hop"),
    limit: int = typer.Option(None, help="use only the first N questions"),
    max_obs_tokens: int = _MAX_OBS,
    topk: int = _TOPK,
    prompt_style: str = _STYLE,
) -> None:
    """Write oracle trajectories of a synthetic world: each question's recorded reasoning chain played out in a
    protocol's format, with the documents the index really returns for each hop (observations capped like the
    rollout engine caps them). The file is SFT data: `searchrl sft --recipe R sft.data=FILE`.

    Example: searchrl data oracle --world runs/world --protocol search_r1 --index runs/world/index-bm25 --out runs/oracle.jsonl
    """  # noqa: E501
    from searchrl.pipeline import load_split, make_protocol, make_retriever_for
    from searchrl.sft.oracle import oracle_trajectories
    from searchrl.utils import write_jsonl

    if not (world / "world.json").exists() and not (world / f"{split}.jsonl").exists():
        raise FileNotFoundError(f"{world} is not a synthetic world (no world.json); make one with "
                                f"`searchrl data synth --out {world}`")  # fmt: skip
    cfg = run_config(recipe, [*(overrides or []), f"data.source={world}"], profile=profile, protocol=protocol,
                     options=option, model=model, prompt_style=prompt_style, topk=topk,
                     max_obs_tokens=max_obs_tokens)  # fmt: skip
    if split not in ("train", "dev", "test"):
        raise ValueError(f"unknown --split {split!r}; choose train, dev or test")
    examples = load_split(cfg, split, limit, kinds=kinds or [])
    if not examples:
        raise ValueError(f"no {split} questions in {world}" + (f" of kinds {kinds}" if kinds else ""))
    if index is not None:
        cfg = cfg.model_copy(update={"retrieval": cfg.retrieval.model_copy(update={"index": str(index)})})
        if (index / "manifest.json").exists():  # an existing index decides its own kind
            import json

            kind = json.loads((index / "manifest.json").read_text())["kind"]
            cfg = cfg.model_copy(update={"retrieval": cfg.retrieval.model_copy(update={"kind": kind})})
    trajs = oracle_trajectories(
        make_protocol(cfg), examples, make_retriever_for(cfg), _load_tokenizer(cfg.model.policy),
        cfg.retrieval.topk, cfg.model.prompt_style, cfg.rollout.max_obs_tokens, cfg.sft.oracle_plan,
    )  # fmt: skip
    write_jsonl(out, [t.to_dict() for t in trajs])
    hops = sum(t.n_searches for t in trajs)
    _result(f"wrote {len(trajs)} oracle trajectories ({cfg.rollout.protocol}, {hops} searches, top-"
                  f"{cfg.retrieval.topk}, observations <= {cfg.rollout.max_obs_tokens} tokens) -> {out}")  # fmt: skip


def register(data_app: typer.Typer) -> None:
    data_app.command("select-difficulty")(select_difficulty)
    data_app.command("rejection-sample")(rejection_sample_cmd)
    data_app.command("oracle")(oracle_cmd)
