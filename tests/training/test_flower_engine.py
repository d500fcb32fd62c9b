"""The Flower engine against the in-process engine, without processes: ``Loopback`` hands every
message to the device's handler (``apps.handle``) at once and signs the reply with the device's
key, the device kept alive between messages (``live``, as in the executor) or, with
``live=None``, rebuilt per message from its state in a RecordDict (context.state, as in Flower's
simulation). The real-process run is ``test_flower_e2e.py``."""

from __future__ import annotations

import dataclasses
import json
import math
import shutil
import signal
import time
import types
from pathlib import Path

import numpy as np
import pytest
import torch

pytest.importorskip("flwr", reason="the Flower engine needs the optional package flwr (privzv[flower])")

from flwr.app import ConfigRecord, RecordDict  # noqa: E402

from privzv.cliutil import Failed  # noqa: E402
from privzv.errors import PrivzvError  # noqa: E402
from privzv.training import data, run, run_folder, seeds, transcript  # noqa: E402
from privzv.training.config import TrainConfig  # noqa: E402
from privzv.training.engines.flower import apps, codec  # noqa: E402
from privzv.training.engines.flower.device import OwnData, own_data  # noqa: E402
from privzv.training.engines.flower.server import FlowerEngine  # noqa: E402
from privzv.training.messages import Message  # noqa: E402

SECRET = 7
# 4 rounds: 2 devices x ceil(1437 / 32) = 90 rounds per epoch
CONFIG = TrainConfig(dataset="digits", devices=2, epochs=4 / 90, evals=2, epsilon=8.0)


def keys(count: int) -> list[bytes]:
    return [bytes([m + 1]) * 32 for m in range(count)]


class Loopback:
    """Transport of ``FlowerEngine`` that answers at once with ``apps.handle`` of the device; node
    ids are not in device order (the engine must map them by partition id)."""

    def __init__(self, config: TrainConfig, folder, secret: int, live: bool = True, state=None):
        self.node = [{"partition-id": m, "folder": str(folder / f"device{m}")} for m in range(config.devices)]
        if state is not None:  # the devices' own state folders, beside (not in) their work folders
            for m, n in enumerate(self.node):
                n["state"] = str(state / f"device{m}")
        self.keys = keys(config.devices)
        for m, n in enumerate(self.node):
            Path(n["folder"]).mkdir(parents=True)
            (Path(n["folder"]) / apps.NOISE_KEY).write_text(seeds.key(secret, "device", m).hex())
        self.live = {} if live else None
        self.state = [RecordDict({}) for _ in range(config.devices)]
        self.received: list[list[tuple[str, RecordDict]]] = [[] for _ in range(config.devices)]
        self.replies: dict[str, RecordDict] = {}

    def nodes(self, count: int) -> list[int]:
        return [900 - m for m in range(count)]

    def push(self, node: int, kind: str, packed: RecordDict) -> str:
        m, content = 900 - node, codec.unpack(packed)
        self.received[m].append((kind, content))
        mid = f"{len(self.replies)}-{node}-{kind}-{sum(map(len, self.received))}"
        reply = apps.handle(kind, content, self.node[m], self.state[m], self.live)
        self.replies[mid] = codec.sign(self.keys[m], mid, reply)
        return mid

    def wait(self, ids: list[str], what: str) -> dict[str, RecordDict]:
        return {i: codec.pack(self.replies.pop(i)) for i in ids}


def _runs(tmp_path, method: str, live: bool = True, **changes):
    config = dataclasses.replace(CONFIG, method=method, **changes)
    ref = run.train(config, tmp_path / "inprocess", secret_seed=SECRET)
    engines = []

    def engine(cfg):
        engines.append(
            FlowerEngine(Loopback(cfg, tmp_path / "devices", SECRET, live), cfg, keys(cfg.devices))
        )
        return engines[-1]

    flower = run.train(config, tmp_path / "flower", secret_seed=SECRET, engine=engine)
    return ref, flower, engines[0]


