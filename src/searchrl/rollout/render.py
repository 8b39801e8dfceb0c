"""A trajectory printed in the terminal: policy-sampled text in the default colour, inserted text dimmed."""

from __future__ import annotations

from rich.console import Console


def render_trajectory(traj, tokenizer, to: Console | None = None) -> None:
    """Policy-sampled text in the default colour, inserted documents / feedback dimmed in cyan; on stdout unless
    ``to`` names another console."""
    from rich.text import Text

    console = to or Console()
    out = Text()
    for text, sampled in traj.segments(tokenizer):
        out.append(text, style="" if sampled else "dim cyan")
    console.print(out)
    console.print(
        f"[bold]answer:[/bold] {traj.answer!r}  [bold]stop:[/bold] {traj.stop_reason}  "
        f"[bold]searches:[/bold] {traj.n_searches}  [bold]policy tokens:[/bold] {traj.n_policy_tokens}  "
        f"[bold]inserted tokens:[/bold] {len(traj.response_ids) - traj.n_policy_tokens}"
    )
