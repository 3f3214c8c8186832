"""Rewrites: the rule library against the open model — match counts, preview, apply, "why not?".

* The list shows every rule (`rewrites.all_rules()`) grouped by family (`rewrites.FAMILIES`), with
  its number of matches in the open model (a family row sums its rules'); the search box keeps the
  rules whose id or description contains the text. Counting runs on a worker thread after each
  change (debounced), so a big model never blocks the UI; the same job prepares a spare copy of
  the graph, so the next preview only has to rewrite.
* Selecting a rule outlines its matches on the canvas (role "rewrite-match") and lists them;
  selecting a match selects and centres its nodes.
* Preview rewrites a copy (the selected match, or all of them) and verifies it with onnxruntime on
  seeded random inputs, on a worker thread with progress and Cancel; the canvas then shows the
  rewritten graph with the removed nodes ghosted (red) and the new or changed ones outlined
  (green). Apply pushes the previewed rewrite as one undoable edit; Apply all previews, verifies
  and applies every match. Apply family does that for each rule of the selected family with matches,
  one rule after the other (each an undoable edit, the next rule matching the model the previous
  left). A rewrite whose outputs differ beyond tolerance is refused, with why.
* Why not? explains, for the node selected on the canvas, why the selected rule (or each rule,
  when none is selected) does not apply there, naming the failed condition.

Everything here is a view: matching, previews, verification and the edit are core.rewrite's.
"""
from __future__ import annotations

import logging
import time

from PySide6.QtCore import Qt, QTimer
from PySide6.QtWidgets import (
    QAbstractItemView,
    QDockWidget,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QLineEdit,
    QListWidget,
    QListWidgetItem,
    QPlainTextEdit,
    QProgressBar,
    QPushButton,
    QSizePolicy,
    QSplitter,
    QTreeWidget,
    QTreeWidgetItem,
    QVBoxLayout,
    QWidget,
)

from core import WorkbenchError
from core.rewrite import RewriteEdit, SpareCopy, explain, find_matches, preview
from core.rewrite.view import preview_view
from rewrites import FAMILIES, all_rules

from app.workers import Job, error_text, start_job

__all__ = ["create_panel", "RewritesPanel", "AREA", "MATCH_COLOR"]

logger = logging.getLogger(__name__)

AREA = "left"
MATCH_COLOR = "#00a3d9"
_ROLE = "rewrite-match"
_FAMILY = Qt.UserRole + 1  # on a family row: the family id (its Qt.UserRole, the rule id, is None)


