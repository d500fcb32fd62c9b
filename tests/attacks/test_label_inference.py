"""Label inference on simulated releases: beats the prior with no defense, chance on pure noise."""

import numpy as np
import pytest

from privzv.attacks import label_inference as li
from privzv.attacks.transcript_view import View
from privzv.errors import PrivzvError


def softmax(z):
    e = np.exp(z - z.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def sum_server_rounds(n=2048, classes=10, batch=64, seed=0, zo=False, lam=1e-3, prior=None):
    """Two devices, summing server, softmax cross-entropy: what device 0 sees.

    First-order: the per-sample gradient dL/dz. ZO (DPZV): the batch mean of clipped per-sample
    loss differences (scalar) and device 0's own perturbed outputs h+ and h-.
    """
    rng = np.random.default_rng(seed)
    y = rng.choice(classes, size=n, p=prior)
    x0 = rng.normal(size=(n, 8))
    w0 = rng.normal(size=(8, classes)) * 0.3
    other = rng.normal(size=(n, classes))  # device 1's outputs
    steps = np.repeat(np.arange(n // batch), batch)
    onehot = np.eye(classes)[y]
    if not zo:
        grads = softmax(x0 @ w0 + other) - onehot
        return View("device0", steps, grads, "gradient", embeddings=x0 @ w0, records=np.arange(n)), y
    loss = lambda z: -np.log(softmax(z)[np.arange(n), y])
    u = rng.normal(size=(n // batch, 8, classes))  # a fresh parameter perturbation per step
    w_plus, w_minus = w0 + lam * u[steps], w0 - lam * u[steps]
    h_plus = np.einsum("nd,ndc->nc", x0, w_plus)
    h_minus = np.einsum("nd,ndc->nc", x0, w_minus)
    delta = np.clip((loss(h_plus + other) - loss(h_minus + other)) / (2 * lam), -1, 1)
    scalar = np.repeat(delta.reshape(-1, batch).mean(axis=1), batch)
    return View(
        "device0",
        steps,
        scalar,
        "scalar",
        embeddings=(h_plus + h_minus) / 2,
        directions=(h_plus - h_minus)[:, None],
        records=np.arange(n),
    ), y


def test_direct_first_order_sum_server_is_exact():
    view, y = sum_server_rounds()
    out = li.direct_label_inference(view, y)
    assert out["accuracy"] == 1.0 and out["advantage"] > 0.85
    assert out["control_accuracy"] <= out["prior"] + 0.02  # nothing without the downlink
    anonymous = View("wire", view.steps, view.feedback, "gradient")  # no record ids needed
    assert li.direct_label_inference(anonymous, y)["accuracy"] == 1.0


def test_direct_on_pure_noise_is_chance():
    view, y = sum_server_rounds()
    noise = np.random.default_rng(1).normal(size=view.feedback.shape)
    out = li.direct_label_inference(View("device0", view.steps, noise, "gradient"), y)
    assert abs(out["advantage"]) < 0.05


def test_direct_under_zo_scalar_is_chance():
    view, y = sum_server_rounds(zo=True)
    out = li.direct_label_inference(view, y)
    assert abs(out["advantage"]) < 0.05
    assert out["feedback"] == "scalar"


def test_nonfinite_messages_are_sanitised_and_counted():
    g = np.array([[np.nan, 1.0], [np.inf, -np.inf], [1e300, 0.5]])
    view = View("device0", np.zeros(3), g, "gradient", embeddings=np.ones((3, 2)))
    assert view.nonfinite == 4 and np.isfinite(view.feedback).all()
    assert view.feedback[1].tolist() == [1e30, -1e30]
    assert li.direct_predictions(view.gradient_rows()).tolist() == [0, 1, 1]


def test_zo_view_needs_output_differences():
    view, _ = sum_server_rounds(n=128, zo=True)
    bad = View("device0", view.steps, view.feedback, "scalar", embeddings=view.embeddings)
    with pytest.raises(PrivzvError, match="output difference"):
        bad.gradient_rows()


def binary_rounds(noise_only=False, n=2048, batch=64, seed=0):
    """Binary task, 20% positives, a summing server whose logits learned the prior (Li et al.)."""
    rng = np.random.default_rng(seed)
    prior = np.array([0.8, 0.2])
    y = rng.choice(2, size=n, p=prior)
    if noise_only:
        grads = rng.normal(size=(n, 2))
    else:
        grads = softmax(np.log(prior) + 0.5 * rng.normal(size=(n, 2))) - np.eye(2)[y]
    view = View("device0", np.repeat(np.arange(n // batch), batch), grads, "gradient", records=np.arange(n))
    known = np.concatenate([np.flatnonzero(y == c)[:10] for c in (0, 1)])
    return view, y, known


@pytest.mark.parametrize("scoring", li.SCORINGS)
def test_binary_scoring_beats_chance(scoring):
    view, y, known = binary_rounds()
    out = li.binary_scoring(view, y, known, scoring)
    assert out["auc"] > 0.9
    assert out["rows"] == len(y) - len(known)


@pytest.mark.parametrize("scoring", li.SCORINGS)
def test_binary_scoring_on_pure_noise_is_chance(scoring):
    view, y, known = binary_rounds(noise_only=True)
    assert abs(li.binary_scoring(view, y, known, scoring)["auc"] - 0.5) < 0.06


@pytest.mark.parametrize("scoring", li.SCORINGS)
def test_binary_scoring_under_zo_scalar_is_chance(scoring):
    view, y = sum_server_rounds(n=2048, classes=2, zo=True, prior=[0.7, 0.3])
    known = np.concatenate([np.flatnonzero(y == c)[:20] for c in (0, 1)])
    out = li.binary_scoring(view, y, known, scoring)
    assert abs(out["auc"] - 0.5) < 0.06 and abs(out["control_auc"] - 0.5) < 0.06


def test_zo_cosine_equals_its_control_where_the_step_has_known_rows():
    view, y = sum_server_rounds(n=640, classes=2, zo=True, prior=[0.7, 0.3])
    known = np.arange(640) % 64 == 0  # the first row of every step
    grads, ctrl = view.gradient_rows(), view.without_downlink().gradient_rows()
    s = li.cosine_scores(grads, view.steps, known, y[known])
    c = li.cosine_scores(ctrl, view.steps, known, y[known])
    assert s == pytest.approx(c)  # the batch scalar's sign cancels


def test_cosine_reference_fills_steps_without_known_rows():
    g = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 0.1], [-1.0, 0.0]])
    steps = np.array([0, 1, 1, 2])
    known = np.array([False, True, False, False])
    s = li.cosine_scores(g, steps, known, np.array([1]))
    # step 0 precedes the only reference (step 1): it borrows it; step 2 keeps it
    assert s == pytest.approx([0.0, 1.0, 0.1 / np.hypot(1, 0.1), 0.0])


def test_bad_inputs_raise():
    view, y, known = binary_rounds(n=256)
    with pytest.raises(PrivzvError, match="scoring"):
        li.binary_scoring(view, y, known, "bogus")
    with pytest.raises(PrivzvError, match="batch ids"):
        li.binary_scoring(View("wire", view.steps, view.feedback, "gradient"), y, known)
    with pytest.raises(PrivzvError, match="both classes"):
        li.binary_scoring(view, y, known[:3])
    with pytest.raises(PrivzvError, match="classes >= 2"):
        li.direct_predictions(np.zeros((4, 1)))


# ---- transcripts are the only input ---------------------------------------------------------

import json  # noqa: E402

import torch  # noqa: E402

from privzv.attacks import registry  # noqa: E402
from privzv.training import data, run_folder  # noqa: E402
from privzv.training.messages import Message  # noqa: E402
from privzv.training.transcript import Recorder  # noqa: E402


def record(rounds, tmp_path=None):
    """A Recorder holding ``rounds`` of (round, device m, ids, uplink fields, downlink fields),
    recorded the way training's scheduler records them; saved as a run folder in ``tmp_path``."""
    t = lambda a: torch.as_tensor(np.asarray(a))
    rec = Recorder(["server", "device0", "device1"], {})
    for r, m, ids, up, down in rounds:
        rec.local(f"device{m}", r, "batch", {"ids": t(ids)})
        rec.message(
            Message(
                r, f"device{m}", "server", "embeddings", {"ids": t(ids), **{k: t(v) for k, v in up.items()}}
            )
        )
        rec.message(Message(r, "server", f"device{m}", "reply", {k: t(v) for k, v in down.items()}))
    if tmp_path is not None:
        rec.save(tmp_path / "transcripts")
        (tmp_path / "config.json").write_text(
            json.dumps(
                {
                    "format": run_folder.FORMAT,
                    "config": {
                        "dataset": "digits",
                        "devices": 2,
                        "seed": 0,
                        "method": "simulated",
                        "server_kind": "sum",
                    },
                    "sigma": 0.0,
                }
            )
        )
    return rec


def recorded_sum_server(tmp_path, rounds=12, batch=64, protocol="fo"):
    """A summing-server protocol on digits (2 devices), device m's outputs h = x_m W_m [B, 10].

    ``fo``: the server replies dL/dz = softmax(z) - onehot (fo-vector's ``g``). ``dpzv``: the
    device sends h+ and h- (output perturbation lam*D, D a random direction per record) and the
    server the batch mean of (L(h+) - L(h-)) / lam. ``czofo``: the device sends h and n = 5
    perturbed copies [n, B, 10], the server the per-record differences (L(h~) - L(h)) / lam [n, B]
    (``czofo-batch-first``: [B, n, 10] and [B, n]).
    """
    ds = data.load("digits", 2)
    y = ds.y_train.numpy()
    rng = np.random.default_rng(0)
    w = [rng.normal(size=(32, 10)) * 0.1 for _ in range(2)]  # 4 rows x 8 pixels per device
    lam, rounds_out = 1e-3, []
    for r in range(rounds):
        m, ids = r % 2, rng.choice(len(y), batch, replace=False)
        outs = [ds.x_train[k].numpy()[ids].reshape(batch, -1) @ w[k] for k in range(2)]
        loss = lambda h: -np.log(softmax(h + outs[1 - m])[np.arange(batch), y[ids]])
        if protocol == "fo":
            up = {"h": outs[m]}
            down = {"g": softmax(outs[0] + outs[1]) - np.eye(10)[y[ids]]}
        elif protocol == "dpzv":
            d = rng.normal(size=outs[m].shape)
            up = {"h_plus": outs[m] + lam * d, "h_minus": outs[m] - lam * d}
            down = {"delta": [np.mean((loss(up["h_plus"]) - loss(up["h_minus"])) / lam)]}
        else:
            pert = outs[m][None] + lam * rng.normal(size=(5, batch, 10))
            up = {"h": outs[m], "h_perturbed": pert}
            down = {"d": np.stack([(loss(p) - loss(outs[m])) / lam for p in pert])}
            if protocol == "czofo-batch-first":  # the same messages, batch axis first
                up, down = {"h": outs[m], "h_perturbed": pert.transpose(1, 0, 2)}, {"d": down["d"].T}
        rounds_out.append((r, m, ids, up, down))
    return record(rounds_out, tmp_path), ds


def test_attack_reads_only_the_attackers_transcript(tmp_path):
    rec, ds = recorded_sum_server(tmp_path)
    asked = []

    def load(party):
        asked.append(party)
        return rec.transcripts[party]

    out = registry.attack_transcripts("direct-label", load, ds)
    assert asked == ["device0"] and out.metrics["accuracy"] == 1.0
    assert out.metrics["rows"] == 6 * 64
    out = registry.attack_transcripts("direct-label-eavesdropper", load, ds)
    assert asked[1:] == ["server"] and out.metrics["rows"] == 12 * 64
    assert out.metrics["accuracy"] == 1.0


def test_run_attack_reads_a_run_folder(tmp_path):
    recorded_sum_server(tmp_path)
    out = registry.run_attack("direct-label", tmp_path, seed=0)
    assert out.metrics["accuracy"] == 1.0 and out.setting["server_kind"] == "sum"


def test_missing_run_or_transcript_fails_clearly(tmp_path):
    with pytest.raises(PrivzvError, match="no config.json"):
        registry.run_attack("direct-label", tmp_path / "nowhere")
    recorded_sum_server(tmp_path)
    (tmp_path / "transcripts" / "device1.jsonl").unlink()
    with pytest.raises(PrivzvError, match="device1"):
        registry.run_attack("direct-label", tmp_path, attacker=1)
    with pytest.raises(PrivzvError, match="--attack 'sign'"):
        registry.run_attack("sign", tmp_path)
    with pytest.raises(PrivzvError, match="attack option 'budget'"):
        registry.run_attack("direct-label", tmp_path, budget=3)
    with pytest.raises(PrivzvError, match="binary task"):
        registry.run_attack("norm-scoring", tmp_path)


def test_zo_transcripts_use_the_zo_estimate():
    """DPZV's batch scalar keeps the sign rule near the prior; VFL-CZOFO's per-record scalars
    (5 directions) let the same rule read most labels."""
    rec, ds = recorded_sum_server(None, rounds=40, protocol="dpzv")
    out = registry.attack_transcripts("direct-label", lambda p: rec.transcripts[p], ds).metrics
    assert out["feedback"] == "scalar" and abs(out["advantage"]) < 0.08
    for layout in ("czofo", "czofo-batch-first"):
        rec, ds = recorded_sum_server(None, rounds=40, protocol=layout)
        out = registry.attack_transcripts("direct-label", lambda p: rec.transcripts[p], ds)
        assert out.metrics["accuracy"] > 0.5
        assert out.metrics["control_accuracy"] < out.metrics["prior"] + 0.05


def test_every_attack_asks_only_for_its_attackers_transcript():
    rec, ds = recorded_sum_server(None, rounds=40)
    expected = {
        "direct-label": "device0",
        "direct-label-eavesdropper": "server",
        "model-completion": "device0",
        "feature-server": "server",
        "feature-device": "device0",
    }
    for name, party in expected.items():
        asked = []
        out = registry.attack_transcripts(name, lambda p: asked.append(p) or rec.transcripts[p], ds, aux=100)
        assert asked == [party] and out.party in (party, "eavesdropper")
    # device 1's embeddings are linear in its features: the server's inversion beats the mean
    out = registry.attack_transcripts("feature-server", lambda p: rec.transcripts[p], ds, aux=100)
    assert out.metrics["mse_gain"] > 0.05 * out.metrics["baseline_mse"]
    out = registry.attack_transcripts("model-completion", lambda p: rec.transcripts[p], ds)
    assert out.metrics["advantage"] > 0.2


def _zo_batch_scalar_view(n=200, classes=5, batch=8, steps=3000, noise=0.0, seed=0):
    """A DPZV-like view: per step a batch of records, Delta = mean_j <g_j, D_j> + noise, the
    row estimate Delta * D_i (D_i the record's output difference), g_j = softmax - onehot."""
    rng = np.random.default_rng(seed)
    y = rng.integers(classes, size=n)
    z = rng.normal(size=(n, classes))
    g = np.exp(z) / np.exp(z).sum(axis=1, keepdims=True) - np.eye(classes)[y]
    ids = np.stack([rng.choice(n, batch, replace=False) for _ in range(steps)])
    d = rng.normal(size=(steps, batch, classes))
    delta = np.einsum("sbe,sbe->s", g[ids], d) / batch + noise * rng.normal(size=steps)
    view = View(
        "device0",
        np.repeat(np.arange(steps), batch),
        np.repeat(delta, batch),
        "scalar",
        embeddings=np.zeros((steps * batch, classes)),
        directions=d.reshape(-1, 1, classes),
        records=ids.reshape(-1),
    )
    return view, y


def test_summed_rows_read_labels_a_single_row_does_not():
    view, y = _zo_batch_scalar_view()
    rows = li.direct_label_inference(view, y[view.records])
    summed = li.summed_label_inference(view, y)
    assert summed["records"] == 200 and rows["advantage"] < 0.1
    assert summed["accuracy"] > rows["accuracy"] + 0.3
    assert summed["control_accuracy"] < summed["prior"] + 0.15


def test_summed_rows_on_pure_noise_is_prior():
    view, y = _zo_batch_scalar_view(noise=100.0)
    summed = li.summed_label_inference(view, y)
    assert summed["accuracy"] < summed["prior"] + 0.1
