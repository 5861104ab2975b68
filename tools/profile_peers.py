"""Nsight Compute on oink and its peers at the same shapes: what a peer's kernel does differently
(instructions per row, occupancy, stalls, DRAM and L2 throughput) where oink trails it. A lab tool,
not part of the installed package; it needs a CUDA build of oink and the peers kit.

On the GPU machine (carry .peers and .peers-build, docs: ../shared/peers/README.md):

    ncu --profile-from-start off --nvtx --section SpeedOfLight --section LaunchStats \\
        --section Occupancy --section SchedulerStats --section WarpStateStats \\
        --section MemoryWorkloadAnalysis --print-details all \\
        python3 tools/profile_peers.py --case rmsnorm:131072:4096:quack,flashinfer_cute > ncu.txt

Each provider is called a few times first (the CuTe-DSL peers compile per shape), then once more
inside a profiler range named provider_op_N_M (NVTX), so that ncu profiles that call's kernels
only. Back-to-back times outside the profiler are printed too (µs per call, warm, for orientation;
the benchmark is `oink-bench`). Then, anywhere:

    python3 tools/profile_peers.py --summarize ncu.txt

prints one line per profiled kernel: duration, DRAM / L2 / SM throughput, registers, dynamic
shared memory, achieved occupancy, eligible warps, instructions per warp and per row, the main
stall reasons (bench/results/nvidia-h200/profile_peers.txt is one).

Nsight Compute locks the clocks (SM 1.48 GHz on an H200); the bench runs at the GPU's own, and
`ncu --clock-control none ...` profiles at those. Where the two disagree on who is faster,
`--clocks SECONDS` (no ncu) calls each provider back to back for that long while nvidia-smi
samples the SM and memory clocks, the power draw and the temperature every 50 ms, and prints µs
a call beside their medians (the SM clock's minimum too):

    python3 tools/profile_peers.py --clocks 3 --case rmsnorm:131072:4096:quack

It is meant for calls far longer than their launch's host time (large and long-row batches):
shorter ones leave the GPU idle between launches."""

from __future__ import annotations

import argparse
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

OPS = ("rmsnorm", "fused")


def parse_case(text: str) -> tuple[str, int, int, list[str]]:
    """OP:N:M:PEER[,PEER...] -> (op, N, M, peers); oink is always profiled first."""
    parts = text.split(":")
    if len(parts) != 4 or parts[0] not in OPS or not parts[1].isdigit() or not parts[2].isdigit():
        raise argparse.ArgumentTypeError(
            f"expected OP:N:M:PEER[,PEER...] with OP one of {', '.join(OPS)}, got {text!r}"
        )
    return parts[0], int(parts[1]), int(parts[2]), [p for p in parts[3].split(",") if p]


# nvidia-smi's fields for --clocks, in the order of its CSV columns.
SMI_FIELDS = ("clocks.sm", "clocks.mem", "power.draw", "temperature.gpu")


def clock_summary(lines: list[str]) -> dict[str, float]:
    """nvidia-smi's samples of SMI_FIELDS (`--format=csv,noheader,nounits`: one line each) -> the
    median of each field and the SM clock's minimum; lines that do not parse ('[N/A]', a partial
    last line) are left out, and no sample at all is an error."""
    samples = []
    for line in lines:
        fields = [f.strip() for f in line.split(",")]
        try:
            values = [float(f) for f in fields]
        except ValueError:
            continue
        if len(values) == len(SMI_FIELDS):
            samples.append(values)
    if not samples:
        raise ValueError(f"no nvidia-smi sample of {', '.join(SMI_FIELDS)} in {len(lines)} lines")
    sm, mem, power, temp = (statistics.median(column) for column in zip(*samples, strict=True))
    return {
        "sm_mhz": sm,
        "sm_mhz_min": min(s[0] for s in samples),
        "mem_mhz": mem,
        "power_w": power,
        "temp_c": temp,
        "samples": len(samples),
    }


