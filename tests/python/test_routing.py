"""oink.enable() / disable() / enabled(): PyTorch's RMSNorm and LayerNorm (F.rms_norm,
nn.RMSNorm, F.layer_norm, nn.LayerNorm) run oink's kernels, forward and backward, for the inputs
oink takes, and PyTorch's for every other; torch.compile and CUDA graphs with routing on."""

import threading

import pytest
import torch

import oink
from oink import _routing

from conftest import DEVICES, requires_cuda

F = torch.nn.functional
DTYPES = [torch.bfloat16, torch.float16, torch.float32]


def dtype_id(d):
    return str(d).removeprefix("torch.")


@pytest.fixture(autouse=True)
def routing_off():
    """Every test starts and ends with routing off and the counters at zero."""
    oink.disable()
    _routing.reset_stats()
    yield
    oink.disable()


def counts(name):
    s = _routing.stats()[name]
    return s["routed"], s["passed"]


def inputs(device, dtype, gen, m=6, n=256, grad=True):
    x = (torch.randn(m, n, generator=gen) * 2 + 0.5).to(dtype).to(device)
    w = (1 + 0.5 * torch.randn(n, generator=gen)).to(dtype).to(device)
    b = torch.randn(n, generator=gen).to(dtype).to(device)
    return [t.requires_grad_(grad) for t in (x, w, b)]


def run(fn, tensors):
    """fn's output and the gradients of (output * g).sum() for a fixed random g."""
    leaves = [t.detach().clone().requires_grad_() for t in tensors]
    y = fn(*leaves)
    g = torch.linspace(-1, 1, y.numel(), dtype=torch.float64).view(y.shape)
    (y.double() * g.to(y.device)).sum().backward()
    return y, [t.grad for t in leaves]


def close_to_float64(fn, tensors, dtype):
    """fn, routed, against fn in float64 with routing off: the output within a few units of
    the dtype's rounding, the gradients within a few units of their own."""
    y, grads = run(fn, tensors)
    oink.disable()
    ref, ref_grads = run(fn, [t.detach().double().cpu() for t in tensors])
    assert y.dtype == dtype
    tol = 4 * torch.finfo(dtype).eps
    torch.testing.assert_close(y.double().cpu(), ref, rtol=tol, atol=tol)
    for g, r in zip(grads, ref_grads, strict=True):
        scale = r.abs().max().item() + 1
        torch.testing.assert_close(g.double().cpu(), r, rtol=tol * 4, atol=tol * 4 * scale)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES, ids=dtype_id)
def test_functional_rms_norm_routed_and_correct(device, dtype, gen):
    x, w, _ = inputs(device, dtype, gen)
    oink.enable(devices=(device,))
    close_to_float64(lambda x, w: F.rms_norm(x, (x.shape[-1],), w, 1e-6), (x, w), dtype)
    assert counts("rms_norm") == (1, 0)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES, ids=dtype_id)
def test_functional_layer_norm_routed_and_correct(device, dtype, gen):
    x, w, b = inputs(device, dtype, gen)
    oink.enable(devices=(device,))
    close_to_float64(lambda x, w, b: F.layer_norm(x, (x.shape[-1],), w, b, 1e-5), (x, w, b), dtype)
    assert counts("layer_norm") == (1, 0)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("affine", [True, False])
