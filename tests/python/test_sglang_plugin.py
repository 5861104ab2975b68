"""oink's SGLang integration (python/oink/integrations/sglang.py) against a real SGLang.

Skipped where SGLang is not importable (tools/test.sh runs it in its own environment with the
pinned SGLang). On a machine without a Hopper+ GPU oink is (rightly) not used for SGLang's
tensors, so the tests that route force the device check on (`SUPPORTED.forced`) and run oink's CPU
kernels through SGLang's own RMSNorm.forward_cuda, hook and dispatch code. SGLang's CUDA kernels
(sgl_kernel) are not loaded on a CPU-only machine: where a call is handed back to SGLang, the
tests put spies in their place, so that the path SGLang takes is the one observed.
"""

import importlib.metadata
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

sglang = pytest.importorskip("sglang")
layernorm = pytest.importorskip("sglang.srt.layers.layernorm")

from sglang.srt.plugins.hook_registry import HookRegistry  # noqa: E402

import oink  # noqa: E402
import oink.integrations.sglang as plugin  # noqa: E402

RMSNorm = layernorm.RMSNorm
GROUP = "sglang.srt.plugins"
ROOT = Path(__file__).resolve().parents[2]
N = 64
EPS = 1e-6
bf16, f16, f32 = torch.bfloat16, torch.float16, torch.float32
TOL = {bf16: dict(rtol=1.6e-2, atol=1e-2), f16: dict(rtol=1e-3, atol=1e-3)}


@pytest.fixture(autouse=True)
def clean(monkeypatch):
    """Each test starts with routing off and leaves SGLang's classes and registry as it found
    them."""
    for name in plugin.ENV_VARS:
        monkeypatch.delenv(name, raising=False)
    original = RMSNorm.__dict__["forward_cuda"]
    hooks = {k: list(v) for k, v in HookRegistry._hooks.items()}
    patched = set(HookRegistry._patched)
    state = {k: getattr(plugin, k) for k in ("_enabled", "_registered", "_installed")}
    yield
    plugin.disable()
    RMSNorm.forward_cuda = original
    HookRegistry._hooks.clear()
    HookRegistry._hooks.update(hooks)
    HookRegistry._patched.clear()
    HookRegistry._patched.update(patched)
    for k, v in state.items():
        setattr(plugin, k, v)
    for name in plugin.ENV_VARS:
        os.environ.pop(name, None)


@pytest.fixture
def supported(monkeypatch):
    """Pretend this machine has a Hopper+ GPU: the hook then runs oink's CPU kernels."""
    monkeypatch.setattr(plugin.SUPPORTED, "forced", True)


@pytest.fixture
def calls(monkeypatch):
    """Counts the calls of oink (through the plugin) and of SGLang's own CUDA-path kernels, with
    spies that compute SGLang's result on the CPU standing in for sgl_kernel's."""
    counts = {"oink": 0, "sglang": 0, "batch_invariant": 0}

    def oink_rms(*a, _f=plugin._rmsnorm):
        counts["oink"] += 1
        return _f(*a)

    def oink_fused(*a, _f=plugin._fused_add_rms_norm):
        counts["oink"] += 1
        return _f(*a)

    def sgl_rmsnorm(x, weight, eps):
        counts["sglang"] += 1
        return _reference(x, weight, eps)

    def sgl_fused_add_rmsnorm(x, residual, weight, eps):
        counts["sglang"] += 1
        residual.add_(x)
        x.copy_(_reference(residual, weight, eps))

    def sgl_batch_invariant(x, weight, eps):
        counts["batch_invariant"] += 1
        return _reference(x, weight, eps)

    monkeypatch.setattr(plugin, "_rmsnorm", oink_rms)
    monkeypatch.setattr(plugin, "_fused_add_rms_norm", oink_fused)
    monkeypatch.setattr(layernorm, "rmsnorm", sgl_rmsnorm, raising=False)
    monkeypatch.setattr(layernorm, "fused_add_rmsnorm", sgl_fused_add_rmsnorm, raising=False)
    monkeypatch.setattr(layernorm, "rms_norm_batch_invariant", sgl_batch_invariant)
    # SGLang's HF-rounding kernels (cast_x_before_out_mul) are JIT-built on CUDA only: without
    # them SGLang's forward_cuda falls back to forward_native, as on a GPU they are missing on.
    monkeypatch.setattr(layernorm, "_jit_rmsnorm_hf_available", False, raising=False)
    monkeypatch.setattr(
        layernorm, "is_supported_jit_fused_add_rmsnorm_hidden_size", lambda n: False, raising=False
    )
    return counts


