"""An existing Dask cluster (``--scheduler ADDRESS``) for sweeps and batches: connect with a
one-line error when nothing answers, and run tasks there with results in submission order.

Owns the connection only; what runs there is the caller's (every task is a module-level
function of the installed package, so workers import it by name)."""

from __future__ import annotations

import socket
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any
from urllib.parse import urlsplit

from fleetplan.catalogs.loader import InputError

CONNECT_TIMEOUT_S = 10
SCHEDULER_HELP = ("address of a running Dask scheduler (tcp://HOST:8786) to run on instead of local worker "
                  "processes; the results are the same")


def check_reachable(address: str) -> None:
    """Refuse at once an address nothing listens on (instead of waiting for a timeout); a
    scheduler in this very process (``inproc://``, a LocalCluster without processes) is not probed."""
    if address.startswith("inproc://"):
        return
    try:
        where = urlsplit(address if "://" in address else f"tcp://{address}")
        host, port = where.hostname, where.port
    except ValueError:
        host, port = None, None
    if not host or not port:
        raise InputError(f"--scheduler {address}: give the scheduler's address as tcp://HOST:PORT (e.g. tcp://10.0.0.5:8786)")
    try:
        socket.create_connection((host, port), timeout=CONNECT_TIMEOUT_S).close()
    except OSError as exc:
        raise InputError(f"--scheduler {address}: no Dask scheduler answers ({exc.strerror or type(exc).__name__}); "
                         f"start one with `dask scheduler` and give its address, or leave --scheduler out to run "
                         f"local workers") from None


@contextmanager
def connected(address: str) -> Iterator[Any]:
    """A ``distributed.Client`` of the scheduler at ``address``, closed on the way out (its
    unfinished tasks cancelled when the block ends by an exception, an interrupt included)."""
    check_reachable(address)
    from distributed import Client

    try:
        client = Client(address, timeout=CONNECT_TIMEOUT_S, set_as_default=False)
    except (OSError, TimeoutError, ValueError) as exc:
        raise InputError(f"--scheduler {address}: no Dask scheduler answers ({type(exc).__name__}); start one with "
                         f"`dask scheduler` and give its address, or leave --scheduler out") from None
    try:
        yield client
    finally:
        client.close()


def map_in_order(client: Any, fn: Callable[..., Any], tasks: list[Any]) -> list[Any]:
    """``fn(task)`` for every task on the cluster; results in the order of ``tasks``."""
    return list(client.gather(client.map(fn, tasks, pure=False)))


def each_in_order(client: Any, fn: Callable[..., Any], args: list[tuple[Any, ...]]) -> Iterator[tuple[int, Any]]:
    """(index, ``fn(*args[index])``) for every entry, all submitted at once and read back in the
    order given (a later task may finish first; its result waits for those before it)."""
    futures = [client.submit(fn, *a, pure=False) for a in args]
    for i, fut in enumerate(futures):
        yield i, fut.result()
