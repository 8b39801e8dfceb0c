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
    fields = [
        ("answer", repr(traj.answer)),  # the model's text as written: no markup, no emoji codes
        ("stop", str(traj.stop_reason)),
        ("searches", str(traj.n_searches)),
        ("policy tokens", str(traj.n_policy_tokens)),
        ("inserted tokens", str(len(traj.response_ids) - traj.n_policy_tokens)),
    ]
    console.print(Text("  ").join(Text.assemble((f"{name}:", "bold"), f" {value}") for name, value in fields))
