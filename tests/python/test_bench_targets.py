"""The lab tools that read benchmark results, on small hand-made sessions: the target report
of steps 3, 6 and 7 (`python tools/bench_targets.py`: each verdict follows the numbers, missing
data is never reported as met), the comparison with a stored reference run
(`tools/bench_compare.py`), the Nsight Compute summary beside the peers
(`tools/profile_peers.py --summarize`) and the schedule sweep's A/B in turns (`tools/sweep_ab.py`,
with a stand-in for the sweep binary).
They live in tools/, not in the installed package, and are imported from there."""

import importlib
import json
import sys
from pathlib import Path

import pytest

TOOLS = Path(__file__).resolve().parents[2] / "tools"
sys.path.insert(0, str(TOOLS))
targets = importlib.import_module("bench_targets")
compare = importlib.import_module("bench_compare")
ab = importlib.import_module("bench_ab")
profile_peers = importlib.import_module("profile_peers")
sweep_ab = importlib.import_module("sweep_ab")


def result(suite, op, provider, n, m, us, **extra):
    row = {"suite": suite, "op": op, "provider": provider, "N": n, "M": m, "time_us": us}
    row.update(status="ok", baseline=provider not in ("oink", "oink_no_pdl", "copy"), **extra)
    return row


def write_run(path, rows):
    path.mkdir(parents=True, exist_ok=True)
    (path / "results.json").write_text(json.dumps({"results": rows}))
    return path


def by_target(verdicts):
    return {v.target: v for v in verdicts}


def test_decode_compares_oink_without_pdl_to_the_fastest_alternative(tmp_path):
    run = write_run(
        tmp_path / "run",
        [
            # N=4096: 1.6 against inductor's 2.5 here and FlashInfer's 2.0 in the reference
            result("decode", "rmsnorm", "oink_no_pdl", 4096, 1, 1.6),
            result("decode", "rmsnorm", "oink", 4096, 1, 1.1),
            result("decode", "rmsnorm", "inductor", 4096, 1, 2.5),
            # N=7168: 2.0 against inductor's 2.2: 0.91x, a miss
            result("decode", "rmsnorm", "oink_no_pdl", 7168, 1, 2.0),
            result("decode", "rmsnorm", "oink", 7168, 1, 1.45),
            result("decode", "rmsnorm", "inductor", 7168, 1, 2.2),
        ],
    )
    reference = tmp_path / "ref.json"
    reference.write_text(
        json.dumps(
            {"results": [{"op": "rmsnorm", "impl": "flashinfer", "N": 4096, "M": 1, "us": 2.0}]}
        )
    )
    v = by_target(targets.evaluate(str(run), [str(reference)]))
    decode = v["decode rmsnorm <= 0.8x the best (no PDL)"]
    assert (decode.met, decode.total) == (1, 2)  # 1.6 / 2.0 = 0.80 meets, 2.0 / 2.2 does not
    assert decode.worst.startswith("N=7168 M=1 vs inductor: 0.91x")
    assert decode.status == "missed (1 shapes)"
    pdl = v["PDL rmsnorm <= 1.5 us (M=1, N=7168)"]
    assert (pdl.met, pdl.total, pdl.status) == (1, 1, "met")


def test_ceiling_targets_take_the_worst_shape_and_overlays_replace_rows(tmp_path):
    run = write_run(
        tmp_path / "run",
        [
            result("large", "fused_add_rms_norm", "oink", 4096, 65536, 560.0, pct_ceiling=89.0),
            result("large", "fused_add_rms_norm", "oink", 7168, 65536, 910.0, pct_ceiling=97.5),
        ],
    )
    later = write_run(
        tmp_path / "later",
        [result("large", "fused_add_rms_norm", "oink", 4096, 65536, 515.0, pct_ceiling=97.1)],
    )
    name = "large fused_add_rms_norm >= 97% of the copy ceiling"
    before = by_target(targets.evaluate(str(run), []))[name]
    assert (before.met, before.total) == (1, 2) and before.worst == "N=4096 M=65536: 89%"
    after = by_target(targets.evaluate(str(run), [], [str(later)]))[name]
    assert (after.met, after.total, after.status) == (2, 2, "met")
    assert after.worst == "N=4096 M=65536: 97%"  # the closest to missing


