"""Where the compiled ORT custom-op library lives, and what it was built with."""

from __future__ import annotations

import json
import os
import sys
from functools import cache
from pathlib import Path

_LIB_NAME = "libpyquant_ops.so"
_HERE = Path(__file__).resolve().parent


class LibraryNotFoundError(RuntimeError):
    pass


def get_library_path() -> str:
    """Absolute path of the pyquant ORT custom-op library (``RegisterCustomOps`` entry point).

    ``PYQUANT_LIBRARY`` overrides the location (e.g. a build tree).
    """
    override = os.environ.get("PYQUANT_LIBRARY")
    if override:
        candidates = [Path(override)]
    else:
        # Next to this file for a regular install; an editable install (scikit-build-core) puts the
        # built library in site-packages/pyquant/ while the sources stay in the checkout.
        candidates = [_HERE / _LIB_NAME] + [Path(p) / "pyquant" / _LIB_NAME for p in sys.path if p]
    for c in candidates:
        if c.is_file():
            return str(c)
    raise LibraryNotFoundError(
        f"pyquant's op library {_LIB_NAME} was not found next to {_HERE} or in site-packages. "
        "Install the package so that it is built: `pip install .` (or `pip install -e .`) in the repository, "
        "or set PYQUANT_LIBRARY to a built libpyquant_ops.so."
    )


@cache
def build_info() -> dict:
    """What the installed library was built with: {'version', 'cuda', 'cuda_archs', 'ort_headers'}."""
    lib = Path(get_library_path())
    info_file = lib.with_name("build_info.json")
    if not info_file.is_file():
        return {"version": None, "cuda": None, "cuda_archs": None, "ort_headers": None}
    return json.loads(info_file.read_text())
