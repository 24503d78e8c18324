"""`python -m scalerl` is the `scalerl` command."""

from scalerl.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