def test_the_long_row_floor_compares_one_row_with_a_copy_of_it(tmp_path):
    run = write_run(
        tmp_path / "run",
        [
            # N=131072: 3.8 against a copy's 3.3 (1.15x: met); N=262144: 4.4 against 3.4 (1.29x)
            result("large_n", "rmsnorm", "oink", 131072, 1, 3.8),
            result("large_n", "rmsnorm", "copy", 131072, 1, 3.3),
            result("large_n", "rmsnorm", "oink", 262144, 1, 4.4),
            result("large_n", "rmsnorm", "copy", 262144, 1, 3.4),
            # M=16 is not the latency floor's shape; the fused op has no copy measured
            result("large_n", "rmsnorm", "oink", 131072, 16, 9.0),
            result("large_n", "rmsnorm", "copy", 131072, 16, 5.0),
            result("large_n", "fused_add_rms_norm", "oink", 131072, 1, 4.9),
        ],
    )
    v = by_target(targets.evaluate(str(run), []))
    rms = v["large_n rmsnorm M=1 within 1.2x of a copy of the same rows"]
    assert (rms.met, rms.total) == (1, 2)
    assert rms.worst == "N=262144 M=1: 1.29x the copy"
    fused = v["large_n fused_add_rms_norm M=1 within 1.2x of a copy of the same rows"]
    assert fused.status == "no data"


def test_variant_runs_compare_oink_with_itself_and_absent_data_is_not_met(tmp_path):
    run = write_run(
        tmp_path / "run",
        [
            result("decode", "rmsnorm", "oink", 4096, 1, 2.00),
            result("decode", "rmsnorm", "oink", 4096, 4, 2.00),
        ],
    )
    write_run(
        tmp_path / "run" / "pad",
        [
            result("decode", "rmsnorm", "oink", 4096, 1, 2.08),  # +4%: within 5%
            result("decode", "rmsnorm", "oink", 4096, 4, 2.12),  # +6%: a miss
        ],
    )
    v = by_target(targets.evaluate(str(run), []))
    pad = v["padded rows within 5% of the main run"]
    assert (pad.met, pad.total) == (1, 2)
    assert pad.worst == "rmsnorm oink N=4096 M=4: 1.060x"
    for name in (
        "fp32 weight within 5% of the main run",
        "large_n rmsnorm >= 95% of the copy ceiling at M >= 1024",
    ):
        assert v[name].total == 0 and v[name].status == "no data"


