"""The Flower apps of a privzv run (the components of the app that ``launcher`` submits).

``server_app``: the ServerApp. It runs ``privzv.training.run.train`` with the
:class:`~privzv.training.engines.flower.server.FlowerEngine` over its grid: the labels, the
head, the embedding table, the ledger and the server's noise generator live in this process.
Its inputs come from the SuperLink's environment (set by ``launcher``, never sent to a device):
``PRIVZV_FLOWER_OUT`` (the run folder), ``PRIVZV_FLOWER_STATUS`` (a JSON file it writes when
done: the summary and the wire bytes, or the ``error`` (bad input) or ``failed`` (runtime)), ``PRIVZV_FLOWER_KEYS`` (a 0600 file of the
devices' reply keys, :func:`reply_keys`), optional ``PRIVZV_FLOWER_SECRET_SEED_FILE`` (the path of a 0600 file with the secret seed),
``PRIVZV_FLOWER_OVERWRITE``, ``PRIVZV_FLOWER_CHECKPOINT_EVERY``, ``PRIVZV_FLOWER_TIMEOUT``,
``PRIVZV_FLOWER_RESUME`` (``1``: continue the run in the run folder from its last checkpoint),
``PRIVZV_FLOWER_USERS`` (party users' base id: it readies the devices' state folders, ``users``). The
public config is the run config ``privzv-config`` (JSON of ``TrainConfig``).

``client_app``: the ClientApp of device ``partition-id`` (node config; also ``folder``, its own
folder: transcript, data slice, the file ``noise-key`` with its private noise key and the
file ``reply-key`` with the key it signs its replies with; in Flower's simulation, which has no
such node config, ``$PRIVZV_FLOWER_DEVICES/device<m>``), and ``state``, its own state folder
(default ``<folder>/state``), where ``query.checkpoint`` saves its state and from which
``query.restore`` continues it (``devicestate``). ``query.hello`` carries the run's config
as the server resolved it (the tuned C and rates of ``privzv.training.defaults`` need every
device's model size) and sigma. In the executor the device (``device.DeviceParty``) lives in the
executor's memory between messages; in Flower's simulation in ``context.state`` (:func:`handle`).
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

from privzv.cliutil import Failed
from privzv.errors import PrivzvError
from privzv.training.config import TrainConfig
from privzv.training.engines.flower import codec, devicestate, users
from privzv.training.engines.flower.device import DeviceParty
from privzv.training.engines.flower.server import (
    ABORT,
    CARRIED,
    DELIVER,
    RESTORE,
    SAVE,
    FlowerEngine,
    GridTransport,
)
from privzv.training.messages import device_name
from privzv.training.run_folder import atomic_write

server_app = ServerApp()
client_app = ClientApp()


def public_config(context: Context) -> TrainConfig:
    return TrainConfig.from_dict(json.loads(str(context.run_config["privzv-config"]))).validate()


def reply_keys(path: Path) -> list[bytes]:
    """The devices' reply keys (hex, one a line) from the server's 0600 file ``path``."""
    try:
        return [bytes.fromhex(line) for line in path.read_text().split()]
    except (OSError, ValueError) as exc:
        raise PrivzvError(
            f"flower: {str(path)!r}: the devices' reply keys, hex, one a line ({exc})"
        ) from None


@server_app.main()
def main(grid: Grid, context: Context) -> None:
    from privzv.training import run

    env = os.environ
    status = Path(env["PRIVZV_FLOWER_STATUS"])
    engines: list[FlowerEngine] = []

    def engine(config):
        transport = GridTransport(grid, float(env.get("PRIVZV_FLOWER_TIMEOUT", "120")))
        if users.ENV in env:  # each device's state folder in the run folder, its own
            out = Path(env["PRIVZV_FLOWER_OUT"])
            states = [devicestate.in_run(out, m) for m in range(config.devices)]
            transport = users.Preparing(
                transport, users.Users(int(env[users.ENV])), out, states, (SAVE, RESTORE)
            )
        engines.append(FlowerEngine(transport, config, reply_keys(Path(env["PRIVZV_FLOWER_KEYS"]))))
        return engines[-1]

    try:
        torch.set_num_threads(1)
        secret = env.get("PRIVZV_FLOWER_SECRET_SEED_FILE")
        every = env.get("PRIVZV_FLOWER_CHECKPOINT_EVERY")
        summary = run.train(
            public_config(context),
            Path(env["PRIVZV_FLOWER_OUT"]),
            resume=env.get(RESUME_ENV) == "1",
            secret_seed=None if secret is None else int(Path(secret).read_text()),
            overwrite=env.get("PRIVZV_FLOWER_OVERWRITE") == "1",
            checkpoint_every=None if every is None else int(every),
            engine=engine,
        )
        result = {"summary": summary, "wire": engines[0].wire if engines else None}
    except PrivzvError as exc:
        result = {"error": str(exc)}
    except Failed as exc:  # a runtime failure (a device's reply missing or refused): exit 1
        result = {"failed": str(exc)}
    except Exception:  # reported to the launcher, which raises it where the user sees it
        result = {"error": "ServerApp failed:\n" + traceback.format_exc()}
    atomic_write(status, lambda fh: fh.write(json.dumps(result).encode()), private=True)


# --------------------------------------------------------------------------------- device side
DEVICES_ENV = "PRIVZV_FLOWER_DEVICES"  # simulation: the folder of the devices' folders
RESUME_ENV = "PRIVZV_FLOWER_RESUME"  # the ServerApp's: "1" continues the run folder's run
NOISE_KEY = "noise-key"  # in the device's folder, mode 0600: never on a command line (ps shows those)
REPLY_KEY = "reply-key"  # in the device's folder, mode 0600: the key its replies are signed with


def _secret_file(folder: Path, name: str, what: str) -> str:
    try:
        return (folder / name).read_text().strip()
    except OSError as exc:
        raise PrivzvError(
            f"flower: {str(folder / name)!r}: {what}, in a file only the device reads ({exc})"
        ) from None


def noise_key(folder: Path) -> bytes:
    """The device's private noise key, from the file ``NOISE_KEY`` (hex) in its own folder."""
    text = _secret_file(folder, NOISE_KEY, "the device's noise key")
    try:
        key = bytes.fromhex(text)
    except ValueError:
        key = b""
    if len(key) != 32:
        raise PrivzvError(
            f"flower: {str(folder / NOISE_KEY)!r}: the device's noise key must be 32 bytes in hex"
        )
    return key


