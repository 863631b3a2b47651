"""``python -m cfjax.cli``: the ``cfjax`` command."""

from cfjax.cli import main

if __name__ == "__main__":
    main()
