"""What ``privzv attack run`` prints: a table of the attack against its baseline, and its verdict."""

from __future__ import annotations

import numbers

_SHOWN = ("run", "method", "dataset", "server_kind", "threat", "epsilon", "delta", "sigma")


def _fmt(v) -> str:
    return f"{v:.4g}" if isinstance(v, float) else str(v)


def run_text(r: dict, description: str) -> str:
    """The human rendering of an ``AttackResult.to_dict()`` (``description``: the attack's)."""
    v, s = r["verdict"], r["setting"]
    setting = ", ".join(f"{k} {_fmt(s[k])}" for k in _SHOWN if s.get(k) is not None)
    rows = [
        (
            "metric",
            "attack",
            f"baseline ({v['baseline_name']})",
            "gain",
            f"{v['confidence']:.0%} CI of the gain",
        ),
        (
            v["metric"],
            _fmt(v["value"]),
            _fmt(v["baseline"]),
            _fmt(v["gain"]),
            f"[{v['low']:.4g}, {v['high']:.4g}]",
        ),
    ]
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    table = ["  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in rows]
    skip = {v["metric"], "accuracy_ci", "auc_ci", "mse_gain_ci"}
    others = ", ".join(
        f"{k} {_fmt(x)}"
        for k, x in r["metrics"].items()
        if k not in skip and isinstance(x, (numbers.Number, str))
    )
    lines = [
        f"{r['attack']}: {description}",
        f"run: {setting}",
        f"attacker: {r['party']}, seed {r['seed']}",
        "",
        *table,
        f"interval: {v['interval']}",
        f"also: {others}",
    ]
    if r["nonfinite_values"]:
        lines.append(f"non-finite message values replaced: {r['nonfinite_values']}")
    return "\n".join(lines + ["", f"verdict: {v['line']}"])
