"""The public accounting calls at the float range's edges, every combination of a grid: an answer
(epsilon >= 0, a noise multiplier > 0, never NaN) or a PrivzvError, never another exception or a
warning (warnings are raised as errors). Complements ``fuzz_accounting.py``, whose draws stay in
the documented ranges.

- ``privzv.epsilon``: noise multiplier {1e-300, 1e-6, 1e6, 1e300} x steps {1, 1e9, 1e15} x
  sample rate {device threat (D 1e6, B 1), 1e-300, 1e-9, 1} x delta {1e-300, 1e-12, 0.999} x
  accountants best, pld, rdp, gdp-clt;
- ``privzv.noise_multiplier``: target epsilon {1e-300, 1e-12, 1e-3, 1, 1e3, 1e300} x steps {1,
  1e6, 1e12} x the same exposures (1e-6 for 1e-9) x delta {1e-300, 1e-12, 0.5} x the four
  accountants, and with a DP head (``head_clip`` 1) under the device threat.

Prints one JSON object: calls, answered, refused (PrivzvError), failures (listed with their
input), the slowest call's CPU seconds and the calls over 10 s (listed; no limit is asserted).

    python benchmarks/fuzz_extremes.py
"""

from __future__ import annotations

import itertools
import json
import math
import time
import warnings

import privzv
from privzv.errors import PrivzvError

ACCOUNTANTS = ("best", "pld", "rdp", "gdp-clt")
DEVICE = dict(threat="device", dataset_size=10**6, batch_size=1)


def _exposures(rate: float) -> list[dict]:
    return [DEVICE] + [dict(threat="eavesdropper", sample_rate=q) for q in (1e-300, rate, 1.0)]


def epsilon_calls():
    grid = itertools.product(
        (1e-300, 1e-6, 1e6, 1e300), (1, 10**9, 10**15), _exposures(1e-9), (1e-300, 1e-12, 0.999), ACCOUNTANTS
    )
    for z, steps, how, delta, accountant in grid:
        kwargs = dict(noise_multiplier=z, delta=delta, steps=steps, accountant=accountant, **how)
        yield privzv.epsilon, kwargs, "epsilon"


def calibration_calls():
    grid = itertools.product(
        (1e-300, 1e-12, 1e-3, 1.0, 1e3, 1e300),
        (1, 10**6, 10**12),
        _exposures(1e-6),
        (1e-300, 1e-12, 0.5),
        ACCOUNTANTS,
        (None, 1.0),
    )
    for eps, steps, how, delta, accountant, head in grid:
        if head is not None and how is not DEVICE:
            continue
        kwargs = dict(target_epsilon=eps, target_delta=delta, steps=steps, accountant=accountant, **how)
        if head is not None:
            kwargs["head_clip"] = head
        yield privzv.noise_multiplier, kwargs, "noise_multiplier"


def check(call, kwargs: dict, field: str) -> str | None:
    """None if ``call(**kwargs)`` answers in range or refuses with a PrivzvError, else why not."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        try:
            value = getattr(call(**kwargs), field)
        except PrivzvError:
            return "refused"
        except Exception as exc:  # noqa: BLE001 - the point: anything else is a failure
            return f"{type(exc).__name__}: {exc}"
    ok = value >= 0 if field == "epsilon" else value > 0
    return None if ok and not math.isnan(value) else f"{field} = {value!r}"


def main() -> None:
    calls = answered = refused = 0
    failures, slow, slowest = [], [], 0.0
    for call, kwargs, field in itertools.chain(epsilon_calls(), calibration_calls()):
        start = time.process_time()
        why = check(call, kwargs, field)
        cpu = time.process_time() - start
        calls += 1
        slowest = max(slowest, cpu)
        if cpu > 10.0:
            slow.append({"call": call.__name__, **kwargs, "cpu_s": round(cpu, 1)})
        if why is None:
            answered += 1
        elif why == "refused":
            refused += 1
        else:
            failures.append({"call": call.__name__, **kwargs, "why": why})
    out = dict(
        calls=calls, answered=answered, refused=refused, failures=failures, slowest_cpu_s=round(slowest, 2)
    )
    print(json.dumps({**out, "over_10_s": slow}))


if __name__ == "__main__":
    main()
