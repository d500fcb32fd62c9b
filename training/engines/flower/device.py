"""Device m's part of the protocol inside its ClientApp: its own data, model, method and state.

In privzv's long-lived ``executor`` a :class:`DeviceParty` lives from ``query.hello`` to the end
of the run (:meth:`DeviceParty.flush` after each message); in a Ray worker shared by the devices
(simulation) it is rebuilt per message from ``context.state`` (:meth:`DeviceParty.save` /
:meth:`DeviceParty.restore`: its model, step counter t_m, private noise generator and the
method's state of this device, serialised with ``torch.save``). Either way, between its uplink and the downlink a device
keeps its state as it was *before* the uplink and the round's batch; on the downlink (or a
refusal) it recomputes its uplink from that state (``method.device_send``, deterministic given
the state, as Flower's vertical-FL example recomputes its forward) and then runs
``method.device_receive`` (or ``method.device_abort``). The features are loaded inside the app
from the device's partition id (:func:`own_data`): the columns of device m, train and test, and
nothing else is kept; labels are never loaded into the party. At each of the server's
checkpoints the device saves its state in its own state folder (:meth:`DeviceParty.checkpoint`),
from which a resumed run continues it (:meth:`DeviceParty.resume`; ``devicestate``).
"""

from __future__ import annotations

import dataclasses
import io
import types
from pathlib import Path

import torch

from privzv.errors import PrivzvError
from privzv.training import data, methods, models, noise, seeds
from privzv.training.config import TrainConfig
from privzv.training.engines.flower import devicestate
from privzv.training.engines.inprocess import end_round
from privzv.training.messages import Message, device_name
from privzv.training.parties import Device, EmbeddingTable, Server
from privzv.training.transcript import Recorder


@dataclasses.dataclass(frozen=True)
class OwnData:
    """What device m holds of the dataset: its feature columns of the train and test records."""

    name: str
    partition: str
    num_classes: int
    x_train: torch.Tensor
    x_test: torch.Tensor
    vocab: int | None = None  # token-id features: their id range (the device model's vocabulary)


def own_data(config: TrainConfig, m: int, cache: Path | None = None) -> tuple[OwnData, torch.nn.Module]:
    """Device m's features (train, test) and its freshly initialised bottom model (seeded as in
    ``run.build``); the rest of the dataset, labels included, is dropped before returning. With
    ``cache`` (a file in the device's own folder) the slice is loaded once and kept there."""
    if cache is not None and cache.exists():
        own = OwnData(**torch.load(cache, weights_only=True))
    else:
        dataset = data.from_config(config)
        own = OwnData(
            dataset.name,
            str(dataset.partition),
            dataset.num_classes,
            dataset.x_train[m],
            dataset.x_test[m],
            dataset.vocab,
        )
        del dataset
        if cache is not None:
            torch.save(dataclasses.asdict(own), cache)
    shape = types.SimpleNamespace(
        name=own.name, devices=config.devices, x_train={m: own.x_train}, vocab=own.vocab
    )
    torch.manual_seed(seeds.derive(config.seed, "init", m))
    return own, models.device_model(shape, m, config.embed_dim, config.device_model, config.model_weights)


def private_noise(config: TrainConfig, key: bytes) -> noise.NoiseSource:
    """The device's private source from its key (``seeds.key(secret, "device", m)``, given to this
    device alone), as ``noise.source(config, secret, "device", m)`` makes it."""
    return noise.SecureNoise() if config.secure_noise else noise.KeyedNoise(key)


