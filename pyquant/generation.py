"""Greedy decoding in ONNX Runtime over a graph from ``pyquant.export_causal_lm``.

Two cache contracts (pyquant/export_lm.py):

* growing cache (the default export): every step feeds the past keys / values and gets them back
  one token longer. Shapes change every step.
* static cache (``export_causal_lm(..., static_cache=True)``): fixed-length buffers written at
  ``cache_position`` by pyquant's KVCacheWrite. ``generate`` allocates one set of buffers on the
  device and binds each as both past and present, so the op writes only the step's slots in place
  (files exported before session 35, without the ``pyquant.kv_cache_write`` metadata: two sets, a
  step reading one and writing the other), and every decode step binds the same addresses and
  shapes. On a session whose CUDA provider has ``enable_cuda_graph=1``, the decode steps are then
  captured once as two CUDA graphs (one per step parity) and replayed: a step
  costs the GPU's time, not ORT's ~5 us of host time per node. The prompt runs outside the graphs
  (``gpu_graph_id = -1``). The graph's ``next_tokens`` output (the greedy tokens) is bound to the
  next step's ``input_ids`` buffer, so the logits stay on the device and only [batch, 1] tokens
  come back per step.
"""

from __future__ import annotations

import itertools
import threading
import weakref
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnxruntime as ort

__all__ = ["generate", "uses_cuda_graph"]

_NUMPY_DTYPES = {"tensor(float)": np.float32, "tensor(float16)": np.float16, "tensor(double)": np.float64}
PAST_PREFIX = "past_key_values."
# The static-cache graph's output of greedy tokens (pyquant/export_lm.py); read by generate.
NEXT_TOKENS = "next_tokens"
# Model metadata of a static-cache graph whose cache writes (pyquant::KVCacheWrite) may run in
# place: generate then binds one buffer per layer as both past and present.
IN_PLACE_CACHE_KEY = "pyquant.kv_cache_write"
IN_PLACE_CACHE_VALUE = "in_place"


@dataclass
class _Graph:
    """What generate() needs to know about the session's graph."""

    outputs: list[str]
    past: dict[str, tuple[int, int, type]]  # past name -> (kv_heads, head_dim, numpy dtype)
    present_of: dict[str, str]
    vocab: Any
    logits_dtype: np.dtype
    static: bool
    next_tokens: bool  # the graph outputs its greedy tokens (static-cache graphs since session 35)
    in_place_cache: bool  # past and present may share one buffer (IN_PLACE_CACHE_KEY)


def uses_cuda_graph(session: ort.InferenceSession) -> bool:
    """Whether ``session`` runs on the CUDA provider with ``enable_cuda_graph`` on."""
    opts = session.get_provider_options().get("CUDAExecutionProvider", {})
    return str(opts.get("enable_cuda_graph", "0")).lower() in ("1", "true")


def _inspect(session: ort.InferenceSession) -> _Graph:
    inputs, out_meta = session.get_inputs(), session.get_outputs()
    past = [i for i in inputs if i.name.startswith(PAST_PREFIX)]
    if not past or not {"input_ids", "attention_mask", "position_ids"} <= {i.name for i in inputs}:
        raise ValueError(
            "the session's model has no KV cache inputs (past_key_values.*): export it with "
            "pyquant.export_causal_lm"
        )
    outputs = [o.name for o in out_meta]
    present_of = {p.name: "present." + p.name[len(PAST_PREFIX) :] for p in past}
    missing = [n for n in present_of.values() if n not in outputs]
    if missing or outputs[0] != "logits":
        raise ValueError(
            f"the session's model lacks outputs logits / {missing}: not a pyquant.export_causal_lm graph"
        )
    cache: dict[str, tuple[int, int, type]] = {}
    for p in past:
        h, d = p.shape[1], p.shape[3]
        if p.type not in _NUMPY_DTYPES or not isinstance(h, int) or not isinstance(d, int):
            raise ValueError(f"cache input {p.name}: unsupported type / shape {p.type} {p.shape}")
        cache[p.name] = (h, d, _NUMPY_DTYPES[p.type])
    static = "cache_position" in {i.name for i in inputs}
    logits_dtype = np.dtype(_NUMPY_DTYPES.get(out_meta[0].type, np.float32))
    next_tokens = static and NEXT_TOKENS in outputs
    meta = session.get_modelmeta().custom_metadata_map
    in_place = static and meta.get(IN_PLACE_CACHE_KEY) == IN_PLACE_CACHE_VALUE
    vocab = out_meta[0].shape[-1]
    return _Graph(outputs, cache, present_of, vocab, logits_dtype, static, next_tokens, in_place)


