"""The head on a secret sample of the table (``--head-sampling table``): which records a step
uses, what it computes, and that no party can tell which records a step used."""

from __future__ import annotations

import dataclasses
import json

import pytest
import torch

from privzv.errors import PrivzvError
from privzv.release import HeadUpdate
from privzv.training import methods, models, privacy, run
from privzv.training.methods import head
from privzv.training.noise import SeededNoise
from privzv.training.parties import EmbeddingTable, Server


@pytest.mark.parametrize(
    "changes, share",
    [(dict(), 0.99), (dict(method="zoo-vfl"), 0.75), (dict(server_update="zo"), 0.99)],
    ids=["fo", "zoo-vfl", "dpzv-zo"],
)
def test_the_default_for_a_private_trained_head_is_the_table(tiny_config, changes, share):
    """First or zeroth order (zoo-vfl, dpzv with a zo server update): the same sampled
    HeadUpdate (q_h = B/D, divisor B, no window), so the same accounting; the head's share is
    head.TABLE_SHARE, zoo-vfl's its own (``HEAD_TABLE_SHARE``), ``--head-share`` wins."""
    private = tiny_config(epsilon=2.0, **changes)
    assert head.sampling(private) == "table" and head.share(private) == share
    assert head.share(tiny_config(epsilon=2.0, head_share=0.7, **changes)) == 0.7
    p = privacy.plan(private, methods.get(private.method), records=96, rounds=24)
    assert p.release.head_share == share
    assert p.release.head.sampling_rate == 8 / 96 and p.release.head.batch_size == 8
    assert p.release.head.window == 0 and p.result["head_steps"] == 24
    assert head.sampling(tiny_config(**changes)) == "batch"  # no noise
    assert head.sampling(tiny_config(epsilon=2.0, head_window=2, **changes)) == "batch"
    assert head.sampling(tiny_config(epsilon=2.0, head_sampling="table", **changes)) == "table"
    assert head.share(tiny_config(epsilon=2.0, freeze="devices", **changes)) == 1.0  # the whole budget
    with pytest.raises(PrivzvError):
        head.sampling(tiny_config(epsilon=2.0, head_sampling="table", head_window=2, **changes))


def test_a_zeroth_order_private_run_builds_the_sampled_zo_head(tiny_scheduler):
    for kw in (dict(method="zoo-vfl"), dict(server_update="zo")):
        sched = tiny_scheduler(sigma=1.0, epsilon=50.0, **kw)
        assert type(sched.method.head) is head.SampledZerothOrderHead
        assert sched.method.head.dp.sampled and sched.method.head.server is sched.server
        batch = tiny_scheduler(sigma=1.0, epsilon=50.0, head_sampling="batch", **kw)
        assert type(batch.method.head) is head.ZerothOrderHead


def _sampled_head(records=50, devices=2, dim=3, rate=0.3, sigma=0.0, seed=0, zeroth=False, clip=0.5, lr=1.0):
    """A sampled head on a small table (empty: fill it), first order or (``zeroth``) ZO."""
    torch.manual_seed(0)
    module = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(devices * dim, 4))
    wrapped = _Concat(module)
    table = EmbeddingTable(devices, records, dim)
    server = Server(wrapped, torch.randint(0, 4, (records,)), table, SeededNoise(seed, "s"))
    dp = HeadUpdate(clip=clip, batch_size=round(rate * records), sigma=sigma, sampling_rate=rate)
    if zeroth:
        step = head.SampledZerothOrderHead(wrapped, lr, 1e-3, server.noise.stream("head"), dp, server=server)
        return step, server
    return head.SampledHead(wrapped, lr, 0.0, dp, server.noise, server=server), server


class _Concat(torch.nn.Module):
    def __init__(self, inner):
        super().__init__()
        self.inner = inner

    def forward(self, rows):
        return self.inner(torch.cat(rows, dim=1))


