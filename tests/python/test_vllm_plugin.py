"""oink's vLLM plugin (python/oink/vllm_plugin.py) against a real vLLM; see docs/vllm.md for the
version these tests pin and for what they cannot cover on a CPU-only machine.

Skipped where vLLM is not importable. On a machine without a Hopper+ GPU, `oink_cuda` is (rightly)
unsupported, so the tests that dispatch force its `supported` flag on and run oink's CPU kernels
through vLLM's real dispatch, priority and lowering code.
"""

import importlib.metadata
import inspect
import logging
import os
import subprocess
import sys
import textwrap

import pytest
import torch

vllm = pytest.importorskip("vllm")
ir = pytest.importorskip("vllm.ir")

from vllm.ir.op import IrOp  # noqa: E402

from oink import vllm_plugin  # noqa: E402

OPS = ("rms_norm", "fused_add_rms_norm")
P = vllm_plugin.PROVIDER
N = 64


@pytest.fixture(autouse=True)
def registered():
    vllm_plugin.register()


@pytest.fixture
def supported(monkeypatch):
    """Pretend this machine is Hopper+: oink_cuda then runs oink's CPU kernels on CPU tensors."""
    monkeypatch.setattr(vllm_plugin.SUPPORTED, "_value", True)


@pytest.fixture
def no_env(monkeypatch):
    for name in vllm_plugin.ENV_VARS:
        monkeypatch.delenv(name, raising=False)


def _oink_entry_point():
    eps = importlib.metadata.entry_points(group="vllm.general_plugins", name="oink")
    if not eps:
        pytest.skip("oink is not installed with its vllm.general_plugins entry point")
    return next(iter(eps))


def _vllm_config(**kwargs):
    from vllm.config import DeviceConfig, VllmConfig

    if not _platform().device_type:  # no accelerator: vLLM cannot infer the device type
        kwargs["device_config"] = DeviceConfig(device="cpu")
    return VllmConfig(**kwargs)


# --- discovery and registration ---------------------------------------------------------------
def test_entry_point_metadata():
    ep = _oink_entry_point()
    assert ep.value == "oink.vllm_plugin:register"
    assert ep.load() is vllm_plugin.register


def test_load_general_plugins_discovers_oink():
    _oink_entry_point()
    from vllm.plugins import DEFAULT_PLUGINS_GROUP, load_plugins_by_group

    assert load_plugins_by_group(DEFAULT_PLUGINS_GROUP)["oink"] is vllm_plugin.register


