"""One record's privacy loss when the head trains on a secret sample of the table: its downlink
releases composed with the head's T_h Poisson-subsampled Gaussian steps.

The downlink part is the record's :class:`privzv.threats.Exposure` (k releases at noise
multiplier z_d, Poisson-amplified at q where the threat allows, unamplified under ``device``);
the head part is T_h steps at z_h, each Poisson-sampled at q_h from the server's secret source
(no party knows who is in a step, so every threat gets the amplification). The mechanisms are
applied adaptively; a composition of mechanisms, each dominated by its pair, is dominated by
the product of the pairs, taken in the same direction for all (Zhu, Dong & Wang 2022, "Optimal
accounting of differential privacy via characteristic function", AISTATS, Thm. 10; the PLD of
the product is the convolution of the PLDs):

- pld: per direction (replace; or remove and add), the pessimistic PMFs of one release of each
  mechanism (:mod:`privzv.gaussian_pmf`, on one grid; k unamplified Gaussians at z_d are one at
  z_d / sqrt(k), Dong, Roth & Su 2022, Cor. 3.3), tilted at the saddle point of the whole
  composition, each self-composed (:func:`privzv.tilted_pld.self_compose`), convolved
  (:func:`privzv.tilted_pld.compose`) and read at delta (:func:`privzv.tilted_pld.epsilon`),
  plus each part's loss shifts: an upper bound, as in :func:`privzv.accountants.pld_epsilon`;
  the larger of the directions;
- rdp: Renyi DP adds over a composition (Mironov 2017, Prop. 1): k times the downlink's RDP plus
  T_h times the sampled Gaussian's (:mod:`privzv.rdp`; replace-one: the exact pair by
  quadrature, :func:`privzv.accountants.replace_one_rdp`), converted once.

The reference is dp-accounting's ComposedDpEvent of SelfComposed(Gaussian) (or of the sampled
downlink) and SelfComposed(PoissonSampled(Gaussian)) (:func:`privzv.dpevent.to_dp_event`;
``tests/privzv/test_sampled_head.py`` compares).
"""

from __future__ import annotations

import dataclasses
import functools
import math

import numpy as np

from privzv import accountants
from privzv.accountants import CannotAnswer
from privzv.threats import Exposure


@dataclasses.dataclass(frozen=True)
class Mixture:
    """One record's exposure to two mechanisms: the downlink (``downlink``, None when it is
    withheld) at noise multiplier ``z_down``, and ``head_steps`` head steps at ``z_head``, each
    Poisson-sampled at ``head_rate``."""

    downlink: Exposure | None
    z_down: float
    head_steps: int
    head_rate: float
    z_head: float

    @property
    def compositions(self) -> int | float:
        return self.head_steps + (self.downlink.compositions if self.downlink else 0)


def clt_mu(m: Mixture) -> float:
    """A GDP model of the mixture (calibration's first guesses): mu^2 adds over a composition,
    the downlink's exact (unamplified) or CLT mu, the head's CLT mu (Bu et al. 2020)."""
    head = accountants.clt_mu(m.z_head, Exposure(m.head_steps, m.head_rate))
    down = 0.0 if m.downlink is None else accountants.clt_mu(m.z_down, m.downlink)
    return math.hypot(head, down)


def rdp_epsilon(m: Mixture, neighbors: str, delta: float) -> float:
    """RDP epsilon of the mixture (module docstring)."""
    try:
        eps = _rdp(m, neighbors, float(delta))
    except (OverflowError, FloatingPointError, ValueError, ZeroDivisionError) as exc:
        raise CannotAnswer(f"RDP failed ({type(exc).__name__})") from None
    if not math.isfinite(eps):
        raise CannotAnswer("RDP gave no finite epsilon at any order")
    return eps


def _sampled_rdp(z: float, q: float | None, neighbors: str, orders) -> np.ndarray:
    from privzv import rdp

    if q is None or neighbors == "add-remove":
        return rdp.gaussian_rdp(z, orders, q)
    return accountants.replace_one_rdp(q, z, orders)


@functools.lru_cache(maxsize=4096)
def _rdp(m: Mixture, neighbors: str, delta: float) -> float:
    from privzv import rdp

    orders = rdp.DEFAULT_ORDERS
    with np.errstate(all="ignore"):
        total = m.head_steps * _sampled_rdp(m.z_head, m.head_rate, neighbors, orders)
        if m.downlink is not None:
            total = total + m.downlink.compositions * _sampled_rdp(
                m.z_down, m.downlink.sampling_rate, neighbors, orders
            )
        return rdp.epsilon(orders, total, delta)


_DIRECTIONS = {"replace-one": ("replace",), "add-remove": ("remove", "add")}


def _parts(m: Mixture) -> list[tuple[float, float, int]]:
    """(noise multiplier, sampling probability, times) of each self-composed part."""
    parts = [(m.z_head, m.head_rate, m.head_steps)] if m.head_steps else []
    if m.downlink is not None:
        k, q = m.downlink.compositions, m.downlink.sampling_rate
        parts.append((m.z_down / math.sqrt(k), 1.0, 1) if q is None else (m.z_down, q, int(k)))
    return parts


def grid_step(m: Mixture, delta: float, discretization: float) -> float:
    """The PLD step: ``discretization``, at most a twentieth of each part's loss span (so a
    sampled head step, whose losses are squeezed by q_h, still has 20 grid points), at least
    span / PLD_MAX_POINTS of the widest part (else CannotAnswer)."""
    from privzv import gaussian_pmf

    cut = accountants._log_truncation(delta, m.compositions)
    spans = [
        max(
            gaussian_pmf.loss_span(zk, sampling_prob=q, kind=kind, log_truncation=cut)
            for zk, kind in ((z, "remove"), (z, "add"), (2.0 * z, "replace"))
        )
        for z, q, _ in _parts(m)
    ]
    step = min([discretization] + [span / 20.0 for span in spans])
    if max(spans) / step > accountants.PLD_MAX_COARSENING * accountants.PLD_MAX_POINTS:
        raise CannotAnswer(
            f"one release's privacy-loss grid would need about "
            f"{max(spans) / step:.3g} points at discretisation {step:.3g}"
        )
    return float(step)