def _reference(x, weight, eps):
    y = torch.nn.functional.rms_norm(x.float(), (x.size(-1),), None, eps)
    return (y * weight.float() if weight is not None else y).to(x.dtype)


def _norm(dtype=bf16, weight_dtype=None, **kwargs):
    norm = RMSNorm(N, eps=EPS, weight_dtype=weight_dtype or dtype, **kwargs)
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        norm.weight.copy_(torch.rand(N, generator=g) + 0.5)
    return norm


def _randn(shape, dtype, seed):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(shape, generator=g) * 3).to(dtype)


# --- discovery and registration ---------------------------------------------------------------
def _declared_entry_point() -> str:
    """The value pyproject.toml declares for oink in SGLang's group."""
    tomllib = pytest.importorskip("tomllib")
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return project["entry-points"][GROUP]["oink"]


@pytest.fixture
def entry_point(tmp_path, monkeypatch):
    """oink's entry point in SGLang's group: the installed one, or, where oink runs from the
    source tree, pyproject.toml's declaration in a temporary dist-info on sys.path (and on the
    PYTHONPATH of child processes)."""
    if not importlib.metadata.entry_points(group=GROUP, name="oink"):
        info = tmp_path / "oink_kernels-0.0.0.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(
            "Metadata-Version: 2.1\nName: oink-kernels\nVersion: 0.0.0\n"
        )
        (info / "entry_points.txt").write_text(f"[{GROUP}]\noink = {_declared_entry_point()}\n")
        monkeypatch.syspath_prepend(str(tmp_path))
        path = os.environ.get("PYTHONPATH")
        monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(tmp_path), path])))
    (ep,) = importlib.metadata.entry_points(group=GROUP, name="oink")
    return ep


def test_entry_point_declared():
    assert _declared_entry_point() == "oink.integrations.sglang:register"


def test_entry_point_metadata(entry_point):
    assert entry_point.value == "oink.integrations.sglang:register"
    assert entry_point.load() is plugin.register


def test_sglang_discovers_oink(entry_point, monkeypatch):
    from sglang.srt.plugins import GENERAL_PLUGINS_GROUP, load_plugins_by_group

    monkeypatch.delenv("SGLANG_PLUGINS", raising=False)
    assert GENERAL_PLUGINS_GROUP == GROUP
    func, dist = load_plugins_by_group(GROUP)["oink"]
    assert func is plugin.register and dist == "oink-kernels"


_CHILD = """
    import logging, os, sys
    logging.basicConfig(level=logging.INFO)
    import torch
    from sglang.srt.plugins import load_plugins
    load_plugins()
    load_plugins()
    import oink.integrations.sglang as plugin
    from sglang.srt.layers.layernorm import RMSNorm
    from sglang.srt.plugins.hook_registry import HookRegistry
    hooked = plugin._hooked(RMSNorm.__dict__["forward_cuda"])
    assert not torch.cuda.is_initialized()
    hooks = [h for _, h, _ in HookRegistry._hooks.get(plugin.TARGET, [])]
    print("hooked" if hooked else "plain", len(hooks), plugin.is_enabled())
"""