@pytest.mark.parametrize("zeroth", [False, True])
def test_only_records_every_device_has_sent_are_sampled(zeroth):
    step, server = _sampled_head(zeroth=zeroth)
    assert len(step.sample()) == 0  # an empty table: nobody eligible
    server.table.update(0, torch.arange(0, 30), torch.randn(30, 3))
    server.table.update(1, torch.arange(20, 50), torch.randn(30, 3))
    seen = torch.cat([step.sample() for _ in range(200)])
    assert set(seen.tolist()) == set(range(20, 30))  # both rows filled: 20..29 only
    assert 0.2 < len(seen) / (200 * 10) < 0.4  # each at about q_h = 0.3


def test_a_step_is_the_clipped_sum_of_the_sample_over_the_fixed_divisor():
    """sigma 0: the head moves by exactly lr x sum_i clip(g_i) / (q_h D) over the sample (the
    padding rows add nothing), whatever rows the round passes in."""
    step, server = _sampled_head()
    for m in range(2):
        server.table.update(m, torch.arange(50), torch.randn(50, 3))
    before = [p.detach().clone() for p in step.params]
    sampling = server.noise.stream("head-sampling")  # the sample's own stream
    state = sampling.state_dict()
    ids = step.sample()
    sampling.load_state_dict(state)  # the step draws the same sample
    rows = server.table.gather(ids)
    grads = head.per_example_gradients(step.module, rows, server.labels[ids])
    expected = head.zo.clip_rows(grads, 0.5).sum(0) / step.dp.batch_size
    step.step([torch.full((1, 3), 1e6)] * 2, torch.zeros(1, dtype=torch.long))  # ignored
    moved = torch.cat([(b - p.detach()).reshape(-1) for b, p in zip(before, step.params)])
    assert step.rows > len(ids) > 0
    assert torch.allclose(moved, expected, atol=1e-6)


def _fill(server, records=50, unfilled=range(40, 50)):
    """Every device's row of every record but ``unfilled``, whose device-0 rows are huge (used,
    they would move a step)."""
    for m in range(2):
        ids = torch.tensor([i for i in range(records) if m == 0 or i not in unfilled])
        rows = torch.randn(len(ids), 3)
        if m == 0:
            rows[torch.isin(ids, torch.tensor(list(unfilled)))] = 1e3
        server.table.update(m, ids, rows)


def _recorded(step) -> list[float]:
    """The g (released scalar) of each of ``step``'s ZO steps, as it computes them."""
    seen = []
    derivative = step.derivative
    step.derivative = lambda plus, minus: seen.append(derivative(plus, minus)) or seen[-1]
    return seen


def test_a_sampled_zo_step_is_the_clipped_sum_of_the_eligible_sample_over_the_fixed_divisor():
    """sigma 0: g = sum_i clip(d_i) / (q_h D) over the sample's eligible records only (the
    padding and the round's rows add nothing), d_i the two-point derivatives along the direction
    the ``head`` stream seeds, and the head ends at theta - lr g v: recomputed here by hand on the
    unpadded sample."""
    import copy

    step, server = _sampled_head(zeroth=True, lr=0.5)
    _fill(server)
    reference = copy.deepcopy(step.module)
    streams = [server.noise.stream(name) for name in ("head-sampling", "head")]
    states = [s.state_dict() for s in streams]
    seen = _recorded(step)
    step.step([torch.full((1, 3), 1e6)] * 2, torch.zeros(1, dtype=torch.long))  # ignored
    for stream, state in zip(streams, states):
        stream.load_state_dict(state)
    ids = step.sample()
    seed = server.noise.stream("head").seed()
    assert step.rows > len(ids) > 0 and not (ids >= 40).any()
    params = [p for p in reference.parameters()]
    rows, labels = server.table.gather(ids), server.labels[ids]
    with torch.no_grad():
        norm = head.zo.perturb_(params, seed, 1e-3)
        plus = head.losses(reference, rows, labels)
        head.zo.perturb_(params, seed, -2e-3, norm)
        minus = head.losses(reference, rows, labels)
        d = (plus - minus) / 2e-3
        g = float(d.clamp(-0.5, 0.5).sum()) / step.dp.batch_size
        head.zo.perturb_(params, seed, 1e-3 - 0.5 * g, norm)
    assert (d.abs() > 0.5).any() and (d.abs() < 0.5).any()  # some clipped, some not
    assert seen[0] == pytest.approx(g, rel=1e-5, abs=1e-7) and g != 0
    for a, b in zip(step.module.parameters(), reference.parameters()):
        assert torch.allclose(a, b, atol=1e-6)


