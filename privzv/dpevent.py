"""Export a release schedule as a dp-accounting ``DpEvent``, for other tools.

The event describes one record's exposure under the schedule's threat (:mod:`privzv.threats`):
k rounds (``compositions``), each Poisson-sampled at rate q when the threat amplifies. A round
is the downlink release and, with a DP head, the head update made from the same records: a
``ComposedDpEvent`` of the two Gaussians, inside one ``PoissonSampledDpEvent`` (both see the same
sample). Noise multipliers follow dp-accounting's conventions, which depend on the neighbouring
relation (see :mod:`privzv.accountants`): without sampling, ``GaussianDpEvent(z)`` under
ADD_OR_REMOVE_ONE for either of privzv's relations; with sampling, ``GaussianDpEvent(z)`` under
ADD_OR_REMOVE_ONE (add-remove) or ``GaussianDpEvent(2z)`` under REPLACE_ONE (replace-one). So the
relation travels with the event.

dp-accounting's PLD and RDP accountants compose a Poisson-sampled *single* Gaussian but not a
sampled composition; ``combined=True`` gives the equivalent single Gaussian of the round-level
noise multiplier (z^-2 = z_down^-2 + z_head^-2, :attr:`privzv.release.Release.noise_multiplier`),
which they accept.

With a sampled head (``HeadUpdate.sampling_rate``) the head is a mechanism of its own: the event
is ``ComposedDpEvent([downlink, SelfComposedDpEvent(PoissonSampledDpEvent(q_h,
GaussianDpEvent(z'_head)), T_h)])`` with the downlink's event as above (omitted when withheld),
under REPLACE_ONE (all Gaussians at 2z) for replace-one, since the head is always sampled.
"""

from __future__ import annotations

from privzv.extras import missing_extra
from privzv.release import Release, Schedule
from privzv.threats import exposure

__all__ = ["to_dp_event"]


def to_dp_event(release: Release, schedule: Schedule, *, combined: bool = False):
    """(DpEvent, NeighboringRelation) of one record's exposure (module docstring).

    ``release`` must carry its sigma. Without a DP head, or with ``combined``, the event is
    ``SelfComposedDpEvent(PoissonSampledDpEvent(q, GaussianDpEvent(z')), k)`` (no sampling:
    ``SelfComposedDpEvent(GaussianDpEvent(z), k)``); with a head, the sampled event holds
    ``ComposedDpEvent([GaussianDpEvent(z'_down), GaussianDpEvent(z'_head)])``.
    """
    try:
        import dp_accounting as dpa
    except ModuleNotFoundError as exc:
        raise missing_extra(exc) or exc from None

    exp = exposure(release, schedule)
    z = release.noise_multiplier
    if exp.head_steps is not None:
        return _mixture_event(dpa, release, exp, z)
    sampled = exp.sampling_rate is not None
    replace = sampled and release.neighbors == "replace-one"
    scale = 2.0 if replace else 1.0
    relation = dpa.NeighboringRelation.REPLACE_ONE if replace else dpa.NeighboringRelation.ADD_OR_REMOVE_ONE
    if release.head is None or combined:
        round_event = dpa.GaussianDpEvent(scale * z)
    else:
        z_down, z_head = release.split(z)
        assert z_head is not None
        round_event = dpa.ComposedDpEvent(
            [dpa.GaussianDpEvent(scale * z_down), dpa.GaussianDpEvent(scale * z_head)]
        )
    if sampled:
        round_event = dpa.PoissonSampledDpEvent(exp.sampling_rate, round_event)
    return dpa.SelfComposedDpEvent(round_event, exp.compositions), relation


def _mixture_event(dpa, release: Release, exp, z: float):
    """The sampled head's (DpEvent, NeighboringRelation) (module docstring)."""
    replace = release.neighbors == "replace-one"
    scale = 2.0 if replace else 1.0
    relation = dpa.NeighboringRelation.REPLACE_ONE if replace else dpa.NeighboringRelation.ADD_OR_REMOVE_ONE
    z_down, z_head = release.split(z)
    assert z_head is not None and release.head is not None
    events = [
        dpa.SelfComposedDpEvent(
            dpa.PoissonSampledDpEvent(release.head.sampling_rate, dpa.GaussianDpEvent(scale * z_head)),
            exp.head_steps,
        )
    ]
    if not release.withholds and exp.compositions:
        down = dpa.GaussianDpEvent(scale * z_down)
        if exp.sampling_rate is not None:
            down = dpa.PoissonSampledDpEvent(exp.sampling_rate, down)
        events.insert(0, dpa.SelfComposedDpEvent(down, exp.compositions))
    return dpa.ComposedDpEvent(events), relation
