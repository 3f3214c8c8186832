"""The graph canvas: a QGraphicsView that draws any `core.views.viewgraph.ViewGraph`.

By default it shows the open document's ONNX graph (`core.views.viewgraph.from_graph`) and redraws
itself whenever the document changes (an edit, undo or redo) or is replaced (a model opened).
Layout runs on a worker thread (`core.views.layout.layout`: dot for model-sized graphs, a layered
fallback for big ones); until it is done the old scene stays on screen.

Big views (OVERVIEW_ITEMS nodes + edges or more, e.g. DenseNet-121) are drawn lazily: the worker
also renders the whole graph into an overview image, which is what a zoomed-out view paints, and
node/edge items are created only for the part of the scene the viewport reaches. So on big views
`canvas.node_items` / `canvas.edge_items` hold only the items made so far: read positions from
`canvas.layout_result.boxes[id]` (centre x, y and w, h), and call `canvas.select(ids)` or
`canvas.center_on(id)`, which create what they need. Decorations (highlights, overlay, ghosts)
are kept by id and applied to items whenever they are created.

API for panels and other views (everything takes view node ids: ONNX node ids in the model view,
whatever ids the shown ViewGraph uses otherwise)::

    canvas.show_view(view, fit=True)       draw any ViewGraph (a lowering stage, a rewrite preview)
    canvas.show_model()                    back to the document's ONNX graph
    canvas.show_preview(view, layout)      a loading model's first picture (MainWindow.open_model, big models)
    canvas.mode                            "model", "view" or "preview"; canvas.view is the ViewGraph shown
    canvas.select(ids, center=False)       select nodes (model mode: also the document selection)
    canvas.center_on(id)                   scroll to a node (zooming in to a readable scale)
    canvas.set_highlight(role, ids, color) outline nodes (and the edges between them) for a role,
    canvas.clear_highlight(role)             e.g. "rewrite-match", "lineage"; roles stack
    canvas.set_overlay(values, legend)     heat colours {id: value} with a legend; None clears
    canvas.set_ghosts(removed, added)      rewrite preview: removed nodes faded with a red dashed
                                             outline, added ones with a green dashed outline
    canvas.clear_ghosts()
    canvas.fit() / canvas.zoom_100() / canvas.zoom_by(f) / canvas.zoom()
    canvas.find_bar.open()                 the Ctrl+F search bar
    canvas.node_items[id] / layout_result  items made so far / every node's box (see above)
    canvas.busy                            a layout is running (tests: wait for viewShown)

Signals::

    nodeActivated(id)          double-click or Enter on a node
    tensorActivated(name)      double-click on a weight badge (model view): the Inspector opens its values
    viewSelectionChanged(list) the selected view node ids changed (any mode)
    viewShown(object)          a ViewGraph is on screen (after its layout)
    previewShown(object)       a loading model's first picture is on screen (show_preview; mode "preview")
    zoomChanged(float)         the scale changed (1.0 = 100 %)
    busyChanged(bool, str)     layout started/finished (the main window shows progress)
    progressed(float, str)     layout progress, 0..1

Modules: view.py (GraphCanvas, interaction), scene.py (layout jobs, items), decorations.py
(highlights, heat overlay, ghosts), overview.py (huge graphs), minimap.py, find_bar.py.
"""
from __future__ import annotations

from app.canvas.find_bar import FindBar
from app.canvas.minimap import Minimap
from app.canvas.overview import DisplayExtras, prepare_display, render_overview
from app.canvas.view import GraphCanvas

__all__ = ["GraphCanvas", "Minimap", "FindBar", "DisplayExtras", "prepare_display", "render_overview"]
