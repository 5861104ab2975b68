"""Where a run happened: device, driver, CUDA, torch and oink versions (GUIDE §3: every number
must be traceable to them)."""

from __future__ import annotations

import datetime
import hashlib
import os
import platform
import re
import shlex
import subprocess
import sys
from pathlib import Path

import torch

import oink


def _run(cmd: list[str], cwd: Path | None = None) -> str | None:
    try:
        out = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=10, check=True)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None


def oink_revision() -> str:
    """git commit (+dirty) of the oink source tree: the one this package was imported from, or,
    for an installed package, the current directory when it is an oink checkout (as when a GPU
    script builds and installs from it, then runs the benchmark there). A dirty tree is named by
    the hash of its sources too: a copy of a working tree can carry an older commit's git
    metadata (a lent GPU machine's, say), and the hash tells which sources ran."""
    package = Path(oink.__file__).resolve().parent
    for repo in (package.parent.parent, Path.cwd()):
        if not (repo / "csrc").is_dir() or not (repo / "python" / "oink").is_dir():
            continue
        where = "" if repo == package.parent.parent else f" (source tree {repo})"
        head = _run(["git", "rev-parse", "--short=12", "HEAD"], cwd=repo)
        if head is None:
            return "no git; " + sources_hash(repo) + where
        dirty = _run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=repo)
        return head + (f"+dirty, {sources_hash(repo)}" if dirty else "") + where
    return f"unknown (installed at {package}, no source tree here)"


def sources_hash(repo: Path) -> str:
    """A hash of the sources that make the numbers (csrc, python/oink, CMakeLists.txt), the same
    for the same files wherever they lie."""
    files = sorted(
        f
        for d in ("csrc", "python/oink", "CMakeLists.txt")
        for f in ([repo / d] if (repo / d).is_file() else (repo / d).rglob("*"))
        if f.is_file() and f.suffix in ("", ".txt", ".h", ".cuh", ".cpp", ".cu", ".py")
    )
    digest = hashlib.sha256()
    for f in files:
        digest.update(str(f.relative_to(repo)).encode() + b"\0" + f.read_bytes())
    return f"sources sha256:{digest.hexdigest()[:12]} ({len(files)} files)"


def _nvml_driver() -> str:
    try:
        import pynvml

        pynvml.nvmlInit()
        version = pynvml.nvmlSystemGetDriverVersion()
        return version.decode() if isinstance(version, bytes) else str(version)
    except Exception:
        return "unknown (no nvidia-smi, no pynvml)"


def slug(name: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-") or "unknown"


def command_line() -> str:
    argv = list(sys.argv)
    if argv and argv[0].endswith("__main__.py"):
        return "python -m oink.bench " + shlex.join(argv[1:])
    return shlex.join(argv)


def describe(device: str) -> dict:
    info = {
        "date_utc": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "command": command_line(),
        "device_kind": device,
        "oink_version": oink.__version__,
        "oink_revision": oink_revision(),
        "torch": torch.__version__,
        "python": platform.python_version(),
        "host_cpu": platform.processor() or platform.machine(),
        "cpu_threads": torch.get_num_threads(),
    }
    if device == "cuda":
        index = torch.cuda.current_device()
        props = torch.cuda.get_device_properties(index)
        # The driver is one per host: the first GPU's line will do.
        smi = _run(
            [
                "nvidia-smi",
                "--query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem",
                "--format=csv,noheader",
            ]
        )
        smi = smi.splitlines()[0] if smi else None
        info.update(
            {
                "gpu": props.name,
                "capability": f"sm_{props.major}{props.minor}",
                "sm_count": props.multi_processor_count,
                "l2_bytes": getattr(props, "L2_cache_size", None),
                "memory_bytes": props.total_memory,
                "memory_bus_width": getattr(props, "memory_bus_width", None),
                "driver": smi.split(",")[1].strip() if smi else _nvml_driver(),
                "nvidia_smi": smi,
                "cuda_runtime": torch.version.cuda,
            }
        )
    else:
        info["gpu"] = None
    return info


def default_out_dir(info: dict) -> Path:
    """A new folder per run, outside any source tree: under `$XDG_CACHE_HOME/oink/bench/`
    (default `~/.cache/oink/bench/`), named `<device>-<YYYYMMDDTHHMMSSZ>` after the device and the
    run's UTC start. Results worth keeping are copied out from there."""
    root = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "oink" / "bench"
    stamp = re.sub(r"[-:]", "", info["date_utc"]).replace("+0000", "Z")
    base = root / f"{slug(info['gpu']) if info.get('gpu') else 'cpu'}-{stamp}"
    out, n = base, 1
    while out.exists():  # two runs started within the same second
        n += 1
        out = base.with_name(f"{base.name}-{n}")
    return out
