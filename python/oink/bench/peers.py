"""The peers kit (../shared/peers, prepared into `.peers`): the peers that are not installed, set
up on a machine without network (wheels installed into a temporary folder, two extensions built).

    kit = load("/path/.peers", build_dir=".peers-build")   # -> (specs, unavailable, status)

`oink_peers.setup(site_dir, build_dir)` installs into site_dir (a new temporary folder here) and
builds into build_dir (reused between runs: a cached build loads without a compile); it never
writes inside the kit, and the kit's modules are imported without bytecode for the same reason.
"""

from __future__ import annotations

import importlib.util
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

DEFAULT_DIR = ".peers"
DEFAULT_BUILD = ".peers-build"
HEARTBEAT_S = 15.0


def default_dir(cwd: Path | None = None) -> Path | None:
    """`.peers` in the current directory when it exists (a prepared kit), else None."""
    path = (cwd or Path.cwd()) / DEFAULT_DIR
    return path if (path / "oink_peers.py").is_file() else None


def import_kit(kit_dir: Path):
    """The kit's oink_peers module from kit_dir (always that file, even if another kit's module
    was imported before in this process)."""
    source = kit_dir / "oink_peers.py"
    if not source.is_file():
        raise FileNotFoundError(f"{source} not found: is {kit_dir} a prepared peers kit?")
    # No __pycache__ inside the kit, for the rest of the process: the kit and FlashInfer's CuTe
    # modules under it import more of themselves lazily, on first call.
    sys.dont_write_bytecode = True
    if str(kit_dir) not in sys.path:
        sys.path.insert(0, str(kit_dir))
    spec = importlib.util.spec_from_file_location("oink_peers", source)
    module = importlib.util.module_from_spec(spec)
    sys.modules["oink_peers"] = module
    spec.loader.exec_module(module)
    return module


class _Heartbeat:
    """Prints `still setting up (N s)` every HEARTBEAT_S seconds while the kit builds silently."""

    def __init__(self, log: Callable[[str], None], what: str) -> None:
        self.log, self.what = log, what
        self.stop = threading.Event()
        self.t0 = time.perf_counter()
        self.thread = threading.Thread(target=self._beat, daemon=True)

    def _beat(self) -> None:
        while not self.stop.wait(HEARTBEAT_S):
            self.log(f"{self.what}: still setting up ({time.perf_counter() - self.t0:.0f} s)")

    def __enter__(self) -> _Heartbeat:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop.set()
        self.thread.join()


def load(
    kit_dir: Path, build_dir: Path, log: Callable[[str], None]
) -> tuple[dict, dict[str, str], dict]:
    """({peer: the kit's Provider}, {peer: why not}, setup status). Never raises: a kit that does
    not import or set up makes every peer unavailable, with the reason."""
    kit_dir, build_dir = Path(kit_dir).resolve(), Path(build_dir).resolve()
    what = f"peers kit {kit_dir}"
    t0 = time.perf_counter()
    log(f"{what}: setting up (install, unpack, build or load the extensions; up to 1-2 minutes)")
    try:
        kit = import_kit(kit_dir)
        with _Heartbeat(log, what):
            status = kit.setup(
                site_dir=tempfile.mkdtemp(prefix="oink-peers-site-"),
                build_dir=str(build_dir),
                log=log,
            )
        specs, why = kit.providers(), kit.unavailable()
    except Exception as e:  # the kit is optional: its failure is reported, never fatal
        reason = f"peers kit setup failed: {type(e).__name__}: {str(e)[:300]}"
        log(f"{what}: {reason}")
        return {}, _all_peers(reason), {"kit": str(kit_dir), "error": reason}
    log(
        f"{what}: ready in {time.perf_counter() - t0:.0f} s: "
        f"{', '.join(specs) or 'no peer'} loaded"
        + (f"; not loaded: {', '.join(why)}" if why else "")
    )
    return dict(specs), {k: str(v) for k, v in why.items()}, {"kit": str(kit_dir), **status}


def _all_peers(reason: str) -> dict[str, str]:
    from oink.bench.providers import PEERS

    return dict.fromkeys(PEERS, reason)
