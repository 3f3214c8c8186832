"""Tuning records that choose how a 3x3 stride-1 conv is computed: direct, F(2,3) or F(4,3).

Why a record of its own: Winograd is chosen when the conv is legalized (core.compiler.passes.layout.winograd,
Relax level: the weight is transformed at compile time and the kernel takes U, not the weight),
while the template search and MetaSchedule tune kernels after FuseTIR, whose signature is fixed
by then. So the choice is tuned and applied one step earlier, by the compile step "Winograd
choice" just before LegalizeOps (`winograd_choice_pass`):

* each conv that could go either way (`legal_choices`: 3x3, stride 1, dilation 1, groups 1,
  float32, constant weight, channel-blocked, tiles covering the output with at most
  LEGAL_MAX_PADDED_WORK of its area; no channel minimum) is keyed by its workload (`conv_key`:
  data and weight shapes, padding, dtype) in `winograd.json` of the tuning database folder
  (one per target, core.compiler.tuning.db.database_dir);
* tuning (`tune_choices`) builds the conv alone each legal way with the default schedules,
  measures them on one thread, and measures the fastest that beat the rule's own pick by
  tuning_runners.CONFIRM_MARGIN again beside it at the model's threads; the record keeps the
  rule's pick unless another won there;
* applying (`apply_choices`) legalizes each conv whose record names a legal choice that way
  (a call_tir LegalizeOps then leaves alone); a record naming a choice that is not legal for
  the conv any more (stale) or an unknown one is ignored with one warning. Convs without a
  record, and every compile without a tuning database, stay with winograd_tile's rule.
The Winograd GEMM's register tile and whether the padding is a separate copy are knobs of the
template search (schedules.cpu_winograd.Conv2dWinogradNCHWc.candidates), tuned on the fused
kernel like any other.
"""
from __future__ import annotations

import logging
import time

__all__ = [
    "CHOICES",
    "LEGAL_MAX_PADDED_WORK",
    "WINOGRAD_FILE",
    "WINOGRAD_SHARE",
    "apply_choices",
    "conv_key",
    "legal_choices",
    "load_choices",
    "rule_choice",
    "tune_choices",
    "winograd_choice_pass",
]

logger = logging.getLogger(__name__)

WINOGRAD_FILE = "winograd.json"
CHOICES = ("direct", "winograd2", "winograd4")
# tiles tried by tuning when they cover the output with at most this much of its area: 7x7
# maps (1.31x with either tile), which the untuned rule leaves direct, are measured too
LEGAL_MAX_PADDED_WORK = 1.35
# the share of a compile's tuning budget the choices may take (the template search and
# MetaSchedule get the rest); a conv whose choice is recorded costs nothing in later runs
WINOGRAD_SHARE = 0.2
# what one conv's choice is assumed to take before one was timed (three builds and runs, and the
# builder's start; 10-20 s on 2 busy cores), so a small budget does not start one it cannot end
FIRST_CONV_S = 10.0
_warned: set[tuple] = set()


def _is_conv(call) -> bool:
    from tvm import relax

    return isinstance(call, relax.Call) and getattr(call.op, "name", None) == "relax.nn.conv2d"


def _block(call) -> int | None:
    from ..passes.layout.nchwc import BLOCKED_LAYOUT

    match = BLOCKED_LAYOUT.match(str(call.attrs.out_layout) or str(call.attrs.data_layout))
    return int(match.group(1)) if match else None


def conv_key(call) -> str | None:
    """The workload of a relax conv2d call as winograd.json keys it (None: no static shapes), e.g.
    "conv2d 1x4x56x56x16 w4x4x3x3x16x16 stride1,1 pad1,1,1,1 dilation1,1 groups1 float32"."""
    from ..passes.relax_rewrite import static_shape

    data, weight = static_shape(call.args[0]), static_shape(call.args[1])
    if data is None or weight is None:
        return None
    attrs = call.attrs

    def ints(values):
        return ",".join(str(int(v)) for v in values)

    dtype = str(getattr(call.args[0].ty, "dtype", ""))
    return (f"conv2d {'x'.join(map(str, data))} w{'x'.join(map(str, weight))} stride{ints(attrs.strides)} "
            f"pad{ints(attrs.padding)} dilation{ints(attrs.dilation)} groups{int(attrs.groups)} {dtype}")


def legal_choices(call) -> list[str]:
    """The ways `call` can be computed: ["direct"] plus the Winograd tiles it allows (conditions 1
    and 2 of winograd.winograd_tile; tiles covering the output with at most LEGAL_MAX_PADDED_WORK)."""
    from ..passes.layout.winograd import padded_work, winograd_shape

    block = _block(call) if _is_conv(call) else None
    shape = winograd_shape(call, block) if block else None
    if shape is None:
        return ["direct"]
    out_h, out_w = shape["out_h"], shape["out_w"]
    return ["direct"] + [f"winograd{m}" for m in (2, 4) if padded_work(out_h, out_w, m) <= LEGAL_MAX_PADDED_WORK]


