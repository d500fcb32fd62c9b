"""Where device training pays under whole-run DP (issue 10, item 3): bottleneck settings, JSON.

Settings (``SETTINGS``): MNIST-1D (4 devices), digits (4 devices) and mnist-5k (7 devices), all
with 2-dimensional device embeddings, so random (frozen) device models lose information. Every
private row is whole-run DP (``device`` threat, ``pld``, delta 1e-5, downlink and DP head in one
epsilon) with today's defaults: the pooled DP head (``methods.head.window``), C_h from
``training.defaults`` (tuned where ``training/tuned.py`` has it, else the fallback 0.1; each line
records the resolved values under ``resolved``). Rows, at epsilon in ``EPSILONS``, seeds ``--seeds``:

* ``dpzv``: C = 0.1, ZO device rate ``DPZV_RATE[name]`` / sqrt(d) with momentum 0.9 (picked on
  the tuning seed, ``--part tune``), head share 0.5;
* ``frozen``: the whole-budget control, paired per seed: the same run with ``freeze="devices"``
  and ``head_share=1`` (same seed: same split and initial models; no downlink released, the
  whole epsilon on the DP head);
* ``fo-plain``: first-order VFL without noise (fo-vector at epsilon inf, C = 10) at its own rate
  ``FO_RATE[name]`` (device and server), picked by a rate sweep on the tuning seed;
* ``fo-vector``: the downlink-noise first-order baseline, C = 0.1, device rate 5e-4 (the
  issue-3 sweep's choice on digits and mnist-5k, training/tuned.py), the DP head's defaults;
* ``czofo``: VFL-CZOFO (a ZO device step on the downlink's noisy gradient vector), with
  fo-vector's C and device rate (also the issue-3 sweep's choice for czofo), the DP head's
  defaults;
* ``rr-prior``: randomised response with a prior (Ghazi et al. 2021) then first-order VFL on the
  privatised labels at ``FO_RATE[name]``: **labels only, label neighbours, pure epsilon** (not
  comparable with the record-level epsilons of the other rows).

Tuning uses seed ``TUNING_SEED`` only (``--part tune``; results in ``--tune-out``); the grid
refuses it, so no reported cell is a tuning run. Stages: ``epochs`` (dpzv at epsilon 5 over
``TUNE_EPOCHS`` x ``TUNE_RATES``: the most accurate final run gives the setting's epochs and
rate), ``window`` (mnist-5k, dpzv and the control at epsilon 5, head windows ``TUNE_WINDOWS``),
``fo-plain`` (``TUNE_FO_RATES`` at epsilon inf).

``--part grid`` runs every missing cell in ``PHASES`` order (dpzv and the control at epsilon
1/2/5/inf first, for every setting and seed), one process, results appended to ``--out`` as JSON
lines (resumable), then prints the report; ``--part report`` only reads ``--out``; ``--plot DIR``
writes accuracy vs epsilon (with the control's band: min..max over seeds) and accuracy vs bytes,
named after ``--out`` (``bottleneck_v2_digits.png`` ...).
``--part collapse`` re-measures the issue's diverging digits run (lr 0.03, no momentum, C = 10; 12 epochs)
beside the new default (0.0125/sqrt(d), momentum 0.9) and the ZO step norms eta*|Delta|*sqrt(d)
of three model sizes at both rates.

The report states, per setting and epsilon <= 5, whether DPZV beats the paired control by >= 0.05
on every seed, and the signal-to-noise estimate per run SNR = sqrt(E D B) / z (E epochs, D records, B batch, z the
downlink noise multiplier; ~ sqrt(D B / M) at a fixed epsilon, ``_snr``) with the D*B at which
SNR would reach the level of the smallest epsilon where DPZV did beat the control.
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

from privzv.errors import PrivzvError
from privzv.training import data, defaults, run, seeds
from privzv.training.config import TrainConfig

# epochs, DPZV_RATE and FO_RATE: picked on TUNING_SEED (docs/results.md, issue 10 section)
SETTINGS = {
    "digits": dict(dataset="digits", devices=4, embed_dim=2, batch_size=32, epochs=20.0),
    "mnist1d": dict(dataset="mnist1d", devices=4, embed_dim=2, batch_size=64, epochs=3.0),
    "mnist-5k": dict(dataset="mnist-5k", devices=7, embed_dim=2, batch_size=64, epochs=4.0),
}
EPSILONS = (1.0, 2.0, 5.0, 10.0, math.inf)
ROWS = ("dpzv", "frozen", "fo-plain", "fo-vector", "czofo", "rr-prior")
# the grid's order: the most important cells first (each phase over every seed and setting)
PHASES = (
    (("dpzv", "frozen"), (5.0, math.inf)),
    (("fo-plain",), (math.inf,)),
    (("dpzv", "frozen"), (1.0, 2.0)),
    (("dpzv", "frozen"), (10.0,)),
    (("fo-vector", "rr-prior"), (5.0,)),
    (("fo-vector", "rr-prior"), (1.0, 2.0, 10.0)),
    (("czofo",), (5.0, 1.0, 2.0, 10.0)),
)
TARGET_GAIN = 0.05
DELTA = 1e-5
TUNING_SEED = 100
# ZO device rate = DPZV_RATE / sqrt(d): 0.074 is digits' tuned rate (0.003 with momentum 0.9 at
# d = 610, training/tuned.py) in the size-normalised form of training.defaults
DPZV_RATE = {"digits": 0.074, "mnist1d": 0.3, "mnist-5k": 0.074}
FO_RATE = {"digits": 0.02, "mnist1d": 0.02, "mnist-5k": 0.02}
TUNE_EPOCHS = {"digits": (10.0, 20.0), "mnist1d": (3.0, 6.0), "mnist-5k": (2.0, 4.0)}
TUNE_RATES = (0.074, 0.3)
TUNE_WINDOWS = (0, 1, 4)
TUNE_FO_RATES = (0.02, 0.05, 0.2)  # the default, 0.4x and 4x


def device_dim(setting: dict) -> int:
    return _device_dim(setting["dataset"], setting["devices"], setting["embed_dim"])


@functools.cache
def _device_dim(dataset: str, devices: int, embed_dim: int) -> int:
    """The largest device model's parameter count (the dataset is loaded once per setting, not
    once per cell)."""
    ds = data.load(dataset, devices)
    return max(defaults.parameter_count(ds, m, embed_dim) for m in range(ds.devices))


def row_config(
    row: str, setting: dict, epsilon: float, seed: int, zo_rate: float, fo_rate: float, **changes
) -> TrainConfig | None:
    """The run of one cell (None where the row has no cell at this epsilon). ``zo_rate``: eta *
    sqrt(d) of DPZV's device step (divided by sqrt(d) here); ``fo_rate``: the first-order rates
    of ``fo-plain`` and ``rr-prior``; ``changes``: extra config fields (tuning only)."""
    base = dict(
        setting,
        epsilon=epsilon,
        delta=DELTA,
        accountant="pld",
        seed=seed,
        evals=8,
        transcripts=False,
        **changes,
    )
    if row in ("dpzv", "frozen"):
        frozen = row == "frozen"
        return TrainConfig(
            **base,
            method="dpzv",
            clip=0.1,
            lr_device=zo_rate / math.sqrt(device_dim(setting)),
            freeze="devices" if frozen else None,
            head_share=1.0 if frozen and math.isfinite(epsilon) else 0.5,
        )
    if row in ("fo-vector", "czofo"):  # the issue-3 sweep's C and device rate for both
        return TrainConfig(**base, method=row, clip=0.1, lr_device=5e-4) if math.isfinite(epsilon) else None
    if row == "fo-plain":
        return (
            TrainConfig(**base, method="fo-vector", clip=10.0, lr_device=fo_rate, lr_server=fo_rate)
            if math.isinf(epsilon)
            else None
        )
    return (
        TrainConfig(**base, method="rr-prior", clip=10.0, lr_device=fo_rate, lr_server=fo_rate)
        if math.isfinite(epsilon)
        else None
    )


def key(name: str, row: str, epsilon: float, seed: int) -> str:
    return f"{name}|{row}|{epsilon:g}|{seed}"


def run_cell(config: TrainConfig) -> dict:
    resolved, _ = defaults.resolve(config, data.load(config.dataset, config.devices))
    with tempfile.TemporaryDirectory() as tmp:
        s = run.train(config, Path(tmp) / "run", secret_seed=seeds.derive(config.seed, "bench-secret"))
    z = None
    if s["mechanisms"]:
        z = next((m["noise_multiplier"] for m in s["mechanisms"] if m["mechanism"] == "downlink"), None)
    from privzv.training.methods import head

    return {
        "final": s["test_accuracy"],
        "best": s["best"]["test_accuracy"],
        "bytes": s["bytes_up"] + s["bytes_down"],
        "rounds": s["rounds"],
        "sigma": s["sigma"],
        "z_downlink": z,
        "mechanisms": s["mechanisms"],
        "epsilon_spent": s["epsilon_spent"],
        "diverged": s["diverged"] is not None,
        "wall_seconds": s["wall_seconds"],
        "protects": s.get("protects"),
        "resolved": {
            "clip": resolved.clip,
            "head_clip": resolved.head_clip,
            "lr_device": resolved.lr_device,
            "lr_server": resolved.lr_server,
            "head_window": head.window(resolved),
        },
        "curve": [(c["bytes_up"] + c["bytes_down"], c["test_accuracy"]) for c in s["curve"]],
    }


def _record(
    out: Path,
    k: str,
    name: str,
    row: str,
    epsilon: float,
    seed: int,
    config: TrainConfig,
    extra: dict | None = None,
) -> dict:
    start = time.perf_counter()
    result = run_cell(config)
    line = {
        "key": k,
        "setting": name,
        "row": row,
        "epsilon": _num(epsilon),
        "seed": seed,
        "config": config.to_dict(),
        **(extra or {}),
        **result,
    }
    with open(out, "a") as fh:
        fh.write(json.dumps(line) + "\n")
    print(
        f"{k}: final {result['final']:.3f} best {result['best']:.3f} ({time.perf_counter() - start:.1f} s)",
        file=sys.stderr,
        flush=True,
    )
    return line


def cells(names, seeds_: list[int], epsilons, rows):
    """(name, row, epsilon, seed) of the grid in ``PHASES`` order, restricted to the arguments."""
    for phase_rows, phase_eps in PHASES:
        for seed in seeds_:
            for name in names:
                for epsilon in phase_eps:
                    for row in phase_rows:
                        if row in rows and epsilon in epsilons:
                            yield name, row, epsilon, seed


def grid(out: Path, names, seeds_: list[int], epsilons, rows) -> None:
    if TUNING_SEED in seeds_:
        raise PrivzvError(f"--seeds {TUNING_SEED}: the tuning seed is not a reported seed; use --part tune")
    done = {r["key"] for r in _read(out)}
    for name, row, epsilon, seed in cells(names, seeds_, epsilons, rows):
        config = row_config(row, SETTINGS[name], epsilon, seed, DPZV_RATE[name], FO_RATE[name])
        k = key(name, row, epsilon, seed)
        if config is not None and k not in done:
            _record(out, k, name, row, epsilon, seed, config, {"setting_params": SETTINGS[name]})


def tune(out: Path, stage: str, names) -> None:
    """The seed-``TUNING_SEED`` runs of one tuning stage (module docstring), appended to ``out``."""
    done = {r["key"] for r in _read(out)}
    for name in names:
        setting = SETTINGS[name]
        runs = []
        if stage == "epochs":
            runs = [
                (f"{name}|dpzv|5|epochs {e:g}|rate {r:g}", "dpzv", 5.0, dict(setting, epochs=e), r, {})
                for e in TUNE_EPOCHS[name]
                for r in TUNE_RATES
            ]
        elif stage == "window" and setting["devices"] > 4:
            runs = [
                (f"{name}|{row}|5|window {q}", row, 5.0, setting, DPZV_RATE[name], {"head_window": q})
                for q in TUNE_WINDOWS
                for row in ("dpzv", "frozen")
            ]
        elif stage == "fo-plain":
            runs = [
                (f"{name}|fo-plain|inf|rate {r:g}", "fo-plain", math.inf, setting, r, {})
                for r in TUNE_FO_RATES
            ]
        for k, row, eps, s, rate, changes in runs:
            if k in done:
                continue
            config = row_config(row, s, eps, TUNING_SEED, rate, rate, **changes)
            _record(out, k, name, row, eps, TUNING_SEED, config, {"stage": stage, "setting_params": s})


def tuning_report(out: Path) -> list[dict]:
    """Every tuning run: its key, final and best accuracy, the resolved values and wall seconds."""
    return [
        {k: r[k] for k in ("key", "final", "best", "diverged", "wall_seconds", "resolved", "z_downlink")}
        for r in _read(out)
    ]


def _num(x: float):
    return None if math.isinf(x) else x


def _read(out: Path) -> list[dict]:
    return [json.loads(line) for line in out.read_text().splitlines()] if out.exists() else []


def _stats(values: list[float]) -> dict | None:
    if not values:
        return None
    return {
        "mean": statistics.fmean(values),
        "std": statistics.stdev(values) if len(values) > 1 else 0.0,
        "min": min(values),
        "max": max(values),
        "seeds": len(values),
        "values": values,
    }


def report(out: Path) -> dict:
    rows = _read(out)
    table, verdicts, snr, settings, resolved = {}, [], {}, {}, {}
    for name in dict.fromkeys(r["setting"] for r in rows):
        mine = [r for r in rows if r["setting"] == name]
        settings[name] = mine[0].get("setting_params", SETTINGS.get(name))
        resolved[name] = {
            r["row"]: r["resolved"] for r in reversed(mine) if r.get("resolved") and r["epsilon"] is not None
        }
        table[name] = {}
        for row in ROWS:
            table[name][row] = {}
            for eps in EPSILONS:
                cells = [r for r in mine if r["row"] == row and r["epsilon"] == _num(eps)]
                stat = _stats([c["final"] for c in cells])
                if stat:
                    stat["bytes"] = statistics.fmean(c["bytes"] for c in cells)
                    stat["diverged"] = sum(c["diverged"] for c in cells)
                    table[name][row][f"{eps:g}"] = stat
        for eps in EPSILONS:
            pairs = {}
            for r in mine:
                if r["epsilon"] == _num(eps) and r["row"] in ("dpzv", "frozen"):
                    pairs.setdefault(r["seed"], {})[r["row"]] = r["final"]
            paired = sorted(seed for seed, p in pairs.items() if len(p) == 2)
            gains = [pairs[seed]["dpzv"] - pairs[seed]["frozen"] for seed in paired]
            if gains:
                verdicts.append(
                    {
                        "setting": name,
                        "epsilon": _num(eps),
                        "seeds": paired,
                        "gains": gains,
                        "beats_by_0.05_every_seed": all(g >= TARGET_GAIN for g in gains),
                    }
                )
        snr[name] = _snr(settings[name], mine)
    hits = [
        v
        for v in verdicts
        if v["epsilon"] is not None and v["epsilon"] <= 5 and v["beats_by_0.05_every_seed"]
    ]
    return {
        "settings": settings,
        "resolved": resolved,
        "wall_seconds": sum(r["wall_seconds"] for r in rows),
        "runs": len(rows),
        "epsilons": [_num(e) for e in EPSILONS],
        "table": table,
        "paired_gain": verdicts,
        "goal_met": bool(hits),
        "goal_met_at": hits,
        "snr": snr,
    }


def _snr(setting: dict, mine: list[dict]) -> dict:
    """Per-run SNR = sqrt(E D B) / z at each epsilon (E epochs, D records, B batch; z the downlink
    noise multiplier of the DPZV runs): each device takes E D / B steps on a clipped batch mean
    whose noise is z 2C / B, so the noise on the summed signal shrinks like sqrt(E D / B) B / z.
    Under the ``device`` threat z at a fixed epsilon grows like sqrt(E M) (a record is in about
    E M releases), so SNR ~ sqrt(D B / M) up to a factor fixed by epsilon, whatever E. Also the
    D*B at which epsilon 5's SNR would equal that of the reference epsilon: the smallest where
    DPZV beat its control by TARGET_GAIN on every seed, else (marked) the smallest where it did so
    on the mean over seeds; D*B must grow by (SNR_reference / SNR_5)^2."""
    records = len(data.load(setting["dataset"], setting["devices"]).y_train)
    db = records * setting["batch_size"]
    out = {
        "D": records,
        "B": setting["batch_size"],
        "M": setting["devices"],
        "E": setting["epochs"],
        "by_epsilon": {},
    }
    for eps in EPSILONS[:-1]:
        zs = [r["z_downlink"] for r in mine if r["row"] == "dpzv" and r["epsilon"] == eps and r["z_downlink"]]
        if zs:
            z = statistics.fmean(zs)
            out["by_epsilon"][f"{eps:g}"] = {"z": z, "snr": math.sqrt(setting["epochs"] * db) / z}
    gains = {}
    for r in mine:
        if r["row"] in ("dpzv", "frozen"):
            gains.setdefault(r["epsilon"], {}).setdefault(r["seed"], {})[r["row"]] = r["final"]
    every, mean = [], []
    for eps, seeds_ in gains.items():
        if eps is None:
            continue
        g = [p["dpzv"] - p["frozen"] for p in seeds_.values() if len(p) == 2]
        if g and min(g) >= TARGET_GAIN:
            every.append(eps)
        if g and statistics.fmean(g) >= TARGET_GAIN:
            mean.append(eps)
    ref, kind = (
        (min(every), "every seed")
        if every
        else ((min(mean), "mean over seeds only") if mean else (None, None))
    )
    out["reference_epsilon"], out["reference_kind"] = ref, kind
    at5 = out["by_epsilon"].get("5")
    if ref is not None and at5 and f"{ref:g}" in out["by_epsilon"]:
        need = out["by_epsilon"][f"{ref:g}"]["snr"]
        out["DB_now"] = db
        out["DB_needed_at_epsilon_5"] = db * (need / at5["snr"]) ** 2
    out["model"] = _shrinkage(gains, out["by_epsilon"], db)
    return out


def _shrinkage(gains: dict, by_eps: dict, db: int) -> dict | None:
    """A rough extrapolation where no epsilon qualifies: gain(SNR) = G SNR^2 / (SNR^2 + s0^2), G the
    no-noise gain (mean, or the smallest seed's), s0 the geometric mean of the values each finite
    epsilon's mean gain implies. Returns s0, the SNR at which the gain reaches TARGET_GAIN and the
    D*B at which epsilon 5 would have it (None where G <= TARGET_GAIN: device training does not
    pay enough even without noise at this budget)."""
    inf = [p["dpzv"] - p["frozen"] for p in gains.get(None, {}).values() if len(p) == 2]
    if not inf or "5" not in by_eps:
        return None
    s0s = []
    for eps, seeds_ in gains.items():
        g = [p["dpzv"] - p["frozen"] for p in seeds_.values() if len(p) == 2]
        if eps is not None and g and f"{eps:g}" in by_eps and 0 < statistics.fmean(g) < statistics.fmean(inf):
            snr = by_eps[f"{eps:g}"]["snr"]
            s0s.append(snr * math.sqrt(statistics.fmean(inf) / statistics.fmean(g) - 1))
    if not s0s:
        return None
    s0 = math.exp(statistics.fmean(math.log(x) for x in s0s))
    out = {"s0": s0, "no_noise_gain_mean": statistics.fmean(inf), "no_noise_gain_min": min(inf)}
    for label, big_g in (("mean", statistics.fmean(inf)), ("every_seed", min(inf))):
        if big_g > TARGET_GAIN:
            snr = s0 * math.sqrt(TARGET_GAIN / (big_g - TARGET_GAIN))
            out[f"snr_needed_{label}"] = snr
            out[f"DB_needed_at_epsilon_5_{label}"] = db * (snr / by_eps["5"]["snr"]) ** 2
    return out


# the resolved values that matter per row (rr-prior has no DP head; the control trains no devices)
SHOWN = {
    "dpzv": ("clip", "head_clip", "lr_device", "head_window"),
    "frozen": ("head_clip", "head_window"),
    "fo-vector": ("clip", "head_clip", "lr_device", "head_window"),
    "czofo": ("clip", "head_clip", "lr_device", "head_window"),
    "rr-prior": ("lr_device", "lr_server"),
    "fo-plain": (),
}


def markdown(rep: dict) -> str:
    """The report's tables (mean +- std [seeds] per row and epsilon; paired gains) as markdown."""
    lines = []
    names = {
        "dpzv": "dpzv",
        "frozen": "frozen devices (paired control)",
        "fo-vector": "fo-vector",
        "czofo": "czofo (downlink vector noise)",
        "fo-plain": "first-order VFL, no noise",
        "rr-prior": "rr-prior (labels only, label DP)",
    }
    for name, table in rep["table"].items():
        s = rep["settings"][name]
        used = "; ".join(
            f"{row}: " + ", ".join(f"{k} {v:.3g}" for k, v in r.items() if v is not None and k in SHOWN[row])
            for row, r in sorted(rep.get("resolved", {}).get(name, {}).items())
        )
        lines += [
            f"**{name}** ({s['devices']} devices, embed_dim {s['embed_dim']}, B = {s['batch_size']}, "
            f"{s['epochs']:g} epochs): final test accuracy, mean +- std [seeds]"
            + (f". Private runs used {used}" if used else ""),
            "",
            "| row | eps=1 | eps=2 | eps=5 | eps=10 | eps=inf |",
            "|---|---|---|---|---|---|",
        ]
        for row in ROWS:
            cells = []
            for k in ("1", "2", "5", "10", "inf"):
                c = table.get(row, {}).get(k)
                cells.append("-" if c is None else f"{c['mean']:.3f} +- {c['std']:.3f} [{c['seeds']}]")
            if any(c != "-" for c in cells):
                lines.append(f"| {names[row]} | " + " | ".join(cells) + " |")
        lines.append("")
    lines += ["| setting | eps | dpzv - frozen, per seed | >= 0.05 on every seed |", "|---|---|---|---|"]
    for v in rep["paired_gain"]:
        eps = "inf" if v["epsilon"] is None else f"{v['epsilon']:g}"
        gains = ", ".join(f"{g:+.3f}" for g in v["gains"])
        lines.append(
            f"| {v['setting']} | {eps} | {gains} | {'yes' if v['beats_by_0.05_every_seed'] else 'no'} |"
        )
    lines += [
        "",
        "| setting | D | B | M | E | z (eps 1 / 2 / 5 / 10) | SNR = sqrt(E D B) / z |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, n in rep["snr"].items():
        by = n["by_epsilon"]
        zs = " / ".join(f"{by[k]['z']:.2f}" if k in by else "-" for k in ("1", "2", "5", "10"))
        snrs = " / ".join(f"{by[k]['snr']:.1f}" if k in by else "-" for k in ("1", "2", "5", "10"))
        lines.append(f"| {name} | {n['D']} | {n['B']} | {n['M']} | {n['E']:g} | {zs} | {snrs} |")
    return "\n".join(lines) + "\n"


def plot(out: Path, folder: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rep = report(out)
    rows = _read(out)
    folder.mkdir(parents=True, exist_ok=True)
    for name, table in rep["table"].items():
        fig, (a, b) = plt.subplots(1, 2, figsize=(11, 4))
        xs = [1, 2, 5, 10, 20]
        labels = ["1", "2", "5", "10", "inf"]
        frozen = table.get("frozen", {})
        lo = [frozen.get(k, {}).get("min") for k in labels]
        hi = [frozen.get(k, {}).get("max") for k in labels]
        pts = [(x, low, high) for x, low, high in zip(xs, lo, hi) if low is not None]
        if pts:
            a.fill_between(
                [p[0] for p in pts],
                [p[1] for p in pts],
                [p[2] for p in pts],
                alpha=0.25,
                color="grey",
                label="frozen control (min..max over seeds)",
            )
        for row in ("dpzv", "fo-vector", "czofo", "rr-prior", "fo-plain"):
            got = [
                (x, table[row][k]["mean"], table[row][k]["std"])
                for x, k in zip(xs, labels)
                if k in table.get(row, {})
            ]
            if got:
                a.errorbar(
                    [g[0] for g in got],
                    [g[1] for g in got],
                    [g[2] for g in got],
                    marker="o",
                    capsize=3,
                    label=row + (" (labels only, label DP)" if row == "rr-prior" else ""),
                )
        a.set_xscale("log")
        a.set_xticks(xs, labels)
        a.set_xlabel("whole-run epsilon (inf: no noise)")
        a.set_ylabel("final test accuracy")
        a.set_title(f"{name}: accuracy vs epsilon")
        a.legend(fontsize=7)
        for r in rows:
            if (
                r["setting"] == name
                and r["seed"] == min(x["seed"] for x in rows)
                and r["epsilon"] in (5.0, None)
                and r["row"] in ("dpzv", "frozen", "fo-vector", "fo-plain")
            ):
                curve = r["curve"]
                eps = "inf" if r["epsilon"] is None else format(r["epsilon"], "g")
                b.plot(
                    [c[0] / 1e6 for c in curve],
                    [c[1] for c in curve],
                    marker=".",
                    label=f"{r['row']} eps={eps}",
                )
        b.set_xlabel("bytes up + down (MB)")
        b.set_ylabel("test accuracy")
        b.set_title(f"{name}: accuracy vs bytes (first seed)")
        b.legend(fontsize=7)
        fig.tight_layout()
        for ext in ("png", "svg"):
            fig.savefig(folder / f"{out.stem}_{name}.{ext}")
        plt.close(fig)


def collapse() -> dict:
    """The issue's diverging run beside the new defaults on digits with 2-dim embeddings (C = 10,
    no noise, 12 epochs, seed 0), then :func:`steps`."""
    result = {"runs": {}}
    base = dict(
        dataset="digits", devices=4, embed_dim=2, epochs=12.0, evals=12, transcripts=False, clip=10.0, seed=0
    )
    for label, changes in (
        ("lr 0.03, momentum 0 (old default)", dict(lr_device=0.03, device_momentum=0.0)),
        ("lr 0.003, momentum 0.9 (digits' tuned rate as the trainer converts it)", dict(lr_device=0.003)),
        (
            "0.0125/sqrt(d) = 5.06e-4, momentum 0.9 (default where nothing is tuned)",
            dict(lr_device=defaults.ZO_RATE / math.sqrt(610)),
        ),
    ):
        config = TrainConfig(**base, **changes)
        with tempfile.TemporaryDirectory() as tmp:
            s = run.train(config, Path(tmp) / "r", secret_seed=1)
        result["runs"][label] = {
            "final": s["test_accuracy"],
            "best": s["best"]["test_accuracy"],
            "best_round": s["best"]["round"],
            "diverged": s["diverged"],
            "lr_device": config.lr_device,
            "device_momentum": config.device_momentum,
            "curve": [(c["round"], c["test_accuracy"], c["test_loss"]) for c in s["curve"]],
        }
    result.update(steps())
    return result


def steps() -> dict:
    """ZO step norms ||w' - w|| = eta |Delta| sqrt(d) of device 0 over 20 noise-free rounds (no
    momentum, C = 10) at a fixed eta = 0.03 and at eta = ZO_RATE / sqrt(d), for three model sizes."""
    result = {"step_norms": []}
    for ds_name, devices, embed in (("digits", 4, 2), ("mnist1d", 4, 2), ("mnist-5k", 7, 2)):
        ds = data.load(ds_name, devices)
        d = defaults.parameter_count(ds, 0, embed)
        for label, lr in (("fixed 0.03", 0.03), ("0.0125/sqrt(d)", defaults.ZO_RATE / math.sqrt(d))):
            config = TrainConfig(
                dataset=ds_name,
                devices=devices,
                embed_dim=embed,
                clip=10.0,
                lr_device=lr,
                device_momentum=0.0,
                transcripts=False,
                seed=0,
            )
            sched = run.build(config, ds, secret_seed=1)
            norms = []
            for _ in range(20):
                device = sched.devices[0]
                before = device.flat.clone()
                up = sched.method.device_send(device, torch.arange(config.batch_size))
                sched.method.round = 0
                down = sched.method.server_reply(sched.server, up)
                sched.method.device_receive(device, down)
                device.scratch.clear()
                norms.append(float((device.flat.double() - before.double()).norm()))
            result["step_norms"].append(
                {
                    "dataset": ds_name,
                    "d": device.flat.numel(),
                    "rate": label,
                    "lr_device": sched.method.lr_device,
                    "mean_step_norm": statistics.fmean(norms),
                    "max_step_norm": max(norms),
                }
            )
    return result


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--part", choices=("tune", "grid", "report", "collapse", "steps"), default="grid")
    p.add_argument("--stage", choices=("epochs", "window", "fo-plain"), help="--part tune: which stage")
    p.add_argument("--settings", nargs="+", choices=tuple(SETTINGS), default=list(SETTINGS))
    p.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    p.add_argument("--epsilons", nargs="+", type=float, default=list(EPSILONS))
    p.add_argument("--rows", nargs="+", choices=ROWS, default=list(ROWS))
    p.add_argument("--out", default="docs/figures/bottleneck_v2.jsonl")
    p.add_argument("--tune-out", default="docs/figures/bottleneck_v2_tuning.jsonl")
    p.add_argument("--plot", help="folder for the figures")
    p.add_argument("--markdown", help="write the report's tables to this file")
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    out = Path(args.out)
    if args.part in ("collapse", "steps"):
        print(json.dumps(collapse() if args.part == "collapse" else steps(), indent=1))
        return 0
    if args.part == "tune":
        if args.stage is None:
            raise PrivzvError("--part tune: give --stage epochs, window or fo-plain")
        tune(Path(args.tune_out), args.stage, args.settings)
        print(json.dumps(tuning_report(Path(args.tune_out)), indent=1))
        return 0
    if args.part == "grid":
        grid(out, args.settings, args.seeds, args.epsilons, args.rows)
    if args.plot:
        plot(out, Path(args.plot))
    rep = report(out)
    if args.markdown:
        Path(args.markdown).write_text(markdown(rep))
    print(json.dumps(rep, indent=1))
    return 0


def cli(argv=None) -> int:
    try:
        return main(argv)
    except PrivzvError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(cli())
