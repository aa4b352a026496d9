"""Registers, spills and the machine-code mix of each loop of chosen kernels: how many SASS
instructions a kernel's main loop issues per iteration, and of which kinds (address arithmetic,
moves, decode, MMA). Session 39 found this way that the INT4 register mma kernel spent ~250 of its
608 instructions per group of 16 tile-steps on address arithmetic, in a kernel bound by issue
latency (bench/results/2026-11-28-notes-s39.md).

    python tools/sass_mix.py ort_ops/cuda/matmul_int4_shuffled_impl.cu \
        --kernel 'int4_shuffled_mma_kernelI6__halfLi2ELi4E'
    python tools/sass_mix.py build/x.cubin --kernel gemv      (an existing cubin)

A .cu file is compiled here to a cubin with the project's flags for sm_90a (`--arch` to change;
nvcc from $CUDA_HOME or /usr/local/cuda; headers from .deps/ as CMake fetches them). The SASS and
each kernel's registers and stack frame (spills) come from cuobjdump (which runs nvdisasm):
$CUOBJDUMP, PATH, the CUDA directory, or else the PyPI wheels nvidia-cuda-cuobjdump and
nvidia-cuda-nvdisasm, downloaded once with pip's configured index into .deps/cuobjdump (the
machines that build this project may have nvcc without them).

Loops are the ranges [target, branch] of backward branches; for each the instruction count and
the most frequent opcodes (predicates and modifiers stripped: IMAD.WIDE counts as IMAD)."""

from __future__ import annotations

import argparse
import collections
import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SASS_LINE = re.compile(r"^\s*/\*([0-9a-f]{4,})\*/\s*(.*?)\s*;")
BRANCH = re.compile(r"\bBRA\s+(0x[0-9a-f]+)")
PREDICATE = re.compile(r"^@!?U?P\w+\s+")


@dataclass
class Loop:
    start: int  # address of the branch target (the loop head)
    end: int  # address of the backward branch
    ops: collections.Counter

    @property
    def size(self) -> int:
        return sum(self.ops.values())


def parse_functions(sass: str) -> dict[str, list[tuple[int, str]]]:
    """cuobjdump -sass text -> {mangled kernel name: [(address, instruction)]}."""
    out: dict[str, list[tuple[int, str]]] = {}
    name = None
    for line in sass.splitlines():
        if "Function : " in line:
            name = line.split("Function : ", 1)[1].strip()
            out[name] = []
            continue
        m = SASS_LINE.match(line)
        if m and name is not None:
            out[name].append((int(m.group(1), 16), m.group(2)))
    return out


def opcode(instruction: str) -> str:
    return PREDICATE.sub("", instruction).split()[0].split(".")[0]


def loops(code: list[tuple[int, str]]) -> list[Loop]:
    """Every backward branch's range, largest first."""
    found = []
    for addr, ins in code:
        m = BRANCH.search(ins)
        if m and int(m.group(1), 16) < addr:
            start = int(m.group(1), 16)
            ops = collections.Counter(opcode(i) for a, i in code if start <= a <= addr)
            found.append(Loop(start, addr, ops))
    return sorted(found, key=lambda lp: -lp.size)


def parse_res_usage(text: str) -> dict[str, tuple[int, int]]:
    """cuobjdump -res-usage text -> {mangled name: (registers, stack bytes per thread)}: the
    stack frame holds the spills (and local arrays)."""
    out, name = {}, None
    for line in text.splitlines():
        m = re.match(r"\s*Function (\S+):", line)
        if m:
            name = m.group(1)
            continue
        m = re.search(r"REG:(\d+) STACK:(\d+)", line)
        if m and name:
            out[name] = (int(m.group(1)), int(m.group(2)))
            name = None
    return out


