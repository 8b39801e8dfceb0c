"""The evaluation harness: datasets x methods -> predictions with per-item metrics, and summary reports.

``run_from_config(cfg)`` is what ``searchrl eval`` runs: it resolves the datasets, the retriever and the policy
from a ``RunConfig``, then calls :func:`evaluate`, which for every dataset x method

1. answers the questions in batches of ``evaluation.batch_size`` (one progress bar with ETA per pair),
2. scores each prediction with every metric of ``evaluation.metrics`` under the method's own normalisation
   (``evaluation.normalize`` / ``boundary``, see :func:`metric_settings`) and the LLM judge, when configured,
3. writes ``predictions/<dataset>__<method>.jsonl`` (question, golds, prediction, trajectory, per-item metrics),
and finally writes ``summary.{md,csv,json,png}`` (each score with its 95% interval, each method compared with a
reference: :mod:`searchrl.eval.stats`) and the resolved ``config.yaml`` and prints the table. A run cut
short resumes: the same command again keeps every answer already written (:mod:`searchrl.eval.resume`).

:mod:`searchrl.eval.rescore` re-scores a predictions file: ours, or R1-Searcher's released one, the authors' way
(``benchmarks/bench_rescore_r1_searcher.py``). ``evaluation.timing: single`` answers every question alone, so
``latency_s`` is one question's own wall time (RAG-R1's measure); ``searches`` counts search calls, ``queries`` theirs.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from searchrl.config import RunConfig, record_run
from searchrl.data.records import QAExample
from searchrl.data.styles import question_style
from searchrl.eval import datasets as eval_sets
from searchrl.eval import resume
from searchrl.eval.baselines import (
    AgentMethod,
    DirectMethod,
    IterativeRAGMethod,
    IterRetGenMethod,
    Method,
    NaiveRAGMethod,
    Prediction,
)
from searchrl.eval.datasets import SPLITS, as_entry, dataset_name, own_retriever, resolve_datasets, resolve_eval_sets
from searchrl.eval.diagnostics import DIAGNOSTICS_NOTE, add_diagnostics, failure_shares, shares_table, with_committed
from searchrl.eval.methods import CUSTOM_METHODS, METHODS, RETRIEVAL_METHODS
from searchrl.eval.prior import AnswerPrior, PriorMethod, prior_from_config
from searchrl.eval.report import (
    POOLED_STYLES,
    aggregate,
    breakdown,
    by_style,
    group_table,
    print_section,
    print_summary,
    write_reports,
)
from searchrl.eval.resume import answer_pair, settings_key
from searchrl.eval.scoring import check_metrics, metric_functions, metric_settings, scoring_note
from searchrl.eval.search_o1 import SearchO1Method
from searchrl.eval.stats import RESAMPLES, reference_method, uncertainty
from searchrl.generation.base import Generator
from searchrl.retrieval.base import Retriever
from searchrl.rewards.judge import LLMJudge, cache_in
from searchrl.rewards.metrics import MetricFn, get_metrics
from searchrl.rollout.engine import RolloutLimits
from searchrl.rollout.record import without_tokens
from searchrl.utils import console, progress, seed_everything, write_jsonl

__all__ = ["SPLITS", "dataset_name", "evaluate", "resolve_datasets", "run_from_config"]


@dataclass
class EvalResult:
    rows: list[dict[str, Any]]  # summary rows (see searchrl.eval.report)
    metrics: list[str]  # score columns, "judge" included when a judge ran
    items: list[dict[str, Any]]  # every per-item row; token id lists only in the predictions files, when written
    paths: dict[str, Path] = field(default_factory=dict)
    runtime_s: float = 0.0

    def __repr__(self) -> str:
        """The summary table (scores in %) as ``searchrl eval`` prints it; the per-item rows stay in ``items``."""
        from searchrl.eval.report import plain_table, wide_table

        head = f"EvalResult({len(self.items)} items, {self.runtime_s:.1f} s; scores in %)"
        return f"{head}\n{plain_table(*wide_table(self.rows, self.metrics))}" if self.rows else head


# ------------------------------------------------------------------------------------------------ resolution


def check_retriever_source(cfg: RunConfig, corpus: str | Path | None = None) -> None:
    """Without a built index or a ``corpus``, the retriever is the data directory's: refuse when the datasets are
    files of their own and the data is the synthetic world (its index would answer other questions)."""
    from searchrl.pipeline import index_kind, is_service

    r = cfg.retrieval
    if is_service(r.kind) or corpus is not None or (r.index is not None and index_kind(r.index)):
        return
    entries = [as_entry(d) for d in cfg.evaluation.datasets]
    explicit = [e.data for e in entries if e.data not in SPLITS and e.index is None and e.corpus is None]
    if explicit and cfg.data.source == "synthetic":
        if r.index is not None:  # a mistyped or unbuilt index directory
            from searchrl.retrieval.index import missing_index

            raise FileNotFoundError(f"{missing_index(r.index, r.kind)}, or pass --corpus FILE")
        raise ValueError(
            f"methods {sorted(set(cfg.evaluation.methods) & RETRIEVAL_METHODS)} need a retriever for "
            f"{explicit[0]}: pass --corpus FILE (its index is built and cached), --index DIR or --url URL"
        )


def eval_generator(cfg: RunConfig) -> Generator:
    """An HF generator over the configured policy (``training.init_from`` if set, else ``model.policy``), after
    seeding every RNG with ``evaluation.seed``; with ``evaluation.policy_url``, a client of that completions server
    with the policy's tokenizer instead."""
    from searchrl.device import configure_from
    from searchrl.generation.hf import HFGenerator
    from searchrl.models import load_policy
    from searchrl.pipeline import load_tokenizer, policy_spec

    seed_everything(cfg.evaluation.seed)
    configure_from(cfg)  # model.device and precision, for whatever the evaluation runs here
    ev = cfg.evaluation
    if ev.policy_url:
        from searchrl.generation.openai_compat import OpenAICompatGenerator

        spec = policy_spec(cfg)
        return OpenAICompatGenerator(
            ev.policy_url,
            ev.served_model or spec,
            load_tokenizer(spec),
            timeout_s=ev.policy_timeout_s,
            concurrency=ev.policy_concurrency,
        )
    model, tokenizer = load_policy(policy_spec(cfg), dtype=cfg.model.dtype, frozen=True)
    return HFGenerator(model, tokenizer, max_batch_size=cfg.evaluation.batch_size)


