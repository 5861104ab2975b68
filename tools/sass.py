"""`python tools/sass.py [-k REGEX] [--so PATH] [--top N] [--dump]`: the SASS of a built oink
extension, read on any machine (no GPU): for each kernel whose demangled name matches REGEX, its
registers, shared memory, instruction count and most frequent opcodes; --dump prints the matching
kernels' SASS. The static count is a proxy for an issue-bound kernel's instructions per byte
(what Nsight Compute's "issue slots busy" is made of), to compare two builds before a GPU run.

cuobjdump and nvdisasm come from the PATH, else from NVIDIA's PyPI wheels (nvidia-cuda-cuobjdump,
nvidia-cuda-nvdisasm), downloaded once into ~/.cache/oink/sass-tools. Developer tooling only."""

from __future__ import annotations

import argparse
import collections
import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

from tabulate import tabulate

CACHE = Path.home() / ".cache" / "oink" / "sass-tools"
WHEELS = ("nvidia-cuda-cuobjdump", "nvidia-cuda-nvdisasm")
INSTRUCTION = re.compile(r"^\s+/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_]*)")


def tools_dir() -> str | None:
    """A folder holding cuobjdump and nvdisasm, fetched from PyPI if the PATH has neither."""
    if shutil.which("cuobjdump") and shutil.which("nvdisasm"):
        return None
    bin_dir = CACHE / "bin"
    if not all((bin_dir / t).exists() for t in ("cuobjdump", "nvdisasm")):
        CACHE.mkdir(parents=True, exist_ok=True)
        print(f"sass: fetching {', '.join(WHEELS)} into {CACHE}", file=sys.stderr)
        cmd = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "-d", str(CACHE)]
        subprocess.run(cmd + list(WHEELS), check=True)
        bin_dir.mkdir(exist_ok=True)
        for wheel in CACHE.glob("nvidia_cuda_*.whl"):
            with zipfile.ZipFile(wheel) as z:
                for name in z.namelist():
                    if re.search(r"/bin/(cuobjdump|nvdisasm)$", name):
                        target = bin_dir / Path(name).name
                        target.write_bytes(z.read(name))
                        target.chmod(0o755)
    return str(bin_dir)


def cuobjdump(flag: str, so: Path, env: dict) -> str:
    return subprocess.run(
        ["cuobjdump", flag, str(so)], env=env, check=True, capture_output=True, text=True
    ).stdout


def demangle(names: list[str]) -> dict[str, str]:
    if not shutil.which("c++filt"):
        return {n: n for n in names}
    out = subprocess.run(
        ["c++filt"], input="\n".join(names), capture_output=True, text=True, check=True
    ).stdout.splitlines()
    return dict(zip(names, out, strict=True))


def functions(sass: str) -> dict[str, list[str]]:
    """Mangled kernel name -> its SASS lines."""
    result, current = {}, None
    for line in sass.splitlines():
        if m := re.match(r"\s*Function : (\S+)", line):
            current = result.setdefault(m.group(1), [])
        elif current is not None:
            current.append(line)
    return result


def resources(text: str) -> dict[str, dict[str, int]]:
    """Mangled kernel name -> {REG, SHARED, LOCAL, ...} from cuobjdump -res-usage."""
    result, current = {}, None
    for line in text.splitlines():
        if m := re.match(r"\s*Function (\S+):", line):
            current = m.group(1)
        elif current and "REG:" in line:
            result[current] = {k: int(v) for k, v in re.findall(r"(\w+(?:\[\d+\])?):(\d+)", line)}
    return result


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("-k", "--kernel", default="", help="regex on the demangled kernel name")
    p.add_argument("--so", type=Path, help="the extension (default: python/oink/_C.so)")
    p.add_argument("--top", type=int, default=6, help="opcodes listed per kernel")
    p.add_argument("--dump", action="store_true", help="print the matching kernels' SASS")
    args = p.parse_args()
    so = args.so or Path(__file__).resolve().parent.parent / "python" / "oink" / "_C.so"
    if not so.exists():
        p.error(f"--so: no extension at {so} (build one: docs/develop.md)")
    env = dict(os.environ)
    if extra := tools_dir():
        env["PATH"] = extra + os.pathsep + env.get("PATH", "")
    print(f"sass: disassembling {so} (about a minute)", file=sys.stderr)
    sass = functions(cuobjdump("-sass", so, env))
    usage = resources(cuobjdump("-res-usage", so, env))
    names = demangle(sorted(sass))
    pattern = re.compile(args.kernel)
    rows = []
    for mangled, readable in names.items():
        if not pattern.search(readable):
            continue
        ops = collections.Counter(
            m.group(1).split(".")[0] for line in sass[mangled] if (m := INSTRUCTION.match(line))
        )
        res = usage.get(mangled, {})
        top = " ".join(f"{op}:{n}" for op, n in ops.most_common(args.top))
        short = re.sub(r"^void |oink::|\(oink::\w+\)$", "", readable)
        rows.append([short, res.get("REG"), res.get("SHARED"), sum(ops.values()), top])
        if args.dump:
            print(f"// {readable}\n" + "\n".join(sass[mangled]))
    if not args.dump:
        headers = ["kernel", "registers", "static smem", "instructions", "top opcodes"]
        print(tabulate(rows, headers=headers))
    print(f"sass: {len(rows)} of {len(names)} kernels match", file=sys.stderr)
    return 0 if rows else 1


if __name__ == "__main__":
    sys.exit(main())
