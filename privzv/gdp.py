"""Gaussian differential privacy (GDP): mu <-> (epsilon, delta), composition, trade-off curves.

References are to Dong, Roth & Su, "Gaussian differential privacy", JRSS-B 84(1), 2022.

Every function is vectorised with numpy broadcasting: scalars in give a Python float out, arrays
in give an ndarray out. Bad input raises :class:`privzv.errors.PrivzvError` naming the value and
the allowed range.

Numerical method (see docs/gdp.md). With t = epsilon/mu - mu/2 (so that the two arguments of
Corollary 2.13 are a = -t and b = -t - mu) and the Mills ratio M(s) = (1 - Phi(s)) / phi(s),
the identity e^eps * phi(b) = phi(a) gives exactly

    delta = Phi(a) * (1 - exp(-D)),   D = h(t) - h(t + mu),   h = log M,

so ``log delta = log Phi(a) + log(-expm1(-D))`` has no cancellation once D is accurate. D is the
difference of two well-scaled logs (h(s) = log erfcx(s/sqrt 2) + log sqrt(pi/2) for s >= 0) where
that loses little; where it would cancel (mu small against the scale of t), D is computed as
the integral of the inverse Mills ratio minus s, -h'(s) = phi(s)/(1 - Phi(s)) - s, over
[t, t + mu] by Gauss-Legendre quadrature, with Laplace's continued fraction for large s.
"""

from __future__ import annotations

import math

import numpy as np
from scipy import special

from privzv.errors import PrivzvError

__all__ = [
    "delta_from_epsilon",
    "log_delta_from_epsilon",
    "epsilon_from_delta",
    "mu_from_epsilon",
    "compose",
    "gaussian_mu",
    "tradeoff",
]

_LOG_2 = math.log(2.0)
_LOG_SQRT_2PI = 0.5 * math.log(2.0 * math.pi)
_LOG_SQRT_PI_2 = 0.5 * math.log(0.5 * math.pi)
_SQRT_PI_2 = math.sqrt(0.5 * math.pi)
_SQRT_HALF = math.sqrt(0.5)
_HALF_SQRT_HALF = 0.5 * _SQRT_HALF
_GL_NODES, _GL_WEIGHTS = np.polynomial.legendre.leggauss(3)
_CF_FROM = 10.0  # inverse-Mills-ratio integrand: continued fraction for s >= this
_CF_TERMS = 14  # enough for 1e-16 relative error at s >= 10 (checked against mpmath)
_CANCEL = 1e-3  # direct D only when D >= _CANCEL * (1 + |h(t)| + |h(t+mu)|)
_RTOL = 1e-13  # root finding: stop when the bracket is this narrow (relative)
_LAST_STEP = 1e-4  # root finding: a Halley step this small (relative) is the last one
_MAX_ITER = 100
_CHUNK = 1 << 16  # elements per vectorised pass
_TINY_D = 1e-20  # D below this: log(1 - e^-D) as log D
_EPS_FLOOR = 1e-12  # epsilon_from_delta: absolute slack (in epsilon) of the stopping rule


# ---------------------------------------------------------------- input handling
def _array(
    name: str, value, *, low: float, low_open: bool, high: float = math.inf, high_open: bool = True
) -> np.ndarray:
    """``value`` as a float array, every element finite and in the given range, else PrivzvError."""
    try:
        arr = np.asarray(value, dtype=float)
    except (TypeError, ValueError):
        raise PrivzvError(f"{name}={value!r}: must be a number or an array of numbers") from None
    ok = np.isfinite(arr) & ((arr > low) if low_open else (arr >= low))
    ok &= (arr < high) if high_open else (arr <= high)
    if not ok.all():
        bad = arr[~ok].flat[0]
        lo = f"{'>' if low_open else '>='} {low:g}"
        hi = "" if high == math.inf else f" and {'<' if high_open else '<='} {high:g}"
        raise PrivzvError(f"{name}={float(bad)!r}: must be a finite number {lo}{hi}")
    return arr


def _out(arr: np.ndarray, *inputs):
    """A Python float when every input was a scalar, else the array."""
    if all(np.ndim(x) == 0 for x in inputs):
        return float(arr)
    return arr


def _pair(name_a, a, name_b, b, range_a, range_b):
    """Validate two inputs, broadcast them, return flat copies and the broadcast shape."""
    xa = _array(name_a, a, **range_a)
    xb = _array(name_b, b, **range_b)
    shape = np.broadcast_shapes(xa.shape, xb.shape)
    return (np.broadcast_to(xa, shape).ravel().copy(), np.broadcast_to(xb, shape).ravel().copy(), shape)


