"""``workbench`` command line: parse, call the core, print. Each subcommand lives in ``workbench/commands/<name>.py``
with ``add_parser(subparsers)`` and ``run(args) -> int``.

Bad input (``ValueError`` from the core, unreadable files) prints one line ``workbench: error: ...`` and exits 2.
"""
from __future__ import annotations

import argparse
import importlib
import json
import sys

# Subcommand modules, in the order ``workbench --help`` lists them.
COMMANDS = [
    "estimate",
    "export",
    "import_",
    "nb",
    "jobs",
    "run",
    "runs",
    "plan",
    "advise",
    "calibrate",
]


class UsageError(ValueError):
    """Raised by commands for bad input that argparse could not catch."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="workbench",
                                     description="Plan, configure and launch DeepSpeed / Megatron training.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for name in COMMANDS:
        module = importlib.import_module(f"workbench.commands.{name}")
        module.add_parser(sub)
    return parser


def print_json(obj) -> None:
    json.dump(obj, sys.stdout, indent=2, sort_keys=False, default=str)
    sys.stdout.write("\n")


def main(argv=None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except BrokenPipeError:  # output piped into `head` and the like: not an error
        sys.stderr.close()
        return 0
    except (ValueError, OSError, KeyError) as exc:
        msg = str(exc).strip().splitlines()[0] if str(exc).strip() else exc.__class__.__name__
        print(f"workbench: error: {msg}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
