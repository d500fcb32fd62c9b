import json
import math

import pytest

from attacks import study
from privzv.errors import PrivzvError


def test_small_study_end_to_end(tmp_path):
    cfg = study.StudyConfig(dataset="breast-cancer", seeds=1, epsilons=(1.0, math.inf),
                            epochs=0.5, methods=("dpzv", "fo-vector"))
    out = tmp_path / "study"
    results = study.run_study(cfg, out)
    saved = json.loads((out / "results.json").read_text())
    assert saved["config"]["epsilons"] == [1.0, None] and "torch" in saved["versions"]
    for name in ("attack_success_vs_epsilon", "utility_vs_epsilon", "utility_vs_leakage"):
        assert (out / f"{name}.png").stat().st_size > 0 and (out / f"{name}.svg").exists()
    rows = results["rows"]
    assert {r["run"] for r in rows} == {"dpzv-eps1-seed0", "dpzv-epsinf-seed0",
                                         "fo-vector-eps1-seed0", "fo-vector-epsinf-seed0"}
    cell = {(t["attack"], t["method"], t["epsilon"]): t for t in results["table"]}
    # no noise: first-order feedback gives the labels away (Fu et al.); DPZV's scalar does not
    assert cell[("direct-label", "fo-vector", None)]["success"]["mean"] > 0.3
    assert cell[("direct-label", "dpzv", None)]["success"]["mean"] < 0.15
    # the optimal attacker is run on noisy releases only, and stays below the accountant
    lr = [r for r in rows if r["attack"] == "optimal-lr"]
    assert {r["method"] for r in lr} == {"dpzv", "fo-vector"} and all(r["epsilon"] == 1.0 for r in lr)
    assert all(r["metrics"]["eps_lb"] <= r["metrics"]["eps_upper"] for r in lr)
    assert any(r["attack"] == "probe-malicious" for r in rows)
    assert all("error" not in r for r in rows), [r["error"] for r in rows if "error" in r]


def test_headline_and_bad_method():
    assert study.headline({"accuracy": 0.7, "prior": 0.5, "advantage": 0.2}) == ("advantage", 0.2)
    assert study.headline({"auc": 0.8})[1] == pytest.approx(0.3)
    with pytest.raises(PrivzvError):
        study.StudyConfig(methods=("sgd",))
