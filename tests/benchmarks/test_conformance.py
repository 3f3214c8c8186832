"""benchmarks/conformance.py's worker pool: a worker retires after WORKER_CASES cases (its memory
grows with every case it compiles) and a fresh one takes the next, with no case lost."""
from __future__ import annotations

from benchmarks import conformance


class _Conn:
    def __init__(self):
        self.answers, self.closed = [], False

    def send(self, msg):
        if msg is None:
            self.closed = True
        else:
            self.answers.append(("pass", msg[0]))

    def poll(self, _timeout):
        return bool(self.answers)

    def recv(self):
        return self.answers.pop(0)


class _Proc:
    exitcode = 0

    def __init__(self, conn):
        self.conn, self.killed = conn, False

    def is_alive(self):
        return not (self.conn.closed or self.killed)

    def join(self, _timeout=None):
        pass

    def kill(self):
        self.killed = True


def test_workers_retire_after_their_cases_and_every_case_is_answered(monkeypatch):
    started = []

    class Worker(conformance._Worker):
        def __init__(self, suite, log_path):  # an in-process stand-in for the spawned worker
            self.conn = _Conn()
            self.proc = _Proc(self.conn)
            self.task, self.started, self.done = None, 0.0, 0
            started.append(self)

    monkeypatch.setattr(conformance, "_Worker", Worker)
    monkeypatch.setattr(conformance, "WORKER_CASES", 2)
    tasks = [(f"case{i}", "workbench") for i in range(7)]
    results = list(conformance.run_all(tasks, "node", jobs=2, timeout=60, log_path=None))
    assert sorted(task for task, _ in results) == sorted(tasks)
    assert all(result == ("pass", task[0]) for task, result in results)
    assert [w.done for w in started] == [2, 2, 2, 1]  # two workers, each replaced once, one last case
    assert all(w.conn.closed and not w.proc.killed for w in started)  # retired, none killed
