"""``python -m searchrl`` = the ``searchrl`` command."""

from searchrl.commands import main

if __name__ == "__main__":
    main()
