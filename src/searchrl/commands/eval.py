"""``searchrl eval``: evaluate methods on datasets (``--config`` and/or flags; :func:`searchrl.stages.evaluation`),
and ``searchrl eval rescore``."""

from __future__ import annotations

import json
from pathlib import Path

import typer

from searchrl.commands.common import FIELD, field_map, said_when_stopped, writable_dir
from searchrl.config.evaluation import CONTEXTS

# No help= here: the callback's docstring (with its Example line) is the group's help.
app = typer.Typer(invoke_without_command=True, add_completion=False)


def _split_list(value: str | None) -> list[str]:
    return [v.strip() for v in value.split(",") if v.strip()] if value else []


def build_config(
    config: str | None,
    overrides: list[str],
    *,
    data: list[str | dict] | None = None,
    methods: str | None = None,
    protocol: str | None = None,
    model: str | None = None,
    index: str | None = None,
    url: list[str] | None = None,
    topk: int | None = None,
    limit: int | None = None,
    out: str | None = None,
    judge_url: str | None = None,
    judge_model: str | None = None,
    policy_url: str | None = None,
    served_model: str | None = None,
    metrics: str | None = None,
    max_new_tokens: int | None = None,
    batch_size: int | None = None,
    profile: str | None = None,
    prior_data: str | None = None,
    fields: dict[str, str] | None = None,
):
    """The run config: the recipe (or defaults) with its profile, then dotted overrides, then the given flags."""
    from searchrl.commands.common import load, model_settings
    from searchrl.pipeline import with_retriever

    flags = {
        "evaluation.datasets": list(data) if data else None,
        "evaluation.methods": _split_list(methods) if methods is not None else None,
        "evaluation.metrics": _split_list(metrics) if metrics is not None else None,
        "evaluation.limit": limit,
        "evaluation.output_dir": out,
        "evaluation.judge_url": judge_url,
        "evaluation.judge_model": judge_model,
        "evaluation.policy_url": policy_url,
        "evaluation.served_model": served_model,
        "evaluation.max_new_tokens": max_new_tokens,
        "evaluation.batch_size": batch_size,
        "evaluation.prior_data": prior_data,
        "data.fields": fields or None,
        "rollout.protocol": protocol,
        "model.policy": model,
        "retrieval.topk": topk,
    }
    explicit_model = ["training.init_from=null"] if model is not None else []  # --model wins over the checkpoint
    trained = model_settings(config, model, protocol)  # how a trained --model DIR ran, under your flags and --set
    cfg = load(config, [*trained, *overrides, *explicit_model], profile, **flags)
    return with_retriever(cfg, index, url)


