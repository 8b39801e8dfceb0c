"""Tools a policy (or a retriever) calls outside the model: ``mcp`` is a synchronous client of any MCP (Model Context
Protocol) server, whose tools it lists as function schemas and calls by name.

Submodules import their optional dependencies (the ``mcp`` package) only when used, so importing this package is
cheap.
"""

from __future__ import annotations

import shlex
import sys


def split_command(text: str) -> list[str]:
    """A command line as its arguments, split as a POSIX shell splits it; on Windows, where a backslash separates
    folders (``C:\\indexes\\bm25``), it escapes nothing, and quotes still group words."""
    lexer = shlex.shlex(text, posix=True)
    lexer.whitespace_split, lexer.commenters = True, ""
    if sys.platform == "win32":
        lexer.escape = ""
    return list(lexer)
