"""ONNX Runtime sessions with the pyquant op library registered.

    sess = pyquant.ort.make_session("model.onnx", providers=("cuda", "cpu"))

Providers may be given as short names ("cpu", "cuda") or ORT names / (name, options) tuples. A
requested CUDA provider that this onnxruntime does not have falls back to CPU with a warning
(``strict=True`` raises instead); asking for CUDA when the library was built without CUDA kernels
raises, because ORT would silently run our nodes on the CPU with copies in between.
"""

from __future__ import annotations

import os
import warnings
import weakref
from collections.abc import Sequence
from typing import Any

import onnxruntime as ort

from pyquant._library import build_info, get_library_path
from pyquant.generation import generate, uses_cuda_graph  # noqa: F401  (their public home is pyquant.ort)

_SHORT = {"cpu": "CPUExecutionProvider", "cuda": "CUDAExecutionProvider"}
# SessionOptions that already carry the library: registering twice makes ORT fail with "Domain
# already set in registry" when a second session is created from the same options.
_REGISTERED: weakref.WeakSet = weakref.WeakSet()


def session_options(options: ort.SessionOptions | None = None) -> ort.SessionOptions:
    """Returns SessionOptions (new or the given ones) with the pyquant library registered."""
    so = options if options is not None else ort.SessionOptions()
    if so in _REGISTERED:
        return so
    path = get_library_path()
    try:
        so.register_custom_ops_library(path)
    except Exception as e:  # ORT raises a bare RuntimeError/Fail
        raise RuntimeError(
            f"onnxruntime {ort.__version__} could not load the pyquant op library {path}: {e}. "
            "The library needs onnxruntime >= 1.20 on the same platform it was built for; rebuild with "
            "`pip install --force-reinstall --no-deps .`."
        ) from e
    _REGISTERED.add(so)
    return so


def resolve_providers(providers: Sequence[Any] | str | None = None, strict: bool = False) -> list[Any]:
    """Maps short names to ORT provider names and drops unavailable GPU providers (CPU fallback)."""
    if providers is None:
        providers = ("cpu",)
    if isinstance(providers, str):
        providers = (providers,)
    available = set(ort.get_available_providers())
    out: list[Any] = []
    for p in providers:
        name, opts = p if isinstance(p, tuple) else (p, None)
        name = _SHORT.get(str(name).lower(), name)
        if name not in available:
            msg = f"{name} is not available in this onnxruntime ({ort.__version__}: {sorted(available)})"
            if strict:
                raise RuntimeError(msg)
            warnings.warn(msg + "; falling back to the next provider / CPU", stacklevel=3)
            continue
        if name == "CUDAExecutionProvider" and build_info().get("cuda") is False:
            raise RuntimeError(
                "CUDAExecutionProvider requested but the pyquant library was built without CUDA kernels "
                "(no nvcc at build time). Rebuild with nvcc on PATH and PYQUANT_CUDA=ON."
            )
        out.append((name, opts) if opts else name)
    if "CPUExecutionProvider" not in [o[0] if isinstance(o, tuple) else o for o in out]:
        out.append("CPUExecutionProvider")
    return out


def int4_weights_read_by_other_ops(model: Any) -> list[str]:
    """Names of MatMulInt4 ``B`` initializers that something other than a MatMulInt4 node reads
    (another op, a graph output), in the main graph and its subgraphs.

    On a Hopper GPU the CUDA op rewrites a constant ``B`` in place into its GPU order at session
    creation (docs/ops.md, "GPU weight layout"), so such a reader would see shuffled bytes.
    `model` is an ``onnx.ModelProto``, a path or serialized bytes (external data is not loaded).
    """
    import onnx

    from pyquant.convert import _all_nodes, _subgraphs
    from pyquant.ops_spec import DOMAIN, INT4_OP

    if isinstance(model, (str, os.PathLike)):
        model = onnx.load(os.fspath(model), load_external_data=False)
    elif isinstance(model, bytes):
        model = onnx.load_from_string(model)
    b_names: set[str] = set()
    other = {o.name for o in model.graph.output}
    for node in _all_nodes(model.graph):  # subgraphs included
        is_int4 = node.op_type == INT4_OP and node.domain == DOMAIN
        for i, name in enumerate(node.input):
            if is_int4 and i == 1:
                b_names.add(name)
            elif not is_int4:
                other.add(name)
        for sub in _subgraphs(node):
            other.update(o.name for o in sub.output)
    initializers = {t.name for t in model.graph.initializer}
    return sorted(b_names & other & initializers)


