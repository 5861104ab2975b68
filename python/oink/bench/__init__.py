"""`python -m oink.bench`: oink against its peers and PyTorch, in one run.

Method (GUIDE §3): a correctness gate against float64 before any timing; device time per call from
CUDA-graph replays (median of the replays) in three regimes: hbm (rotating buffers larger than
2x L2), l2 (4 buffer sets, L2-warm) and gemm (the marginal cost in a chain of norm -> cuBLAS GEMM
layers); the device-to-device copy ceiling measured in the same run; eager host time per call for
the decode suite. `--matrix` measures the step-6 matrix (suites.matrix) in one run. Peers (Quack,
FlashInfer CUDA and CuTe-DSL, vLLM, Liger) come from their installed packages, else from the peers
kit (`--peers DIR`); one that cannot run is reported with the reason, never dropped. Without a GPU
the same command times oink's CPU kernels against PyTorch's CPU path on smaller shapes.

Modules: suites (shapes, variants, regimes, the matrix), providers (what is timed), peers (the
peers kit), gate (correctness), timing (clocks), chain (the gemm regime), runner (the loop),
ranking (best peer and ratios), env (versions), report (JSON, Markdown, summary), plots (SVG).
Lab tools that read results (the step-3 targets, a comparison with a stored reference run) are
not part of the package: `tools/bench_targets.py`, `tools/bench_compare.py` in the source tree.
"""
