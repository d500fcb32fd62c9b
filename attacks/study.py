"""The scalar-vs-vector leakage study at equal (epsilon, delta, threat, accountant).

For every target epsilon (inf = no noise) and every noise kind -- DPZV's downlink scalar
(``dpzv``), VAFL's forward vector noise (``vafl``), first-order backward vector noise
(``fo-vector``) -- and every seed: train with ``privzv.training.run.train`` (sigma calibrated by privzv
for that method's release), run every applicable transcript attack (``privzv.attacks.registry``), the
optimal likelihood-ratio attacker on the run's release (``privzv.attacks.release_audit``, device threat
only) and, for DPZV, the malicious-client probes (``privzv.attacks.probe``: plain, saturating,
duplicate-id; the last records how many uplinks the server refused) at the run's sigma.

Setting (recorded in results.json): the server sums the devices' outputs (``server_kind="sum"``,
embed_dim = classes) so that Fu et al.'s direct label inference applies to every method; clip
and learning rates per dataset and method from ``privzv.training.tuned`` where a sweep covers the summing
server, else untuned (``privzv.attacks.study_settings.hyperparameters`` says which); epochs per dataset.
"""

from __future__ import annotations

import dataclasses
import json
import math
import platform
import shutil
import time
import warnings
from pathlib import Path

from privzv.attacks import metrics
from privzv.attacks.study_settings import EPOCHS, EPSILONS, METHODS, SERVER_KIND, hyperparameters
from privzv.cliutil import atomic_output_dir, emit, progress
from privzv.errors import PrivzvError

LR_TRIALS = 5000
PROBE_TARGETS = 100
PROBES = ("malicious", "saturating", "duplicate-id")  # privzv.attacks.probe variants, DPZV only


@dataclasses.dataclass(frozen=True)
class StudyConfig:
    dataset: str = "digits"
    seeds: int = 3
    epsilons: tuple = EPSILONS
    delta: float = 1e-5
    threat: str = "device"
    accountant: str = "pld"
    epochs: float | None = None
    methods: tuple = tuple(METHODS)
    keep_runs: bool = False  # keep each run's transcripts and checkpoint (MBs per run)
    secret_seed: int | None = None  # root of every run's secret seed (None: OS entropy); private

    def __post_init__(self):
        for m in self.methods:
            if m not in METHODS:
                raise PrivzvError(f"--methods {m!r}: allowed are {', '.join(METHODS)}")

    def to_dict(self) -> dict:
        """The public record of the study (the secret seed only as its source)."""
        d = dataclasses.asdict(self)
        d["secret_seed"] = "given" if self.secret_seed is not None else "os-entropy"
        d["epsilons"] = [None if math.isinf(e) else e for e in self.epsilons]
        d["epochs"] = self.epochs if self.epochs is not None else EPOCHS[self.dataset]
        return d


def headline(m: dict) -> tuple[str, float]:
    """(name, value) of an attack's success against its baseline (0 = baseline)."""
    if "advantage" in m:
        return "advantage", m["advantage"]
    if "auc" in m:
        return "auc - 0.5", m["auc"] - 0.5
    if "r2" in m:
        return "r2 - baseline r2", m["r2"] - m["baseline_r2"]
    if "mu_lb" in m:
        return "mu_lb", m["mu_lb"]
    raise PrivzvError(f"metrics {sorted(m)}: no headline metric")


def train_config(cfg: StudyConfig, method: str, epsilon: float, seed: int, num_classes: int, **override):
    """The study's TrainConfig of one run; ``override``: clip / learning rates (the sweep)."""
    from privzv.training.config import TrainConfig

    h = {k: v for k, v in hyperparameters(cfg.dataset, method).items() if k != "source"}
    return TrainConfig(
        dataset=cfg.dataset,
        method=method,
        epsilon=epsilon,
        delta=cfg.delta,
        threat=cfg.threat,
        accountant=cfg.accountant,
        **{**h, **override},
        epochs=cfg.epochs or EPOCHS[cfg.dataset],
        server_kind=SERVER_KIND,
        embed_dim=num_classes,
        evals=1,
        seed=seed,
    )


