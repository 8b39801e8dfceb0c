"""``python -m searchrl.cli``: the ``searchrl`` command, kept at its old module path (see :mod:`searchrl.commands`)."""

from searchrl.commands import app, main

__all__ = ["app", "main"]

if __name__ == "__main__":
    main()