def _metrics(path):
    return [json.loads(line) for line in (path / "metrics.jsonl").read_text().splitlines()]


@pytest.mark.parametrize(
    "method, live",
    [
        ("dpzv", True),
        ("fo-vector", True),
        ("vafl", True),
        ("czofo", True),
        ("zoo-vfl", True),
        ("dpzv", False),
    ],
)
def test_flower_engine_equals_in_process(tmp_path, method, live):
    ref, flower, engine = _runs(tmp_path, method, live)
    assert flower["rounds"] == ref["rounds"] == 4
    _same_runs(tmp_path, ref, flower, CONFIG.devices)
    # the wire carries more than eq. (23)'s tensor bytes (headers), and counts every message
    assert engine.wire["up"] > ref["bytes_up"] and engine.wire["down"] > ref["bytes_down"]
    assert engine.wire["messages"] >= 4 * 4
    kinds = engine.wire["kinds"]  # per message kind: every counted byte once, uplinks and downlinks apart
    assert sum(k["bytes"] for k in kinds.values()) == sum(
        engine.wire[key] for key in ("up", "down", "control")
    )
    assert sum(k["messages"] for k in kinds.values()) == engine.wire["messages"]
    assert (
        kinds["query.send reply"]["bytes"] == engine.wire["up"]
        and kinds["train.receive"]["bytes"] == engine.wire["down"]
    )
    assert kinds["query.send"]["messages"] == kinds["query.send reply"]["messages"] == ref["rounds"]


