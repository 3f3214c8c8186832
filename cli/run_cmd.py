"""`run ARTIFACT_DIR --inputs IN.npz [-o OUT.npz]`."""
from __future__ import annotations

import json
import os

HELP = ("run an exported artifact on inputs from a .npz file and write the outputs by name "
        "(loading an artifact executes its compiled library: run only artifacts you built or trust)")


def add_arguments(p) -> None:
    p.add_argument("artifact", help="exported artifact folder")
    p.add_argument("--inputs", required=True, metavar="IN.npz", help="inputs by name (numpy .npz)")
    p.add_argument("-o", "--output", metavar="OUT.npz", help="write the outputs by name to this .npz file")
    p.add_argument("--json", action="store_true", help="print one JSON object (output names, shapes, dtypes)")


def run(args) -> int:
    import numpy as np

    from core.compiler.runtime.artifact import load_artifact
    from core.errors import WorkbenchError

    art = load_artifact(args.artifact)
    if not os.path.isfile(args.inputs):
        raise WorkbenchError(f"{args.inputs}: no such file.")
    try:
        with np.load(args.inputs, allow_pickle=False) as data:
            feeds = {k: data[k] for k in data.files}
    except (OSError, ValueError) as e:
        raise WorkbenchError(f"{args.inputs} cannot be read as a numpy .npz file ({str(e).splitlines()[0] if str(e) else type(e).__name__}).") from None
    unknown = sorted(set(feeds) - {s.name for s in art.inputs})
    if unknown:
        raise WorkbenchError(f"{args.inputs} holds '{unknown[0]}', which is not an input of the model (inputs: {', '.join(s.name for s in art.inputs)}).")
    outputs = art.run(feeds)
    names = [s.name for s in art.outputs]
    if args.output:
        np.savez(args.output, **dict(zip(names, outputs)))
    info = [{"name": n, "shape": list(o.shape), "dtype": str(o.dtype)} for n, o in zip(names, outputs)]
    if args.json:
        print(json.dumps({"outputs": info, "written": args.output}))
    else:
        for i in info:
            print(f"{i['name']}: shape {i['shape']} dtype {i['dtype']}")
        if args.output:
            print(f"wrote {args.output}")
    return 0