def build_methods(
    cfg: RunConfig, generator: Generator | None, retriever: Retriever | None, prior: AnswerPrior | None = None
) -> dict[str, Method]:
    """The methods of ``evaluation.methods``, configured from the run config (``generator`` None: only ``prior``,
    which generates nothing; its answer prior is ``prior``, else fitted on ``evaluation.prior_data``)."""
    ev = cfg.evaluation
    common: dict[str, Any] = dict(
        prompt_style=cfg.model.prompt_style, temperature=ev.temperature, top_p=ev.top_p, seed=ev.seed
    )
    topk = ev.topk or cfg.retrieval.topk
    methods: dict[str, Method] = {}
    for name in ev.methods:
        if name in RETRIEVAL_METHODS and name != "agent" and retriever is None:
            raise ValueError(
                f"method {name} needs a retriever: pass retriever= (e.g. load_index(DIR)), or set retrieval.index or "
                "retrieval.urls (--index DIR, --url URL)"
            )
        if name in CUSTOM_METHODS:
            methods[name] = CUSTOM_METHODS[name](cfg, generator, retriever)
            continue
        if name == "prior":
            methods[name] = PriorMethod(prior or prior_from_config(cfg))
            continue
        assert generator is not None, f"method {name} needs the policy"
        if name == "direct":
            methods[name] = DirectMethod(
                generator, max_new_tokens=ev.max_new_tokens, answer_span=ev.answer_span, **common
            )
        elif name == "cot":
            methods[name] = METHODS[name](generator, max_new_tokens=ev.cot_max_new_tokens, **common)
        elif name == "naive_rag":
            assert retriever is not None
            methods[name] = NaiveRAGMethod(
                generator, retriever, topk=topk, max_new_tokens=ev.max_new_tokens, answer_span=ev.answer_span, **common
            )
        elif name == "iterative_rag":
            assert retriever is not None
            methods[name] = IterativeRAGMethod(
                generator,
                retriever,
                topk=topk,
                max_steps=ev.iterative_steps,
                max_new_tokens=ev.max_new_tokens,
                **common,
            )
        elif name == "iter_retgen":
            assert retriever is not None
            methods[name] = IterRetGenMethod(
                generator,
                retriever,
                topk=topk,
                iterations=ev.iter_retgen_iterations,
                max_new_tokens=ev.cot_max_new_tokens,
                **common,
            )
        elif name in ("agent", "search_o1"):
            from searchrl.pipeline import make_protocol

            over = dict(max_turns=ev.max_turns, max_searches=ev.max_searches, max_new_tokens=ev.agent_max_new_tokens)
            own = SearchO1Method.LIMITS if name == "search_o1" else {}  # its own limits, unless set
            rollout = cfg.rollout.model_copy(update={**own, **{k: v for k, v in over.items() if v is not None}})
            limits = RolloutLimits.from_config(rollout, topk)
            if name == "agent":
                methods[name] = AgentMethod(generator, retriever, make_protocol(cfg), limits=limits, **common)
            else:
                assert retriever is not None
                refine = ev.search_o1_refine_max_new_tokens
                methods[name] = SearchO1Method(
                    generator, retriever, limits=limits, refine_max_new_tokens=refine, **common
                )
    return methods


