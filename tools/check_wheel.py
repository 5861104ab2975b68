"""Checks a built oink-kernels wheel: its tag, contents, version and that _C.so needs no Python.

    python3 tools/check_wheel.py build/wheel/oink_kernels-*.whl

The extension is loaded with torch.ops.load_library and uses only PyTorch's stable ABI, so the
wheel is tagged py3-none-<platform> and _C.so must not link libpython or use any Py* symbol.
Needs readelf and nm (binutils). Exits non-zero on the first failure.
"""

from __future__ import annotations

import email.parser
import re
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE_FILES = ("__init__.py", "_fake.py", "ops.py", "vllm_plugin.py", "bench/__main__.py")


def fail(message: str) -> None:
    sys.exit(f"check_wheel: {message}")


def source_version() -> str:
    text = (ROOT / "python/oink/__init__.py").read_text()
    match = re.search(r'^__version__ = "([^"]+)"', text, re.MULTILINE)
    if not match:
        fail("no __version__ in python/oink/__init__.py")
    return match.group(1)


def main(argv: list[str]) -> None:
    if len(argv) != 1:
        fail(f"expected one wheel, got {argv}")
    wheel = Path(argv[0])
    name, version, *_, python_tag, abi_tag, platform_tag = wheel.stem.split("-")
    if name != "oink_kernels" or (python_tag, abi_tag) != ("py3", "none"):
        fail(f"{wheel.name}: expected oink_kernels-VERSION-py3-none-PLATFORM.whl")
    if not platform_tag.startswith(("linux_", "manylinux")):
        fail(f"{wheel.name}: unexpected platform tag {platform_tag}")

    with zipfile.ZipFile(wheel) as zf:
        names = set(zf.namelist())
        missing = [f"oink/{f}" for f in ("_C.so", *PACKAGE_FILES) if f"oink/{f}" not in names]
        if missing:
            fail(f"{wheel.name} lacks {missing}")
        dist_info = f"oink_kernels-{version}.dist-info"
        meta = email.parser.Parser().parsestr(zf.read(f"{dist_info}/METADATA").decode())
        entry_points = zf.read(f"{dist_info}/entry_points.txt").decode()
        with tempfile.TemporaryDirectory() as tmp:
            library = Path(zf.extract("oink/_C.so", tmp))
            dynamic = subprocess.run(
                ["readelf", "-d", library], check=True, capture_output=True, text=True
            ).stdout
            undefined = subprocess.run(
                ["nm", "-D", "--undefined-only", library],
                check=True,
                capture_output=True,
                text=True,
            ).stdout

    expected = source_version()
    if (meta["Name"], meta["Version"], version) != ("oink-kernels", expected, expected):
        fail(f"metadata {meta['Name']} {meta['Version']} (file {version}), source {expected}")
    if "torch>=2.10" not in [r.replace(" ", "") for r in meta.get_all("Requires-Dist") or []]:
        fail(f"Requires-Dist is {meta.get_all('Requires-Dist')}, expected torch>=2.10")
    if "oink = oink.vllm_plugin:register" not in entry_points:
        fail("no vllm.general_plugins entry point")

    needed = re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", dynamic)
    if any("python" in lib for lib in needed):
        fail(f"_C.so links Python: {needed}")
    python_symbols = [s for s in undefined.split() if re.match(r"_?Py[A-Z_]", s)]
    if python_symbols:
        fail(f"_C.so uses the Python C API: {python_symbols[:10]}")

    print(
        f"check_wheel: {wheel.name} ok: {len(names)} files, oink-kernels {version}, "
        f"_C.so needs {', '.join(needed)}; no Python C API"
    )


if __name__ == "__main__":
    main(sys.argv[1:])
