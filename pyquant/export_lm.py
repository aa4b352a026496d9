"""Export a decoder-only causal LM with its KV cache as graph inputs and outputs, for generation.

``pyquant.export`` on a causal LM gives a graph that recomputes the whole sequence at every step:
fine for scoring (``pyquant eval``), useless for serving, where decode steps run one token per
sequence against the cached keys and values. That M = 1 step is where INT4 / FP8 weights pay off
most (the op's decode kernels stream the packed weights once), so the quantized model has to be
exported with its cache:

    model = pyquant.quantize(hf_causal_lm, pyquant.Int4Config(block_size=64))
    pyquant.export_causal_lm(model, "lm.onnx")
    sess = pyquant.ort.make_session("lm.onnx")
    new_tokens = pyquant.ort.generate(sess, prompt_ids, max_new_tokens=32)

The graph (names as Hugging Face Optimum and onnxruntime-genai use them):

    inputs   input_ids                    int64 [batch, seq]
             attention_mask               int64 [batch, past + seq]  1 = real token, 0 = padding
             position_ids                 int64 [batch, seq]
             past_key_values.{i}.key      T     [batch, kv_heads, past, head_dim]  (i = layer)
             past_key_values.{i}.value    T     [batch, kv_heads, past, head_dim]
    outputs  logits                       T     [batch, seq, vocab]
             present.{i}.key / .value     T     [batch, kv_heads, past + seq, head_dim]

``export_causal_lm(..., static_cache=True)`` exports instead a cache of fixed length L (chosen by
the caller; ``CausalLMWithStaticCache``): one more input ``cache_position`` int64 [seq] (the slots
this step writes), ``attention_mask`` [batch, L] (1 = the slot holds a token), past and present
[batch, kv_heads, L, head_dim], ``logits`` [batch, 1, vocab] (the last position only) and
``next_tokens`` int64 [batch, 1] (the greedy choice: their argmax, first index on ties, as
torch.argmax). Its decode steps keep their shapes, so ORT can replay them as CUDA graphs, and
greedy generation can feed ``next_tokens`` to the next step without the logits leaving the device
(pyquant/generation.py).

T is the model's dtype when exported (float32, or float16 after ``model.half()``). Every dim named
above except kv_heads, head_dim and vocab is dynamic; the first step passes past = 0 (empty
arrays). Only models whose layers all use full attention with the standard DynamicCache are
supported (Llama, Mistral, Qwen2, SmolLM2, ...); anything else raises ValueError.
"""

from __future__ import annotations

import contextlib
import inspect
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from pyquant.export import ExportReport, export
from pyquant.generation import IN_PLACE_CACHE_KEY, IN_PLACE_CACHE_VALUE, NEXT_TOKENS

__all__ = ["CacheSpec", "CausalLMWithCache", "CausalLMWithStaticCache", "cache_spec", "export_causal_lm"]

PAST_NAME = "past_key_values.{layer}.{kind}"
CACHE_POSITION = "cache_position"
PRESENT_NAME = "present.{layer}.{kind}"
KINDS = ("key", "value")


@dataclass(frozen=True)
class CacheSpec:
    """Shape of one model's KV cache: per layer a key and a value [batch, kv_heads, length, head_dim]."""

    num_layers: int
    num_kv_heads: int
    head_dim: int

    @property
    def past_names(self) -> list[str]:
        return [PAST_NAME.format(layer=i, kind=k) for i in range(self.num_layers) for k in KINDS]

    @property
    def present_names(self) -> list[str]:
        return [PRESENT_NAME.format(layer=i, kind=k) for i in range(self.num_layers) for k in KINDS]


def _config(model: nn.Module) -> Any:
    cfg = getattr(model, "config", None)
    if cfg is None:
        raise ValueError(
            "export_causal_lm expects a Hugging Face causal LM (a model with .config), "
            f"got {type(model).__name__}"
        )
    return cfg


