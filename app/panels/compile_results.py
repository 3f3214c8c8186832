"""What the Compile & Run panel shows of a result, as text: the results table's rows (latency
beside onnxruntime, memory, tuning) and the target a compile was built for. No widgets here."""
from __future__ import annotations

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
    cpu = (art.manifest.get("target") or {}).get("cpu") or {}
    name = " ".join([str(cpu.get("name", "")), *cpu.get("features", [])]).strip()
    return f"{art.target.upper()} ({name})" if name else art.target.upper()


def _range(stats: dict, lo: str, hi: str) -> str:
    """"a – b ms" of two figures of a latency record (older records lack p10 / max: one figure)."""
    a, b = stats.get(lo), stats.get(hi)
    if a is None or b is None:
        return format_ms(a if a is not None else b)
    return f"{format_ms(a).removesuffix(' ms')} – {format_ms(b)}"


def result_rows(res, memory_estimate: dict | None = None) -> list[tuple[str, str, str]]:
    """Table rows (label, ours, onnxruntime) for a benchmark result; without one (nothing could
    run here), only the compile-time memory estimate."""
    rows: list[tuple[str, str, str]] = []
    if res is not None:
        ort = res.ort_latency_ms or {}
        lat = res.latency_ms
        rows.append(("Latency median", format_ms(lat.get("median")), format_ms(ort.get("median")) if ort else "–"))
        rows.append(("Latency p10 – p90", _range(lat, "p10", "p90"), _range(ort, "p10", "p90") if ort else "–"))
        rows.append(("Latency min – max", _range(lat, "min", "max"), _range(ort, "min", "max") if ort else "–"))
        rows.append(("Runs", str(res.latency_ms.get("runs")), str(ort.get("runs", "–")) if ort else "–"))
        threads = getattr(res, "threads", None)
        if threads:
            from core.compiler.measure.bench import threads_text

            rows.append(("Threads", threads_text(threads), str(threads.get("ort", "–"))))
        if res.ratio is not None:
            rows.append(("Ratio ours / onnxruntime", f"{res.ratio:g}×", "1×"))
    mem = res.memory if res is not None else (memory_estimate or {})
    rows += [
        ("Parameters", _mb(mem.get("params_bytes")), ""),
        ("Activations, planned", _mb(mem.get("planned_bytes")), ""),
        ("Activations, unplanned", _mb(mem.get("unplanned_bytes")), ""),
    ]
    if res is not None:
        rows.append(("Peak RSS (this process)", _mb(mem.get("peak_rss_bytes")), ""))
    return rows


def tuning_rows(tuning: dict | None) -> list[tuple[str, str, str]]:
    """Table rows about tuning, from the manifest's record: what the tuning run did (its own
    summary) and how many kernels of this compile run on schedules from the database."""
    if not tuning:
        return []
    rows = []
    if tuning.get("trials"):
        rows.append(("Tuning", tuning.get("summary") or f"{tuning['trials']} trials per kernel", ""))
    if tuning.get("kernels"):
        rows.append(("Kernels on tuned schedules", f"{tuning.get('kernels_from_database', 0)} of {tuning['kernels']} (from the database)", ""))
    if tuning.get("model_ab"):
        from core.compiler.tuning.ab import describe_ab

        rows.append(("Model-level A/B", describe_ab(tuning["model_ab"]).removeprefix("model-level A/B: "), ""))
    return rows