def find_cuobjdump() -> tuple[str, dict[str, str]]:
    """The cuobjdump to run and its environment (cuobjdump -sass runs nvdisasm from PATH)."""
    env = dict(os.environ)
    cuda_bin = Path(os.environ.get("CUDA_HOME", "/usr/local/cuda")) / "bin"
    for cand in (os.environ.get("CUOBJDUMP"), shutil.which("cuobjdump"), str(cuda_bin / "cuobjdump")):
        if not cand or not Path(cand).exists():
            continue
        here = Path(cand).parent
        if (here / "nvdisasm").exists() or shutil.which("nvdisasm"):
            env["PATH"] = f"{here}{os.pathsep}{env.get('PATH', '')}"
            return cand, env
    deps = REPO / ".deps" / "cuobjdump"
    bin_dir = deps / "nvidia" / "cu13" / "bin"
    if not ((bin_dir / "cuobjdump").exists() and (bin_dir / "nvdisasm").exists()):
        print("cuobjdump / nvdisasm not found: fetching their wheels into .deps/cuobjdump", file=sys.stderr)
        with tempfile.TemporaryDirectory() as tmp:
            subprocess.run(
                [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:", "-d", tmp]
                + ["nvidia-cuda-cuobjdump", "nvidia-cuda-nvdisasm"],
                check=True,
            )
            for whl in Path(tmp).glob("*.whl"):
                with zipfile.ZipFile(whl) as z:
                    z.extractall(deps)
        for tool in ("cuobjdump", "nvdisasm"):
            (bin_dir / tool).chmod(0o755)
    env["PATH"] = f"{bin_dir}{os.pathsep}{env.get('PATH', '')}"
    return str(bin_dir / "cuobjdump"), env


def run_cuobjdump(tool: str, env: dict[str, str], flag: str, cubin: Path) -> str:
    r = subprocess.run([tool, flag, str(cubin)], capture_output=True, text=True, env=env)
    if r.returncode != 0:
        sys.exit(f"{tool} {flag} failed ({r.returncode}): {r.stderr.strip()[-2000:]}")
    return r.stdout


def compile_cubin(src: Path, arch: str, out: Path) -> None:
    nvcc = Path(os.environ.get("CUDA_HOME", "/usr/local/cuda")) / "bin" / "nvcc"
    cmd = [str(nvcc), "-std=c++17", "-O3", "--expt-relaxed-constexpr", "-lineinfo", f"-arch={arch}"]
    cmd += ["-I", str(REPO / "ort_ops"), "-I", str(REPO / ".deps" / "onnxruntime" / "include")]
    cmd += ["-I", str(REPO / ".deps" / "cutlass" / "include"), "-DPYQUANT_WITH_SM90=1"]
    cmd += ["-cubin", "-o", str(out), str(src)]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"nvcc failed ({r.returncode}):\n{r.stderr[-4000:]}")


def report(sass: str, res_usage: str, kernel: str, loops_shown: int) -> str:
    regs = parse_res_usage(res_usage)
    lines = []
    for name, code in parse_functions(sass).items():
        if not re.search(kernel, name):
            continue
        r, spill = regs.get(name, (None, None))
        lines.append(f"{name}\n  {len(code)} instructions, registers {r}, stack {spill} B per thread")
        for lp in loops(code)[:loops_shown]:
            top = ", ".join(f"{op} {n}" for op, n in lp.ops.most_common(12))
            lines.append(f"  loop {lp.start:#x}-{lp.end:#x}: {lp.size} instructions: {top}")
    return "\n".join(lines) if lines else f"no kernel matches {kernel!r}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("source", type=Path, help="a .cu file (compiled here) or a .cubin")
    ap.add_argument("--kernel", default=".", help="regex on the mangled kernel names")
    ap.add_argument("--arch", default="sm_90a")
    ap.add_argument("--loops", type=int, default=2, help="loops shown per kernel (largest first)")
    args = ap.parse_args(argv)
    if not args.source.exists():
        ap.error(f"{args.source}: no such file")
    if args.source.suffix not in (".cu", ".cubin"):
        ap.error("source: a .cu or .cubin file")
    with tempfile.TemporaryDirectory() as tmp:
        cubin = args.source
        if args.source.suffix == ".cu":
            cubin = Path(tmp) / "k.cubin"
            compile_cubin(args.source, args.arch, cubin)
        tool, env = find_cuobjdump()  # once: it may fetch the wheels
        sass, usage = (run_cuobjdump(tool, env, flag, cubin) for flag in ("-sass", "-res-usage"))
    print(report(sass, usage, args.kernel, args.loops))
    return 0


if __name__ == "__main__":
    sys.exit(main())
