"""Tools a policy (or a retriever) calls outside the model: ``mcp`` is a synchronous client of any MCP (Model Context
Protocol) server, whose tools it lists as function schemas and calls by name.

Submodules import their optional dependencies (the ``mcp`` package) only when used, so importing this package is
cheap.
"""