def test_modules_routed_and_equal_to_oink(device, affine, gen):
    """nn.RMSNorm (eps None: float32's epsilon, as PyTorch) and nn.LayerNorm, with and without
    their weights, give oink's bits and gradients, and PyTorch's within rounding."""
    dtype = torch.bfloat16
    x, _, _ = inputs(device, dtype, gen, n=512)
    rms = torch.nn.RMSNorm(512, elementwise_affine=affine, device=device, dtype=dtype)
    ln = torch.nn.LayerNorm(512, elementwise_affine=affine, device=device, dtype=dtype)
    if affine:
        with torch.no_grad():
            rms.weight.uniform_(0.5, 1.5)
            ln.weight.uniform_(0.5, 1.5)
            ln.bias.uniform_(-1, 1)
    expected_rms = oink.rmsnorm(x, rms.weight, torch.finfo(torch.float32).eps)
    expected_ln = oink.layernorm(x, ln.weight, ln.bias, ln.eps)
    torch_rms, torch_ln = rms(x), ln(x)
    with oink.enabled(devices=(device,)):
        y_rms, y_ln = rms(x), ln(x)
    assert counts("rms_norm") == (1, 0) and counts("layer_norm") == (1, 0)
    assert torch.equal(y_rms, expected_rms) and torch.equal(y_ln, expected_ln)
    for ours, theirs in ((y_rms, torch_rms), (y_ln, torch_ln)):
        torch.testing.assert_close(ours, theirs, rtol=2**-7, atol=2**-6)
        g = torch.randn(ours.shape, generator=gen).to(dtype).to(device)
        params = [p for p in (rms if ours is y_rms else ln).parameters()]
        got = torch.autograd.grad(ours, [x, *params], g)
        want = torch.autograd.grad(theirs, [x, *params], g)
        for a, b in zip(got, want, strict=True):
            scale = b.abs().max().item() + 1
            torch.testing.assert_close(a.float(), b.float(), rtol=2**-6, atol=2**-6 * scale)


def test_eps_none_is_pytorchs(gen):
    """rms_norm's eps=None is float32's epsilon for 16-bit x (PyTorch's compute type), not the
    dtype's: on tiny rows where eps dominates, the routed result is PyTorch's."""
    x = torch.full((3, 64), 1e-4, dtype=torch.bfloat16)
    want = F.rms_norm(x, (64,))
    with oink.enabled(devices=("cpu",)):
        got = F.rms_norm(x, (64,))
        got_eps = F.rms_norm(x, (64,), eps=torch.finfo(torch.bfloat16).eps)
    assert counts("rms_norm") == (2, 0)
    torch.testing.assert_close(got, want, rtol=2**-7, atol=0)
    assert (got_eps.float() < 0.01).all()  # an explicit eps is taken as given


def test_gradcheck_through_routing(gen):
    x = torch.randn(4, 16, dtype=torch.float64, generator=gen, requires_grad=True)
    w = torch.randn(16, dtype=torch.float64, generator=gen, requires_grad=True)
    b = torch.randn(16, dtype=torch.float64, generator=gen, requires_grad=True)
    with oink.enabled(devices=("cpu",)):
        assert torch.autograd.gradcheck(lambda x, w: F.rms_norm(x, (16,), w), (x, w))
        assert torch.autograd.gradcheck(lambda x, w, b: F.layer_norm(x, (16,), w, b), (x, w, b))
    assert counts("rms_norm")[0] > 0 and counts("layer_norm")[0] > 0


def test_torch_bindings_and_mixed_weight_routed(gen):
    """torch.rms_norm / torch.layer_norm route as their F.* forms; a float32 weight with 16-bit
    x (PyTorch's mixed types) is taken, the result in x's dtype as PyTorch's."""
    x, _, _ = inputs("cpu", torch.bfloat16, gen, grad=False)
    w32 = torch.rand(256, generator=gen) + 0.5
    with oink.enabled(devices=("cpu",)):
        a = torch.rms_norm(x, [256], w32, 1e-6)
        b = torch.layer_norm(x, [256], w32, w32, 1e-5)
        c = F.layer_norm(x, (256,), w32, w32)
    assert counts("rms_norm") == (1, 0) and counts("layer_norm") == (2, 0)
    assert a.dtype == b.dtype == c.dtype == torch.bfloat16
    assert torch.equal(a, oink.rmsnorm(x, w32, 1e-6))
    assert torch.equal(b, oink.layernorm(x, w32, w32, 1e-5)) and torch.equal(b, c)


