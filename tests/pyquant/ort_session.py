"""The CPU ONNX Runtime session the pyquant-pass tests run exported files in (one place for the
skip when the op library is not built or installed)."""

from __future__ import annotations

import pytest


def cpu_session(path):  # noqa: ANN001, ANN201
    """An InferenceSession on the CPU EP with the pyquant op library registered; skips the test
    when the library is unavailable."""
    ort = pytest.importorskip("pyquant.ort")
    try:
        return ort.make_session(path, providers=("cpu",))
    except Exception as e:  # the op library is not built / installed
        pytest.skip(f"pyquant op library unavailable: {e}")