def cache_spec(model: nn.Module) -> CacheSpec:
    """The KV cache of ``model``, or ValueError naming what makes it unsupported."""
    cfg = _config(model)
    name = type(model).__name__
    if getattr(cfg, "is_encoder_decoder", False):
        raise ValueError(f"{name}: encoder-decoder models are not supported (decoder-only causal LMs only)")
    get_out = getattr(model, "get_output_embeddings", None)
    if get_out is None or get_out() is None:
        raise ValueError(
            f"{name} has no LM head: export_causal_lm needs a causal LM (e.g. AutoModelForCausalLM)"
        )
    layers = getattr(cfg, "num_hidden_layers", None)
    heads = getattr(cfg, "num_attention_heads", None)
    hidden = getattr(cfg, "hidden_size", None)
    if not all(isinstance(v, int) and v > 0 for v in (layers, heads, hidden)):
        raise ValueError(f"{name}: config lacks num_hidden_layers / num_attention_heads / hidden_size")
    kinds = set(getattr(cfg, "layer_types", None) or ["full_attention"])
    if kinds != {"full_attention"}:
        raise ValueError(
            f"{name}: layer types {sorted(kinds)} are not supported (only full attention: sliding-window "
            "and recurrent layers keep caches of another shape)"
        )
    if getattr(cfg, "sliding_window", None) and getattr(cfg, "use_sliding_window", True):
        raise ValueError(f"{name}: sliding-window attention is not supported (full attention only)")
    kv_heads = getattr(cfg, "num_key_value_heads", None) or heads
    head_dim = getattr(cfg, "head_dim", None) or hidden // heads
    return CacheSpec(int(layers), int(kv_heads), int(head_dim))


def _layer_pairs(spec: CacheSpec, past: Sequence[torch.Tensor]) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """The graph's flat past [key_0, value_0, key_1, ...] as (key, value) per layer."""
    n = spec.num_layers
    if len(past) != 2 * n:
        raise ValueError(f"expected {2 * n} past tensors (key and value of {n} layers), got {len(past)}")
    return [(past[2 * i], past[2 * i + 1]) for i in range(n)]


def _cache_argument(lm: nn.Module) -> str:
    """transformers 5.x renames the forward's ``past_key_values`` to ``cache`` (the old name warns)."""
    return "cache" if "cache" in inspect.signature(lm.forward).parameters else "past_key_values"


class CausalLMWithCache(nn.Module):
    """``lm`` as a function of flat tensors: (input_ids, attention_mask, position_ids, past) ->
    (logits, present...), past / present as [key_0, value_0, key_1, ...] (the graph's order)."""

    def __init__(self, lm: nn.Module) -> None:
        super().__init__()
        self.lm = lm
        self.spec = cache_spec(lm)

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        position_ids: torch.Tensor,
        past_key_values: Sequence[torch.Tensor],
    ) -> tuple[torch.Tensor, ...]:
        cache = _dynamic_cache(_layer_pairs(self.spec, past_key_values), self.lm.config)
        cache_arg = _cache_argument(self.lm)
        out = self.lm(
            input_ids=input_ids,
            attention_mask=attention_mask,
            position_ids=position_ids,
            use_cache=True,
            **{cache_arg: cache},
        )
        present_cache = getattr(out, "cache", None)
        if present_cache is None:
            present_cache = out.past_key_values
        present: list[torch.Tensor] = []
        for key, value in _cache_tensors(present_cache):
            present += [key, value]
        return (out.logits, *present)