def make_judge(cfg: RunConfig, out_dir: str | Path) -> LLMJudge | None:
    """An LLM judge when ``evaluation.judge_url`` or ``judge_model`` is set (the other may come from the
    environment); its replies are cached in ``<out>/judge_cache.jsonl`` (:func:`~searchrl.rewards.judge.cache_in`)."""
    ev = cfg.evaluation
    if not (ev.judge_url or ev.judge_model):
        return None
    return LLMJudge.from_config(ev, cache_path=cache_in(out_dir))


# ------------------------------------------------------------------------------------------------ scoring


def item_row(
    dataset: str,
    method: str,
    example: QAExample,
    pred: Prediction,
    metrics: Sequence[str] | Mapping[str, MetricFn],
) -> dict[str, Any]:
    """One line of a predictions file; ``metrics`` are names (each metric's defaults) or scoring functions."""
    fns = metrics if isinstance(metrics, Mapping) else get_metrics(metrics)
    scores = {m: fn(pred.text, example.answers) for m, fn in fns.items()}
    return {  # a trajectory record (searchrl.rollout.record) with the prediction's own fields
        "source": f"eval/{dataset}/{method}",
        "score": next(iter(scores.values()), None),
        "id": example.id,
        "dataset": dataset,
        "method": method,
        "question": example.question,
        "golds": list(example.answers),
        "prediction": pred.text,
        "raw": pred.raw,
        "searches": pred.searches,
        "queries": pred.queries,
        "gen_tokens": pred.gen_tokens,
        "latency_s": pred.latency_s,
        "well_formed": pred.well_formed,
        "kind": example.kind,
        "style": question_style(example),
        "metadata": example.metadata,  # the dataset's own fields (FlashRAG's metadata, HotpotQA's type, ...)
        "metrics": scores,
        "trajectory": pred.trajectory,
    }


def apply_judge(items: list[dict[str, Any]], judge: LLMJudge) -> None:
    """Add ``metrics["judge"]``: 1.0 / 0.0, or None when the judge's reply could not be read."""
    verdicts = judge.judge_many(
        [it["question"] for it in items], [it["golds"] for it in items], [it["prediction"] for it in items]
    )
    for it, v in zip(items, verdicts, strict=True):
        it["metrics"]["judge"] = None if v.correct is None else float(v.correct)


