"""``searchrl run``: a method end to end, its recipe's ``pipeline:`` stages in order (data -> SFT -> RL -> eval).

Every stage writes into ``OUT/<stage>/`` and, when it succeeds, a ``DONE`` marker (JSON: seconds, output, the stage's
settings). A stage with a marker is skipped unless its settings changed since
(:func:`searchrl.stages.resume.stage_settings`); a stage that runs clears the markers of the stages after it (made from
its old output); a finished RL stage goes on from its last checkpoint when only ``training.steps`` grew, and starts
again for any other change. ``--only NAME`` re-runs one stage (its inputs must exist) and leaves the other markers,
``--from NAME`` re-runs that stage and every later one. A stage that runs again starts from an emptied directory
(:func:`searchrl.stages.resume.clear_stage` keeps a dense build's staging and an evaluation's answered batches), and an
RL or SFT stage that stopped part-way goes on from its last checkpoint (``training.save_every``) when its settings are
unchanged (a larger ``training.steps`` allowed) and so are its starting model's weights, and starts again otherwise or
when named by ``--only`` / ``--from``. ``OUT/run.log`` records each stage's start, end and wall time;
``OUT/summary.json`` the stages, their outputs, times and results.

Stage outputs, referenced by later stages as ``${name}``:

- data ``synth``: the world directory (corpus.jsonl, train/dev/test.jsonl); ``index``: ``OUT/<stage>/index``;
  ``split``: the directory holding train.jsonl and heldout.jsonl; ``oracle``, ``rejection-sample`` and
  ``select-difficulty``: ``OUT/<stage>/data.jsonl``;
- ``sft`` and ``rl``: the final model, ``OUT/<stage>/final``; ``eval``: ``OUT/<stage>`` (summary.json inside).

Defaults that chain the stages: after a ``synth`` stage, ``data.source`` is its world; after an ``index`` stage,
``retrieval.index`` is its index; a stage that needs a model (sft, rl, eval, rejection-sample, select-difficulty)
starts from the latest sft/rl stage's model unless ``init_from`` says otherwise. A stage's ``set:`` overrides win.
Stages run in this process, each a function of :mod:`searchrl.stages` called with the stage's resolved config and
its ``args`` as keyword arguments; a single-stage command (``searchrl data split``) calls the same function."""

from __future__ import annotations

import json
import os
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from searchrl.config import ConfigError, RunConfig, StageConfig, record_run, validate_dict
from searchrl.config.sections import WorldConfig
from searchrl.rl.run_dir import STATE_FILE
from searchrl.stages.chain import MODEL_STAGES as _MODEL_STAGES
from searchrl.stages.chain import NEEDS_MODEL as _NEEDS_MODEL
from searchrl.stages.chain import _subst, resolve_stage, stage_output
from searchrl.stages.resume import (
    GOES_ON,
    changed_settings,
    changed_since,
    clear_stage,
    resume_mismatch,
    sft_resume_mismatch,
)
from searchrl.stages.train import one_process_sft
from searchrl.utils import ResumeRefused, StopRequested, atomic_write_text, console, restore_interrupted


@dataclass
class StageContext:
    """What a stage handler gets: its stage, its resolved config, its directory and the run's state."""

    stage: StageConfig
    cfg: RunConfig
    dir: Path
    run_dir: Path
    model: str  # the model the stage starts from (sft/rl/eval, sampling stages)
    world: str | None  # the latest synth stage's world directory
    index: str | None  # the latest index stage's index directory
    resume: bool = False  # go on from OUT/<stage>/checkpoint (its handler clears it when it starts again instead)


@dataclass
class StageResult:
    name: str
    kind: str
    op: str | None
    status: str  # "ran" | "skipped" | "stopped" (Ctrl-C, SIGTERM; the same run goes on) | "failed"
    seconds: float
    output: str
    result: dict[str, Any] = field(default_factory=dict)
    cpu_seconds: float = 0.0  # of this process over the stage, all threads (2 busy cores: about twice ``seconds``)


# ------------------------------------------------------------------------------------------------- handlers


def _count_lines(path: Path) -> int:
    with path.open(encoding="utf-8") as f:
        return sum(1 for line in f if line.strip())


#: the keyword arguments each data op's ``args:`` may hold (None: any, passed on to the index builder).
_OP_ARGS = {
    "synth": set(WorldConfig.model_fields),  # a synth stage's args are data.world's fields
    "oracle": {"split", "limit", "kinds", "forms"},
}
#: a sampling stage's teacher: an OpenAI-compatible server (``url``), its model name and request timeout.
_TEACHER_ARGS = {"url", "served_model", "timeout_s", "concurrency"}
_OP_FUNCTIONS = {
    "split": "split_questions",
    "rejection-sample": "rejection_sampling",
    "select-difficulty": "difficulty_selection",
}