class RewritesPanel(QWidget):
    def __init__(self, window, dock: QDockWidget | None = None):
        super().__init__()
        self.window = window
        self.dock = dock
        self.rules = all_rules()
        self.matches: dict[str, list] = {}
        self.counted_revision: tuple[int, int] | None = None  # (id(graph), revision) counted
        self._result_state: tuple[int, int] | None = None  # (id(graph), revision) the result text describes
        self.spare: SpareCopy | None = None
        self.preview = None  # the Preview shown on the canvas
        self.last_result = ""
        self._job: Job | None = None  # the preview/apply job
        self._family_run: dict | None = None  # Apply family in progress: rules left, what each did
        self._count_job: Job | None = None
        self._jobs: set[Job] = set()  # keep finished-but-not-collected threads alive

        self.search = QLineEdit()
        self.search.setObjectName("rewrite-search")
        self.search.setPlaceholderText("Search rules (id or description)")
        self.search.setClearButtonEnabled(True)
        self.search.textChanged.connect(self._filter)

        self.rule_list = QTreeWidget()
        self.rule_list.setObjectName("rewrite-rules")
        self.rule_list.setColumnCount(2)
        self.rule_list.setHeaderLabels(["Rule", "Matches"])
        self.rule_list.setRootIsDecorated(True)
        self.rule_list.setAlternatingRowColors(True)
        header = self.rule_list.header()  # the rule name takes what the dock has; no sideways scrolling
        header.setStretchLastSection(False)
        header.setSectionResizeMode(0, QHeaderView.Stretch)
        header.setSectionResizeMode(1, QHeaderView.ResizeToContents)
        self.family_items: dict[str, QTreeWidgetItem] = {}
        self.rule_items: dict[str, QTreeWidgetItem] = {}
        order = list(FAMILIES) + sorted({r.family for r in self.rules} - set(FAMILIES))
        for fam in order:
            members = [r for r in self.rules if r.family == fam]
            if not members:
                continue
            top = QTreeWidgetItem([f"{FAMILIES.get(fam, fam)} ({len(members)})", "–"])
            top.setData(0, Qt.UserRole, None)
            top.setData(0, _FAMILY, fam)
            top.setToolTip(0, f"Family '{fam}': {len(members)} rules. Apply family applies each of them that matches.")
            top.setTextAlignment(1, Qt.AlignRight | Qt.AlignVCenter)
            f = top.font(0)
            f.setItalic(True)
            top.setFont(0, f)
            self.rule_list.addTopLevelItem(top)
            self.family_items[fam] = top
            for r in members:
                item = QTreeWidgetItem([r.id, "–"])  # "…" only while a count runs
                item.setData(0, Qt.UserRole, r.id)
                item.setData(0, _FAMILY, fam)
                tip = f"{r.description}\nFamily: {r.family}" + (" (from onnxscript)" if r.source == "onnxscript" else "")
                if r.conditions:
                    tip += "\nConditions:\n" + "\n".join(f"  {i}. {c}" for i, c in enumerate(r.conditions, 1))
                item.setToolTip(0, tip)
                item.setToolTip(1, tip)
                item.setTextAlignment(1, Qt.AlignRight | Qt.AlignVCenter)
                top.addChild(item)
                self.rule_items[r.id] = item
        self.rule_list.expandAll()
        self.rule_list.currentItemChanged.connect(lambda *_: self._rule_selected(describe=True))

        self.match_list = QListWidget()
        self.match_list.setObjectName("rewrite-matches")
        # a long match ("'encoder.layer.0.attention.self.query': MatMul + Add") is elided in the
        # middle, whole in its tooltip: the list never scrolls sideways nor widens the dock
        self.match_list.setTextElideMode(Qt.ElideMiddle)
        self.match_list.setHorizontalScrollBarPolicy(Qt.ScrollBarAlwaysOff)
        self.match_list.setHorizontalScrollMode(QAbstractItemView.ScrollPerPixel)
        self.match_list.setUniformItemSizes(True)
        self.match_list.setMinimumHeight(3 * self.match_list.fontMetrics().height() + 8)  # three matches at least
        self.match_list.currentItemChanged.connect(lambda *_: self._match_selected())

        self.preview_button = QPushButton("Preview")
        self.preview_button.setToolTip("Rewrite a copy (the selected match, or all) and verify it; the canvas shows the result")
        self.apply_button = QPushButton("Apply")
        self.apply_button.setToolTip("Apply the preview (or the selected match) as one undoable edit")
        self.apply_all_button = QPushButton("Apply all")
        self.apply_all_button.setToolTip("Preview, verify and apply every match of the rule as one undoable edit")
        self.apply_family_button = QPushButton("Apply family")
        self.apply_family_button.setToolTip("Apply all matching in the family: each of its rules with matches, one after the other, each verified and undoable")
        self.why_button = QPushButton("Why not?")
        self.why_button.setToolTip("Why does the rule (or each rule) not apply to the node selected on the canvas?")
        self.close_button = QPushButton("Close preview")
        self.preview_button.clicked.connect(lambda: self.start_preview(apply=False))
        self.apply_button.clicked.connect(self.apply_selected)
        self.apply_all_button.clicked.connect(lambda: self.start_preview(apply=True, all_matches=True))
        self.apply_family_button.clicked.connect(lambda: self.apply_family())
        self.why_button.clicked.connect(self.why_not)
        self.close_button.clicked.connect(self.close_preview)

        buttons = QHBoxLayout()
        buttons_b = QHBoxLayout()
        for row, group in ((buttons, (self.preview_button, self.apply_button, self.apply_all_button)), (buttons_b, (self.apply_family_button, self.why_button))):
            for b in group:
                b.setMinimumWidth(b.fontMetrics().horizontalAdvance(b.text()) + 14)  # style minimum (80 px) kept the dock wide
                row.addWidget(b)
        buttons2 = QHBoxLayout()
        self.status = QLabel("")
        self.status.setObjectName("rewrite-status")
        self.status.setWordWrap(True)  # a long status must not widen the dock (and shrink the canvas)
        self.status.setSizePolicy(QSizePolicy.Ignored, QSizePolicy.Preferred)  # nor its longest word
        self.status.setMinimumWidth(40)
        self.progress = QProgressBar()
        self.progress.setRange(0, 0)
        self.progress.setMaximumWidth(90)
        self.progress.hide()
        self.cancel_button = QPushButton("Cancel")
        self.cancel_button.hide()
        self.cancel_button.clicked.connect(self.cancel)
        buttons2.addWidget(self.status, 1)
        buttons2.addWidget(self.progress)
        buttons2.addWidget(self.cancel_button)
        buttons2.addWidget(self.close_button)
        # "Close preview" appears on preview: its room is kept from the start, so the row's minimum
        # width (and the dock's) does not change then
        keep = self.close_button.sizePolicy()
        keep.setRetainSizeWhenHidden(True)
        self.close_button.setSizePolicy(keep)

        self.result = QPlainTextEdit(readOnly=True)
        self.result.setObjectName("rewrite-result")
        self.result.setPlaceholderText("Select a rule to see its matches; select a node on the canvas and press Why not?")

        rules_box = QWidget()
        rules_lay = QVBoxLayout(rules_box)
        rules_lay.setContentsMargins(0, 0, 0, 0)
        rules_lay.setSpacing(2)
        rules_lay.addWidget(self.search)
        rules_lay.addWidget(self.rule_list, 1)
        split = QSplitter(Qt.Vertical)
        split.addWidget(rules_box)
        split.addWidget(self.match_list)
        split.addWidget(self.result)
        split.setSizes([300, 90, 220])
        # when the dock is short the explanation box gives way first, then the match list
        split.setStretchFactor(0, 0)
        split.setStretchFactor(1, 1)
        split.setStretchFactor(2, 2)
        self.rule_list.setMinimumHeight(120)
        lay = QVBoxLayout(self)
        lay.setContentsMargins(4, 4, 4, 4)
        lay.addWidget(split, 1)
        lay.addLayout(buttons)
        lay.addLayout(buttons_b)
        lay.addLayout(buttons2)

        self._timer = QTimer(self, singleShot=True, interval=150)
        self._timer.timeout.connect(self.recount)
        doc = window.document
        doc.graphChanged.connect(self._graph_changed)
        doc.graphReplaced.connect(self._graph_replaced)
        self._update_buttons()
        self._set_counts(None, pending=doc.graph is not None)
        if doc.graph is not None:
            self._timer.start()

    # ---- helpers -----------------------------------------------------------------------------
    @property
    def graph(self):
        return self.window.document.graph

    def current_rule(self):
        item = self.rule_list.currentItem()
        if item is None:
            return None
        rid = item.data(0, Qt.UserRole)
        return next((r for r in self.rules if r.id == rid), None)

    def select_rule(self, rule_id: str) -> None:
        item = self.rule_items[rule_id]
        if item.isHidden():
            self.search.clear()
        self.rule_list.setCurrentItem(item)

    def current_family(self) -> str | None:
        """The family of the selected row (a family row or one of its rules)."""
        item = self.rule_list.currentItem()
        return None if item is None else item.data(0, _FAMILY)

    def select_family(self, family: str) -> None:
        self.rule_list.setCurrentItem(self.family_items[family])

    def _filter(self, text: str) -> None:
        """Keep the rules whose id or description contains `text` (any case), and their families."""
        needle = text.strip().lower()
        rules = {r.id: r for r in self.rules}
        for fam, top in self.family_items.items():
            shown = 0
            for i in range(top.childCount()):
                item = top.child(i)
                r = rules[item.data(0, Qt.UserRole)]
                hit = not needle or needle in r.id.lower() or needle in r.description.lower()
                item.setHidden(not hit)
                shown += hit
            top.setHidden(shown == 0)
            top.setExpanded(True)

    def _counts_current(self) -> bool:
        g = self.graph
        return g is not None and self.counted_revision == (id(g), g.revision)

    def _set_result(self, text: str) -> None:
        """The explanation box. Its text describes the model as it is now: the next edit, undo,
        redo or model opened clears it (see _graph_changed)."""
        self.last_result = text
        self.result.setPlainText(text)
        g = self.graph
        self._result_state = (id(g), g.revision) if g is not None else None

    def _busy(self, text: str) -> None:
        self.status.setText(text)
        self.progress.show()
        self.cancel_button.show()

    def _idle(self, text: str = "") -> None:
        self.status.setText(text)
        if self._job is None and self._count_job is None:
            self.progress.hide()
            self.cancel_button.hide()

    def _update_buttons(self) -> None:
        rule = self.current_rule()
        has = bool(rule is not None and self._counts_current() and self.matches.get(rule.id))
        busy = self._job is not None
        self.preview_button.setEnabled(has and not busy)
        self.apply_all_button.setEnabled(has and not busy)
        fam = self.current_family()
        fam_has = bool(fam is not None and self._counts_current() and any(self.matches.get(r.id) for r in self.rules if r.family == fam))
        self.apply_family_button.setEnabled(fam_has and not busy and self._family_run is None)
        self.apply_button.setEnabled(not busy and (self._preview_applicable() or has))
        self.why_button.setEnabled(self.graph is not None)
        self.close_button.setVisible(self.preview is not None)

    def _preview_applicable(self) -> bool:
        pv = self.preview
        return pv is not None and not pv.is_stale and pv.base is self.graph and bool(pv.applied) and (pv.verification is None or pv.verification.ok)

    def _start(self, work, title: str, done, attr: str) -> Job:
        def ended(job):
            if getattr(self, attr) is job:
                setattr(self, attr, None)

        def after(slot):
            def run(*args):
                slot(*args)
                self._update_buttons()
                self._idle(self.status.text())
            return run

        self._busy(title)
        job = start_job(
            work, title, self, ended=ended, done=after(done), failed=after(lambda exc: self._job_failed(title, error_text(exc, title))),
            cancelled=after(lambda: self._cancelled(attr)), progressed=lambda p: self.status.setText(p.message), start=False,
        )
        self._jobs.add(job)
        job.finished.connect(lambda: self._jobs.discard(job))
        setattr(self, attr, job)
        job.start()
        self._update_buttons()
        return job

    def _cancelled(self, attr: str) -> None:
        self._idle("Cancelled.")
        if attr == "_job" and self._family_run is not None:
            self._family_finished("Cancelled.")
        if attr == "_count_job" and self._count_job is None and not self._timer.isActive() and not self._counts_current():
            self._set_counts(None)  # counts never stay at "…": they are unknown until counted again

    def _set_counts(self, matches: dict | None, pending: bool = False) -> int:
        """The Matches column: counts, "…" while counting (pending), "–" when unknown (no model,
        or the count failed or was cancelled). Returns the total."""
        total = 0
        for top in self.family_items.values():
            family_total = 0
            for i in range(top.childCount()):
                n = self._show_count(top.child(i), None if matches is None else len(matches.get(top.child(i).data(0, Qt.UserRole), [])), pending)
                family_total += n
            self._show_count(top, None if matches is None else family_total, pending)
            total += family_total
        return total

    @staticmethod
    def _show_count(item: QTreeWidgetItem, n: int | None, pending: bool) -> int:
        if pending or n is None:
            item.setText(1, "…" if pending else "–")
            item.setToolTip(1, "Counting…" if pending else "Not counted: no model, or the count was stopped")
            n = 0
        else:
            item.setText(1, str(n))
            item.setToolTip(1, f"{n} match{'es' if n != 1 else ''}")
        f = item.font(0)
        f.setBold(n > 0)
        item.setFont(0, f)
        item.setFont(1, f)
        return n

    def _job_failed(self, title: str, message: str) -> None:
        if title == "Counting matches" and self._count_job is None and not self._timer.isActive():
            self._set_counts(None)
        self._idle("")
        self._set_result(f"{title} failed: {message}")
        if title.startswith("Applying") and self._family_run is not None:
            self._family_finished(f"Stopped: {title} failed: {message}")

    def cancel(self) -> None:
        for job in (self._job, self._count_job):
            if job is not None:
                job.cancel()

    def wait_idle(self, timeout: float = 60.0) -> bool:
        """Block (processing events) until no job runs; for tests and scripted screenshots."""
        from PySide6.QtWidgets import QApplication

        end = time.monotonic() + timeout
        while time.monotonic() < end:
            QApplication.processEvents()
            if self._job is None and self._count_job is None and not self._timer.isActive() and not self._jobs:
                return True
            time.sleep(0.01)
        return False

    # ---- counting ----------------------------------------------------------------------------
    def _graph_changed(self) -> None:
        g = self.graph
        if self.last_result and self._result_state != ((id(g), g.revision) if g is not None else None):
            self._set_result("")  # "Applied …" after Undo, a why-not of the previous model: no longer true
        self.counted_revision = None
        self.spare = None
        if self.preview is not None and (self.preview.base is not self.graph or self.preview.is_stale):
            self.preview = None
            self.window.canvas.clear_ghosts()
        self._set_counts(None, pending=self.graph is not None)
        self.window.canvas.clear_highlight(_ROLE)
        self.match_list.clear()
        self._update_buttons()
        self._timer.start()

    def _graph_replaced(self) -> None:
        """Another model: no rule selected (its outlines would come back over the new model's
        matches, and over a heat map), then everything _graph_changed resets."""
        self.rule_list.blockSignals(True)
        self.rule_list.setCurrentItem(None)
        self.rule_list.clearSelection()
        self.rule_list.blockSignals(False)
        self.match_list.clear()
        self.preview = None
        self._family_run = None  # a family run stops with its model (its job's result is dropped)
        self.window.canvas.clear_ghosts()
        self._graph_changed()
        self._idle("")

    def recount(self) -> None:
        """Count every rule's matches on a worker thread (restarted when the graph changes)."""
        graph = self.graph
        if graph is None:
            return
        if self._count_job is not None:
            self._count_job.cancel()
            self._count_job = None
        revision = graph.revision
        rules = list(self.rules)

        def work(job: Job):
            out = {}
            try:
                for i, rule in enumerate(rules):
                    job.check()
                    job.report(i / len(rules), f"Matching {rule.id}…")
                    out[rule.id] = find_matches(graph, rule, cancel=job.is_cancelled)
                job.check()
                spare = SpareCopy(graph) if graph.revision == revision else None
            except Exception:
                if graph.revision != revision:  # edited under our feet: count again, quietly
                    return graph, revision, None, None
                raise
            return graph, revision, out, spare

        def done(result):
            g, rev, out, spare = result
            if g is not self.graph or rev != g.revision or out is None:
                self._timer.start()  # the graph moved on while we counted
                return
            self.matches = out
            self.spare = spare
            self.counted_revision = (id(g), rev)
            total = self._set_counts(out)
            self._idle(f"{total} match{'es' if total != 1 else ''} in {len(g)} nodes.")
            self._rule_selected()

        self._start(work, "Counting matches", done, "_count_job")

    # ---- selection -----------------------------------------------------------------------------
    def _rule_selected(self, describe: bool = False) -> None:
        rule = self.current_rule()
        canvas = self.window.canvas
        self.match_list.clear()
        if rule is None or not self._counts_current():
            canvas.clear_highlight(_ROLE)
            family = self.current_family()
            if describe and family is not None and self.preview is None and self._counts_current():
                self._describe_family(family)
            self._update_buttons()
            return
        ms = self.matches.get(rule.id, [])
        for m in ms:
            item = QListWidgetItem(m.summary)
            item.setData(Qt.UserRole, m)
            item.setToolTip(m.summary)
            self.match_list.addItem(item)
        ids = [i for m in ms for i in m.node_ids]
        if ids:
            canvas.set_highlight(_ROLE, ids, MATCH_COLOR)
        else:
            canvas.clear_highlight(_ROLE)
        if describe and self.preview is None:
            n = len(ms)
            head = f"{rule.id} ({rule.family}): {rule.description}.\n"
            conds = "".join(f"  {i}. {c}\n" for i, c in enumerate(rule.conditions, 1))
            self._set_result(head + (f"Conditions:\n{conds}" if conds else "") + f"\n{n} match{'es' if n != 1 else ''} in this model." + ("" if n else " Select a node and press Why not? to see which condition fails."))
        self._update_buttons()

    def _match_selected(self) -> None:
        item = self.match_list.currentItem()
        if item is None:
            return
        m = item.data(Qt.UserRole)
        if self.window.canvas.mode == "model":
            self.window.document.set_selection(list(m.node_ids))
            self.window.canvas.center_on(m.root_id)
        self._update_buttons()

    def selected_matches(self, all_matches: bool = False) -> list:
        rule = self.current_rule()
        if rule is None:
            return []
        ms = self.matches.get(rule.id, [])
        item = self.match_list.currentItem()
        if not all_matches and item is not None:
            return [item.data(Qt.UserRole)]
        return ms

    def _describe_family(self, family: str) -> None:
        members = [r for r in self.rules if r.family == family]
        lines = [f"{FAMILIES.get(family, family)}: {len(members)} rules."]
        for r in members:
            n = len(self.matches.get(r.id, []))
            lines.append(f"  {n:>3}  {r.id}: {r.description}")
        lines.append("\nApply family applies each rule with matches, one after the other, each verified and undoable.")
        self._set_result("\n".join(lines))

    # ---- apply a family --------------------------------------------------------------------------
    def apply_family(self, family: str | None = None) -> None:
        """Apply all matching in the family: each of its rules with matches, in library order,
        previewed and verified on a worker, then pushed as its own edit before the next rule is
        matched against the model it left."""
        family = family if family is not None else self.current_family()
        if family is None or self.graph is None or not self._counts_current() or self._job is not None or self._family_run is not None:
            return
        todo = [r for r in self.rules if r.family == family and self.matches.get(r.id)]
        if not todo:
            self._set_result(f"No rule of {FAMILIES.get(family, family)} matches this model.")
            return
        self._family_run = {"family": family, "todo": todo, "done": [], "refused": []}
        self._family_next()

    def _family_next(self) -> None:
        run = self._family_run
        graph = self.graph
        if run is None:
            return
        if not run["todo"] or graph is None:
            self._family_finished()
            return
        rule = run["todo"].pop(0)

        def work(job: Job):
            job.report(0.1, f"Rewriting a copy ({rule.id})…")
            pv = preview(graph, rule)
            job.check()
            if pv.applied:
                job.report(0.5, f"Verifying {rule.id} with onnxruntime…")
                try:
                    pv.verify(before=graph.clone())
                except WorkbenchError as e:
                    return pv, str(e)
            return pv, ""

        def done(result):
            pv, error = result
            if pv.base is not self.graph or pv.is_stale:
                run["refused"].append(f"{rule.id}: the model changed while it was previewed.")
            elif not pv.applied:
                run["refused"].append(f"{rule.id}: no match applied" + (f" ({pv.skipped[0][1]})" if pv.skipped else "."))
            elif error or not pv.verification.ok:
                run["refused"].append(f"{rule.id}: " + (f"verification could not run: {error}" if error else f"verification failed: {pv.verification.explain()}"))
            else:
                try:
                    self.window.document.push(RewriteEdit(pv), show_errors=False)
                except WorkbenchError as e:
                    run["refused"].append(f"{rule.id}: {e}")
                else:
                    run["done"].append(self._describe(pv).splitlines()[0])
            QTimer.singleShot(0, self._family_next)

        self._start(work, f"Applying {FAMILIES.get(run['family'], run['family'])}: {rule.id}", done, "_job")

    def _family_finished(self, stopped: str = "") -> None:
        run, self._family_run = self._family_run, None
        if run is None:
            return
        n = len(run["done"])
        lines = [f"Apply family '{run['family']}': {n} rule{'s' if n != 1 else ''} applied, each one Edit ▸ Undo step." + (f" {stopped}" if stopped else "")]
        lines += run["done"]
        lines += [f"Not applied: {r}" for r in run["refused"]]
        lines += [f"Not tried: {r.id}" for r in run["todo"]]
        self._set_result("\n".join(lines))
        self.status.setText(f"Applied {n} rule{'s' if n != 1 else ''} of the family.")
        self._update_buttons()

    # ---- preview / apply -----------------------------------------------------------------------
    def start_preview(self, apply: bool = False, all_matches: bool = False) -> None:
        """Preview (and verify) the selected match or all matches on a worker thread; with
        `apply`, push the edit when verification passes."""
        rule = self.current_rule()
        graph = self.graph
        if rule is None or graph is None or not self._counts_current():
            return
        matches = self.selected_matches(all_matches)
        if not matches:
            self._set_result(f"{rule.id} has no match in this model.")
            return
        spare, self.spare = self.spare, None

        def work(job: Job):
            job.report(0.1, f"Rewriting a copy ({rule.id})…")
            pv = preview(graph, rule, matches, spare=spare)
            job.check()
            before = graph.clone()  # read the original here, not the live graph the UI owns
            if pv.applied:
                job.report(0.5, "Verifying with onnxruntime…")
                try:
                    pv.verify(before=before)
                except WorkbenchError as e:
                    return pv, None, str(e), None
            job.check()
            if apply:
                return pv, None, "", None
            # the copy for the next preview, made here rather than when the user asks
            return pv, preview_view(pv, before), "", SpareCopy(graph)

        def done(result):
            pv, view, error, next_spare = result
            if next_spare is not None and self.spare is None:
                self.spare = next_spare
            if pv.base is not self.graph or pv.is_stale:
                self._set_result("The model changed while the preview was computed; preview again.")
                return
            text = self._describe(pv, error)
            self.status.setText("")
            if error or (pv.verification is not None and not pv.verification.ok):
                self.status.setText("Verification failed.")
                self._set_result(text + ("\n\nRefused: not applied." if apply else "\n\nApply is refused for this preview."))
                if view is not None:
                    self._show_preview(pv, view)
                else:
                    self.preview = pv
                self._update_buttons()
                return
            if apply:
                self.preview = pv
                self.apply_preview()
                return
            self._show_preview(pv, view)
            self._set_result(text)
            self.status.setText("Preview shown: removed nodes ghosted, new/changed outlined.")

        self._start(work, f"Previewing {rule.id}", done, "_job")

    def _describe(self, pv, error: str = "") -> str:
        lines = [
            f"{pv.rule.id}: {len(pv.applied)} of {len(pv.matches)} match{'es' if len(pv.matches) != 1 else ''} rewritten "
            f"({pv.nodes_before} → {pv.nodes_after} nodes; removed {len(pv.removed)}, added {len(pv.added)}, changed {len(pv.changed)}).",
        ]
        for m, why in pv.skipped[:5]:
            lines.append(f"Skipped {m.summary}: {why}")
        if error:
            lines.append(f"Verification could not run: {error}")
        elif pv.verification is not None:
            v = pv.verification
            lines.append(("Verified: " if v.ok else "Verification FAILED: ") + v.explain())
        lines.append(f"Preview took {pv.seconds * 1000:.0f} ms.")
        return "\n".join(lines)

    def _show_preview(self, pv, view) -> None:
        self.preview = pv
        merged, removed, outlined = view
        canvas = self.window.canvas

        def ghosts(_v=None):
            try:
                canvas.viewShown.disconnect(ghosts)
            except (RuntimeError, TypeError):
                pass
            if self.preview is pv:
                canvas.set_ghosts(removed, outlined)

            focus = sorted(outlined | removed, key=str)
            if focus:
                canvas.center_on(focus[0])  # readable zoom on the first change, not a tiny fit

        canvas.viewShown.connect(ghosts)
        canvas.clear_highlight(_ROLE)
        canvas.show_view(merged, fit=True)
        self._update_buttons()

    def apply_selected(self) -> None:
        if self._preview_applicable():
            self.apply_preview()
        else:
            self.start_preview(apply=True)

    def apply_preview(self) -> None:
        pv = self.preview
        if pv is None:
            return
        try:
            edit = RewriteEdit(pv)
        except WorkbenchError as e:
            self._set_result(str(e))
            return
        text = self._describe(pv)
        self.preview = None
        canvas = self.window.canvas
        canvas.clear_ghosts()
        if canvas.mode != "model":
            canvas.show_model(keep=True)
        document = self.window.document
        before = {n.id for n in document.graph.nodes}
        if document.push(edit):
            self._set_result("Applied (Edit ▸ Undo reverts it).\n" + text)
            new = [n.id for n in document.graph.nodes if n.id not in before]
            if new:
                self._focus_after_layout(new)
        self._update_buttons()

    def _focus_after_layout(self, ids: list) -> None:
        """Select the nodes an apply made and bring the first into view once the edited graph is
        drawn (the relayout keeps the view where it was; this moves it to the change)."""
        canvas = self.window.canvas

        def focus(_view=None):
            try:
                canvas.viewShown.disconnect(focus)
            except (RuntimeError, TypeError):
                pass
            graph = self.graph
            alive = [i for i in ids if graph is not None and graph.has_node(i)]
            if alive and canvas.mode == "model":
                self.window.document.set_selection(alive)
                canvas.center_on(alive[0])

        canvas.viewShown.connect(focus)

    def close_preview(self) -> None:
        self.preview = None
        canvas = self.window.canvas
        canvas.clear_ghosts()
        canvas.show_model()
        self._rule_selected()

    # ---- why not -------------------------------------------------------------------------------
    def why_not(self) -> None:
        graph = self.graph
        sel = [i for i in self.window.document.selection if isinstance(i, int)]
        if graph is None:
            return
        if not sel or not graph.has_node(sel[0]):
            self._set_result("Select a node on the canvas first: Why not? explains why a rule does not apply to it.")
            return
        node = graph.node(sel[0])
        # every rule, those that apply first; the rule selected in the list leads its group
        current = self.current_rule()
        answers = [explain(graph, r, node.id) for r in self.rules]
        order = sorted(range(len(answers)), key=lambda i: (not answers[i].matches, self.rules[i] is not current, i))
        applies = sum(1 for a in answers if a.matches)
        lines = [f"Node '{node.label}' ({node.op_type}): {applies} of {len(answers)} rules apply."]
        for i in order:
            why = answers[i]
            lines.append(f"{'✔' if why.matches else '✘'} {self.rules[i].id}: {why.reason}")
        self._set_result("\n".join(lines))


def create_panel(window) -> QDockWidget:
    dock = QDockWidget("Rewrites", window)
    dock.setObjectName("panel-rewrites")
    panel = RewritesPanel(window, dock)
    dock.setWidget(panel)
    dock.panel = panel
    return dock