def run_secret_seed(cfg: StudyConfig, *names) -> int | None:
    """A run's secret seed: derived from the study's secret seed (never from a public one), or
    None (the OS's entropy)."""
    from privzv.training import seeds

    return None if cfg.secret_seed is None else seeds.derive(cfg.secret_seed, *names)


def _optimal_attacker(tcfg, records: int, rounds: int, seed: int) -> dict | None:
    """The LR attacker's bounds on the run's release (None: no noise, or not the device threat)."""
    from privzv.attacks.release_audit import audit_release
    from privzv.training import methods, privacy

    plan = privacy.plan(tcfg, methods.get(tcfg.method), records, rounds)
    if not plan.private or plan.schedule.threat != "device":
        return None
    out = audit_release(
        plan.release, plan.schedule, tcfg.delta, accountant=tcfg.accountant, trials=LR_TRIALS, seed=seed
    )
    return {
        "eps_lb": out["lower"]["eps_lb"],
        "mu_lb": out["lower"]["mu_lb"],
        "eps_upper": out["upper"]["epsilon"],
        "mu_exact": out["mu_exact"],
    }


def one_run(cfg: StudyConfig, method: str, epsilon: float, seed: int, run_dir: Path) -> list[dict]:
    """Train once, attack the run; one row per attack (attack, metrics or error)."""
    from privzv.attacks import probe, registry
    from privzv.training import data, run, run_folder
    from privzv.training.config import TrainConfig

    dataset = data.load(cfg.dataset, TrainConfig().devices, seed=seed)
    tcfg = train_config(cfg, method, epsilon, seed, dataset.num_classes)
    from privzv.training.divergence import Diverged

    run_dir.parent.mkdir(parents=True, exist_ok=True)
    base = {
        "method": method,
        "noise": METHODS[method] if math.isfinite(epsilon) else "none",
        "epsilon": None if math.isinf(epsilon) else epsilon,
        "seed": seed,
        "run": run_dir.name,
    }
    try:
        summary = run.train(tcfg, run_dir, secret_seed=run_secret_seed(cfg, "run", method, epsilon, seed))
    except Diverged as exc:  # recorded, not averaged: the cell's seeds count says how many ran
        shutil.rmtree(run_dir, ignore_errors=True)
        return [{**base, "attack": "training", "diverged": str(exc)}]
    base.update(
        sigma=summary["sigma"], test_accuracy=summary["test_accuracy"], epsilon_spent=summary["epsilon_spent"]
    )
    rows = []
    for name in registry.ATTACKS:
        try:
            result = registry.run_attack(name, run_dir, seed).metrics
        except PrivzvError as exc:  # not applicable here (e.g. a binary-only attack)
            rows.append({**base, "attack": name, "skipped": str(exc)})
            continue
        except Exception as exc:  # an attack failed: record it, do not hide it
            rows.append({**base, "attack": name, "error": f"{type(exc).__name__}: {exc}"[:300]})
            continue
        rows.append({**base, "attack": name, "metrics": _numbers(result)})
    lr = _optimal_attacker(tcfg, len(dataset.y_train), summary["rounds_planned"], seed)
    if lr is not None:
        rows.append({**base, "attack": "optimal-lr", "metrics": lr})
    if not cfg.keep_runs:
        for name in (run_folder.TRANSCRIPTS, run_folder.PRIVATE):
            shutil.rmtree(run_dir / name, ignore_errors=True)
        (run_dir / run_folder.CHECKPOINT).unlink(missing_ok=True)
    if method == "dpzv":
        for variant in PROBES:
            res = probe.label_inference(
                dataset.y_train.numpy(),
                dataset.num_classes,
                variant=variant,
                repeats=dataset.num_classes,
                targets=PROBE_TARGETS,
                sigma=summary["sigma"],
                clip=tcfg.clip,
                batch_size=tcfg.batch_size,
                seed=seed,
                secret_seed=run_secret_seed(cfg, f"probe-{variant}", epsilon, seed),
            )
            rows.append({**base, "attack": f"probe-{variant}", "metrics": _numbers(res)})
    return rows


