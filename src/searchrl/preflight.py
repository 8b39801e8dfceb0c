"""Checks that run before any work: every stage's inputs and every reward component's params.

``searchrl run`` calls :func:`plan_pipeline` before its first stage, so a wrong path in the last stage fails in
seconds, not after an hour of SFT; ``searchrl run --dry-run`` prints the same plan. Nothing here loads a model or
builds an index: a stage's inputs are the paths its handler would open, worked out from its resolved config the way
:mod:`searchrl.runner` chains them (``${stage}`` references, the latest world and index); a user's question file is
read whole and a corpus's first passages, so a malformed row fails here too.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from searchrl.config import ConfigError, RewardComponent, RunConfig, StageConfig
from searchrl.config.evaluation import CONTEXTS
from searchrl.stages.resume import changed_since

#: splits a config names by key (data.train, ...) rather than by path.
_SPLITS = ("train", "dev", "test")


@dataclass
class StagePlan:
    """One stage as it will run: what it reads (with the config key that names each input) and what it writes."""

    name: str
    key: str  # the handler: synth, index, split, oracle, rejection-sample, select-difficulty, sft, rl, eval
    output: str
    skipped: bool  # DONE marker present and not forced again
    inputs: list[tuple[str, str]] = field(default_factory=list)  # (what, path)
    model: str | None = None  # the model the stage starts from (stages that load one)
    why: str = ""  # why a stage that ran before (a DONE marker) runs again; skipped: how it is out of date (--only)


def check_reward_params(components: Sequence[RewardComponent], where: str) -> None:
    """Reject unknown or invalid ``reward.components[].params`` (e.g. ``metirc``) without loading any model.

    The composer checks each component's params against its function's signature and calls it on no inputs, so
    values are checked too; runtime dependencies (the evidence reader, the judge) are stand-ins here.
    """
    from searchrl.rewards.components import RewardComposer

    try:
        RewardComposer(components, reader=_StandIn(), judge=_StandIn())
    except (TypeError, ValueError) as err:
        raise ConfigError(f"{where}: reward.components: {err}") from None


class _StandIn:
    """A placeholder for a runtime dependency; never called, since the check passes no inputs."""

    def __call__(self, *args: Any, **kwargs: Any) -> Any:  # pragma: no cover - a check passes no inputs
        raise RuntimeError("a reward dependency stand-in was called during a config check")


def _data_file(cfg: RunConfig, name: str) -> tuple[str, bool]:
    """(path, produced) for a data file as :func:`searchrl.pipeline.resolve_file` would find it, without its side
    effect of generating the cached synthetic world (which is then 'produced')."""
    from searchrl.pipeline import data_file

    if cfg.data.source == "synthetic" and not (name.startswith("hf:") or Path(name).is_absolute()):
        return f"<synthetic world>/{name}", True
    return data_file(cfg.data.source, name), False


def _under(path: str, dirs: Sequence[str]) -> bool:
    return any(path == d or path.startswith(d.rstrip("/") + "/") for d in dirs)


def _stage_inputs(
    key: str,
    stage: StageConfig,
    cfg: RunConfig,
    model: str,
    index: str | None,
    world: str | None,
    produced: Sequence[str],
) -> list[tuple[str, str, bool, dict[str, str]]]:
    """(what, path, produced elsewhere, the file's field names: data.fields or an evaluation set's own) for each
    input the stage's handler opens."""
    out: list[tuple[str, str, bool, dict[str, str]]] = []

    def data(what: str, name: str, fields: dict[str, str] | None = None) -> None:
        fields = cfg.data.fields if fields is None else fields
        if _under(name, produced):  # an earlier stage's output, e.g. data.dev=${split}/heldout.jsonl
            out.append((what, name, False, fields))
        elif _under(cfg.data.source, produced) and not (Path(name).is_absolute() or name.startswith("hf:")):
            out.append((what, str(Path(cfg.data.source) / name), False, fields))
        else:
            path, made = _data_file(cfg, name)
            hub = path.startswith("hf:") or path == CONTEXTS  # the hub is not checked
            out.append((what, path, made or hub, fields))

    def given(what: str, value: Any) -> None:  # an hf: source, or the corpus of the questions' own paragraphs
        for v in value if isinstance(value, list) else [value]:
            out.append((what, str(v), str(v).startswith("hf:") or str(v) == CONTEXTS, cfg.data.fields))

    if key == "index":
        given("corpus (stage data:)", stage.data) if stage.data else data("corpus (data.corpus)", cfg.data.corpus)
    elif key == "split":
        given("questions (stage data:)", stage.data) if stage.data else data("questions (data.train)", cfg.data.train)
    elif key == "oracle":
        if stage.data or world:
            given("world", stage.data or world)
    elif key in ("rejection-sample", "select-difficulty"):
        given("questions (stage data:)", stage.data) if stage.data else data("questions (data.train)", cfg.data.train)
    elif key == "sft":
        sources = stage.data or cfg.sft.data
        for sft_data in sources if isinstance(sources, list) else [str(sources)]:
            if sft_data not in ("oracle", "rewriter_oracle"):
                given("SFT data (sft.data)", sft_data.removeprefix("rewriter:"))
            elif world:
                given("world", world)
    elif key == "rl":
        given("questions (stage data:)", stage.data) if stage.data else data("questions (data.train)", cfg.data.train)
        if cfg.training.eval_every > 0:
            data("held-out questions (data.dev)", cfg.data.dev)
    elif key == "eval":
        entries = stage.data if stage.data else cfg.evaluation.datasets
        for entry in entries if isinstance(entries, list) else [entries]:
            mapping = not isinstance(entry, str)  # an EvalDataset ({data, corpus, index, ...}) or a plain string
            qa, own, own_index = (entry.data, entry.corpus, entry.index) if mapping else (entry, None, None)
            if qa in _SPLITS:
                data(f"questions (data.{qa})", getattr(cfg.data, qa))
            elif str(qa).startswith("hf:"):
                given("questions (evaluation.datasets)", qa)
            else:
                data("questions (evaluation.datasets)", str(qa), entry.fields if mapping else None)
            if own and own != CONTEXTS:  # built from the questions themselves
                data("its corpus (evaluation.datasets)", own)
            elif own_index and not own:
                data("its index (evaluation.datasets)", own_index)
    if (
        key in ("rl", "eval", "rejection-sample", "select-difficulty", "oracle")
        and cfg.retrieval.kind in ("bm25", "dense", "hybrid")
        and (index or cfg.retrieval.index)
    ):
        given("index (retrieval.index)", index or cfg.retrieval.index)
    if key in ("sft", "rl", "eval", "rejection-sample", "select-difficulty") and Path(model).is_absolute():
        given("model", model)
    return out


