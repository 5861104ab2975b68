"""Typed wrappers around torch.ops.oink.* and the `explain` facility."""

from __future__ import annotations

from dataclasses import dataclass, fields

import torch


def rmsnorm(
    x: torch.Tensor,
    weight: torch.Tensor | None = None,
    eps: float = 1e-6,
    *,
    out: torch.Tensor | None = None,
) -> torch.Tensor:
    """``x * rsqrt(mean(x**2, -1) + eps) * weight`` in float32, rounded once to x's dtype.

    x: float16/bfloat16/float32 with a contiguous last dimension; its leading dimensions may have
    any strides (padded rows, head views of a QKV buffer, transposed views), as long as no two
    rows share memory. weight: None or a contiguous [N] tensor of any of those dtypes.
    Returns a new tensor with x's shape, and x's strides when x's rows have one row stride
    (otherwise contiguous); or writes into `out` (x's shape and dtype, last dimension contiguous,
    not overlapping x) and returns it.
    """
    if out is None:
        return torch.ops.oink.rmsnorm.default(x, weight, eps)
    if torch.compiler.is_compiling():
        # PyTorch cannot functionalize a custom op that returns an alias of an input (the .out
        # convention), so a traced call writes the functional result into `out`; the compiler
        # plans buffers itself. Eager calls write `out` directly, with no copy.
        return out.copy_(torch.ops.oink.rmsnorm.default(x, weight, eps))
    return torch.ops.oink.rmsnorm.out(x, weight, eps, out=out)


def rmsnorm_forward(
    x: torch.Tensor, weight: torch.Tensor | None = None, eps: float = 1e-6
) -> tuple[torch.Tensor, torch.Tensor]:
    """rmsnorm(x, weight, eps) and rstd = 1/rms per row (x.shape[:-1]; float32, or float64 for
    float64 x): what rmsnorm_backward takes. ``out`` is rmsnorm's, bit for bit (the same plan).
    CPU (float64 included, for gradcheck) and CUDA. ``oink.rmsnorm`` is differentiable through
    it."""
    return torch.ops.oink.rmsnorm_forward.default(x, weight, eps)