def _numbers(m: dict) -> dict:
    return {k: float(v) for k, v in m.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}


def summarize(rows: list[dict]) -> list[dict]:
    """Mean and t-interval over seeds of the headline metric and the utility, per cell."""
    cells: dict[tuple, list[dict]] = {}
    for r in rows:
        if "metrics" in r:
            cells.setdefault((r["attack"], r["method"], r["epsilon"]), []).append(r)
    table = []
    for (attack, method, eps), rs in sorted(
        cells.items(), key=lambda kv: (kv[0][0], kv[0][1], kv[0][2] or math.inf)
    ):
        name, _ = headline(rs[0]["metrics"])
        table.append(
            {
                "attack": attack,
                "method": method,
                "epsilon": eps,
                "metric": name,
                "success": metrics.mean_ci([headline(r["metrics"])[1] for r in rs]),
                "test_accuracy": metrics.mean_ci([r["test_accuracy"] for r in rs]),
                "seeds": len(rs),
            }
        )
    return table


def _finite(obj):
    """JSON has no inf/NaN: write them as null (a one-seed interval is (-inf, inf))."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_finite(v) for v in obj]
    return obj


def run_study(cfg: StudyConfig, out: Path, quiet: bool = True) -> dict:
    """Run the whole grid into ``out`` (atomically); returns the results object."""
    import torch

    from privzv.training.run import versions

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # small models on shared cores: one thread is ~8x faster (measured)
    start = time.perf_counter()
    grid = [(m, e, s) for e in cfg.epsilons for m in cfg.methods for s in range(cfg.seeds)]
    rows: list[dict] = []
    try:
        with atomic_output_dir(out) as work, warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            for method, eps, seed in progress(grid, desc="study", quiet=quiet):
                name = f"{method}-eps{'inf' if math.isinf(eps) else f'{eps:g}'}-seed{seed}"
                rows.extend(one_run(cfg, method, eps, seed, work / "runs" / name))
            results = {
                "config": cfg.to_dict(),
                "methods": {m: METHODS[m] for m in cfg.methods},
                "server_kind": SERVER_KIND,
                "hyperparameters": {m: hyperparameters(cfg.dataset, m) for m in cfg.methods},
                "versions": versions(),
                "machine": platform.machine(),
                "wall_seconds": time.perf_counter() - start,
                "table": summarize(rows),
                "rows": rows,
            }
            (work / "results.json").write_text(json.dumps(_finite(results), indent=2))
            from privzv.attacks import study_plots

            study_plots.write(work, results)
    finally:
        torch.set_num_threads(threads)
    return results


def main_from_args(args) -> int:
    cfg = StudyConfig(
        dataset=args.dataset,
        seeds=args.seeds,
        epsilons=tuple(args.epsilons),
        delta=args.delta,
        threat=args.threat,
        accountant=args.accountant,
        epochs=args.epochs,
        methods=tuple(args.methods),
        keep_runs=args.keep_runs,
        secret_seed=args.secret_seed,
    )
    results = run_study(cfg, args.out, quiet=args.json)
    summary = {
        "out": str(args.out),
        "wall_seconds": results["wall_seconds"],
        "runs": len({r["run"] for r in results["rows"]}),
        "table": results["table"],
    }
    emit(_finite(summary), args.json, _text)
    return 0


def _num(x) -> str:
    return f"{x:7.3f}" if x is not None else "    n/a"


def _text(s: dict) -> str:
    lines = [
        f"study written to {s['out']} ({s['runs']} runs, {s['wall_seconds']:.0f} s)",
        f"{'attack':26} {'method':10} {'eps':>5} {'success (95% CI)':>26} {'test acc':>9}",
    ]
    for t in s["table"]:
        c = t["success"]
        eps = "inf" if t["epsilon"] is None else f"{t['epsilon']:g}"
        lines.append(
            f"{t['attack']:26} {t['method']:10} {eps:>5} "
            f"{c['mean']:8.3f} [{_num(c['low'])}, {_num(c['high'])}] "
            f"{t['test_accuracy']['mean']:9.3f}"
        )
    return "\n".join(lines)
