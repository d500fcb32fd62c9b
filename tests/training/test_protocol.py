"""Scheduler, messages, bytes and transcripts."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from privzv.training import transcript
from privzv.training.messages import SERVER, Message, device_name
from privzv.training.parties import EmbeddingTable
from privzv.training.sampling import SharedWalk


def test_shared_walk_visits_every_record_once_per_epoch():
    walk = SharedWalk(records=50, batch=8, seed=1)
    for epoch in range(3):
        batches = [walk.batch_of(7 * epoch + j) for j in range(7)]  # ceil(50/8) batches
        assert [len(b) for b in batches] == [8] * 6 + [2]
        assert sorted(torch.cat(batches).tolist()) == list(range(50))
    assert not torch.equal(walk.batch_of(0), walk.batch_of(7))  # a fresh permutation


def test_devices_in_different_epochs_draw_each_permutation_once(monkeypatch):
    """Skewed activation: device 0 runs two steps for device 1's one, so their epochs differ most
    rounds; still each device draws each epoch's permutation at most once (a round costs O(b)
    amortised, not O(D); a single cached epoch would draw one nearly every round here), the
    batches are those of the walk, and only the epochs the devices are in are kept."""
    one = SharedWalk(records=50, batch=8, seed=1)
    reference = [one.batch_of(s) for s in range(42)]  # the walk, step by step
    calls = []
    randperm = torch.randperm
    monkeypatch.setattr(torch, "randperm", lambda *a, **k: calls.append(a) or randperm(*a, **k))
    walk = SharedWalk(records=50, batch=8, seed=1)
    steps = {0: 0, 1: 0}
    for r in range(63):
        device = 0 if r % 3 else 1
        assert torch.equal(walk.batch_of(steps[device], device), reference[steps[device]])
        steps[device] += 1
        assert set(walk._perms) == {(s - 1) // 7 for s in steps.values() if s}
    assert steps == {0: 42, 1: 21} and 6 <= len(calls) <= 6 + 3  # (device, epoch) pairs


def test_activation_probabilities_are_followed(tiny_scheduler):
    probs = [0.7, 0.1, 0.1, 0.1]
    sched = tiny_scheduler(devices=4, activation=probs)
    for _ in range(800):
        sched.step()
    counts = np.bincount(np.array(sched.traffic.log)[:, 1], minlength=4)
    sd = np.sqrt(800 * np.array(probs) * (1 - np.array(probs)))
    assert (np.abs(counts - 800 * np.array(probs)) <= 5 * sd).all()


@pytest.mark.parametrize(
    "method, down_per_round", [("dpzv", 4), ("vafl", 8 * 4 * 4), ("fo-vector", 8 * 4 * 4)]
)
def test_bytes_are_counted_from_the_tensors_sent(method, down_per_round, tiny_scheduler):
    sched = tiny_scheduler(method=method, sigma=0.1)
    for _ in range(20):
        sched.step()
    msgs = {}
    for party, t in sched.recorder.transcripts.items():
        for e in t.select("sent"):
            nbytes = sum(v.nbytes for v in e.fields.values())
            msgs.setdefault(e.round, [0, 0])[0 if party != SERVER else 1] += nbytes
    log = np.array(sched.traffic.log)
    assert [tuple(msgs[r]) for r in log[:, 0]] == [tuple(row) for row in log[:, 2:]]
    ids_bytes = 8 * 8  # B int64 ids, counted
    up = ids_bytes + (2 if method == "dpzv" else 1) * 8 * 4 * 4
    assert (log[:, 2] == up).all() and (log[:, 3] == down_per_round).all()
    assert sched.traffic.total_up == log[:, 2].sum() and sched.traffic.total_down == log[:, 3].sum()
    assert sched.traffic.up.sum() == sched.traffic.total_up


def test_message_refuses_an_autograd_graph_and_counts_bytes():
    x = torch.ones(3, requires_grad=True)
    with pytest.raises(ValueError):
        Message(0, "device0", SERVER, "x", {"h": x * 2})
    assert Message(0, "device0", SERVER, "x", {"h": torch.ones(3, 2), "i": torch.arange(5)}).nbytes == 24 + 40


def test_bounded_delay_makes_updates_visible_within_max_delay_rounds():
    table = EmbeddingTable(2, 10, 3, max_delay=3, rng=np.random.default_rng(0))
    delays = []
    for r in range(40):
        table.round = r
        table.update(1, torch.tensor([r % 10]), torch.full((1, 3), float(r + 1)))
        for wait in range(5):
            table.round = r + wait
            if float(table.gather(torch.tensor([r % 10]))[1][0, 0]) >= r + 1:
                delays.append(wait)
                break
        table.round = r + 4
        table.gather(torch.tensor([0]))  # flush
    assert set(delays) == {0, 1, 2, 3}


def test_device_transcript_holds_what_it_saw_and_nothing_else(tmp_path, tiny_scheduler):
    sched = tiny_scheduler(devices=3, sigma=0.5)
    for _ in range(30):
        sched.step()
    sched.recorder.save(tmp_path / "transcripts")
    log = np.array(sched.traffic.log)
    server = transcript.load(tmp_path, SERVER)
    for m in range(3):
        t = transcript.load(tmp_path, device_name(m))
        mine = set(log[log[:, 1] == m, 0].tolist())
        assert {e.round for e in t.entries} == mine  # only its own rounds
        assert {(e.direction, e.kind) for e in t.entries} == {
            ("local", "batch"),
            ("local", "seed"),
            ("sent", "embeddings"),
            ("received", "delta"),
        }
        assert all(set(e.fields) <= {"ids", "h_plus", "h_minus", "delta", "seed"} for e in t.entries)
        sent = t.select("sent")
        from_me = [e for e in server.select("received") if e.peer == device_name(m)]
        to_me = [e for e in server.select("sent") if e.peer == device_name(m)]
        assert len(sent) == len(from_me) == len(to_me) == len(mine)
        for a, b in zip(sent, from_me):
            assert a.round == b.round and all(np.array_equal(a.fields[k], b.fields[k]) for k in a.fields)
        for a, b in zip(t.select("received"), to_me):
            assert np.array_equal(a.fields["delta"], b.fields["delta"])
        for batch, s in zip(t.select("local", "batch"), sent):
            assert np.array_equal(batch.fields["ids"], s.fields["ids"])
        assert t.meta["party"] == device_name(m) and "partition" in t.meta
    # the server learns no device's u seeds
    assert not server.select("local", "seed")


def test_transcripts_can_be_switched_off(tiny_scheduler):
    sched = tiny_scheduler(transcripts=False)
    for _ in range(5):
        sched.step()
    assert all(not t.entries for t in sched.recorder.transcripts.values())


def test_loading_a_missing_party_is_a_clear_error(tmp_path):
    from privzv.errors import PrivzvError

    with pytest.raises(PrivzvError, match="device7"):
        transcript.load(tmp_path, "device7")


def test_a_streaming_recorder_holds_nothing_and_load_reads_it_back(tmp_path):
    """Entries go to the files as they come (none kept in memory), secret ones to the private
    folder with their position; a line cut by a kill ends the transcript; continuing from
    ``sync``'s sizes drops what came after them."""
    rec = transcript.Recorder(["server", "device0"], {"device0": {"records": 9}})
    rec.local("device0", 0, "batch", {"ids": torch.arange(3)})  # held, then streamed
    (tmp_path / "pub").mkdir()
    (tmp_path / "priv").mkdir()
    rec.stream_to(tmp_path / "pub", tmp_path / "priv", {("server", "local", "keep")})
    rec.message(Message(0, "device0", SERVER, "up", {"ids": torch.arange(3), "h": torch.ones(3, 2)}))
    rec.local(SERVER, 0, "keep", {"mask": torch.tensor([True, False, True])})
    sizes = rec.sync()
    assert all(not t.entries for t in rec.transcripts.values())
    rec.message(Message(1, SERVER, "device0", "down", {"d": torch.tensor([0.5])}))  # after the sync
    rec.sync()
    device = transcript.read_folder(tmp_path / "pub", "device0")
    assert [(e.round, e.direction, e.kind) for e in device.entries] == [
        (0, "local", "batch"),
        (0, "sent", "up"),
        (1, "received", "down"),
    ]
    assert device.meta == {"records": 9, "private": []} and device.entries[1].fields["h"].dtype == np.float32
    assert np.array_equal(device.entries[1].fields["ids"], np.arange(3))
    server = transcript.read_folder(tmp_path / "pub", SERVER)
    assert [e.kind for e in server.entries] == ["up", "down"]  # no keep in public
    (keep,) = transcript.read_folder(tmp_path / "priv", SERVER).entries
    assert keep.fields["_position"].tolist() == [1] and keep.fields["mask"].tolist() == [True, False, True]
    with open(tmp_path / "pub" / "device0.jsonl", "ab") as fh:  # a torn line
        fh.write(b'[2,"sent","up",[["ids","<i8",[3],0')
    assert len(transcript.read_folder(tmp_path / "pub", "device0").entries) == 3
    again = transcript.Recorder(["server", "device0"], {})
    again.stream_to(tmp_path / "pub", tmp_path / "priv", {("server", "local", "keep")}, sizes)
    again.sync()
    assert [e.kind for e in transcript.read_folder(tmp_path / "pub", "device0").entries] == ["batch", "up"]
    assert again.counts == {"server": 2, "device0": 2}