def generate(
    session: ort.InferenceSession,
    input_ids: Any,
    max_new_tokens: int,
    *,
    attention_mask: Any = None,
    eos_token_id: int | None = None,
    device: str = "cpu",
    cache_length: int | None = None,
) -> Any:
    """Greedy decoding with the KV cache of a graph from ``pyquant.export_causal_lm``.

    input_ids: [batch, prompt] integer tokens; prompts of different lengths are left-padded, with
    ``attention_mask`` 0 on the padding (default: all ones). The prompt runs as one step, then one
    token per sequence per step against the cache. ``device`` ("cpu" or "cuda") is where the cache
    lives between steps (IOBinding: with "cuda" it never leaves the GPU; only the logits come back,
    one position per row at decode steps, or with a static cache only the chosen tokens). With a
    static-cache graph, ``cache_length`` is the buffers' length (default prompt + max_new_tokens)
    and, on a session with CUDA graphs enabled, decode steps replay CUDA graphs (module docstring).
    Returns the new tokens [batch, n], n <= max_new_tokens: fewer when every row has produced
    ``eos_token_id`` (rows that finished early repeat it). ValueError for inputs it cannot take
    (shapes, ids outside the vocabulary, right padding, a graph without the cache, device "cuda"
    without the CUDA EP, a cache too short)."""
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
    graph = _inspect(session)
    if device not in ("cpu", "cuda"):
        raise ValueError(f'device must be "cpu" or "cuda", got {device!r}')
    if device == "cuda" and "CUDAExecutionProvider" not in session.get_providers():
        raise ValueError('device="cuda" needs a session on the CUDA execution provider')
    if isinstance(graph.vocab, int) and (ids.min() < 0 or ids.max() >= graph.vocab):
        raise ValueError(
            f"input_ids must lie in [0, {graph.vocab}) (the model's vocabulary), got {ids.min()}..{ids.max()}"
        )
    if cache_length is not None and not graph.static:
        raise ValueError("cache_length applies to static-cache graphs (export_causal_lm(static_cache=True))")
    if graph.static:
        length = ids.shape[1] + max_new_tokens if cache_length is None else int(cache_length)
        if length < ids.shape[1] + max_new_tokens:
            raise ValueError(
                f"cache_length {length} < prompt {ids.shape[1]} + max_new_tokens {max_new_tokens}"
            )
        return _generate_static(
            session, graph, ids.astype(np.int64), mask, max_new_tokens, eos_token_id, device, length
        )
    return _generate_growing(session, graph, ids.astype(np.int64), mask, max_new_tokens, eos_token_id, device)


def _prompt_positions(mask: np.ndarray) -> np.ndarray:
    """Position ids of left-padded prompts: 0, 1, ... from each row's first token (HF's rule;
    padding gets 1, which its masked slots never let matter)."""
    return np.where(mask == 1, np.cumsum(mask, axis=1) - 1, 1).astype(np.int64)


class _Greedy:
    """Next tokens from the last position's logits, with EOS bookkeeping."""

    def __init__(self, batch: int, eos_token_id: int | None) -> None:
        self.eos = eos_token_id
        self.done = np.zeros(batch, bool)
        self.tokens: list[np.ndarray] = []

    def step(self, logits: np.ndarray) -> bool:
        """Appends the tokens of ``logits`` [batch, vocab]; True when every row has finished. The
        argmax runs in float32: numpy's float16 argmax is ~4x slower than a cast and a float32 one
        (1.7 against 0.4 ms at [8, 32000]), and picks the same index."""
        return self.add(np.asarray(logits, np.float32).argmax(axis=-1))

    def add(self, token: np.ndarray) -> bool:
        """Appends ``token`` [batch] (the rows' greedy choices); True when every row has finished."""
        token = np.asarray(token).astype(np.int64)
        if self.eos is not None:
            token = np.where(self.done, self.eos, token)
            self.done |= token == self.eos
        self.tokens.append(token)
        return self.eos is not None and bool(self.done.all())

    def result(self, batch: int) -> np.ndarray:
        return np.stack(self.tokens, axis=1) if self.tokens else np.zeros((batch, 0), np.int64)