@app.callback(invoke_without_command=True)
def main(
    ctx: typer.Context,
    config: str = typer.Option(None, "--config", "--recipe", help="recipe name or YAML with an evaluation: section"),
    data: list[str] = typer.Option(None, "--data", help="QA file or hf:NAME[:CONFIG]:SPLIT (repeatable)"),
    methods: str = typer.Option(
        None, help="comma-separated, of: direct, cot, naive_rag, iterative_rag, iter_retgen, search_o1, agent, prior"
    ),
    prior_data: str = typer.Option(
        None, help="prior: the training QA file whose answers it counts (the prior alone loads no model)"
    ),
    protocol: str = typer.Option(
        None,
        help="agent protocol: search_r1, r1_searcher, r1_searcher_pp, r_search, rag_r1, search_o1, tool_call, reason "
        "(no search), rag (documents in the prompt)",
    ),
    model: str = typer.Option(
        None,
        help="policy spec: alias, local directory or HF id; a directory a SearchRL training saved brings its protocol "
        "and rollout settings (searchrl.json) unless --config is given",
    ),
    index: str = typer.Option(None, help="local index directory (built from --corpus when empty)"),
    url: list[str] = typer.Option(None, "--url", help="retrieval server URL (repeatable)"),
    corpus: str = typer.Option(
        None,
        help="corpus file: checked against --index, or used to build it; 'contexts': each --data set searches the "
        "paragraphs its questions ship with",
    ),
    topk: int = typer.Option(None, help="documents per query"),
    limit: int = typer.Option(None, help="first N questions of each dataset"),
    out: str = typer.Option(None, help="output directory (default: evaluation.output_dir)", callback=writable_dir),
    judge_url: str = typer.Option(None, help="OpenAI-compatible judge endpoint, e.g. http://127.0.0.1:8000/v1"),
    judge_model: str = typer.Option(None, help="judge model name"),
    policy_url: str = typer.Option(
        None, help="OpenAI-compatible completions server serving --model (vLLM, SGLang), e.g. http://127.0.0.1:8001/v1"
    ),
    served_model: str = typer.Option(None, help="the model's name on --policy-url (default: --model)"),
    metrics: str = typer.Option(None, help="comma-separated metrics (default: evaluation.metrics)"),
    max_new_tokens: int = typer.Option(None, help="token budget of direct / naive_rag answers and IRCoT sentences"),
    batch_size: int = typer.Option(None, help="questions per batch"),
    overrides: list[str] = typer.Option(None, "--set", help="dotted config override, e.g. rollout.max_turns=2"),
    profile: str = typer.Option(None, "--profile", help="profile overlay of --config, e.g. laptop"),
    device: str = typer.Option(None, "--device", help="auto (CUDA if present), cpu, cuda, cuda:N"),
    field: list[str] = FIELD,
) -> None:
    """Evaluate the baselines (direct, CoT, naive RAG, IRCoT, ITER-RETGEN, Search-o1, the training answers' prior)
    and the agent on QA datasets, or re-score predictions.

    Writes predictions/<dataset>__<method>.jsonl, summary.{md,csv,json,png} and the resolved config.yaml into
    --out. Give a recipe (--config) and/or flags; flags win. Without --config, a --model directory that a SearchRL
    training saved runs with the protocol and rollout settings it was trained with.

    Example: searchrl eval --data dev.jsonl --methods direct,naive_rag,agent --index indexes/bm25 --limit 100
    """
    if ctx.invoked_subcommand is not None:
        return
    if config is None and not data:
        if any(v not in (None, [], ()) for v in ctx.params.values()):  # flags, but nothing to evaluate on
            raise typer.BadParameter(
                "nothing to evaluate on; give --data FILE (repeatable) or --config", param_hint="--data"
            )
        typer.echo(ctx.get_help())
        raise typer.Exit(0)
    from searchrl.stages import evaluation

    device_set = [f"model.device={device}"] if device else []
    if corpus == CONTEXTS and not data:  # a config's sets: read as a corpus file named "contexts"
        raise typer.BadParameter(
            "'contexts' is each --data set's own paragraphs: give --data FILE, or set corpus: contexts on the "
            "config's evaluation.datasets entries",
            param_hint="--corpus",
        )
    if corpus == CONTEXTS:  # each set its own corpus: the paragraphs its questions ship with
        data, corpus = [{"data": d, "corpus": CONTEXTS} for d in data], None
    cfg = build_config(
        config,
        [*(overrides or []), *device_set],
        data=data,
        methods=methods,
        protocol=protocol,
        model=model,
        index=index,
        url=url,
        topk=topk,
        limit=limit,
        out=out,
        judge_url=judge_url,
        judge_model=judge_model,
        policy_url=policy_url,
        served_model=served_model,
        metrics=metrics,
        max_new_tokens=max_new_tokens,
        batch_size=batch_size,
        profile=profile,
        prior_data=prior_data,
        fields=field_map(field),
    )
    from searchrl.models import check_fetchable
    from searchrl.validation import validate_deep

    validate_deep(cfg)
    check_fetchable(cfg, profile)
    predictions = Path(cfg.evaluation.output_dir) / "predictions"

    def go_on() -> str | None:  # answered batches wait in predictions/*.partial until the whole evaluation ends
        if any(predictions.glob("*.partial")):
            return "the same searchrl eval (it keeps the answers written so far)"
        return None

    with said_when_stopped(f"evaluation into {predictions.parent}", go_on):
        evaluation(cfg, corpus=corpus)


