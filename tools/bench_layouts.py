"""Are strided layouts full speed? oink.rmsnorm on the views models pass (QK-norm head views of a
fused QKV buffer, a transposed [B, H, S, D] view), timed beside the same rows made contiguous
(the same bytes: oink's own speed on the easy layout) and beside F.rms_norm on the view, in one
run; plus the eager host time per call, where the autograd guard of oink shows (grad mode on,
no_grad, inference_mode), against F.rms_norm's.

    python tools/bench_layouts.py [--out FILE.json]

CUDA graphs over rotating buffer sets larger than 2x the L2 (oink.bench.timing), bf16, weight of
the head dim. Prints a table; --out also writes the numbers as JSON.
"""

from __future__ import annotations

import argparse
import json
import sys

import torch
import torch.nn.functional as F

import oink
from oink.bench import timing

L2_BYTES = 60 << 20
DTYPE = torch.bfloat16


def qk_view(tokens, heads=32, kv_heads=8, head_dim=128):
    qkv = torch.randn(tokens, (heads + 2 * kv_heads) * head_dim, device="cuda", dtype=DTYPE)
    return qkv[:, : heads * head_dim].view(tokens, heads, head_dim)


def transposed_view(batch, seq, heads=32, head_dim=128):
    return torch.randn(batch, seq, heads, head_dim, device="cuda", dtype=DTYPE).transpose(1, 2)


CASES = {
    "qk_head_view T=1": lambda: qk_view(1),
    "qk_head_view T=64": lambda: qk_view(64),
    "qk_head_view T=1024": lambda: qk_view(1024),
    "qk_head_view T=16384": lambda: qk_view(16384),
    "bhsd_transposed B=1 S=4096": lambda: transposed_view(1, 4096),
    "bhsd_transposed B=4 S=1024": lambda: transposed_view(4, 1024),
}


def device_us(make_input, fn):
    """Median µs per call of fn(x_i, w) over rotating input sets."""
    probe = make_input()
    set_bytes = 2 * probe.numel() * probe.element_size()
    n_sets, calls = timing.plan_rotation(set_bytes, L2_BYTES, 64, 8 << 30, 20)
    xs = [probe] + [make_input() for _ in range(n_sets - 1)]
    w = torch.randn(probe.shape[-1], device="cuda", dtype=DTYPE)
    return timing.cuda_graph_time(lambda i: fn(xs[i], w), n_sets, calls, replays=20)["time_us"]


def host_us(fn, x, w, context):
    with context():
        return timing.host_eager_time(lambda i: fn(x, w), 1, 500)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", help="write the numbers as JSON to this file")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("bench_layouts: needs a CUDA GPU", file=sys.stderr)
        return 2
    oink_view = lambda x, w: oink.rmsnorm(x, w, 1e-6)  # noqa: E731
    f_view = lambda x, w: F.rms_norm(x, (x.shape[-1],), w, 1e-6)  # noqa: E731
    rows = []
    print(f"{'case':30} {'view µs':>9} {'dense µs':>9} {'view/dense':>10} {'F.rms_norm':>10}")
    for name, make in CASES.items():
        with torch.inference_mode():
            view = device_us(make, oink_view)
            dense = device_us(lambda make=make: make().contiguous(), oink_view)
            torch_view = device_us(make, f_view)
        rows.append({"case": name, "oink_view_us": view, "oink_dense_us": dense,
                     "torch_view_us": torch_view})  # fmt: skip
        print(f"{name:30} {view:9.2f} {dense:9.2f} {view / dense:10.3f} {torch_view:10.2f}")
    x, w = qk_view(64), torch.randn(128, device="cuda", dtype=DTYPE)
    host = {}
    for label, context in [("grad_mode", torch.enable_grad), ("no_grad", torch.no_grad),
                           ("inference_mode", torch.inference_mode)]:  # fmt: skip
        host[label] = {"oink_us": host_us(oink_view, x, w, context),
                       "torch_us": host_us(f_view, x, w, context)}  # fmt: skip
        print(f"eager host µs per call, {label:15} oink {host[label]['oink_us']:6.2f}  "
              f"F.rms_norm {host[label]['torch_us']:6.2f}")  # fmt: skip
    meta = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
            "cuda": torch.version.cuda, "oink": oink.__version__}  # fmt: skip
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"meta": meta, "device": rows, "host": host}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
