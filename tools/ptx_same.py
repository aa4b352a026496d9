"""Which kernels of one PTX file compile to the same code in another: the check that a refactor of
shared device code left existing kernels unchanged (same PTX -> same machine code from ptxas).

    nvcc ... -ptx ort_ops/cuda/x.cu -o old.ptx   (at the old commit)
    nvcc ... -ptx ort_ops/cuda/x.cu -o new.ptx
    python tools/ptx_same.py old.ptx new.ptx [--added-arg Li1E]

Kernel bodies are compared after normalising what differs without changing code: the kernel's own
mangled name in parameter names, shared-variable names, basic-block label numbers, and the hash of
anonymous namespaces (it depends on the source path). --added-arg: a template argument appended
to every kernel's argument list in the new file (e.g. a new `int kS = 1`, mangled Li1E), so that
old `...EEEv...` names are looked up as `...<arg>EEEv...`. Exit status 1 if any kernel differs."""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

ANON_START = re.compile(r"(\d+)_GLOBAL__N__")


def strip_anon(text: str) -> str:
    """Replace each mangled anonymous namespace <len>_GLOBAL__N__... by ANON, reading its length
    from the mangling (its tail, a hash and sometimes a number, would run into the next name's
    length digits for a regex)."""
    out, pos = [], 0
    for m in ANON_START.finditer(text):
        if m.start() < pos:
            continue
        out.append(text[pos : m.start()])
        out.append("ANON")
        pos = m.start(1) + len(m.group(1)) + int(m.group(1))
    out.append(text[pos:])
    return "".join(out)


def kernels(text: str) -> dict[str, str]:
    out = {}
    for m in re.finditer(r"\.entry (\S+)\((.*?)\n\}\n", text, re.S):
        name, body = m.group(1), m.group(2)
        body = body.replace(name, "NAME")
        body = re.sub(r"_ZZ\S*?E\d+([A-Za-z_]\w*?)(\[|;|,|\))", r"SHARED_\1\2", body)
        body = re.sub(r"\$L__BB\d+_", "$L__BB_", body)
        out[strip_anon(name)] = strip_anon(body)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("old", type=Path)
    ap.add_argument("new", type=Path)
    ap.add_argument("--added-arg", default="", help="mangled template argument the new kernels gained")
    args = ap.parse_args()
    old, new = kernels(args.old.read_text()), kernels(args.new.read_text())
    same, differ = 0, []
    for name, body in old.items():
        cands = [name]
        if args.added_arg:  # ...Li4E|E|E|v... -> ...Li4E|Li1E|E|E|v...: after the last argument
            cands.append(name.replace("EEEv", f"E{args.added_arg}EEv", 1))
        if any(new.get(c) == body for c in cands):
            same += 1
        else:
            differ.append(name)
    print(f"{args.old} -> {args.new}: {len(old)} kernels, {same} identical, {len(differ)} not", end="")
    print(f" ({len(new)} in new)")
    for name in differ[:20]:
        print("  differs or missing:", name[:140])
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
