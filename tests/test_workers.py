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