@app.command("rescore")
def rescore(
    files: list[Path] = typer.Argument(
        ..., help="predictions JSONL: ours, or R1-Searcher's (question/answer/pred_ans)"
    ),
    out: Path = typer.Option(None, help="also write re-scored predictions and summary files here"),
    metrics: str = typer.Option("em,f1,cover_em,cover_em_tokens", help="comma-separated metrics"),
    normalize: str = typer.Option(
        "auto",
        help="auto (R1-Searcher's files: their normalisation; ours: each metric's), squad, r1_searcher, rag_r1, "
        "unicode, unicode_fold",
    ),
    boundary: str = typer.Option("auto", help="cover_em match: auto, word or char"),
    protocol: str = typer.Option(
        None, help="score by this protocol's convention (search_r1, rag_r1, ...); default: the rule each row records"
    ),
    judge_url: str = typer.Option(None, help="OpenAI-compatible judge endpoint (adds the judge column)"),
    judge_model: str = typer.Option(None, help="judge model name"),
    plugins: list[str] = typer.Option(
        None, "--plugin", help="a plugin file or module to load first: a --protocol of your own (repeatable)"
    ),
    compare_to: str = typer.Option(
        "auto", help="compare every method with this one (auto: naive_rag if present, else the first; none: none)"
    ),
    seed: int = typer.Option(0, help="seed of the bootstrap draws: the run's evaluation.seed gives its intervals"),
    resamples: int = typer.Option(1000, min=0, help="bootstrap resamples per interval and comparison (0: none)"),
) -> None:
    """Re-score existing predictions files and print the summary table.

    The rule is the one `searchrl eval` used: each row of ours records the normalisation and cover-EM boundary of
    its protocol, and is re-scored with them (--protocol, --normalize or --boundary choose another). R1-Searcher's
    released files (question/answer/pred_ans) are scored as the authors' script scores them, so EM, cover-EM
    (tokens) = ACC_R and F1 match their paper. Every score gets its 95% bootstrap interval, and every method is
    compared with --compare-to on the questions both answered, as `searchrl eval` does.

    Example: searchrl eval rescore runs/eval/predictions/dev__agent.jsonl --out runs/rescored
    """
    from searchrl.config.extensions import import_plugin
    from searchrl.eval.diagnostics import with_committed
    from searchrl.eval.harness import predictions_path, summary_sections
    from searchrl.eval.report import aggregate, print_section, print_summary, write_reports
    from searchrl.eval.rescore import rescore_file
    from searchrl.eval.scoring import scoring_note
    from searchrl.eval.stats import reference_method, uncertainty
    from searchrl.rewards.judge import LLMJudge, cache_in
    from searchrl.rewards.metrics import NORMALIZERS
    from searchrl.utils import console, write_jsonl

    for spec in plugins or []:
        import_plugin(spec)
    names = _split_list(metrics)
    if normalize != "auto" and normalize not in NORMALIZERS:
        raise ValueError(
            f"unknown --normalize {normalize!r}; choose auto, squad, r1_searcher, rag_r1, unicode or unicode_fold"
        )
    if boundary not in ("auto", "word", "char"):
        raise ValueError(f"unknown --boundary {boundary!r}; choose auto, word or char")
    judge = None
    if judge_url or judge_model:
        judge = LLMJudge(judge_url, judge_model, cache_path=cache_in(out) if out else None)
    try:
        items = [
            it
            for f in files
            for it in rescore_file(f, names, judge, normalize=normalize, boundary=boundary, protocol=protocol)
        ]
    finally:
        if judge is not None:
            judge.close()
    score_names = with_committed([*names, *(["judge"] if judge is not None else [])])
    rows = aggregate(items, score_names)
    reference = reference_method(list(dict.fromkeys(it["method"] for it in items)), compare_to)
    stats, stats_md = uncertainty(rows, items, score_names, seed=seed, resamples=resamples, reference=reference)
    print_summary(rows, score_names, title="rescore")
    for section in stats_md[1:]:  # the paired comparisons
        print_section(section)
    if out is not None:
        groups: dict[tuple[str, str], list[dict]] = {}
        for it in items:
            groups.setdefault((it["dataset"], it["method"]), []).append(it)
        for (dataset, method), group in groups.items():
            write_jsonl(predictions_path(out, dataset, method), group)
        settings = {}
        for it in items:  # one line per distinct way of scoring (R1-Searcher's files and ours may differ)
            settings.setdefault(json.dumps(it["metric_settings"], sort_keys=True), it["metric_settings"])
        notes = [scoring_note(s, names) for s in settings.values()]
        sections, after = summary_sections(items, score_names, list(dict.fromkeys(it["dataset"] for it in items)))
        extra = {"rescored": [str(f) for f in files], "metric_settings": list(settings.values()), **sections, **stats}
        after = [*stats_md, *after]
        write_reports(rows, score_names, out, extra, title="Re-scored predictions", notes=notes, after=after)
        console.print(f"wrote {out}/summary.md, summary.csv, summary.json, summary.png")
