"""One-sided root finding: the smallest noise multiplier whose epsilon is at most a target.

``epsilon(z)`` decreases in z for every accountant. :func:`smallest_feasible` returns a z with
``epsilon(z) <= target`` (checked by evaluating it), within a relative tolerance of the smallest
such z. It needs few evaluations because it starts from a Gaussian-DP model of the accountant:
the model's mu(z) is rescaled by the ratio of the accountant's effective mu (the mu whose GDP
curve passes through (epsilon(z), delta)) to the model's, which changes slowly with z; after
that, steps in (log z, log epsilon) aimed just below the target: from one side, secant steps
(inverse quadratic interpolation through the last three points where the curve bends), once
the target is bracketed false position with Anderson-Bjorck weights, kept inside the bracket
(geometric bisection when a step would leave it).
"""

from __future__ import annotations

import math
from collections.abc import Callable

from privzv import gdp
from privzv.errors import PrivzvError

MAX_EVALUATIONS = 60
# A secant step moves z by at most this factor (a nearly flat pair of points, e.g. where pld
# declines and rdp answers, aimed the search at the top of Z_RANGE).
MAX_SECANT_STEP = 4.0
# The precision asked of a calibration: epsilon within EPS_RTOL (relative) below its target, or
# the noise multiplier within Z_RTOL of one whose epsilon is above it.
EPS_RTOL = 2e-4
Z_RTOL = 1e-4
# Once bracketed, an end that moves while its log(epsilon / aim) shrinks by less than this
# fraction is on a flat stretch of epsilon: the next step bisects.
FLAT = 0.05
# Noise multipliers searched. The top reaches epsilon 1e-8 after 1e8 unsampled releases
# (z = sqrt(T) / mu, mu about 1e-8 there at delta 1e-5); at the bottom, where any z meets the
# target, the answer is the bottom itself.
Z_RANGE = (1e-4, 1e15)


def smallest_feasible(
    epsilon: Callable[[float], float],
    target: float,
    delta: float,
    model_mu: Callable[[float], float],
    model_inverse: Callable[[float], float],
    *,
    start: float | None = None,
    first_step: Callable[[float, float, float], float] | None = None,
    eps_rtol: float = EPS_RTOL,
    z_rtol: float = Z_RTOL,
) -> tuple[float, float]:
    """(z, epsilon(z)) with epsilon(z) <= target and either target - epsilon(z) <= eps_rtol*target
    or z within z_rtol (relative) of an infeasible z.

    ``model_mu(z)`` and its inverse ``model_inverse(mu)`` are a GDP approximation of the
    accountant; ``start`` defaults to the model's answer. ``first_step(z, epsilon(z), aim)``, if
    given, replaces the model for the first step (aim: the epsilon aimed at). Raises PrivzvError
    if no z in Z_RANGE reaches the target.
    """
    aim = target * (1.0 - 0.5 * eps_rtol)
    mu_aim = gdp.mu_from_epsilon(aim, delta)
    z = start if start is not None else model_inverse(mu_aim)
    lo: tuple[float, float] | None = None  # largest z seen with epsilon > target
    hi: tuple[float, float] | None = None  # smallest z seen with epsilon <= target
    last: tuple[float, float] | None = None
    seen: list[tuple[float, float]] = []
    # Anderson-Bjorck: each bracket end's log epsilon is weighted in false position; the end kept
    # while the other moves is scaled by 1 - y_new / y_old of the moving end (0.5 where that is
    # not positive), so that a curved epsilon (rdp's knee) cannot hold one end still while the
    # other creeps towards it (Anderson & Bjorck 1973, BIT 13)
    weight = {"lo": 1.0, "hi": 1.0}
    moved = None
    flat = False  # the last end moved without its epsilon moving towards the aim
    for _ in range(MAX_EVALUATIONS):
        z = min(max(z, Z_RANGE[0]), Z_RANGE[1])
        e = epsilon(z)
        seen.append((z, e))
        before = lo if e > target else hi  # the end this evaluation may replace
        if e <= target:
            hi = (z, e) if hi is None or z < hi[0] else hi
        else:
            lo = (z, e) if lo is None or z > lo[0] else lo
        if before is not None and (z, e) in (lo, hi):  # an end moved
            side, kept = ("lo", "hi") if e > target else ("hi", "lo")
            m = 1.0 - _log_ratio(e, aim) / (_log_ratio(before[1], aim) or math.nan)
            flat = not m > FLAT
            if moved == side:  # twice in a row: the kept end's weight shrinks
                weight[kept] *= m if m > 0 else 0.5
            weight[side], moved = 1.0, side
        if hi is not None and (
            target - hi[1] <= eps_rtol * target
            or hi[0] <= Z_RANGE[0]
            or (lo is not None and hi[0] - lo[0] <= z_rtol * hi[0])
        ):
            return hi
        if hi is None and z >= Z_RANGE[1]:
            raise PrivzvError(
                f"epsilon {target:g}: unreachable (even noise multiplier "
                f"{Z_RANGE[1]:g} gives epsilon {e:.4g})"
            )
        if lo is not None and lo[0] >= Z_RANGE[1]:
            break
        if lo is not None and hi is not None:  # bracketed: false position, Anderson-Bjorck
            # where epsilon is flat in z (rdp's at delta 1e-292, fuzz row 200), interpolation has
            # nothing to go on: bisect
            z_next = math.nan if flat else _false_position(lo, hi, aim, weight["lo"], weight["hi"])
        elif last is not None:  # at most MAX_SECANT_STEP: epsilons an ulp apart give a flat secant
            z_next = min(max(_one_sided(seen, aim), z / MAX_SECANT_STEP), z * MAX_SECANT_STEP)
        else:
            z_next = math.nan
            if first_step is not None and math.isfinite(e) and e > 0:
                z_next = first_step(z, e, aim)
            if not math.isfinite(z_next):
                z_next = _rescaled(z, e, delta, mu_aim, model_mu, model_inverse)
        low = lo[0] if lo is not None else 0.0
        high = hi[0] if hi is not None else math.inf
        if not (low < z_next < high):
            z_next = (
                math.sqrt(low * high)
                if lo is not None and hi is not None
                else (z * 4.0 if hi is None else z / 4.0)
            )
        last = (z, e)
        z = z_next
    if hi is None:
        raise PrivzvError(
            f"epsilon {target:g}: unreachable (no noise multiplier up to {Z_RANGE[1]:g} reaches it)"
        )
    return hi


