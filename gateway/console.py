"""The `gateway` command's entry point: the console script's and `python -m gateway`'s. It imports nothing itself
until it can take a Ctrl-C: `gateway.cli`'s imports load for a second or more on 2 cores, and a Ctrl-C then
printed a Python traceback of whichever module was loading."""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> int:
    """Run the command; a Ctrl-C before it took the signal itself ends it quietly, with its exit code for one."""
    try:
        from gateway.cli import main as run

        return run(argv)
    except KeyboardInterrupt:
        # 130, as a Ctrl-C later in any command; `serve` stopped by Ctrl-C exits 0 at any point (README).
        args = sys.argv[1:] if argv is None else argv
        return 0 if next((a for a in args if not a.startswith("-")), None) == "serve" else 130