def _generate_growing(
    session: ort.InferenceSession,
    graph: _Graph,
    ids: np.ndarray,
    mask: np.ndarray,
    max_new_tokens: int,
    eos_token_id: int | None,
    device: str,
) -> np.ndarray:
    batch = ids.shape[0]
    cache: dict[str, Any] = {
        name: np.zeros((batch, h, 0, d), dtype) for name, (h, d, dtype) in graph.past.items()
    }
    binding = session.io_binding()
    step_ids = ids
    positions = _prompt_positions(mask)
    greedy = _Greedy(batch, eos_token_id)
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
        for name in graph.outputs:
            binding.bind_output(name, device)
        session.run_with_iobinding(binding)
        values = binding.get_outputs()
        produced = dict(zip(graph.outputs, values, strict=True))
        cache = {name: produced[graph.present_of[name]] for name in cache}
        if greedy.step(values[0].numpy()[:, -1, :]):
            break
        step_ids = greedy.tokens[-1][:, None]
        positions = mask.sum(axis=1, keepdims=True).astype(np.int64)
        mask = np.concatenate([mask, np.ones((batch, 1), np.int64)], axis=1)
    return greedy.result(batch)


class _StaticState:
    """A static-cache generation's device values for one (batch, cache length): the cache buffers
    (one set bound as past and present where the graph writes in place, else two, A and B, a step
    reading one and writing the other), the decode step's inputs (two token buffers in turn where
    the graph outputs next_tokens) and logits, and one IOBinding per step parity that binds the same
    values every step (their contents change in place), so that each parity's decode step can be
    captured once as a CUDA graph and replayed by every later call with the same shapes. The
    buffers start as zeros; later calls find the previous call's values in slots they have not
    written yet, which the mask hides (a hidden slot's attention weight is exactly 0)."""

    def __init__(
        self,
        session: ort.InferenceSession,
        graph: _Graph,
        batch: int,
        length: int,
        device: str,
        graph_ids: Iterator[int],
    ):
        self.key = (batch, length, device)
        self.length = length
        self.device = device

        def on_device(array: np.ndarray) -> ort.OrtValue:
            return ort.OrtValue.ortvalue_from_numpy(np.array(array, order="C"), device, 0)

        # zeros, not uninitialised memory: a hidden slot weighs 0, but 0 x NaN would still be NaN.
        # One set bound as both past and present where the graph writes its cache in place
        # (pyquant::KVCacheWrite: only the step's slots are written); else two, read one, write
        # the other (a graph that copies its whole past into present every step).
        self.buffers = [
            {n: on_device(np.zeros((batch, h, length, d), dt)) for n, (h, d, dt) in graph.past.items()}
            for _ in range(1 if graph.in_place_cache else 2)
        ]
        self.mask = on_device(np.zeros((batch, length), np.int64))
        # With a next_tokens output, decode steps alternate between two token buffers as between
        # the cache buffers: the step that reads ids[i] writes its greedy tokens into ids[1 - i],
        # the next step's input, so only they come back to the host, not the logits. Without it
        # (a graph exported before session 35) ids[0] is updated from the host every step.
        self.device_tokens = graph.next_tokens
        self.ids = [on_device(np.zeros((batch, 1), np.int64)) for _ in range(2 if graph.next_tokens else 1)]
        self.positions = on_device(np.zeros((batch, 1), np.int64))
        self.slot = on_device(np.zeros(1, np.int64))
        self.present_of = graph.present_of
        vocab = graph.vocab if isinstance(graph.vocab, int) else None
        self.logits = (
            ort.OrtValue.ortvalue_from_shape_and_type((batch, 1, vocab), graph.logits_dtype, device, 0)
            if vocab is not None
            else None
        )
        graphs = device == "cuda" and uses_cuda_graph(session)
        self.decode: list[tuple[ort.IOBinding, ort.RunOptions]] = []
        for i, read in enumerate((1, 0)):  # the first decode step reads B (the prompt step wrote it)
            b = session.io_binding()
            b.bind_ortvalue_input("input_ids", self.ids[i % len(self.ids)])
            b.bind_ortvalue_input("position_ids", self.positions)
            b.bind_ortvalue_input("cache_position", self.slot)
            if self.logits is not None:
                b.bind_ortvalue_output("logits", self.logits)
            else:
                b.bind_output("logits", device)  # first: get_outputs() lists outputs in binding order
            if self.device_tokens:
                b.bind_ortvalue_output(NEXT_TOKENS, self.ids[1 - i])
            self.bind_cache(b, read)
            options = ort.RunOptions()
            if graphs:  # ids unique in the session: ORT keeps a captured graph until the session goes
                options.add_run_config_entry("gpu_graph_id", str(next(graph_ids)))
            self.decode.append((b, options))
        self.prompt_options = ort.RunOptions()
        if graphs:  # the prompt step's shapes are its own: never captured
            self.prompt_options.add_run_config_entry("gpu_graph_id", "-1")

    def take_tokens(self, greedy: _Greedy, binding: ort.IOBinding, written: int, prompt: bool) -> bool:
        """Hands the step's greedy tokens to ``greedy`` (True when every row has finished): from
        ids[written] where the graph wrote them, else the argmax of the step's logits on the host
        (the prompt step's are its binding's first output; a decode step's, self.logits when
        the vocabulary is known)."""
        if self.device_tokens:
            return greedy.add(self.ids[written].numpy()[:, 0])
        logits = binding.get_outputs()[0] if prompt or self.logits is None else self.logits
        return greedy.step(logits.numpy()[:, -1, :])

    def bind_cache(self, binding: ort.IOBinding, read: int) -> None:
        """Binds the mask, past = buffer set ``read`` and present = the other set (the same one when
        there is one)."""
        binding.bind_ortvalue_input("attention_mask", self.mask)
        sets = len(self.buffers)
        for name, value in self.buffers[read % sets].items():
            binding.bind_ortvalue_input(name, value)
            binding.bind_ortvalue_output(self.present_of[name], self.buffers[(1 - read) % sets][name])


