"""What is timed: oink, the PyTorch baselines, and the peers (the other kernel libraries).

Every rmsnorm provider is `fn(x, w, eps) -> y` (y in x's dtype); every fused provider is
`fn(x, residual, w, eps) -> (y, new_residual)` with the semantics of vLLM's fused_add_rms_norm
(new_residual = x + residual rounded to the dtype, y = rmsnorm(new_residual)). In-place providers
(oink, vLLM, FlashInfer, the composites) write x and residual and return them; out-of-place ones
(Quack, Liger) return new tensors. Either way the same bytes are read and written, and nothing is
copied inside the timed call.

Peers come from the installed packages where importable (flashinfer, vllm, quack, liger_kernel,
as on a user's machine), else from the peers kit (oink/bench/peers.py).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F

RMSNORM = "rmsnorm"
FUSED = "fused_add_rms_norm"
OPS = (RMSNORM, FUSED)
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}

# F.rms_norm warns once per call site when x and weight dtypes differ (it then runs its composite).
warnings.filterwarnings("ignore", message="Mismatch dtype between input and weight")


# Provider groups. FLOOR: a copy of the same bytes, the time no norm of that shape can beat (a
# reference beside the others: neither a baseline nor a peer, and not gated: it is no norm).
OINK, TORCH, PEER, FLOOR = "oink", "torch", "peer", "floor"
PEERS = ("quack", "flashinfer_cute", "flashinfer", "flashinfer_nopdl", "vllm", "liger")


@dataclass(frozen=True)
class Provider:
    name: str
    op: str
    fn: Callable | None
    group: str = TORCH  # OINK, TORCH (PyTorch baselines), PEER (other kernel libraries), FLOOR
    cuda_only: bool = False
    same_weight_dtype: bool = False  # needs the weight in x's dtype
    pdl: bool = False  # launches with programmatic dependent launch
    max_n: int | None = None  # longest row it handles (None: no known limit)
    missing: str | None = None  # why it is not here (a peer that did not load): fn is None

    @property
    def baseline(self) -> bool:
        """Everything oink is compared with: the torch baselines and the peers."""
        return self.group in (TORCH, PEER)

    def unsupported(
        self, device: str, dtype: torch.dtype, wdtype: torch.dtype, n: int
    ) -> str | None:
        """Why this provider cannot run this case (reported as n/a), or None."""
        if self.missing:
            return self.missing
        if self.cuda_only and device != "cuda":
            return "CUDA only"
        if self.same_weight_dtype and wdtype != dtype:
            return f"needs the weight in x's dtype ({_short(dtype)}), not {_short(wdtype)}"
        if self.max_n is not None and n > self.max_n:
            return f"N = {n} is over its limit of {self.max_n}"
        return None


def _short(dtype: torch.dtype) -> str:
    return str(dtype).replace("torch.", "")


def first_line(e: BaseException, limit: int = 300) -> str:
    """`Type: first line of the message`, cut at `limit` characters."""
    lines = str(e).splitlines()
    return f"{type(e).__name__}: {lines[0][:limit] if lines else ''}"


# --- the float32 composite (what vLLM's RMSNorm.forward_native and the baselines run) ----------


def composite_rmsnorm(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    """x.float(), pow(2).mean(-1), rsqrt, multiply, cast, * w. With a float32 weight the product
    is cast back to x's dtype, so that every provider returns the same dtype and bytes."""
    dtype = x.dtype
    xf = x.float()
    y = (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)).to(dtype) * w
    return y if y.dtype == dtype else y.to(dtype)