def test_load_general_plugins_registers_in_a_fresh_process():
    _oink_entry_point()
    # vLLM up to 0.26 configures logging on import, later releases when an engine starts: the
    # child configures it as a served engine has, so that the plugin's INFO line is seen.
    code = textwrap.dedent(f"""
        import logging
        logging.basicConfig(level=logging.INFO)
        import torch
        from vllm.plugins import load_general_plugins
        load_general_plugins()
        load_general_plugins()
        from vllm.ir.op import IrOp
        assert all("{P}" in IrOp.registry[op].impls for op in {OPS!r})
        assert not torch.cuda.is_initialized()
        print("ok")
    """)
    env = {k: v for k, v in os.environ.items() if k != "VLLM_PLUGINS"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert out.returncode == 0 and out.stdout.strip().endswith("ok"), out.stderr[-3000:]
    assert "oink: registered vLLM IR provider 'oink_cuda'" in out.stdout + out.stderr


def test_vllms_builtin_oink_provider_runs_oink():
    """vLLM ships its own `oink` provider (vllm/kernels/oink_ops.py), enabled on compute
    capability >= 10.0 where torch.ops.oink has the ops it looks for: on such a GPU, vLLM calls
    oink's kernels without oink's plugin. In a fresh process, the capability check answers yes
    before vLLM's kernels load, and the provider runs oink's CPU kernels on CPU tensors."""
    code = textwrap.dedent("""
        import importlib.util, torch, oink
        from vllm.platforms import current_platform
        type(current_platform).has_device_capability = classmethod(lambda cls, *a, **k: True)
        if importlib.util.find_spec("vllm.kernels.oink_ops") is None:
            print("absent")
            raise SystemExit(0)
        import vllm.kernels.oink_ops
        from vllm.ir.op import IrOp
        rms, fused = IrOp.registry["rms_norm"], IrOp.registry["fused_add_rms_norm"]
        assert rms.impls["oink"].supported and fused.impls["oink"].supported
        g = torch.Generator().manual_seed(0)
        x = torch.randn(5, 64, generator=g).to(torch.bfloat16)
        r = torch.randn(5, 64, generator=g).to(torch.bfloat16)
        w = (torch.rand(64, generator=g) + 0.5).to(torch.bfloat16)
        assert torch.equal(rms.impls["oink"].impl_fn(x, w, 1e-6), oink.rmsnorm(x, w, 1e-6))
        x1, r1, x2, r2 = x.clone(), r.clone(), x.clone(), r.clone()
        fused.impls["oink"].impl_fn(x1, r1, w, 1e-6)
        oink.fused_add_rms_norm(x2, r2, w, 1e-6)
        assert torch.equal(x1, x2) and torch.equal(r1, r2)
        print("ok")
    """)
    env = {k: v for k, v in os.environ.items() if k != "VLLM_PLUGINS"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert out.returncode == 0, out.stderr[-3000:]
    if out.stdout.strip().endswith("absent"):
        pytest.skip(f"vLLM {vllm.__version__} has no built-in oink provider")
    assert out.stdout.strip().endswith("ok"), out.stdout[-2000:]


def test_register_twice_is_harmless():
    impls = {op: IrOp.registry[op].impls[P] for op in OPS}
    getter = type(_platform()).get_default_ir_op_priority
    vllm_plugin.register()
    vllm_plugin.register()
    assert {op: IrOp.registry[op].impls[P] for op in OPS} == impls
    assert type(_platform()).get_default_ir_op_priority == getter
    assert not torch.cuda.is_initialized()


def test_register_never_raises(monkeypatch, caplog):
    def fail():
        raise RuntimeError("boom")

    monkeypatch.setattr(vllm_plugin, "_registered", None)
    monkeypatch.setattr(vllm_plugin, "_register", fail)
    vllm_plugin.logger.addHandler(caplog.handler)
    try:
        with caplog.at_level(logging.WARNING, logger=vllm_plugin.logger.name):
            assert vllm_plugin.register() is None
    finally:
        vllm_plugin.logger.removeHandler(caplog.handler)
    assert "not registered: RuntimeError: boom" in caplog.text
    assert vllm_plugin._registered is None  # a later call tries again


def _platform():
    from vllm.platforms import current_platform

    return current_platform


@pytest.mark.parametrize("op", OPS)
def test_providers_in_ir_registry(op):
    ir_op = IrOp.registry[op]
    impl = ir_op.impls[P]
    assert impl.inplace == (op == "fused_add_rms_norm")
    assert inspect.signature(impl.impl_fn) == ir_op._py_signature  # names, defaults, types
    expected = _platform().is_cuda() and _platform().has_device_capability(90)
    assert bool(impl.supported) == expected
    assert (P in ir_op.supported_providers()) == expected


def test_supported_is_lazy():
    lazy = vllm_plugin._CudaCapabilityAtLeast(90)
    assert "not checked yet" in repr(lazy)
    bool(lazy)
    assert "not checked yet" not in repr(lazy)


# --- supports_args ------------------------------------------------------------------------------
bf16, f16, f32 = torch.bfloat16, torch.float16, torch.float32


def _t(shape, dtype=bf16, strides=None, device="cpu"):
    if strides is None:
        return torch.empty(shape, dtype=dtype, device=device)
    return torch.empty_strided(shape, strides, dtype=dtype, device=device)


# (name, make(T) -> args, accepted, oink itself rejects it: True, False or "T>1": only with more
# than one row). Every case is a function of the token count T, so each answer can be checked to
# be the same for every batch size.
E = 1e-6
RMS_CASES = [
    ("bf16", lambda T: (_t((T, N)), _t((N,)), E), True, False),
    ("f16", lambda T: (_t((T, N), f16), _t((N,), f16), E), True, False),
    ("f32", lambda T: (_t((T, N), f32), _t((N,), f32), E), True, False),
    ("bf16 x, f32 weight", lambda T: (_t((T, N)), _t((N,), f32), E), True, False),
    ("f16 x, f32 weight", lambda T: (_t((T, N), f16), _t((N,), f32), E), True, False),
    ("no weight", lambda T: (_t((T, N)), None, E), True, False),
    ("3-d", lambda T: (_t((T, 4, N)), _t((N,)), E), True, False),
    ("padded rows", lambda T: (_t((T, N), strides=(N + 8, 1)), _t((N,)), E), True, False),
    ("1-d", lambda T: (_t((N,)), _t((N,)), E), True, False),
    ("variance_size", lambda T: (_t((T, N)), _t((N,)), E, N // 2), False, False),
    # float64: oink runs it on the CPU only (gradcheck); the plugin serves CUDA and declines it.
    ("f64", lambda T: (_t((T, N), torch.float64), None, E), False, False),
    ("f16 weight, bf16 x", lambda T: (_t((T, N)), _t((N,), f16), E), True, False),
    ("bf16 weight, f32 x", lambda T: (_t((T, N), f32), _t((N,)), E), True, False),
    ("f64 weight", lambda T: (_t((T, N)), _t((N,), torch.float64), E), False, False),
    ("weight too short", lambda T: (_t((T, N)), _t((N - 1,)), E), False, True),
    ("strided weight", lambda T: (_t((T, N)), _t((N,), strides=(2,)), E), False, True),
    ("x last dim strided", lambda T: (_t((T, N), strides=(1, T + 1)), None, E), False, True),
    ("heads of a qkv row", lambda T: (_t((T, 4, 16), strides=(192, 16, 1)), None, E), True, False),
    ("transposed heads", lambda T: (_t((T, 4, 16), strides=(16, 131072, 1)), None, E), True, False),
    ("overlapping rows", lambda T: (_t((T, N), strides=(N // 2, 1)), None, E), False, "T>1"),
    ("weight elsewhere", lambda T: (_t((T, N)), _t((N,), device="meta"), E), False, False),
]  # fmt: skip

FUSED_CASES = [
    ("bf16", lambda T: (_t((T, N)), _t((T, N)), _t((N,)), E), True, False),
    ("f32 weight", lambda T: (_t((T, N), f16), _t((T, N), f16), _t((N,), f32), E), True, False),
    ("padded x", lambda T: (_t((T, N), strides=(2 * N, 1)), _t((T, N)), _t((N,)), E), True, False),
    ("3-d", lambda T: (_t((T, 2, N)), _t((T, 2, N)), _t((N,)), E), True, False),
    ("no weight", lambda T: (_t((T, N)), _t((T, N)), None, E), True, False),
    ("x head view, residual transposed",
     lambda T: (_t((T, 4, 16), strides=(192, 16, 1)), _t((T, 4, 16), strides=(16, 16 * 8192, 1)),
                _t((16,)), E), True, False),
    ("variance_size", lambda T: (_t((T, N)), _t((T, N)), _t((N,)), E, 8), False, False),
    ("residual dtype", lambda T: (_t((T, N)), _t((T, N), f16), _t((N,)), E), False, True),
    ("residual shape", lambda T: (_t((T, N)), _t((T, 1, N)), _t((N,)), E), False, True),
    ("residual strided", lambda T: (_t((T, N)), _t((T, N), strides=(1, T + 1)), _t((N,)), E),
     False, True),
    ("f16 weight, f32 x", lambda T: (_t((T, N), f32), _t((T, N), f32), _t((N,), f16), E),
     True, False),
    ("weight dtype", lambda T: (_t((T, N), f32), _t((T, N), f32), _t((N,), torch.int32), E),
     False, True),
    ("residual elsewhere", lambda T: (_t((T, N)), _t((T, N), device="meta"), _t((N,)), E),
     False, False),
    ("weight elsewhere", lambda T: (_t((T, N)), _t((T, N)), _t((N,), device="meta"), E),
     False, False),
]  # fmt: skip

SUPPORTS = {
    "rms_norm": vllm_plugin.rms_norm_supported,
    "fused_add_rms_norm": vllm_plugin.fused_add_rms_norm_supported,
}
CASES = [("rms_norm", *c) for c in RMS_CASES] + [("fused_add_rms_norm", *c) for c in FUSED_CASES]


@pytest.mark.parametrize("op,name,make,accepted,oink_rejects", CASES, ids=[c[1] for c in CASES])
def test_supports_args_on_fake_tensors(op, name, make, accepted, oink_rejects):
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode(allow_non_fake_inputs=False):
        for T in (1, 2, 3, 17, 4096):
            assert SUPPORTS[op](*make(T)) == accepted, T
    # The IR op asks through the impl, as vLLM does when it dispatches or lowers.
    with FakeTensorMode():
        assert IrOp.registry[op].impls[P].supports_args(*make(5)) == accepted


@pytest.mark.parametrize("op,name,make,accepted,oink_rejects", CASES, ids=[c[1] for c in CASES])
def test_supports_args_agrees_with_oink(op, name, make, accepted, oink_rejects):
    """Accepted: oink runs them. Rejected because of oink's contract: oink raises on them."""
    for T in (1, 3):
        args = [a.normal_() if isinstance(a, torch.Tensor) and a.dtype.is_floating_point
                else a for a in make(T)]  # fmt: skip
        call = torch.ops.oink.rmsnorm if op == "rms_norm" else torch.ops.oink.fused_add_rms_norm
        if accepted:
            call(*args[:4] if op == "fused_add_rms_norm" else args[:3])
        elif oink_rejects is True or (oink_rejects == "T>1" and T > 1):
            with pytest.raises((ValueError, RuntimeError)):
                call(*args[:4] if op == "fused_add_rms_norm" else args[:3])


@pytest.mark.parametrize("op", OPS)
def test_supports_args_adds_no_guard_on_the_token_count(op):
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.symbolic_shapes import (
        DimDynamic,
        ShapeEnv,
        StatelessSymbolicContext,
    )

    shape_env = ShapeEnv()
    mode = FakeTensorMode(shape_env=shape_env)
    dynamic = StatelessSymbolicContext(dynamic_sizes=[DimDynamic.DYNAMIC, DimDynamic.STATIC])
    x = mode.from_tensor(torch.empty(8, N, dtype=bf16), symbolic_context=dynamic)
    static = StatelessSymbolicContext(dynamic_sizes=[DimDynamic.STATIC])
    w = mode.from_tensor(torch.empty(N, dtype=bf16), symbolic_context=static)
    assert isinstance(x.shape[0], torch.SymInt)
    with mode:
        r = torch.empty_like(x)  # the residual shares x's token count, as in vLLM's graphs
        args = (x, w, 1e-6) if op == "rms_norm" else (x, r, w, 1e-6)
        assert SUPPORTS[op](*args)
    assert not shape_env.guards


# --- dispatch through vLLM's IR ops on CPU tensors ---------------------------------------------
def _inputs(T, dtype, wdtype, layout):
    g = torch.Generator().manual_seed(T)
    if layout == "padded":
        x = torch.randn(T, N + 16, generator=g).to(dtype)[:, :N]
    elif layout == "3d":
        x = torch.randn(T, 3, N, generator=g).to(dtype)
    else:
        x = torch.randn(T, N, generator=g).to(dtype)
    r = torch.randn(x.shape, generator=g).to(dtype)
    w = (1 + 0.5 * torch.randn(N, generator=g)).to(wdtype)
    return x, r, w


DISPATCH = [(dt, wdt, layout) for dt in (f16, bf16, f32) for wdt in (dt, f32)
            for layout in ("contiguous", "padded", "3d")]  # fmt: skip
DISPATCH = list(dict.fromkeys(DISPATCH))


@pytest.mark.parametrize("torch_wrap", [True, False], ids=["torch_op", "direct"])
@pytest.mark.parametrize("dtype,wdtype,layout", DISPATCH)
def test_prioritized_rms_norm_dispatches_to_oink(supported, dtype, wdtype, layout, torch_wrap):
    op = ir.ops.rms_norm
    x, _, w = _inputs(37, dtype, wdtype, layout)
    native = op.impls["native"].impl_fn(x, w, 1e-5)
    with op.set_priority([P, "native"]), ir.enable_torch_wrap(torch_wrap):
        assert op.dispatch(x, w, 1e-5).provider == P
        assert op.dispatch(x, w, 1e-5, N // 2).provider == "native"
        y = op(x, w, 1e-5)
    assert torch.equal(y, torch.ops.oink.rmsnorm(x, w, 1e-5))  # it ran oink
    torch.testing.assert_close(y, native, **op.get_tolerance(dtype))


@pytest.mark.parametrize("torch_wrap", [True, False], ids=["torch_op", "direct"])
@pytest.mark.parametrize("dtype,wdtype,layout", DISPATCH)
def test_prioritized_fused_add_rms_norm_dispatches_to_oink(
    supported, dtype, wdtype, layout, torch_wrap
):
    op = ir.ops.fused_add_rms_norm
    x, r, w = _inputs(37, dtype, wdtype, layout)
    x0, r0 = x.clone(), r.clone()
    native_y, native_r = op.impls["native"].impl_fn(x, r, w, 1e-5)
    oink_x, oink_r = x.clone(), r.clone()
    torch.ops.oink.fused_add_rms_norm(oink_x, oink_r, w, 1e-5)
    with op.set_priority([P, "native"]), ir.enable_torch_wrap(torch_wrap):
        assert op.dispatch(x, r, w, 1e-5).provider == P
        assert op.dispatch(x, r, None, 1e-5).provider == P  # weightless norms too
        y, new_r = op(x, r, w, 1e-5)  # functional: inputs untouched
        assert torch.equal(x, x0) and torch.equal(r, r0)
        y2, new_r2 = op.maybe_inplace(x, r, w, 1e-5)  # in place
    assert torch.equal(y, oink_x) and torch.equal(new_r, oink_r)
    assert y2.data_ptr() == x.data_ptr() and torch.equal(x, oink_x) and torch.equal(r, oink_r)
    torch.testing.assert_close(y, native_y, **op.get_tolerance(dtype))
    torch.testing.assert_close(new_r, native_r, rtol=0, atol=0)


def test_explicit_native_priority_stays_native(supported):
    x, r, w = _inputs(5, bf16, bf16, "contiguous")
    with ir.ops.rms_norm.set_priority(["native", P]):
        assert ir.ops.rms_norm.dispatch(x, w, 1e-6).provider == "native"
    with ir.ops.fused_add_rms_norm.set_priority(["native", P]):
        assert ir.ops.fused_add_rms_norm.dispatch(x, r, w, 1e-6).provider == "native"


def test_unsupported_provider_is_skipped(monkeypatch):
    monkeypatch.setattr(vllm_plugin.SUPPORTED, "_value", False)
    x, _, w = _inputs(5, bf16, bf16, "contiguous")
    with ir.ops.rms_norm.set_priority([P, "native"]):
        assert ir.ops.rms_norm.get_priority() == ["native"]
        assert ir.ops.rms_norm.dispatch(x, w, 1e-6).provider == "native"


def test_lowering_pass_selects_oink(supported):
    """vLLM's own IR lowering (the torch.compile path) on symbolic shapes."""
    from torch.fx.experimental.proxy_tensor import make_fx
    from vllm.compilation.passes.ir.lowering_pass import VllmIRLoweringPass
    from vllm.config import set_current_vllm_config

    def f(x, r, w):
        y = ir.ops.rms_norm(x, w, 1e-6)
        return ir.ops.fused_add_rms_norm(y, r, w, 1e-6)

    x, r, w = _inputs(8, bf16, bf16, "contiguous")
    gm = make_fx(f, tracing_mode="symbolic")(x, r, w)
    config = _vllm_config()
    with (
        set_current_vllm_config(config),
        ir.ops.rms_norm.set_priority([P, "native"]),
        ir.ops.fused_add_rms_norm.set_priority([P, "native"]),
    ):
        lowering = VllmIRLoweringPass(config)
        lowering(gm.graph)
    assert {op: set(v.values()) for op, v in lowering.selected_impls.items()} == {
        "rms_norm": {P},
        "fused_add_rms_norm": {P},
    }
    gm.recompile()
    targets = {str(n.target) for n in gm.graph.nodes if n.op == "call_function"}
    assert {"oink.rmsnorm.default", "oink.fused_add_rms_norm.default"} <= targets
    assert not any(t.startswith("vllm_ir.") for t in targets)
    x, r, _ = _inputs(19, bf16, bf16, "contiguous")
    expected_x, expected_r = torch.ops.oink.rmsnorm(x, w, 1e-6), r.clone()
    torch.ops.oink.fused_add_rms_norm(expected_x, expected_r, w, 1e-6)
    y, new_r = gm(x, r, w)
    assert torch.equal(y, expected_x) and torch.equal(new_r, expected_r)


# --- priority: environment variables and explicit lists ------------------------------------------
def _platform_defaults(user=None):
    """The priority vLLM's config ends with: the user's lists, then the platform's defaults."""
    from vllm.config import KernelConfig
    from vllm.config.kernel import IrOpPriorityConfig

    kernel = KernelConfig(ir_op_priority=IrOpPriorityConfig(**(user or {})))
    return _vllm_config(kernel_config=kernel).kernel_config.ir_op_priority


@pytest.mark.parametrize("value", ["1", "true", "yes", "on", "TRUE", "On"])
@pytest.mark.parametrize("var", vllm_plugin.ENV_VARS)
def test_env_places_oink_first(supported, no_env, monkeypatch, var, value):
    monkeypatch.setenv(var, value)
    priority = _platform_defaults()
    assert priority.rms_norm[0] == P and priority.fused_add_rms_norm[0] == P
    assert priority.rms_norm.count(P) == 1
    # An explicit list still comes first; the platform defaults are appended after it.
    priority = _platform_defaults({"rms_norm": ["native"]})
    assert priority.rms_norm[0] == "native" and priority.fused_add_rms_norm[0] == P


@pytest.mark.parametrize("value", ["", "0", "false", "no", "off", "2"])
def test_env_unset_or_falsy_leaves_priority_alone(supported, no_env, monkeypatch, value):
    for var in vllm_plugin.ENV_VARS:
        monkeypatch.setenv(var, value)
    priority = _platform_defaults()
    assert P not in priority.rms_norm and P not in priority.fused_add_rms_norm
    priority = _platform_defaults({"rms_norm": [P], "fused_add_rms_norm": f"{P},native"})
    assert priority.rms_norm[0] == P and priority.fused_add_rms_norm[:2] == [P, "native"]


def test_env_on_unsupported_machine_leaves_priority_alone(no_env, monkeypatch):
    monkeypatch.setattr(vllm_plugin.SUPPORTED, "_value", False)
    monkeypatch.setenv("VLLM_USE_OINK_OPS", "1")
    priority = _platform_defaults()
    assert P not in priority.rms_norm and P not in priority.fused_add_rms_norm


def test_env_priority_is_what_workers_install(supported, no_env, monkeypatch):
    monkeypatch.setenv("VLLM_USE_OINK_RMSNORM", "1")
    priority = _vllm_config().kernel_config.ir_op_priority
    with priority.set_priority():  # workers call priority.set_default(): the same lists
        assert ir.ops.rms_norm.get_priority()[0] == P
        assert ir.ops.fused_add_rms_norm.get_priority()[0] == P


# --- the CustomOp fallback (what vLLM without vllm.ir gets) --------------------------------------
@pytest.fixture
def custom_op_fallback():
    from vllm.model_executor.custom_op import op_registry_oot

    assert "RMSNorm" not in op_registry_oot
    try:
        assert vllm_plugin._register_custom_op()
        assert vllm_plugin._register_custom_op()  # idempotent
        yield op_registry_oot["RMSNorm"]
    finally:
        op_registry_oot.pop("RMSNorm", None)


@pytest.mark.parametrize("custom_ops", [["none", "+rms_norm"], ["none"]])
def test_custom_op_fallback(supported, custom_op_fallback, custom_ops):
    from vllm.config import CompilationConfig, set_current_vllm_config
    from vllm.model_executor.layers.layernorm import RMSNorm

    config = _vllm_config(compilation_config=CompilationConfig(custom_ops=custom_ops))
    with set_current_vllm_config(config):
        layer = RMSNorm(N, eps=1e-6, dtype=bf16)
    assert type(layer) is custom_op_fallback and custom_op_fallback.name == "rms_norm"
    # `+rms_norm` is the switch: without it vLLM never calls forward_cuda.
    assert (layer._forward_method.__name__ != "forward_native") == ("+rms_norm" in custom_ops)
    with torch.no_grad():
        layer.weight.copy_(1 + torch.randn(N))
    x, r, _ = _inputs(9, bf16, bf16, "contiguous")
    assert torch.equal(layer.forward_cuda(x), torch.ops.oink.rmsnorm(x, layer.weight.data, 1e-6))
    ex, er = x.clone(), r.clone()
    torch.ops.oink.fused_add_rms_norm(ex, er, layer.weight.data, 1e-6)
    y, new_r = layer.forward_cuda(x, r)
    assert y is x and new_r is r and torch.equal(x, ex) and torch.equal(r, er)