def passes(fn, name, *tensors):
    """fn with routing on is PyTorch's (its bits, or its error) and counts as passed."""
    try:
        want = fn(*tensors)
    except Exception as error:  # PyTorch refuses it: so must the routed call
        with oink.enabled(devices=("cpu", "cuda")):
            with pytest.raises(type(error)):
                fn(*tensors)
        return
    before = counts(name)
    with oink.enabled(devices=("cpu", "cuda")):
        got = fn(*tensors)
    assert counts(name) == (before[0], before[1] + 1)
    assert got.dtype == want.dtype and torch.equal(got, want)


@pytest.mark.parametrize("device", DEVICES)
def test_unsupported_inputs_reach_pytorch(device, gen):
    x, w, b = inputs(device, torch.float32, gen, m=4, n=64, grad=False)
    cube = x.view(4, 8, 8)
    w88 = torch.rand(8, 8, generator=gen).to(device)
    # normalized_shape over two dimensions (with and without a weight of that shape)
    passes(lambda t: F.rms_norm(t, (8, 8), w88), "rms_norm", cube)
    passes(lambda t: F.layer_norm(t, (8, 8), w88, w88), "layer_norm", cube)
    passes(lambda t: F.rms_norm(t, (8, 8)), "rms_norm", cube)
    # rows that overlap (a broadcast view) and a strided last dimension
    passes(lambda t: F.rms_norm(t, (64,), w), "rms_norm", x[:1].expand(4, 64))
    passes(lambda t: F.layer_norm(t, (4,)), "layer_norm", x.t())
    # a weight of another length, or not contiguous: PyTorch's error
    passes(lambda t: F.rms_norm(t, (64,), w[:32]), "rms_norm", x)
    strided = torch.rand(128, generator=gen).to(device)[::2]
    passes(lambda t: F.layer_norm(t, (64,), strided, b), "layer_norm", x)
    passes(lambda t: F.rms_norm(t, (64,), strided), "rms_norm", x)
    # integer tensors and layer_norm's dtype pairs PyTorch refuses
    passes(lambda t: F.layer_norm(t, (64,), w.bfloat16(), b.bfloat16()), "layer_norm", x)
    passes(lambda t: F.layer_norm(t.bfloat16(), (64,), w.bfloat16(), b), "layer_norm", x)
    if device == "cuda":  # PyTorch's CUDA kernel refuses float32 parameters with 16-bit x
        passes(lambda t: F.layer_norm(t.bfloat16(), (64,), w, b), "layer_norm", x)
    # a device that is not enabled
    before = counts("rms_norm")
    with oink.enabled(devices=("cuda",) if device == "cpu" else ("cpu",)):
        F.rms_norm(x, (64,), w)
    assert counts("rms_norm") == (before[0], before[1] + 1)


def test_cpu_not_routed_by_default(gen):
    x, w, _ = inputs("cpu", torch.float32, gen, grad=False)
    with oink.enabled():
        F.rms_norm(x, (256,), w)
    assert counts("rms_norm") == (0, 1)


def test_autocast_subclasses_and_transforms_reach_pytorch(gen):
    x, w, b = inputs("cpu", torch.bfloat16, gen, m=4, n=64, grad=False)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        passes(lambda t: F.layer_norm(t, (64,), w, b), "layer_norm", x)
    with torch.autocast("cpu", dtype=torch.bfloat16):  # float32 throughout: nothing is cast
        with oink.enabled(devices=("cpu",)):
            F.rms_norm(x.float(), (64,), w.float())
    assert counts("rms_norm") == (1, 0)

    class Sub(torch.Tensor):
        pass

    passes(
        lambda t: F.rms_norm(t, (64,), w).as_subclass(torch.Tensor), "rms_norm", x.as_subclass(Sub)
    )
    xs = x.float()
    with oink.enabled(devices=("cpu",)):
        batched = torch.vmap(lambda r: F.rms_norm(r, (64,)))(xs)
        g = torch.func.grad(lambda r: F.rms_norm(r, (64,)).square().sum())(xs)
    assert counts("rms_norm")[0] == 1  # the float32 call above only
    torch.testing.assert_close(batched, F.rms_norm(xs, (64,)))
    torch.testing.assert_close(
        g, torch.func.grad(lambda r: F.rms_norm(r, (64,)).square().sum())(xs)
    )


