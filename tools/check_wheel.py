"""Checks built oink-kernels wheels: name, local version, tags, contents, licence, and _C.so.

    python3 tools/check_wheel.py dist/oink_kernels-*.whl

Each wheel is oink_kernels-<version>+<flavour>-py3-none-manylinux_2_<N>_x86_64.whl, where the
flavour is cuXYZ (CUDA kernels) or cpu. The extension is loaded with torch.ops.load_library and
uses only PyTorch's stable ABI, so _C.so must not link libpython or use any Py* symbol. Its only
libraries outside the manylinux policy are torch's own: `auditwheel show` cannot be told that
the installed torch provides them (it reports such wheels as linux_x86_64 whatever their
symbols), so this script asks it for the tag the wheel's symbol versions allow and for its
external libraries, and checks both. Needs auditwheel, readelf and nm. Exits non-zero on the
first failure.
"""

from __future__ import annotations

import email.parser
import json
import re
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE_FILES = (
    "__init__.py",
    "__main__.py",
    "_fake.py",
    "ops.py",
    "_softmax.py",
    "_cross_entropy.py",
    "vllm_plugin.py",
)
TORCH_LIBRARIES = {"libtorch_cpu.so", "libtorch_cuda.so"}
WHEEL_NAME = re.compile(
    r"oink_kernels-(?P<version>[^-+]+)\+(?P<flavour>cu\d+|cpu)-py3-none-(?P<platform>manylinux_2_\d+_x86_64)\.whl"
)


def fail(message: str) -> None:
    sys.exit(f"check_wheel: {message}")


def run(*command: str | Path) -> str:
    return subprocess.run(command, check=True, capture_output=True, text=True).stdout


def source_version() -> str:
    text = (ROOT / "python/oink/__init__.py").read_text()
    match = re.search(r'^__version__ = "([^"]+)"', text, re.MULTILINE)
    if not match:
        fail("no __version__ in python/oink/__init__.py")
    return match.group(1)


def check(wheel: Path) -> None:
    name = WHEEL_NAME.fullmatch(wheel.name)
    if not name:
        fail(f"{wheel.name}: expected {WHEEL_NAME.pattern}")
    version, flavour, platform = name["version"], name["flavour"], name["platform"]
    full_version = f"{version}+{flavour}"
    if version != source_version():
        fail(f"{wheel.name}: version {version}, the source says {source_version()}")

    audit = json.loads(run("auditwheel", "show", "--json", wheel))
    if audit["sym_tag"] != platform or audit["unsupported_isa"]:
        fail(f"{wheel.name}: auditwheel's symbol policy is {audit['sym_tag']}")
    if not set(audit["external_libs"]) <= TORCH_LIBRARIES:
        fail(f"{wheel.name}: needs libraries outside the policy: {audit['external_libs']}")

    with zipfile.ZipFile(wheel) as zf:
        names = set(zf.namelist())
        dist_info = f"oink_kernels-{full_version}.dist-info"
        wanted = [f"oink/{f}" for f in ("_C.so", *PACKAGE_FILES)]
        wanted += [f"{dist_info}/licenses/{f}" for f in ("LICENSE", "NOTICE")]
        missing = [f for f in wanted if f not in names]
        if missing:
            fail(f"{wheel.name} lacks {missing}")
        meta = email.parser.Parser().parsestr(zf.read(f"{dist_info}/METADATA").decode())
        entry_points = zf.read(f"{dist_info}/entry_points.txt").decode()
        with tempfile.TemporaryDirectory() as tmp:
            library = Path(zf.extract("oink/_C.so", tmp))
            needed = re.findall(
                r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", run("readelf", "-d", library)
            )
            undefined = run("nm", "-D", "--undefined-only", library).split()

    if (meta["Name"], meta["Version"]) != ("oink-kernels", full_version):
        fail(f"{wheel.name}: metadata says {meta['Name']} {meta['Version']}")
    if meta["License-Expression"] != "Apache-2.0":
        fail(f"{wheel.name}: License-Expression is {meta['License-Expression']}")
    if "torch>=2.10" not in [r.replace(" ", "") for r in meta.get_all("Requires-Dist") or []]:
        fail(
            f"{wheel.name}: Requires-Dist is {meta.get_all('Requires-Dist')}, expected torch>=2.10"
        )
    if "oink = oink.vllm_plugin:register" not in entry_points:
        fail(f"{wheel.name}: no vllm.general_plugins entry point")
    if ("libtorch_cuda.so" in needed) != flavour.startswith("cu"):
        fail(f"{wheel.name}: a {flavour} build whose _C.so needs {needed}")
    if any("python" in lib for lib in needed):
        fail(f"{wheel.name}: _C.so links Python: {needed}")
    python_symbols = [s for s in undefined if re.match(r"_?Py[A-Z_]", s)]
    if python_symbols:
        fail(f"{wheel.name}: _C.so uses the Python C API: {python_symbols[:10]}")
    print(f"check_wheel: {wheel.name} ok: {len(names)} files, _C.so needs {', '.join(needed)}")


def main(argv: list[str]) -> None:
    if not argv:
        fail("no wheels given")
    for wheel in argv:
        check(Path(wheel))


if __name__ == "__main__":
    main(sys.argv[1:])