def rule_choice(call) -> str:
    """What the untuned rule (winograd.winograd_tile) does with `call`."""
    from ..passes.layout.winograd import winograd_tile

    block = _block(call)
    tile = winograd_tile(call, block) if block else None
    return "direct" if tile is None else f"winograd{tile}"


def load_choices(database, target) -> dict[str, str]:
    """{conv_key: choice} of the database folder for `target` ({} when none); records that are
    not an object with a known "choice" are left out with one warning naming the file."""
    from .db import database_dir
    from .files import load_records

    folder = database_dir(database, target)
    records = load_records(folder, WINOGRAD_FILE)
    good = {k: r["choice"] for k, r in records.items() if r.get("choice") in CHOICES}
    bad = [k for k in records if k not in good]
    if bad:
        _warn_once(("bad", str(folder), tuple(bad)), f"The tuning database file {folder / WINOGRAD_FILE} has {len(bad)} record(s) "
                   f"with no known choice (first: '{bad[0]}'; known: {', '.join(CHOICES)}): they are ignored.")
    return good


def _warn_once(key: tuple, message: str) -> None:
    if key not in _warned:
        _warned.add(key)
        logger.warning("%s", message)


def _legalize(bb, call, choice: str):
    """The call_tir of `call` computed as `choice` (one of legal_choices(call))."""
    from ..passes.layout.nchwc import legalize_conv2d_direct
    from ..passes.layout.winograd import legalize_winograd

    if choice == "direct":
        return legalize_conv2d_direct(bb, call)
    return legalize_winograd(bb, call, int(choice[len("winograd"):]))


def apply_choices(mod, choices: dict[str, str], target, applied: dict | None = None):
    """`mod` with every conv2d whose conv_key `choices` names a legal choice legalized that way
    (for `target`); the others untouched (LegalizeOps and winograd_tile's rule do them).
    `applied` gets {conv_key: choice} of the convs computed otherwise than the rule would."""
    from tvm import relax

    if not choices:
        return mod

    @relax.expr_functor.mutator
    class Choose(relax.PyExprMutator):
        def visit_call_(self, call):
            call = super().visit_call_(call)
            if not _is_conv(call):
                return call
            key = conv_key(call)
            choice = choices.get(key) if key is not None else None
            if choice is None:
                return call
            if choice not in legal_choices(call):
                _warn_once(("stale", key, choice), f"The Winograd tuning record for {key} chooses {choice}, which that conv "
                           "cannot take: the record is ignored (the untuned rule decides).")
                return call
            if applied is not None and choice != rule_choice(call):
                applied[key] = choice
            return _legalize(self.builder_, call, choice)

    chooser = Choose(mod)
    with target:
        for gvar, func in mod.functions_items():
            if isinstance(func, relax.Function):
                chooser.builder_.update_func(gvar, chooser.visit_expr(func))
    return chooser.builder_.get()


def _variant(call, choice: str, target):
    """The conv alone computed as `choice`, as a PrimFunc "main" with its weight marked layout-free
    (what FuseTIR and tuning_db's preparation give a conv with no epilogue)."""
    from tvm import relax

    bb = relax.BlockBuilder()
    x = relax.Var("x", call.args[0].ty)
    with target, bb.function("main", [x]):
        with bb.dataflow():
            new = relax.Call(call.op, [x, call.args[1]], call.attrs, call.ty_args)
            out = bb.emit(_legalize(bb, bb.normalize(new), choice))
            bb.emit_output(out)
        bb.emit_func_output(out)
    mod = relax.transform.AttachAttrLayoutFreeBuffers()(bb.get())
    func = next(f for gv, f in mod.functions_items() if gv.name_hint != "main")
    return func.with_attr("global_symbol", "main")


