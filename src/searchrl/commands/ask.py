"""``searchrl ask``: one question through the agent loop of a recipe, printed with policy text and inserted text
told apart (or as a trajectory record with ``--json``)."""

from __future__ import annotations

import json

import typer

from searchrl.commands.common import PROFILE, RECIPE, SET, load, model_settings, with_protocol


def _not_blank(value: str) -> str:
    if not value.strip():
        raise typer.BadParameter('the question is empty; give one, e.g. searchrl ask "Who founded X?"')
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as err:  # a byte that is not UTF-8 arrives as a lone surrogate: no tokenizer takes it
        byte = value[err.start].encode("utf-8", "surrogateescape")
        raise typer.BadParameter(
            f"the question holds a byte that is not UTF-8 ({byte!r}); type it in a UTF-8 terminal (LANG=C.UTF-8)"
        ) from None
    return value


def ask(
    question: str = typer.Argument(..., help="the question to answer", callback=_not_blank),
    recipe: str = RECIPE,
    overrides: list[str] = SET,
    profile: str = PROFILE,
    protocol: str = typer.Option(
        None,
        help="search_r1, r1_searcher, r1_searcher_pp, r_search, rag_r1, search_o1, tool_call, reason (no search) or "
        "rag (documents in the prompt); default: the recipe's",
    ),
    index: str = typer.Option(None, help="a local index directory (default: the recipe's retriever)"),
    url: list[str] = typer.Option(None, help="retrieval server URL(s) (searchrl serve ...); repeatable"),
    model: str = typer.Option(
        None, help="policy: alias, local dir or HF id (default: the recipe's model); a trained one's dir: its settings"
    ),
    topk: int = typer.Option(None, help="documents per query (default: retrieval.topk)"),
    max_turns: int = typer.Option(None, help="generation turns (default: rollout.max_turns)"),
    max_new_tokens: int = typer.Option(None, help="new tokens per turn (default: rollout.max_new_tokens)"),
    temperature: float = typer.Option(0.0, min=0.0, help="0 = greedy"),
    seed: int = typer.Option(0, help="sampling seed"),
    as_json: bool = typer.Option(False, "--json", help="print the full trajectory record as JSON"),
    device: str = typer.Option(None, "--device", help="auto (CUDA if present), cpu, cuda, cuda:N"),
) -> None:
    """Answer one question with search, printing the trajectory (policy text vs inserted documents). The rollout
    limits, protocol, retriever and model are the recipe's (the defaults without one); a model directory that a
    SearchRL training saved brings its own protocol and rollout settings when no recipe is given (its
    searchrl.json); flags replace them.

    Example: searchrl ask "Who founded Skamtilpom Recordings?" --index runs/world/index-bm25
    """
    from searchrl.data.records import QAExample
    from searchrl.device import configure_from
    from searchrl.generation.hf import HFGenerator
    from searchrl.models import load_policy
    from searchrl.pipeline import index_kind, make_protocol, make_retriever_for, policy_spec, with_retriever
    from searchrl.rollout.engine import RolloutEngine, RolloutLimits
    from searchrl.rollout.render import render_trajectory

    flags = {
        "model.policy": model,
        "retrieval.topk": topk,
        "rollout.max_turns": max_turns,
        "rollout.max_new_tokens": max_new_tokens,
    }
    overrides = [*model_settings(recipe, model, protocol), *(overrides or [])]  # the model's own, then yours
    cfg = with_protocol(load(recipe, overrides, profile, device=device, **flags), protocol, None)
    cfg = with_retriever(cfg, index, url)
    if model is not None:  # an explicit --model wins over the recipe's checkpoint
        cfg = cfg.model_copy(update={"training": cfg.training.model_copy(update={"init_from": None})})
    from searchrl.models import check_fetchable

    check_fetchable(cfg, profile)  # an uncached hub model fails here in one line, not after the hub's retries
    if index is not None and not index_kind(index):  # a typo would otherwise build an index of the recipe's corpus
        from searchrl.retrieval.index import missing_index

        raise missing_index(index)
    configure_from(cfg)
    retriever = make_retriever_for(cfg)
    policy, tok = load_policy(policy_spec(cfg), frozen=True)
    limits = RolloutLimits.from_config(cfg.rollout, cfg.retrieval.topk)
    engine = RolloutEngine(HFGenerator(policy, tok), retriever, make_protocol(cfg), limits, cfg.model.prompt_style)
    (traj,) = engine.run([QAExample("ask", question, [])], temperature=temperature, seed=seed)
    if as_json:
        from searchrl.rollout.record import trajectory_record

        print(json.dumps(trajectory_record(traj, source="ask"), ensure_ascii=False))
    else:
        render_trajectory(traj, tok)
    if url and not traj.n_searches:  # the server was never asked: say so rather than imply it answered
        from searchrl.utils import console

        console.print(f"note: the model made no search, so {', '.join(url)} was not contacted")


def register(app: typer.Typer) -> None:
    app.command("ask")(ask)
