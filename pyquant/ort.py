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


def make_session(
    model: str | os.PathLike | bytes,
    providers: Sequence[Any] | str | None = None,
    options: ort.SessionOptions | None = None,
    strict: bool = False,
) -> ort.InferenceSession:
    """An InferenceSession for `model` (path or serialized bytes) with pyquant's ops registered.

    With the CUDA provider, a MatMulInt4 weight that another op also reads keeps the row-major
    layout for this session (PYQUANT_INT4_SHUFFLE=0 while it is created; a warning names the
    weights): the in-place GPU layout would change what that op reads.
    """
    so = session_options(options)
    if isinstance(model, os.PathLike):
        model = os.fspath(model)
    resolved = resolve_providers(providers, strict)
    names = [p[0] if isinstance(p, tuple) else p for p in resolved]
    shared: list[str] = []
    if "CUDAExecutionProvider" in names and "PYQUANT_INT4_SHUFFLE" not in os.environ:
        shared = int4_weights_read_by_other_ops(model)
    if not shared:
        return ort.InferenceSession(model, sess_options=so, providers=resolved)
    warnings.warn(
        f"MatMulInt4 weights also read by other ops ({', '.join(shared[:5])}"
        f"{', ...' if len(shared) > 5 else ''}): this session keeps B row-major on the GPU "
        "(PYQUANT_INT4_SHUFFLE=0), which is slower on Hopper for large layers",
        stacklevel=2,
    )
    os.environ["PYQUANT_INT4_SHUFFLE"] = "0"  # read by each CUDA node when the session creates it
    try:
        return ort.InferenceSession(model, sess_options=so, providers=resolved)
    finally:
        os.environ.pop("PYQUANT_INT4_SHUFFLE", None)


_NUMPY_DTYPES = {"tensor(float)": "float32", "tensor(float16)": "float16", "tensor(double)": "float64"}


def generate(
    session: ort.InferenceSession,
    input_ids: Any,
    max_new_tokens: int,
    *,
    attention_mask: Any = None,
    eos_token_id: int | None = None,
    device: str = "cpu",
) -> Any:
    """Greedy decoding with the KV cache of a graph from ``pyquant.export_causal_lm``.

    input_ids: [batch, prompt] integer tokens; prompts of different lengths are left-padded, with
    ``attention_mask`` 0 on the padding (default: all ones). The prompt runs as one step (past = 0),
    then one token per sequence per step against the cache. ``device`` ("cpu" or "cuda") is where
    the cache lives between steps (IOBinding: with "cuda" it never leaves the GPU; only the logits
    come back, one position per row at decode steps). Returns the new tokens [batch, n],
    n <= max_new_tokens: fewer when every row has produced ``eos_token_id`` (rows that finished
    early repeat it). ValueError for inputs it cannot take (shapes, ids outside the vocabulary,
    right padding, a graph without the cache, device "cuda" without the CUDA EP)."""
    import numpy as np

    ids = np.asarray(input_ids)
    if ids.ndim != 2 or ids.shape[1] == 0 or not np.issubdtype(ids.dtype, np.integer):
        raise ValueError(
            f"input_ids must be a non-empty integer array [batch, prompt], got {ids.dtype} {ids.shape}"
        )
    if max_new_tokens < 0:
        raise ValueError(f"max_new_tokens must be >= 0, got {max_new_tokens}")
    mask = (
        np.ones(ids.shape, np.int64)
        if attention_mask is None
        else np.asarray(attention_mask).astype(np.int64)
    )
    if mask.shape != ids.shape or not np.isin(mask, (0, 1)).all():
        raise ValueError(
            f"attention_mask must be 0 / 1 of the shape of input_ids {ids.shape}, got {mask.shape}"
        )
    if not mask[:, -1].all():
        raise ValueError(
            "attention_mask: pad prompts on the left (the last position of every row must be a token)"
        )
    inputs, out_meta = session.get_inputs(), session.get_outputs()
    past = [i for i in inputs if i.name.startswith("past_key_values.")]
    if not past or not {"input_ids", "attention_mask", "position_ids"} <= {i.name for i in inputs}:
        raise ValueError(
            "the session's model has no KV cache inputs (past_key_values.*): export it with "
            "pyquant.export_causal_lm"
        )
    outputs = [o.name for o in out_meta]
    present_of = {p.name: "present." + p.name[len("past_key_values.") :] for p in past}
    missing = [n for n in present_of.values() if n not in outputs]
    if missing or outputs[0] != "logits":
        raise ValueError(
            f"the session's model lacks outputs logits / {missing}: not a pyquant.export_causal_lm graph"
        )
    if device not in ("cpu", "cuda"):
        raise ValueError(f'device must be "cpu" or "cuda", got {device!r}')
    if device == "cuda" and "CUDAExecutionProvider" not in session.get_providers():
        raise ValueError('device="cuda" needs a session on the CUDA execution provider')
    vocab = out_meta[0].shape[-1]
    if isinstance(vocab, int) and (ids.min() < 0 or ids.max() >= vocab):
        raise ValueError(
            f"input_ids must lie in [0, {vocab}) (the model's vocabulary), got {ids.min()}..{ids.max()}"
        )
    batch = ids.shape[0]
    cache: dict[str, Any] = {}
    for p in past:
        h, d = p.shape[1], p.shape[3]
        if p.type not in _NUMPY_DTYPES or not isinstance(h, int) or not isinstance(d, int):
            raise ValueError(f"cache input {p.name}: unsupported type / shape {p.type} {p.shape}")
        cache[p.name] = np.zeros((batch, h, 0, d), _NUMPY_DTYPES[p.type])

    binding = session.io_binding()
    step_ids = ids.astype(np.int64)
    positions = np.where(mask == 1, np.cumsum(mask, axis=1) - 1, 1).astype(np.int64)
    done = np.zeros(batch, bool)
    new_tokens: list[Any] = []
    for _ in range(max_new_tokens):
        binding.clear_binding_inputs()
        binding.clear_binding_outputs()
        binding.bind_cpu_input("input_ids", np.ascontiguousarray(step_ids))
        binding.bind_cpu_input("attention_mask", np.ascontiguousarray(mask))
        binding.bind_cpu_input("position_ids", np.ascontiguousarray(positions))
        for name, value in cache.items():
            if isinstance(value, np.ndarray):
                binding.bind_cpu_input(name, value)
            else:
                binding.bind_ortvalue_input(name, value)
        for name in outputs:
            binding.bind_output(name, device)
        session.run_with_iobinding(binding)
        values = binding.get_outputs()
        logits = values[0].numpy()[:, -1, :]
        produced = dict(zip(outputs, values, strict=True))
        cache = {name: produced[present_of[name]] for name in cache}
        token = logits.argmax(axis=-1).astype(np.int64)
        if eos_token_id is not None:
            token = np.where(done, eos_token_id, token)
            done |= token == eos_token_id
        new_tokens.append(token)
        if eos_token_id is not None and done.all():
            break
        step_ids = token[:, None]
        positions = mask.sum(axis=1, keepdims=True).astype(np.int64)
        mask = np.concatenate([mask, np.ones((batch, 1), np.int64)], axis=1)
    return np.stack(new_tokens, axis=1) if new_tokens else np.zeros((batch, 0), np.int64)