@pytest.mark.parametrize("value", ["1", "On", None, "0"])
def test_load_plugins_in_a_fresh_process(entry_point, value):
    """SGLang's load_plugins() (as each SGLang process runs it) applies the hook when the variable
    is truthy, once however often it is called, and leaves RMSNorm alone otherwise."""
    env = {k: v for k, v in os.environ.items() if k not in plugin.ENV_VARS + ("SGLANG_PLUGINS",)}
    if value is not None:
        env["SGLANG_USE_OINK_RMSNORM"] = value
    code = textwrap.dedent(_CHILD)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert out.returncode == 0, out.stderr[-3000:]
    truthy = value is not None and value.lower() in ("1", "true", "on")
    assert out.stdout.split()[-3:] == (
        ["hooked", "1", "True"] if truthy else ["plain", "0", "False"]
    )
    if truthy:
        assert (
            "runs on oink" in out.stderr and f"Applied 1 hook(s) to {plugin.TARGET}" in out.stderr
        )


def test_register_then_apply(supported, monkeypatch):
    monkeypatch.setenv("SGLANG_USE_OINK_OPS", "yes")
    original = RMSNorm.__dict__["forward_cuda"]
    plugin.register()
    plugin.register()
    assert [h for _, h, _ in HookRegistry._hooks[plugin.TARGET]] == [plugin._around]
    HookRegistry._patched.discard(plugin.TARGET)
    HookRegistry.apply_hooks()
    wrapper = RMSNorm.__dict__["forward_cuda"]
    assert wrapper is not original and wrapper.__wrapped__ is original
    assert plugin._hooked(wrapper) and plugin.is_enabled()
    plugin.enable()  # already hooked through SGLang: no second wrapper
    assert RMSNorm.__dict__["forward_cuda"] is wrapper
    x, norm = _randn((5, N), bf16, 0), _norm()
    assert torch.equal(norm.forward_cuda(x), oink.rmsnorm(x, norm.weight.data, EPS))


def test_register_without_variable_does_nothing():
    original = RMSNorm.__dict__["forward_cuda"]
    plugin.register()
    assert plugin.TARGET not in HookRegistry._hooks or not HookRegistry._hooks[plugin.TARGET]
    assert RMSNorm.__dict__["forward_cuda"] is original and not plugin.is_enabled()


def test_register_never_raises(monkeypatch, caplog):
    def fail(*args, **kwargs):
        raise RuntimeError("boom")

    monkeypatch.setenv("SGLANG_USE_OINK_RMSNORM", "1")
    monkeypatch.setattr(HookRegistry, "register", fail)
    plugin.logger.addHandler(caplog.handler)
    try:
        assert plugin.register() is None
    finally:
        plugin.logger.removeHandler(caplog.handler)
    assert "not registered: RuntimeError: boom" in caplog.text
    assert not plugin._registered


def test_enable_is_idempotent_and_disable_restores(supported, calls):
    original = RMSNorm.__dict__["forward_cuda"]
    plugin.enable()
    wrapper = RMSNorm.__dict__["forward_cuda"]
    plugin.enable()
    assert RMSNorm.__dict__["forward_cuda"] is wrapper and wrapper.__wrapped__ is original
    assert os.environ["SGLANG_USE_OINK_RMSNORM"] == "1" and plugin.is_enabled()
    x, norm = _randn((3, N), bf16, 0), _norm()
    norm.forward_cuda(x)
    assert calls == {"oink": 1, "sglang": 0, "batch_invariant": 0}
    plugin.disable()
    assert RMSNorm.__dict__["forward_cuda"] is original and not plugin.is_enabled()
    assert "SGLANG_USE_OINK_RMSNORM" not in os.environ
    norm.forward_cuda(x)
    wrapper(norm, x)  # a forward SGLang resolved while routing was on passes calls through
    assert calls == {"oink": 1, "sglang": 2, "batch_invariant": 0}
    plugin.disable()


