"""core.files: a user's write problem is one sentence naming the path; atomic writes leave the old
file or the new one and no temporary; a killed writer's temporaries go at the next write."""
from __future__ import annotations

import errno
import os
import subprocess
import sys
import time

import pytest

from core import files
from core.errors import WorkbenchError


def test_a_full_disk_names_the_path_what_was_needed_and_what_is_free(tmp_path, monkeypatch):
    monkeypatch.setattr(files, "free_bytes", lambda path: 1_000_000)
    e = files.write_error(tmp_path / "m.onnx", OSError(errno.ENOSPC, "No space left on device"), needed=12_300_000)
    assert str(e) == f"cannot write {tmp_path / 'm.onnx'}: the disk is full (needs 12 MB, 1 MB free)."
    e = files.write_error("out/x.onnx", OSError(errno.EROFS, "Read-only file system"))
    assert str(e) == "cannot write out/x.onnx: the file system is read-only."
    assert str(files.write_error("/ro/x.onnx", PermissionError(errno.EACCES, "Permission denied"))) == \
        "cannot write /ro/x.onnx: permission denied."
    assert files.write_error("x", ValueError("a bug")) is None  # not the user's: raised as it is
    assert files.write_error("x", OSError(errno.EIO, "Input/output error")) is None


def test_a_linkers_failure_with_the_system_text_inside_is_recognised():
    # what TVM's export_library raised onto a full tmpfs (tvm/support/cc.py)
    linker = RuntimeError("Compilation error:\n/usr/bin/ld: final link failed: No space left on device\n"
                          "collect2: error: ld returned 1 exit status\n\nCommand line: /usr/bin/g++ -shared -o /mnt/art/model.so")
    assert files.user_errno(linker) == errno.ENOSPC
    assert str(files.write_error("/mnt/art", linker)).startswith("cannot write /mnt/art: the disk is full")
    wrapped = RuntimeError("export failed")
    wrapped.__cause__ = OSError(errno.EROFS, "Read-only file system")
    assert files.user_errno(wrapped) == errno.EROFS
    # without a known path only an OSError's errno counts, never an error's text
    assert files.user_error(linker) is None
    assert str(files.user_error(OSError(errno.ENOSPC, "No space left on device", "/mnt/a.txt"))).startswith(
        "cannot write /mnt/a.txt: the disk is full")
    assert str(files.user_error(PermissionError(errno.EACCES, "Permission denied", "/etc/x"))) == "cannot use /etc/x: permission denied."


def test_sizes_read_as_people_write_them():
    assert [files.describe_size(n) for n in (1, 312, 1_000, 48_200, 1_520_000, 12_300_000, 2_100_000_000)] == \
        ["1 byte", "312 bytes", "1 kB", "48 kB", "1.5 MB", "12 MB", "2.1 GB"]


def test_writing_refuses_what_cannot_fit_before_writing_anything(tmp_path, monkeypatch):
    monkeypatch.setattr(files, "free_bytes", lambda path: 100)
    with pytest.raises(WorkbenchError, match=r"cannot write .*new/a\.bin: the disk is full \(needs 1 kB, 100 bytes free\)\."):
        files.atomic_write(tmp_path / "new" / "a.bin", b"x" * 1000)
    assert list(tmp_path.iterdir()) == []  # not even the folder it would have made


def test_atomic_write_replaces_whole_or_leaves_the_old_file(tmp_path):
    target = tmp_path / "a.json"
    files.atomic_write(target, b"old")
    os.chmod(target, 0o640)

    def half_then_fail(f):
        f.write(b"new, half of it")
        raise OSError(errno.ENOSPC, "No space left on device")

    with pytest.raises(WorkbenchError, match=r"a\.json: the disk is full"):
        files.atomic_write(target, half_then_fail)
    assert target.read_bytes() == b"old" and sorted(p.name for p in tmp_path.iterdir()) == ["a.json"]
    files.atomic_write(target, b"new")
    assert target.read_bytes() == b"new" and target.stat().st_mode & 0o777 == 0o640  # the old file's mode is kept


def test_stale_temporaries_of_dead_writers_go_and_those_of_live_ones_stay(tmp_path):
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()  # reaped: its pid names no process now
    names = {
        f".m.onnx.{dead.pid}-0123abcd.tmp": False,  # a killed save's: removed
        f".m.onnx.{os.getpid()}-0123abcd.tmp": True,  # this process's own write in progress: kept
        f".m.onnx.{os.getppid()}-89abcdef.tmp": True,  # a live writer's: kept
        f"m.onnx.{dead.pid}-0123abcd.tmp": True,  # not a name the scheme makes
        ".m.onnx.abcd_123.tmp": True,  # the older scheme's, young: a writer may still be at it
        ".x.onnx.a1b2c3d4.tmp": False,  # the older scheme's, hours old
        "notes.tmp": True,
    }
    for name in names:
        (tmp_path / name).write_bytes(b"x")
    old = time.time() - 2 * files.LEGACY_TEMP_AGE_S
    os.utime(tmp_path / ".x.onnx.a1b2c3d4.tmp", (old, old))
    removed = files.remove_stale_temporaries(tmp_path)
    assert sorted(p.name for p in removed) == sorted(n for n, kept in names.items() if not kept)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(n for n, kept in names.items() if kept)
    assert files.is_temporary_name(files.temporary_name(tmp_path / "m.onnx").name)


def test_a_read_only_or_unwritable_target_is_refused_early(tmp_path, monkeypatch):
    files.check_writable(tmp_path / "new" / "art")  # a folder to be made below a writable one: fine
    monkeypatch.setattr(files.os, "access", lambda path, mode: False)
    with pytest.raises(WorkbenchError, match=r"cannot write .*art: permission denied\."):
        files.check_writable(tmp_path / "new" / "art")


def test_a_file_system_without_blocks_says_nothing_of_space():
    """sysfs reports 0 blocks: that is no space figure, so a write there is refused for what it is
    (permission denied), not as a full disk."""
    import os

    from core.files import free_bytes

    if not os.path.isdir("/sys") or os.statvfs("/sys").f_blocks != 0:
        pytest.skip("no block-less file system mounted at /sys here")
    assert free_bytes("/sys/mlp.onnx") is None
