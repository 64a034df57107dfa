"""Betting confidence sequences for bounded means, as rejection times of candidate means.

Why this shape: a candidate mean that the betting test rejects once stays out for good (the sequence is the
running intersection), so everything a stopping rule or a coverage check needs is, for each candidate m on a
grid, the first item count at which m is rejected. Bounds at any time, at every time, are read off those
rejection times without recomputing anything, and a batch of sequences (the pairs of a simulated study) is one
numpy computation. The method is the hedged-capital betting CS of Waudby-Smith & Ramdas (2024), "Estimating
means of bounded random variables by betting", JRSS-B 86(1):1-27: theta = 1/2, their aGRAPA bets (the
approximate Kelly bet against each candidate, from the items seen so far) truncated at 1/2 of their bound, and
their without-replacement martingale (Sec. 6) when the items are a uniformly random order of a finite
population. A candidate counts as rejected once either side's capital reaches 2/alpha (so the hedged capital
reaches 1/alpha), or once the items seen make it impossible.

Why not a library: `confseq` (0.0.11, 2022) implements these sequences (`confseq/betting.py`, `hedged_cs`), but
it builds a C++ extension and requires matplotlib, multiprocess and pytest at run time, and it computes one
sequence at a time over the full grid.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from prbench.errors import PrbenchError

ALPHA = 0.05  # the level of every sequence a run reports, and of a whole `decided` ranking
DEFAULT_MARGIN = 0.02  # `decided`: a pair proven within +-this is settled as a tie
FIRST_STEP = 100  # items before the first look
GROWTH = 1.1  # each look scores 10% more items: at most a tenth past the stopping time


def candidates(grid: int) -> np.ndarray:
    """The candidate means: `grid` + 1 points on [0, 1]."""
    return np.linspace(0.0, 1.0, grid + 1)


CHUNK = 128  # items per step of the computation: candidates rejected in one step are dropped from the next


def rejection_times(x: np.ndarray, *, alpha: float, population: int | None, grid: int,
                    settled: Callable[[np.ndarray, list[tuple[np.ndarray, np.ndarray]], int], np.ndarray] | None = None,
                    means: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """For rows of [0, 1] values `x` (shape (R, T)), the first item count (1..T) at which each candidate mean is
    rejected, T + 1 if never: shape (R, grid + 1); and each row's horizon (the items looked at).

    The capitals run in steps of CHUNK items over the candidates still in (a rejected candidate stays out: the
    running intersection), so the work shrinks with the sequence. `settled(rows, bounds, t)`: of the rows still
    running and their bounds up to time t, those that have all the caller needs; they stop there (their horizon; rejection times past it are not computed).
    `population`: without replacement from that many values. `means` (R, K): each row's own candidates instead
    of the grid (a coverage check needs only the two grid points around the truth)."""
    rows = np.asarray(x, dtype=float)
    R, T = rows.shape
    m = np.broadcast_to(candidates(grid), (R, grid + 1)) if means is None else np.asarray(means, dtype=float)
    g = m.shape[1]
    t_all = np.arange(1, T + 1, dtype=float)
    csum = np.cumsum(rows, axis=1)
    mu_hat = (0.5 + csum) / (t_all + 1)
    var_hat = (0.25 + np.cumsum((rows - mu_hat) ** 2, axis=1)) / (t_all + 1)
    mu_prev = np.concatenate([np.full((R, 1), 0.5), mu_hat[:, :-1]], axis=1)
    var_prev = np.concatenate([np.full((R, 1), 0.25), var_hat[:, :-1]], axis=1)
    s_prev = np.concatenate([np.zeros((R, 1)), csum[:, :-1]], axis=1)
    tau = np.full((R, g), T + 1, dtype=np.int64)
    cap = np.zeros((2, R, g))  # log capital of each side, per candidate, so far
    horizon = np.full(R, T, dtype=np.int64)
    active = np.arange(R)
    level = math.log(2 / alpha)
    f32 = np.float32  # the (rows x candidates x items) work in single precision, each step's sums added in double
    m32, rows32 = m.astype(f32), rows.astype(f32)
    mu_prev, var_prev, s_prev, t32 = mu_prev.astype(f32), var_prev.astype(f32), s_prev.astype(f32), t_all.astype(f32)
    for start in range(0, T, CHUNK):
        stop = min(T, start + CHUNK)
        alive = tau[active] > start
        first = np.where(alive.any(axis=1), alive.argmax(axis=1), 0)
        last = np.where(alive.any(axis=1), g - 1 - alive[:, ::-1].argmax(axis=1), 0)
        idx = np.minimum(first[:, None] + np.arange(int((last - first).max()) + 1)[None, :], g - 1)  # (A, W)
        sl = slice(start, stop)
        rr = np.broadcast_to(active[:, None], idx.shape)
        if population is None:
            mu_t = np.broadcast_to(m32[rr, idx][:, :, None], (*idx.shape, stop - start))
        else:  # the mean of what is left under the null
            mu_t = (f32(population) * m32[rr, idx][:, :, None] - s_prev[active][:, None, sl]) / (
                f32(population) - t32[sl] + 1)
        mu_c = np.clip(mu_t, f32(0), f32(1))
        with np.errstate(divide="ignore", invalid="ignore"):
            gap = mu_prev[active][:, None, sl] - mu_c
            kelly = gap / (var_prev[active][:, None, sl] + gap * gap)
            lam_pos = np.minimum(np.maximum(kelly, f32(0)), f32(0.5) / mu_c)
            lam_neg = np.minimum(np.maximum(-kelly, f32(0)), f32(0.5) / (1 - mu_c))
        dev = rows32[active][:, None, sl] - mu_c
        pos = cap[0][rr, idx][:, :, None] + np.cumsum(np.log1p(lam_pos * dev), axis=2, dtype=f32)
        neg = cap[1][rr, idx][:, :, None] + np.cumsum(np.log1p(-lam_neg * dev), axis=2, dtype=f32)
        out = (mu_t < -1e-6) | (mu_t > 1 + 1e-6) | (pos >= level) | (neg >= level)  # float noise is not impossible
        hit = np.where(out.any(axis=2), start + out.argmax(axis=2) + 1, T + 1)
        tau[rr, idx] = np.minimum(tau[rr, idx], hit)
        cap[0][rr, idx], cap[1][rr, idx] = pos[:, :, -1], neg[:, :, -1]
        if settled is not None and stop < T:
            done = settled(active, [bounds(tau[r], rows[r, :stop], population=population, grid=grid)
                                    for r in active], stop)
            horizon[active[done]] = stop
            active = active[~done]
            if not len(active):
                break
    return tau, horizon


def bounds(tau: np.ndarray, x: np.ndarray, *, population: int | None, grid: int) -> tuple[np.ndarray, np.ndarray]:
    """Lower and upper bounds at every time 1..T of one sequence (`tau`: its rejection times, `x`: its values):
    the hull of the candidates not yet rejected, widened by one grid step, and, without replacement, within what
    the items seen already fix whatever the rest are (at the last item: the population mean itself)."""
    T, g = len(x), len(tau)
    tau = np.minimum(tau, T + 1)  # rejection times past the values given count as "still in"
    m = candidates(grid)
    step = 1.0 / grid
    # lowest / highest candidate still in at time t: over candidates with tau > t (a suffix min / max over tau)
    low_at = np.full(T + 2, g, dtype=int)
    np.minimum.at(low_at, tau, np.arange(g))
    high_at = np.full(T + 2, -1, dtype=int)
    np.maximum.at(high_at, tau, np.arange(g))
    low_idx = np.minimum.accumulate(low_at[::-1])[::-1][2:]  # index t + 1 <= tau: still in at time t
    high_idx = np.maximum.accumulate(high_at[::-1])[::-1][2:]
    any_in = low_idx < g
    lo = np.where(any_in, m[np.minimum(low_idx, g - 1)] - step, 0.0)
    hi = np.where(any_in, m[np.maximum(high_idx, 0)] + step, 1.0)
    if population is not None:
        csum, ts = np.cumsum(x), np.arange(1, T + 1)
        lo = np.maximum(lo, csum / population)
        hi = np.minimum(hi, (csum + population - ts) / population)
    lo, hi = np.clip(lo, 0.0, 1.0), np.clip(hi, 0.0, 1.0)
    return np.maximum.accumulate(lo), np.minimum.accumulate(hi)


def check_values(x: np.ndarray, population: int | None) -> None:
    if np.any((x < 0) | (x > 1)) or not np.all(np.isfinite(x)):
        raise PrbenchError("a confidence sequence needs values in [0, 1]")
    if population is not None and population < x.shape[-1]:
        raise PrbenchError(f"{x.shape[-1]} values drawn without replacement from a population of {population}")
