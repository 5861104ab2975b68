"""`python tools/peers.py FOLDER -- [oink-bench arguments]`: the bench with peers loaded from a
folder prepared on a machine with network (for a GPU box without one). FOLDER holds a module
oink_peers.py with setup(site_dir, build_dir, log) and providers() -> {name: peer}, each peer's
rmsnorm and fused_add taken as the bench's cases (oink/bench/providers.py); a kit peer's cases
join the installed peer's of that name (its softmax and loss cases stay).
Developer tooling only: the wheel's bench uses installed peers."""

from __future__ import annotations

import importlib.util
import sys
import tempfile
from pathlib import Path


def cases_of(peer, eps: float) -> dict:
    """A kit peer as the bench's cases: the kit's rmsnorm(x, w, eps) -> y and fused_add(x, r, w,
    eps) -> (y, residual) as the bench's rmsnorm(x, w) -> (y,) and fused_add_rms_norm(x, r, w).
    What the kit says a peer cannot take (a weight of another dtype than x's, rows longer than
    its max_n) raises before the peer runs: the bench records the shape as an error with that
    note instead of timing a kernel that reads the weight as the wrong type or past its buffer."""
    if isinstance(peer, dict):  # a kit that already speaks the bench's cases
        return peer
    max_n = getattr(peer, "max_n", None) or {}

    def checked(kit_name, fn):
        def call(x, *rest):
            w = rest[-1]
            if getattr(peer, "needs_weight_in_x_dtype", False) and w is not None:
                if w.dtype != x.dtype:
                    raise TypeError(f"{peer.name} takes a weight of x's dtype only ({x.dtype})")
            limit = max_n.get(kit_name)
            if limit is not None and x.shape[-1] > limit:
                raise ValueError(f"{peer.name}: rows of N={x.shape[-1]} > its limit {limit}")
            return fn(x, *rest)

        return call

    rms = checked("rmsnorm", lambda x, w: (peer.rmsnorm(x, w, eps),))
    fused = checked("fused_add", lambda x, r, w: tuple(peer.fused_add(x, r, w, eps)))
    return {"rmsnorm": rms, "fused_add_rms_norm": fused}


def main() -> int:
    argv = sys.argv[1:]
    cut = argv.index("--") if "--" in argv else len(argv)
    folder = Path(argv[0] if cut else ".peers").resolve()
    sys.dont_write_bytecode = True  # nothing written inside the folder
    sys.path.insert(0, str(folder))
    spec = importlib.util.spec_from_file_location("oink_peers", folder / "oink_peers.py")
    kit = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = kit  # before it runs: its dataclasses look their module up there
    spec.loader.exec_module(kit)
    kit.setup(
        site_dir=tempfile.mkdtemp(prefix="oink-peers-"),
        build_dir=str(folder) + "-build",
        log=lambda m: print(m, file=sys.stderr),
    )
    from oink.bench import __main__ as bench
    from oink.bench import providers

    peers = kit.providers()
    providers.EXTRA_PEERS.update({n: cases_of(peer, providers.EPS) for n, peer in peers.items()})
    return bench.main(argv[cut + 1 :])


if __name__ == "__main__":
    raise SystemExit(main())