def stage_arg_names(kind: str, op: str | None) -> set[str]:
    """The ``args:`` keys a data stage's op takes (its function's options); sft, rl and eval stages take ``set:``."""
    import inspect

    if kind != "data":
        return set()
    if op == "index":  # passed on to the index builder, which the runner gives its output directory
        from searchrl.retrieval.index import build_index

        params = inspect.signature(build_index).parameters
        return {"kind"} | {p for p, v in params.items() if v.kind == v.KEYWORD_ONLY and p != "overwrite"}
    if op in _OP_FUNCTIONS:
        from searchrl import stages

        params = inspect.signature(getattr(stages, _OP_FUNCTIONS[op])).parameters
        known = set(params) - {"cfg", "out", "source", "data", "teacher", "fields"}  # what the runner passes itself
        return known | _TEACHER_ARGS if "teacher" in params else known
    return set(_OP_ARGS.get(op or "", set()))


def check_stage_args(stage: StageConfig) -> None:
    """A stage that cannot run (``args:`` its function does not take, SFT under several processes), before any runs."""
    if stage.kind == "sft":
        one_process_sft()
    if not stage.args:
        return
    if stage.kind != "data":
        raise ConfigError(f"stage '{stage.name}': args: are for data stages; use set: for {stage.kind} settings")
    known = stage_arg_names(stage.kind, stage.op)
    unknown = sorted(set(stage.args) - known)
    if unknown:
        raise ConfigError(
            f"stage '{stage.name}': unknown args {unknown} for {stage.op}; it takes {sorted(known)} "
            "(config settings go in set:, e.g. rollout.max_obs_tokens)"
        )


def _sampling_cfg(ctx: StageContext) -> RunConfig:
    """The stage's config with the model it samples with (``model.policy``)."""
    return ctx.cfg.model_copy(update={"model": ctx.cfg.model.model_copy(update={"policy": ctx.model})})


def _op_synth(ctx: StageContext) -> dict[str, Any]:
    from pydantic import ValidationError

    from searchrl.stages import synth_world

    # the stage's args over data.world, validated as data.world is ("false" is False, shares within 0-1)
    try:
        args = WorldConfig.model_validate(ctx.cfg.data.world.model_dump() | dict(ctx.stage.args)).model_dump()
    except ValidationError as err:
        first = err.errors()[0]
        where = "".join(f".{part}" for part in first["loc"])
        raise ConfigError(f"stage '{ctx.stage.name}': args{where}: {first['msg']}; fix that value") from None
    world = synth_world(ctx.dir, **args)
    return {**args, "questions": world.summary()["questions"]}


def _op_index(ctx: StageContext) -> dict[str, Any]:
    from searchrl.stages import build_index_for

    corpus = ctx.stage.data
    if isinstance(corpus, list):
        raise ConfigError(f"stage '{ctx.stage.name}': an index stage takes one corpus file in data:")
    try:
        return build_index_for(ctx.cfg, ctx.dir / "index", corpus, **ctx.stage.args)
    except ConfigError as err:
        raise ConfigError(f"stage '{ctx.stage.name}': {err}") from None


def _op_split(ctx: StageContext) -> dict[str, Any]:
    from searchrl.pipeline import resolve_file
    from searchrl.stages import split_questions

    source = ctx.stage.data or resolve_file(ctx.cfg, ctx.cfg.data.train)
    if isinstance(source, list):
        raise ConfigError(f"stage '{ctx.stage.name}': split takes one QA file in data:")
    try:
        train, held = split_questions(str(source), ctx.dir, **ctx.stage.args, fields=ctx.cfg.data.fields)
    except ConfigError as err:
        raise ConfigError(f"stage '{ctx.stage.name}': {err}") from None
    return {"source": str(source), "train": train, "heldout": held}


