"""scripts/setup_emulation.py without building anything: what it cannot install is one sentence and
exit status 2, and a cache whose stamp matches is left as it is (a fast no-op). The build itself
runs on CI (.ci/run) and is exercised by tests/core/compiler/runtime/test_emulation.py."""
from __future__ import annotations

import json

import pytest

from scripts import setup_emulation as se


def test_a_missing_qemu_is_one_sentence_and_exit_status_2(monkeypatch, capsys):
    monkeypatch.setattr(se.platform, "machine", lambda: "x86_64")
    monkeypatch.setattr(se.shutil, "which", lambda name: None)
    assert se.main([]) == 2
    err = capsys.readouterr().err.strip()
    assert err == ("setup_emulation: qemu-aarch64 is not installed; install it once (sudo apt-get install qemu-user-static) "
                   "and run this script again.")


def test_an_unknown_triple_is_refused(monkeypatch, capsys):
    assert se.main(["--triple", "riscv64-linux-gnu"]) == 2
    assert "no emulation is known for 'riscv64-linux-gnu'" in capsys.readouterr().err


def test_a_matching_stamp_makes_a_rerun_a_no_op(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv(se.DIR_ENV, str(tmp_path))
    monkeypatch.setattr(se.platform, "machine", lambda: "x86_64")
    monkeypatch.setattr(se, "check_host", lambda triple: "/usr/bin/qemu-aarch64-static")

    def no_commands(*a, **k):
        raise AssertionError("a re-run with a matching stamp runs nothing")

    monkeypatch.setattr(se, "run", no_commands)
    root = tmp_path / "aarch64-linux-gnu"
    (root / "sysroot" / "usr" / "bin").mkdir(parents=True)
    (root / "sysroot" / "usr" / "bin" / "python3.11").write_text("")
    (root / "site" / "tvm").mkdir(parents=True)
    key = {"format": se.FORMAT, "triple": "aarch64-linux-gnu", "versions": se.host_versions()}
    (root / se.STAMP).write_text(json.dumps({"key": key, "python": "sysroot/usr/bin/python3.11", "python_version": "3.11",
                                             "installed": {"apache_tvm": "0.27.0"}}))
    assert se.main([]) == 0
    assert "nothing to do" in capsys.readouterr().out
    key["versions"] = {**key["versions"], "apache-tvm": "0.0.1"}  # another TVM on the host: built again
    (root / se.STAMP).write_text(json.dumps({"key": key, "python": "sysroot/usr/bin/python3.11"}))
    with pytest.raises(AssertionError, match="runs nothing"):
        se.main([])