def test_disable_passes_a_registry_hook_through(supported, calls, monkeypatch):
    monkeypatch.setenv("SGLANG_USE_OINK_RMSNORM", "1")
    plugin.register()
    HookRegistry._patched.discard(plugin.TARGET)
    HookRegistry.apply_hooks()
    x, norm = _randn((3, N), bf16, 0), _norm()
    norm.forward_cuda(x)
    plugin.disable()
    norm.forward_cuda(x)
    assert calls["oink"] == 1 and calls["sglang"] == 1
    plugin.enable()
    norm.forward_cuda(x)
    assert calls["oink"] == 2


# --- routed calls: oink's bits, SGLang's semantics --------------------------------------------
def _layouts(dtype):
    """(name, make() -> (x, residual)) of the layouts SGLang passes: 2-D, padded rows, 3-D, 3-D
    head views; make() builds fresh tensors of the same values each time (clone() would not keep
    the strides of views with gaps)."""

    def padded(seed):
        return _randn((6, 2 * N), dtype, seed)[:, :N]

    def heads(seed, head):  # [1, 6, N]: head `head` of a [6, 2, N] buffer, transposed
        return _randn((6, 2 * N), dtype, seed).view(6, 2, N)[:, head : head + 1].transpose(0, 1)

    return [
        ("2d", lambda: (_randn((7, N), dtype, 0), _randn((7, N), dtype, 1))),
        ("1row", lambda: (_randn((1, N), dtype, 0), _randn((1, N), dtype, 1))),
        ("padded", lambda: (padded(2), padded(3))),
        ("3d", lambda: (_randn((2, 3, N), dtype, 0), _randn((2, 3, N), dtype, 1))),
        ("3d_heads", lambda: (heads(2, 0), heads(3, 1))),
        ("3d_mixed", lambda: (heads(2, 1), _randn((1, 6, N), dtype, 3))),
    ]


def _expected_native(norm, x, residual=None):
    """SGLang's forward_native, on copies."""
    if residual is None:
        return norm.forward_native(x.clone())
    return norm.forward_native(x.clone(), residual.clone())


@pytest.mark.parametrize("weight_dtype", [None, f32])
@pytest.mark.parametrize("dtype", [bf16, f16, f32])
def test_rmsnorm_runs_oink(supported, calls, dtype, weight_dtype):
    plugin.enable()
    norm = _norm(dtype, weight_dtype)
    for name, make in _layouts(dtype):
        x, _ = make()
        out = norm.forward_cuda(x)
        assert torch.equal(out, oink.rmsnorm(x, norm.weight.data, EPS)), name
        assert out.shape == x.shape and out.dtype == x.dtype and out.is_contiguous(), name
        assert torch.equal(x, make()[0]), name
        torch.testing.assert_close(out, _expected_native(norm, x), **TOL.get(dtype, {}))
    assert calls["oink"] == 6 and calls["sglang"] == 0


@pytest.mark.parametrize("weight_dtype", [None, f32])
@pytest.mark.parametrize("dtype", [bf16, f16, f32])
def test_fused_add_runs_oink(supported, calls, dtype, weight_dtype):
    plugin.enable()
    norm = _norm(dtype, weight_dtype)
    for name, make in _layouts(dtype):
        x0, r0 = make()  # the inputs, kept
        native_out, native_residual = _expected_native(norm, x0, r0)
        x, r = make()
        out, residual = norm.forward_cuda(x, r)
        xs, rs = make()  # what SGLang's own path computes into
        if x.dim() == 2:  # written in place and handed back, as sgl_kernel's fused_add_rmsnorm
            assert out is x and residual is r, name
            oink.fused_add_rms_norm(xs, rs, norm.weight.data, EPS)
            assert torch.equal(x, xs) and torch.equal(r, rs), name
        else:  # flattened as SGLang flattens: written in place only where that is a view
            x2, r2 = xs.contiguous().reshape(-1, N), rs.contiguous().reshape(-1, N)
            oink.fused_add_rms_norm(x2, r2, norm.weight.data, EPS)
            assert torch.equal(out, x2.view(x.shape)), name
            assert torch.equal(residual, r2.view(r.shape)), name
            assert out.shape == x.shape and residual.shape == r.shape, name
            assert (out.data_ptr() == x.data_ptr()) == x0.is_contiguous(), name
            assert (residual.data_ptr() == r.data_ptr()) == r0.is_contiguous(), name
            assert torch.equal(x, out if x0.is_contiguous() else x0), name
            assert torch.equal(r, residual if r0.is_contiguous() else r0), name
        assert torch.equal(residual, native_residual), name  # one rounding of x + residual
        torch.testing.assert_close(out, native_out, **TOL.get(dtype, {}))
    assert calls["oink"] == 6 and calls["sglang"] == 0