def _tune_one(call, target, builder, runner, confirm_runner, cancel=None) -> dict | None:
    """Measure the legal ways of one conv (module docstring); the record, or None when the
    rule's own pick did not build or run, or `cancel()` turned True before the confirmation (as
    tuning stops after the measuring round in progress; a conv half measured files nothing)."""
    from ..schedules import default_schedule
    from .runners import CONFIRM_MARGIN, confirm_at_threads, measure_schedules, scheduled_module

    choices, default = legal_choices(call), rule_choice(call)
    schedules = {}
    for choice in choices:
        scheduled, _rule = default_schedule(_variant(call, choice, target), target)
        if scheduled is not None:
            schedules[choice] = scheduled_module(scheduled)
    if default not in schedules:
        return None
    names = list(schedules)
    secs = dict(zip(names, measure_schedules([schedules[n] for n in names], target, builder, runner)))
    if secs.get(default) is None:
        return None
    ms = {n: None if s is None else round(s * 1e3, 6) for n, s in secs.items()}
    faster = sorted((n for n in names if n != default and secs[n] is not None and secs[n] < secs[default] * (1 - CONFIRM_MARGIN)),
                    key=lambda n: secs[n])
    record = {"choice": default, "rule": default, "ms": ms, "confirmed": None}
    if faster and cancel is not None and cancel():
        return None
    if faster:
        winner, at_threads = confirm_at_threads(schedules[default], [schedules[n] for n in faster], target, builder, confirm_runner)
        record["confirmed"] = {n: None if s is None else round(s * 1e3, 6) for n, s in zip([default, *faster], at_threads)}
        if winner is not None:
            record["choice"] = faster[winner]
    return record


def _convs(mod) -> dict:
    """{conv_key: a conv2d call} of the module's Relax functions with more than one legal choice."""
    from tvm import relax

    found = {}

    def visit(expr):
        if _is_conv(expr) and len(legal_choices(expr)) > 1 and (key := conv_key(expr)) is not None:
            found.setdefault(key, expr)

    for _gv, func in mod.functions_items():
        if isinstance(func, relax.Function):
            relax.analysis.post_order_visit(func, visit)
    return found


def tune_choices(mod, target, database, *, deadline: float, builder=None, runner=None, confirm_runner=None,
                 cancel=None, progress=None) -> dict[str, dict]:
    """Tune the choice of every conv of `mod` (before LegalizeOps) that has none in the database
    yet, biggest first, until `deadline` (time.monotonic) or `cancel()` (checked before each conv
    and before its confirmation); the records are saved as they come. `progress(fraction,
    "conv 2 of 5: <conv_key>")` hears each conv as it starts. Returns the records made now."""
    from .db import database_dir
    from .files import load_records, save_records
    from .runners import local_builder, local_runner

    folder = database_dir(database, target)
    folder.mkdir(parents=True, exist_ok=True)
    records = load_records(folder, WINOGRAD_FILE)
    todo = _pending(mod, target, database)
    made: dict[str, dict] = {}
    spent = []
    for index, (key, call) in enumerate(todo):
        if (cancel is not None and cancel()) or time.monotonic() + (max(spent) if spent else FIRST_CONV_S) > deadline:
            break
        if progress is not None:
            progress(index / len(todo), f"conv {index + 1} of {len(todo)}: {key}")
        started = time.monotonic()
        if builder is None:
            from ..target import host_cores

            cores = target.attrs.get("num-cores") if target.attrs is not None else None
            builder, runner = local_builder(target=target), runner or local_runner()
            confirm_runner = confirm_runner or local_runner(threads=int(cores) if cores else host_cores())
        record = _tune_one(call, target, builder, runner, confirm_runner or runner, cancel)
        spent.append(time.monotonic() - started)
        if record is not None:
            records[key] = made[key] = record
            save_records(folder, WINOGRAD_FILE, records)
            logger.info("Winograd choice for %s: %s (rule: %s; one-thread ms %s)", key, record["choice"], record["rule"], record["ms"])
    return made


def _pending(mod, target, database) -> list[tuple[str, object]]:
    """[(conv_key, call)] of the convs of `mod` with a choice to make and no record of it, biggest first."""
    records = load_choices(database, target)
    return sorted(((k, c) for k, c in _convs(mod).items() if k not in records), key=lambda kc: -_work(kc[1]))


def _work(call) -> int:
    """Multiply-adds of the direct conv (output elements x input channels): biggest tuned first."""
    import math

    from ..passes.relax_rewrite import static_shape

    out, weight = static_shape(call), static_shape(call.args[1])
    return math.prod(out) * weight[1] * weight[4] if out and weight and len(weight) == 6 else 0


def winograd_choice_pass(target, database=None, budget_s: float | None = None, cancel=None, progress=None, spent=None,
                         applied: dict | None = None):
    """The compile step "Winograd choice" (before LegalizeOps): with `budget_s`, tune the choices
    of the module's convs first (`tune_choices`; `spent(seconds)` hears how long that took);
    then apply the database's choices (`apply_choices`, which fills `applied`)."""
    import tvm

    @tvm.transform.module_pass(opt_level=0, name="WinogradChoice")
    def _pass(mod, _ctx):
        if target.kind.name != "llvm":
            return mod
        if budget_s is not None and budget_s > 0 and _pending(mod, target, database):
            started = time.monotonic()
            tune_choices(mod, target, database, deadline=started + budget_s, cancel=cancel, progress=progress)
            if spent is not None:
                spent(time.monotonic() - started)
        return apply_choices(mod, load_choices(database, target), target, applied)

    return _pass
