"""`python -m scalerl` is the `scalerl` command."""

from scalerl.cli import entry

if __name__ == "__main__":
    entry()
