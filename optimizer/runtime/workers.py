"""Worker processes for planning in parallel, stopped cleanly when the parent is interrupted.

Workers are started afresh (``spawn``), so no state of the parent leaks into a plan, unless the
caller asks for copies of itself (``fork``, on Linux only): a worker that only solves what the
parent holds skips the interpreter start and the imports (about a second here) of a fresh one.
A copy is made between solver calls, never during one: HiGHS runs on one thread
(``threads=1``) and leaves none behind, and the project starts no threads of its own, so no
lock can be held in the copy. Workers ignore SIGINT (a terminal sends Ctrl-C to the whole
process group; the parent decides what happens) and end quietly on SIGTERM, releasing their
semaphores first. When the parent leaves the pool by an exception (an interrupt included),
queued work is cancelled and running workers are terminated and joined before the exception
goes on, so nothing is left running and no semaphore leaks. How many workers a stage may use
is the command's (:func:`allowed`, :func:`jobs`); inside a worker it is one, so pools never nest.
This module does no planning itself.
"""

from __future__ import annotations

import contextvars
import os
import signal
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from fleetplan.optimizer.common.defaults import JOIN_TIMEOUT_S, MAX_DEFAULT_JOBS

if TYPE_CHECKING:  # the process machinery is imported when a pool is made (not at every command's start)
    from concurrent.futures import ProcessPoolExecutor


def _end_worker(read_fd: int) -> None:
    """Worker thread: on SIGTERM, release this process's semaphores (the modelling library
    creates one in every process) and end at once, even while the main thread is in a solver."""
    while True:
        try:
            data = os.read(read_fd, 1)
        except OSError:
            return
        if not data:
            return
        if data[0] == signal.SIGTERM:
            import multiprocessing.util

            multiprocessing.util._run_finalizers(0)  # what a normal exit runs; no semaphore left behind
            os._exit(128 + signal.SIGTERM)


def _leave_signals_to_parent() -> None:
    """Initializer of every worker: SIGINT ignored; SIGTERM ends the worker at once, its
    semaphores released (a thread woken through ``signal.set_wakeup_fd`` does it)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _JOBS.set(1)
    read_fd, write_fd = os.pipe()
    os.set_blocking(write_fd, False)
    signal.set_wakeup_fd(write_fd, warn_on_full_buffer=False)
    signal.signal(signal.SIGTERM, lambda signum, frame: None)  # a Python handler, so the wakeup byte is written
    import threading

    threading.Thread(target=_end_worker, args=(read_fd,), daemon=True).start()


def stop(pool: ProcessPoolExecutor) -> None:
    """Cancel what has not started, terminate the running workers and wait for them, and for the
    pool's own manager thread, which reaps them too: until it has, a worker it reaped first still
    reads as alive."""
    processes = list((getattr(pool, "_processes", None) or {}).values())
    manager = getattr(pool, "_executor_manager_thread", None)  # the first shutdown forgets it
    pool.shutdown(wait=False, cancel_futures=True)
    for p in processes:
        if p.is_alive():
            p.terminate()
    for p in processes:
        p.join(JOIN_TIMEOUT_S)
        if p.is_alive():
            p.kill()
            p.join(JOIN_TIMEOUT_S)
    pool.shutdown(wait=True)
    if manager is not None:
        manager.join(JOIN_TIMEOUT_S)


_JOBS: contextvars.ContextVar[int] = contextvars.ContextVar("fleetplan_jobs", default=1)


@contextmanager
def allowed(jobs: int) -> Iterator[None]:
    """Within the block, stages that can use worker processes use up to ``jobs`` (see :func:`jobs`)."""
    token = _JOBS.set(max(1, jobs))
    try:
        yield
    finally:
        _JOBS.reset(token)


def jobs() -> int:
    """How many worker processes a stage may use at once here (1 in a worker: workers never nest)."""
    return _JOBS.get()


def default_jobs() -> int:
    """Worker processes a command uses unless told: the CPUs this process may run on, at most
    :data:`MAX_DEFAULT_JOBS`."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        cpus = os.cpu_count() or 1
    return max(1, min(cpus, MAX_DEFAULT_JOBS))


def fork_available() -> bool:
    """Whether workers may be copies of this process here (Linux)."""
    return sys.platform.startswith("linux")


def _start_method(copy: bool) -> str:
    """``fork`` when a copy of this process is asked for and safe here (Linux), else ``spawn``."""
    return "fork" if copy and fork_available() else "spawn"


@contextmanager
def worker_pool(workers: int, finish: bool = True, copy: bool = False) -> Iterator[ProcessPoolExecutor]:
    """A process pool of ``workers`` spawned workers (copies of this process with ``copy``; see
    the module docstring: no solver call may be running, nor a thread that could hold a lock the
    copy needs); on an exception in the block it is stopped at once, otherwise it is shut down after its work
    finishes, or stopped as on an exception when ``finish`` is False (work still queued is not
    wanted)."""
    if copy:
        sys.stdout.flush()  # a copy would write out whatever is still buffered a second time
        sys.stderr.flush()
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    pool = ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context(_start_method(copy)),
                               initializer=_leave_signals_to_parent)
    try:
        yield pool
    except BaseException:
        stop(pool)
        raise
    if finish:
        pool.shutdown(wait=True)
    else:
        stop(pool)


_CONTEXT: Any = None  # what the work of :func:`map_in_copies` reads of its parent (set while it runs)


def shared() -> Any:
    """In a copy made by :func:`map_in_copies`: the context its parent gave it."""
    return _CONTEXT


def map_in_copies(fn: Callable[..., Any], context: Any, calls: Sequence[tuple[Any, ...]], workers: int,
                  progress: Callable[[int, int], None] | None = None,
                  stop: Callable[[Any], bool] | None = None) -> list[Any]:
    """``fn(*call)`` for each of ``calls``, in order, ``fn`` reading ``context`` through
    :func:`shared`: in ``workers`` copies of this process (:func:`worker_pool` with ``copy``; the
    copies have the context, nothing large is sent) when there are two calls or more, two workers
    or more and copies can be made here, else in turn in this process. ``progress(done, total)``
    is called as results come in; with ``stop``, the first result it accepts is the last returned
    and the work still queued or running is stopped (or not started)."""
    global _CONTEXT
    outer, _CONTEXT = _CONTEXT, context  # a call made in turn inside another's work restores its context
    try:
        if workers < 2 or len(calls) < 2 or not fork_available():
            out = []
            for call in calls:
                out.append(fn(*call))
                if progress is not None:
                    progress(len(out), len(calls))
                if stop is not None and stop(out[-1]):
                    break
            return out
        with worker_pool(min(workers, len(calls)), finish=stop is None, copy=True) as pool:
            futures = [pool.submit(fn, *call) for call in calls]
            out = []
            for f in futures:
                out.append(f.result())
                if progress is not None:
                    progress(sum(g.done() for g in futures), len(futures))
                if stop is not None and stop(out[-1]):
                    break
            return out
    finally:
        _CONTEXT = outer