def rmsnorm_backward(
    dy: torch.Tensor, x: torch.Tensor, weight: torch.Tensor | None, rstd: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(dx, dweight) of y = rmsnorm(x, weight) for the upstream gradient dy (x's shape and
    dtype), from rmsnorm_forward's rstd. dweight has the weight's dtype (None without a weight)
    and is summed in a fixed order: the same bits on every run and at any thread count. CPU and
    CUDA, any N."""
    return torch.ops.oink.rmsnorm_backward.default(dy, x, weight, rstd)


def layernorm(
    x: torch.Tensor,
    weight: torch.Tensor | None = None,
    bias: torch.Tensor | None = None,
    eps: float = 1e-5,
) -> torch.Tensor:
    """``(x - mean) / sqrt(var + eps) * weight + bias`` over the last dimension (the biased
    variance, as torch.nn.functional.layer_norm), rounded once to x's dtype: in float64 on the
    CPU (float64 x included, for gradcheck); on CUDA in float32 (float64 for float32 rows), N <=
    16384 (float32: 8192), and on compute capability 9.0 and up, in a cluster of CTAs, rows of
    16-byte vectors up to N = 524288 (float32: 262144). x's layouts as rmsnorm's; weight and
    bias None or contiguous [N] tensors of any float dtype. Differentiable (autograd,
    torch.compile) on the CPU and on CUDA: its backward is layernorm_backward."""
    return torch.ops.oink.layernorm.default(x, weight, bias, eps)


def layernorm_forward(
    x: torch.Tensor,
    weight: torch.Tensor | None = None,
    bias: torch.Tensor | None = None,
    eps: float = 1e-5,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """layernorm(x, weight, bias, eps), and the mean and rstd = 1/sqrt(var + eps) of every row
    (x.shape[:-1]; float32, or float64 for float64 x): what layernorm_backward takes."""
    return torch.ops.oink.layernorm_forward.default(x, weight, bias, eps)


def layernorm_backward(
    dy: torch.Tensor,
    x: torch.Tensor,
    weight: torch.Tensor | None,
    bias: torch.Tensor | None,
    mean: torch.Tensor,
    rstd: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
    """(dx, dweight, dbias) of layernorm for the upstream gradient dy, from layernorm_forward's
    mean and rstd. dweight and dbias have the weight's and bias's dtypes (None where there is
    none) and are summed in a fixed order: the same bits on every run and at any thread count.
    CUDA: N <= 262144 (float32: 131072), in a cluster of CTAs past 16384 (8192) as
    rmsnorm_backward."""
    return torch.ops.oink.layernorm_backward.default(dy, x, weight, bias, mean, rstd)


def fused_add_rms_norm(
    x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor | None, eps: float = 1e-6
) -> None:
    """In place, vLLM semantics: ``residual += x`` (rounded to the dtype), then
    ``x = rmsnorm(residual, weight, eps)`` of the rounded residual. x and residual (same shape
    and dtype, each with its own leading strides) must not share memory; weight may be None.
    Differentiable as an in-place op (x and residual must then not be leaves that require
    grad)."""
    torch.ops.oink.fused_add_rms_norm.default(x, residual, weight, eps)


def cuda_targets() -> list[str]:
    """The nvcc targets whose kernel images this build embeds (empty: built without CUDA)."""
    text = torch.ops.oink.cuda_targets.default()
    return [t for t in text.split(",") if t]


def cuda_available(device: torch.device | str | int | None = None) -> bool:
    """True when this build has CUDA kernels, PyTorch sees a GPU and one of the build's kernel
    images runs on it (``device``: default the current one). Creates no kernels, but asking
    PyTorch for the device's capability initialises CUDA."""
    if not cuda_targets() or not torch.cuda.is_available():
        return False
    major, minor = torch.cuda.get_device_capability(device)
    return bool(torch.ops.oink.serves_capability.default(major, minor))


@dataclass(frozen=True)
class Plan:
    """The launch plan oink would use for a call: a pure function of the device capability,
    dtypes, N, M, strides and alignment (never of environment variables)."""

    op: str
    variant: str  # row_in_registers | tile | streamed | cluster | two_pass | cpu
    device: str  # sm_90, sm_100, ... or cpu
    x_dtype: str
    weight_dtype: str
    M: int
    N: int
    ld_x: int
    chunk_elems: int  # elements of x per 16-byte chunk: the unit a thread owns
    vector_io: bool  # chunks move as 16-byte vectors
    threads_per_row: int  # lanes of the row's reduction layout (fixed by N and dtype)
    # registers per lane (row_in_registers: a thread holds lanes_per_thread times that) or
    # shared-memory slots (tile, streamed)
    chunks_per_thread: int
    rows_per_cta: int
    block_threads: int
    grid: int
    pdl: bool
    # with PDL: the next launch's CTAs start once this kernel's CTAs have waited (True), or as
    # they exit (False: grids that fill between half and nearly all of a wave, and streamed)
    pdl_early_trigger: bool = False
    ctas_per_sm: int = 0  # CTAs of this kernel one SM holds at once (0: not known, CPU)
    # lanes one thread plays (tile, cluster; row_in_registers on aligned rows of >= 512 lanes):
    # a row runs on threads_per_row / lanes_per_thread threads
    lanes_per_thread: int = 1
    slices: int = 1  # slices of the row's reduction (16384 16-bit elements each), by N and dtype
    cluster_ctas: int = 0  # cluster: CTAs per thread block cluster (one or two slices each)
    # tile, cluster: weight chunks a thread holds in registers from before its reduction (the rest
    # read at the store; 0: layernorm, which reads its weight and bias at the store)
    weight_held_chunks: int = 0
    slice_chunks: int = 0  # chunks of one slice (a cluster CTA's share of a row); 0 on the CPU
    stages: int = 0  # streamed: row groups in flight per CTA
    persistent: bool = False  # streamed: CTAs loop over row groups (every other schedule: one pass)
    smem_bytes: int = 0  # streamed, tile: dynamic shared memory per CTA
    ld_residual: int = 0  # the fused op's residual row stride (0: rmsnorm, no residual)
    row_dims: int = 1  # leading dimensions walked per row (1: rows with one stride)
    row_sizes: tuple[int, ...] = ()  # their sizes, outermost first
    x_strides: tuple[int, ...] = ()  # x's strides over them
    image_sass: int = 0  # the kernel image the CUDA runtime runs: SASS architecture (90: sm_90)
    image_ptx: int = 0  # ... and the PTX architecture it was compiled for (PDL needs >= 90)

    @classmethod
    def from_fields(
        cls,
        names: list[str],
        texts: list[str],
        numbers: list[int],
        row_sizes: list[int],
        x_strides: list[int],
    ) -> Plan:
        """The Plan of oink::explain's named fields (core/plan.h, plan_facts: texts, then numbers,
        then the two lists). Flags arrive as 0 or 1."""
        values = [*texts, *numbers, tuple(row_sizes), tuple(x_strides)]
        if len(names) != len(values):
            raise RuntimeError(f"oink.explain: {len(names)} field names for {len(values)} values")
        types = {f.name: f.type for f in fields(cls)}
        unknown = sorted(set(names) - set(types))
        if unknown:  # an extension newer than this Python package
            raise RuntimeError(
                f"oink.explain: the extension's plan has fields {unknown} that "
                "oink.Plan lacks: the extension and the Python package differ"
            )
        pairs = zip(names, values, strict=True)
        return cls(**{n: bool(v) if types[n] == "bool" else v for n, v in pairs})

    def __str__(self) -> str:
        io = "16-byte vectors" if self.vector_io else "element by element (unaligned or odd N)"
        rows = (
            f"row stride {self.ld_x}"
            if self.row_dims == 1
            else f"rows over leading dims {list(self.row_sizes)} with x strides "
            f"{list(self.x_strides)}"
        )
        lines = [
            f"oink {self.op} on {self.device}: {self.variant}",
            f"  x {self.x_dtype}, weight {self.weight_dtype}, M={self.M}, N={self.N}, {rows}",
        ]
        if self.variant == "streamed":
            lines += [
                f"  persistent: {self.stages} row groups in flight per CTA through shared memory "
                f"({self.smem_bytes} bytes per CTA)"
            ]
        if self.variant == "cluster":
            lines += [
                f"  one thread block cluster of {self.cluster_ctas} CTAs per row, "
                f"{'one slice' if self.slices <= self.cluster_ctas else 'two slices'} of "
                f"{self.slice_chunks * self.chunk_elems} elements each; "
                f"each thread plays {self.lanes_per_thread} of a slice's {self.threads_per_row} "
                "reduction lanes; the slices' sums meet in distributed shared memory"
            ]
            if self.weight_held_chunks < self.chunks_per_thread:
                lines += [
                    f"  each thread holds {self.weight_held_chunks} of its "
                    f"{self.chunks_per_thread} weight chunks in registers, the rest read at the "
                    "store"
                ]
        elif self.slices > 1 and self.variant != "cpu":
            lines += [f"  the row's sum is its {self.slices} slices' sums, added in slice order"]
        if self.variant == "tile":
            lines += [
                f"  one CTA per row group; each thread plays {self.lanes_per_thread} of the row's "
                f"{self.threads_per_row} reduction lanes ({self.smem_bytes} bytes of shared "
                "memory per CTA)"
            ]
        if self.variant == "row_in_registers" and self.lanes_per_thread > 1:
            lines += [
                f"  each thread plays {self.lanes_per_thread} of the row's {self.threads_per_row} "
                f"reduction lanes, {self.chunks_per_thread} chunk(s) of each in registers"
            ]
        if self.variant != "cpu":
            threads = self.threads_per_row // self.lanes_per_thread
            owned = self.chunks_per_thread
            if self.variant == "row_in_registers":
                owned *= self.lanes_per_thread
            pdl = "off"
            if self.pdl:
                pdl = "on, the next launch starts " + (
                    "after this one's wait" if self.pdl_early_trigger else "as its CTAs exit"
                )
            lines += [
                f"  grid {self.grid} CTAs x {self.block_threads} threads "
                f"({self.rows_per_cta} row(s) per CTA, {threads} threads per row"
                + (f", {self.ctas_per_sm} CTAs per SM)" if self.ctas_per_sm else ")"),
                f"  each thread owns {owned or 'a strided run of'} chunk(s) of "
                f"{self.chunk_elems} elements; I/O: {io}; PDL {pdl}",
                f"  kernel image: sm_{self.image_sass} SASS from compute_{self.image_ptx} code"
                + ("" if self.image_ptx >= 90 else " (no griddepcontrol: no PDL)"),
            ]
        return "\n".join(lines)


def set_pdl(enabled: bool) -> bool:
    """Whether later CUDA launches may use programmatic dependent launch (sm_90+; on by default):
    each kernel waits for the preceding one in the stream before touching memory, and lets the
    next one launch early (or as its CTAs exit: Plan.pdl_early_trigger). Process-wide, read when
    a call is planned (so a CUDA graph keeps the setting it was captured with). Returns the
    previous setting."""
    return bool(torch.ops.oink.set_pdl.default(bool(enabled)))


def explain(
    x: torch.Tensor,
    weight: torch.Tensor | None = None,
    op: str = "rmsnorm",
    residual: torch.Tensor | None = None,
    eps: float = 1e-6,
    bias: torch.Tensor | None = None,
) -> Plan:
    """The plan a call of `op` ("rmsnorm", "fused_add_rms_norm" or "layernorm", whose `bias` it
    takes) with these arguments would use. For the fused op without `residual`, a residual laid
    out like x is assumed. On a GPU this loads the kernel the plan selects (its image decides
    PDL)."""
    if op == "fused_add_rms_norm" and residual is None:
        residual = torch.empty_strided(x.shape, x.stride(), dtype=x.dtype, device=x.device)
    fields = torch.ops.oink.explain.default(op, x, weight, residual, eps, bias)
    return Plan.from_fields(*fields)
