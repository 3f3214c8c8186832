"""`bench MODEL|ARTIFACT_DIR --rpc HOST:PORT:KEY`: the artifact timed on a device running TVM's RPC
server (core.compiler.measure.remote), found through a tracker (HOST:PORT:KEY) or directly (HOST:PORT).

cli/bench_cmd.py adds these arguments (`add_arguments`) and, when --rpc is given, hands the compiled
Artifact, or the artifact folder's path unloaded (its model.so may be for another CPU), to `run`.
"""
from __future__ import annotations

import json
import os

__all__ = ["add_arguments", "run"]


def add_arguments(p) -> None:
    p.add_argument("--rpc", metavar="HOST:PORT:KEY", default=None,
                   help="time the artifact on a device running TVM's RPC server: a tracker and the key the device "
                   "registered under (or HOST:PORT of a server started without a tracker); per-kernel times are "
                   "each kernel timed alone on the device")


def run(args, art) -> int:
    """Bench `art` (an Artifact, or an artifact folder's path: nothing of it is loaded here) on the
    device args.rpc names, with args.runs, args.warmup, args.dim, args.top and args.json as `bench`
    reads them; prints the report (or one JSON object) and returns the exit status."""
    from cli.compile_cmd import parse_dims
    from core.compiler.measure.bench import spread_warning
    from core.compiler.measure.remote import bench_remote, parse_device_address
    from core.compiler.runtime.artifact import check_artifact_folder
    from core.errors import WorkbenchError

    address = parse_device_address(args.rpc)  # a malformed address is refused before anything else
    if getattr(args, "vs_ort", False):
        raise WorkbenchError("--vs-ort runs onnxruntime on this machine, not on the device; leave it out with --rpc.")
    runs, warmup = getattr(args, "runs", 20), getattr(args, "warmup", 3)
    if runs < 1:
        raise WorkbenchError(f"--runs must be at least 1, not {runs}.")
    if isinstance(art, (str, os.PathLike)):
        manifest, _ = check_artifact_folder(art)
        dims = parse_dims(getattr(args, "dim", []) or [], manifest)
    else:
        dims = parse_dims(getattr(args, "dim", []) or [], art)
    res = bench_remote(art, args.rpc, runs=runs, warmup=warmup, dims=dims or None, per_kernel=True)
    if getattr(args, "json", False):
        print(json.dumps(res.to_json()))
        return 0
    lat = res.latency_ms
    print(f"latency ({res.target}, {lat.runs} runs): median {lat.median:.3f} ms, p10-p90 {lat.p10:.3f}-{lat.p90:.3f} ms, min {lat.min:.3f} ms")
    dev = res.device
    about = ", ".join(str(dev[k]) for k in ("arch", "name") if dev.get(k))
    where = f"device {address.key} at {address.host}:{address.port}" if address.key is not None else f"the RPC server at {address.host}:{address.port}"
    print(f"measured on {where}" + (f" ({about})" if about else ""))
    if res.path:
        print(f"code: {res.path}")
    if spread_warning(lat):
        print(f"  warning: {spread_warning(lat)}")
    if res.kernels:
        print("kernels (ms per run, share, ONNX nodes; each timed alone on the device):")
        for k in res.kernels[: getattr(args, "top", 10)]:
            nodes = ", ".join(k.onnx_nodes[:4]) + (" ..." if len(k.onnx_nodes) > 4 else "")
            print(f"  {k.ms:9.3f}  {k.share * 100:5.1f}%  {k.name}  [{nodes}]")
    elif res.kernels_note:
        print(res.kernels_note)
    return 0
