"""``python -m privzv.training.engines.flower.serverexec ARGS``: ``flower-superexec ARGS`` whose
processes get their task token in a 0600 file, not on their command line.

Flower 1.41's SuperExec starts ``flwr-serverapp --token TOKEN``
(``flwr/supercore/superexec/executor/subprocess_executor.py``): every local user reads the token
in ``ps``, and with it could act as the run's ServerApp (push messages to the devices, pull their
replies). Here ``SubprocessExecutor.launch`` writes the token to a file of mode 0600 in the
working directory (the run's 0700 work folder) and passes ``--token-file`` instead. The privzv
launcher starts this beside a SuperLink run with ``--isolation process`` and the SuperExec
secret (``--superexec-auth-secret-file``), so that no other process can take the ServerApp's task.
Each ServerApp's exit code goes to the file ``serverapp-PID.exit`` there when it exits.
"""

from __future__ import annotations

import secrets
import subprocess
import sys
import threading
from pathlib import Path

EXIT_PREFIX = "serverapp-"


def launch(self, spec):
    """``SubprocessExecutor.launch`` with ``--token-file`` (a 0600 file) for ``--token``."""
    from flwr.supercore.constant import TASK_TYPE_TO_APPIO_API_ADDRESS_ARG, TASK_TYPE_TO_COMMAND
    from flwr.supercore.superexec.executor.types import LaunchResult

    from privzv.training.engines.flower.credentials import private_file

    token = private_file(
        Path.cwd() / f"task-{spec.task_id}-{secrets.token_hex(4)}.token", spec.token.encode()
    )
    args = [
        TASK_TYPE_TO_COMMAND[spec.task_type],
        TASK_TYPE_TO_APPIO_API_ADDRESS_ARG[spec.task_type],
        spec.runtime_api_address,
        "--token-file",
        str(token),
    ]
    if spec.insecure:
        args.append("--insecure")
    elif spec.root_certificates_path is not None:
        args.extend(["--root-certificates", spec.root_certificates_path])
    if spec.parent_pid is not None:
        args.extend(["--parent-pid", str(spec.parent_pid)])
    proc = subprocess.Popen(args)  # pylint: disable=consider-using-with  (the guard stops it)
    threading.Thread(target=_record_exit, args=(proc,), daemon=True).start()
    return LaunchResult.accepted()


def _record_exit(proc: subprocess.Popen) -> None:
    """When the ServerApp ``proc`` exits, its code in ``serverapp-PID.exit`` (in the work folder):
    the launcher learns at once that it ended, with a result or without."""
    code = proc.wait()
    (Path.cwd() / f"{EXIT_PREFIX}{proc.pid}.exit").write_text(str(code))


def main() -> None:
    from flwr.supercore.cli.flower_superexec import flower_superexec
    from flwr.supercore.superexec.executor import subprocess_executor

    subprocess_executor.SubprocessExecutor.launch = launch
    sys.argv[0] = "flower-superexec"
    flower_superexec()


if __name__ == "__main__":
    main()
