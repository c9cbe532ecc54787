"""Hierarchical offsets shrunk by cross-validation: the estimator behind calibration profiles.

Pure arithmetic on arrays, no catalog and no I/O. Each configuration group ``g`` (a batch sweep
of one model, GPU, engine, TP and precision) carries one value ``r_g``, the median over its rows
of log(measured / predicted). The offset of a group is the sum of one offset per level of
:data:`LEVELS`, most general first:

    all, model kind, engine, GPU family, engine x family, setup (GPU, engine, kind),
    model (model, GPU, engine)

fitted in that order on what the levels before left over (each level shrunk toward its parent,
the sum of the levels above it): a cell of a level measured in ``n`` groups gets

    offset = sum of the groups' residuals / (n + k)

so its weight is ``n / (n + k)`` (a random-effects estimate with ``k`` the ratio of the noise
to the spread of the level's true offsets); a cell measured in one group only keeps its parent's
value (:data:`MIN_CELL_GROUPS`). A pooled level (all but ``model``) speaks for configurations
its cell has not measured, so its offset only applies where it is systematic: at least
:data:`SYSTEMATIC_ERRORS` standard errors from no change, counted over the model x GPU x engine
units the cell holds (a unit's TP degrees share its error, so they are one piece of evidence);
a cell whose units disagree more than that gets 0.
``k`` is chosen per level by cross-validation over
whole groups (:func:`select`): each candidate of :data:`SHRINK_GRID` and "off" are tried, level
after level, and a level is kept only at a ``k`` whose held-out error is lower than without it, both when
whole clusters are held out and when single groups are (never worse on a configuration the
user has not measured; the ``model`` level, whose cells are one model on one GPU with one
engine, is judged by single groups alone).
:func:`nested_predictions` repeats that whole choice inside each fold of an outer
cross-validation, so the error it reports is that of the procedure on groups it never saw.

The loss of a held-out group under multiplier ``m`` is computed on its rows: for time per output
token the sum of ``|m x predicted / measured - 1|`` (the MAPE a user reads), for time to first
token the sum of ``|log m + log(predicted / measured)|`` (TTFT errors span a factor of ten; the
log keeps one queued row from deciding).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

LEVELS: tuple[str, ...] = ("all", "kind", "engine", "family", "engine_family", "setup", "model")
# The levels judged by holding out single groups only: a cell of one model on one GPU with one
# engine has nothing to say about a cluster (that same model x GPU x engine) held out whole
SINGLE_GROUP_LEVELS: frozenset[str] = frozenset({"model"})
# A pooled level's cell applies only when its mean residual is this many standard errors from 0
SYSTEMATIC_ERRORS = 2.0
# Standard errors of its summed held-out gain (over the folds) by which a level must beat its
# absence: one, so that a level whose gain is a few groups' luck is left out; on top of it a pooled
# cell applies only where it is systematic (SYSTEMATIC_ERRORS) and a level must be never worse
# with single groups held out (benchmarks/RESULTS.md, calibration on configurations the physics
# never saw)
LEVEL_ERRORS = 1.0
# Groups' worth of "no change" each level may be shrunk by; cross-validation picks one or none.
# A doubling grid from a quarter of a group (nearly the raw mean) to 32 groups (nearly nothing).
SHRINK_GRID: tuple[float, ...] = (0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 32.0)
# The most folds of whole groups a cross-validation uses (leave one group out below that).
MAX_FOLDS = 40
# Without a single fold to judge by (one group), a forced fit shrinks every level by one group.
UNJUDGED_SHRINK = 1.0
# A cell's offset needs two groups: from one, nothing tells the cell's offset (which other
# configurations of the cell share) from that one configuration's own error.
MIN_CELL_GROUPS = 2
# A model x GPU x engine measured at one TP degree (or precision) already tells its other ones,
# shrunk by the level's k; whether it does is left to single groups held out
MODEL_MIN_GROUPS = 1
Shrink = tuple[float | None, ...]  # per level of LEVELS: k, or None when the level is off
# (log multipliers of every group, one row per fold; the groups each fold holds out) -> each
# fold's summed loss over its held-out groups' rows
Loss = Callable[[np.ndarray, np.ndarray], np.ndarray]


@dataclass(frozen=True)
class Cells:
    """Which cell of each level every group belongs to: ``index[level][g]`` indexes
    ``keys[level]``, the cells' keys in sorted order; ``onehot[level]`` is the groups x cells
    membership matrix."""

    index: dict[str, np.ndarray]
    keys: dict[str, list[tuple[str, ...]]]
    onehot: dict[str, np.ndarray]

    @property
    def groups(self) -> int:
        """The number of groups."""
        return len(self.index[LEVELS[0]])


def cells_of(keys_per_group: Sequence[dict[str, tuple[str, ...]]]) -> Cells:
    """The cells of every level from each group's key per level."""
    index: dict[str, np.ndarray] = {}
    keys: dict[str, list[tuple[str, ...]]] = {}
    onehot: dict[str, np.ndarray] = {}
    for level in LEVELS:
        distinct = sorted({k[level] for k in keys_per_group})
        where = {k: i for i, k in enumerate(distinct)}
        keys[level] = distinct
        index[level] = np.array([where[k[level]] for k in keys_per_group], dtype=np.int64)
        onehot[level] = np.zeros((len(keys_per_group), len(distinct)))
        onehot[level][np.arange(len(keys_per_group)), index[level]] = 1.0
    return Cells(index=index, keys=keys, onehot=onehot)


