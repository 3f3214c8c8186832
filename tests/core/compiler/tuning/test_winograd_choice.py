"""core.compiler.tuning.winograd_choice: tuning records that choose direct, F(2,3) or F(4,3) per 3x3 conv,
and the Winograd kernel's template knobs (schedules.cpu_winograd: GEMM tile, padding folded).

Which kernels a record gives is checked on the fused module (no code run, any ISA); the tuning's
decisions with injected measurements (test_tuning_confirm's builder and runners); the numbers of a
chosen Winograd kernel with its padding read in the input transform through the real compile, on
this host's ISA, against onnxruntime."""
from __future__ import annotations

import json
import logging

import numpy as np
import onnx
import pytest
from onnx import helper

from tests.core.compiler.tuning.test_tuning_confirm import _Builder, _Runner
from tests.core.compiler.passes.layout.test_winograd import _model, _prim_funcs, _weight
from tests.helpers import configs_compute_the_same, relax_through

TARGETS = [("znver4", None), ("znver4", ["-avx512f"])]


def _conv(size: int, pads=(1, 1, 1, 1), channels: int = 32) -> onnx.ModelProto:
    """One 3x3 stride-1 conv of `channels` -> `channels` + bias + ReLU at size x size."""
    rng = np.random.default_rng(3)
    inits = [_weight(rng, "w", (channels, channels, 3, 3)), _weight(rng, "b", (channels,))]
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], kernel_shape=[3, 3], pads=list(pads)),
             helper.make_node("Relu", ["c"], ["y"])]
    out = size + pads[0] + pads[2] - 2
    return _model(nodes, inits, [1, channels, size, size], [1, channels, out, out])


def _target(mcpu, mattr):
    from core.compiler.target import make_target

    return make_target("cpu", mcpu=mcpu, mattr=mattr)


def _before_legalize(model, target):
    return relax_through(model, target, "LibraryDispatch")


def _fused(mod, target):
    """`mod` (before LegalizeOps) through the default pipeline's LegalizeOps .. FuseTIR."""
    from core.compiler.pipeline.pass_list import default_pipeline, make_pass

    specs = default_pipeline(target)
    names = [s.name for s in specs]
    with target:
        for spec in specs[names.index("LegalizeOps"): names.index("FuseTIR") + 1]:
            mod = make_pass(spec, target)(mod)
    return mod


def _write(db, target, records: dict) -> None:
    from core.compiler.tuning.db import database_dir
    from core.compiler.tuning.winograd_choice import WINOGRAD_FILE

    folder = database_dir(db, target)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / WINOGRAD_FILE).write_text(json.dumps(records))


def _only_conv(mod):
    from core.compiler.tuning.winograd_choice import _convs

    convs = _convs(mod)
    assert len(convs) == 1, list(convs)
    return next(iter(convs.items()))


@pytest.mark.parametrize("mcpu,mattr", TARGETS)
@pytest.mark.parametrize("choice,kernel", [("direct", "fused_conv2d_NCHWc_add_relu"), ("winograd2", "fused_conv2d_winograd2_NCHWc_add_relu"),
                                           ("winograd4", "fused_conv2d_winograd4_NCHWc_add_relu")])