class CausalLMWithStaticCache(nn.Module):
    """``lm`` over a cache of fixed length: (input_ids [b, s], attention_mask [b, L],
    position_ids [b, s], cache_position [s], past [b, kv_heads, L, head_dim] x 2 per layer) ->
    (logits [b, 1, vocab] of the last position only, next_tokens [b, 1] int64 = their argmax,
    present: each past with this step's keys / values written at the slots ``cache_position``).

    Every shape stays the same from one decode step to the next (L is the buffer's length, chosen
    by the caller), so ORT can replay a decode step as a CUDA graph. ``attention_mask`` says which
    of the L slots hold a token (this step's included); a query at slot q sees the slots <= q that
    do. The 4-D additive mask built here goes to the model as is (transformers passes 4-D masks
    through), so neither transformers' mask code nor its cache length enters the graph.

    Why the last position's logits only: generation needs no others, and a prompt's full logits
    ([b, s, vocab]) cost an lm_head GEMM over every prompt token plus a copy to the host: about
    25 ms of the 38 ms prompt step of 8 x 128 tokens on an H100 (vocabulary 32,000, float16; CUPTI
    profile in bench/results/2026-11-27-h100-s34-llama8b4l-kernels-cuda-ep-decode.json).

    Why the write is a pyquant op (``KVCacheWrite``, ort_ops/ops/kv_cache_write.h): in plain ONNX
    (ScatterND, or the Gather + Where of session 34) every step reads and writes each layer's
    whole buffer into a second one: ~4x the bytes attention reads, growing with L. ORT's CUDA
    ScatterND also took 0.56 ms per cache tensor and run at batch 8. The op writes only the step's
    slots when its output is bound to its input's buffer, which ``pyquant.ort.generate`` does (one
    buffer set instead of two), and copies the buffer first otherwise.

    Why ``next_tokens``: greedy decoding on the host read the logits back every step and took
    their argmax there; numpy's float16 argmax over [8, 32000] alone took ~1.7 ms on this
    project's VM, more than a whole CUDA-graph decode step's GPU time (0.77 ms with INT4 on an
    H100; bench/results/2026-11-27-h100-s35-llama8b4l-b8kernels-cuda-ep-decode.json). The argmax
    runs in float32 (a Cast of [b, vocab] first), so ties and order match torch's on the same
    logits.

    Attention runs ``grouped_query_attention``: the keys / values of a KV head are not repeated for
    each of its query heads (with a buffer of L slots, that copy would cost every step as much as L
    tokens' keys and values times the group size)."""

    def __init__(self, lm: nn.Module) -> None:
        super().__init__()
        self.lm = lm
        self.spec = cache_spec(lm)
        self.logits_to_keep = "logits_to_keep" in inspect.signature(lm.forward).parameters

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        position_ids: torch.Tensor,
        cache_position: torch.Tensor,
        past_key_values: Sequence[torch.Tensor],
    ) -> tuple[torch.Tensor, ...]:
        pairs = _layer_pairs(self.spec, past_key_values)
        dtype = past_key_values[0].dtype
        slots = torch.arange(past_key_values[0].shape[2], device=input_ids.device)
        visible = (slots[None, :] <= cache_position[:, None])[None, None] & (
            attention_mask[:, None, None, :] != 0
        )
        mask = torch.zeros(visible.shape, dtype=dtype, device=visible.device).masked_fill(
            ~visible, torch.finfo(dtype).min
        )
        cache = _SlotWriteCache(pairs, cache_position)
        cache_arg = _cache_argument(self.lm)
        with _grouped_attention(self.lm.config):
            out = self.lm(
                input_ids=input_ids,
                attention_mask=mask,
                position_ids=position_ids,
                use_cache=True,
                **{cache_arg: cache},
                **({"logits_to_keep": 1} if self.logits_to_keep else {}),
            )
        present: list[torch.Tensor] = []
        for key, value in cache.written:
            present += [key, value]
        logits = out.logits[:, -1:]
        next_tokens = logits[:, 0].float().argmax(dim=-1, keepdim=True)
        return (logits, next_tokens, *present)


GROUPED_ATTENTION = "pyquant_grouped"


