"""``python -m searchrl`` = the ``searchrl`` command."""

from searchrl.cli import main

main()
