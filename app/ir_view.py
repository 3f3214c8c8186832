"""An IR text view: TVMScript, LLVM IR, assembly, CUDA C or the ONNX listing, highlighted with
pygments, with the lines that changed since the previous stage marked.

`IRView.set_ir(text, language, previous=None)` shows a stage; lines added or changed against
`previous` get a green background (a unified diff against it is one toggle away:
`set_show_diff(True)`); `show_lines(first, last)` marks and scrolls to the lines of a clicked node.

Highlighting is per line (QSyntaxHighlighter asks block by block), and turned off for texts past
`HIGHLIGHT_LIMIT` characters (ResNet-50's LLVM IR is 4 MB): Qt highlights every block of a
document when it is set, which would stall the UI for seconds.
"""
from __future__ import annotations

import difflib

from PySide6.QtCore import Qt
from PySide6.QtGui import QColor, QFont, QFontDatabase, QSyntaxHighlighter, QTextCharFormat, QTextCursor, QTextFormat
from PySide6.QtWidgets import QPlainTextEdit, QTextEdit

__all__ = ["IRView", "changed_lines", "HIGHLIGHT_LIMIT", "DIFF_LIMIT", "DISPLAY_LIMIT"]

HIGHLIGHT_LIMIT = 600_000  # characters
DISPLAY_LIMIT = 8_000_000  # characters shown (DenseNet-121's LLVM IR is 24 MB: ~3 s to lay out)
DIFF_LIMIT = 800_000  # characters, each side
CHANGED_BG = QColor("#e6f6e6")
SELECTED_BG = QColor("#fff1b8")


def changed_lines(old: str, new: str) -> tuple[set[int], int]:
    """0-based numbers of `new`'s lines that are added or changed vs `old`, and how many lines went."""
    a = old.splitlines()
    b = new.splitlines()
    changed: set[int] = set()
    removed = 0
    sm = difflib.SequenceMatcher(None, a, b, autojunk=False)
    for tag, i1, i2, j1, j2 in sm.get_opcodes():
        if tag in ("replace", "insert"):
            changed.update(range(j1, j2))
        if tag in ("replace", "delete"):
            removed += i2 - i1
    return changed, removed


def _lexer(language: str):
    from pygments import lexers

    try:
        if language == "tvmscript":
            return lexers.PythonLexer()
        if language == "llvm":
            return lexers.LlvmLexer()
        if language == "asm":
            return lexers.GasLexer()
        if language == "cuda":
            return lexers.CudaLexer()
        if language == "diff":
            return lexers.DiffLexer()
    except Exception:  # noqa: BLE001 - a lexer missing from this pygments: plain text
        return None
    return None


class _Highlighter(QSyntaxHighlighter):
    def __init__(self, document):
        super().__init__(document)
        self.lexer = None
        self.changed: set[int] = set()
        self._formats: dict = {}
        from pygments.styles import get_style_by_name

        self._style = get_style_by_name("default")

    def configure(self, language: str, changed: set[int]) -> None:
        self.lexer = _lexer(language)
        self.changed = changed
        self._formats.clear()

    def _format(self, ttype, changed: bool) -> QTextCharFormat:
        key = (ttype, changed)
        fmt = self._formats.get(key)
        if fmt is None:
            fmt = QTextCharFormat()
            known = ttype
            while known is not None and not self._style.styles_token(known):
                known = known.parent  # lexers emit subtypes the style does not list
            style = self._style.style_for_token(known) if known is not None else {}
            if style.get("color"):
                fmt.setForeground(QColor("#" + style["color"]))
            if style.get("bold"):
                fmt.setFontWeight(QFont.Bold)
            if style.get("italic"):
                fmt.setFontItalic(True)
            if changed:
                fmt.setBackground(CHANGED_BG)
            self._formats[key] = fmt
        return fmt

    def highlightBlock(self, text: str) -> None:  # noqa: N802 - Qt API
        changed = self.currentBlock().blockNumber() in self.changed
        if changed:
            self.setFormat(0, max(1, len(text)), self._format(None, True))
        if self.lexer is None or not text:
            return
        pos = 0
        for ttype, value in self.lexer.get_tokens(text):
            n = len(value)
            if n and ttype is not None:
                self.setFormat(pos, n, self._format(ttype, changed))
            pos += n
            if pos >= len(text):
                break


