import json
import math

import pytest

from privzv.attacks import study, study_settings
from privzv.errors import PrivzvError
from privzv.training import tuned


@pytest.mark.slow
def test_small_study_end_to_end(tmp_path):
    cfg = study.StudyConfig(
        dataset="breast-cancer",
        seeds=1,
        epsilons=(1.0, math.inf),
        epochs=0.5,
        methods=("dpzv", "fo-vector"),
        secret_seed=0,
    )
    out = tmp_path / "study"
    results = study.run_study(cfg, out)
    saved = json.loads((out / "results.json").read_text())
    assert saved["config"]["epsilons"] == [1.0, None] and "torch" in saved["versions"]
    assert saved["server_kind"] == "sum"
    assert saved["hyperparameters"]["dpzv"]["clip"] == tuned.HPARAMS_SUM[("breast-cancer", "dpzv")]["clip"]
    assert "HPARAMS_SUM" in saved["hyperparameters"]["fo-vector"]["source"]
    for name in ("attack_success_vs_epsilon", "utility_vs_epsilon", "utility_vs_leakage"):
        assert (out / f"{name}.png").stat().st_size > 0 and (out / f"{name}.svg").exists()
    rows = results["rows"]
    assert {r["run"] for r in rows} == {
        "dpzv-eps1-seed0",
        "dpzv-epsinf-seed0",
        "fo-vector-eps1-seed0",
        "fo-vector-epsinf-seed0",
    }
    cell = {(t["attack"], t["method"], t["epsilon"]): t for t in results["table"]}
    # no noise: first-order feedback gives the labels away (Fu et al.); DPZV's scalar does not
    assert cell[("direct-label", "fo-vector", None)]["success"]["mean"] > 0.3
    assert cell[("direct-label", "dpzv", None)]["success"]["mean"] < 0.15
    # the optimal attacker is run on noisy releases only, and stays below the accountant
    lr = [r for r in rows if r["attack"] == "optimal-lr"]
    assert {r["method"] for r in lr} == {"dpzv", "fo-vector"} and all(r["epsilon"] == 1.0 for r in lr)
    assert all(r["metrics"]["eps_lb"] <= r["metrics"]["eps_upper"] for r in lr)
    assert {"probe-malicious", "probe-saturating", "probe-duplicate-id"} <= {r["attack"] for r in rows}
    assert {
        "membership",
        "feature-inversion",
        "direct-label-summed",
        "model-completion-semi",
        "model-completion-active",
    } <= {r["attack"] for r in rows}
    assert all("error" not in r for r in rows), [r["error"] for r in rows if "error" in r]


def test_headline_and_bad_method():
    assert study.headline({"accuracy": 0.7, "prior": 0.5, "advantage": 0.2}) == ("advantage", 0.2)
    assert study.headline({"auc": 0.8})[1] == pytest.approx(0.3)
    with pytest.raises(PrivzvError):
        study.StudyConfig(methods=("sgd",))


def test_hyperparameters_come_from_the_table_of_the_studys_server_kind():
    # digits: swept for the summing server; the benchmark's values (MLP server) are not used
    h = study_settings.hyperparameters("digits", "dpzv")
    assert {k: h[k] for k in ("clip", "lr_device")} == tuned.HPARAMS_SUM[("digits", "dpzv")]
    assert h["clip"] != tuned.HPARAMS[("digits", "dpzv")]["clip"] and "lr_server" not in h
    assert study_settings.SERVER_KIND == "sum" and tuned.TABLES["sum"] is tuned.HPARAMS_SUM
    assert tuned.TABLES["mlp"] is tuned.HPARAMS
    # mnist-5k: only the MLP server was swept, so the study falls back to untuned values, and says so
    h = study_settings.hyperparameters("mnist-5k", "dpzv")
    assert h["clip"] == study_settings.CLIP["dpzv"] and "untuned" in h["source"]
    assert tuned.lookup("mnist-5k", "dpzv", "sum") is None
    assert tuned.lookup("mnist-5k", "dpzv", "mlp") == tuned.HPARAMS[("mnist-5k", "dpzv")]


def test_train_config_applies_the_tuned_values():
    cfg = study.StudyConfig(dataset="digits")
    t = study.train_config(cfg, "vafl", 1.0, 0, 10)
    want = tuned.HPARAMS_SUM[("digits", "vafl")]
    assert (t.clip, t.lr_device, t.server_kind, t.embed_dim) == (want["clip"], want["lr_device"], "sum", 10)
    assert study.train_config(cfg, "vafl", 1.0, 0, 10, clip=0.3).clip == 0.3