def test_a_sampled_zo_step_clips_each_derivative_to_the_head_clip():
    """With C_h below every |d_i|, g is exactly C_h sum_i sign(d_i) / B: each record adds at
    most C_h / B, whatever its rows."""
    step, server = _sampled_head(zeroth=True, clip=1e-6, lr=0.0)
    _fill(server)
    seen = _recorded(step)
    draws = []
    sample = head.OnTable.sample
    step.sample = lambda: draws.append(sample(step)) or draws[-1]
    for _ in range(5):
        step.step(None, None)
    for g, ids in zip(seen, draws):
        assert len(ids) and abs(g) <= 1e-6 * len(ids) / step.dp.batch_size * (1 + 1e-6)
    assert len(set(seen)) > 1 and all(
        round(g * step.dp.batch_size / 1e-6) % 2 == len(ids) % 2 for g, ids in zip(seen, draws)
    )  # a sum of len(ids) signs


def test_a_sampled_zo_step_on_no_eligible_record_is_the_noise_alone_with_sigma_h():
    """An empty table: every row is padding (record 0, whose zero rows have non-zero
    derivatives), so g is 0 exactly without noise, and N(0, sigma_h^2) with it."""
    quiet, _ = _sampled_head(zeroth=True, lr=0.0)
    seen = _recorded(quiet)
    for _ in range(5):
        quiet.step(None, None)
    assert seen == [0.0] * 5
    noisy, _ = _sampled_head(zeroth=True, lr=0.0, sigma=2.0)
    seen = _recorded(noisy)
    for _ in range(400):
        noisy.step(None, None)
    draws = torch.tensor(seen)
    assert abs(float(draws.std()) - 2.0) < 0.2 and abs(float(draws.mean())) < 0.3


def _public_bytes(folder) -> dict:
    """Every file a party can read (all but the run's private area), the server's transcript
    too, with wall-clock times and plots left out."""
    out = {}
    for path in sorted(folder.rglob("*")):
        rel = path.relative_to(folder).as_posix()
        if (
            path.is_dir()
            or path.suffix in (".png", ".svg")
            or (rel.startswith("private/") and not rel.startswith("private/transcripts/"))
        ):
            continue
        data = path.read_bytes()
        if path.suffix == ".pt":  # the public checkpoint: the parties' states
            state = torch.load(path, weights_only=False)
            for key in ("run_id", "id", "metrics"):  # a random run id; wall-clock times
                state.pop(key)
            # the head's momentum: a sum of its noisy DP steps (the release), moved at rate 0
            state["state"]["method"].pop("optimizer")
            data = repr(_plain(state)).encode()
        elif path.suffix in (".json", ".jsonl", ".journal"):
            text = data.decode()
            lines = (
                [json.loads(text)]
                if path.suffix == ".json"
                else [json.loads(line) for line in text.splitlines() if line.strip()]
            )
            for value in lines:
                if isinstance(value, dict):  # wall-clock times; random run and checkpoint ids
                    for key in ("wall_seconds", "run_id", "checkpoint"):
                        value.pop(key, None)
            data = json.dumps(lines, sort_keys=True).encode()
        out[rel] = data
    return out


def _plain(value):
    """Nested dicts / lists / tensors as plain Python values (for an exact comparison)."""
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in sorted(value.items(), key=lambda kv: str(kv[0]))}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, torch.Tensor):
        return (str(value.dtype), value.tolist())
    return value