def run_with_clocks(call, args, seconds: float) -> tuple[float, dict[str, float]]:
    """Calls call(*args) back to back for `seconds` while nvidia-smi samples the current device:
    (µs a call, clock_summary of the samples)."""
    import torch

    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    uuid = str(getattr(props, "uuid", "") or "")
    ident = uuid if uuid.startswith("GPU-") else (f"GPU-{uuid}" if uuid else "0")
    smi = subprocess.Popen(
        ["nvidia-smi", f"--id={ident}", f"--query-gpu={','.join(SMI_FIELDS)}",
         "--format=csv,noheader,nounits", "-lms", "50"],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
    )  # fmt: skip
    try:
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        calls, begun = 0, time.perf_counter()
        start.record()
        while time.perf_counter() - begun < seconds:
            for _ in range(50):
                call(*args)
            calls += 50
            torch.cuda.synchronize()  # the host's clock follows the GPU's work
        end.record()
        torch.cuda.synchronize()
    finally:
        smi.terminate()
        out, _ = smi.communicate(timeout=10)
    try:
        clocks = clock_summary(out.splitlines())
    except ValueError as e:
        raise RuntimeError(f"nvidia-smi --id={ident} sampled nothing readable: {e}") from e
    return start.elapsed_time(end) * 1e3 / calls, clocks


def profile(cases, kit: Path, build: Path, clocks: float = 0.0) -> int:
    import torch

    sys.path.insert(0, str(kit))
    sys.dont_write_bytecode = True  # nothing written inside the kit
    import oink_peers

    import oink

    oink_peers.setup(tempfile.mkdtemp(), str(build))
    peers = oink_peers.providers()
    for name, why in oink_peers.unavailable().items():
        print(f"peer {name} unavailable: {why}", flush=True)
    eps = 1e-6
    for op, n, m, names in cases:
        g = torch.Generator(device="cuda").manual_seed(0)
        x = torch.randn(m, n, device="cuda", dtype=torch.bfloat16, generator=g)
        r = torch.randn(m, n, device="cuda", dtype=torch.bfloat16, generator=g)
        w = torch.randn(n, device="cuda", dtype=torch.bfloat16, generator=g)
        full = "rmsnorm" if op == "rmsnorm" else "fused_add_rms_norm"
        plan = oink.explain(x, w, op=full, residual=None if op == "rmsnorm" else r)
        print(f"oink's plan, {op} N={n} M={m}: {plan}", flush=True)
        for name in ["oink", *names]:
            if name == "oink":
                call = oink.rmsnorm if op == "rmsnorm" else oink.fused_add_rms_norm
            elif name in peers:
                call = peers[name].rmsnorm if op == "rmsnorm" else peers[name].fused_add
            else:
                print(f"== {name}: not available, skipped", flush=True)
                continue
            args = (x, w, eps) if op == "rmsnorm" else (x, r, w, eps)
            for _ in range(3):
                call(*args)
            torch.cuda.synchronize()
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(20):
                call(*args)
            end.record()
            torch.cuda.synchronize()
            us = start.elapsed_time(end) * 1e3 / 20
            print(f"== {name} {op} N={n} M={m}: {us:.1f} us a call (back to back)", flush=True)
            if clocks > 0:
                us, c = run_with_clocks(call, args, clocks)
                print(
                    f"== {name} {op} N={n} M={m}: {us:.2f} us a call over {clocks:g} s; SM "
                    f"{c['sm_mhz']:.0f} MHz (min {c['sm_mhz_min']:.0f}), memory {c['mem_mhz']:.0f} "
                    f"MHz, {c['power_w']:.0f} W, {c['temp_c']:.0f} C ({c['samples']} samples)",
                    flush=True,
                )
                continue
            torch.cuda.nvtx.range_push(f"{name}_{op}_{n}_{m}")
            torch.cuda.profiler.start()
            call(*args)
            torch.cuda.synchronize()
            torch.cuda.profiler.stop()
            torch.cuda.nvtx.range_pop()
    return 0