class Repacking(Loopback):
    """A Loopback that notes, per message kind, the serialised bytes of its replies re-packed from
    their records (``codec.pack`` of the unpacked content: the engine's count before issue 23's
    profile)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.kinds: dict[str, str] = {}
        self.repacked: dict[str, int] = {}

    def push(self, node: int, kind: str, packed: RecordDict) -> str:
        mid = super().push(node, kind, packed)
        self.kinds[mid] = kind
        return mid

    def wait(self, ids: list[str], what: str) -> dict[str, RecordDict]:
        replies = super().wait(ids, what)
        for mid, packed in replies.items():
            kind = f"{self.kinds.pop(mid)} reply"
            self.repacked[kind] = self.repacked.get(kind, 0) + codec.wire_bytes(
                codec.pack(codec.unpack(packed))
            )
        return replies


def test_a_replys_count_is_its_bytes_as_they_came_equal_to_the_repacked_ones(tmp_path):
    """The engine counts a reply's bytes from the packed content that came (no second pack):
    per kind, the same bytes as re-packing each reply from its records."""
    made = []

    def engine(cfg):
        made.append(FlowerEngine(Repacking(cfg, tmp_path / "devices", SECRET), cfg, keys(cfg.devices)))
        return made[-1]

    run.train(CONFIG, tmp_path / "flower", secret_seed=SECRET, engine=engine)
    repacked = made[0].transport.repacked
    assert {"query.hello reply", "query.send reply", "query.embed reply"} <= set(repacked)
    counted = {k: v["bytes"] for k, v in made[0].wire["kinds"].items() if k.endswith(" reply")}
    assert counted == repacked and all(v > 0 for v in counted.values())


def _same_runs(tmp_path, ref: dict, flower: dict, devices: int, folders=None) -> None:
    """The Flower run equals the in-process one: summary, metrics, every party's transcript
    (a device's in ``folders``/device<m>, default tmp_path/devices)."""
    assert flower["rounds"] == ref["rounds"] and flower["stopped"] == ref["stopped"]
    assert flower["epsilon_spent"] == ref["epsilon_spent"] and ref["epsilon_spent"] > 0
    assert (flower["bytes_up"], flower["bytes_down"]) == (ref["bytes_up"], ref["bytes_down"])
    for a, b in zip(_metrics(tmp_path / "inprocess"), _metrics(tmp_path / "flower"), strict=True):
        assert a["round"] == b["round"]
        assert a["test_accuracy"] == pytest.approx(b["test_accuracy"], abs=1e-9)
        assert a["test_loss"] == pytest.approx(b["test_loss"], rel=1e-6)
        assert a["epsilon_spent"] == b["epsilon_spent"]
    # every party's transcript: the same entries and values in both engines
    for party, folder in [
        ("server", tmp_path / "flower"),
        *((f"device{m}", (folders or tmp_path / "devices") / f"device{m}") for m in range(devices)),
    ]:
        ours = transcript.read_folder(folder if party != "server" else folder / "transcripts", party)
        theirs = transcript.load(tmp_path / "inprocess", party)
        assert [(e.round, e.direction, e.kind, e.peer) for e in ours.entries] == [
            (e.round, e.direction, e.kind, e.peer) for e in theirs.entries
        ]
        for e, f in zip(ours.entries, theirs.entries):
            for name in e.fields:
                np.testing.assert_allclose(e.fields[name], f.fields[name], rtol=1e-6, atol=1e-7)


def test_rounds_of_idle_devices_start_while_one_is_served(tmp_path):
    """Issue 23: the server sends the next rounds' requests to the other devices before it
    serves this round (engine.lookahead = M - 1), so M devices compute at once."""
    config = dataclasses.replace(CONFIG, devices=3)
    loops = []

    def engine(cfg):
        loops.append(Loopback(cfg, tmp_path, SECRET))
        return FlowerEngine(loops[0], cfg, keys(cfg.devices))

    sched = run.build(config, data.load("digits", 3, seed=config.seed), secret_seed=SECRET, engine=engine)
    sched.limit = 10
    assert sched.step() and sched.round == 1
    sends = [
        [int(c["round"]["round"]) for kind, c in received if kind == "query.send"]
        for received in loops[0].received
    ]
    assert sends == [[0], [1], [2]]  # rounds 1 and 2 started while round 0 was served
    assert sorted(sched.ahead) == [1, 2]


@pytest.mark.parametrize("method, epsilon", [("dpzv", 0.0145), ("vafl", 0.5)])  # stop at rounds 6 and 2
def test_a_budget_stop_with_rounds_started_ahead_equals_in_process(tmp_path, method, epsilon):
    """A round starts ahead only if the ledger lets it release after every round before it, so
    the run stops where in-process does and no device computed a round that never came (its
    transcript equal); vafl's device-made releases are recorded as they start, in round order."""
    ref, flower, _ = _runs(tmp_path, method, devices=3, sigma=2.0, epsilon=epsilon, epochs=100 / 135)
    assert ref["stopped"] == "budget" and 1 < ref["rounds"] < 100
    _same_runs(tmp_path, ref, flower, 3)


def test_devices_receive_no_labels_and_no_other_features(tmp_path):
    """What each device got over the wire: the run's public config, its batch ids, the round,
    sigma, its downlinks and the test rows to embed; nothing else (no labels, no other device's
    features or embeddings)."""
    config = dataclasses.replace(CONFIG, method="fo-vector")
    loop = []

    def engine(cfg):
        loop.append(Loopback(cfg, tmp_path / "devices", SECRET))
        return FlowerEngine(loop[0], cfg, keys(cfg.devices))

    run.train(config, tmp_path / "flower", secret_seed=SECRET, engine=engine)
    dataset = data.load("digits", 2, seed=config.seed)
    allowed = {
        "query.hello": {"config/json", "config/sigma"},
        "query.send": {"round/round", "batch/ids"},
        "train.receive": {"meta/round", "meta/sender", "meta/receiver", "meta/kind", "tensors/g"},
        "query.embed": {"rows/start", "rows/stop"},
        "query.checkpoint": {"checkpoint/tag", "checkpoint/keep"},  # the run's final checkpoint
    }
    for m, received in enumerate(loop[0].received):
        kinds = set()
        for kind, content in received:  # a downlink rides on the device's next message
            names = {f"{r}/{k}" for r, record in content.items() for k in record}
            carried = [str(content["carried"]["kind"])] if "carried" in content else []
            kinds.update([kind, *carried])
            assert names == allowed[kind].union(
                *(allowed[c] for c in carried), {"carried/kind"} if carried else set()
            ), (kind, names)
            if "train.receive" in [kind, *carried]:
                g = codec.decode(content)["g"]
                assert codec.decode(content).receiver == f"device{m}" and g.shape[1] == config.embed_dim
        assert kinds == set(allowed)
    own, _ = own_data(config, 1)
    assert [f.name for f in dataclasses.fields(OwnData)] == [
        "name",
        "partition",
        "num_classes",
        "x_train",
        "x_test",
        "vocab",  # a token dataset's id range (public, like its shape)
    ]
    assert torch.equal(own.x_train, dataset.x_train[1]) and torch.equal(own.x_test, dataset.x_test[1])


def test_codec_round_trip_and_wire_bytes():
    msg = Message(
        5,
        "device1",
        "server",
        "embeddings",
        {"ids": torch.tensor([3, 1, 4]), "h_plus": torch.randn(3, 8), "flag": torch.tensor([True])},
    )
    back = codec.decode(codec.encode(msg))
    assert (back.round, back.sender, back.receiver, back.kind) == (5, "device1", "server", "embeddings")
    for name, value in msg.tensors.items():
        assert back[name].dtype == value.dtype and torch.equal(back[name], value)
    bigger = Message(5, "device1", "server", "embeddings", {**msg.tensors, "h_plus": torch.randn(3, 80)})
    grown = codec.wire_bytes(codec.encode(bigger)) - codec.wire_bytes(codec.encode(msg))
    assert grown >= bigger.nbytes - msg.nbytes > 0
    assert codec.wire_bytes(codec.encode(msg)) > msg.nbytes


class Tampering(Loopback):
    """A device whose first uplink repeats an id (the server must refuse it)."""

    tampered = False

    def push(self, node: int, kind: str, content: RecordDict) -> str:
        mid = super().push(node, kind, content)
        if kind == "query.send" and not self.tampered:
            up = codec.decode(self.replies[mid])
            ids = up["ids"].clone()
            ids[1] = ids[0]
            self.replies[mid] = codec.sign(
                self.keys[900 - node],
                mid,
                codec.encode(Message(up.round, up.sender, up.receiver, up.kind, {**up.tensors, "ids": ids})),
            )
            self.tampered = True
        return mid


class Rogue(Loopback):
    """A local process that is not device 0 answers device 0's first round with a forged uplink
    (the right shape and ids, its own values): signed with a key not device 0's, or not signed."""

    def __init__(self, *args, key: bytes | None):
        super().__init__(*args)
        self.key, self.forged = key, False

    def push(self, node: int, kind: str, content: RecordDict) -> str:
        mid = super().push(node, kind, content)
        if kind == "query.send" and node == 900 and not self.forged:
            up = codec.decode(self.replies[mid])
            forged = codec.encode(
                Message(
                    up.round,
                    up.sender,
                    up.receiver,
                    up.kind,
                    {
                        name: torch.zeros_like(t) if t.is_floating_point() else t
                        for name, t in up.tensors.items()
                    },
                )
            )
            self.replies[mid] = forged if self.key is None else codec.sign(self.key, mid, forged)
            self.forged = True
        return mid


@pytest.mark.parametrize("key", [None, b"\x00" * 32])
def test_a_forged_uplink_from_another_process_is_refused(tmp_path, key):
    """Issue 25 item 1: the server accepts a reply only with device m's signature over the task
    it answers; a process that pulled device 0's task and pushed its own uplink stops the run."""

    def engine(cfg):
        return FlowerEngine(Rogue(cfg, tmp_path / "devices", SECRET, key=key), cfg, keys(cfg.devices))

    with pytest.raises(Failed, match="not signed by device 0's key"):
        run.train(CONFIG, tmp_path / "flower", secret_seed=SECRET, engine=engine)


def test_a_signature_binds_the_task_and_every_value():
    content = codec.encode(Message(1, "device0", "server", "embeddings", {"h": torch.ones(2, 3)}))
    signed = codec.sign(b"k" * 32, "task-1", content)
    assert codec.verify(b"k" * 32, "task-1", signed)
    assert not codec.verify(b"k" * 32, "task-2", signed)  # replayed onto another task
    assert not codec.verify(b"j" * 32, "task-1", signed)  # another key
    signed[codec.TENSORS]["h"] = signed[codec.TENSORS]["h"].__class__(torch.ones(2, 3).numpy() * 2)
    assert not codec.verify(b"k" * 32, "task-1", signed)  # a value changed


def _device_state(loop: Loopback, m: int) -> dict:
    party = loop.live[m]
    return {
        "step": party.device.step,
        "pending": party.pending,
        "model": {k: v.clone() for k, v in party.device.model.state_dict().items()},
    }


@pytest.mark.parametrize("method", ["dpzv", "fo-vector", "vafl", "czofo", "zoo-vfl"])
def test_refused_uplink_is_undone_on_the_device(tmp_path, method):
    config = dataclasses.replace(CONFIG, method=method)
    loops = []

    def engine(cfg):
        loops.append(Tampering(cfg, tmp_path, SECRET))
        return FlowerEngine(loops[0], cfg, keys(cfg.devices))

    sched = run.build(config, data.load("digits", 2, seed=config.seed), secret_seed=SECRET, engine=engine)
    before = _device_state(loops[0], 0)
    assert sched.step() and sched.refused == 1 and sched.traffic.total_down == 0
    sched.engine.close()  # the refusal rides on the device's next message, or goes at the end
    after = _device_state(loops[0], 0)
    assert after["step"] == before["step"] == 0 and after["pending"] is None
    for name, value in before["model"].items():  # moved back by -u: equal up to float32 rounding
        assert torch.allclose(after["model"][name], value, rtol=0, atol=1e-6)
    assert [kind for kind, _ in loops[0].received[0]] == ["query.hello", "query.send", "train.abort"]


def test_a_device_reads_its_noise_key_from_its_own_file_not_the_node_config(tmp_path):
    """The device's private key is in the 0600 file folder/noise-key (a command line, where
    node configs go, is readable by every local user); without the file the device refuses."""
    with pytest.raises(PrivzvError, match="noise-key"):
        apps.noise_key(tmp_path)
    (tmp_path / apps.NOISE_KEY).write_text("ab" * 16)
    with pytest.raises(PrivzvError, match="must be 32 bytes"):
        apps.noise_key(tmp_path)
    (tmp_path / apps.NOISE_KEY).write_text("ab" * 32)
    assert apps.noise_key(tmp_path) == b"\xab" * 32


def test_flower_sim_refuses_private_runs_and_its_environment_holds_no_secret(tmp_path):
    """Flower's simulation runs every device's ClientApp in Ray workers that inherit the
    SuperLink's environment: a private run is refused before anything starts, and the secret seed
    is never put in that environment."""
    from privzv.training.engines.flower import launcher

    assert CONFIG.private
    with pytest.raises(PrivzvError, match="flower-sim: not for a private run"):
        launcher.run(CONFIG, tmp_path / "out", secret_seed=SECRET, mode="simulation")
    assert not (tmp_path / "out").exists()
    assert launcher.secret_environment(tmp_path, SECRET, "simulation") == {}
    env = launcher.secret_environment(tmp_path, SECRET, "deployment")  # the ServerApp's: a path, not the seed
    assert env == {launcher.SECRET_FILE: str(tmp_path / "secret-seed")}
    seed = Path(env[launcher.SECRET_FILE])
    assert seed.read_text() == str(SECRET) and seed.stat().st_mode & 0o777 == 0o600


def test_launcher_refuses_an_unknown_mode_and_the_simulation_without_ray(tmp_path, monkeypatch):
    """One-line errors before any process starts or any file is written."""
    from privzv.training.engines.flower import launcher

    with pytest.raises(PrivzvError, match="mode 'cloud': one of deployment, simulation"):
        launcher.run(CONFIG, tmp_path / "out", secret_seed=SECRET, mode="cloud")
    real = launcher.importlib.util.find_spec
    monkeypatch.setattr(
        launcher.importlib.util, "find_spec", lambda name: None if name == "ray" else real(name)
    )
    with pytest.raises(PrivzvError, match=r"needs Ray.*privzv\[flower-sim\]"):
        launcher.run(
            dataclasses.replace(CONFIG, epsilon=math.inf),
            tmp_path / "out",
            secret_seed=SECRET,
            mode="simulation",
        )
    assert not (tmp_path / "out").exists()


def test_each_device_gets_one_supernode_that_runs_its_clientapp(tmp_path):
    """Device m: one process, its SuperNode with --isolation process (no SuperExec started), which
    answers the device's tasks itself (``executor.in_node``); its Runtime API still served with
    the SuperNode's SuperExec secret; every connection on TLS with the run's CA, the node
    authenticated by its own key; never --insecure."""
    from privzv.training.engines.flower import credentials, launcher

    folders = [tmp_path / "device0", tmp_path / "device1"]
    for folder in folders:
        folder.mkdir()
    creds = credentials.make(tmp_path, folders)
    started = []
    stack = types.SimpleNamespace(work=tmp_path, start=lambda name, args, env: started.append((name, args)))
    launcher._start_device(stack, 1, 9000, creds, {})
    ((name, node),) = started
    assert name == "device1" and node[node.index("-m") + 1] == "privzv.training.engines.flower.supernode"
    assert node[node.index("--superlink") + 1] == "127.0.0.1:9000"
    assert node[node.index("--isolation") + 1] == "process"
    assert f"folder={json.dumps(str(tmp_path / 'device1'))}" in node[node.index("--node-config") + 1]
    ca = folders[1] / credentials.CA  # the device's copy of the run's CA (read as its own user)
    assert node[node.index("--root-certificates") + 1] == str(ca) and ca.read_bytes() == creds.ca.read_bytes()
    assert node[node.index("--auth-supernode-private-key") + 1] == str(folders[1] / "node-key")
    assert node[node.index("--ssl-certfile") + 1] == str(folders[1] / "supernode.pem")
    assert node[node.index("--superexec-auth-secret-file") + 1] == str(folders[1] / "supernode.secret")
    assert "--insecure" not in node


class Killed(Loopback):
    """The run stops (Ctrl-C: a real SIGINT to this process) at device 1's second uplink, after
    a checkpoint; the run ends at that round's end (``privzv.training.stopping``)."""

    def push(self, node: int, kind: str, content: RecordDict) -> str:
        if kind == "query.send" and node == 899 and any(k == "query.send" for k, _ in self.received[1]):
            signal.raise_signal(signal.SIGINT)
        return super().push(node, kind, content)


# 9 rounds, evaluations at 4 and 9, checkpoints every 2 rounds
LONGER = dataclasses.replace(CONFIG, epochs=9 / 90, evals=2)


def _flower(tmp_path, config, attempt: str, transport=Loopback, **kw) -> dict:
    """``run.train`` on the Flower engine over ``transport``; each attempt (a launch) has fresh
    device work folders, while every device keeps its state in its own folder in states/."""

    def engine(cfg):
        loop = transport(cfg, tmp_path / attempt, SECRET, state=tmp_path / "states")
        return FlowerEngine(loop, cfg, keys(cfg.devices))

    return run.train(config, tmp_path / "flower", engine=engine, **kw)


def _same_resumed(tmp_path, config, attempt: str) -> None:
    """The resumed Flower run equals the in-process run: summary, metrics, ledger, transcripts."""
    ref = run.train(config, tmp_path / "inprocess", secret_seed=SECRET)
    resumed = _flower(tmp_path, None, attempt, resume=True)
    _same_runs(tmp_path, ref, resumed, config.devices, folders=tmp_path / attempt)
    ledger = [
        json.loads((tmp_path / r / "private" / "ledger.json").read_text()) for r in ("inprocess", "flower")
    ]
    assert ledger[0] == ledger[1]


@pytest.mark.parametrize("method, live", [("dpzv", True), ("vafl", True), ("dpzv", False)])
def test_a_stopped_flower_run_resumes_to_the_in_process_run(tmp_path, method, live):
    """Issue 23 item 4: a Flower run stopped mid-run (its devices' states saved in their own
    folders at the stop's checkpoint, the rounds started ahead served first) resumes on fresh
    device processes to the in-process run; vafl's device-made releases are recorded as their
    rounds start, so a checkpoint never meets a round in flight; live=False: the device rebuilt
    per message (Flower's simulation)."""
    config = dataclasses.replace(LONGER, method=method)

    def stopping(cfg, folder, secret, state):
        return Killed(cfg, folder, secret, live, state)

    stopped = _flower(tmp_path, config, "first", stopping, secret_seed=SECRET, checkpoint_every=2)
    assert stopped["stopped"] == "interrupted" and 0 < stopped["rounds"] < 9
    _same_resumed(tmp_path, config, "second")


class Crash(BaseException):
    """The server's process dies (as under SIGKILL: nothing more of it runs)."""


def test_a_kill_after_the_devices_saved_and_before_the_servers_checkpoint(tmp_path, monkeypatch):
    """The server writes its checkpoint after every device saved its state: killed between the
    two, the run folder keeps its last checkpoint and every device still holds its state of that
    checkpoint beside the newer one, so the resumed run is the in-process run."""
    save = run.RunFolder.save_checkpoint

    def dies_at_round_6(folder, round_, *args):
        if round_ == 6:
            raise Crash
        save(folder, round_, *args)

    monkeypatch.setattr(run.RunFolder, "save_checkpoint", dies_at_round_6)
    with pytest.raises(Crash):
        _flower(tmp_path, LONGER, "first", secret_seed=SECRET, checkpoint_every=2)
    monkeypatch.undo()
    assert run_folder.party_state(tmp_path / "flower", None)["devices"] == [None, None]  # not public
    uncommitted = []
    for m in range(2):
        own = run_folder.party_state(tmp_path / "flower", f"device{m}")["devices"][m]
        assert own["step"] == 2  # round 4's checkpoint: rounds 0-3, two per device
        saved = {p.name for p in (tmp_path / "states" / f"device{m}").glob("state-*.pt")}
        assert len(saved) == 2 and f"state-{own['tag']}.pt" in saved  # and round 6's
        uncommitted += [
            tmp_path / "states" / f"device{m}" / name for name in saved - {f"state-{own['tag']}.pt"}
        ]
    _same_resumed(tmp_path, LONGER, "second")
    assert not any(path.exists() for path in uncommitted)  # dropped on resume


@pytest.fixture(scope="module")
def flower_run(tmp_path_factory):
    """A finished Flower run (4 rounds, checkpoints every 2) and its devices' state folders."""
    tmp = tmp_path_factory.mktemp("flower-run")
    _flower(tmp, CONFIG, "first", secret_seed=SECRET, checkpoint_every=2)
    return tmp


def test_a_devices_state_stays_in_its_own_folder(flower_run):
    """A device saves its state (model, noise position, step, transcript copy) in its own state
    folder only (0700, files 0600): no public file of the run, no file of the server or of the
    other device holds its model; the server keeps only its tag and step."""
    run_dir, states = flower_run / "flower", flower_run / "states"
    for m in range(2):
        own = states / f"device{m}"
        file = own / f"state-{run_folder.party_state(run_dir, f'device{m}')['devices'][m]['tag']}.pt"
        assert own.stat().st_mode & 0o777 == 0o700
        assert all(p.stat().st_mode & 0o777 == 0o600 for p in own.iterdir())
        model = torch.load(file, weights_only=True)["model"]
        needle = next(iter(model.values())).numpy().tobytes()[:256]
        holders = [
            p
            for p in [*run_dir.rglob("*"), *states.rglob("*"), *(flower_run / "first").rglob("*")]
            if p.is_file() and needle in p.read_bytes()
        ]
        assert file in holders and {p.parent for p in holders} == {own}, holders  # sound, and nowhere else
        party = run_folder.party_state(run_dir, f"device{m}")["devices"]
        assert set(party[m]) == {"tag", "step"} and party[1 - m] is None


def test_a_resume_without_a_devices_saved_state_fails_in_one_line_and_writes_nothing(flower_run, tmp_path):
    """Device 1's saved state gone: the resume stops at the devices' restore, naming the file,
    before anything of the run folder is written."""
    shutil.copytree(flower_run, tmp_path, dirs_exist_ok=True)
    for old in (tmp_path / "states" / "device1").glob("state-*.pt"):
        old.unlink()
    before = {p: p.read_bytes() for p in (tmp_path / "flower").rglob("*") if p.is_file()}
    with pytest.raises(PrivzvError, match=r"device1/state-[0-9a-f]{16}\.pt'?: the device's state") as err:
        _flower(tmp_path, None, "second", resume=True)
    assert "\n" not in str(err.value)
    assert {p: p.read_bytes() for p in (tmp_path / "flower").rglob("*") if p.is_file()} == before


def test_a_device_refuses_a_checkpoint_tag_that_is_a_path(tmp_path):
    """The server names a device's checkpoint; the tag becomes a file name in the device's folder,
    so anything but 16 hex digits is refused before a file is touched."""
    loop = Loopback(CONFIG, tmp_path, SECRET)
    hello = RecordDict({"config": ConfigRecord({"json": json.dumps(CONFIG.to_dict()), "sigma": 1.0})})
    apps.handle("query.hello", hello, loop.node[0], loop.state[0], loop.live)
    for tag in ("../../escape", "/tmp/x", "ABCDEF0123456789"):
        for kind, record in (("query.checkpoint", {"tag": tag, "keep": ""}), ("query.restore", {"tag": tag})):
            with pytest.raises(PrivzvError, match="checkpoint tag"):
                apps.handle(
                    kind,
                    RecordDict({"checkpoint": ConfigRecord(record)}),
                    loop.node[0],
                    loop.state[0],
                    loop.live,
                )
    assert not (tmp_path / "device0" / "state").exists()


def test_resume_refuses_another_engine_or_a_changed_field_in_one_line(flower_run, tmp_path, capsys):
    """A Flower run resumes on the Flower engine only, with its own config (as in-process), and
    an in-process run never on Flower: one line, exit 2, before any process starts."""
    from privzv.training.cli import main
    from privzv.training.engines.flower import launcher

    run_dir = flower_run / "flower"
    assert main(["--resume", str(run_dir)]) == 2
    err = capsys.readouterr().err
    assert "a run of the Flower engine; resume it with --engine flower" in err and err.count("\n") == 1
    with pytest.raises(PrivzvError, match="batch_size 16: cannot change on --resume"):
        launcher.run(dataclasses.replace(CONFIG, batch_size=16), run_dir, resume=True)
    run.train(CONFIG, tmp_path / "inprocess", secret_seed=SECRET)
    assert main(["--resume", str(tmp_path / "inprocess"), "--engine", "flower"]) == 2
    err = capsys.readouterr().err
    assert "a run of the in-process engine; resume it without --engine" in err and err.count("\n") == 1


def test_the_guard_says_whether_a_look_found_a_new_process(tmp_path):
    """The guard looks in /proc less often while nothing starts: ``Tracked.look`` says whether it
    found a descendant it did not know (a new one, then none)."""
    import subprocess
    import sys

    from privzv.training.engines.flower import guard

    tracked = guard.Tracked()
    parent = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import subprocess, sys, time; subprocess.Popen(['sleep', '30']); time.sleep(30)",
        ]
    )
    try:
        tracked.add(parent.pid)
        deadline = time.monotonic() + 20
        while not tracked.look():
            assert time.monotonic() < deadline, "the child never showed up"
            time.sleep(0.05)
        assert len(tracked.procs) == 2 and not tracked.look()
    finally:
        tracked.stop(grace=1.0)
        parent.wait()
