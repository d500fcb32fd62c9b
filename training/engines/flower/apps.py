"""The Flower apps of a privzv run (the components of the app that ``launcher`` submits).

``server_app``: the ServerApp. It runs ``privzv.training.run.train`` with the
:class:`~privzv.training.engines.flower.server.FlowerEngine` over its grid: the labels, the
head, the embedding table, the ledger and the server's noise generator live in this process.
Its inputs come from the SuperLink's environment (set by ``launcher``, never sent to a device):
``PRIVZV_FLOWER_OUT`` (the run folder), ``PRIVZV_FLOWER_STATUS`` (a JSON file it writes when
done: the summary and the wire bytes, or the error), optional ``PRIVZV_FLOWER_SECRET_SEED``,
``PRIVZV_FLOWER_OVERWRITE``, ``PRIVZV_FLOWER_CHECKPOINT_EVERY``, ``PRIVZV_FLOWER_TIMEOUT``. The
public config is the run config ``privzv-config`` (JSON of ``TrainConfig``).

``client_app``: the ClientApp of device ``partition-id`` (node config; also ``folder``, its own
folder: transcript, data slice, and the file ``noise-key`` with its private noise key; in
Flower's simulation, which has no such node config, ``$PRIVZV_FLOWER_DEVICES/device<m>``). Its state between
messages is ``context.state``: ``"config"``, the run's config as the server resolved it (sent with
``query.hello``: the tuned C and rates of ``privzv.training.defaults`` need every device's model
size), and ``"device"`` (``device.DeviceParty``).
"""
from __future__ import annotations

import json
import os
import traceback
from pathlib import Path

import torch
from flwr.app import Array, ArrayRecord, ConfigRecord, Context, Message, RecordDict
from flwr.clientapp import ClientApp
from flwr.serverapp import Grid, ServerApp

from privzv.errors import PrivzvError
from privzv.training.config import TrainConfig
from privzv.training.engines.flower import codec, waits
from privzv.training.engines.flower.device import DeviceParty
from privzv.training.engines.flower.server import FlowerEngine, GridTransport
from privzv.training.messages import device_name

server_app = ServerApp()
client_app = ClientApp()


def public_config(context: Context) -> TrainConfig:
    return TrainConfig.from_dict(json.loads(str(context.run_config["privzv-config"]))).validate()


@server_app.main()
def main(grid: Grid, context: Context) -> None:
    from privzv.training import run

    env = os.environ
    status = Path(env["PRIVZV_FLOWER_STATUS"])
    engines: list[FlowerEngine] = []

    def engine(config):
        transport = GridTransport(grid, float(env.get("PRIVZV_FLOWER_TIMEOUT", "120")))
        engines.append(FlowerEngine(transport, config))
        return engines[-1]

    try:
        import flwr.superlink.grid.http_grid as http_grid

        waits.quick_pulls(http_grid)   # the replies' objects: no 1 s wait for one not yet stored
        torch.set_num_threads(1)
        secret = env.get("PRIVZV_FLOWER_SECRET_SEED")
        every = env.get("PRIVZV_FLOWER_CHECKPOINT_EVERY")
        summary = run.train(public_config(context), Path(env["PRIVZV_FLOWER_OUT"]),
                            secret_seed=None if secret is None else int(secret),
                            overwrite=env.get("PRIVZV_FLOWER_OVERWRITE") == "1",
                            checkpoint_every=None if every is None else int(every), engine=engine)
        result = {"summary": summary, "wire": engines[0].wire if engines else None}
    except PrivzvError as exc:
        result = {"error": str(exc)}
    except Exception:   # reported to the launcher, which raises it where the user sees it
        result = {"error": "ServerApp failed:\n" + traceback.format_exc()}
    tmp = status.with_suffix(".tmp")
    tmp.write_text(json.dumps(result))
    tmp.replace(status)