@requires_cuda
def test_cuda_limits_reach_pytorch(gen):
    """float64 and rows longer than oink's CUDA kernels take fall back; with grad, the
    backward's limits apply to rms_norm too."""
    dev = "cuda"
    x64 = torch.randn(2, 64, dtype=torch.float64, device=dev)
    passes(lambda t: F.rms_norm(t, (64,)), "rms_norm", x64)
    passes(lambda t: F.layer_norm(t, (64,)), "layer_norm", x64)
    clusters = torch.cuda.get_device_capability()[0] >= 9
    # layer_norm past one slice: rows of 16-byte vectors on compute capability 9.0 (a cluster of
    # CTAs), at most 32 slices.
    layer_norm = lambda t: F.layer_norm(t, (t.shape[-1],))  # noqa: E731
    passes(layer_norm, "layer_norm", torch.randn(2, 8192 + 1, device=dev))
    passes(layer_norm, "layer_norm", torch.randn(2, 16384 + 1, device=dev, dtype=torch.bfloat16))
    passes(layer_norm, "layer_norm", torch.randn(2, 524288 + 8, device=dev, dtype=torch.bfloat16))
    long16 = torch.randn(2, 16384 + 8, device=dev, dtype=torch.bfloat16)
    if not clusters:
        passes(layer_norm, "layer_norm", long16)
    _routing.reset_stats()
    # rms_norm's forward and backward take any N on every device.
    with oink.enabled():
        F.layer_norm(long16, (long16.shape[-1],))
        assert counts("layer_norm") == ((1, 0) if clusters else (0, 1))
        F.rms_norm(long16, (long16.shape[-1],))
        assert counts("rms_norm") == (1, 0)
        y = F.rms_norm(long16.clone().requires_grad_(), (long16.shape[-1],))
        assert counts("rms_norm") == (2, 0)  # a cluster, or looped without clusters
        y.sum().backward()
        huge = torch.randn(2, 262144 + 8, device=dev, dtype=torch.bfloat16, requires_grad=True)
        F.rms_norm(huge, (huge.shape[-1],)).sum().backward()  # past 16 slices: looped
        assert counts("rms_norm") == (3, 0)
        odd = torch.randn(2, 8193, device=dev, dtype=torch.bfloat16, requires_grad=True)
        F.rms_norm(odd, (8193,)).sum().backward()  # unaligned rows > 8192: looped
        assert counts("rms_norm") == (4, 0)


def test_enable_disable_idempotent_and_nesting():
    depth = torch.overrides._len_torch_function_stack()
    oink.disable()  # without enable: nothing
    assert _routing.is_enabled() is None
    oink.enable(devices=("cpu",))
    oink.enable(devices=("cpu",))
    assert torch.overrides._len_torch_function_stack() == depth + 1
    assert _routing.is_enabled() == ("cpu",)
    with oink.enabled(devices=("cpu", "cuda")):
        assert _routing.is_enabled() == ("cpu", "cuda")
        with oink.enabled():
            assert _routing.is_enabled() == ("cuda",)
        assert _routing.is_enabled() == ("cpu", "cuda")
    assert _routing.is_enabled() == ("cpu",)
    oink.disable()
    oink.disable()
    assert _routing.is_enabled() is None
    assert torch.overrides._len_torch_function_stack() == depth
    with oink.enabled(devices="cpu"):
        with oink.enabled(devices="cpu"):
            pass
        assert _routing.is_enabled() == ("cpu",)
    assert _routing.is_enabled() is None
    with pytest.raises(ValueError, match="devices"):
        oink.enable(devices=("tpu",))
    assert _routing.is_enabled() is None


