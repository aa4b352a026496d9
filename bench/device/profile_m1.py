"""One MatMulInt4 and one LinearFp8 node at M = 1 (4096 x 4096, fp16), run a few times: the
target of bench/device/ncu.sh and ncu_int4.sh (Nsight Compute). PROFILE_SHAPE (K x N),
PROFILE_M and PROFILE_METHODS (bench_cuda.py methods) change what runs."""

import os
import sys

import numpy as np

sys.path.insert(0, ".")
import onnxruntime as ort  # noqa: E402

from bench.bench_cuda import build_model  # noqa: E402
from pyquant.ort import session_options  # noqa: E402

rng = np.random.default_rng(0)
k, n = (int(v) for v in os.environ.get("PROFILE_SHAPE", "4096x4096").split("x"))
for method in os.environ.get("PROFILE_METHODS", "pyquant_int4,pyquant_fp8").split(","):
    sess = ort.InferenceSession(
        build_model(method, rng, k, n, 1),
        sess_options=session_options(),
        providers=["CUDAExecutionProvider"],
    )
    x = (rng.standard_normal((int(os.environ.get("PROFILE_M", "1")), k)) * 0.5).astype(np.float16)
    for _ in range(4):
        sess.run(None, {"X": x})
print("done")