def test_no_weight(supported, calls):
    plugin.enable()
    norm = RMSNorm(N, eps=EPS, has_weight=False)
    x, r = _randn((4, N), bf16, 0), _randn((4, N), bf16, 1)
    assert torch.equal(norm.forward_cuda(x), oink.rmsnorm(x, None, EPS))
    xs, rs = x.clone(), r.clone()
    norm.forward_cuda(x, r)
    oink.fused_add_rms_norm(xs, rs, None, EPS)
    assert torch.equal(x, xs) and torch.equal(r, rs) and calls["oink"] == 2


def test_sglang_dispatch_reaches_oink(supported, calls, monkeypatch):
    """RMSNorm.forward() on a CUDA platform resolves to forward_cuda, the hooked one."""
    from sglang.kernels import fused_op

    monkeypatch.setattr(fused_op, "_platform_key", lambda: "cuda")
    monkeypatch.setattr(fused_op, "_oot_dispatch_key", lambda: None)
    plugin.enable()
    norm = _norm()
    x, r = _randn((5, N), bf16, 0), _randn((5, N), bf16, 1)
    assert torch.equal(norm(x), oink.rmsnorm(x, norm.weight.data, EPS))
    out, residual = norm(x, r)
    assert out is x and residual is r and calls["oink"] == 2


# --- calls handed back to SGLang --------------------------------------------------------------
class _Linear(torch.nn.Linear):
    pass