class DeviceParty:
    """Device ``m``: data, model, method and state (kept by the executor, or rebuilt per message).

    ``sigma`` is the run's release sigma (public, it is in config.json), given by the server.
    ``folder``: the device's own folder (its transcript, its data slice); None: no transcript.
    ``state``: its own state folder, where it saves its checkpoints (``devicestate``).
    """

    def __init__(
        self,
        config: TrainConfig,
        m: int,
        noise_key: bytes,
        sigma: float,
        folder: Path | None = None,
        state: Path | None = None,
    ):
        self.config, self.m, self.state = config, m, state
        self.data, model = own_data(config, m, None if folder is None else folder / "own-data.pt")
        self.device = Device(
            m, model, self.data.x_train, seed=config.seed, noise=private_noise(config, noise_key)
        )
        self.method = methods.get(config.method)(config, sigma=sigma)
        self.method.setup([self.device], _no_server(config, self.data.num_classes))
        self.pending: dict | None = None
        self.folder = folder if config.transcripts else None
        self.recorder = self._recorder()
        self.transcript_sizes: dict | None = None  # the transcript files' sizes after the last message
        self.mirrored = [0, 0]  # the transcript bytes copied to the state folder at the last save
        self.device.note = self._note

    def _recorder(self) -> Recorder:
        return Recorder(
            [device_name(self.m)], {device_name(self.m): self._meta()}, enabled=self.folder is not None
        )

    def _meta(self) -> dict:
        return {
            "party": device_name(self.m),
            "dataset": self.data.name,
            "records": len(self.data.x_train),
            "partition": self.data.partition,
            "features_shape": list(self.data.x_train.shape[1:]),
            "engine": "flower",
            "contains": {
                "raw_embeddings": [device_name(self.m)] if self.method.RELEASED_BY == "server" else []
            },
        }

    def _note(self, kind: str, fields: dict) -> None:
        self.recorder.local(device_name(self.m), self.method.round, kind, fields)

    # state across messages ------------------------------------------------------------------
    def save(self) -> bytes:
        self._append_transcript()
        buf = io.BytesIO()
        torch.save(
            {
                "model": self.device.model.state_dict(),
                "step": self.device.step,
                "noise": self.device.noise.state_dict(),
                "method": self.method.extra_state(),
                "pending": self.pending,
                "transcript": self.transcript_sizes,
                "mirrored": self.mirrored,
            },
            buf,
        )
        return buf.getvalue()

    def _append_transcript(self) -> None:
        """Append this message's entries to the device's transcript files, continued from their
        sizes after the last message (anything a failed message left after them is cut off):
        the cost of a message does not grow with the run's length."""
        if self.folder is None:
            return
        self.recorder.stream_to(self.folder, sizes=self.transcript_sizes)
        self.transcript_sizes = self.recorder.sync()
        self.recorder.close()
        self.recorder = self._recorder()

    def flush(self, durable: bool = True) -> None:
        """After each message of a long-lived party (the executor's): this message's transcript
        entries written and synced to its folder, the files kept open for the next.
        ``durable=False``: written (a killed process loses none), not yet fsynced."""
        if self.folder is None:
            return
        if not self.recorder.streaming:
            self.recorder.stream_to(self.folder, sizes=self.transcript_sizes)
        self.transcript_sizes = self.recorder.sync(durable)

    def restore(self, blob: bytes) -> None:
        state = torch.load(io.BytesIO(blob), weights_only=False)
        self.device.model.load_state_dict(state["model"])
        self.device.step = state["step"]
        self.device.noise.load_state_dict(state["noise"])
        self.method.load_extra_state(state["method"])
        self.pending = state["pending"]
        self.transcript_sizes = state["transcript"]
        self.mirrored = state["mirrored"]

    # checkpoints --------------------------------------------------------------------------------
    def checkpoint(self, tag: str, keep: str) -> None:
        """Save this device's state as the server's checkpoint ``tag`` in its own state folder,
        keeping the state of checkpoint ``keep`` (``devicestate``); no round of it may be open."""
        if self.pending is not None:
            raise RuntimeError(f"device {self.m}: checkpoint {tag} with round {self.pending['round']} open")
        self.flush()
        devicestate.make_folder(self.state)
        party = device_name(self.m)
        sizes = None if self.folder is None else self.transcript_sizes[party]["public"]
        if sizes is not None:
            devicestate.mirror(self.folder, self.state, party, self.mirrored, sizes)
        devicestate.write(
            self.state,
            tag,
            {
                "device": self.m,
                "tag": tag,
                "config": self.config.to_dict(),
                "model": self.device.model.state_dict(),
                "step": self.device.step,
                "noise": self.device.noise.state_dict(),
                "method": self.method.extra_state(),
                "transcript": self.transcript_sizes,
            },
            keep,
        )
        self.mirrored = sizes or [0, 0]

    def resume(self, tag: str) -> None:
        """Continue from this device's own state of the server's checkpoint ``tag`` (``FRESH``: as
        ``query.hello`` built it); its states of later checkpoints are dropped."""
        if tag != devicestate.FRESH:
            saved = devicestate.read(self.state, tag)
            if (saved.get("device"), saved.get("tag"), saved.get("config")) != (
                self.m,
                tag,
                self.config.to_dict(),
            ):
                raise PrivzvError(
                    f"flower: {str(devicestate.path(self.state, tag))!r}: not device {self.m}'s state "
                    f"of checkpoint {tag} in this run's config"
                )
            self.device.model.load_state_dict(saved["model"])
            self.device.step = saved["step"]
            self.device.noise.load_state_dict(saved["noise"])
            self.method.load_extra_state(saved["method"])
            if self.folder is not None:
                sizes = saved["transcript"][device_name(self.m)]["public"]
                self.recorder.close()
                devicestate.copy_back(self.state, self.folder, device_name(self.m), sizes)
                self.recorder = self._recorder()
                self.transcript_sizes, self.mirrored = saved["transcript"], sizes
        if self.state.is_dir():
            devicestate.drop_all_but(self.state, {tag})

    # the three halves -------------------------------------------------------------------------
    def send(self, round_: int, ids: torch.Tensor) -> Message:
        """``method.device_send`` on this device's batch ``ids``; the state kept is the one before."""
        self.method.round = round_
        before = self.save_model_state()
        self.device.note("batch", {"ids": ids})
        up = self.method.device_send(self.device, ids)
        self.recorder.message(up)
        self.load_model_state(before)
        self.device.scratch.clear()
        self.pending = {"round": round_, "ids": ids.clone(), "noise": before["noise"]}
        return up

    def _replay(self) -> None:
        """Recompute the pending uplink (nothing noted) so that ``device.scratch`` holds it again."""
        pending, self.pending = self.pending, None
        if pending is None:
            raise RuntimeError(f"device {self.m}: a downlink without a pending uplink")
        self.method.round = pending["round"]
        self.device.noise.load_state_dict(pending["noise"])
        note, self.device.note = self.device.note, lambda kind, fields: None
        try:
            self.method.device_send(self.device, pending["ids"])
        finally:
            self.device.note = note

    def deliver(self, down: Message) -> None:
        self._replay()
        self.recorder.message(down)
        self.method.device_receive(self.device, down)
        end_round(self.device, stepped=True)

    def abort(self) -> None:
        self._replay()
        self.method.device_abort(self.device)
        end_round(self.device, stepped=False)

    def embed(self, start: int, stop: int) -> torch.Tensor:
        """This device's embeddings of test records start..stop-1 (evaluation mode, no grad)."""
        model = self.device.model
        mode = model.training
        model.eval()
        with torch.no_grad():
            h = model(self.data.x_test[start:stop])
        model.train(mode)
        return h

    def save_model_state(self) -> dict:
        return {
            "model": {k: v.clone() for k, v in self.device.model.state_dict().items()},
            "noise": self.device.noise.state_dict(),
        }

    def load_model_state(self, state: dict) -> None:
        self.device.model.load_state_dict(state["model"])
        self.device.noise.load_state_dict(state["noise"])


def _no_server(config: TrainConfig, num_classes: int) -> Server:
    """A server stand-in for ``method.setup`` on a device: a head of the public architecture (no
    labels, an empty table); whatever the method builds for the server here is never used."""
    head = models.server_model(config.devices, config.embed_dim, num_classes, kind=config.server_kind)
    return Server(
        head,
        torch.zeros(0, dtype=torch.int64),
        EmbeddingTable(config.devices, 0, config.embed_dim),
        noise.SeededNoise(0, "unused"),
    )