_MU = dict(low=0.0, low_open=True)
_EPSILON = dict(low=0.0, low_open=False)
# a subnormal delta carries too few bits for the inverses' relative accuracy: refused
_DELTA = dict(low=float(np.finfo(float).tiny), low_open=False, high=1.0, high_open=True)


# ---------------------------------------------------------------- core: log delta and D
def _neg_dlog_mills(s: np.ndarray) -> np.ndarray:
    """-h'(s) = phi(s)/(1 - Phi(s)) - s, the inverse Mills ratio minus s (in (0, 1) for s >= 0).

    s < 0: no cancellation (phi/Phi(-s) is small). 0 <= s < 10: 1/M(s) - s (relative error
    ~ s^2 * 1e-16). s >= 10: Laplace's continued fraction 1/(s + 2/(s + 3/(s + ...))).
    """
    out = np.empty_like(s)
    neg = s < 0
    big = s >= _CF_FROM
    mid = ~(neg | big)
    sn = s[neg]
    out[neg] = np.exp(-0.5 * sn * sn - _LOG_SQRT_2PI - special.log_ndtr(-sn)) - sn
    sm = s[mid]
    out[mid] = 1.0 / (special.erfcx(sm * _SQRT_HALF) * _SQRT_PI_2) - sm
    sb = s[big]
    r = sb.copy()
    for k in range(_CF_TERMS, 1, -1):
        r = sb + k / r
    out[big] = 1.0 / r
    return out


def _log_mills_pos(s: np.ndarray) -> np.ndarray:
    """h(s) = log M(s) for s >= 0, from erfcx (no overflow, no cancellation)."""
    return np.log(special.erfcx(s * _SQRT_HALF)) + _LOG_SQRT_PI_2


def _log_delta_parts(epsilon: np.ndarray, mu: np.ndarray):
    """(log delta, D, h(t), h(t + mu)) for valid 1-D arrays of equal length (module docstring).

    Overflow is the answer, not an error: where t^2 overflows log Phi(a) is -inf (delta is below
    the smallest float); where t does (epsilon/mu > 1.8e308) the parts are their limits at
    t = inf (log delta -inf); where t^2 does for t < 0 (mu huge) D is inf and log delta 0.
    """
    with np.errstate(over="ignore"):
        centre = epsilon / mu  # t + mu/2, the midpoint of [t, t + mu]
        far = np.isinf(centre)
        if not far.any():
            return _log_delta_terms(centre, mu)
        parts = tuple(np.full_like(centre, limit) for limit in (-np.inf, np.inf, -np.inf, -np.inf))
        for part, near in zip(parts, _log_delta_terms(centre[~far], mu[~far])):
            part[~far] = near
        return parts


def _log_delta_terms(centre: np.ndarray, mu: np.ndarray):
    t = centre - 0.5 * mu
    pos = t >= 0
    if pos.all():
        h_t = _log_mills_pos(t)
        log_phi_a = h_t - 0.5 * t * t - _LOG_SQRT_2PI  # log Phi(a), a = -t
    else:
        h_t, log_phi_a = np.empty_like(t), np.empty_like(t)
        tp, tn = t[pos], t[~pos]
        h_t[pos] = _log_mills_pos(tp)
        log_phi_a[pos] = h_t[pos] - 0.5 * tp * tp - _LOG_SQRT_2PI
        log_phi_a[~pos] = special.log_ndtr(-tn)
        h_t[~pos] = log_phi_a[~pos] + 0.5 * tn * tn + _LOG_SQRT_2PI
    h_end = _log_mills_pos(centre + 0.5 * mu)  # t + mu = eps/mu + mu/2 > 0
    d = h_t - h_end
    cancels = d < _CANCEL * (1.0 + np.abs(h_t) + np.abs(h_end))
    log_gap = np.empty_like(d)  # log(1 - e^-D)
    tiny = np.zeros_like(cancels)
    if cancels.any():
        c, half = centre[cancels], 0.5 * mu[cancels]
        nodes = c[:, None] + half[:, None] * _GL_NODES
        integral = _neg_dlog_mills(nodes) @ _GL_WEIGHTS
        d[cancels] = half * integral
        small = d[cancels] < _TINY_D
        if small.any():  # 1 - e^-D = D to double precision there; its log survives D's underflow
            tiny[cancels] = small
            log_gap[tiny] = np.log(mu[cancels][small]) - _LOG_2 + np.log(integral[small])
    log_gap[~tiny] = np.log(-np.expm1(-d[~tiny]))
    return log_phi_a + log_gap, d, h_t, h_end