def fit_many(values: np.ndarray, train: np.ndarray, cells: Cells, shrink: Shrink) -> list[np.ndarray]:
    """Per level, the offset of each cell (one row per row of the boolean mask ``train``, folds x
    groups), fitted on that row's training groups (a group whose value is NaN carries no
    information): level after level, the sum of the residuals the levels before left over the
    cell's groups divided by their number plus the level's ``k``. A cell fewer than
    :data:`MIN_CELL_GROUPS` training groups belong to gets 0 (its parent's value), and so does a
    pooled level's cell whose mean residual is within :data:`SYSTEMATIC_ERRORS` standard errors
    of 0 (not systematic)."""
    used = train & np.isfinite(values)[None, :]
    weight = used.astype(float)
    resid = np.where(used, values[None, :], 0.0)
    out = []
    for level, k in zip(LEVELS, shrink, strict=True):
        member = cells.onehot[level]
        if k is None:
            out.append(np.zeros((train.shape[0], member.shape[1])))
            continue
        total, count = (resid * weight) @ member, weight @ member
        offset = np.where(count >= min_groups(level), total / np.maximum(count + k, 1e-12), 0.0)
        if level not in SINGLE_GROUP_LEVELS:
            offset = np.where(systematic(resid, weight, member, cells.onehot["model"]), offset, 0.0)
        out.append(offset)
        resid = resid - offset @ member.T
    return out


def min_groups(level: str) -> int:
    """The training groups a cell of ``level`` needs for an offset: :data:`MIN_CELL_GROUPS`, or
    :data:`MODEL_MIN_GROUPS` for the ``model`` level."""
    return MODEL_MIN_GROUPS if level in SINGLE_GROUP_LEVELS else MIN_CELL_GROUPS


def systematic(resid: np.ndarray, weight: np.ndarray, member: np.ndarray, units: np.ndarray) -> np.ndarray:
    """Whether each cell's mean residual is at least :data:`SYSTEMATIC_ERRORS` standard errors of
    the mean from 0, counted over independent units (``units``: groups x units membership, the
    ``model`` level's cells: one model on one GPU with one engine, whose TP degrees share their
    error): each unit's mean residual over its training groups, then the cell's mean and spread
    over its units (two at least). ``resid`` and ``weight`` are folds x groups."""
    sums, counts = (resid * weight) @ units, weight @ units
    seen = (counts > 0).astype(float)
    means = np.where(counts > 0, sums / np.maximum(counts, 1e-12), 0.0)
    in_cell = ((units.T @ member) > 0).astype(float)  # units x cells
    n = seen @ in_cell
    total, squares = means @ in_cell, means**2 @ in_cell
    k = np.maximum(n, 1.0)
    mean = total / k
    var = np.maximum(squares - k * mean**2, 0.0) / np.maximum(k - 1.0, 1.0)
    out: np.ndarray = (n >= MIN_CELL_GROUPS) & (np.abs(mean) >= SYSTEMATIC_ERRORS * np.sqrt(var / k))
    return out


def fit(values: np.ndarray, train: np.ndarray, cells: Cells, shrink: Shrink) -> list[np.ndarray]:
    """:func:`fit_many` for one training mask (one offset vector per level)."""
    return [off[0] for off in fit_many(values, train[None, :], cells, shrink)]


def log_multipliers(offsets: Sequence[np.ndarray], cells: Cells) -> np.ndarray:
    """Each group's log multiplier, the sum of its cells' offsets over the levels (one row per
    row of ``offsets`` when they are two-dimensional)."""
    return sum((off @ cells.onehot[level].T for level, off in zip(LEVELS, offsets, strict=True)),
               np.zeros(cells.groups))


def folds(train: np.ndarray, clusters: np.ndarray | None = None) -> np.ndarray:
    """Grouped folds over the groups of ``train`` (folds x groups, True where held out): each
    fold holds out whole clusters (``clusters[g]``, by default each group its own), one cluster
    each, or :data:`MAX_FOLDS` folds dealt round-robin in cluster order when there are more;
    none with fewer than two clusters."""
    ids = np.arange(len(train)) if clusters is None else clusters
    members = np.unique(ids[train])
    if len(members) < 2:
        return np.zeros((0, len(train)), dtype=bool)
    n = min(len(members), MAX_FOLDS)
    out = np.zeros((n, len(train)), dtype=bool)
    for f in range(n):
        out[f] = train & np.isin(ids, members[f::n])
    return out