class IRView(QPlainTextEdit):
    """Read-only, monospaced, highlighted IR with changed lines marked."""

    def __init__(self, parent=None):
        super().__init__(parent)
        self.setReadOnly(True)
        self.setLineWrapMode(QPlainTextEdit.NoWrap)
        self.setFont(QFontDatabase.systemFont(QFontDatabase.FixedFont))
        self.setTextInteractionFlags(Qt.TextSelectableByMouse | Qt.TextSelectableByKeyboard)
        self._hl = _Highlighter(self.document())
        self.text = ""
        self.language = ""
        self.previous: str | None = None
        self.changed: set[int] = set()
        self.removed = 0
        self.show_diff = False
        self.highlighted = True
        self.marked: tuple[int, int] | None = None

    def set_ir(self, text: str, language: str, previous: str | None = None) -> None:
        """Show `text`; mark the lines that differ from `previous` (same language only)."""
        self.text = text
        self.language = language
        self.previous = previous
        if previous is not None and len(previous) <= DIFF_LIMIT and len(text) <= DIFF_LIMIT:
            self.changed, self.removed = changed_lines(previous, text)
        else:
            self.changed, self.removed = set(), 0
        self.marked = None
        self._render()

    def set_show_diff(self, on: bool) -> None:
        """Show a unified diff against the previous stage instead of the full text."""
        if on != self.show_diff:
            self.show_diff = on
            self._render()

    def diff_text(self) -> str:
        if self.previous is None:
            return ""
        return "".join(difflib.unified_diff(self.previous.splitlines(True), self.text.splitlines(True),
                                            "previous stage", "this stage", n=2))

    def _render(self) -> None:
        if self.show_diff and self.previous is not None:
            body, language, changed = self.diff_text() or "(no change from the previous stage)\n", "diff", set()
        else:
            body, language, changed = self.text, self.language, self.changed
        if len(body) > DISPLAY_LIMIT:
            cut = body.rfind("\n", 0, DISPLAY_LIMIT) + 1
            rest = body.count("\n", cut)
            body = body[:cut] + f"\n… {rest} more lines ({(len(body) - cut) / 1e6:.1f} MB) not shown here: `main.py lower MODEL --dump DIR` writes all of it.\n"
        self.highlighted = len(body) <= HIGHLIGHT_LIMIT
        self._hl.configure(language if self.highlighted else "", changed if self.highlighted else set())
        self.setExtraSelections([])
        self.setPlainText(body)

    def summary(self) -> str:
        """'+12 / −3 lines vs previous stage' style text for the panel header."""
        if self.previous is None:
            return ""
        if not self.changed and not self.removed:
            return "unchanged from the previous stage"
        return f"+{len(self.changed)} / −{self.removed} lines vs the previous stage"

    def show_lines(self, first: int, last: int | None = None) -> None:
        """Mark lines first..last (1-based, inclusive) and scroll to them (full-text mode)."""
        if self.show_diff:
            self.set_show_diff(False)
        last = last or first
        doc = self.document()
        start = doc.findBlockByNumber(max(0, first - 1))
        end = doc.findBlockByNumber(max(0, last - 1))
        if not start.isValid():
            return
        selections = []
        block = start
        while block.isValid():
            sel = QTextEdit.ExtraSelection()
            sel.format.setBackground(SELECTED_BG)
            sel.format.setProperty(QTextFormat.FullWidthSelection, True)
            sel.cursor = QTextCursor(block)
            selections.append(sel)
            if block == end or block.blockNumber() >= end.blockNumber():
                break
            block = block.next()
        self.setExtraSelections(selections)
        self.marked = (first, last)
        cursor = QTextCursor(end)
        self.setTextCursor(cursor)
        cursor = QTextCursor(start)
        self.setTextCursor(cursor)
        self.centerCursor()

    def marked_text(self) -> str:
        if not self.marked:
            return ""
        lines = self.toPlainText().splitlines()
        return "\n".join(lines[self.marked[0] - 1:self.marked[1]])