def reply_key(folder: Path) -> bytes:
    """The device's key for signing its replies (``codec.sign``), hex in the file ``REPLY_KEY``."""
    try:
        return bytes.fromhex(_secret_file(folder, REPLY_KEY, "the device's reply key"))
    except ValueError:
        raise PrivzvError(f"flower: {str(folder / REPLY_KEY)!r}: the device's reply key, in hex") from None


def device_folder(node: dict, m: int) -> Path:
    """Device m's own folder: node config ``folder`` (a SuperNode's), else, in Flower's simulation
    (whose virtual SuperNodes have only ``partition-id``), ``$PRIVZV_FLOWER_DEVICES/device<m>``."""
    if "folder" in node:
        return Path(str(node["folder"]))
    if DEVICES_ENV not in os.environ:
        raise PrivzvError(
            f'flower: device {m} has no folder: set node config folder="DIR" '
            f"(a SuperNode) or {DEVICES_ENV} (the simulation engine)"
        )
    return Path(os.environ[DEVICES_ENV]) / device_name(m)


def state_folder(node: dict, m: int) -> Path:
    """Device m's own state folder: node config ``state``, else ``state`` in its folder."""
    return Path(str(node["state"])) if "state" in node else device_folder(node, m) / "state"


def _party(kind: str, content: RecordDict, node: dict, state: RecordDict, live: dict | None) -> DeviceParty:
    """Device m's party for a message: with ``live``, the one ``query.hello`` made and kept there;
    else rebuilt from ``state`` (the run's config and sigma, sent with hello, and its saved state)."""
    m = int(node["partition-id"])
    if kind == "query.hello":
        state.clear()
        if live is None:  # the server's config with the defaults it resolved (C, rates) and sigma
            state["config"] = ConfigRecord(dict(content["config"]))
        record = content["config"]
    elif live is not None:
        if m not in live:
            raise PrivzvError(f"flower: message kind {kind!r} reached device {m} before query.hello")
        return live[m]
    elif "config" not in state:
        raise PrivzvError(f"flower: message kind {kind!r} reached device {m} before query.hello")
    else:
        record = state["config"]
    config = TrainConfig.from_dict(json.loads(str(record["json"]))).validate()
    folder = device_folder(node, m)
    party = DeviceParty(config, m, noise_key(folder), float(record["sigma"]), folder, state_folder(node, m))
    if live is not None:
        live[m] = party
    elif "device" in state:
        party.restore(state["device"]["blob"])
    return party