def composite_fused(
    x: torch.Tensor, residual: torch.Tensor, w: torch.Tensor, eps: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """Add then normalize, in place: residual += x (one rounding), x <- rmsnorm(residual)."""
    residual.add_(x)
    x.copy_(composite_rmsnorm(residual, w, eps))
    return x, residual


def _f_rms_norm(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    return F.rms_norm(x, (x.shape[-1],), w, eps)


# --- the floor: one PyTorch copy kernel moving a norm's row bytes (no weight) ------------------


def copy_rmsnorm(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    """x's rows read once and written once, in one kernel: rmsnorm's bytes but the weight's."""
    return x.clone()


def copy_fused(
    x: torch.Tensor, residual: torch.Tensor, w: torch.Tensor, eps: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """x's and the residual's rows read once and written once, in one kernel (a concatenation):
    the fused op's bytes but the weight's."""
    both = torch.cat((x, residual))
    return both, both


def _compiled(fn: Callable) -> Callable:
    """torch.compile(dynamic=True), as vLLM runs its default path; compiled at the first call."""
    config = torch._dynamo.config
    # One run sees several shapes, strides and the 0/1 specialisation of M: never fall back to
    # eager silently because a recompile limit was hit.
    for name in ("recompile_limit", "cache_size_limit"):
        if hasattr(config, name):
            setattr(config, name, max(getattr(config, name), 64))
    return torch.compile(fn, dynamic=True)


@dataclass(frozen=True)
class PeerSpec:
    """A peer as the peers kit describes one (oink_peers.Provider has the same fields)."""

    rmsnorm: Callable  # (x, w, eps) -> y
    fused_add: Callable  # (x, r, w, eps) -> (y, new residual)
    pdl: bool
    needs_weight_in_x_dtype: bool
    note: str
    version: str
    max_n: dict | None = None  # {"rmsnorm": n | None, "fused_add": n | None}


# --- peers as installed ------------------------------------------------------------------------
# Each loader returns {peer name: PeerSpec}; it raises when the package is not importable.


def _installed_vllm() -> dict:
    import vllm
    import vllm._C  # noqa: F401  (registers torch.ops._C)

    ops = torch.ops._C
    ops.rms_norm, ops.fused_add_rms_norm  # noqa: B018  (AttributeError if this build lacks them)

    def rms(x, w, eps):
        out = torch.empty_like(x)  # vLLM's RMSNorm.forward_cuda allocates its output the same way
        ops.rms_norm(out, x, w, eps)
        return out

    def fused(x, residual, w, eps):
        ops.fused_add_rms_norm(x, residual, w, eps)
        return x, residual

    note = "vllm._C rms_norm(out, x, w, eps) / fused_add_rms_norm(x, residual, w, eps), installed"
    return {"vllm": PeerSpec(rms, fused, False, True, note, _version(vllm))}


def _installed_flashinfer() -> dict:
    import flashinfer
    import flashinfer.norm as norm

    def calls(pdl: bool):
        def rms(x, w, eps):
            return norm.rmsnorm(x, w, eps, enable_pdl=pdl)

        def fused(x, residual, w, eps):
            norm.fused_add_rmsnorm(x, residual, w, eps, enable_pdl=pdl)
            return x, residual

        return rms, fused

    note = "flashinfer.norm.rmsnorm / fused_add_rmsnorm as installed (its CUDA or CuTe-DSL path)"
    version = _version(flashinfer)
    return {
        "flashinfer": PeerSpec(*calls(True), True, True, note + ", enable_pdl=True", version),
        "flashinfer_nopdl": PeerSpec(
            *calls(False), False, True, note + ", enable_pdl=False", version
        ),
    }


def _installed_quack() -> dict:
    import quack

    fn = quack.rmsnorm
    fn = getattr(fn, "rmsnorm", fn)  # quack.rmsnorm may be the module or the function
    if not callable(fn):
        raise ImportError("quack.rmsnorm is not callable")

    def rms(x, w, eps):
        return fn(x, w, eps=eps)

    def fused(x, residual, w, eps):
        return fn(x, w, residual=residual, prenorm=True, eps=eps)  # -> (y, x + residual)

    note = "quack.rmsnorm as installed (residual=, prenorm=True for the fused op; out of place)"
    return {"quack": PeerSpec(rms, fused, False, False, note, _version(quack))}


def _installed_liger() -> dict:
    from importlib.metadata import version

    from liger_kernel.ops.fused_add_rms_norm import fused_add_rms_norm_forward
    from liger_kernel.ops.rms_norm import rms_norm_forward

    def rms(x, w, eps):
        return rms_norm_forward(x, w, eps, 0.0, "llama", None)[0]

    def fused(x, residual, w, eps):
        return tuple(fused_add_rms_norm_forward(x, residual, w, eps, 0.0, "llama")[:2])

    note = (
        "liger_kernel.ops rms_norm_forward / fused_add_rms_norm_forward as installed, "
        "casting_mode='llama'; out of place"
    )
    limit = {"rmsnorm": 65536, "fused_add": 65536}  # one Triton block per row
    return {"liger": PeerSpec(rms, fused, False, False, note, version("liger-kernel"), limit)}


INSTALLED = {
    "vllm": _installed_vllm,
    "flashinfer": _installed_flashinfer,
    "quack": _installed_quack,
    "liger_kernel": _installed_liger,
}


def _version(module) -> str:
    return str(getattr(module, "__version__", "unknown version"))


def peer_providers(name: str, spec, cuda_only: bool = True) -> list[Provider]:
    """The two Providers (rmsnorm, fused) of one peer: a PeerSpec or the kit's Provider.
    cuda_only=False lets the CPU tests run fake peers on CPU tensors."""
    limits = getattr(spec, "max_n", None) or {}
    kw = {
        "group": PEER,
        "cuda_only": cuda_only,
        "same_weight_dtype": bool(spec.needs_weight_in_x_dtype),
        "pdl": bool(spec.pdl),
    }
    return [
        Provider(name, RMSNORM, spec.rmsnorm, max_n=limits.get("rmsnorm"), **kw),
        Provider(name, FUSED, spec.fused_add, max_n=limits.get("fused_add"), **kw),
    ]


def missing_providers(name: str, reason: str) -> list[Provider]:
    """A peer that did not load: n/a with the reason in every table, never left out silently."""
    return [Provider(name, op, None, group=PEER, missing=reason) for op in OPS]


# What each provider runs, for the reports (the peers' own notes are added when they load).
DESCRIPTIONS = {
    "oink": "oink.rmsnorm / oink.fused_add_rms_norm (defaults: PDL on sm_90+)",
    "oink_no_pdl": "oink with oink.set_pdl(False): each launch waits for the previous kernel, "
    "as the baselines do (compare with the baselines on equal terms)",
    "torch_eager": "float32 composite in eager PyTorch (x.float(), pow(2).mean(-1), rsqrt, "
    "multiply, cast, * w); fused: residual.add_(x), then x.copy_(composite(residual))",
    "F.rms_norm": "torch.nn.functional.rms_norm (rmsnorm only)",
    "inductor": "torch.compile(dynamic=True) of the same composites (in place for the fused op)",
    "copy": "the floor, not a norm: one PyTorch copy kernel moving the same rows (x.clone(); "
    "fused: torch.cat of x and the residual), isolated calls only; neither a baseline nor a "
    "peer",
}
CORE = ("oink", "oink_no_pdl", "torch_eager", "F.rms_norm", "inductor", "copy")
ALL_NAMES = CORE + PEERS


@dataclass
class Catalog:
    by_op: dict[str, list[Provider]]  # what is measured, per op, in order
    found: dict[str, str]  # peer: "version (source)" or why it is not here
    notes: dict[str, str]  # provider: what exactly it calls
    kit: dict | None = None  # the peers kit's setup status, when it was set up


def _core(device: str, wanted: set[str]) -> list[Provider]:
    import oink  # here, not at the top: `--help` must work without the extension

    def without_pdl(fn: Callable) -> Callable:
        def call(*args):
            previous = oink.set_pdl(False)  # read when the call is planned (and captured)
            try:
                return fn(*args)
            finally:
                oink.set_pdl(previous)

        return call

    def oink_fused(x, residual, w, eps):
        oink.fused_add_rms_norm(x, residual, w, eps)
        return x, residual

    ours = {"group": OINK, "pdl": device == "cuda"}
    no_pdl = {"group": OINK, "cuda_only": True}
    providers = [
        Provider("oink", RMSNORM, oink.rmsnorm, **ours),
        Provider("oink", FUSED, oink_fused, **ours),
        Provider("oink_no_pdl", RMSNORM, without_pdl(oink.rmsnorm), **no_pdl),
        Provider("oink_no_pdl", FUSED, without_pdl(oink_fused), **no_pdl),
        Provider("torch_eager", RMSNORM, composite_rmsnorm),
        Provider("torch_eager", FUSED, composite_fused),
        Provider("F.rms_norm", RMSNORM, _f_rms_norm),
        Provider("copy", RMSNORM, copy_rmsnorm, group=FLOOR),
        Provider("copy", FUSED, copy_fused, group=FLOOR),
    ]
    if "inductor" in wanted:
        providers += [
            Provider("inductor", RMSNORM, _compiled(composite_rmsnorm)),
            Provider("inductor", FUSED, _compiled(composite_fused)),
        ]
    return providers


def _installed_peers(wanted: set[str]) -> tuple[dict, dict[str, str]]:
    """({peer: PeerSpec}, {peer: why not}) from the installed packages."""
    specs: dict = {}
    why: dict[str, str] = {}
    for package, loader in INSTALLED.items():
        names = {"flashinfer": ("flashinfer", "flashinfer_nopdl"), "liger_kernel": ("liger",)}
        names = names.get(package, (package,))
        if not wanted.intersection(names):
            continue
        try:
            specs.update(loader())
        except Exception as e:  # any failure to import means "not installed here", never fatal
            why.update(dict.fromkeys(names, f"{package} not importable ({first_line(e, 120)})"))
    return specs, why


LoadKit = Callable[[], tuple[dict, dict[str, str], dict]]


def resolve_peers(
    names: list[str], installed: tuple[dict, dict[str, str]], load_kit: LoadKit | None
) -> tuple[dict, dict[str, str], dict | None]:
    """Where each peer comes from: its installed package (installed = ({peer: spec}, {peer: why
    not})) where importable, else the peers kit, set up only if some peer is still missing.
    Returns ({peer: spec}, {peer: "version (source)" or why not}, the kit's setup status)."""
    specs, why = installed
    specs = {n: specs[n] for n in names if n in specs}
    found = {n: f"{specs[n].version} (installed)" for n in specs}
    kit_specs, kit_why, kit_status = {}, {}, None
    if load_kit is not None and len(specs) < len(names):
        kit_specs, kit_why, kit_status = load_kit()
    for name in names:
        if name in specs:
            continue
        if name in kit_specs:
            specs[name] = kit_specs[name]
            found[name] = f"{kit_specs[name].version} (peers kit)"
            continue
        reasons = [why.get(name, "no installed package provides it")]
        reasons.append(
            f"peers kit: {kit_why.get(name, 'not in the kit')}"
            if load_kit is not None
            else "no peers kit (--peers DIR)"
        )
        found[name] = "; ".join(reasons)
    return {n: specs[n] for n in names if n in specs}, found, kit_status


def peer_catalog(
    names: list[str], specs: dict, found: dict[str, str], cuda_only: bool = True
) -> tuple[list[Provider], dict[str, str]]:
    """The peers' Providers in `names` order (a peer not found: n/a with found's reason), and
    their notes for the reports. cuda_only=False: the CPU tests' fake peers."""
    providers, notes = [], {}
    for name in names:
        if name in specs:
            providers += peer_providers(name, specs[name], cuda_only)
            source = found[name].rsplit("(", 1)[-1].rstrip(")")
            notes[name] = f"{specs[name].note} [{source}]"
        else:
            providers += missing_providers(name, found[name])
    return providers, notes


def build(
    device: str,
    requested: list[str] | None,
    load_kit: LoadKit | None = None,
    exclude: tuple[str, ...] = (),
) -> Catalog:
    """Providers per op, and what was found of the peers.

    Default: everything available but `exclude`; in CPU mode inductor only when asked for (a
    compile takes longer than the whole --quick run should), and the peers never (CUDA only).
    Peers: see resolve_peers; load_kit() sets up the peers kit: ({peer: spec}, {peer: why not},
    status). On a GPU a peer found nowhere is measured as n/a, with the reasons."""
    unknown = sorted(set(requested or ()) - set(ALL_NAMES))
    if unknown:
        raise ValueError(f"unknown provider(s) {unknown}; expected some of {', '.join(ALL_NAMES)}")
    if requested:
        wanted = set(requested)
    else:
        # No PDL on the CPU: nothing to compare oink_no_pdl against there.
        wanted = set(ALL_NAMES) - set(exclude)
        wanted -= {"inductor", "oink_no_pdl"} if device == "cpu" else set()
    wanted.add("oink")  # every ratio is oink's: it is always measured
    providers = _core(device, wanted)
    notes = dict(DESCRIPTIONS)
    names = [p for p in PEERS if p in wanted]
    if device != "cuda":
        found, kit_status = dict.fromkeys(names, "not tried: CUDA only"), None
    else:
        specs, found, kit_status = resolve_peers(names, _installed_peers(set(names)), load_kit)
        peer_list, peer_notes = peer_catalog(names, specs, found)
        providers += peer_list
        notes.update(peer_notes)
    by_op = {op: [p for p in providers if p.op == op and p.name in wanted] for op in OPS}
    return Catalog(by_op, found, notes, kit_status)
