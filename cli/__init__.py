"""Command line: the headless twin of the GUI.

Each subcommand is one module in this package with `HELP`, `add_arguments(parser)` and
`run(args) -> int`; register it in COMMANDS. Command modules import heavy libraries (TVM, Qt)
inside `run`, so that `inspect` and `--help` start fast.

Exit status: 0 success, 2 bad input (one sentence on stderr naming the file, node or op; a full
disk, a missing permission or a read-only folder too: core.files), 1 internal error.
"""
from __future__ import annotations

import argparse
import importlib
import os
import sys
import traceback

__all__ = ["COMMANDS", "NEEDS_RUNTIME", "run_cli", "run_gui_entry", "SAMPLE_MODEL"]

# name -> module (in this package)
COMMANDS: dict[str, str] = {
    "inspect": "inspect_cmd",
    "screenshot": "screenshot_cmd",
    "rules": "rules_cmd",
    "rewrite": "rewrite_cmd",
    "lower": "lower_cmd",
    "compile": "compile_cmd",
    "bench": "bench_cmd",
    "run": "run_cmd",
    "edit": "edit_cmd",
    "diff": "diff_cmd",
    "schedule": "schedule_cmd",
    "debug": "debug_cmd",
}

# the subcommands that lower, compile or run compiled code: the process is readied for TVM
# (core.compiler.runtime.prepare) before they start; the others (inspect, rules, ...) build nothing
NEEDS_RUNTIME = frozenset({"lower", "compile", "bench", "run", "schedule", "debug"})

_HERE = os.path.dirname(os.path.abspath(__file__))
SAMPLE_MODEL = os.path.join(os.path.dirname(_HERE), "resources", "models", "small_cnn.onnx")


def _module(name: str):
    return importlib.import_module(f"cli.{COMMANDS[name]}")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="mlcwb",
        description="MLC Workbench: see and steer how a model is compiled. Without a subcommand, opens the GUI.",
    )
    parser.add_argument("--version", action="version", version="mlc-workbench 0.1.0")
    sub = parser.add_subparsers(dest="command", metavar="SUBCOMMAND")
    for name in COMMANDS:
        mod = _module(name)
        p = sub.add_parser(name, help=mod.HELP, description=mod.HELP)
        mod.add_arguments(p)
    return parser


def _fail(message: str, status: int) -> int:
    print(f"mlcwb: {message}", file=sys.stderr)
    return status


def _glue_feature_values(argv: list[str]) -> list[str]:
    """`--cpu-features -avx512f` as `--cpu-features=-avx512f`: argparse takes a value starting
    with '-' for an option and stops with "expected one argument", and LLVM's feature changes
    start with '-' or '+'."""
    out: list[str] = []
    it = iter(argv)
    for a in it:
        if a == "--cpu-features":
            value = next(it, None)
            out.append(a if value is None else f"{a}={value}")
        else:
            out.append(a)
    return out


def run_cli(argv: list[str]) -> int:
    from core.errors import WorkbenchError

    parser = build_parser()
    args = parser.parse_args(_glue_feature_values(argv))
    if not args.command:
        parser.print_help()
        return 0
    try:
        if args.command in NEEDS_RUNTIME:
            from core.compiler.runtime import prepare

            prepare()
        return int(_module(args.command).run(args) or 0)
    except WorkbenchError as e:
        return _fail(str(e), 2)
    except KeyboardInterrupt:
        return _fail("interrupted.", 130)
    except BrokenPipeError:
        return 0
    except Exception as e:  # noqa: BLE001 - the one place internal errors are reported
        from core.files import user_error

        mine = user_error(e)  # a full disk, a permission, a read-only folder: the user's, named by the OSError's path
        if mine is not None:
            return _fail(str(mine), 2)
        if os.environ.get("MLCWB_DEBUG"):
            traceback.print_exc()
        return _fail(f"internal error in '{args.command}': {type(e).__name__}: {e} (set MLCWB_DEBUG=1 for the traceback).", 1)


def run_gui_entry(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="mlcwb", description="Open the MLC Workbench GUI.")
    parser.add_argument("model", nargs="?", help="ONNX model to open (default: the bundled sample)")
    args = parser.parse_args(argv)
    model = args.model
    if model is None and os.path.exists(SAMPLE_MODEL):
        model = SAMPLE_MODEL
    from core.compiler.runtime import prepare

    prepare()  # the GUI lowers, compiles and runs in this process: before anything imports TVM
    from app import run_gui

    return run_gui(model)