def _rescaled(z, e, delta, mu_aim, model_mu, model_inverse) -> float:
    """The model's answer after rescaling its mu by mu_effective(z) / model_mu(z)."""
    if not math.isfinite(e) or e <= 0:
        return z * 4.0 if not math.isfinite(e) else z / 4.0
    ratio = gdp.mu_from_epsilon(e, delta) / model_mu(z)
    if not (math.isfinite(ratio) and ratio > 0):
        return z * 2.0
    return model_inverse(mu_aim / ratio)


def _log_ratio(e, aim) -> float:
    """log(e / aim), nan where e is not positive and finite."""
    return math.log(e) - math.log(aim) if math.isfinite(e) and e > 0 else math.nan


def _false_position(lo, hi, aim, w_lo, w_hi) -> float:
    """The bracket's false-position point in (log z, log epsilon - log aim), each end's value
    times its weight; nan where an epsilon is not positive and finite (the caller bisects)."""
    (z0, e0), (z1, e1) = lo, hi
    y0, y1 = w_lo * _log_ratio(e0, aim), w_hi * _log_ratio(e1, aim)
    if not y0 > 0 > y1:
        return math.nan
    x0, x1 = math.log(z0), math.log(z1)
    return math.exp(x1 - y1 * (x1 - x0) / (y1 - y0))


def _one_sided(seen, aim) -> float:
    """The next z from the last evaluations, all on one side of the target: inverse quadratic
    interpolation of log z against log epsilon through the last three, where it goes the
    secant's way and at most twice as far (a curved epsilon approached from one side), else the
    secant through the last two."""
    secant = _secant(seen[-2], seen[-1], aim)
    x = math.log(_inverse_quadratic(seen[-3:], aim))  # nan where it has no three points
    if not math.isfinite(secant) or not math.isfinite(x):
        return secant
    step, reach = x - math.log(seen[-1][0]), math.log(secant / seen[-1][0])
    return math.exp(x) if step * reach > 0 and abs(step) <= 2.0 * abs(reach) else secant


def _inverse_quadratic(points, aim) -> float:
    """The z where the quadratic in log epsilon through three (z, epsilon) points (log z against
    log epsilon) meets ``aim``; nan without three points of distinct positive finite epsilon."""
    if len(points) < 3 or not all(math.isfinite(e) and e > 0 for _, e in points):
        return math.nan
    xs = [math.log(z) for z, _ in points]
    ys = [math.log(e) - math.log(aim) for _, e in points]
    if len(set(ys)) < 3:
        return math.nan
    x = sum(xs[i] * math.prod(ys[j] / (ys[j] - ys[i]) for j in range(3) if j != i) for i in range(3))
    return math.exp(x) if abs(x) < 700 else math.nan


def _secant(p0, p1, aim) -> float:
    """Secant step for log epsilon against log z through two points, aimed at ``aim``."""
    (z0, e0), (z1, e1) = p0, p1
    if not (math.isfinite(e0) and math.isfinite(e1) and e0 > 0 and e1 > 0):
        return math.nan
    x0, x1, y0, y1 = math.log(z0), math.log(z1), math.log(e0), math.log(e1)
    if y0 == y1 or x0 == x1:  # epsilons an ulp apart can have equal logs
        return math.nan
    step = x1 + (math.log(aim) - y1) * (x1 - x0) / (y1 - y0)
    return math.exp(step) if abs(step) < 700 else math.nan  # nan: the caller bisects