@dataclass
class _SessionStatic:
    """Per session: a lock (concurrent static-cache calls take turns: they would share the
    buffers), the CUDA graph ids handed out so far, and the state of its last static-cache call
    (a new (batch, length, device) replaces it)."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    graph_ids: Iterator[int] = field(default_factory=lambda: itertools.count(1))
    state: _StaticState | None = None


_PER_SESSION: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_PER_SESSION_LOCK = threading.Lock()


def _generate_static(
    session: ort.InferenceSession,
    graph: _Graph,
    ids: np.ndarray,
    prompt_mask: np.ndarray,
    max_new_tokens: int,
    eos_token_id: int | None,
    device: str,
    length: int,
) -> np.ndarray:
    batch = ids.shape[0]
    greedy = _Greedy(batch, eos_token_id)
    if max_new_tokens == 0:
        return greedy.result(batch)
    with _PER_SESSION_LOCK:
        record = _PER_SESSION.setdefault(session, _SessionStatic())
    with record.lock:
        if record.state is None or record.state.key != (batch, length, device):
            record.state = _StaticState(session, graph, batch, length, device, record.graph_ids)
        return _run_static(session, record.state, greedy, ids, prompt_mask, max_new_tokens)


def _run_static(
    session: ort.InferenceSession,
    state: _StaticState,
    greedy: _Greedy,
    ids: np.ndarray,
    prompt_mask: np.ndarray,
    max_new_tokens: int,
) -> np.ndarray:
    batch, prompt = ids.shape

    # The prompt: slots 0..prompt-1, read A, write B.
    slot_mask = np.zeros((batch, state.length), np.int64)
    slot_mask[:, :prompt] = prompt_mask
    state.mask.update_inplace(slot_mask)
    binding = session.io_binding()
    binding.bind_cpu_input("input_ids", ids)
    binding.bind_cpu_input("position_ids", _prompt_positions(prompt_mask))
    binding.bind_cpu_input("cache_position", np.arange(prompt, dtype=np.int64))
    binding.bind_output("logits", state.device)  # first: get_outputs() lists outputs in binding order
    if state.device_tokens:
        binding.bind_ortvalue_output(NEXT_TOKENS, state.ids[0])
    state.bind_cache(binding, 0)
    session.run_with_iobinding(binding, state.prompt_options)
    if state.take_tokens(greedy, binding, 0, prompt=True) or max_new_tokens == 1:
        return greedy.result(batch)

    positions = prompt_mask.sum(axis=1, keepdims=True).astype(np.int64)
    for step in range(1, max_new_tokens):
        slot = prompt + step - 1
        slot_mask[:, slot] = 1
        state.mask.update_inplace(slot_mask)
        state.slot.update_inplace(np.array([slot], np.int64))
        state.positions.update_inplace(positions)
        if not state.device_tokens:
            state.ids[0].update_inplace(np.ascontiguousarray(greedy.tokens[-1][:, None]))
        b, options = state.decode[(step - 1) % 2]
        session.run_with_iobinding(b, options)
        if state.take_tokens(greedy, b, 1 - (step - 1) % 2, prompt=False):
            break
        positions = positions + 1
    return greedy.result(batch)