# (ncu metric name, column): the summary's columns, in order.
COLUMNS = (
    ("Duration", "us"),
    ("DRAM Throughput", "DRAM%"),
    ("L2 Cache Throughput", "L2%"),
    ("Compute (SM) Throughput", "SM%"),
    ("Registers Per Thread", "regs"),
    ("Dynamic Shared Memory Per Block", "dsmem KB"),
    ("Achieved Occupancy", "occ%"),
    ("Eligible Warps Per Scheduler", "eligible"),
    ("Stall Long Scoreboard", "long sb"),
    ("Stall Barrier", "barrier"),
    ("Stall Membar", "membar"),
    ("Cluster Size", "cluster"),
)


def summarize(text: str) -> list[dict[str, str]]:
    """One row per profiled kernel of an ncu report printed with --nvtx: the NVTX range's name
    (provider_op_N_M), the columns above, instructions per warp and per row."""
    rows = []
    # A kernel's block starts with a line "  name (grid)x(block), Context ...".
    blocks = re.split(r"\n(?=  \S.*\(\d+, \d+, \d+\)x\(\d+, \d+, \d+\))", text)
    for block in blocks[1:]:
        label = re.search(r"<\d+,(\w+)>", block)
        if label is None:
            continue
        row = {"case": label.group(1)}

        def metric(name: str, block: str = block) -> tuple[str, str] | None:
            found = re.search(r"\n\s+" + re.escape(name) + r"\s+(\S+)?\s+([\d,.]+)(?:\n|$)", block)
            return (found.group(1) or "", found.group(2).replace(",", "")) if found else None

        for name, column in COLUMNS:
            found = metric(name)
            value = found[1] if found else "-"
            if found and name == "Duration":
                value = (
                    f"{float(value) * {'ms': 1e3, 'us': 1.0, 'ns': 1e-3}.get(found[0], 1.0):.2f}"
                )
            row[column] = value
        grid, threads, instr = (
            metric("Grid Size"),
            metric("Block Size"),
            metric("Instructions Executed"),
        )
        m = int(row["case"].rsplit("_", 1)[1]) if row["case"].rsplit("_", 1)[1].isdigit() else 0
        if grid and threads and instr:
            warps = int(grid[1]) * int(threads[1]) // 32
            row["instr/warp"] = f"{int(instr[1]) / warps:.0f}"
            row["instr/row"] = f"{int(instr[1]) // m}" if m else "-"
        rows.append(row)
    return rows


def print_summary(rows: list[dict[str, str]]) -> None:
    columns = [c for _, c in COLUMNS] + ["instr/warp", "instr/row"]
    print(f"{'provider_op_N_M':38}" + "".join(f"{c:>11}" for c in columns))
    for row in rows:
        print(f"{row['case']:38}" + "".join(f"{row.get(c, '-'):>11}" for c in columns))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--case", type=parse_case, action="append", metavar="OP:N:M:PEERS",
                    help="profile oink and these peers (comma list) on bf16 [M, N] rows; "
                    "repeatable")  # fmt: skip
    ap.add_argument("--peers", type=Path, default=Path(".peers"), help="a prepared peers kit")
    ap.add_argument("--peers-build", type=Path, default=Path(".peers-build"))
    ap.add_argument("--clocks", type=float, default=0.0, metavar="SECONDS",
                    help="instead of the profiler range: each provider back to back for SECONDS "
                    "beside nvidia-smi's clocks and power")  # fmt: skip
    ap.add_argument("--summarize", type=Path, metavar="NCU_OUTPUT",
                    help="summarize an ncu report instead of profiling")  # fmt: skip
    args = ap.parse_args(argv)
    if args.summarize is not None:
        rows = summarize(args.summarize.read_text())
        if not rows:
            print(f"{args.summarize}: no profiled kernel inside an NVTX range", file=sys.stderr)
            return 1
        print_summary(rows)
        return 0
    if not args.case:
        ap.error("give --case OP:N:M:PEERS (repeatable) or --summarize NCU_OUTPUT")
    if args.clocks < 0:
        ap.error(f"--clocks: expected seconds >= 0, got {args.clocks:g}")
    return profile(args.case, args.peers, args.peers_build, args.clocks)


if __name__ == "__main__":
    sys.exit(main())