# make_session's int4_gpu_layout -> the PYQUANT_INT4_SHUFFLE value each CUDA MatMulInt4 node reads
# when the session creates it (ort_ops/cuda/matmul_int4_op.cc; docs/ops.md, "GPU weight layout").
INT4_GPU_LAYOUTS = {"default": "1", "all": "all", "row-major": "0"}


def make_session(
    model: str | os.PathLike | bytes,
    providers: Sequence[Any] | str | None = None,
    options: ort.SessionOptions | None = None,
    strict: bool = False,
    int4_gpu_layout: str | None = None,
) -> ort.InferenceSession:
    """An InferenceSession for `model` (path or serialized bytes) with pyquant's ops registered.

    int4_gpu_layout: where the CUDA MatMulInt4 op on a Hopper GPU rewrites a constant B in place
    into the tensor cores' order (docs/ops.md, "GPU weight layout"):
      None: as the environment says (PYQUANT_INT4_SHUFFLE; unset: "default");
      "default": layers of N * K >= 2^25 (4096 x 8192 and up) and wide ones from 2^24 with
        N >= 4 K (2048 -> 8192), the choice for decode;
      "all": every layer whose shape allows it, faster prefill (M >= 64) on smaller layers such as
        4096 x 4096 but 20-30 % slower at M = 16-32 there (batched decode);
      "row-major": none, B read as stored (sessions that bind other B buffers at run time).
    It applies to this session only (the variable is set while the session is created, then
    restored; so sessions with different layouts should not be created from several threads at
    once) and does not change memory: the session holds the packed weights once either way.

    With the CUDA provider, a MatMulInt4 weight that another op also reads keeps the row-major
    layout for this session (a warning names the weights): the in-place GPU layout would change
    what that op reads. An explicit PYQUANT_INT4_SHUFFLE in the environment, without
    int4_gpu_layout, skips that check (the caller decided).
    """
    if int4_gpu_layout is not None and int4_gpu_layout not in INT4_GPU_LAYOUTS:
        raise ValueError(
            f"int4_gpu_layout={int4_gpu_layout!r}: expected None or one of {sorted(INT4_GPU_LAYOUTS)}"
        )
    so = session_options(options)
    if isinstance(model, os.PathLike):
        model = os.fspath(model)
    resolved = resolve_providers(providers, strict)
    names = [p[0] if isinstance(p, tuple) else p for p in resolved]
    shuffle = INT4_GPU_LAYOUTS[int4_gpu_layout] if int4_gpu_layout is not None else None
    check_shared = int4_gpu_layout is not None or "PYQUANT_INT4_SHUFFLE" not in os.environ
    shared: list[str] = []
    if "CUDAExecutionProvider" in names and shuffle != "0" and check_shared:
        shared = int4_weights_read_by_other_ops(model)
    if shared:
        warnings.warn(
            f"MatMulInt4 weights also read by other ops ({', '.join(shared[:5])}"
            f"{', ...' if len(shared) > 5 else ''}): this session keeps B row-major on the GPU "
            "(PYQUANT_INT4_SHUFFLE=0), which is slower on Hopper for large layers",
            stacklevel=2,
        )
        shuffle = "0"
    if shuffle is None:
        return ort.InferenceSession(model, sess_options=so, providers=resolved)
    before = os.environ.get("PYQUANT_INT4_SHUFFLE")
    os.environ["PYQUANT_INT4_SHUFFLE"] = shuffle  # read by each CUDA node when the session creates it
    try:
        return ort.InferenceSession(model, sess_options=so, providers=resolved)
    finally:
        if before is None:
            os.environ.pop("PYQUANT_INT4_SHUFFLE", None)
        else:
            os.environ["PYQUANT_INT4_SHUFFLE"] = before