def test_the_command_prints_one_line_per_target(tmp_path, capsys):
    run = write_run(tmp_path / "run", [result("decode", "rmsnorm", "oink", 7168, 1, 1.4)])
    assert targets.main([str(run)]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == len(targets.evaluate(str(run), []))
    assert any("PDL rmsnorm" in line and "met" in line for line in lines)


def test_compare_prints_ours_over_the_reference_per_provider(tmp_path, capsys):
    ours = tmp_path / "results.json"
    rows = [
        result("decode", "rmsnorm", "F.rms_norm", 4096, 1, 2.2, dtype="torch.bfloat16"),
        result("decode", "rmsnorm", "F.rms_norm", 4096, 4, 3.0, dtype="torch.bfloat16"),
        result("decode", "rmsnorm", "inductor", 7168, 1, 5.0, dtype="torch.bfloat16"),
    ]
    for r in rows:
        r.update(weight_dtype=r["dtype"], pad=0)
    ours.write_text(json.dumps({"results": rows, "copy_ceiling": {"GBps": 4290.0}, "env": {}}))
    reference = tmp_path / "ref.json"
    ref_rows = [
        {"op": "rmsnorm", "impl": "F.rms_norm", "N": 4096, "M": 1, "us": 2.0},  # 1.10x
        {"op": "rmsnorm", "impl": "F.rms_norm", "N": 4096, "M": 4, "us": 3.0},  # 1.00x
    ]
    reference.write_text(json.dumps({"results": ref_rows}))
    assert compare.main([str(ours), str(reference), "--tol", "0.05"]) == 0
    out = capsys.readouterr().out
    assert "F.rms_norm" in out and "inductor" not in out  # no reference for inductor
    assert "shapes off by more than 5%: 1" in out
    assert "N=4096 M=1: 2.20 us vs 2.00 us (1.10x)" in out


def test_the_lab_tools_are_not_in_the_package():
    import oink.bench

    package = Path(oink.bench.__file__).parent
    assert not (package / "targets.py").exists() and not (package / "compare.py").exists()


def test_a_matrix_run_holds_the_warm_regime_and_the_variants_in_one_file(tmp_path):
    def row(provider, us, regime="hbm", variant="bf16", suite="decode"):
        r = result(suite, "rmsnorm", provider, 4096, 1, us)
        r.update(regime=regime, variant=variant)
        return r

    run = write_run(
        tmp_path / "run",
        [
            row("oink_no_pdl", 1.6),
            row("inductor", 2.5),
            row("oink_no_pdl", 1.6, regime="l2"),
            row("inductor", 1.8, regime="l2"),  # warm: 1.6 / 1.8 = 0.89x, a miss
            row("oink", 1.0),
            row("oink", 1.0, regime="gemm"),  # never taken for the hbm rows
            row("oink", 1.03, variant="bf16-pad64", suite="variants"),
        ],
    )
    v = by_target(targets.evaluate(str(run), []))
    decode = v["decode rmsnorm <= 0.8x the best (no PDL)"]
    assert (decode.met, decode.total) == (0, 1) and decode.worst.endswith("0.89x")
    pad = v["padded rows within 5% of the main run"]
    assert (pad.met, pad.total) == (1, 1) and pad.worst == "rmsnorm oink N=4096 M=1: 1.030x"
    assert v["fp32 weight within 5% of the main run"].status == "no data"
    hbm = targets.load_run(str(run / "results.json"))
    assert hbm[("decode", "rmsnorm", "oink", 4096, 1)]["time_us"] == 1.0


def test_steps_6_and_7_compare_oink_with_the_best_peer_of_the_same_run(tmp_path):
    def row(suite, provider, n, m, us, regime="hbm", variant="bf16"):
        r = result(suite, "rmsnorm", provider, n, m, us)
        r.update(regime=regime, variant=variant)
        return r

    run = write_run(
        tmp_path / "run",
        [
            # decode, isolated: Quack 2.2 and Liger 2.0 against oink's 1.6: 1.25x
            row("decode", "oink", 4096, 64, 1.6),
            row("decode", "quack", 4096, 64, 2.2),
            row("decode", "liger", 4096, 64, 2.0),
            row("decode", "inductor", 4096, 64, 1.0),  # a baseline, not a peer
            # between GEMMs: Liger 2.0 against 2.5: 0.80x, the worst cell, and M=64's target
            row("decode", "oink", 4096, 64, 2.5, regime="gemm"),
            row("decode", "liger", 4096, 64, 2.0, regime="gemm"),
            # mid M=1024 against FlashInfer-CuTe: 6.9 / 6.0 = 1.15x, met
            row("mid", "oink", 4096, 1024, 6.0),
            row("mid", "flashinfer_cute", 4096, 1024, 6.9),
            # a variant, by its own variant's rows only: 1.05x
            row("variants", "oink", 7168, 256, 4.0, variant="fp16"),
            row("variants", "vllm", 7168, 256, 4.2, variant="fp16"),
            row("variants", "vllm", 7168, 256, 3.0, variant="bf16-w32"),  # no oink row there
            # long rows: one cell under the best peer (0.95x), N > 16384 out of step 6
            row("large_n", "oink", 131072, 1, 3.0),
            row("large_n", "quack", 131072, 1, 3.6),
            row("large_n", "oink", 131072, 4096, 570.0) | {"pct_ceiling": 87.7},
            row("large_n", "quack", 131072, 4096, 541.5),
        ],
    )
    v = by_target(targets.evaluate(str(run), []))
    level = v["step 6 rmsnorm >= 1.0x the best peer (N <= 16384, every regime)"]
    assert (level.met, level.total) == (3, 4)
    assert level.worst == "gemm bf16 decode N=4096 M=64 vs liger: 0.80x"
    geomean = v["step 6 rmsnorm geomean >= 1.10x the best peer (N <= 16384)"]
    expected = (1.25 * 0.8 * 1.15 * 1.05) ** 0.25
    assert geomean.worst == f"4 cells: {expected:.2f}x" and geomean.status == "missed (1 shapes)"
    long_rows = v["step 7 rmsnorm long rows >= 1.0x the best peer"]
    assert (long_rows.met, long_rows.total) == (1, 2)
    assert long_rows.worst == "large_n N=131072 M=4096 vs quack: 0.95x"
    mid = v["step 6 mid rmsnorm M=1024 >= 1.10x FlashInfer-CuTe"]
    assert (mid.met, mid.total, mid.status) == (1, 1, "met")
    gemm = v["step 6 rmsnorm M=64 between GEMMs >= 1.10x Liger"]
    assert (gemm.met, gemm.total) == (0, 1) and gemm.worst == "N=4096 M=64: 0.80x"
    fused = v["step 6 fused_add_rms_norm >= 1.0x the best peer (N <= 16384, every regime)"]
    assert fused.status == "no data"


def test_ab_takes_the_median_of_each_sides_turns_and_lists_the_shapes_that_moved(tmp_path, capsys):
    def turn(side, k, oink_us, copy_us):
        rows = [
            result("large_n", "rmsnorm", "oink", 131072, 4096, oink_us, variant="bf16"),
            result("large_n", "rmsnorm", "copy", 131072, 4096, copy_us, variant="bf16"),
            result("large_n", "rmsnorm", "oink", 32768, 1, 3.5, variant="bf16"),
        ]
        rows.append(dict(rows[0], status="error", time_us=None, N=65536))  # never compared
        write_run(tmp_path / side / str(k), rows)

    for k, (a_us, b_us) in enumerate([(600.0, 540.0), (620.0, 560.0), (900.0, 545.0)], 1):
        turn("A", k, a_us, 500.0)
        turn("B", k, b_us, 505.0)
    a, b = ab.load_turns(str(tmp_path / "A")), ab.load_turns(str(tmp_path / "B"))
    key = ("large_n", "bf16", "rmsnorm", "hbm", "oink", 131072, 4096)
    assert (a[key], b[key]) == (620.0, 545.0)  # medians: one slow turn does not count
    assert not any(k[5] == 65536 for k in a)
    lines = ab.compare(a, b, tol=0.03)
    assert "oink 0.938x (2)" in lines[1] and "copy 1.010x (1)" in lines[1]
    assert lines[2] == "Shapes off by more than 3%: 1"
    assert "N=131072 M=4096: 620.00 -> 545.00 us (0.879x)" in lines[3]
    assert ab.main([str(tmp_path / "A"), str(tmp_path / "B")]) == 0
    assert ab.main([str(tmp_path / "A"), str(tmp_path / "nothing")]) == 1
    assert "no results.json" in capsys.readouterr().err


NCU_KERNEL = """  {name} ({ctas}, 1, 1)x({block}, 1, 1), Context 1, Stream 7, Device 0, CC 9.0

    NVTX Push/Pop Stack for Thread 969:
      <default domain>
        <0,{case}>
    Section: GPU Speed Of Light Throughput
    ----------------------- ----------- ------------
    DRAM Throughput                   %        {dram}
    Duration                         {unit}       {duration}
    Instructions Executed                         inst  {instr}
    Grid Size                                                 {grid}
    Block Size                                                   {block}
    Registers Per Thread             register/thread              {regs}
    Stall Membar                    inst         {membar}
"""


def test_profile_summary_reads_each_kernel_of_an_ncu_report():
    report = "==PROF== Connected to process 1\n" + "".join(
        NCU_KERNEL.format(**k)
        for k in (
            dict(
                name="void oink::norm_cluster_kernel<bf16>(oink::KernelParams)",
                ctas=32768,
                grid="32,768",
                block=256,
                case="oink_rmsnorm_131072_4096",
                dram="72.34",
                unit="ms",
                duration="1.22",
                instr="298,582,016",
                regs=62,
                membar="1.22",
            ),
            dict(
                name="kernel_cutlass_quack",
                ctas=32768,
                grid="32,768",
                block=256,
                case="quack_rmsnorm_131072_4096",
                dram="78.80",
                unit="us",
                duration="560.19",
                instr="180,511,908",
                regs=70,
                membar="0",
            ),
        )  # fmt: skip
    )
    rows = profile_peers.summarize(report)
    assert [r["case"] for r in rows] == ["oink_rmsnorm_131072_4096", "quack_rmsnorm_131072_4096"]
    oink_row, quack_row = rows
    assert oink_row["us"] == "1220.00" and quack_row["us"] == "560.19"  # ms and µs, both in µs
    assert oink_row["DRAM%"] == "72.34" and oink_row["regs"] == "62"
    assert oink_row["instr/warp"] == str(round(298582016 / (32768 * 8)))
    assert oink_row["instr/row"] == str(298582016 // 4096)
    assert oink_row["membar"] == "1.22" and quack_row["membar"] == "0"
    assert oink_row["occ%"] == "-"  # a section the report does not hold
    assert profile_peers.summarize("no kernels here") == []


def test_clock_summary_takes_medians_of_the_samples_that_parse():
    """--clocks reads nvidia-smi's CSV (SM MHz, memory MHz, W, C): medians, the SM clock's
    minimum, unparsable lines left out; no sample at all is an error, not zeros."""
    lines = [
        "1980, 3201, 610.5, 51",
        "1755, 3201, 700.0, 53",
        "[N/A], 3201, 650.0, 52",  # a field nvidia-smi could not read
        "1830, 3201, 655.0, 52",
        "1830, 32",  # the last line, cut by the sampler's end
    ]
    c = profile_peers.clock_summary(lines)
    assert c["samples"] == 3
    assert c["sm_mhz"] == 1830 and c["sm_mhz_min"] == 1755
    assert c["mem_mhz"] == 3201 and c["power_w"] == 655.0 and c["temp_c"] == 52
    with pytest.raises(ValueError, match="no nvidia-smi sample"):
        profile_peers.clock_summary(["[N/A], [N/A], [N/A], [N/A]"])


def test_profile_clocks_must_not_be_negative(capsys):
    with pytest.raises(SystemExit):
        profile_peers.main(["--clocks", "-1", "--case", "rmsnorm:4096:1:quack"])
    assert "--clocks: expected seconds >= 0, got -1" in capsys.readouterr().err


def test_profile_case_names_what_it_expected():
    assert profile_peers.parse_case("fused:131072:4096:quack,flashinfer_cute") == (
        "fused",
        131072,
        4096,
        ["quack", "flashinfer_cute"],
    )
    for bad in ("rmsnorm:4096:1", "softmax:4096:1:quack", "rmsnorm:x:1:quack"):
        try:
            profile_peers.parse_case(bad)
        except Exception as e:  # argparse.ArgumentTypeError
            assert "expected OP:N:M:PEER" in str(e) and repr(bad) in str(e)
        else:
            raise AssertionError(f"{bad!r} was accepted")


def sweep_line(op, n, m, candidate, us, schedule):
    return f"{op} {n} {m} {candidate} {us:.2f} 3000 op={op} variant={schedule} M={m} N={n}"


def fake_sweep(path, times):
    """A stand-in for oink_schedule_sweep OP N M [VARIANT]: prints a hand-made plan's line and the
    planner's two, with the µs of `times[(op, N, M)]`; a variant (w32, f32, nw) is named in the
    op's column as the sweep names it (rmsnorm/w32)."""
    path.write_text(
        "#!/usr/bin/env python3\n"
        "import sys\n"
        f"times = {times!r}\n"
        "op, n, m = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])\n"
        "if (op, n, m) not in times:\n"
        "    sys.exit('no such case')\n"
        "us, schedule = times[(op, n, m)]\n"
        "op += '/' + sys.argv[4] if len(sys.argv) > 4 else ''\n"
        "print(f'{op} {n} {m} hand_made 99.00 1 op={op} variant=two_pass')\n"
        "print(f'{op} {n} {m} planner {us:.2f} 1 op={op} variant={schedule}')\n"
        "print(f'{op} {n} {m} planner_no_pdl {us + 1:.2f} 1 op={op} variant={schedule}')\n"
    )
    path.chmod(0o755)
    return str(path)


def test_sweep_ab_table_compares_each_build_with_the_first():
    # (turn, build, µs of the cluster case, µs of the tile case)
    turns = [(1, "main", 570.0, 6.0), (1, "new", 560.0, 6.0), (2, "main", 580.0, 6.0)]
    turns.append((2, "new", 570.0, 6.6))
    log = []
    for turn, name, cluster_us, tile_us in turns:
        log.append(f"=== turn {turn}: {name}")
        log.append(sweep_line("rmsnorm", 131072, 4096, "planner", cluster_us, "cluster"))
        log.append(sweep_line("rmsnorm", 4096, 1024, "planner", tile_us, "tile"))
    log.append("a line that is no case")
    lines = sweep_ab.table(log)
    cluster = next(line for line in lines if "131072" in line)
    assert "570.00  580.00" in cluster and "560.00  570.00" in cluster
    assert cluster.split()[-1] == f"{575.0 / 565.0:.3f}"  # the means' ratio: new is faster
    tile = next(line for line in lines if " 4096 " in line and "tile" in line)
    assert tile.split()[-1] == f"{6.0 / 6.3:.3f}"
    assert (
        f"geomean main/new: {575.0 / 565.0:.3f} over 1 cases (cluster, rmsnorm, planner)" in lines
    )


def test_sweep_ab_table_needs_two_builds():
    with pytest.raises(ValueError, match="at least two builds"):
        sweep_ab.table(["=== turn 1: main", sweep_line("rmsnorm", 1, 1, "planner", 1.0, "tile")])


def test_sweep_ab_runs_the_builds_in_turns(tmp_path, capsys):
    a = fake_sweep(tmp_path / "a", {("rmsnorm", 32768, 1): (2.6, "cluster")})
    b = fake_sweep(tmp_path / "b", {("rmsnorm", 32768, 1): (2.4, "cluster")})
    rc = sweep_ab.main(
        [
            "run",
            f"main={a}",
            f"new={b}",
            "--ops",
            "rmsnorm",
            "--n",
            "32768",
            "--m",
            "1",
            "--turns",
            "2",
        ]
    )
    assert rc == 0
    out = capsys.readouterr().out.splitlines()
    headers = [line for line in out if line.startswith("===")]
    assert headers == ["=== turn 1: main", "=== turn 1: new", "=== turn 2: main", "=== turn 2: new"]
    assert not any("hand_made" in line for line in out)  # the planner's lines only
    assert len(out) == 4 + 4 * 2
    last = sweep_ab.table(out)
    assert f"geomean main/new: {2.6 / 2.4:.3f} over 1 cases (cluster, rmsnorm, planner)" in last


def test_sweep_ab_passes_the_dtype_variant_to_every_case(tmp_path, capsys):
    a = fake_sweep(tmp_path / "a", {("rmsnorm", 32768, 4096): (163.5, "cluster")})
    b = fake_sweep(tmp_path / "b", {("rmsnorm", 32768, 4096): (144.1, "cluster")})
    args = ["run", f"main={a}", f"new={b}", "--ops", "rmsnorm", "--n", "32768", "--m", "4096"]
    assert sweep_ab.main([*args, "--variant", "w32", "--turns", "1"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in out if not line.startswith("===")] == ["rmsnorm/w32"] * 4
    assert "over 1 cases (cluster, rmsnorm/w32, planner)" in sweep_ab.table(out)[-2]
    with pytest.raises(SystemExit):
        sweep_ab.main([*args, "--variant", "fp8"])
    assert "invalid choice: 'fp8'" in capsys.readouterr().err


def test_sweep_ab_names_what_it_expected(tmp_path, capsys):
    a = fake_sweep(tmp_path / "a", {("rmsnorm", 32768, 1): (2.6, "cluster")})
    assert sweep_ab.main(["run", f"main={a}"]) == 2
    assert "at least two builds" in capsys.readouterr().err
    assert sweep_ab.main(["run", f"main={a}", f"main={a}"]) == 2
    assert "'main' given twice" in capsys.readouterr().err
    assert sweep_ab.main(["run", f"main={a}", a]) == 2
    assert "expected NAME=BINARY" in capsys.readouterr().err
    assert sweep_ab.main(["run", f"main={a}", f"new={a}", "--n", "32768,x"]) == 2
    assert "--n: expected a comma list, got '32768,x'" in capsys.readouterr().err
    assert sweep_ab.main(["run", f"main={a}", f"new={a}", "--m", ","]) == 2
    assert "--m: the list is empty" in capsys.readouterr().err
    # A case the binary fails on stops the run and names the build and the case.
    rc = sweep_ab.main(
        ["run", f"main={a}", f"new={a}", "--ops", "rmsnorm", "--n", "65536", "--m", "1"]
    )
    assert rc == 1
    assert "main rmsnorm N=65536 M=1 failed" in capsys.readouterr().err