def plan_pipeline(
    cfg: RunConfig,
    run_dir: str | Path,
    *,
    forced: set[str] | None = None,
    only: bool = False,
    load: Callable[[str], RunConfig] | None = None,
) -> list[StagePlan]:
    """Every stage of ``cfg.pipeline`` with its inputs; ConfigError naming each input that does not exist (and is
    not written by an earlier stage), and each stage whose reward params are wrong, before anything runs."""
    from searchrl.runner import check_stage_args
    from searchrl.stages.chain import NEEDS_MODEL as _NEEDS_MODEL
    from searchrl.stages.chain import _subst, resolve_stage, stage_output

    run_dir = Path(run_dir)
    forced = forced or set()
    refs: dict[str, str] = {"run": str(run_dir)}
    produced: list[str] = []
    base_values = cfg.model_dump()
    world = index = model = None
    plans: list[StagePlan] = []
    problems: list[str] = []
    questions: dict[str, list] = {}  # a user's question file, read once: path -> its examples
    read: set[tuple[str, str]] = set()  # (as what, path): a file two stages read as the same kind is read once
    no_corpus = reruns = own_data = False
    check_reward_params(cfg.reward.components, "the run's config")
    for raw_stage in cfg.pipeline:
        check_stage_args(raw_stage)
        stage = StageConfig.model_validate(_subst(raw_stage.model_dump(), refs, raw_stage.name, base_values))
        output = stage_output(stage, run_dir)
        base = load(stage.recipe) if (stage.recipe and load is not None) else cfg
        scfg, key, stage_model, settings = resolve_stage(base, stage, world, stage.index or index, model, run_dir)
        marker = run_dir / stage.name / "DONE"
        changed = None if only or reruns or not marker.exists() else changed_since(marker, settings)
        done = marker.exists() and (only or not (reruns or changed))
        skipped = (only and stage.name not in forced) or (done and stage.name not in forced)
        why = ""  # why a stage that ran before runs again, as the run's log will say
        if marker.exists() and not skipped:
            why = "named by --only / --from" if stage.name in forced else changed or "a stage before it runs again"
        elif skipped and only and marker.exists():  # kept as --only asks, even where its settings changed since
            why = changed_since(marker, settings) or ""
        reruns = reruns or not skipped  # as the run does: a stage that runs again re-runs those after it
        if stage.kind == "rl" or (stage.kind == "data" and stage.op in _NEEDS_MODEL):
            check_reward_params(scfg.reward.components, f"stage '{stage.name}'")
        sft_data = stage.data or scfg.sft.data
        oracle = key == "oracle" or (key == "sft" and {"oracle", "rewriter_oracle"} & set(_as_list(sft_data)))
        if oracle and not skipped and (gap := _oracle_gap(scfg.rollout.protocol)):
            problems.append(f"stage '{stage.name}' writes oracle trajectories, but protocol {gap}")
        plan = StagePlan(
            stage.name,
            str(key),
            str(output),
            skipped,
            model=str(stage_model) if key in _NEEDS_MODEL else None,
            why=why,
        )
        for what, path, elsewhere, fields in _stage_inputs(
            str(key), stage, scfg, str(stage_model), stage.index or index, world, produced
        ):
            plan.inputs.append((what, path))
            if skipped or elsewhere or _under(path, produced):
                continue
            if not Path(path).exists():
                problems.append(
                    f"stage '{stage.name}' reads {what} {path}, which does not exist{_sft_named(what, path)}"
                )
                no_corpus = no_corpus or "corpus" in what
                # a stage reading ${cfg.data.source}/FILE while data.source names the built-in world, not a directory
                own_data = own_data or (cfg.data.source == "synthetic" and _under(path, ["synthetic"]))
            elif Path(path).is_file() and (what.split()[0], path) not in read:
                read.add((what.split()[0], path))
                bad, rows = _read_input(stage.name, what, path, fields)
                problems.extend(bad)
                if rows:
                    questions[path] = rows
        source = plan.inputs[0][1] if plan.inputs else ""
        if not skipped:
            problems.extend(_kind_typos(stage, str(key), scfg, bool(oracle), source, questions, world))
        if key == "split" and source in questions:
            problems.extend(_split_too_small(stage.name, source, len(questions[source]), stage.args))
        if stage.args.get("quota") and source in questions:
            problems.extend(_quota_sources_absent(stage.name, source, questions[source], stage.args["quota"]))
        plans.append(plan)
        refs[stage.name] = str(output)
        produced.append(str(output))
        if stage.op == "synth":
            world = str(output)
        elif stage.op == "index":
            index = str(output)
        elif stage.kind in ("sft", "rl"):
            model = str(output)
    if problems:
        fixes = []
        if own_data:
            fixes.append(
                f"recipe {cfg.name} trains on your own data: give data.source=DIR, a directory holding its QA file "
                f"(data.train) and corpus (data.corpus), e.g. searchrl run --recipe {cfg.name} data.source=mydata"
            )
        elif any(p.endswith("which does not exist") for p in problems):
            example = "data.corpus=FILE" if no_corpus else "data.source=DIR, data.train=FILE"
            fixes.append(f"fix the path (e.g. {example}) or the stage's data: in the recipe")
        if no_corpus:  # HotpotQA, 2Wiki, MuSiQue and DPR files carry their own paragraphs
            fixes.append("questions shipping paragraphs make a corpus: searchrl data contexts QA_FILE --out FILE")
        raise ConfigError("; ".join([*dict.fromkeys(problems), *fixes]))  # each problem once
    return plans


