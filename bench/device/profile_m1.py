"""One MatMulInt4 and one LinearFp8 node at M = 1 (4096 x 4096, fp16), run a few times: the
target of bench/device/ncu.sh and ncu_int4.sh (Nsight Compute). PROFILE_SHAPE (K x N),
PROFILE_M and PROFILE_METHODS (bench_cuda.py methods) change what runs. PROFILE_RANGE=1 wraps
only the last run of each session in cudaProfilerStart / Stop (for `ncu --profile-from-start off`:
the warm-up runs and the node's one-time weight preparation stay out of the profile)."""

import os
import sys

import numpy as np

sys.path.insert(0, ".")
import onnxruntime as ort  # noqa: E402
import torch  # noqa: E402  (cudaProfilerStart / Stop for PROFILE_RANGE)

from bench.bench_cuda import METHOD_ENV, build_model  # noqa: E402
from pyquant.ort import session_options  # noqa: E402

rng = np.random.default_rng(0)
k, n = (int(v) for v in os.environ.get("PROFILE_SHAPE", "4096x4096").split("x"))
for method in os.environ.get("PROFILE_METHODS", "pyquant_int4,pyquant_fp8").split(","):
    # The method's knobs while its kernels are created, as bench_cuda.py sets them (until session
    # 45 this script ignored them: a variant method profiled the default kernels).
    env = METHOD_ENV.get(method, {})
    os.environ.update(env)
    try:
        sess = ort.InferenceSession(
            build_model(method, rng, k, n, 1),
            sess_options=session_options(),
            providers=["CUDAExecutionProvider"],
        )
    finally:
        for key in env:
            os.environ.pop(key, None)
    x = (rng.standard_normal((int(os.environ.get("PROFILE_M", "1")), k)) * 0.5).astype(np.float16)
    profile_range = os.environ.get("PROFILE_RANGE") == "1"
    for i in range(4):
        last = profile_range and i == 3
        if last:
            torch.cuda.synchronize()
            torch.cuda.cudart().cudaProfilerStart()
        sess.run(None, {"X": x})
        if last:
            torch.cuda.synchronize()
            torch.cuda.cudart().cudaProfilerStop()
print("done")