@pytest.mark.parametrize("method", ["dpzv", "zoo-vfl"])
def test_no_party_sees_which_records_a_head_step_used(tmp_path, tiny_config, monkeypatch, method):
    """The strongest party: a device knows its own batches and everything public. Two runs with
    the same config and secrets, except that the second run's head steps use a different
    sample (the complement of the first's draw among eligible records), with the head's rate 0
    so that the head itself (whose noisy steps are the DP release) does not move: every byte a
    party can read (transcripts of all parties, messages, traffic, ledger, config, metrics,
    summary, the public checkpoint but for the head's momentum) is identical, while the samples
    differ. So the sample, its size and which records
    it holds reach no party except through the head's DP steps."""
    samples = {}
    draw = head.OnTable.sample

    def recorded(flip):
        def sample(self):
            ids = draw(self)
            if flip:
                keep = torch.ones(len(self.server.labels), dtype=torch.bool)
                keep[ids] = False
                ids = torch.nonzero(keep & self.server.table.filled.all(dim=0)).reshape(-1)
            samples.setdefault(flip, []).append(ids.tolist())
            return ids

        return sample

    config = tiny_config(method=method, epsilon=2.0, lr_server=0.0, transcripts=True, epochs=0.25)
    seen = {}
    for flip in (False, True):
        monkeypatch.setattr(head.OnTable, "sample", recorded(flip))
        folder = tmp_path / str(flip)
        run.train(dataclasses.replace(config), folder, secret_seed=7, progress=False)
        seen[flip] = _public_bytes(folder)
    assert samples[False] != samples[True]
    assert sum(map(len, samples[False])) != sum(map(len, samples[True]))  # sizes differ too
    assert any(name.startswith("transcripts/device") for name in seen[False])
    assert seen[False].keys() == seen[True].keys()
    for name in seen[False]:
        assert seen[False][name] == seen[True][name], name


def test_a_zoo_vfl_run_with_the_sampled_head_is_accounted_as_the_first_order_one(tmp_path, tiny_config):
    """zoo-vfl's sampled ZO head is the same mechanism as the first-order sampled head (a
    Poisson-subsampled Gaussian of sensitivity 2C_h/B per record): the run's ledger holds the
    sampled HeadUpdate (q_h = B/D, one step a round), its epsilon is ``account``'s for that
    release and the public schedule, and the same config with dpzv's first-order head gets the
    same release up to its clip and sigma."""
    from privzv import accounting
    from privzv.ledger import PrivacyLedger
    from privzv.release import Schedule

    config = tiny_config(method="zoo-vfl", epsilon=2.0, epochs=0.5, transcripts=False)
    summary = run.train(config, tmp_path, secret_seed=9, progress=False)
    state = json.loads((tmp_path / "private" / "ledger.json").read_text())
    ledger = PrivacyLedger.from_state_dict(state)
    records = len(state["counts"][0])
    dp = ledger.release.head
    assert dp.sampled and dp.sampling_rate == 8 / records and dp.batch_size == 8 and not dp.window
    schedule = Schedule(steps=summary["rounds"], dataset_size=records, devices=2)
    accounted = accounting.account(ledger.release, schedule, config.delta)
    assert summary["epsilon_spent"] == pytest.approx(accounted.epsilon, rel=1e-9) and accounted.epsilon <= 2.0
    assert accounted.head_steps == summary["rounds"] and accounted.head_sampling_rate == 8 / records
    down, steps = summary["mechanisms"]
    assert steps["mechanism"] == "head" and steps["count"] == summary["rounds"]
    fo = privacy.plan(tiny_config(epsilon=2.0), methods.get("dpzv"), records, summary["rounds"]).release.head
    assert dataclasses.replace(fo, clip=dp.clip, sigma=dp.sigma) == dp


def test_the_ghost_clipped_sum_equals_per_example_clipping():
    """linear_clipped_sum (no per-example gradients formed) equals clip_rows of the vmap
    per-example gradients, weighted, for the MLP head; a non-finite row still adds at most C_h;
    None for a head it does not cover."""
    from privzv.training import models, zo

    torch.manual_seed(1)
    module = models.server_model(3, 5, 4)
    rows = [torch.randn(40, 5) * 4 for _ in range(3)]
    labels = torch.randint(0, 4, (40,))
    weights = (torch.rand(40) < 0.7).float()
    expected = (zo.clip_rows(head.per_example_gradients(module, rows, labels), 0.3) * weights[:, None]).sum(0)
    fast = head.linear_clipped_sum(module, rows, labels, 0.3, weights)
    assert torch.allclose(fast, expected, atol=1e-6)
    bad = [r[:1].clone() for r in rows]
    bad[0][0, 0] = float("inf")
    one = head.linear_clipped_sum(module, bad, labels[:1], 0.3, torch.ones(1))
    assert torch.isfinite(one).all() and float(one.norm()) <= 0.3 * (1 + 1e-6)
    assert (
        head.linear_clipped_sum(
            _Concat(torch.nn.Sequential(torch.nn.LayerNorm(15))), rows, labels, 0.3, weights
        )
        is None
    )