def predictions_path(out_dir: str | Path, dataset: str, method: str) -> Path:
    return Path(out_dir) / "predictions" / f"{dataset}__{method}.jsonl"


def _scored_row(
    dname: str, mname: str, ex: QAExample, pred: Prediction, fns: Mapping[str, MetricFn], settings: Mapping
) -> dict[str, Any]:
    row = item_row(dname, mname, ex, pred, fns)
    row["metric_settings"] = {m: dict(settings[m]) for m in fns}  # the rule of each score: `eval rescore` takes it
    add_diagnostics(row)  # the failure flags, and cover-EM counting hedged answers wrong
    return row


def evaluate(
    datasets: dict[str, list[QAExample]],
    methods: dict[str, Method],
    out_dir: str | Path | None,
    *,
    metrics: Sequence[str] = ("em", "f1", "cover_em", "cover_em_tokens"),
    batch_size: int = 16,
    judge: LLMJudge | None = None,
    extra: dict[str, Any] | None = None,
    show: bool = True,
    settings: Mapping[str, Mapping[str, str]] | None = None,
    timing: str = "batch",
    methods_by_dataset: Mapping[str, dict[str, Method]] | None = None,
    resume_key: str | None = None,
    seed: int = 0,
    resamples: int = RESAMPLES,
    compare_to: str | None = "auto",
) -> EvalResult:
    """Every method on every dataset; writes predictions and the summary files into ``out_dir`` (None: nothing is
    kept on disk, the result holds the rows and whole items; else items lack the token ids the files keep).

    ``methods_by_dataset`` gives some datasets their own methods (the same names over another retriever).
    ``resume_key`` (the settings, e.g. a hash of the resolved config) makes each pair resumable
    (:mod:`searchrl.eval.resume`): a rerun with the same key keeps the answers an interrupted one wrote.

    ``settings`` (from :func:`metric_settings`) fixes each metric's normalisation; by default the methods'
    protocol's, as ``searchrl eval`` picks them, when they share one (else each metric's own);
    ``timing="single"`` answers one question at a time so that latency is per question at batch size 1.

    Each score gets a 95% bootstrap interval of ``resamples`` draws seeded by ``seed``, and each method is compared
    with ``compare_to`` (:mod:`searchrl.eval.stats`)."""
    names = list(dict.fromkeys([*methods, *(n for ms in (methods_by_dataset or {}).values() for n in ms)]))
    reference = reference_method(names, compare_to)  # a name that is not evaluated fails before any answer
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1 (got {batch_size})")
    if timing not in ("batch", "single"):
        raise ValueError(f"timing must be 'batch' or 'single' (got {timing!r})")
    metrics = check_metrics(metrics)
    if settings is None:
        every = [methods, *(methods_by_dataset or {}).values()]
        protocols = {getattr(getattr(m, "protocol", None), "name", None) for ms in every for m in ms.values()} - {None}
        settings = metric_settings(metrics, protocol=protocols.pop() if len(protocols) == 1 else None)
    settings = dict(settings)
    fns = metric_functions({m: settings[m] for m in metrics})
    answer_batch = 1 if timing == "single" else batch_size
    scratch = tempfile.TemporaryDirectory(prefix="searchrl-eval-") if out_dir is None else None
    out = Path(scratch.name if scratch else out_dir)
    for old in out.glob("summary.*"):  # an earlier run's summary would stand beside this run's answers
        old.unlink()
    t0 = time.perf_counter()
    items: list[dict[str, Any]] = []
    paths: dict[str, Path] = {}
    with progress() as bar:
        for dname, examples in datasets.items():
            for mname, method in (methods_by_dataset or {}).get(dname, methods).items():
                task = bar.add_task(f"{dname} / {mname}", total=len(examples))
                path = predictions_path(out, dname, mname)
                key = resume_key and f"{resume_key}/{dname}/{mname}"
                to_row = partial(_scored_row, dname, mname, fns=fns, settings=settings)
                rows = answer_pair(method, examples, answer_batch, to_row, path, key, bar, task)
                write_jsonl(path, rows)  # written before judging: a failing judge does not lose the predictions
                if judge is not None:
                    apply_judge(rows, judge)
                    write_jsonl(path, rows)
                paths[f"{dname}__{mname}"] = path
                items.extend(rows if scratch else map(without_tokens, rows))  # 51k agent rows: GBs of token ids
    resume.finish(paths.values())
    score_names = with_committed([*metrics, *(["judge"] if judge is not None else [])])
    summary = aggregate(items, score_names)
    runtime = time.perf_counter() - t0
    info = {
        "datasets": {d: len(exs) for d, exs in datasets.items()},
        "methods": list(methods),
        "runtime_s": round(runtime, 2),
        "metric_settings": {m: dict(settings[m]) for m in metrics},
        "timing": timing,
        "latency_batch_size": answer_batch,
        **(extra or {}),
    }
    empty = [d for d, exs in datasets.items() if not exs]
    if empty:
        console.log(f"[yellow]warning:[/yellow] no questions in {', '.join(empty)}: left out of the summary table")
    sections, after = summary_sections(items, score_names, list(datasets))
    stats, stats_md = uncertainty(summary, items, score_names, seed=seed, resamples=resamples, reference=reference)
    info.update({**sections, **stats})
    notes = [scoring_note(settings, metrics), timing_note(timing, answer_batch), *(extra or {}).get("notes", [])]
    if scratch is None:  # kept nowhere: no report files to draw
        md = [*stats_md, *after]  # the intervals and comparisons right after the scores
        paths.update(write_reports(summary, score_names, out, info, notes=notes, after=md, sizes=info["datasets"]))
    if show:
        print_summary(summary, score_names)
        for section in stats_md[1:]:  # the paired comparisons
            print_section(section)
        console.print(after[0], soft_wrap=True, markup=False)
        if scratch is None:
            console.print(f"wrote {out}/summary.md, summary.csv, summary.json, summary.png in {runtime:.1f} s")
    if scratch is not None:
        scratch.cleanup()
        paths = {}
    return EvalResult(summary, score_names, items, paths, runtime)