def _kind_typos(
    stage: StageConfig, key: str, cfg: RunConfig, oracle: bool, source: str, questions: dict[str, list], world: Any
) -> list[str]:
    """Question kinds a stage selects by (data.kinds; an oracle's args kinds, sft.kinds or data.kinds, and
    sft.oracle_mix) that its questions cannot have: not a synthetic kind, nor a kind of the user's file it reads."""
    from searchrl.pipeline import unknown_kinds

    present: set[str] | None = None
    if oracle:  # the world's train split (an oracle stage's data: a world or split directory of yours is not checked)
        if (key == "oracle" and stage.data) or stage.args.get("split", "train") != "train":
            return []
        args_kinds = stage.args.get("kinds") if key == "oracle" else None
        chosen = [("args kinds", args_kinds), ("sft.kinds", cfg.sft.kinds), ("data.kinds", cfg.data.kinds)]
        named = [
            next(((what, kinds) for what, kinds in chosen if kinds), ("", [])),
            ("sft.oracle_mix", [*cfg.sft.oracle_mix]),
        ]
    elif key in ("rl", "rejection-sample", "select-difficulty"):
        synthetic = source.startswith("<synthetic world>/") or (world is not None and _under(source, [world]))
        if not (synthetic or source in questions):
            return []
        named = [("data.kinds", cfg.data.kinds)]
        present = {str(k) for e in questions.get(source, []) if (k := e.metadata.get("kind")) is not None}
    else:
        return []
    return [
        f"stage '{stage.name}' selects questions by {what}: {problem}"
        for what, kinds in named
        if kinds and (problem := unknown_kinds([kinds] if isinstance(kinds, str) else list(kinds), present))
    ]