@pytest.mark.parametrize(
    "method, kind", [("dpzv", head.SampledHead), ("zoo-vfl", head.SampledZerothOrderHead)]
)
def test_a_restored_scheduler_continues_the_sampled_head_exactly(tiny_config, tiny_scheduler, method, kind):
    """The head's samples come from the server's checkpointed generator and the table's
    ``filled`` marks are in its state: a scheduler restored from a state continues bit for
    bit (a checkpoint from before ``filled`` infers it from the non-zero rows)."""
    import copy

    kw = dict(sigma=1.0, epsilon=50.0, method=method)
    first = tiny_scheduler(**kw)
    assert type(first.method.head) is kind
    for _ in range(10):
        first.step()
    state = copy.deepcopy(first.state_dict())
    second = tiny_scheduler(**kw)
    second.load_state_dict(state)
    for _ in range(10):
        first.step()
        second.step()
    a, b = first.server.head.state_dict(), second.server.head.state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a)
    table = state["server"]["table"]
    filled = table.pop("filled")
    first.server.table.load_state_dict(table)
    assert torch.equal(first.server.table.filled, filled)


def test_the_sample_and_the_noise_come_from_their_own_server_streams():
    """The head's sample is drawn from the server's ``head-sampling`` stream and its noise from
    the ``head`` stream: drawing from the server's root stream or the downlink's (which a device
    can collect raw by sending h+ = h-) leaves the sample unchanged."""
    step, server = _sampled_head()
    for m in range(2):
        server.table.update(m, torch.arange(50), torch.randn(50, 3))
    state = server.noise.stream("head-sampling").state_dict()
    first = step.sample()
    server.noise.stream("head-sampling").load_state_dict(state)
    server.noise.gaussian((1000,), 1.0)
    server.noise.stream("downlink").gaussian((1000,), 1.0)
    assert torch.equal(step.sample(), first)


@pytest.mark.parametrize(
    "epsilon, kind, noise_step",
    [
        (1.0, "mlp", head.NOISE_STEP),
        (20.0, "mlp", head.NOISE_STEP),
        (1.0, "mlp-gain", models.GAIN_NOISE_STEP),
    ],
)
def test_the_default_rate_moves_the_weights_by_noise_step_per_step(
    tiny_config, tiny_dataset, epsilon, kind, noise_step
):
    """The sampled head's default rate makes a step's noise move the head by about its noise step
    (a norm; ``head.NOISE_STEP``, or the head's own), whatever epsilon: on an empty table (nobody
    eligible) a step is the noise alone, rate x sigma_h x ||N(0, I_P)||, and ||N(0, I_P)|| is
    sqrt(P) within 5 %."""
    config = tiny_config(epsilon=epsilon, embed_dim=16, server_kind=kind)
    dataset = tiny_dataset()
    p = privacy.plan(config, methods.get("dpzv"), len(dataset.y_train), rounds=24)
    sched = run.build(config, dataset, release=p.release, secret_seed=5)
    step = sched.method.head
    assert type(step).__name__ == "SampledHead" and not step.server.table.filled.any()
    size = sum(q.numel() for q in step.params)
    assert size > 1000  # ||N(0, I_P)|| / sqrt(P) = 1 +- 2 %
    before = torch.cat([q.detach().reshape(-1) for q in step.params])
    step.step(None, None)
    moved = (torch.cat([q.detach().reshape(-1) for q in step.params]) - before).norm()
    assert moved == pytest.approx(noise_step, rel=0.05)
    # the rate the run reports (Method.default_rate) is the rate the head steps with
    assert sched.method.default_rate("lr_server")[0] == step.optimizer.param_groups[0]["lr"]