def test_other_modes_keep_working(gen):
    """oink's mode sits at the bottom of the stack: a mode entered before or after enable() sees
    the norms first, pops itself on exit, and stays when oink's is removed."""
    seen = []

    class Spy(torch.overrides.TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            if func is F.rms_norm:
                seen.append(func)
            return func(*args, **(kwargs or {}))

    x = torch.randn(2, 32, generator=gen)
    oink.enable(devices=("cpu",))
    with Spy():
        oink.disable()
        F.rms_norm(x, (32,))
        oink.enable(devices=("cpu",))
        F.rms_norm(x, (32,))
    assert len(seen) == 2 and counts("rms_norm") == (1, 0)
    assert _routing.is_enabled() == ("cpu",)
    assert torch.overrides._len_torch_function_stack() == 1  # Spy popped itself, not oink's
    torch.set_default_device("cpu")  # its DeviceContext goes to the bottom, oink's above
    try:
        oink.disable()
        oink.enable(devices=("cpu",))
        F.rms_norm(x, (32,))
        assert counts("rms_norm") == (2, 0)
    finally:
        torch.set_default_device(None)
    assert _routing.is_enabled() == ("cpu",)


def test_other_threads_are_not_routed(gen):
    """The mode stack is per thread (as torch.set_default_device's)."""
    x = torch.randn(2, 32, generator=gen)
    oink.enable(devices=("cpu",))
    thread = threading.Thread(target=lambda: F.rms_norm(x, (32,)))
    thread.start()
    thread.join()
    assert counts("rms_norm") == (0, 0)


class Block(torch.nn.Module):
    def __init__(self, n, dtype):
        super().__init__()
        self.norm = torch.nn.RMSNorm(n, dtype=dtype)
        self.proj = torch.nn.Linear(n, n, dtype=dtype)
        self.ln = torch.nn.LayerNorm(n, dtype=dtype)
        with torch.no_grad():
            self.norm.weight.uniform_(0.5, 1.5)

    def forward(self, x):
        return self.ln(self.proj(self.norm(x)) * 2 + x)


@pytest.mark.parametrize("device", DEVICES)
def test_compile_fullgraph_forward_backward(device, gen):
    """Compiled (fullgraph, inductor) with routing on: oink's ops in the graph, the forward and
    every gradient equal to eager routed calls; disabling recompiles to PyTorch's norms."""
    torch._dynamo.reset()
    dtype = torch.float32
    block = Block(256, dtype).to(device)
    x = torch.randn(5, 256, generator=gen).to(device).requires_grad_()
    graphs = []

    def record(gm, example_inputs):
        graphs.append(str(gm.graph))
        return gm.forward

    oink.enable(devices=(device,))
    torch.compile(block, fullgraph=True, backend=record)(x)
    assert "oink.rmsnorm" in graphs[-1] and "oink.layernorm" in graphs[-1]
    compiled = torch.compile(block, fullgraph=True)
    eager = block(x)
    eager_grads = torch.autograd.grad(eager.sum(), [x, *block.parameters()])
    out = compiled(x)
    grads = torch.autograd.grad(out.sum(), [x, *block.parameters()])
    torch.testing.assert_close(out, eager, rtol=1e-5, atol=1e-5)
    for a, b in zip(grads, eager_grads, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-4)
    oink.disable()
    torch.compile(block, fullgraph=True, backend=record)(x)
    assert "oink" not in graphs[-1]


@requires_cuda
def test_cuda_graph_of_routed_module(gen):
    block = Block(1024, torch.bfloat16).cuda()
    x = torch.randn(8, 1024, generator=gen).to(torch.bfloat16).cuda()
    oink.enable()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.no_grad(), torch.cuda.stream(s):
        block(x)
    torch.cuda.current_stream().wait_stream(s)
    graph = torch.cuda.CUDAGraph()
    with torch.no_grad(), torch.cuda.graph(graph):
        y = block(x)
    assert counts("rms_norm")[0] == 2 and counts("layer_norm")[0] == 2
    for _ in range(2):
        x.copy_(torch.randn(x.shape, generator=gen).to(torch.bfloat16))
        graph.replay()
        torch.cuda.synchronize()
        with torch.no_grad():
            assert torch.equal(y, block(x))