def grouped_query_attention(
    module: nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    scaling: float,
    dropout: float = 0.0,
    **kwargs: Any,
) -> tuple[torch.Tensor, None]:
    """Attention with an additive mask for grouped KV heads without repeating the keys / values.

    query [b, heads, s, d], key / value [b, kv_heads, L, d], mask [b, 1 or heads, s, L] ->
    [b, s, heads, d] (what transformers' attention functions return). transformers' eager and SDPA
    paths first expand the keys and values to every query head (``repeat_kv``): with a static cache
    that is a copy of heads / kv_heads times the whole buffer per layer and step, however few slots
    hold tokens. Here the heads sharing a KV head become rows of one matrix product instead: query
    viewed as [b, kv_heads, group * s, d] against the unexpanded keys. Same products, same softmax."""
    if dropout or kwargs.get("sliding_window") or kwargs.get("softcap"):
        raise ValueError(
            "grouped_query_attention: no dropout, sliding window or softcap (full attention only)"
        )
    b, heads, s, d = query.shape
    kv_heads, length = key.shape[1], key.shape[2]
    group = heads // kv_heads
    q = query.reshape(b, kv_heads, group * s, d)
    scores = torch.matmul(q, key.transpose(2, 3)) * scaling  # [b, kv_heads, group * s, L]
    if attention_mask is not None:
        scores = scores.view(b, kv_heads, group, s, length)
        if attention_mask.shape[1] == 1:
            scores = scores + attention_mask[:, :, None]
        else:
            scores = scores + attention_mask.reshape(b, kv_heads, group, s, length)
        scores = scores.view(b, kv_heads, group * s, length)
    weights = torch.softmax(scores, dim=-1, dtype=torch.float32).to(query.dtype)
    out = torch.matmul(weights, value)  # [b, kv_heads, group * s, d]
    return out.view(b, heads, s, d).transpose(1, 2).contiguous(), None


@contextlib.contextmanager
def _grouped_attention(config: Any) -> Iterator[None]:
    """The model's attention layers call ``grouped_query_attention`` within the block."""
    from transformers import AttentionInterface

    AttentionInterface.register(GROUPED_ATTENTION, grouped_query_attention)
    before = config._attn_implementation
    config._attn_implementation = GROUPED_ATTENTION
    try:
        yield
    finally:
        config._attn_implementation = before


def _slot_write_cache_class() -> type:
    from transformers import DynamicCache

    class SlotWriteCache(DynamicCache):
        """A cache whose layers are fixed-length buffers: ``update`` writes the new keys / values at
        ``cache_position`` with ``pyquant::kv_cache_write`` (one ``pyquant::KVCacheWrite`` node per
        buffer in the graph, whose output is the written buffer) and returns the whole buffers for
        attention."""

        def __init__(self, pairs: list[tuple[torch.Tensor, torch.Tensor]], cache_position: torch.Tensor):
            super().__init__()
            self.buffers = pairs
            self.cache_position = cache_position
            self.written: list[tuple[torch.Tensor, torch.Tensor]] = list(pairs)

        def _write(self, past: torch.Tensor, new: torch.Tensor) -> torch.Tensor:
            return torch.ops.pyquant.kv_cache_write(past, new.to(past.dtype), self.cache_position)

        def update(self, key_states, value_states, layer_idx, *args, **kwargs):  # noqa: ANN001, ANN201
            past_key, past_value = self.buffers[layer_idx]
            key, value = self._write(past_key, key_states), self._write(past_value, value_states)
            self.written[layer_idx] = (key, value)
            return key, value

        def get_seq_length(self, layer_idx: int = 0) -> int:  # only used when position_ids are missing
            raise NotImplementedError("the static-cache graph always passes position_ids")

    return SlotWriteCache


def _SlotWriteCache(pairs: list[tuple[torch.Tensor, torch.Tensor]], cache_position: torch.Tensor) -> Any:  # noqa: N802
    return _slot_write_cache_class()(pairs, cache_position)


def _dynamic_cache(pairs: list[tuple[torch.Tensor, torch.Tensor]], config: Any) -> Any:
    """transformers' DynamicCache holding ``pairs`` (key, value per layer), across its API versions."""
    from transformers import DynamicCache

    params = inspect.signature(DynamicCache.__init__).parameters
    if "ddp_cache_data" in params:  # transformers >= 4.56
        return DynamicCache(ddp_cache_data=pairs, **({"config": config} if "config" in params else {}))
    return DynamicCache.from_legacy_cache(tuple(pairs))