def _log_delta(epsilon: np.ndarray, mu: np.ndarray) -> np.ndarray:
    return _log_delta_parts(epsilon, mu)[0]


def _chunked(core, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """core(a, b) on slices of _CHUNK elements (cache-sized; ~20% faster on 1e6 inputs)."""
    if a.size <= _CHUNK:
        return core(a, b)
    return np.concatenate([core(a[i : i + _CHUNK], b[i : i + _CHUNK]) for i in range(0, a.size, _CHUNK)])


def log_delta_from_epsilon(epsilon, mu):
    """Natural log of :func:`delta_from_epsilon`; finite where delta underflows (< 1e-308).

    Accurate to about 1e-12 absolute wherever delta >= 1e-300; below that, to ~1e-15 relative
    (the rounding of epsilon/mu then dominates). -inf only if (epsilon/mu)^2 overflows.
    """
    eps, m, shape = _pair("epsilon", epsilon, "mu", mu, _EPSILON, _MU)
    return _out(_chunked(_log_delta, eps, m).reshape(shape), epsilon, mu)


def delta_from_epsilon(epsilon, mu):
    """delta(eps; mu) = Phi(-eps/mu + mu/2) - e^eps Phi(-eps/mu - mu/2) (Dong et al., Cor. 2.13).

    A mu-GDP mechanism is (eps, delta(eps; mu))-DP for every eps >= 0, and this delta is the
    smallest such. epsilon >= 0 and mu > 0, finite. Relative error <= 1e-9 (in practice ~1e-12)
    for delta >= 1e-300; smaller deltas underflow gracefully towards 0 (use
    :func:`log_delta_from_epsilon` for their logarithm).
    """
    eps, m, shape = _pair("epsilon", epsilon, "mu", mu, _EPSILON, _MU)
    return _out(np.exp(_chunked(_log_delta, eps, m)).reshape(shape), epsilon, mu)


# ---------------------------------------------------------------- inverses
def _halley(x, lo, hi, step, *params):
    """Bracketed vectorised Halley iteration for an increasing residual r, r(lo) <= 0 <= r(hi).

    ``step(x, *params) -> (r, r', r'', scale)``, where ``params`` are per-element arrays and
    ``scale`` is the size against which a change of x counts as relative; hi may be inf. A step
    that leaves the bracket is replaced by bisection (or by a step of |x| + 1 up while hi is
    inf). Halley's error is cubic, so once a step is below _LAST_STEP * scale (the next error,
    ~ its cube, is far below 1e-10 relative), that step is the last.
    """
    out = np.empty_like(x)
    idx = np.arange(x.size)
    for _ in range(_MAX_ITER):
        r, dr, ddr, scale = step(x, *params)
        lo = np.where(r < 0, x, lo)
        hi = np.where(r > 0, x, hi)
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            newton = r / dr
            # Halley: newton / (1 - r r''/(2 r'^2)), the divisor clipped to [0.5, 2]
            xn = x - newton / np.fmin(np.fmax(1.0 - 0.5 * newton * ddr / dr, 0.5), 2.0)
        done = np.abs(xn - x) <= _LAST_STEP * scale
        off = ~(done | ((xn > lo) & (xn < hi)))
        if off.any():  # bisect (or step up while hi is inf); done once the bracket is tiny
            lo_o, hi_o, x_o = lo[off], hi[off], x[off]
            xn[off] = np.where(np.isinf(hi_o), x_o + np.abs(x_o) + 1.0, 0.5 * (lo_o + hi_o))
            done[off] = hi_o - lo_o <= _RTOL * scale[off]
        xn = np.where(done, np.fmin(np.fmax(xn, lo), hi), xn)  # a last step stays in the bracket
        if done.all():
            out[idx] = xn
            return out
        if done.any():
            out[idx[done]] = xn[done]
            keep = ~done
            idx, xn, lo, hi = idx[keep], xn[keep], lo[keep], hi[keep]
            params = tuple(p[keep] for p in params)
        x = xn
    raise RuntimeError(f"GDP root finding did not converge for {idx.size} inputs")


def _probit_residual(log_delta, dlog_delta, curvature, z_target):
    """z(x) = Phi^-1(delta(x)) - z_target with z' and z'', from log delta, (log delta)' and
    curvature = delta''/delta'.

    z is nearly linear in epsilon (z ~ mu/2 - eps/mu when delta ~ Phi(a)), so Halley on z
    converges in two or three steps. z' = delta'/phi(z), z'' = z' (delta''/delta' + z z').
    """
    z = special.ndtri_exp(log_delta)
    log_pdf = -0.5 * z * z - _LOG_SQRT_2PI
    with np.errstate(over="ignore", invalid="ignore"):  # a non-finite z'' falls back to Newton
        dz = dlog_delta * np.exp(log_delta - log_pdf)
        return z - z_target, dz, dz * (curvature + z * dz)


def _mu_from_quantile(q, epsilon):
    """The mu > 0 with mu/2 - eps/mu = q: q + sqrt(q^2 + 2 eps), without cancellation."""
    root = np.hypot(q, np.sqrt(epsilon) * math.sqrt(2.0))  # no underflow, no overflow
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(q < 0, epsilon / (root - q) * 2.0, q + root)  # no overflow at 1e308


def epsilon_from_delta(mu, delta):
    """The smallest eps >= 0 with delta(eps; mu) <= delta (inverse of Dong et al., Cor. 2.13).

    delta(eps; mu) decreases from delta(0; mu) = 2 Phi(mu/2) - 1 to 0, so for delta >=
    2 Phi(mu/2) - 1 the answer is eps = 0 (the mechanism is already (0, delta)-DP). Otherwise
    it is the root of Phi^-1(delta(eps; mu)) = Phi^-1(delta), found by a bracketed Halley
    iteration from the upper bound eps <= mu^2/2 - mu Phi^-1(delta) (as delta(eps; mu) <=
    Phi(mu/2 - eps/mu)). Relative error ~1e-12 (<= 1e-10; as eps -> 0 the root is
    ill-conditioned and the error becomes absolute, ~1e-16), never below 0. mu > 0 and 2.2e-308
    <= delta < 1 (normal); inf where epsilon exceeds the float range (mu above about 1.9e154).
    """
    m, d, shape = _pair("mu", mu, "delta", delta, _MU, _DELTA)
    return _out(_chunked(_solve_epsilon, m, d).reshape(shape), mu, delta)


def _epsilon_step(eps, mu, z_target):
    """Halley step data for r(eps) = z_target - Phi^-1(delta(eps; mu)), increasing in eps."""
    log_delta, dd, _, h_end = _log_delta_parts(eps, mu)
    # (log delta)' = -1/expm1(D); delta''/delta' = 1 - phi(a)/(mu e^eps Phi(b))
    #                                             = 1 - 1/(mu M(t + mu))
    curvature = 1.0 - np.exp(-h_end) / mu
    r, dr, ddr = _probit_residual(log_delta, -1.0 / np.expm1(dd), curvature, z_target)
    return -r, -dr, -ddr, eps + _EPS_FLOOR


def _solve_epsilon(m: np.ndarray, d: np.ndarray) -> np.ndarray:
    eps = np.zeros_like(m)
    positive = d < special.erf(m * _HALF_SQRT_HALF)  # delta(0; mu) = 2 Phi(mu/2) - 1
    if positive.any():
        m_pos = m[positive]
        z_target = special.ndtri_exp(np.log(d[positive]))
        with np.errstate(over="ignore"):
            upper = m_pos * (0.5 * m_pos - z_target)
        huge = ~np.isfinite(upper)  # epsilon beyond the float range: inf
        eps_pos = np.full_like(upper, np.inf)
        if (~huge).any():
            eps_pos[~huge] = _halley(
                upper[~huge],
                np.zeros_like(upper[~huge]),
                upper[~huge].copy(),
                _epsilon_step,
                m_pos[~huge],
                z_target[~huge],
            )
        eps[positive] = eps_pos
    return eps


def mu_from_epsilon(epsilon, delta):
    """The largest mu with delta(eps; mu) <= delta: mu-GDP then implies (eps, delta)-DP.

    delta(eps; mu) increases in mu from 0 to 1 (Dong et al., Cor. 2.13), so a root always
    exists. Bracketed Halley iteration on Phi^-1(delta(eps; mu)) = Phi^-1(delta) in the variable
    a = mu/2 - eps/mu (increasing in mu, and Phi^-1(delta) ~ a), from the lower bounds
    a >= Phi^-1(delta) (as delta <= Phi(a)) and mu >= delta sqrt(2 pi) (as delta <= mu phi(0)),
    using d delta / d mu = phi(a). Relative error ~1e-12 (<= 1e-10).
    epsilon >= 0 and 2.2e-308 <= delta < 1 (normal).
    """
    e, d, shape = _pair("epsilon", epsilon, "delta", delta, _EPSILON, _DELTA)
    return _out(_chunked(_solve_mu, e, d).reshape(shape), epsilon, delta)


def _mu_step(a, eps, z_target):
    """Halley step data for r(a) = Phi^-1(delta(eps; mu(a))) - z_target, a = mu/2 - eps/mu."""
    mu = _mu_from_quantile(a, eps)
    log_delta, dd, h_t, _ = _log_delta_parts(eps, mu)
    scale = mu - a  # = mu/2 + eps/mu = mu da/dmu
    # d delta/da = phi(a) dmu/da, dmu/da = mu/(mu - a), d2mu/da2 = 2 eps/(mu - a)^3
    dlog_delta_da = np.exp(-h_t) / -np.expm1(-dd) * (mu / scale)
    curvature = (mu - 2.0 * a) / scale / scale - a
    return (*_probit_residual(log_delta, dlog_delta_da, curvature, z_target), scale)


def _solve_mu(e: np.ndarray, d: np.ndarray) -> np.ndarray:
    z_target = special.ndtri_exp(np.log(d))
    mu_low = d * math.sqrt(2.0 * math.pi)  # delta <= 2 Phi(mu/2) - 1 <= mu phi(0)
    with np.errstate(over="ignore"):  # e / mu_low = inf only lowers the bound to z_target
        lower = np.maximum(z_target, 0.5 * mu_low - e / mu_low)
    a = _halley(lower.copy(), lower, np.full_like(lower, np.inf), _mu_step, e, z_target)
    return _mu_from_quantile(a, e)


# ---------------------------------------------------------------- GDP calculus
def compose(mus, axis=-1):
    """mu of the composition of mu_i-GDP mechanisms: sqrt(sum mu_i^2) (Dong et al., Cor. 3.3).

    Holds for adaptive composition. Reduces over ``axis`` (an empty sequence gives 0); each
    mu_i >= 0 and finite. Computed without overflow (hypot reduction); inf, without a warning,
    only where the answer exceeds the float range.
    """
    m = _array("mu", mus, low=0.0, low_open=False)
    if m.ndim == 0:
        return float(m)
    if m.shape[axis] == 0:
        out = np.zeros(np.delete(m.shape, axis))
    else:
        with np.errstate(over="ignore"):
            out = np.hypot.reduce(m, axis=axis)
    return float(out) if np.ndim(out) == 0 else out


def gaussian_mu(sensitivity, sigma):
    """mu = sensitivity / sigma of the Gaussian mechanism (Dong et al., Thm 2.7).

    Adding N(0, sigma^2) noise to a statistic of L2 sensitivity ``sensitivity`` (per coordinate,
    for vector statistics) is exactly mu-GDP. sensitivity >= 0, sigma > 0, both finite; inf,
    without a warning, where the ratio exceeds the float range (no privacy to speak of).
    """
    s, g, shape = _pair(
        "sensitivity",
        sensitivity,
        "sigma",
        sigma,
        dict(low=0.0, low_open=False),
        dict(low=0.0, low_open=True),
    )
    with np.errstate(over="ignore"):
        return _out((s / g).reshape(shape), sensitivity, sigma)


def tradeoff(alpha, mu):
    """G_mu(alpha) = Phi(Phi^-1(1 - alpha) - mu) (Dong et al., Def. 2.4).

    The smallest type II error of any test of N(0, 1) against N(mu, 1) at type I error alpha;
    a mechanism is mu-GDP iff its trade-off function is >= G_mu. 0 <= alpha <= 1, mu >= 0.
    """
    a, m, shape = _pair(
        "alpha",
        alpha,
        "mu",
        mu,
        dict(low=0.0, low_open=False, high=1.0, high_open=False),
        dict(low=0.0, low_open=False),
    )
    with np.errstate(divide="ignore"):
        # Phi^-1(1 - alpha): -ndtri(alpha) is exact in the lower tail; 1 - alpha is exact above 0.5
        upper_quantile = np.where(a < 0.5, -special.ndtri(a), special.ndtri(1.0 - a))
    return _out(special.ndtr(upper_quantile - m).reshape(shape), alpha, mu)