def _op_oracle(ctx: StageContext) -> dict[str, Any]:
    """Oracle trajectories of the stage's world (``data:``, else the latest synth stage's, else the config's);
    ``args``: ``split`` (train), ``limit``, ``kinds`` (``sft.limit``, ``sft.kinds`` here), ``forms`` (e.g. choice)."""
    from searchrl.pipeline import data_dir
    from searchrl.stages import write_oracle_data

    split = ctx.stage.args.get("split", "train")
    sft = {k: v for k, v in ctx.stage.args.items() if k in ("limit", "kinds")}
    cfg = _sampling_cfg(ctx)
    world = ctx.stage.data or ctx.world or str(data_dir(cfg))
    data = cfg.data.model_copy(
        update=dict(source=str(world), train="train.jsonl", dev="dev.jsonl", test="test.jsonl", corpus="corpus.jsonl")
    )
    cfg = cfg.model_copy(update={"data": data, "sft": cfg.sft.model_copy(update=sft)})
    write_oracle_data(cfg, ctx.dir / "data.jsonl", split, ctx.stage.args.get("forms"))
    return {"examples": _count_lines(ctx.dir / "data.jsonl")}


def _sampling_op(ctx: StageContext, fn: Callable[..., Any], key: str, empty_hint: str) -> dict[str, Any]:
    """A sampling stage (rejection sampling, difficulty selection); an empty output is an error naming the fix."""
    data = ctx.stage.data
    if isinstance(data, list):
        raise ConfigError(f"stage '{ctx.stage.name}': {ctx.stage.op} takes one QA file in data:")
    from searchrl.stages import Teacher

    args = {k: v for k, v in ctx.stage.args.items() if k not in _TEACHER_ARGS}
    teacher = Teacher(**{k: v for k, v in ctx.stage.args.items() if k in _TEACHER_ARGS})
    fn(_sampling_cfg(ctx), ctx.dir / "data.jsonl", data=data, teacher=teacher, **args)
    n = _count_lines(ctx.dir / "data.jsonl")
    if n == 0:
        raise ValueError(f"stage '{ctx.stage.name}': {empty_hint}")
    return {key: n}


def _op_rejection_sample(ctx: StageContext) -> dict[str, Any]:
    from searchrl.stages import rejection_sampling

    hint = "rejection sampling kept no sample; raise args.k or the questions (args.limit), or start from a model"
    return _sampling_op(ctx, rejection_sampling, "examples", hint + " that was cold-started")


def _op_select_difficulty(ctx: StageContext) -> dict[str, Any]:
    from searchrl.stages import difficulty_selection

    if ctx.stage.args.get("rule") == "rag_r1":  # args.keep is R1-Searcher's; RAG-R1 keeps by answerability
        hint = "the answerability filter kept no question; raise args.n or args.easy_fraction, or use more questions"
    else:
        hint = "difficulty selection kept no question; widen args.keep or use more questions (args.limit)"
    return _sampling_op(ctx, difficulty_selection, "questions", hint)


def _sft(ctx: StageContext) -> dict[str, Any]:
    from searchrl.stages import run_sft

    cfg = _sampling_cfg(ctx)
    if data := ctx.stage.data:  # a list: every source's examples together (e.g. [oracle, "${real}"])
        cfg = cfg.model_copy(update={"sft": cfg.sft.model_copy(update={"data": data})})

    def restart(why: str) -> None:
        _log(ctx.run_dir, f"stage {ctx.stage.name}: {why}; starting it again")
        clear_stage(ctx.dir)
        ctx.resume = False  # as its DONE marker says

    if ctx.resume and (why := sft_resume_mismatch(cfg, ctx.dir)):
        restart(why)
    try:
        history = run_sft(cfg, str(ctx.dir), resume=ctx.resume)
    except ResumeRefused as err:  # its examples changed (a data file edited in place): as RL's changed settings
        restart(err.why)
        history = run_sft(cfg, str(ctx.dir), resume=False)
    return {k: v for k, v in (history[-1] if history else {}).items() if isinstance(v, int | float)}


def _rl(ctx: StageContext) -> dict[str, Any]:
    from searchrl.stages import run_train

    raw = ctx.cfg.model_dump()
    raw["training"].update(init_from=ctx.model, output_dir=str(ctx.dir))
    if ctx.stage.data:
        raw["data"]["train"] = str(ctx.stage.data)
    cfg = validate_dict(raw, f"stage '{ctx.stage.name}'")
    why = resume_mismatch(cfg) if ctx.resume else None
    if why:
        _log(ctx.run_dir, f"stage {ctx.stage.name}: {why}; starting it again")
        shutil.rmtree(ctx.dir, ignore_errors=True)  # the old metrics.jsonl would otherwise be appended to
        ctx.dir.mkdir(parents=True)
        ctx.resume = False  # as its DONE marker says
    history = run_train(cfg, resume=ctx.resume)
    last = history[-1] if history else {}
    return {k: v for k, v in last.items() if k in ("step", "reward/total") or k.startswith("eval/")}