def _cache_tensors(cache: Any) -> list[tuple[torch.Tensor, torch.Tensor]]:
    if hasattr(cache, "layers"):  # transformers >= 4.56
        return [(layer.keys, layer.values) for layer in cache.layers]
    return list(zip(cache.key_cache, cache.value_cache, strict=True))


def _model_dtype(model: nn.Module) -> torch.dtype:
    emb = model.get_input_embeddings() if hasattr(model, "get_input_embeddings") else None
    w = getattr(emb, "weight", None)
    return w.dtype if isinstance(w, torch.Tensor) and w.is_floating_point() else torch.float32


def export_causal_lm(
    model: nn.Module,
    path: str | os.PathLike,
    *,
    static_cache: bool = False,
    external_data: bool | None = None,
    opset_version: int | None = None,
    allow_float_fallback: bool = False,
) -> ExportReport:
    """Export a (quantized) decoder-only Hugging Face causal LM with its KV cache to ONNX at ``path``
    (the graph of the module docstring), verified as ``pyquant.export`` verifies (every quantized
    layer a pyquant node, no float copy of its weights).

    ``static_cache=True`` exports the fixed-length cache of ``CausalLMWithStaticCache`` instead
    (one more input, ``cache_position``, one more output, ``next_tokens``; the presents are as long
    as the pasts), whose decode steps keep their shapes, so that ``pyquant.ort.generate`` can replay
    them as CUDA graphs."""
    spec = cache_spec(model)
    cfg = _config(model)
    dtype = _model_dtype(model)
    # Example sizes all distinct and >= 2, so that torch.export keeps every dim symbolic and no
    # two dims are unified by accident (batch 2, 3 new tokens after 4 cached ones).
    batch, seq, past = 2, 3, 4
    g = torch.Generator().manual_seed(0)
    vocab = int(getattr(cfg, "vocab_size", 2) or 2)
    input_ids = torch.randint(0, vocab, (batch, seq), generator=g)
    attention_mask = torch.ones(batch, past + seq, dtype=torch.int64)
    position_ids = torch.arange(past, past + seq, dtype=torch.int64).expand(batch, seq).contiguous()
    # the static cache's buffers hold past + seq slots (+ 2 empty ones); the step writes slots past..
    length = past + seq + 2 if static_cache else past
    shape = (batch, spec.num_kv_heads, length, spec.head_dim)
    past_kv = tuple(torch.randn(shape, generator=g).to(dtype) for _ in range(2 * spec.num_layers))
    dyn = torch.export.Dim.DYNAMIC
    kv_dims = tuple({0: dyn, 2: dyn} for _ in past_kv)
    names = ["input_ids", "attention_mask", "position_ids"]
    outputs = ["logits", *spec.present_names]
    if static_cache:
        attention_mask = torch.cat([attention_mask, torch.zeros(batch, 2, dtype=torch.int64)], dim=1)
        cache_position = torch.arange(past, past + seq, dtype=torch.int64)
        wrapper: nn.Module = CausalLMWithStaticCache(model)
        args: tuple = (input_ids, attention_mask, position_ids, cache_position, past_kv)
        dynamic_shapes: tuple = ({0: dyn, 1: dyn}, {0: dyn, 1: dyn}, {0: dyn, 1: dyn}, {0: dyn}, kv_dims)
        names.append(CACHE_POSITION)
        outputs.insert(1, NEXT_TOKENS)
    else:
        wrapper = CausalLMWithCache(model)
        args = (input_ids, attention_mask, position_ids, past_kv)
        dynamic_shapes = ({0: dyn, 1: dyn}, {0: dyn, 1: dyn}, {0: dyn, 1: dyn}, kv_dims)
    return export(
        wrapper.eval(),
        args,
        path,
        input_names=[*names, *spec.past_names],
        output_names=outputs,
        metadata={IN_PLACE_CACHE_KEY: IN_PLACE_CACHE_VALUE} if static_cache else None,
        dynamic_shapes=dynamic_shapes,
        external_data=external_data,
        opset_version=opset_version,
        allow_float_fallback=allow_float_fallback,
    )