def summary_sections(
    items: Sequence[dict[str, Any]], score_names: Sequence[str], datasets: Sequence[str]
) -> tuple[dict[str, Any], list[str]]:
    """What ``summary.{json,md}`` hold after the main table, for ``searchrl eval`` and ``eval rescore`` alike: the
    failure flags of every (dataset, method), then scores by question kind and by style where the rows carry them.
    Returns (the JSON's keys, the markdown sections, the failure table first)."""
    info: dict[str, Any] = {}
    tables = []
    if any(it.get("kind") for it in items):  # question kinds (worlds, 2Wiki's types, MuSiQue's hops): apart
        info["by_kind"] = by_kind(items, score_names)
        tables.append(group_table(info["by_kind"], score_names, "kind", "Scores by question type"))
    styles = by_style(items, score_names)
    if any(len(per_dataset) > 1 and set(per_dataset) != {POOLED_STYLES} for per_dataset in _styles_of(styles)):
        info["by_style"] = styles  # question styles (searchrl.data.styles): a transfer test's held-out ones apart
        tables.append(group_table(styles, score_names, "style", "Scores by question style"))
    shares = failure_shares(items)
    info["diagnostics"] = {f"{d} / {m}": s for (d, m), s in shares.items()}
    why = "\n".join([DIAGNOSTICS_NOTE, "", *shares_table(shares, list(datasets))])
    return info, [why, *tables]


def by_kind(items: Sequence[dict[str, Any]], metrics: Sequence[str]) -> list[dict[str, Any]]:
    """Summary rows per (dataset, method, question kind), for items that carry a ``kind``."""
    return breakdown(items, metrics, "kind")


def _styles_of(rows: Sequence[dict[str, Any]]) -> list[set[str]]:
    """The styles of each dataset's rows."""
    out: dict[str, set[str]] = {}
    for r in rows:
        out.setdefault(r["dataset"], set()).add(r["style"])
    return list(out.values())


