"""Whether this machine's first two CPUs are two cores right now: a probe for reading 2-thread figures.

On a virtual machine the hypervisor may place the two virtual CPUs on two hardware threads of one
physical core (SMT siblings), or time-share them, and move them between placements while a
benchmark runs. Then a 2-thread run gets the speed of about one core, for either runtime, and a
model's 2-thread times jump between two levels. On this project's 2-vCPU Zen 4 guest, a 256x256
float32 matmul loop pinned to each vCPU ran 2,700-2,900/s alone and the same together in most
probes, but 1,550/s each together in one of three (2026-12-02). So the benchmark tables print, per
model, this probe before and after its timed runs: the work two pinned processes do together,
divided by what one does alone. About 2 means two cores; about 1, one core's worth.

    python benchmarks/core_pair.py [--seconds 0.3]
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys

__all__ = ["core_pair_speedup"]

# runs in a fresh interpreter, so numpy's BLAS is pinned to one thread before it loads
_PROBE = r"""
import os, sys, time
os.environ.update(OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", MKL_NUM_THREADS="1")
import numpy as np
cpus, seconds = [int(c) for c in sys.argv[1].split(",")], float(sys.argv[2])
a = np.random.default_rng(0).random((256, 256), dtype=np.float32)

def rate(cpu):
    os.sched_setaffinity(0, {cpu})
    a @ a
    n, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        a @ a
        n += 1
    return n / (time.perf_counter() - t0)

before = rate(cpus[0])
r, w = os.pipe()
pid = os.fork()
if pid == 0:
    os.close(r)
    os.write(w, repr(rate(cpus[1])).encode())
    os._exit(0)
os.close(w)
mine = rate(cpus[0])
os.waitpid(pid, 0)
other = float(os.read(r, 64))
# one core alone, the faster of a timing before and one after: a process that held the core during
# one of them (a test suite's other worker, a busy host) would otherwise read as more than 2 cores
alone = max(before, rate(cpus[0]))
print((mine + other) / alone)
"""


def core_pair_speedup(seconds: float = 0.3) -> float | None:
    """The work two processes pinned to the first two CPUs do together over one alone (about 2.0
    when they are two cores, about 1.0 when they share one); None where it cannot be probed (one
    CPU, no affinity control, or the probe failed)."""
    if not hasattr(os, "sched_getaffinity") or not hasattr(os, "fork"):
        return None
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        return None
    try:
        out = subprocess.run([sys.executable, "-c", _PROBE, f"{cpus[0]},{cpus[1]}", str(seconds)],
                             capture_output=True, text=True, timeout=30 + 4 * seconds, check=True)
        return float(out.stdout.strip())
    except (subprocess.SubprocessError, OSError, ValueError):
        return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=0.3, help="length of each of the probe's two timings")
    args = parser.parse_args(argv)
    speedup = core_pair_speedup(args.seconds)
    print("two CPUs together: not measurable here" if speedup is None else f"two CPUs together: {speedup:.2f}x one alone")
    return 0


if __name__ == "__main__":
    sys.exit(main())
