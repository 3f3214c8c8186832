"""A GPU's peak FP32 FLOP/s, from NVIDIA's spec sheets, by the name the driver reports.

The reference for "fraction of peak": the workbench's CUDA kernels compute in FP32 on the CUDA
cores (dlight's rules emit no tensor-core code for float32), so the figure that bounds them is the
dense FP32 (non-tensor) peak at boost clock. The numbers are the spec sheets', not measured; a GPU
missing from the table has no reference figure (None), never a guessed one.
"""
from __future__ import annotations

import logging
import re
from dataclasses import dataclass

__all__ = ["GpuPeak", "gpu_peak", "PEAKS"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class GpuPeak:
    model: str  # the spec sheet's product name
    fp32_tflops: float  # dense FP32 on CUDA cores, boost clock
    source: str = "NVIDIA spec sheet"

    @property
    def fp32_flops(self) -> float:
        return self.fp32_tflops * 1e12


# (pattern on the reported name, peak); the first match wins, so variants come before their family
PEAKS: tuple[tuple[str, GpuPeak], ...] = (
    (r"GH200", GpuPeak("GH200", 67.0)),
    (r"H200.*NVL", GpuPeak("H200 NVL", 60.0)),
    (r"H200", GpuPeak("H200 SXM", 67.0)),
    (r"H100.*PCIe", GpuPeak("H100 PCIe", 51.0)),
    (r"H100.*NVL", GpuPeak("H100 NVL", 60.0)),
    (r"H100", GpuPeak("H100 SXM", 67.0)),
    (r"A100\b", GpuPeak("A100", 19.5)),
    (r"A10\b", GpuPeak("A10", 31.2)),
    (r"L40S", GpuPeak("L40S", 91.6)),
    (r"L40\b", GpuPeak("L40", 90.5)),
    (r"\bL4\b", GpuPeak("L4", 30.3)),
    (r"\bT4\b", GpuPeak("T4", 8.1)),
    (r"V100.*PCIE|V100.*PCIe", GpuPeak("V100 PCIe", 14.0)),
    (r"V100", GpuPeak("V100 SXM2", 15.7)),
    (r"RTX 4090", GpuPeak("GeForce RTX 4090", 82.6)),
    (r"RTX A6000", GpuPeak("RTX A6000", 38.7)),
)


def gpu_peak(device_name: str) -> GpuPeak | None:
    """The spec-sheet peak of the GPU the driver names `device_name` ('NVIDIA H100 80GB HBM3'),
    or None when the table does not know it."""
    for pattern, peak in PEAKS:
        if re.search(pattern, device_name or ""):
            return peak
    logger.info("no spec-sheet peak for GPU %r", device_name)
    return None
