"""An existing Dask cluster (``--scheduler ADDRESS``) for sweeps and batches: connect with a
one-line error when nothing answers, and run tasks there with results in submission order.

Owns the connection only; what runs there is the caller's (every task is a module-level
function of the installed package, so workers import it by name)."""

from __future__ import annotations

import socket
import struct
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any
from urllib.parse import urlsplit

from fleetplan.catalogs.loader import InputError

CONNECT_TIMEOUT_S = 10
# A Dask scheduler sends its handshake as soon as a connection opens (distributed's comm
# protocol: each side writes its handshake, then reads the other's); a peer silent this long is
# not one, and waiting for it would hang the command.
HANDSHAKE_TIMEOUT_S = 10.0
# A scheduler's handshake is a frame of under a hundred bytes; a first length above this is no
# Dask peer (an HTTP reply's "HTTP/1.1" read as a length asks for 3.5 exabytes).
MAX_HANDSHAKE_BYTES = 1 << 20
# A handshake is sent as one or a few frames.
MAX_HANDSHAKE_FRAMES = 64
# Bytes read to recognise a handshake: its total length and its frame count, each 8 bytes.
_PRELUDE_BYTES = 16
SCHEDULER_HELP = ("address of a running Dask scheduler (tcp://HOST:8786) to run on instead of local worker "
                  "processes; the results are the same")


def check_reachable(address: str) -> None:
    """Refuse at once an address nothing listens on (instead of waiting for a timeout), and a TCP
    peer that does not open with a Dask handshake within :data:`HANDSHAKE_TIMEOUT_S` (distributed's
    own client would wait for it forever, or read an HTTP reply as an exabyte-long message); a
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
        conn = socket.create_connection((host, port), timeout=CONNECT_TIMEOUT_S)
    except OSError as exc:
        raise InputError(f"--scheduler {address}: no Dask scheduler answers ({exc.strerror or type(exc).__name__}); "
                         f"start one with `dask scheduler` and give its address, or leave --scheduler out to run "
                         f"local workers") from None
    with conn:
        if where.scheme in ("", "tcp"):  # TLS and other transports wait for the client to speak first
            _check_handshake(conn, address)


def _read_prelude(conn: socket.socket) -> tuple[bytes, bool]:
    """Up to :data:`_PRELUDE_BYTES` bytes the peer sends first, within :data:`HANDSHAKE_TIMEOUT_S`
    in all, and whether it fell silent before sending them."""
    data = b""
    end = time.monotonic() + HANDSHAKE_TIMEOUT_S
    while len(data) < _PRELUDE_BYTES:
        left = end - time.monotonic()
        if left <= 0:
            return data, True
        conn.settimeout(left)
        try:
            chunk = conn.recv(_PRELUDE_BYTES - len(data))
        except TimeoutError:
            return data, True
        except OSError:
            return data, False
        if not chunk:
            return data, False
        data += chunk
    return data, False


def _check_handshake(conn: socket.socket, address: str) -> None:
    """Refuse a peer that does not open with a Dask handshake: one that stays silent (an HTTP
    server waiting for a request, a port that accepts and never speaks), closes, or sends bytes
    that are not a handshake's frame lengths. Nothing is sent to the peer."""
    data, silent = _read_prelude(conn)
    leave = "give a Dask scheduler's address (tcp://HOST:8786), or leave --scheduler out to run local workers"
    if silent and not data:
        raise InputError(f"--scheduler {address}: did not answer as a Dask scheduler within {HANDSHAKE_TIMEOUT_S:g} s; "
                         f"{leave}")
    if len(data) < _PRELUDE_BYTES:
        raise InputError(f"--scheduler {address}: {'fell silent' if silent else 'closed the connection'} without "
                         f"answering as a Dask scheduler; {leave}")
    total, frames = struct.unpack("<QQ", data)
    if not (0 < total <= MAX_HANDSHAKE_BYTES and 0 < frames <= MAX_HANDSHAKE_FRAMES):
        raise InputError(f"--scheduler {address}: answered, but not as a Dask scheduler (it began {data[:8]!r}); {leave}")


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
