"""`run ARTIFACT_DIR --inputs IN.npz [-o OUT.npz]`."""
from __future__ import annotations

import json

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
    from core.compiler.runtime.artifact_check import ArtifactRefused, check_feeds, read_npz
    from core.errors import WorkbenchError

    art = load_artifact(args.artifact)
    try:  # the checks and sentences of the artifact's own run.py: a file that is no input is refused too
        feeds = read_npz(args.inputs)
        check_feeds(art.inputs, feeds, args.inputs)
    except ArtifactRefused as e:
        raise WorkbenchError(str(e)) from None
    outputs = art.run(feeds)
    names = [s.name for s in art.outputs]
    if args.output:
        np.savez(args.output, **dict(zip(names, outputs)))
    info = [{"name": n, "shape": list(o.shape), "dtype": str(o.dtype)} for n, o in zip(names, outputs)]
    path = art.path_for(feeds) if art.manifest.shape_buckets else None  # which code ran (shape buckets)
    # code for another architecture ran under user-mode emulation (core.compiler.runtime.emulation): say so
    emulated = f"under emulation of {art.manifest.target.cpu.get('triple')} (qemu-user; nothing measured)" if art.ran_emulated else None
    if args.json:
        print(json.dumps({"outputs": info, "written": args.output, **({"path": path} if path else {}), "emulated": art.ran_emulated}))
    else:
        for i in info:
            print(f"{i['name']}: shape {i['shape']} dtype {i['dtype']}")
        if path:
            print(f"ran: {path}")
        if emulated:
            print(f"ran {emulated}")
        if args.output:
            print(f"wrote {args.output}")
    return 0