def test_a_record_selects_its_variant_and_no_record_leaves_the_rule(tmp_path, mcpu, mattr, choice, kernel):
    """Codegen-free: a 7x7 conv (the rule leaves it direct: either tile covers 8x8, 1.31x) gets the
    kernel its record names; without a record the step changes nothing."""
    import tvm_ffi

    from core.compiler.tuning.winograd_choice import (
        legal_choices,
        rule_choice,
        winograd_choice_pass,
    )

    target = _target(mcpu, mattr)
    mod = _before_legalize(_conv(7), target)
    key, call = _only_conv(mod)
    assert legal_choices(call) == ["direct", "winograd2", "winograd4"] and rule_choice(call) == "direct"
    assert tvm_ffi.structural_equal(winograd_choice_pass(target, str(tmp_path))(mod), mod)
    _write(tmp_path, target, {key: {"choice": choice}})
    funcs = _prim_funcs(_fused(winograd_choice_pass(target, str(tmp_path))(mod), target))
    convs = sorted(n for n in funcs if "conv2d" in n)
    assert convs == [kernel], list(funcs)
    if choice != "direct":  # the weight arrives transformed: [alpha, alpha, OC/b, IC, b]
        alpha, block = int(choice[-1]) + 2, 16 if mattr is None else 8
        assert [alpha, alpha, 32 // block, 32, block] in [[int(d) for d in p.shape] for p in funcs[kernel].params]


def test_a_stale_or_unknown_record_is_ignored_with_one_warning(tmp_path, caplog):
    """A record choosing F(4,3) for a 5x5 map (tiles would cover 8x8, 2.6x: not a legal choice) is
    ignored, and so is one naming no known choice: the rule decides, one warning each however
    often the database is applied."""
    from tvm import relax

    from core.compiler.tuning.winograd_choice import conv_key, winograd_choice_pass

    target = _target("znver4", None)
    mod = _before_legalize(_conv(5), target)
    calls = []
    relax.analysis.post_order_visit(mod["main"], lambda e: calls.append(e) if getattr(getattr(e, "op", None), "name", "") == "relax.nn.conv2d" else None)
    key = conv_key(calls[0])
    _write(tmp_path, target, {key: {"choice": "winograd4"}, "conv2d of another model": {"choice": "fft"}})
    with caplog.at_level(logging.WARNING, logger="core.compiler.tuning.winograd_choice"):
        for _ in range(3):
            funcs = _prim_funcs(_fused(winograd_choice_pass(target, str(tmp_path))(mod), target))
    assert sorted(n for n in funcs if "conv2d" in n) == ["fused_conv2d_NCHWc_add_relu"], list(funcs)
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 2, warnings
    assert any("chooses winograd4, which that conv cannot take" in w and key in w for w in warnings), warnings
    assert any("winograd.json has 1 record(s) with no known choice" in w for w in warnings), warnings


def _tune(tmp_path, target, one_thread, at_threads):
    from core.compiler.tuning.db import database_dir
    from core.compiler.tuning.winograd_choice import WINOGRAD_FILE, load_choices, tune_choices

    mod = _before_legalize(_conv(7), target)
    key, _call = _only_conv(mod)
    made = tune_choices(mod, target, str(tmp_path), deadline=float("inf"), builder=_Builder(), runner=_Runner(one_thread),
                        confirm_runner=_Runner(at_threads))
    saved = json.loads((database_dir(str(tmp_path), target) / WINOGRAD_FILE).read_text())
    assert made == saved and list(saved) == [key]
    assert load_choices(str(tmp_path), target) == {key: saved[key]["choice"]}
    return saved[key]


def test_tuning_takes_a_variant_only_where_it_wins_again_at_the_models_threads(tmp_path):
    """One thread measures direct (the rule's pick here), F(2,3), F(4,3) in that order: F(2,3)
    fastest. It is confirmed beside direct at the model's threads (alternating rounds: direct,
    F(2,3)); chosen when it wins there, else direct stays; a conv with a record is not tuned again."""
    from core.compiler.tuning.winograd_choice import tune_choices

    target = _target("znver4", None)
    one_thread = lambda position: [1e-3, 0.5e-3, 2e-3][position]
    wins = _tune(tmp_path / "wins", target, one_thread, lambda position: 1e-3 if position % 2 == 0 else 0.6e-3)
    assert wins["choice"] == "winograd2" and wins["rule"] == "direct"
    assert wins["ms"] == {"direct": 1.0, "winograd2": 0.5, "winograd4": 2.0} and set(wins["confirmed"]) == {"direct", "winograd2"}
    loses = _tune(tmp_path / "loses", target, one_thread, lambda position: 1e-3 if position % 2 == 0 else 1.2e-3)
    assert loses["choice"] == "direct"
    again = tune_choices(_before_legalize(_conv(7), target), target, str(tmp_path / "wins"), deadline=float("inf"),
                         builder=_Builder(), runner=_Runner(lambda p: pytest.fail("measured again")), confirm_runner=_Runner(one_thread))
    assert again == {}


def test_tuning_says_which_conv_of_how_many_and_a_cancel_before_the_confirmation_files_nothing(tmp_path):
    """Like the other tuning steps, the choice reports each conv as it starts (the Tune box shows
    it) and stops after the measuring round in progress: a conv whose one-thread round ran but
    whose confirmation did not files no record (it is redone next time), and no conv starts after."""
    from core.compiler.tuning.db import database_dir
    from core.compiler.tuning.winograd_choice import WINOGRAD_FILE, tune_choices

    target = _target("znver4", None)
    mod = _before_legalize(_conv(7), target)
    key, _call = _only_conv(mod)
    heard, asked = [], []

    def cancel():
        asked.append(len(heard))
        return bool(heard)  # cancelled once the first conv has started

    made = tune_choices(mod, target, str(tmp_path), deadline=float("inf"), builder=_Builder(),
                        runner=_Runner(lambda position: [1e-3, 0.5e-3, 2e-3][position]),
                        confirm_runner=_Runner(lambda position: pytest.fail("confirmed after cancel")), cancel=cancel,
                        progress=lambda fraction, message: heard.append((fraction, message)))
    assert heard == [(0.0, f"conv 1 of 1: {key}")] and asked == [0, 1]
    assert made == {} and not (database_dir(str(tmp_path), target) / WINOGRAD_FILE).exists()


def test_avx2_winograd_with_a_partial_last_tile_is_built_and_measured(tmp_path):
    """AVX2 code at 13x13: F(2,3)'s 49 tiles take 5 x 2 register tiles, the last one partial (a
    GEMM block of its own, loop_partition). Wrapped in a new s_tir.Schedule for measuring, that
    kernel failed TVM's well-formedness check, and `compile --tune-minutes` stopped at the
    Winograd choice step on SqueezeNet and ResNet-50 as AVX2 code. Built and run for real here
    (the local builder and one-thread runner): every legal choice gets a time."""
    from core.compiler.schedules.cpu_winograd import gemm_tile
    from core.compiler.tuning.runners import local_builder, local_runner
    from core.compiler.tuning.winograd_choice import legal_choices, tune_choices

    target = _target("znver4", ["-avx512f"])
    mod = _before_legalize(_conv(13), target)
    key, call = _only_conv(mod)
    assert "winograd2" in legal_choices(call)
    assert gemm_tile(49, 4, 16) == (5, 2)  # 32 channels in blocks of 8: the partial last tile
    runner = local_runner(1)
    made = tune_choices(mod, target, str(tmp_path), deadline=float("inf"), builder=local_builder(), runner=runner,
                        confirm_runner=runner)
    assert set(made[key]["ms"]) == set(legal_choices(call)), made
    assert all(ms is not None and ms > 0 for ms in made[key]["ms"].values()), made


def test_metaschedule_measures_the_default_of_avx2_winograd_with_a_partial_last_tile(tmp_path):
    """The same kernel as a MetaSchedule task (compile --tune-trials): its default schedule gets a
    time to compete with (it was None, the search's records then applied unconfirmed)."""
    import tvm

    from core.compiler.tuning.search import _measure_default
    from core.compiler.tuning.winograd_choice import winograd_choice_pass

    target = _target("znver4", ["-avx512f"])
    mod = _before_legalize(_conv(13), target)
    key, _call = _only_conv(mod)
    _write(tmp_path, target, {key: {"choice": "winograd2"}})
    funcs = _prim_funcs(_fused(winograd_choice_pass(target, str(tmp_path))(mod), target))
    kernel = funcs["fused_conv2d_winograd2_NCHWc_add_relu"].with_attr("global_symbol", "main")
    secs = _measure_default(tvm.IRModule({"main": kernel}), target, _Builder(), _Runner(lambda position: 1e-3))
    assert secs == 1e-3


@pytest.mark.parametrize("mcpu,mattr", TARGETS)
def test_winograd_template_candidates_apply_default_first(mcpu, mattr):
    """The template search's space for a Winograd kernel: the default tile first, GEMM tiles that
    divide it and two-vector ones that do not, and the padding folded once; every config schedules the kernel, the first as the
    default schedule does."""
    import tvm_ffi

    from core.compiler.schedules import default_schedule
    from core.compiler.schedules.cpu_winograd import (
        FOLD_PAD,
        PAIR_TAIL_TILES,
        Conv2dWinogradNCHWc,
        gemm_tile,
        max_accumulators,
    )
    from core.compiler.tuning.db import _template_rules

    target = _target(mcpu, mattr)
    funcs = _prim_funcs(_fused(_before_legalize(_conv(16), target), target))
    func = next(f for n, f in funcs.items() if "winograd4" in n)
    rule = Conv2dWinogradNCHWc()
    assert next(r for r in _template_rules() if r.candidates(func, target)).name == rule.name
    configs = rule.candidates(func, target)
    assert configs[0] == dict(zip(("p", "oc2"), gemm_tile(16, 32 // (16 if mattr is None else 8), 32 if mattr is None else 16)))
    assert len({json.dumps(c, sort_keys=True) for c in configs}) == len(configs) > 3
    assert [c for c in configs if "fold_pad" in c] == [{**configs[0], "fold_pad": not FOLD_PAD}]
    registers, chunks = (32, 2) if mattr is None else (16, 4)
    # tiles that divide the 16 tiles, and two-vector ones that do not (the last tile partial)
    assert all((16 % c["p"] == 0 or c["oc2"] == 2) and chunks % c["oc2"] == 0 and c["p"] * c["oc2"] + c["oc2"] < registers for c in configs), configs
    assert any(16 % c["p"] for c in configs)
    assert max_accumulators(registers) <= max(c["p"] * c["oc2"] for c in configs) <= max(max_accumulators(registers), 2 * PAIR_TAIL_TILES)
    for config in configs:
        assert rule.apply(func, target, config) is not None, config
    default, _ = default_schedule(func, target)
    assert tvm_ffi.structural_equal(rule.apply(func, target, configs[0]).mod["main"].without_attr("tirx.is_scheduled"),
                                    default.without_attr("tirx.is_scheduled"))


@pytest.mark.isa
@pytest.mark.parametrize("fold", [True, False])
def test_chosen_winograd_with_folded_padding_matches_onnxruntime(tmp_path, monkeypatch, fold):
    """A 7x7 conv whose record chooses F(4,3) (tiles cover 8x8: a padded edge and a dropped extra
    row and column), compiled for this host with the database: with the padding folded into the
    input transform the kernel has no pad copy (else it has one), and both match onnxruntime."""
    import onnxruntime as ort

    from core.compiler.compile import compile_model
    from core.compiler.schedules import cpu_winograd
    from core.compiler.target import make_target

    monkeypatch.setattr(cpu_winograd, "FOLD_PAD", fold)
    model = _conv(7)
    path = tmp_path / "conv.onnx"
    onnx.save(model, str(path))
    target = make_target("cpu")
    key, _call = _only_conv(_before_legalize(model, target))
    _write(tmp_path / "db", target, {key: {"choice": "winograd4"}})
    art = compile_model(str(path), "cpu", verify=True, tune_db=str(tmp_path / "db"))
    assert art.manifest.tuning.winograd_choices_from_database == 1  # the rule leaves a 7x7 map direct
    funcs = _prim_funcs(art.scheduled_mod)
    kernel = next(f for n, f in funcs.items() if "winograd4" in n)
    assert ("winograd_pad" in kernel.script()) is not fold
    x = np.random.default_rng(4).standard_normal((1, 32, 7, 7)).astype(np.float32)
    ref = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_allclose(art.run({"x": x})[0], ref, rtol=1e-4, atol=1e-4)


def test_gemm_tile_pairs_channel_vectors_with_a_partial_last_tile_where_no_divisor_does():
    """With AVX2's 16 registers, 7 x 7 = 49 tiles have no divisor tile of two channel vectors
    (7 x 2 would spill): PAIR_TAIL_TILES x 2, the last tile partial; elsewhere as before."""
    from core.compiler.schedules.cpu_winograd import PAIR_TAIL_TILES, gemm_tile

    assert gemm_tile(49, 32, 16) == (PAIR_TAIL_TILES, 2) == (5, 2)
    assert gemm_tile(49, 31, 16) == (7, 1)  # an odd count of channel blocks: one vector, as before
    assert gemm_tile(196, 32, 16) == (4, 2)  # 4 divides 196
    assert gemm_tile(16, 4, 16) == (4, 2)
    assert gemm_tile(49, 16, 32) == (7, 2)  # AVX-512: 14 of 32 registers


@pytest.mark.isa
def test_every_winograd_candidate_computes_what_the_default_computes():
    """A 14x14 conv of 64 channels by F(2,3), 7 x 7 = 49 tiles: each GEMM tile the template search
    would measure, those whose last tile is partial among them (with AVX2 code, the default),
    builds for this host and computes what the first does."""
    from core.compiler.schedules.cpu_winograd import Conv2dWinogradNCHWc
    from core.compiler.target import make_target

    target = make_target("cpu")
    funcs = _prim_funcs(_fused(_before_legalize(_conv(14, channels=64), target), target))
    func = next(f for n, f in funcs.items() if "winograd2" in n)
    rule = Conv2dWinogradNCHWc()
    configs = rule.candidates(func, target)
    assert any(49 % c["p"] for c in configs), configs
    assert configs_compute_the_same(rule, func, target, configs) == len(configs)
