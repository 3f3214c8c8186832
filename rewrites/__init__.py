"""The rule library: one module per family of rewrites (fusion, folding, cleanup, ...)."""