def cv_loss(values: np.ndarray, train: np.ndarray, cells: Cells, shrink: Shrink, loss: Loss,
            held: np.ndarray) -> np.ndarray:
    """The held-out loss of ``shrink`` in each of the folds ``held`` within ``train``: each fold
    predicted by offsets fitted on the rest of ``train``."""
    offsets = fit_many(values, train[None, :] & ~held, cells, shrink)
    return loss(log_multipliers(offsets, cells), held)


@dataclass(frozen=True)
class LevelChoice:
    """What cross-validation chose for one level: ``k`` (None: off) and the held-out loss
    without the level and with it at its best ``k`` (None without folds to judge by)."""

    level: str
    shrink: float | None
    loss_without: float | None
    loss_with: float | None


def select(values: np.ndarray, train: np.ndarray, cells: Cells, loss: Loss,
           allow_off: bool = True, clusters: np.ndarray | None = None,
           only: frozenset[str] | None = None) -> tuple[Shrink, list[LevelChoice]]:
    """``k`` per level chosen by grouped cross-validation within ``train``, level after level
    (most general first, the levels before at their chosen ``k``): the candidate of
    :data:`SHRINK_GRID` shrunk most among those whose held-out loss is within one standard error
    of the lowest, kept only when its loss is below the loss without the level by more than one
    standard error of the difference (summed over the folds, from the folds' spread: the
    one-standard-error rule, which prefers the simpler model when the data cannot tell them
    apart). A level so kept must also be never worse with single groups held out (summed over
    those folds); the levels of :data:`SINGLE_GROUP_LEVELS` are chosen on single groups alone.
    ``allow_off`` False keeps every level at its best
    ``k`` (a forced fit). Without two groups to hold out no level is kept (forced: every level
    at :data:`UNJUDGED_SHRINK`). ``clusters``: groups held out together (see :func:`folds`);
    ``only``: the levels that may be used (default all; the others are left out)."""
    judged = train & np.isfinite(values)
    held, single = folds(judged, clusters), folds(judged)
    chosen: list[float | None] = [None] * len(LEVELS)
    if not len(held) and not len(single):  # forced on one group: the model level, unjudged, is its whole error
        ks = [None if allow_off or level in SINGLE_GROUP_LEVELS else UNJUDGED_SHRINK for level in LEVELS]
        return tuple(ks), [LevelChoice(level, k, None, None) for level, k in zip(LEVELS, ks, strict=True)]
    report = []
    for i, level in enumerate(LEVELS):
        if only is not None and level not in only:
            report.append(LevelChoice(level, None, None, None))
            continue
        by = single if level in SINGLE_GROUP_LEVELS or not len(held) else held
        if not len(by):
            report.append(LevelChoice(level, None if allow_off else UNJUDGED_SHRINK, None, None))
            chosen[i] = None if allow_off else UNJUDGED_SHRINK
            continue
        current = cv_loss(values, train, cells, tuple(chosen), loss, by)
        trials = [(k, cv_loss(values, train, cells, tuple(chosen[:i] + [k] + chosen[i + 1:]), loss, by))
                  for k in SHRINK_GRID]
        best_k, best = _most_shrunk_within_one_error(trials)
        gain = current - best
        keep = not allow_off or (float(gain.sum()) > LEVEL_ERRORS * standard_error(gain)
                                 and _never_worse(values, train, cells, chosen, i, best_k, loss, single))
        report.append(LevelChoice(level, best_k if keep else None, float(current.sum()),
                                  float(best.sum()) if keep else None))
        if keep:
            chosen[i] = best_k
    return tuple(chosen), report


def _never_worse(values: np.ndarray, train: np.ndarray, cells: Cells, chosen: list[float | None], i: int,
                 k: float, loss: Loss, single: np.ndarray) -> bool:
    """Whether level ``i`` at ``k`` on top of the levels ``chosen`` loses no more, summed over the
    folds ``single`` (single groups held out), than without it."""
    if not len(single):
        return True
    without = cv_loss(values, train, cells, tuple(chosen), loss, single)
    with_ = cv_loss(values, train, cells, tuple(chosen[:i] + [k] + chosen[i + 1:]), loss, single)
    return float(with_.sum()) <= float(without.sum())


def standard_error(diff: np.ndarray) -> float:
    """One standard error of the sum over folds of a per-fold difference (from the folds' spread)."""
    return float(np.std(diff, ddof=1) * math.sqrt(len(diff))) if len(diff) > 1 else 0.0


def _most_shrunk_within_one_error(trials: Sequence[tuple[float, np.ndarray]]) -> tuple[float, np.ndarray]:
    """Of (k, per-fold loss) candidates, the largest ``k`` whose summed loss exceeds the lowest's
    by no more than one standard error of their difference."""
    _, lowest = min(trials, key=lambda kv: (float(kv[1].sum()), kv[0]))
    close = [(k, loss) for k, loss in trials if float((loss - lowest).sum()) <= standard_error(loss - lowest)]
    return max(close, key=lambda kv: kv[0])