def _eval(ctx: StageContext) -> dict[str, Any]:
    from searchrl.stages import evaluation

    data = ctx.stage.data
    datasets = [str(d) for d in (data if isinstance(data, list) else [data])] if data else None
    result = evaluation(ctx.cfg, model=ctx.model, out=ctx.dir, datasets=datasets)
    return {"rows": result.rows, "runtime_s": round(result.runtime_s, 2)}


HANDLERS: dict[str, Callable[[StageContext], dict[str, Any]]] = {
    "synth": _op_synth,
    "index": _op_index,
    "split": _op_split,
    "oracle": _op_oracle,
    "rejection-sample": _op_rejection_sample,
    "select-difficulty": _op_select_difficulty,
    "sft": _sft,
    "rl": _rl,
    "eval": _eval,
}


# --------------------------------------------------------------------------------------------------- runner


def _log(run_dir: Path, line: str) -> None:
    console.log(f"[run] {line}")
    with (run_dir / "run.log").open("a", encoding="utf-8") as f:
        f.write(f"{time.strftime('%Y-%m-%d %H:%M:%S')} {line}\n")


def _to_run(names: list[str], only: list[str] | None, start: str | None) -> set[str]:
    """Stages forced to run again: ``--only`` names, or ``--from`` and every later stage."""
    for n in [*(only or []), *([start] if start else [])]:
        if n not in names:
            raise ConfigError(f"no stage '{n}' in this pipeline (stages: {', '.join(names)})")
    if only and start:
        raise ConfigError("give --only or --from, not both")
    if only:
        return set(only)
    return set(names[names.index(start) :]) if start else set()