def pld_epsilon(m: Mixture, neighbors: str, delta: float, estimate: float) -> float:
    """Pessimistic PLD epsilon of the mixture (module docstring), at the discretisation that
    ``estimate`` of the answer calls for (:func:`privzv.accountants.pld_discretization`)."""
    if delta < accountants.PLD_MIN_DELTA:
        raise CannotAnswer(
            f"delta {delta:g} is below {accountants.PLD_MIN_DELTA:g}, the smallest delta pld was measured at"
        )
    disc = accountants.pld_discretization(estimate, m.compositions, delta)
    try:
        return _pld(m, neighbors, float(delta), grid_step(m, delta, disc))
    except (OverflowError, FloatingPointError, MemoryError, ValueError) as exc:
        raise CannotAnswer(f"the PLD failed ({type(exc).__name__})") from None


@functools.lru_cache(maxsize=1024)
def _pld(m: Mixture, neighbors: str, delta: float, step: float) -> float:
    from privzv import gaussian_pmf, tilted_pld

    parts = _parts(m)
    cut = accountants._log_truncation(delta, m.compositions)
    tail = min(1e-15, 1e-4 * delta) / (3.0 * len(parts))
    eps = -math.inf
    for kind in _DIRECTIONS[neighbors]:
        pmfs = []
        for z, q, times in parts:
            try:
                pmfs.append(
                    (
                        gaussian_pmf.release_pmf(
                            2.0 * z if kind == "replace" else z,
                            sampling_prob=q,
                            kind=kind,
                            discretization=step,
                            log_truncation=cut,
                        ),
                        times,
                    )
                )
            except gaussian_pmf.TooManyPieces as exc:
                raise CannotAnswer(f"one release's privacy-loss PMF would need {exc}") from None
        t = tilted_pld.composed_saddle_tilt(
            [(p.discretization, p.lower, p.probs, times) for p, times in pmfs], delta
        )
        composed, shift = [], 0.0
        for p, times in pmfs:
            tilted = tilted_pld.tilt(p.discretization, p.lower, p.probs, p.infinity_mass, t)
            try:
                composed.append(
                    tilted_pld.self_compose(tilted, times, tail, accountants.PLD_MAX_COMPOSED_POINTS)
                )
            except tilted_pld.GridTooLarge as exc:
                raise CannotAnswer(f"the composed privacy-loss grid would need {exc}") from None
            shift += times * p.loss_shift
        # a staged self-composition ends on a coarser grid (an integer multiple of the step):
        # every part goes onto the common multiple, pessimistically (tilted_pld.coarsen)
        factors = [round(c.discretization / step) for c in composed]
        common = math.lcm(*factors)
        parts_on_grid = [tilted_pld.coarsen(c, common // f) for c, f in zip(composed, factors)]
        whole = functools.reduce(tilted_pld.compose, parts_on_grid)
        eps = max(eps, tilted_pld.epsilon(whole, delta) + shift)
    if not math.isfinite(eps):
        raise CannotAnswer("the PLD gave no finite epsilon at this delta")
    return float(eps)


def unamplified_epsilon(m: Mixture, delta: float) -> float:
    """Ignoring every sampling: k + T_h Gaussians, exactly mu-GDP with mu^2 = k / z_d^2 +
    T_h / z_h^2 (Dong, Roth & Su 2022, Cor. 3.3); an upper bound (joint convexity)."""
    mu2 = m.head_steps / m.z_head**2
    if m.downlink is not None:
        mu2 += m.downlink.compositions / m.z_down**2
    return accountants.gdp_epsilon(math.sqrt(mu2), delta)


def epsilon(m: Mixture, neighbors: str, delta: float, accountant: str) -> tuple[float, str, str | None]:
    """(epsilon, the accountant that answered, why another did not or None) for a registered
    grid accountant (:mod:`privzv.registry`: its ``order`` and ``smallest``): ``best`` the
    smaller of pld and rdp, ``pld`` / ``rdp`` the one asked, falling back to the other, and both
    to :func:`unamplified_epsilon`; each a rigorous upper bound."""
    from privzv import registry

    if not m.compositions:
        return 0.0, accountant, None
    acc = registry.get(accountant)
    answers: dict[str, float] = {}
    failures = []
    for name in acc.order:
        if answers and not acc.smallest:
            break
        try:
            if name == "rdp":
                answers[name] = rdp_epsilon(m, neighbors, delta)
            else:
                estimate = answers.get("rdp") or _estimate(m, neighbors, delta)
                answers[name] = pld_epsilon(m, neighbors, delta, estimate)
        except CannotAnswer as exc:
            failures.append(f"{name}: {exc}")
    answers["unamplified"] = unamplified_epsilon(m, delta)
    name = min(answers, key=lambda n: answers[n])
    return answers[name], name, "; ".join(failures) or None


def _estimate(m: Mixture, neighbors: str, delta: float) -> float:
    try:
        return rdp_epsilon(m, neighbors, delta)
    except CannotAnswer:
        return unamplified_epsilon(m, delta)


__all__ = ["Mixture", "clt_mu", "epsilon", "pld_epsilon", "rdp_epsilon", "unamplified_epsilon"]
