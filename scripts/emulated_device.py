#!/usr/bin/env python3
"""An emulated ARM64 device on this machine: TVM's RPC server in the AArch64 Python that
scripts/setup_emulation.py set up, under qemu-user, to try `bench ART --rpc` and the Compile
panel's Time on device without the device. Latencies are the emulator's, not a device's.

    .venv/bin/python scripts/emulated_device.py --port 9090                           # bench ART --rpc 127.0.0.1:9090
    .venv/bin/python scripts/emulated_device.py --tracker 127.0.0.1:9190 --key rpi5   # bench ART --rpc 127.0.0.1:9190:rpi5
"""
from __future__ import annotations

import argparse
import os
import signal
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--port", type=int, default=9090, help="the port the server listens on (127.0.0.1)")
    p.add_argument("--key", default="", help="the key it registers under with --tracker")
    p.add_argument("--tracker", metavar="HOST:PORT", help="a TVM RPC tracker to register with")
    p.add_argument("--triple", default="aarch64-linux-gnu")
    args = p.parse_args(argv)
    from core.compiler.runtime.emulation import device_server
    from core.errors import WorkbenchError

    try:
        server = device_server(args.triple, args.port, key=args.key, tracker=args.tracker)
    except WorkbenchError as e:
        print(f"emulated_device: {e}", file=sys.stderr)
        return 2
    signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))  # a kill stops the server too
    print(f"starting TVM's RPC server for {args.triple} under emulation (importing TVM takes ~10 s)...", flush=True)
    try:
        line = server.stdout.readline().strip()
        if not line.startswith("serving"):
            print(f"emulated_device: the server did not start (exit status {server.wait()}).", file=sys.stderr)
            return 1
        where = f"registered with {args.tracker} as '{args.key}'" if args.tracker else f"at 127.0.0.1:{line.split()[-1]}"
        print(f"serving {where}; Ctrl+C stops it.", flush=True)
        return server.wait()
    except KeyboardInterrupt:
        server.terminate()
        server.wait(timeout=10)
        return 0


if __name__ == "__main__":
    sys.exit(main())
