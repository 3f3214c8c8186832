"""Problems: what is wrong with the edited model, one line per problem, naming the node.

After every edit, undo or redo (and when a model is opened) the model is checked with
`core.model.validation` (debounced, so a burst of undos checks once; on big models the whole check
runs on a worker thread, never stalling an open or an edit). Each problem is listed with
its node; the nodes are outlined on the canvas (highlight role "problem"). Double-click a row to
select and show its node. The dock title carries the count, so a broken model is visible even
when the panel is tabbed away.
"""
from __future__ import annotations

import logging

from PySide6.QtCore import QSize, Qt, QTimer
from PySide6.QtWidgets import QDockWidget, QStyle, QTreeWidget, QTreeWidgetItem

from core.model.validation import Problem, prepare

from app.workers import Job, error_text, start_job

__all__ = ["create_panel", "ProblemsPanel", "AREA", "PROBLEM_COLOR"]

logger = logging.getLogger(__name__)

AREA = "bottom"
PROBLEM_COLOR = "#d62728"
ASYNC_NODES = 1500  # from this size the check runs on a worker thread


class ProblemsPanel(QTreeWidget):
    def __init__(self, window, dock: QDockWidget):
        super().__init__()
        self.window = window
        self.dock = dock
        self.problems: list[Problem] = []
        self._job: Job | None = None
        self.setColumnCount(2)
        self.setHeaderLabels(["Where", "Problem"])
        self.setRootIsDecorated(False)
        self.setAlternatingRowColors(True)
        self.setColumnWidth(0, 220)
        self.setWordWrap(True)
        self._timer = QTimer(self, singleShot=True, interval=60)
        self._timer.timeout.connect(self.recheck)
        doc = window.document
        doc.graphChanged.connect(self._timer.start)
        doc.graphReplaced.connect(self._timer.start)
        self.itemDoubleClicked.connect(self._show)
        self.recheck()

    def recheck(self) -> None:
        """Check the model now (normally triggered, debounced, by document changes).

        Small models are checked here; big ones on a worker thread, and a result for an older
        revision is dropped."""
        self._timer.stop()
        graph = self.window.document.graph
        if graph is None:
            self._show_problems([])
            return
        if len(graph) >= ASYNC_NODES:
            # Big models: the whole check on a worker, the Graph-reading half too (~0.25 s of UI
            # stall on a 10,000-node model, right when it opens). `prepare` only reads the IR (it
            # fills no Graph cache), and an edit made meanwhile changes the revision, so a result
            # read from a model in mid-edit is dropped in _job_done and the edit's recheck follows.
            revision = graph.revision
            job = self._job = start_job(
                lambda _job: prepare(graph).finish(), "Checking the model", self,
                done=lambda problems: self._job_done(job, graph, revision, problems),
                failed=lambda exc: self._job_done(job, graph, revision, [Problem("the checker", f"failed: {error_text(exc, job.title)}")]),
            )
            return
        try:
            prepared = prepare(graph)
        except Exception as e:  # noqa: BLE001 - a checker crash must not take the editor down
            logger.exception("validation failed")
            self._show_problems([Problem("the checker", f"failed: {e}")])
            return
        self._show_problems(prepared.finish())

    def _job_done(self, job, graph, revision: int, problems: list[Problem]) -> None:
        if job is not self._job or graph is not self.window.document.graph or graph.revision != revision:
            return  # the model changed meanwhile: a newer check is on its way
        self._job = None
        self._show_problems(problems)

    def _show_problems(self, problems: list[Problem]) -> None:
        self.problems = problems
        self.clear()
        icon = self.style().standardIcon(QStyle.SP_MessageBoxWarning)
        for p in self.problems:
            item = QTreeWidgetItem([p.subject, p.reason[0].upper() + p.reason[1:] + "."])
            item.setIcon(0, icon)
            item.setToolTip(1, p.sentence)
            item.setData(0, Qt.UserRole, p.node_id)
            item.setData(1, Qt.UserRole, p.tensor)
            self.addTopLevelItem(item)
        n = len(self.problems)
        self.dock.setWindowTitle(f"Problems ({n})" if n else "Problems")
        ids = [p.node_id for p in self.problems if p.node_id is not None]
        canvas = self.window.canvas
        if ids:
            canvas.set_highlight("problem", ids, PROBLEM_COLOR)
        else:
            canvas.clear_highlight("problem")

    def sizeHint(self) -> QSize:
        return QSize(600, 120)  # a few lines; the canvas keeps the room

    def _show(self, item: QTreeWidgetItem, _column: int = 0) -> None:
        """Select and scroll to the node a problem is about (or the graph-output box)."""
        node_id = item.data(0, Qt.UserRole)
        graph = self.window.document.graph
        if graph is None:
            return
        if node_id is None or not graph.has_node(node_id):
            node_id = f"output:{item.data(1, Qt.UserRole)}"
            if node_id not in self.window.canvas.node_items:
                return
        self.window.document.set_selection([node_id])
        self.window.canvas.center_on(node_id)


def create_panel(window) -> QDockWidget:
    dock = QDockWidget("Problems", window)
    dock.setObjectName("panel-problems")
    dock.setWidget(ProblemsPanel(window, dock))
    return dock
