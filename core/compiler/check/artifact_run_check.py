"""Check an artifact against onnxruntime where it is: `bench ARTIFACT --check-only`.

The artifact runs on seeded random inputs (valid for its model's ops), natively, or under user-mode
emulation when its code is for another architecture (core.compiler.runtime.emulation: an AArch64
build checked on an x86-64 machine), and its outputs are compared with the reference's on the host,
run on the folder's model.onnx. The comparison is the compile's own (verification.verify_artifact,
with the tolerances the manifest recorded), so a mismatch is refused in the same sentence.
An emulated run measures nothing: the result says it ran emulated, and has no latency.
"""
from __future__ import annotations

from dataclasses import dataclass

from ...errors import WorkbenchError
from ...tolerances import ATOL, RTOL
from ..runtime.artifact import Artifact
from .reference import ONNX_REFERENCE, ORT
from .verification import CompiledMismatchError, verify_artifact

__all__ = ["ArtifactRunCheck", "check_artifact"]


@dataclass
class ArtifactRunCheck:
    """What `check_artifact` found: whether the outputs match the reference (`reference` names it)
    within rtol/atol, the largest absolute error, whether the run was emulated (and by what), and
    `sentence`, one line that says all of it (the mismatch's refusal where they differ)."""

    match: bool
    max_abs_err: float
    reference: str
    emulated: bool
    emulator: str | None
    rtol: float
    atol: float
    dims: dict
    sentence: str

    def to_json(self) -> dict:
        return {"match": self.match, "max_abs_err": self.max_abs_err, "reference": self.reference, "emulated": self.emulated,
                "emulator": self.emulator, "rtol": self.rtol, "atol": self.atol, "dims": dict(self.dims), "sentence": self.sentence}


def check_artifact(art: Artifact, dims: dict[str, int] | None = None, seed: int = 0) -> ArtifactRunCheck:
    """Run `art` on seeded random inputs (`dims`: values of its symbolic dims, default 1) and
    compare with onnxruntime (onnx's reference evaluator where onnxruntime cannot run the model) on
    its model.onnx, with the tolerances its manifest recorded (the defaults where it recorded none).
    Emulated where the code is for another architecture; a WorkbenchError (one sentence) where it
    cannot run here at all (emulation not set up, no CUDA GPU) or there is no model to compare with."""
    if art.model_bytes is None:
        where = f"{art.folder}" if art.folder is not None else "this artifact"
        raise WorkbenchError(f"{where} has no model.onnx to compare with onnxruntime; export it again with the workbench.")
    recorded = art.manifest.verification
    rtol = recorded.rtol if recorded is not None and recorded.checked and recorded.rtol is not None else RTOL
    atol = recorded.atol if recorded is not None and recorded.checked and recorded.atol is not None else ATOL
    emulator_name = None
    if art.foreign:
        from ..runtime.emulation import emulator

        triple = str((art.manifest.target.cpu or {}).get("triple"))
        emu = emulator(triple)
        emulator_name = emu.name if emu is not None else None
    try:
        result = verify_artifact(art, dims=dims, seed=seed, rtol=rtol, atol=atol)
        match, err, reference, atol = True, float(result.max_abs_err), str(result.reference), float(result.atol)
        said = f"matches {reference} (max abs error {err:.3g}) on seeded random inputs"
    except CompiledMismatchError as e:
        match, err, reference = False, float(e.max_abs_err), ONNX_REFERENCE if ONNX_REFERENCE in str(e) else ORT
        said = str(e).rstrip(".")
    emulated = bool(art.ran_emulated)
    if emulated:
        said += f"; it ran under {emulator_name or 'qemu-user'} emulation of {(art.manifest.target.cpu or {}).get('triple')}, so no latency is measured"
    return ArtifactRunCheck(match=match, max_abs_err=err, reference=reference, emulated=emulated, emulator=emulator_name if emulated else None,
                            rtol=rtol, atol=atol, dims=dict(dims or {}), sentence=said + ".")
