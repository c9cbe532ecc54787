"""Worker processes that are copies of the command: results in order, the parent's context seen
without being sent, an early stop, and no pools nested inside a worker."""

from __future__ import annotations

import os

from fleetplan.optimizer.runtime.workers import allowed, default_jobs, jobs, map_in_copies, shared


def _scaled(i: int) -> tuple[int, int, int]:
    """Worker: ``i`` times the parent's factor, this process's id and the workers it may use."""
    return i * shared()["factor"], os.getpid(), jobs()


def test_copies_return_in_order_read_the_parents_context_and_never_nest():
    with allowed(2):
        out = map_in_copies(_scaled, {"factor": 7}, [(i,) for i in range(6)], jobs())
    assert [v for v, _, _ in out] == [0, 7, 14, 21, 28, 35]
    assert all(pid != os.getpid() for _, pid, _ in out) and {n for _, _, n in out} == {1}
    assert shared() is None  # the context is the parent's only while the copies run


def _nested(i: int) -> tuple[int, int]:
    """Work that runs another map in turn, then reads its own context again."""
    inner = map_in_copies(_scaled, {"factor": 100}, [(i,)], 1)
    return inner[0][0], shared()["factor"]


def test_a_stop_returns_up_to_the_first_result_it_accepts():
    for workers in (2, 1):  # in copies, and in turn in this process
        out = map_in_copies(_scaled, {"factor": 1}, [(i,) for i in range(8)], workers, stop=lambda r: r[0] == 2)
        assert [v for v, _, _ in out] == [0, 1, 2]
    assert map_in_copies(_scaled, {"factor": 1}, [], 2) == []
    assert [pid for _, pid, _ in map_in_copies(_scaled, {"factor": 1}, [(1,), (2,)], 1)] == [os.getpid()] * 2


def test_a_map_in_turn_inside_work_leaves_that_works_context_as_it_was():
    assert map_in_copies(_nested, {"factor": 3}, [(1,), (2,)], 1) == [(100, 3), (200, 3)]
    assert shared() is None


def test_a_command_uses_the_cpus_here_by_default_within_bounds():
    assert 1 <= default_jobs() <= 4 and default_jobs() <= (os.cpu_count() or 1)
    assert jobs() == 1
    with allowed(3):
        assert jobs() == 3
    assert jobs() == 1


# ---------------------------------------------------------------- copies started before their work is known
PREPARED: list[int] = []


def _prepare() -> None:
    """What a copy does before its task is known: here, mark itself."""
    PREPARED.append(os.getpid())


def _prepared_and_scaled(i: int) -> tuple[int, int, bool]:
    """Worker: ``i`` times the context's factor, this process's id, and whether it ran :func:`_prepare`."""
    return i * shared()["factor"], os.getpid(), PREPARED == [os.getpid()]


def test_copies_started_early_take_a_context_made_after_them():
    from fleetplan.optimizer.runtime.workers import started_copies

    with started_copies(2, _prepare) as copies:
        assert copies is not None and copies.workers == 2
        context = {"factor": 5}  # made after the copies: it is sent, not inherited
        handed = copies.hand(_prepared_and_scaled, context, 3)
        out = copies.map(_prepared_and_scaled, context, [(i,) for i in range(6)])
        value, pid, prepared = handed.result()
    assert (value, prepared) == (15, True) and pid != os.getpid()  # the handed call ran in the copy that prepared
    assert [v for v, _, _ in out] == [0, 5, 10, 15, 20, 25] and os.getpid() not in {p for _, p, _ in out}
    assert PREPARED == [] and shared() is None  # the parent neither prepared nor kept a context


def test_copies_given_nothing_end_and_an_error_stops_them():
    from fleetplan.optimizer.runtime.workers import started_copies

    with started_copies(1, _prepare) as none:
        assert none is None  # one worker: nothing is started, the caller works in turn
    with started_copies(2, _prepare) as copies:
        pass  # the copy that prepared is released: leaving does not wait for a task that never comes
    assert copies is not None and copies.first.result() is None
    try:
        with started_copies(2, _prepare) as copies:
            processes = list(copies.pool._processes.values())
            raise ValueError("bad input")
    except ValueError:
        pass
    assert processes and not any(p.is_alive() for p in processes)


def test_copies_ended_early_leave_no_thread_behind_for_the_next_copies():
    import threading

    from fleetplan.optimizer.runtime.workers import started_copies

    before = set(threading.enumerate())  # a thread of an earlier test may still be ending: only new ones count
    with started_copies(2, _prepare) as copies:
        assert copies is not None
        handed = copies.hand(_prepared_and_scaled, {"factor": 2}, 4)
        copies.end()  # as the commitment plan does before whole-horizon MIPs make copies of their own
        assert set(threading.enumerate()) <= before and handed.result()[0] == 8
        out = map_in_copies(_scaled, {"factor": 3}, [(1,), (2,)], 2)
    assert [v for v, _, _ in out] == [3, 6]
