"""``python -m searchrl`` = the ``searchrl`` command."""

from searchrl.commands import main

main()
