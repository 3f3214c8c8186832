"""MLC Workbench entry point: the GUI by default, CLI subcommands for headless use.

    python main.py [MODEL]            open the GUI (the bundled sample model when none is given)
    python main.py SUBCOMMAND ...     headless twin of the GUI (python main.py --help lists them)
"""
from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    from cli import COMMANDS, run_cli

    if argv and (argv[0] in COMMANDS or argv[0] in ("-h", "--help", "--version")):
        return run_cli(argv)
    from cli import run_gui_entry

    return run_gui_entry(argv)


if __name__ == "__main__":
    sys.exit(main())
