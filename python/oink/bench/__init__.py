"""`python -m oink.bench`: oink against PyTorch and the other kernel libraries, in one run.

Method (GUIDE §3): a correctness gate against float64 before any timing; device time per call from
CUDA-graph replays over rotating buffers (median of the replays); the device-to-device copy
ceiling measured in the same run; eager host time per call for the decode suite. Without a GPU the
same command times oink's CPU kernels against PyTorch's CPU path on smaller shapes.

Modules: suites (shapes), providers (what is timed), gate (correctness), timing (clocks),
runner (the loop), env (versions), report (JSON, Markdown, summary), plots (SVG). Lab tools that
read results (the step-3 targets, a comparison with a stored reference run) are not part of the
package: `tools/bench_targets.py`, `tools/bench_compare.py` in the source tree.
"""
