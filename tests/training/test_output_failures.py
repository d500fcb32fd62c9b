"""A run whose writes fail (a full disk, an I/O error): one stderr line, exit 1, and either no run
folder at all (before its round-0 commit) or a folder that --resume continues to the unfailed
run's result (issue 24 item 3)."""

from __future__ import annotations

import errno
import json
import os
import subprocess

import pytest

from privzv.cli import main
from privzv.training import run_folder

FLAGS = [
    "train",
    "--dataset",
    "digits",
    "--devices",
    "2",
    "--epochs",
    "0.05",
    "--sigma",
    "1",
    "--epsilon",
    "50",
    "--seed",
    "1",
    "--secret-seed",
    "3",
    "--checkpoint-every",
    "1",
    "--json",
]


pytestmark = pytest.mark.usefixtures("no_plots")  # conftest.py


@pytest.fixture(scope="module")
def reference(tmp_path_factory, no_plots):
    """The run unfailed, and how many atomic writes it made."""
    out = tmp_path_factory.mktemp("reference") / "run"
    real, calls = run_folder.atomic_write, []
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(run_folder, "atomic_write", lambda *a, **kw: (calls.append(a[0]), real(*a, **kw)))
        assert main([*FLAGS, "--out", str(out)]) == 0
    return out, len(calls)


def _same_result(out, reference):
    ours, theirs = (json.loads((o / "summary.json").read_text()) for o in (out, reference))
    drop = ("wall_seconds",)
    assert {k: v for k, v in ours.items() if k not in drop} == {
        k: v for k, v in theirs.items() if k not in drop
    }
    assert (out / "private" / "ledger.json").read_bytes() == (
        reference / "private" / "ledger.json"
    ).read_bytes()
    for name in ("server.bin", "device0.bin", "server.jsonl"):
        assert (out / "transcripts" / name).read_bytes() == (reference / "transcripts" / name).read_bytes()


def _full_disk_after(count: int):
    """atomic_write that fails with ENOSPC from its ``count``-th call on."""
    real, calls = run_folder.atomic_write, []

    def write(path, *args, **kwargs):
        calls.append(path)
        if len(calls) >= count:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))
        return real(path, *args, **kwargs)

    return write


def _one_line_failure(capsys, rc):
    err = capsys.readouterr().err
    assert rc == 1 and len(err.splitlines()) == 1 and "Traceback" not in err, err
    assert "No space left on device" in err and "failed:" in err
    return err


@pytest.mark.parametrize("when", ["before the commit", "mid-run", "at the last write"])
def test_a_full_disk_is_one_line_and_leaves_no_folder_or_a_resumable_one(
    when, reference, tmp_path, capsys, monkeypatch
):
    count = {"before the commit": 3, "mid-run": reference[1] // 2, "at the last write": reference[1]}[when]
    out = tmp_path / "run"
    monkeypatch.setattr(run_folder, "atomic_write", _full_disk_after(count))
    err = _one_line_failure(capsys, main([*FLAGS, "--out", str(out)]))
    monkeypatch.undo()
    if when == "before the commit":
        assert "no run folder was left" in err and list(tmp_path.iterdir()) == []
        return
    assert "--resume" in err and not (out / "summary.json").exists()
    assert [p.name for p in tmp_path.iterdir()] == ["run"]  # no temp folder, no lock
    assert not list(out.rglob(".*.tmp"))
    assert main(["train", "--resume", str(out), "--json"]) == 0
    _same_result(out, reference[0])


def test_a_full_disk_in_the_journal_or_a_transcript_is_one_line(reference, tmp_path, capsys, monkeypatch):
    """Appends (the ledger's journal, a transcript) fail the same way, and the run resumes."""
    appended = []

    def full(self, line):
        appended.append(line)
        if len(appended) == 3:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real(self, line)

    real = run_folder.JournaledLedger._append
    monkeypatch.setattr(run_folder.JournaledLedger, "_append", full)
    out = tmp_path / "run"
    err = _one_line_failure(capsys, main([*FLAGS, "--out", str(out)]))
    assert "--resume" in err
    monkeypatch.undo()
    assert main(["train", "--resume", str(out), "--json"]) == 0
    _same_result(out, reference[0])


def _mount_tmpfs(path, size: str) -> None:
    path.mkdir()
    proc = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], capture_output=True, text=True
    )
    if proc.returncode != 0:
        path.rmdir()
        pytest.skip(f"cannot mount a tmpfs here (needs root or CAP_SYS_ADMIN): {proc.stderr.strip()}")


def test_a_real_full_disk_then_resume(reference, tmp_path, capsys):
    """A small tmpfs filled to leave a little room: the run fails with one line wherever the disk
    fills; once room is made, --resume finishes it to the unfailed run's result."""
    disk = tmp_path / "disk"
    _mount_tmpfs(disk, "4m")
    try:
        outcomes = []  # per room left: whether the run folder was kept
        for room in (16_000, 200_000, 400_000, 600_000, 800_000, 1_000_000, 1_400_000):
            out = disk / f"run{room}"
            stat = os.statvfs(disk)
            with open(disk / "filler", "wb") as fh:
                fh.write(bytes(max(0, stat.f_bavail * stat.f_frsize - room)))
            rc = main([*FLAGS, "--out", str(out)])
            (disk / "filler").unlink()
            if rc == 0:  # the whole run fit
                break
            _one_line_failure(capsys, rc)
            assert sorted(p.name for p in disk.iterdir()) == ([out.name] if out.exists() else [])
            outcomes.append(out.exists())
            if out.exists():  # failed after its commit: room made, the resume finishes it
                assert main(["train", "--resume", str(out), "--json"]) == 0
                _same_result(out, reference[0])
                break
        assert outcomes[0] is False and outcomes[-1] is True, outcomes
    finally:
        subprocess.run(["umount", str(disk)], check=False)