def test_sweep_picks_the_most_accurate_run_and_breaks_ties_by_smaller_c_then_rate():
    from privzv.attacks import study_sweep

    rows = [
        {"clip": 1.0, "lr_device": 0.03, "test_accuracy": 0.5},
        {"clip": 0.3, "lr_device": 0.09, "test_accuracy": 0.5},
        {"clip": 0.3, "lr_device": 0.01, "test_accuracy": 0.5},
        {"clip": 3.0, "lr_device": 0.03, "test_accuracy": 0.4},
    ]
    assert study_sweep.best(rows) == rows[2]
    assert study_sweep.best(rows + [{"clip": 10.0, "lr_device": 1.0, "test_accuracy": 0.6}])["clip"] == 10.0
    assert (study_sweep.default_lr_device("dpzv"), study_sweep.default_lr_device("vafl")) == (0.03, 0.05)


def test_plots_name_each_epsilon_fix_the_accuracy_axis_and_promise_only_drawn_intervals(
    tmp_path, monkeypatch
):
    from privzv.attacks import study_plots

    figs = {}
    monkeypatch.setattr(study_plots, "_save", lambda fig, out, name, space: figs.update({name: fig}))
    ci = lambda m: {"mean": m, "low": None, "high": None, "n": 1}  # noqa: E731 (one seed)
    table = [
        {
            "attack": "direct-label",
            "method": "dpzv",
            "epsilon": e,
            "metric": "advantage",
            "success": ci(0.01 * i),
            "test_accuracy": ci(0.08 + 0.01 * i),
            "seeds": 1,
        }
        for i, e in enumerate((1.0, None))
    ]
    results = {
        "table": table,
        "methods": {"dpzv": "downlink scalar"},
        "config": {"delta": 1e-5, "dataset": "digits", "threat": "device", "accountant": "pld", "seeds": 1},
    }
    study_plots.write(tmp_path, results)
    leak = figs["utility_vs_leakage"].axes[0]
    assert {t.get_text() for t in leak.texts} == {"eps 1", "eps inf"}
    assert leak.get_ylim() == (-2, 102)
    assert figs["utility_vs_epsilon"].axes[0].get_ylim() == (-2, 102)
    titles = [
        figs[n]._suptitle.get_text() if figs[n]._suptitle else figs[n].axes[0].get_title() for n in figs
    ]
    assert all("95%" not in t for t in titles) and any("no interval" in t for t in titles)
    assert all("device threat, delta 1e-05" in t for t in titles)
    legend = [t.get_text() for t in figs["attack_success_vs_epsilon"].legends[0].texts]
    assert sorted(legend) == [
        "0 = majority class (accuracy of the most frequent label)",
        "dpzv: downlink scalar",
    ]


def test_study_table_prints_each_cell_and_marks_missing_ones():
    from privzv.attacks import study_table

    def cell(attack, method, eps, success, acc):
        return {
            "attack": attack,
            "method": method,
            "epsilon": eps,
            "success": {"mean": success},
            "test_accuracy": {"mean": acc},
        }

    results = {
        "methods": {"dpzv": "", "vafl": ""},
        "table": [
            cell("direct-label", "dpzv", 1.0, 0.01, 0.2),
            cell("direct-label", "vafl", 1.0, 0.9, 0.93),
            cell("optimal-lr", "vafl", None, 0.5, 0.95),
        ],
    }
    lines = study_table.markdown(results, ["direct-label", "optimal-lr"]).splitlines()
    assert lines[0] == (
        "| epsilon | test acc. (%) dpzv / vafl | direct-label dpzv / vafl | optimal-lr dpzv / vafl |"
    )
    assert lines[2] == "| 1 | 20.0 / 93.0 | 0.010 / 0.900 | - / - |"
    assert lines[3] == "| inf | - / 95.0 | - / - | - / 0.500 |"


def test_a_diverged_run_is_recorded_not_averaged_and_never_picked(tmp_path, monkeypatch):
    from privzv.attacks import study_sweep
    from privzv.training import run
    from privzv.training.divergence import Diverged

    def diverge(*args, **kwargs):
        raise Diverged("training diverged by round 9 (non-finite parameters in device1)")

    monkeypatch.setattr(run, "train", diverge)
    cfg = study.StudyConfig(dataset="breast-cancer", seeds=1, epsilons=(1.0,), methods=("dpzv",))
    rows = study.one_run(cfg, "dpzv", 1.0, 0, tmp_path / "runs" / "dpzv-eps1-seed0")
    assert rows == [
        {
            "method": "dpzv",
            "noise": study_settings.METHODS["dpzv"],
            "epsilon": 1.0,
            "seed": 0,
            "run": "dpzv-eps1-seed0",
            "attack": "training",
            "diverged": "training diverged by round 9 (non-finite parameters in device1)",
        }
    ]
    assert study.summarize(rows) == []
    assert study_sweep.run_one("breast-cancer", "dpzv", 1.0, 0.03)["test_accuracy"] is None
    sweep_rows = [
        {"clip": 0.1, "lr_device": 0.03, "test_accuracy": None},
        {"clip": 1.0, "lr_device": 0.03, "test_accuracy": 0.2},
    ]
    assert study_sweep.best(sweep_rows)["clip"] == 1.0
