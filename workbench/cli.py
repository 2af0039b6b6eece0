"""``workbench`` command line: parse, call the core, print. Each subcommand lives in ``workbench/commands/<name>.py``
with ``add_parser(subparsers)`` and ``run(args) -> int``.

Bad input (``ValueError`` from the core, unreadable files) prints one line ``workbench: error: ...`` and exits 2;
so does any other exception (``WORKBENCH_DEBUG=1`` shows its traceback). ``--json`` and ``export`` print only their
payload on stdout; whatever libraries print meanwhile goes to stderr.
"""
from __future__ import annotations

import argparse
import contextlib
import importlib
import json
import logging
import os
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


class OneLineParser(argparse.ArgumentParser):
    """An argument parser whose errors are one line (``workbench estimate: error: argument --zero: invalid choice:
    5 (choose from 0, 1, 2, 3)``, then where to find the usage) and exit status 2, instead of the whole usage text.
    Subcommand parsers inherit the class."""

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message} (see `{self.prog} --help`)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(prog="workbench",
                           description="Plan, configure and launch DeepSpeed / Megatron training.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for name in COMMANDS:
        module = importlib.import_module(f"workbench.commands.{name}")
        module.add_parser(sub)
    return parser


_payload = None
"""The real standard output while a machine-readable command runs (see :func:`payload_only`)."""


def payload_stream():
    """Where a command's payload goes: the real stdout (everything else printed meanwhile goes to stderr)."""
    return _payload if _payload is not None else sys.stdout


def print_json(obj) -> None:
    out = payload_stream()
    json.dump(obj, out, indent=2, sort_keys=False, default=str)
    out.write("\n")
    out.flush()


@contextlib.contextmanager
def payload_only():
    """Send everything except the payload to stderr: Python ``print``/logging through ``sys.stdout`` and, when
    stdout is the process's file descriptor 1, what libraries write to that descriptor directly. The payload is
    written with :func:`payload_stream` / :func:`print_json`."""
    global _payload
    old_stdout = sys.stdout
    try:
        fd_level = old_stdout.fileno() == 1
    except (AttributeError, OSError, ValueError):
        fd_level = False
    if fd_level:
        old_stdout.flush()
        saved = os.dup(1)
        payload = os.fdopen(os.dup(saved), "w", encoding=getattr(old_stdout, "encoding", None) or "utf-8")
        os.dup2(2, 1)
    else:
        payload = old_stdout
    _payload, sys.stdout = payload, sys.stderr
    try:
        yield payload
    finally:
        try:
            payload.flush()
        except (BrokenPipeError, ValueError, OSError):
            pass
        sys.stdout, _payload = old_stdout, None
        if fd_level:
            sys.stderr.flush()
            os.dup2(saved, 1)
            os.close(saved)
            try:
                payload.close()
            except OSError:
                pass


class _LogRecordsToStderr:
    """Standard output for a command that prints text: what it prints goes to stdout, while a ``logging`` handler
    bound to stdout (DeepSpeed's logger is: its accelerator notice) writes to stderr instead, so the output is the
    command's own. Everything else is the wrapped stream's."""

    _EMIT = logging.StreamHandler.emit.__code__

    def __init__(self, stream) -> None:
        self._stream = stream

    def write(self, text):
        if sys._getframe(1).f_code is self._EMIT:
            return sys.stderr.write(text)
        return self._stream.write(text)

    def __getattr__(self, name):
        return getattr(self._stream, name)


@contextlib.contextmanager
def logs_to_stderr():
    """Route logging handlers that write to ``sys.stdout`` to stderr while a text command runs."""
    old = sys.stdout
    sys.stdout = _LogRecordsToStderr(old)
    try:
        yield
    finally:
        if isinstance(sys.stdout, _LogRecordsToStderr):
            sys.stdout = old


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else exc.__class__.__name__


def main(argv=None) -> int:
    """Run one command. Bad input prints ``workbench: error: ...`` (one line) and exits 2; an unexpected exception
    does the same, naming its type. ``WORKBENCH_DEBUG=1`` re-raises instead, for the full traceback."""
    parser = build_parser()
    argv = sys.argv[1:] if argv is None else list(argv)
    args, extra = parser.parse_known_args(argv)
    if extra:  # named by the subcommand, so the hint points at its own --help
        sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        sub.choices[args.command].error(f"unrecognized arguments: {' '.join(extra)}")
    debug = os.environ.get("WORKBENCH_DEBUG", "").strip() not in ("", "0")
    # --json as parsed too: argparse also takes an abbreviation (--js), which must keep stdout the payload as well
    machine = args.command == "export" or "--json" in argv or getattr(args, "json", False) is True
    try:
        with (payload_only() if machine else logs_to_stderr()):
            return int(args.func(args) or 0)
    except BrokenPipeError:  # output piped into `head` and the like: not an error
        sys.stderr.close()
        return 0
    except KeyboardInterrupt:
        return 130
    except (ValueError, OSError, KeyError) as exc:
        if debug:
            raise
        print(f"workbench: error: {_first_line(exc)}", file=sys.stderr)
        return 2
    except RecursionError:
        if debug:
            raise
        print("workbench: error: the input is nested too deeply to read", file=sys.stderr)
        return 2
    except Exception as exc:  # a bug, not bad input: still one line; WORKBENCH_DEBUG=1 shows the traceback
        if debug:
            raise
        print(f"workbench: error: {exc.__class__.__name__}: {_first_line(exc)} (unexpected; run with "
              f"WORKBENCH_DEBUG=1 for the traceback)", file=sys.stderr)
        return 2


if __name__ == "__main__":
    # `python -m workbench.cli`: run the imported module's main, not this __main__ copy's, so that the commands'
    # `from workbench.cli import print_json` sees the payload stream that main set up (else --json and export would
    # write their payload to stderr)
    from workbench.cli import main as _main

    sys.exit(_main())
