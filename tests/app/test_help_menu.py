"""Help lists the README and every page under docs/, each file exists, and an entry opens its page."""
from __future__ import annotations

from pathlib import Path

from PySide6.QtGui import QDesktopServices

from app.help_dialogs import HELP_ENTRIES
from app.main_window import DOC_PAGES, DOCS_ROOT

ROOT = Path(__file__).resolve().parents[2]


def _help_entries(window) -> dict[str, object]:
    return {a.text().replace("&", ""): a for a in window.help_menu.actions() if not a.isSeparator()}


def test_help_lists_every_docs_page_and_each_exists(window):
    assert DOCS_ROOT == ROOT
    listed = {rel for _title, rel in DOC_PAGES}
    # every page in docs/ is reachable from Help (a new page must be added to DOC_PAGES), and the README
    assert {f"docs/{p.name}" for p in (ROOT / "docs").glob("*.md")} | {"README.md"} == listed
    for rel in listed:
        assert (ROOT / rel).is_file(), rel
    titles = {title.replace("&", "") for title, _rel in DOC_PAGES}
    # the pages, and the entries of app.help_dialogs (start page, tour, shortcuts, About)
    assert set(_help_entries(window)) == titles | {t.replace("&", "") for t in HELP_ENTRIES}
    assert window.menuBar().actions()[-1].menu() is window.help_menu  # Help is the last menu


def test_a_help_entry_opens_its_page(window, monkeypatch):
    opened = []
    monkeypatch.setattr(QDesktopServices, "openUrl", lambda url: opened.append(url.toLocalFile()) or True)
    _help_entries(window)["The Compiler: Pipeline and Packages"].trigger()
    assert opened == [str(ROOT / "docs" / "compiler.md")]


def test_a_missing_page_is_said_in_the_status_bar(window, monkeypatch):
    opened = []
    monkeypatch.setattr(QDesktopServices, "openUrl", lambda url: opened.append(url) or True)
    assert not window.open_doc("docs/no-such-page.md")
    assert not opened
    assert "docs/no-such-page.md" in window.statusBar().currentMessage()
