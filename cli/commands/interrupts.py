"""Ctrl-C and SIGTERM: one way to stop, whatever the command is doing.

SIGTERM is turned into :class:`Terminated`, a :class:`KeyboardInterrupt`, so an interrupt and a
termination unwind through the same ``finally`` blocks (temporary files removed, worker
processes stopped) and end in ``main`` with one line on stderr and exit code 130 (SIGINT) or
143 (SIGTERM), the shell's 128 + signal number. Worker processes leave both signals to the
parent (:mod:`fleetplan.optimizer.runtime.workers`).

Python runs a signal handler only between bytecodes of the main thread, and a solver call can
keep the main thread in C for tens of seconds. So a watchdog thread is woken by every signal
(``signal.set_wakeup_fd``); when the main thread has not taken the signal within
:data:`GRACE_S`, the watchdog runs the registered last-resort steps (:func:`on_hard_exit`, e.g.
a batch's summary), stops the worker processes, prints the same one line and ends the process
with the same exit code. While the main thread is inside a solver nothing is being written, so
no file is left half-written. This module holds no cleanup of its own.

A copy of this process (a worker made by ``fork``) inherits the handlers and the watchdog's pipe
but not the watchdog: a signal it takes must end the copy, never wake the parent's watchdog. So
SIGINT and SIGTERM are held while the copy is made, and the copy closes the pipe and takes the
workers' defaults (SIGINT ignored, SIGTERM ends it) before it takes either signal.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType

from fleetplan.optimizer.runtime.signals import PENDING_INTERRUPTS

EXIT_INTERRUPTED = 128 + signal.SIGINT
EXIT_TERMINATED = 128 + signal.SIGTERM
GRACE_S = 2.0
"""Seconds the main thread has to take a signal before the watchdog ends the process."""

_SIGNALS = frozenset({signal.SIGINT, signal.SIGTERM})
_taken = threading.Event()
_last_resort: list[Callable[[], None]] = []
_installed: dict[str, int] = {}  # while the handlers are installed: the process, the watchdog pipe's ends
_mask_at_fork: list[set[signal.Signals]] = []  # the parent's signal mask while a copy is being made


class Terminated(KeyboardInterrupt):
    """The process received SIGTERM."""


def _raise_interrupt(signum: int, frame: FrameType | None) -> None:
    """SIGINT handler: note that the main thread took it, then interrupt as Python does."""
    _taken.set()
    exc = KeyboardInterrupt()
    PENDING_INTERRUPTS.append(exc)  # raised again by a solver whose callback lost it
    raise exc


def _raise_terminated(signum: int, frame: FrameType | None) -> None:
    """SIGTERM handler: note that the main thread took it, then raise :class:`Terminated`."""
    _taken.set()
    # ignore a second SIGTERM while the first one is being cleaned up
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    exc = Terminated()
    PENDING_INTERRUPTS.append(exc)
    raise exc


def message(code: int) -> str:
    """The one line printed for an interrupt (130) or a termination (143)."""
    return "fleetplan: terminated" if code == EXIT_TERMINATED else "fleetplan: interrupted"


def _hard_exit(signum: int) -> None:
    """End the process from the watchdog: last-resort steps, workers stopped, one line."""
    code = 128 + signum
    for step in reversed(_last_resort):
        try:
            step()
        except BaseException:  # noqa: BLE001, S110 - the process ends either way
            pass
    mp = sys.modules.get("multiprocessing")
    if mp is not None:  # worker processes exist only if multiprocessing was imported
        for child in mp.active_children():
            child.terminate()
        for child in mp.active_children():
            child.join(1.0)
        util = sys.modules.get("multiprocessing.util")
        if util is not None:
            util._run_finalizers(0)  # release this process's semaphores, as a normal exit would
    clear = "\r\x1b[2K" if os.isatty(2) else ""  # a progress line may be drawn there
    os.write(2, (clear + message(code) + "\n").encode())
    os._exit(code)


def _watch(read_fd: int) -> None:
    """Watchdog thread: read signal bytes until the pipe closes; when the main thread does not
    take a signal within :data:`GRACE_S`, end the process. The pipe is drained to the end (and
    then closed) so the wakeup writes never fail."""
    try:
        while data := os.read(read_fd, 64):
            signum = next((b for b in data if b in (signal.SIGINT, signal.SIGTERM)), None)
            if signum is not None and not _taken.wait(GRACE_S):
                _hard_exit(signum)
    except OSError:
        pass
    finally:
        os.close(read_fd)


def _hold_signals_for_fork() -> None:
    """Before a copy of this process is made: hold SIGINT and SIGTERM in the thread making it, so
    the copy cannot take one before it has let go of the parent's pipe (the copy inherits the mask)."""
    if _installed.get("pid") == os.getpid():
        _mask_at_fork.append(signal.pthread_sigmask(signal.SIG_BLOCK, _SIGNALS))


