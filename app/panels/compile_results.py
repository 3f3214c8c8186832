"""What the Compile & Run panel shows of a result, as text: the results table's rows (latency
beside onnxruntime, memory, tuning) and the target a compile was built for. No widgets here."""
from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the records read here; imported for the annotations only (core loads lazily)
    from core.compiler.measure.bench import BenchResult
    from core.compiler.runtime.manifest import MemoryEstimate, TuningRecord

__all__ = ["built_for", "format_ms", "result_rows", "tuning_rows"]


def _mb(n) -> str:
    if n is None:
        return "–"
    if n < 2**20:
        return f"{n / 1024:.1f} KB"
    return f"{n / 2**20:.2f} MB"


def format_ms(x) -> str:
    return "–" if x is None else f"{x:.3f} ms"


def built_for(art) -> str:
    """'CPU (znver4 -avx512f)': the target and the CPU its code is for (from the manifest)."""
    name = art.manifest.built_for
    return f"{art.target.upper()} ({name})" if name else art.target.upper()


def _range(a: float | None, b: float | None) -> str:
    """"a – b ms" of two figures of a latency record (older records lack p10 / max: one figure)."""
    if a is None or b is None:
        return format_ms(a if a is not None else b)
    return f"{format_ms(a).removesuffix(' ms')} – {format_ms(b)}"


def result_rows(res: BenchResult | None, memory_estimate: MemoryEstimate | None = None) -> list[tuple[str, str, str]]:
    """Table rows (label, ours, onnxruntime) for a benchmark result; without one (nothing could
    run here), only the compile-time memory estimate."""
    rows: list[tuple[str, str, str]] = []
    if res is not None:
        lat, ort = res.latency_ms, res.ort_latency_ms
        rows.append(("Latency median", format_ms(lat.median), format_ms(ort.median) if ort else "–"))
        rows.append(("Latency p10 – p90", _range(lat.p10, lat.p90), _range(ort.p10, ort.p90) if ort else "–"))
        rows.append(("Latency min – max", _range(lat.min, lat.max), _range(ort.min, ort.max) if ort else "–"))
        rows.append(("Runs", str(lat.runs), str(ort.runs) if ort else "–"))
        if res.threads:
            from core.compiler.measure.bench import threads_text

            rows.append(("Threads", threads_text(res.threads), str(res.threads.ort) if res.threads.ort is not None else "–"))
        if res.ratio is not None:
            rows.append(("Ratio ours / onnxruntime", f"{res.ratio:g}×", "1×"))
    mem = res.memory if res is not None else memory_estimate
    rows += [
        ("Parameters", _mb(mem.params_bytes if mem else None), ""),
        ("Activations, planned", _mb(mem.planned_bytes if mem else None), ""),
        ("Activations, unplanned", _mb(mem.unplanned_bytes if mem else None), ""),
    ]
    if res is not None:
        rows.append(("Peak RSS (this process)", _mb(res.memory.peak_rss_bytes), ""))
    return rows


def tuning_rows(tuning: TuningRecord | None) -> list[tuple[str, str, str]]:
    """Table rows about tuning, from the manifest's record: what the tuning run did (its own
    summary) and how many kernels of this compile run on schedules from the database."""
    if not tuning:
        return []
    rows = []
    if tuning.trials:
        rows.append(("Tuning", tuning.summary or f"{tuning.trials} trials per kernel", ""))
    if tuning.kernels:
        rows.append(("Kernels on tuned schedules", f"{tuning.kernels_from_database} of {tuning.kernels} (from the database)", ""))
    if tuning.model_ab:
        from core.compiler.tuning.ab import describe_ab

        rows.append(("Model-level A/B", describe_ab(tuning.model_ab).removeprefix("model-level A/B: "), ""))
    return rows