def handle(
    kind: str, content: RecordDict, node: dict, state: RecordDict, live: dict | None = None
) -> RecordDict:
    """Device ``node["partition-id"]``'s answer to a message ``kind`` (``"query.send"``, ...) with
    ``content``. ``live`` (the long-lived executor's): device m stays in memory there, and nothing
    of it goes to ``state`` (the task's ``context.state``, which its SuperNode serves to whoever
    pulls the task); None (Flower's simulation, where the context stays in the SuperLink's
    process tree): ``state`` keeps the run's config and the device's state between messages."""
    party = _party(kind, content, node, state, live)
    if CARRIED in content:  # the end of the device's last round comes first, as in-process
        _end_round(party, str(content[CARRIED]["kind"]), content)
    if kind == "query.hello":  # the device loaded its slice and started its transcript
        reply = RecordDict({"node": ConfigRecord({"partition-id": party.m})})
    elif kind == "query.embed":
        h = party.embed(int(content["rows"]["start"]), int(content["rows"]["stop"]))
        reply = RecordDict({"h": ArrayRecord({"h": Array(h.numpy())})})
    elif kind == "query.send":
        ids = torch.from_numpy(content["batch"]["ids"].numpy().copy())
        reply = codec.encode(party.send(int(content["round"]["round"]), ids))
    elif kind == SAVE:
        tags = content["checkpoint"]
        party.checkpoint(devicestate.check_tag(str(tags["tag"])), devicestate.check_tag(str(tags["keep"])))
        reply = RecordDict({})
    elif kind == RESTORE:
        party.resume(devicestate.check_tag(str(content["checkpoint"]["tag"])))
        reply = RecordDict({})
    else:
        _end_round(party, kind, content)
        reply = RecordDict({})
    if live is None:
        state["device"] = ConfigRecord({"blob": party.save()})
    else:
        party.flush(durable=False)  # fsynced once the reply is out (the executor's ``run_task``)
    return reply


def _end_round(party: DeviceParty, kind: str, content: RecordDict) -> None:
    """``kind`` ``train.receive`` (the downlink in ``content``) or ``train.abort`` on ``party``
    (with gradients: a caller's ``no_grad``, an in-process evaluation's, does not reach it)."""
    if kind not in (DELIVER, ABORT):
        raise PrivzvError(
            f"flower: message kind {kind!r}: a device answers query.hello, query.send, "
            f"query.embed, {SAVE}, {RESTORE}, {DELIVER}, {ABORT}"
        )
    with torch.enable_grad():
        if kind == DELIVER:
            party.deliver(codec.decode(content))
        else:
            party.abort()


def answer(msg: Message, context: Context, live: dict | None = None) -> Message:
    """The signed reply of device ``partition-id`` to ``msg`` (:func:`handle`, ``codec.sign``),
    its content packed as the message's was (``codec.pack``)."""
    node = dict(context.node_config)
    content = handle(msg.metadata.message_type, codec.unpack(msg.content), node, context.state, live)
    key = reply_key(device_folder(node, int(node["partition-id"])))
    return Message(codec.pack(codec.sign(key, msg.metadata.message_id, content)), reply_to=msg)


def _answer(msg: Message, context: Context) -> Message:
    return answer(msg, context)


for _kind in ("hello", "send", "embed", "checkpoint", "restore"):
    client_app.query(_kind)(_answer)
for _kind in ("receive", "abort"):
    client_app.train(_kind)(_answer)