def timing_note(timing: str, batch_size: int) -> str:
    """One markdown line saying what the efficiency columns count and how latency was measured."""
    counts = "searches/q counts search calls, queries/q the queries they held"
    if timing == "single":
        return f"{counts}; latency is each question's own wall time at batch size 1, retrieval included."
    return (
        f"{counts}; latency is each batch's wall time (batches of {batch_size}) divided by its size; "
        "evaluation.timing=single times the questions one by one."
    )


def run_from_config(
    cfg: RunConfig,
    *,
    corpus: str | Path | None = None,
    generator: Generator | None = None,
    retriever: Retriever | None = None,
    resume: bool | None = None,
    show: bool = True,
) -> EvalResult:
    """Resolve data, retriever and policy from ``cfg`` (or use the ones given) and evaluate.

    Bad inputs fail before any model is loaded: datasets first, then the retriever, then the policy. ``resume``:
    keep the answers an interrupted run with the same settings wrote (default: only when neither a ``generator``
    nor a ``retriever`` is given, since the settings cannot tell objects apart). ``show``: print the tables.
    """
    if resume is None:
        resume = generator is None and retriever is None
    ev = cfg.evaluation
    if not ev.methods:
        raise ValueError("no methods: pass --methods direct,naive_rag,agent or set evaluation.methods")
    check_metrics(ev.metrics)
    sets = resolve_eval_sets(cfg)
    for s in sets:
        own = f"; its own index {s.index or s.corpus}" if s.retriever_key != (None, None) else ""
        own += f"; the first {len(s.examples)} of {s.of} (evaluation.limit)" if s.of else ""
        console.log(f"dataset {s.name}: {len(s.examples)} question{'s' * (len(s.examples) != 1)} from {s.source}{own}")
    needs = set(ev.methods) & RETRIEVAL_METHODS
    prior = prior_from_config(cfg, sets) if "prior" in ev.methods else None  # fails before any model loads
    if retriever is None and needs and any(s.retriever_key == (None, None) for s in sets):
        from searchrl.pipeline import make_retriever_for

        check_retriever_source(cfg, corpus)
        retriever = make_retriever_for(cfg, corpus)
    own_retrievers = {
        key: own_retriever(cfg, *key)
        for key in dict.fromkeys(s.retriever_key for s in sets)
        if key != (None, None) and needs
    }
    if generator is None and set(ev.methods) - {"prior"}:  # the prior alone loads no model
        generator = eval_generator(cfg)
    shared = any(s.retriever_key == (None, None) for s in sets)
    by_key = {key: build_methods(cfg, generator, r, prior) for key, r in own_retrievers.items()}
    by_dataset = {s.name: by_key[s.retriever_key] for s in sets if s.retriever_key in by_key}
    methods = build_methods(cfg, generator, retriever, prior) if shared or not by_key else next(iter(by_key.values()))
    data = {s.name: (s.source, s.examples) for s in sets}
    out = Path(ev.output_dir)
    record_run(cfg, out)
    judge = make_judge(cfg, out)
    try:
        extra = {
            "sources": {d: s for d, (s, _) in data.items()},
            "policy": cfg.training.init_from or cfg.model.policy,
            "indexes": {s.name: s.index or s.corpus for s in sets if s.retriever_key != (None, None)},
            "notes": eval_sets.limit_note(sets),
        }
        return evaluate(
            {d: exs for d, (_, exs) in data.items()},
            methods,
            out,
            metrics=ev.metrics,
            batch_size=ev.batch_size,
            judge=judge,
            extra=extra,
            settings=metric_settings(check_metrics(ev.metrics), ev.normalize, ev.boundary, cfg.rollout.protocol),
            timing=ev.timing,
            methods_by_dataset=by_dataset,
            resume_key=settings_key(cfg) if resume else None,
            show=show,
            seed=ev.seed,
            resamples=ev.bootstrap_resamples,
            compare_to=ev.compare_to,
        )
    finally:
        if judge is not None:
            judge.close()