def run_pipeline(
    cfg: RunConfig,
    out: str | Path,
    *,
    only: list[str] | None = None,
    start: str | None = None,
    recipe: str = "",
    profile: str | None = None,
    load: Callable[[str], RunConfig] | None = None,
) -> list[StageResult]:
    """Run ``cfg.pipeline`` into ``out``; returns one result per stage (also in ``out/summary.json``).

    ``load(name)`` gives the config of another recipe for stages with ``recipe:`` (with the run's profile and
    overrides); default: the recipe alone."""
    if load is None:
        from searchrl.config import load_config

        load = load_config
    if not cfg.pipeline:
        raise ConfigError(f"recipe {recipe or cfg.name} has no pipeline: section; add stages (see docs/recipes.md)")
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:  # each process would run every stage into the same directory
        raise ConfigError(
            "searchrl run drives its stages from one process: start it without accelerate launch / torchrun; train "
            "on several GPUs with `accelerate launch ... -m searchrl train` (README, Several GPUs)"
        )
    run_dir = Path(out)
    run_dir.mkdir(parents=True, exist_ok=True)
    names = [s.name for s in cfg.pipeline]
    forced = _to_run(names, only, start)
    record_run(cfg, run_dir)
    _log(
        run_dir,
        f"run {recipe or cfg.name} (profile {profile or 'none'}) into {run_dir}: stages {', '.join(names)}"
        + (f"; re-running {', '.join(n for n in names if n in forced)}" if forced else ""),
    )
    refs: dict[str, str] = {"run": str(run_dir)}
    base_values = cfg.model_dump()
    world = index = model = None
    results: list[StageResult] = []
    t_run = time.perf_counter()
    last = max((i for i, n in enumerate(names) if n in forced), default=-1)  # --only: nothing runs after it
    for raw_stage in cfg.pipeline:
        check_stage_args(raw_stage)
    for i, raw_stage in enumerate(cfg.pipeline):
        if only is not None and i > last:
            break
        stage = StageConfig.model_validate(_subst(raw_stage.model_dump(), refs, raw_stage.name, base_values))
        sdir, output = run_dir / stage.name, stage_output(stage, run_dir)
        done = sdir / "DONE"
        stage_index = stage.index or index
        base = load(stage.recipe) if stage.recipe else cfg
        scfg, key, stage_model, settings = resolve_stage(base, stage, world, stage_index, model, run_dir)
        if only is None and done.exists() and stage.name not in forced and (why := changed_since(done, settings)):
            _log(run_dir, f"stage {stage.name}: {why}; running it again")
            # its last checkpoint is no start for other changes (one in the stage's set: shows in its config too)
            if {k for k in changed_settings(done, settings) if not k.startswith("stage.set.")} - GOES_ON:
                for name in ("checkpoint", "checkpoint.old"):
                    shutil.rmtree(sdir / name, ignore_errors=True)
            done.unlink()
        skip = (only is not None and stage.name not in forced) or (done.exists() and stage.name not in forced)
        if skip:
            if only is not None and not done.exists():
                raise ConfigError(
                    f"--only {','.join(only)}: stage '{stage.name}' has not run yet (no {done}); "
                    f"run `searchrl run` without --only first"
                )
            info = json.loads(done.read_text(encoding="utf-8") or "{}")
            note = f"stage {stage.name}: skipped (DONE, {info.get('seconds', 0):.1f} s when it ran)"
            if only is not None and (why := changed_since(done, settings)):  # kept as asked, but not as if current
                note += f" although its {why}: --only runs {', '.join(n for n in names if n in forced)} alone"
            _log(run_dir, note)
            results.append(
                StageResult(stage.name, stage.kind, stage.op, "skipped", 0.0, str(output), info.get("result", {}))
            )
        else:
            # An RL or SFT stage that stopped part-way (no DONE, a checkpoint) goes on from its checkpoint unless it
            # was asked to run again (--only / --from); every other stage starts from an emptied directory.
            restore_interrupted(checkpoint := sdir / "checkpoint")
            resume = stage.kind in ("rl", "sft") and stage.name not in forced and (checkpoint / STATE_FILE).exists()
            if sdir.exists() and not resume:
                clear_stage(sdir)
            sdir.mkdir(parents=True, exist_ok=True)
            for later in names[i + 1 :] if only is None else ():  # made from this stage's old output: run again
                (run_dir / later / "DONE").unlink(missing_ok=True)
                for name in ("checkpoint", "checkpoint.old"):  # not gone on from, either
                    shutil.rmtree(run_dir / later / name, ignore_errors=True)
            ctx = StageContext(stage, scfg, sdir, run_dir, stage_model, world, stage_index, resume)
            _log(
                run_dir,
                f"stage {stage.name} ({key}): "
                + ("resuming from its checkpoint" if resume else "start")
                + (f", model {stage_model}" if key in _NEEDS_MODEL else ""),
            )
            t0, c0 = time.perf_counter(), time.process_time()
            try:
                result = HANDLERS[key](ctx)
            except BaseException as err:
                stopped = isinstance(err, StopRequested | KeyboardInterrupt)  # SIGTERM, Ctrl-C: not a failure
                ended = "stopped" if stopped else f"FAILED: {type(err).__name__}"
                said = str(err) or ("interrupted (Ctrl-C)" if isinstance(err, KeyboardInterrupt) else "")
                if stopped and "to go on" not in said:  # RL's and SFT's stops say it already
                    said += "; to go on: the same searchrl run"
                seconds = time.perf_counter() - t0
                _log(run_dir, f"stage {stage.name}: {ended} after {seconds:.1f} s: {said}")
                status = "stopped" if stopped else "failed"
                cut = StageResult(stage.name, stage.kind, stage.op, status, round(seconds, 2), str(output))
                _write_summary(run_dir, recipe, profile, [*results, cut], time.perf_counter() - t_run)
                raise
            seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
            marker = {
                "seconds": round(seconds, 2),
                "cpu_seconds": round(cpu, 2),
                "output": str(output),
                "result": result,
                "settings": settings,
            } | ({"resumed": True} if ctx.resume else {})  # times: this process's part only
            atomic_write_text(done, json.dumps(marker, default=str))
            _log(run_dir, f"stage {stage.name}: done in {seconds:.1f} s ({cpu:.0f} CPU-s) -> {output}")
            results.append(
                StageResult(
                    stage.name, stage.kind, stage.op, "ran", round(seconds, 2), str(output), result, round(cpu, 2)
                )
            )
        refs[stage.name] = str(output)
        if stage.op == "synth":
            world = str(output)
        elif stage.op == "index":
            index = str(output)
        elif stage.kind in _MODEL_STAGES:
            model = str(output)
    total = time.perf_counter() - t_run
    _write_summary(run_dir, recipe, profile, results, total)
    _log(run_dir, f"finished in {total:.1f} s ({sum(r.status == 'ran' for r in results)} stages ran)")
    return results


def _write_summary(
    run_dir: Path,
    recipe: str,
    profile: str | None,
    results: list[StageResult],
    total: float,
) -> None:
    """``failed`` / ``stopped``: the stage that raised / that Ctrl-C or SIGTERM stopped (the same run goes on), if any;
    it is the last of ``stages``, with that status."""
    stages = [r.__dict__ for r in results]
    ended = {s: next((r.name for r in results if r.status == s), None) for s in ("failed", "stopped")}
    data = {"recipe": recipe, "profile": profile, "total_seconds": round(total, 2), **ended, "stages": stages}
    atomic_write_text(run_dir / "summary.json", json.dumps(data, indent=2, default=str))