def _release_signals_after_fork() -> None:
    """In the parent, once the copy is made: the signals it held are taken again (any that came meanwhile)."""
    if _mask_at_fork:
        signal.pthread_sigmask(signal.SIG_SETMASK, _mask_at_fork.pop())


def _let_go_in_copy() -> None:
    """In a copy: close the parent's watchdog pipe, stop writing signals to it, take the workers'
    defaults (SIGINT ignored, SIGTERM ends the copy), then take the signals held at the copy."""
    if not _installed:
        return
    signal.set_wakeup_fd(-1)
    for fd in (_installed["read_fd"], _installed["write_fd"]):
        try:
            os.close(fd)
        except OSError:
            pass
    _installed.clear()
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    _release_signals_after_fork()


os.register_at_fork(before=_hold_signals_for_fork, after_in_parent=_release_signals_after_fork,
                    after_in_child=_let_go_in_copy)


def install_handlers() -> Callable[[], None]:
    """Make SIGINT raise :class:`KeyboardInterrupt` and SIGTERM :class:`Terminated`, and start
    the watchdog; returns a function that stops it and puts the previous handlers back.
    Outside the main thread (where handlers cannot be set) nothing changes."""
    if threading.current_thread() is not threading.main_thread():
        return lambda: None
    _taken.clear()
    PENDING_INTERRUPTS.clear()
    previous = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    read_fd, write_fd = os.pipe()
    os.set_blocking(write_fd, False)
    old_fd = signal.set_wakeup_fd(write_fd, warn_on_full_buffer=False)
    signal.signal(signal.SIGTERM, _raise_terminated)
    signal.signal(signal.SIGINT, _raise_interrupt)
    _installed.update(pid=os.getpid(), read_fd=read_fd, write_fd=write_fd)
    threading.Thread(target=_watch, args=(read_fd,), name="fleetplan-signal-watchdog", daemon=True).start()

    def restore() -> None:
        if _installed.get("pid") != os.getpid():  # a copy let go of the pipe when it was made
            return
        _installed.clear()
        PENDING_INTERRUPTS.clear()
        for sig, handler in previous.items():
            signal.signal(sig, handler if handler is not None else signal.SIG_DFL)
        signal.set_wakeup_fd(old_fd)
        os.close(write_fd)  # the watchdog reads end-of-file and returns; it closes nothing itself

    return restore


@contextmanager
def on_hard_exit(step: Callable[[], None]) -> Iterator[None]:
    """Run ``step`` if the watchdog has to end the process while this block runs."""
    _last_resort.append(step)
    try:
        yield
    finally:
        _last_resort.remove(step)


def exit_code(exc: KeyboardInterrupt) -> int:
    """130 for an interrupt (Ctrl-C), 143 for SIGTERM."""
    return EXIT_TERMINATED if isinstance(exc, Terminated) else EXIT_INTERRUPTED