def _sglang_fallbacks():
    """(name, make() -> (norm, args, kwargs), what SGLang runs: 'sglang', 'native' or
    'batch_invariant')."""
    x = lambda dtype=bf16: _randn((4, N), dtype, 0)  # noqa: E731
    r = lambda dtype=bf16: _randn((4, N), dtype, 1)  # noqa: E731
    return [
        ("post_residual_addition", lambda: (_norm(), (x(), r(), r()), {}), "sglang"),
        (
            "post_residual_addition_kw",
            lambda: (_norm(), (x(), r()), {"post_residual_addition": r()}),
            "sglang",
        ),
        ("var_hidden_size", lambda: (_norm(var_hidden_size=N // 2), (x(),), {}), "native"),
        ("var_hidden_size_res", lambda: (_norm(var_hidden_size=N // 2), (x(), r()), {}), "native"),
        (
            "cast_x_before_out_mul",
            lambda: (_norm(cast_x_before_out_mul=True), (x(),), {}),
            "native",
        ),
        (
            "cast_x_before_out_mul_res",
            lambda: (_norm(cast_x_before_out_mul=True), (x(), r()), {}),
            "native",
        ),
        ("quant_linear", lambda: (_norm(), (x(), None, None, _Linear(N, N)), {}), "sglang"),
        (
            "quant_linear_kw",
            lambda: (_norm(), (x(), r()), {"quant_linear": _Linear(N, N)}),
            "sglang",
        ),
        ("fuse_input_quant", lambda: (_fused_quant_norm(), (x(), r()), {}), "sglang"),
        ("float64", lambda: (_norm(torch.float64), (x(torch.float64),), {}), "sglang"),
        ("strided_last_dim", lambda: (_norm(), (_randn((N, 4), bf16, 0).t(),), {}), "sglang"),
        ("fp32_residual", lambda: (_norm(fp32_residual=True), (x(), r(f32)), {}), "sglang"),
        ("broadcast_rows", lambda: (_norm(), (x()[:1].expand(4, N),), {}), "sglang"),
        ("empty", lambda: (_norm(), (x()[:0],), {}), "none"),
        ("empty_res", lambda: (_norm(), (x()[:0], r()[:0]), {}), "none"),
    ]


def _fused_quant_norm():
    norm = _norm()
    norm.fuse_input_quant(_Linear(N, N))
    return norm


@pytest.mark.parametrize("case", _sglang_fallbacks(), ids=lambda c: c[0])
def test_options_oink_does_not_do_go_to_sglang(supported, calls, case):
    name, make, runs = case
    norm, args, kwargs = make()
    clone = lambda t: t.clone() if isinstance(t, torch.Tensor) else t  # noqa: E731
    expected = RMSNorm.forward_cuda(norm, *map(clone, args), **kwargs)  # SGLang's own path
    assert calls["oink"] == 0
    counts = dict(calls)
    plugin.enable()
    got = norm.forward_cuda(*args, **kwargs)
    assert calls["oink"] == 0, name
    assert calls["sglang"] - counts["sglang"] == (runs == "sglang"), name
    expected, got = (expected, got) if isinstance(got, tuple) else ((expected,), (got,))
    assert all(torch.equal(a, b) for a, b in zip(expected, got, strict=True)), name


def test_batch_invariant_mode_goes_to_sglang(supported, calls, monkeypatch):
    plugin.enable()
    monkeypatch.setattr(layernorm, "is_batch_invariant_mode_enabled", lambda: True)
    exec_config = SimpleNamespace(deterministic=SimpleNamespace(rl_on_policy_target=None))
    monkeypatch.setattr(layernorm, "get_exec", lambda: exec_config)  # a server publishes it
    norm = _norm()
    x, r = _randn((4, N), bf16, 0), _randn((4, N), bf16, 1)
    norm.forward_cuda(x)
    assert calls["batch_invariant"] == 1
    native_out, native_residual = _expected_native(norm, x, r)
    out, residual = norm.forward_cuda(x, r)  # SGLang: forward_native for the residual add
    assert torch.equal(out, native_out) and torch.equal(residual, native_residual)
    assert calls["oink"] == 0 and calls["sglang"] == 0
    monkeypatch.setattr(layernorm, "is_batch_invariant_mode_enabled", lambda: False)
    norm.forward_cuda(x)  # read on every call
    assert calls["oink"] == 1


@pytest.mark.parametrize("forced", [None, False])
def test_unsupported_device_goes_to_sglang(calls, monkeypatch, forced):
    """A CPU tensor (what SUPPORTED answers without forcing) or a GPU oink does not serve."""
    monkeypatch.setattr(plugin.SUPPORTED, "forced", forced)
    plugin.enable()
    norm = _norm()
    norm.forward_cuda(_randn((4, N), bf16, 0))
    norm.forward_cuda(_randn((4, N), bf16, 0), _randn((4, N), bf16, 1))
    assert calls["oink"] == 0 and calls["sglang"] == 2


def test_unknown_arguments_go_to_sglang(supported, calls):
    plugin.enable()
    with pytest.raises(TypeError):  # SGLang 0.5.23's forward_cuda has no such argument
        _norm().forward_cuda(_randn((4, N), bf16, 0), new_option=True)
    assert calls["oink"] == 0


def test_device_support_without_cuda():
    assert plugin.SUPPORTED(torch.device("cpu")) is False
    if not torch.cuda.is_available():
        assert not torch.cuda.is_initialized()
