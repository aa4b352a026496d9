import os

import pytest


def _cuda_available() -> bool:
    try:
        import onnxruntime as ort

        import pyquant

        return "CUDAExecutionProvider" in ort.get_available_providers() and bool(
            pyquant.build_info().get("cuda")
        )
    except Exception:
        return False


def pytest_collection_modifyitems(config, items):
    has_cuda = _cuda_available()
    skip_cuda = pytest.mark.skip(
        reason="needs onnxruntime's CUDAExecutionProvider and a CUDA build of pyquant"
    )
    for item in items:
        if ("cuda" in item.keywords or "ort_cuda" in item.keywords) and not has_cuda:
            item.add_marker(skip_cuda)


@pytest.fixture
def rng(request):
    # A fresh, reproducible stream per test (seeded from the test's name).
    seed = (
        abs(hash(request.node.nodeid)) % (2**32)
        if os.environ.get("PYQUANT_RANDOM_SEED") is None
        else int(os.environ["PYQUANT_RANDOM_SEED"])
    )
    import numpy as np

    return np.random.default_rng(seed)
