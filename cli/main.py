"""The ``fleetplan`` command line: the parser of every subcommand and the entry point that runs one.

Every user error ends with exit code 2 and one line on stderr naming the field and the
nearest valid choice; nothing is written to an output file unless the command succeeded, and
every output path is checked (:mod:`fleetplan.catalogs.files`) before any solving. Ctrl-C ends
with one line and exit code 130, SIGTERM with 143 (:mod:`fleetplan.commands.interrupts`).

Each command is a module of :mod:`fleetplan.commands` with its own ``register``; the rules they
apply live in ``catalogs/``, ``models/`` and ``optimizer/``, the tables in :mod:`fleetplan.rendering.tables`.

Owns the parser's assembly and the exit codes only: no business rule is decided here.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
from collections.abc import Callable
from types import FrameType
from typing import NoReturn

# The commands' modules load inside the functions below, not here: the console script installs
# its first signal handlers (``run``) before any of them loads.


def _version() -> str:
    """The installed package's version, from its metadata."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("fleetplan")
    except PackageNotFoundError:  # pragma: no cover - running from a source tree that is not installed
        return "unknown"


class _Version(argparse.Action):
    """``--version``: prints the installed version, read from the package metadata only when asked
    (reading it imports a metadata parser every other command would pay for)."""

    def __init__(self, option_strings: list[str], dest: str = argparse.SUPPRESS, help: str | None = None) -> None:
        super().__init__(option_strings, dest, default=argparse.SUPPRESS, nargs=0,
                         help=help or "show program's version number and exit")

    def __call__(self, parser: argparse.ArgumentParser, *_: object) -> None:
        sys.stdout.write(f"fleetplan {_version()}\n")
        parser.exit()


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of every subcommand."""
    from fleetplan.commands import breakeven, catalog, estimate, plan
    from fleetplan.commands.fidelity import register
    from fleetplan.commands.flags import Parser
    from fleetplan.commands.report import register as register_report
    from fleetplan.commands.sweep import register as register_sweep
    from fleetplan.commands.deploy import register as register_deploy
    from fleetplan.commands.simulate import register as register_simulate
    from fleetplan.commands.trace import register as register_trace
    from fleetplan.commands.commit import register as register_commit

    p = Parser(prog="fleetplan", description="Cheapest GPU fleet for LLM inference, as a mixed-integer program.")
    p.add_argument("--version", action=_Version)
    sub = p.add_subparsers(dest="command", required=True, parser_class=Parser)
    for add in (estimate.register, plan.register, breakeven.register, catalog.register, register, register_report, register_sweep,
                register_deploy, register_trace, register_simulate, register_commit):
        add(sub)
    return p


def _nothing() -> None:
    """What there is to restore before the command's handlers are installed."""


def main(argv: list[str] | None = None) -> int:
    """Entry point: run a subcommand, turning user errors into one line and exit code 2, an
    interrupt (Ctrl-C) into one line and exit code 130, SIGTERM into one line and 143."""
    from fleetplan.catalogs.files import one_line
    from fleetplan.commands.interrupts import exit_code, install_handlers, message
    from fleetplan.commands.io import run_command
    from fleetplan.rendering.escape import terminal

    restore: Callable[[], None] = _nothing
    try:  # a signal may land while the handlers are being installed: it ends the same way
        restore = install_handlers()
        return run_command(build_parser().parse_args(argv))
    except KeyboardInterrupt as exc:  # SIGTERM too (Terminated); cleanup ran in the finally blocks on the way
        detail = f": {terminal(one_line(str(exc)))}" if str(exc) else ""
        print(f"{message(exit_code(exc))}{detail}", file=sys.stderr)
        return exit_code(exc)
    finally:
        restore()


# NumPy's BLAS threads: the planner's arrays are small and its parallel work runs in worker
# processes, so a command starts one BLAS thread, not one per core (starting them costs a command
# 0.04 s of CPU on the 2-core machine of benchmarks/RESULTS.md); a value the user set is kept.
BLAS_THREADS = "OPENBLAS_NUM_THREADS"


def one_blas_thread() -> None:
    """Ask NumPy's BLAS for one thread unless the user set a number (before NumPy is imported)."""
    os.environ.setdefault(BLAS_THREADS, "1")


EARLY_LINES = {signal.SIGINT: b"fleetplan: interrupted\n", signal.SIGTERM: b"fleetplan: terminated\n"}


def _end_early(signum: int, frame: FrameType | None) -> None:
    """A signal while the command's modules load: nothing has been read, written or started yet,
    so nothing to clean up; the same line and exit code as a signal the command takes later."""
    os.write(2, EARLY_LINES[signal.Signals(signum)])
    os._exit(128 + signum)


def install_early_handlers() -> None:
    """Handle SIGINT and SIGTERM while the command's modules load (a few tenths of a second, in
    which Python's own handler would end a Ctrl-C with a traceback), until ``main`` installs the
    command's handlers (:mod:`fleetplan.commands.interrupts`)."""
    for signum in EARLY_LINES:
        signal.signal(signum, _end_early)


def run() -> NoReturn:
    """Console-script entry: run ``main`` and leave without interpreter teardown.

    Tearing down the imported solver and modelling libraries takes a fifth of a second and
    serves no purpose once every output is flushed and every file closed.
    """
    install_early_handlers()
    one_blas_thread()
    code = main()
    util = sys.modules.get("multiprocessing.util")
    if util is not None:
        # what interpreter teardown would run for multiprocessing: finalizers release the
        # semaphores of a pool stopped by an interrupt (no "leaked semaphore" warning)
        util._exit_function()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":  # pragma: no cover
    run()
