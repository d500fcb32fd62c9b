"""An attack's verdict: its headline metric against its trivial baseline, with an interval.

Each measure names the metric an attack reports (``privzv.attacks.metrics``), its baseline and
the interval of the gain over the baseline, all read from the attack's metrics:

- ``accuracy`` (label inference): gain = accuracy - prior (the majority class on the evaluated
  records, a fixed number for them); interval: Clopper-Pearson of the accuracy over the records.
- ``auc`` (scoring): gain = AUC - 0.5; interval: percentile bootstrap over the records.
- ``mse`` (feature inference): gain = baseline MSE - MSE (the baseline regression's error, e.g.
  own-features-only); interval: percentile bootstrap over the records of the paired difference.

The verdict is "leaks" when the whole interval lies above 0 (the attack beats its baseline at
95% confidence, records taken as independent draws); otherwise "no leak detected at this sample
size" -- which is not a proof of privacy, only of what this many records could show.
"""

from __future__ import annotations

import dataclasses

from privzv.attacks.metrics import BOOTSTRAP, CONFIDENCE
from privzv.errors import PrivzvError


@dataclasses.dataclass(frozen=True)
class Measure:
    """Where a headline metric, its baseline and its interval are in an attack's metrics."""

    metric: str  # key of the attack's value
    baseline: str | float  # key of the baseline's value, or the constant baseline
    interval: str  # key of the interval: of the metric, or (``of_gain``) of the gain
    method: str  # the interval, in words
    lower_is_better: bool = False
    of_gain: bool = False

    def read(self, m: dict) -> tuple[float, float, float, float, float]:
        """(value, baseline, gain, low, high) of the gain, from metrics ``m``."""
        value = float(m[self.metric])
        base = float(self.baseline if isinstance(self.baseline, float) else m[self.baseline])
        sign = -1.0 if self.lower_is_better else 1.0
        low, high = m[self.interval]
        if not self.of_gain:
            low, high = sign * (low - base), sign * (high - base)
        return value, base, sign * (value - base), min(low, high), max(low, high)


MEASURES = {
    "accuracy": Measure("accuracy", "prior", "accuracy_ci", "Clopper-Pearson over records"),
    "auc": Measure("auc", 0.5, "auc_ci", f"bootstrap over records, {BOOTSTRAP} resamples"),
    "mse": Measure(
        "mse",
        "baseline_mse",
        "mse_gain_ci",
        f"paired bootstrap over records, {BOOTSTRAP} resamples",
        lower_is_better=True,
        of_gain=True,
    ),
}


def measure(name: str) -> Measure:
    if name not in MEASURES:
        raise PrivzvError(f"measure {name!r}: allowed are {', '.join(MEASURES)}")
    return MEASURES[name]


@dataclasses.dataclass(frozen=True)
class Verdict:
    """The headline ``metric`` (``value``) against ``baseline_name`` (``baseline``); ``gain`` over
    it (oriented: > 0 means the attack does better) with its interval [``low``, ``high``]."""

    metric: str
    value: float
    baseline_name: str
    baseline: float
    gain: float
    low: float
    high: float
    interval: str
    confidence: float

    @property
    def leaks(self) -> bool:
        return self.low > 0

    def line(self) -> str:
        ci = f"{self.confidence:.0%} CI [{self.low:.3g}, {self.high:.3g}], {self.interval}"
        versus = f"{self.metric} {self.value:.4g} vs {self.baseline_name} {self.baseline:.4g}"
        if self.leaks:
            return f"leaks: attack beats the baseline by {self.gain:.3g} ({versus}; {ci})"
        return f"no leak detected at this sample size: gain {self.gain:.3g} ({versus}; {ci})"

    def to_dict(self) -> dict:
        return {**dataclasses.asdict(self), "leaks": self.leaks, "line": self.line()}


def judge(name: str, metrics: dict, baseline_name: str) -> Verdict:
    """The verdict of measure ``name`` on an attack's ``metrics``."""
    m = measure(name)
    value, base, gain, low, high = m.read(metrics)
    return Verdict(m.metric, value, baseline_name, base, gain, low, high, m.method, CONFIDENCE)