def _sft_named(what: str, path: str) -> str:
    """For SFT data that is no file: the built-in sources it may have meant (a misspelt ``oracle``)."""
    if not what.startswith("SFT data"):
        return ""
    import difflib

    close = difflib.get_close_matches(path, ["oracle", "rewriter_oracle"], n=1)
    return (
        f" (did you mean '{close[0]}'?)" if close else " (sft.data: oracle, rewriter_oracle, rewriter:FILE or a file)"
    )


def _as_list(value: Any) -> list[str]:
    return [str(v) for v in value] if isinstance(value, list) else [str(value)]


def _oracle_gap(name: str) -> str | None:
    """What a protocol lacks to write oracle trajectories (its search call and answer as text), or None."""
    from searchrl.protocols import PROTOCOLS
    from searchrl.protocols.base import Protocol

    cls = PROTOCOLS[name]
    missing = [m for m in ("format_search", "format_answer") if getattr(cls, m) is getattr(Protocol, m)]
    return f"{name} does not define {' and '.join(missing)}; define them in its class" if missing else None


def _read_input(name: str, what: str, path: str, fields: dict[str, str]) -> tuple[list[str], list | None]:
    """(what a stage would find wrong in a user's file, its questions when it is a readable question file), found
    before any stage runs: every row of a question file (as the loader reads it), the first thousand passages of a
    corpus (duplicate ids wait for the index stage)."""
    from itertools import islice

    from searchrl.data.corpus import iter_passages
    from searchrl.data.loaders import load_qa

    rows = None
    try:
        if what.startswith("questions"):
            rows = load_qa(path, fields=fields)
            n = len(rows)
        elif what.startswith("corpus"):
            n = sum(1 for _ in islice(iter_passages(path), 1000))
        else:
            return [], None
    except (ValueError, OSError) as err:
        return [f"stage '{name}' reads {what}: {err}"], None
    return ([], rows) if n else ([f"stage '{name}' reads {what} {path}, which holds no {what.split()[0]}"], None)


def _quota_sources_absent(name: str, path: str, examples: list, quota: Any) -> list[str]:
    """A selection stage whose quotas name source datasets (``hotpotqa/medium=200``) that none of its ``examples``
    (the questions of ``path``) names in a ``source`` field would keep nothing, found before the labelling pass."""
    from searchrl.sft.quotas import ANY, SOURCE_FIELDS, parse_quotas, source_of

    wanted = {src for src, _ in parse_quotas(quota)}
    if ANY in wanted:
        return []
    present = {source_of(ex.metadata) for ex in examples}
    if present & wanted:
        return []
    named = "name no source" if present == {"all"} else f"name only {', '.join(sorted(present - {'all'}))}"
    return [
        f"stage '{name}' keeps questions from {', '.join(sorted(wanted))} by its quota, but the questions in {path} "
        f"{named} (a {' / '.join(SOURCE_FIELDS)} field); add that field, or quota by bucket alone: "
        f"pipeline.{name}.args.quota='[\"*/medium=350\"]'"
    ]


def _split_too_small(name: str, path: str, n: int, args: dict[str, Any]) -> list[str]:
    """A split stage that would hold out every one of the ``n`` questions of its file (or more), found before any
    stage runs rather than after the stages before it."""
    if args.get("heldout_fraction") is not None:
        return []
    n = min(n, args["limit"]) if args.get("limit") else n
    held = args.get("heldout", 100)  # split_questions' default
    if not isinstance(held, int) or isinstance(held, bool) or held < 0:
        return [f"stage '{name}': args heldout must be a whole number of questions, got {held!r}"]
    if held < n:
        return []
    return [
        f"stage '{name}' holds out {held} of the {n} questions in {path}, leaving none to train on; hold out fewer: "
        f"pipeline.{name}.args.heldout=N with N below {n} (or pipeline.{name}.args.heldout_fraction=0.2)"
    ]


def format_plan(plans: Sequence[StagePlan]) -> str:
    """The plan as text, one stage a block: ``--dry-run``'s output."""
    lines = []
    for i, p in enumerate(plans, 1):
        state = f"run again: {p.why}" if p.why else "run"
        if p.skipped:
            state = f"skip (DONE) although its {p.why}: --only keeps it" if p.why else "skip (DONE)"
        lines.append(f"{i}. {p.name} [{p.key}] {state} -> {p.output}")
        for what, path in p.inputs:
            lines.append(f"     reads {what}: {path}")
    return "\n".join(lines)
