"""The accuracy debugger: two computations of one model compared tensor by tensor
(core.accuracy.debug), what was found (core.accuracy.report), and how tensors are read a chunk
of the graph at a time (core.accuracy.capture)."""
