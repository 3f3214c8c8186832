"""Modal dialogs of the workbench (one module per dialog)."""