# --------------------------------------------------------------------------------- device side
DEVICES_ENV = "PRIVZV_FLOWER_DEVICES"   # simulation: the folder of the devices' folders
NOISE_KEY = "noise-key"   # in the device's folder, mode 0600: never on a command line (ps shows those)


def noise_key(folder: Path) -> bytes:
    """The device's private noise key, from the file ``NOISE_KEY`` (hex) in its own folder."""
    try:
        key = bytes.fromhex((folder / NOISE_KEY).read_text())
    except (OSError, ValueError) as exc:
        raise PrivzvError(f"flower: {str(folder / NOISE_KEY)!r}: the device's noise key, 32 bytes "
                          f"in hex in a file only the device reads ({exc})") from None
    if len(key) != 32:
        raise PrivzvError(f"flower: {str(folder / NOISE_KEY)!r}: the device's noise key must be 32 bytes")
    return key


def device_folder(node: dict, m: int) -> Path:
    """Device m's own folder: node config ``folder`` (a SuperNode's), else, in Flower's simulation
    (whose virtual SuperNodes have only ``partition-id``), ``$PRIVZV_FLOWER_DEVICES/device<m>``."""
    if "folder" in node:
        return Path(str(node["folder"]))
    if DEVICES_ENV not in os.environ:
        raise PrivzvError(f"flower: device {m} has no folder: set node config folder=\"DIR\" "
                          f"(a SuperNode) or {DEVICES_ENV} (the simulation engine)")
    return Path(os.environ[DEVICES_ENV]) / device_name(m)


def handle(kind: str, content: RecordDict, node: dict, state: RecordDict) -> RecordDict:
    """Device ``node["partition-id"]``'s answer to a message ``kind`` (``"query.send"``, ...) with
    ``content``; ``state`` (its ``context.state``) is read and updated: it keeps the run's config
    (resolved by the server, sent with ``query.hello``) and the device's state."""
    m = int(node["partition-id"])
    kept = state["device"] if "device" in state else None
    # the server's config with the defaults it resolved (C, rates), sent with hello and kept
    if kind == "query.hello":
        state["config"] = ConfigRecord({"json": str(content["config"]["json"])})
    if "config" not in state:
        raise PrivzvError(f"flower: message kind {kind!r} reached device {m} before query.hello")
    config = TrainConfig.from_dict(json.loads(str(state["config"]["json"]))).validate()
    if kind == "query.send":
        sigma = float(content["round"]["sigma"])
    else:
        sigma = float(kept["sigma"]) if kept is not None else 0.0
    folder = device_folder(node, m)
    party = DeviceParty(config, m, noise_key(folder), sigma, folder)
    if kept is not None:
        party.restore(kept["blob"])
    if kind == "query.hello":   # the device loads its slice and starts its transcript
        reply = RecordDict({"node": ConfigRecord({"partition-id": m})})
    elif kind == "query.embed":
        h = party.embed(int(content["rows"]["start"]), int(content["rows"]["stop"]))
        return RecordDict({"h": ArrayRecord({"h": Array(h.numpy())})})
    elif kind == "query.send":
        ids = torch.from_numpy(content["batch"]["ids"].numpy().copy())
        reply = codec.encode(party.send(int(content["round"]["round"]), ids))
    elif kind == "train.receive":
        party.deliver(codec.decode(content))
        reply = RecordDict({})
    elif kind == "train.abort":
        party.abort()
        reply = RecordDict({})
    else:
        raise PrivzvError(f"flower: message kind {kind!r}: a device answers query.hello, query.send, "
                          "train.receive, train.abort, query.embed")
    state["device"] = ConfigRecord({"blob": party.save(), "sigma": float(party.method.sigma)})
    return reply


def _answer(msg: Message, context: Context) -> Message:
    return Message(handle(msg.metadata.message_type, msg.content, dict(context.node_config),
                          context.state), reply_to=msg)


for _kind in ("hello", "send", "embed"):
    client_app.query(_kind)(_answer)
for _kind in ("receive", "abort"):
    client_app.train(_kind)(_answer)
