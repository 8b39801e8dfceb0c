"""``searchrl ask``: one question through the agent loop, printed with policy text and inserted text told apart."""

from __future__ import annotations

import json

import typer
from rich.console import Console

#: the trajectory and answer are the command's result: stdout (logs and progress stay on stderr).
stdout = Console()


def render_trajectory(traj, tokenizer, to: Console | None = None) -> None:
    """Policy-sampled text in the default colour, inserted documents / feedback dimmed in cyan; on stdout."""
    from rich.text import Text

    console = to or stdout
    out = Text()
    for text, sampled in traj.segments(tokenizer):
        out.append(text, style="" if sampled else "dim cyan")
    console.print(out)
    console.print(
        f"[bold]answer:[/bold] {traj.answer!r}  [bold]stop:[/bold] {traj.stop_reason}  "
        f"[bold]searches:[/bold] {traj.n_searches}  [bold]policy tokens:[/bold] {traj.n_policy_tokens}  "
        f"[bold]inserted tokens:[/bold] {len(traj.response_ids) - traj.n_policy_tokens}"
    )


def ask(
    question: str = typer.Argument(..., help="the question to answer"),
    protocol: str = typer.Option(
        "search_r1", help="search_r1 | r1_searcher | r1_searcher_pp | r_search | rag_r1 | search_o1"
    ),
    index: str = typer.Option(None, help="a local index directory (searchrl index build ...)"),
    url: list[str] = typer.Option(None, help="retrieval server URL(s) (searchrl serve ...); repeatable"),
    model: str = typer.Option("smollm2-135m-instruct", help="policy: alias, local dir or HF id"),
    topk: int = typer.Option(3, help="documents per query"),
    max_turns: int = typer.Option(4, help="generation turns"),
    max_new_tokens: int = typer.Option(256, help="new tokens per turn"),
    temperature: float = typer.Option(0.0, help="0 = greedy"),
    seed: int = typer.Option(0, help="sampling seed"),
    as_json: bool = typer.Option(False, "--json", help="print the full trajectory record as JSON"),
    device: str = typer.Option("auto", "--device", help="auto (CUDA if present), cpu, cuda, cuda:N"),
) -> None:
    """Answer one question with search, printing the trajectory (policy text vs inserted documents).

    Example: searchrl ask "Who founded Skamtilpom Recordings?" --index runs/world/index-bm25
    """
    from searchrl.data.records import QAExample
    from searchrl.device import configure
    from searchrl.generation.hf import HFGenerator
    from searchrl.models import load_policy
    from searchrl.protocols import get_protocol
    from searchrl.rollout.engine import RolloutEngine, RolloutLimits

    configure(device)
    if bool(index) == bool(url):
        raise ValueError("give exactly one of --index DIR (local) or --url URL (a running `searchrl serve`)")
    if index:
        from searchrl.retrieval import load_index

        retriever = load_index(index)
    else:
        from searchrl.retrieval import RemoteRetriever

        retriever = RemoteRetriever(list(url))
    policy, tok = load_policy(model, frozen=True)
    limits = RolloutLimits(max_turns=max_turns, max_searches=max_turns, max_new_tokens=max_new_tokens, topk=topk,
                           max_total_tokens=4096, max_obs_tokens=512)  # fmt: skip
    engine = RolloutEngine(HFGenerator(policy, tok), retriever, get_protocol(protocol), limits)
    (traj,) = engine.run([QAExample("ask", question, [])], temperature=temperature, seed=seed)
    if as_json:
        from searchrl.rollout.record import trajectory_record

        print(json.dumps(trajectory_record(traj, source="ask"), ensure_ascii=False))
    else:
        render_trajectory(traj, tok)


def register(app: typer.Typer) -> None:
    app.command("ask")(ask)
