"""``python -m fedselect.cli``: the command line, the same as the ``fedselect`` script."""

from fedselect.cli import main

if __name__ == "__main__":
    main()
