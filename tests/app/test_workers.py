"""Background jobs hand their outcome over as objects: the exception itself on failure, and one
Cancelled error for every kind of cancel."""
from __future__ import annotations

from app.workers import Job, error_text, start_job
from core.errors import Cancelled, UnsupportedOpError


def _run(qtbot, work):
    got = {}
    job = start_job(work, "Test job", None, done=lambda r: got.setdefault("done", r),
                    failed=lambda e: got.setdefault("failed", e), cancelled=lambda: got.setdefault("cancelled", True))
    qtbot.waitUntil(lambda: bool(got), timeout=10_000)
    job.wait(5000)
    return got


def test_a_failed_job_hands_over_the_exception_object(qtbot):
    error = UnsupportedOpError("node 'norm' (LpNormalization) cannot be imported.", op_type="LpNormalization", node_name="norm")

    def work(job: Job):
        raise error

    got = _run(qtbot, work)
    assert got["failed"] is error and got["failed"].node_name == "norm"
    assert error_text(got["failed"], "Test job") == str(error)


def test_an_internal_error_is_handed_over_and_told_as_one(qtbot):
    got = _run(qtbot, lambda job: {}["missing"])
    assert isinstance(got["failed"], KeyError)
    assert error_text(got["failed"], "Test job").startswith("Test job failed with an internal error: KeyError")


def test_every_cancel_is_core_cancelled(qtbot):
    from core.compiler.compile import CompileCancelled
    from core.compiler.lowering import LoweringCancelled
    from core.views.layout import LayoutCancelled

    assert CompileCancelled is LoweringCancelled is LayoutCancelled is Cancelled

    def work(job: Job):
        raise CompileCancelled("compile cancelled.")

    assert _run(qtbot, work) == {"cancelled": True}
