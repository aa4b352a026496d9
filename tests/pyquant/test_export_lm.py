"""Causal-LM export with the KV cache (pyquant/export_lm.py) and greedy decoding in ORT
(pyquant.ort.generate): the graph's inputs / outputs, ORT against the torch model with
transformers' own cache at several batch / past / new-token sizes, token-for-token agreement with
transformers' greedy ``generate`` (left padding included), and the errors for models and inputs
it cannot take; the same for the static (fixed-length, slot-written) cache that lets decode steps
replay as CUDA graphs."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn as nn

from pyquant.config import Fp8Config, Int4Config, QuantizeConfig
from pyquant.export_lm import CausalLMWithCache, CausalLMWithStaticCache, cache_spec, export_causal_lm
from pyquant.quantize import quantize
from tests.pyquant.ort_session import cpu_session
from tests.pyquant.tiny_models import tiny_llama

# Every linear quantized: INT4 (symmetric and asymmetric), W8A8 FP8 and weight-only FP8 mixed.
MIXED = QuantizeConfig(
    default=Int4Config(32),
    overrides={
        "*.mlp.down_proj": Fp8Config(),
        "*.self_attn.o_proj": Int4Config(32, symmetric=False),
        "lm_head": Fp8Config(activation="none"),
    },
)


@pytest.fixture(scope="module")
def exported(tmp_path_factory):  # noqa: ANN201
    model = quantize(tiny_llama(eager=False, intermediate_size=96), MIXED)
    path = tmp_path_factory.mktemp("lm") / "lm.onnx"
    report = export_causal_lm(model, path)
    return model, path, report


@pytest.fixture(scope="module")
def exported_static(exported, tmp_path_factory):  # noqa: ANN201
    model = exported[0]
    path = tmp_path_factory.mktemp("lm_static") / "lm_static.onnx"
    export_causal_lm(model, path, static_cache=True)
    return model, path


def _feeds(spec, batch: int, past: int, seq: int, seed: int) -> tuple[dict[str, np.ndarray], tuple]:
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, 128, (batch, seq), generator=g)
    mask = torch.ones(batch, past + seq, dtype=torch.int64)
    pos = torch.arange(past, past + seq).expand(batch, seq).contiguous()
    kv = tuple(
        torch.randn(batch, spec.num_kv_heads, past, spec.head_dim, generator=g) for _ in spec.past_names
    )
    feeds = {"input_ids": ids.numpy(), "attention_mask": mask.numpy(), "position_ids": pos.numpy()}
    feeds.update({n: t.numpy() for n, t in zip(spec.past_names, kv, strict=True)})
    return feeds, (ids, mask, pos, kv)


def test_graph_inputs_outputs(exported) -> None:
    model, path, report = exported
    spec = cache_spec(model)
    assert (spec.num_layers, spec.num_kv_heads, spec.head_dim) == (2, 2, 16)
    # 7 linears per layer and the head: INT4 except down_proj (FP8) and lm_head (weight-only FP8)
    assert report.op_counts == {"MatMulInt4": 12, "LinearFp8": 3}
    sess = cpu_session(path)
    ins = {i.name: i for i in sess.get_inputs()}
    assert list(ins) == ["input_ids", "attention_mask", "position_ids", *spec.past_names]
    assert [o.name for o in sess.get_outputs()] == ["logits", *spec.present_names]
    past = ins["past_key_values.1.value"]
    assert past.type == "tensor(float)" and past.shape[1:2] + past.shape[3:] == [2, 16]
    assert all(isinstance(d, str) for d in (past.shape[0], past.shape[2]))  # batch, past: dynamic


@pytest.mark.parametrize(("batch", "past", "seq"), [(2, 4, 3), (1, 0, 5), (3, 9, 1), (2, 0, 1)])
def test_ort_matches_torch_with_cache(exported, batch: int, past: int, seq: int) -> None:
    model, path, _ = exported
    spec = cache_spec(model)
    feeds, args = _feeds(spec, batch, past, seq, seed=batch * 100 + past * 10 + seq)
    outs = cpu_session(path).run(None, feeds)
    with torch.no_grad():
        ref = CausalLMWithCache(model)(*args)
    assert outs[0].shape == (batch, seq, 128)
    for got, want in zip(outs, ref, strict=True):
        assert got.shape == tuple(want.shape)
        np.testing.assert_allclose(got, want.numpy(), atol=2e-3, rtol=2e-3)
    # the presents are the pasts with this step's keys / values appended
    for i in range(len(spec.present_names)):
        np.testing.assert_array_equal(outs[1 + i][:, :, :past], feeds[spec.past_names[i]])


def test_generate_matches_transformers(exported) -> None:
    model, path, _ = exported
    sess = cpu_session(path)
    import pyquant.ort

    g = torch.Generator().manual_seed(7)
    ids = torch.randint(0, 128, (3, 6), generator=g)
    mask = torch.ones_like(ids)
    mask[1, :2] = 0  # left padding: a 4-token prompt beside two 6-token ones
    mask[2, :5] = 0  # and a 1-token one
    with torch.no_grad():
        ref = model.generate(
            input_ids=ids, attention_mask=mask, max_new_tokens=12, do_sample=False, pad_token_id=2
        )
    # Llama's eos is 2: transformers pads a finished row with pad_token_id, ours repeats eos
    got = pyquant.ort.generate(sess, ids.numpy(), 12, attention_mask=mask.numpy(), eos_token_id=2)
    assert (got == 2).any()  # the comparison covers a row that stops early
    np.testing.assert_array_equal(got, ref[:, 6:].numpy())


def test_generate_stops_at_eos(exported) -> None:
    _, path, _ = exported
    sess = cpu_session(path)
    import pyquant.ort

    ids = np.array([[5, 9, 17, 3]])
    free = pyquant.ort.generate(sess, ids, 8)
    eos = int(free[0, 2])
    first = int(np.argmax(free[0] == eos))
    got = pyquant.ort.generate(sess, ids, 8, eos_token_id=eos)
    np.testing.assert_array_equal(got[0], free[0, : first + 1])
    assert pyquant.ort.generate(sess, ids, 0).shape == (1, 0)


def test_float16_export(tmp_path) -> None:
    model = quantize(tiny_llama(eager=False, seed=1), QuantizeConfig(default=Int4Config(32))).half()
    export_causal_lm(model, tmp_path / "lm16.onnx")
    sess = cpu_session(tmp_path / "lm16.onnx")
    assert sess.get_inputs()[3].type == "tensor(float16)"
    import pyquant.ort

    got = pyquant.ort.generate(sess, np.array([[1, 2, 3, 4, 5]]), 4)
    assert got.shape == (1, 4) and ((got >= 0) & (got < 128)).all()


class _Encoder(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.config = type("Cfg", (), {"num_hidden_layers": 1, "num_attention_heads": 2, "hidden_size": 8})()
        self.proj = nn.Linear(8, 8)

    def get_output_embeddings(self) -> None:
        return None


def test_unsupported_models() -> None:
    with pytest.raises(ValueError, match="Hugging Face causal LM"):
        cache_spec(nn.Linear(4, 4))
    with pytest.raises(ValueError, match="no LM head"):
        cache_spec(_Encoder())
    with pytest.raises(ValueError, match="layer types"):
        cache_spec(tiny_llama(layer_types=["full_attention", "sliding_attention"], sliding_window=8))


def test_generate_input_errors(exported, tmp_path) -> None:
    _, path, _ = exported
    sess = cpu_session(path)
    import pyquant.ort

    with pytest.raises(ValueError, match="integer array"):
        pyquant.ort.generate(sess, np.zeros((2, 3), np.float32), 2)
    with pytest.raises(ValueError, match="left"):
        pyquant.ort.generate(sess, np.ones((1, 3), np.int64), 2, attention_mask=np.array([[1, 1, 0]]))
    with pytest.raises(ValueError, match="max_new_tokens"):
        pyquant.ort.generate(sess, np.ones((1, 3), np.int64), -1)
    with pytest.raises(ValueError, match="vocabulary"):
        pyquant.ort.generate(sess, np.array([[1, 128]]), 2)
    with pytest.raises(ValueError, match="device"):
        pyquant.ort.generate(sess, np.ones((1, 3), np.int64), 2, device="gpu")
    with pytest.raises(ValueError, match="CUDA execution provider"):
        pyquant.ort.generate(sess, np.ones((1, 3), np.int64), 2, device="cuda")
    # a graph without a cache (pyquant.export of a plain module)
    from pyquant.export import export

    export(nn.Sequential(nn.Linear(4, 4)), (torch.randn(2, 3, 4),), tmp_path / "plain.onnx")
    with pytest.raises(ValueError, match="export_causal_lm"):
        pyquant.ort.generate(cpu_session(tmp_path / "plain.onnx"), np.ones((1, 3), np.int64), 2)


def test_static_graph_inputs_outputs(exported_static) -> None:
    model, path = exported_static
    spec = cache_spec(model)
    sess = cpu_session(path)
    ins = {i.name: i for i in sess.get_inputs()}
    assert list(ins) == ["input_ids", "attention_mask", "position_ids", "cache_position", *spec.past_names]
    outs = {o.name: o for o in sess.get_outputs()}
    assert list(outs) == ["logits", "next_tokens", *spec.present_names]
    assert outs["next_tokens"].type == "tensor(int64)" and len(outs["next_tokens"].shape) == 2
    assert len(ins["cache_position"].shape) == 1 and ins["cache_position"].type == "tensor(int64)"
    # every key / value buffer written by one KVCacheWrite node, whose output is the present
    import onnx

    graph = onnx.load(str(path), load_external_data=False).graph
    writes = [n for n in graph.node if n.domain == "pyquant" and n.op_type == "KVCacheWrite"]
    assert sorted(n.output[0] for n in writes) == sorted(spec.present_names)
    assert not [n for n in graph.node if n.op_type in ("ScatterND", "ScatterElements")]


@pytest.mark.parametrize(("batch", "past", "seq", "spare"), [(2, 4, 3, 2), (1, 0, 5, 0), (3, 9, 1, 6)])
def test_static_step_matches_growing_cache(
    exported_static, batch: int, past: int, seq: int, spare: int
) -> None:
    """One step on buffers of past + seq + spare slots (past filled, the rest zeros) gives the
    growing-cache graph's logits, writes its presents at slots past.. and leaves the others alone."""
    model, path = exported_static
    spec = cache_spec(model)
    feeds, (ids, mask, pos, kv) = _feeds(spec, batch, past, seq, seed=7 + batch + past + seq)
    length = past + seq + spare
    slot_mask = np.zeros((batch, length), np.int64)
    slot_mask[:, : past + seq] = 1
    buffers = [np.zeros((batch, spec.num_kv_heads, length, spec.head_dim), np.float32) for _ in kv]
    for buf, t in zip(buffers, kv, strict=True):
        buf[:, :, :past] = t.numpy()
        buf[:, :, past + seq :] = 5.0  # beyond the step: must not be read nor changed
    static_feeds = {"input_ids": ids.numpy(), "attention_mask": slot_mask, "position_ids": pos.numpy()}
    static_feeds["cache_position"] = np.arange(past, past + seq, dtype=np.int64)
    static_feeds.update(dict(zip(spec.past_names, buffers, strict=True)))
    got = cpu_session(path).run(None, static_feeds)
    with torch.no_grad():
        want = CausalLMWithCache(model)(ids, mask, pos, kv)
        torch_static = CausalLMWithStaticCache(model)(
            ids,
            torch.from_numpy(slot_mask),
            pos,
            torch.from_numpy(static_feeds["cache_position"]),
            [torch.from_numpy(b) for b in buffers],
        )
    assert got[0].shape == (batch, 1, 128)  # the last position's logits only
    np.testing.assert_allclose(got[0], want[0][:, -1:].numpy(), atol=2e-3, rtol=2e-3)
    np.testing.assert_allclose(torch_static[0].numpy(), want[0][:, -1:].numpy(), atol=1e-4, rtol=1e-4)
    # next_tokens: the greedy choice of the graph's own logits, in the graph and in torch
    np.testing.assert_array_equal(got[1], got[0].argmax(axis=-1))
    np.testing.assert_array_equal(torch_static[1].numpy(), torch_static[0].argmax(dim=-1).numpy())
    for present, grown, buf in zip(got[2:], want[1:], buffers, strict=True):
        assert present.shape == buf.shape
        np.testing.assert_allclose(present[:, :, : past + seq], grown.numpy(), atol=2e-3, rtol=2e-3)
        np.testing.assert_array_equal(present[:, :, past + seq :], buf[:, :, past + seq :])


def test_static_generate_matches_transformers(exported_static) -> None:
    model, path = exported_static
    sess = cpu_session(path)
    import pyquant.ort

    g = torch.Generator().manual_seed(7)
    ids = torch.randint(0, 128, (3, 6), generator=g)
    mask = torch.ones_like(ids)
    mask[1, :2] = 0
    mask[2, :5] = 0
    with torch.no_grad():
        ref = model.generate(
            input_ids=ids, attention_mask=mask, max_new_tokens=12, do_sample=False, pad_token_id=2
        )
    for cache_length in (None, 18, 41):
        got = pyquant.ort.generate(
            sess, ids.numpy(), 12, attention_mask=mask.numpy(), eos_token_id=2, cache_length=cache_length
        )
        assert (got == 2).any()
        np.testing.assert_array_equal(got, ref[:, 6:].numpy())
    free = pyquant.ort.generate(sess, ids.numpy(), 12, attention_mask=mask.numpy())
    assert free.shape == (3, 12)
    assert pyquant.ort.generate(sess, ids.numpy(), 1).shape == (3, 1)
    assert pyquant.ort.generate(sess, ids.numpy(), 0).shape == (3, 0)


def test_static_generate_without_next_tokens_or_in_place_cache(exported_static, tmp_path) -> None:
    """A static graph without the next_tokens output and without the in-place cache metadata (as
    exported before session 35) still generates: greedy tokens from its logits on the host, two
    cache buffer sets in turn. The same tokens as the graph that has both, which binds one buffer
    set as past and present (KVCacheWrite in place)."""
    import onnx

    import pyquant.ort
    from pyquant.generation import _PER_SESSION, IN_PLACE_CACHE_KEY

    _, path = exported_static
    proto = onnx.load(str(path))
    assert {p.key: p.value for p in proto.metadata_props}.get(IN_PLACE_CACHE_KEY) == "in_place"
    kept = [o for o in proto.graph.output if o.name != "next_tokens"]
    del proto.graph.output[:]
    proto.graph.output.extend(kept)
    del proto.metadata_props[:]
    old = tmp_path / "old.onnx"
    onnx.save(proto, str(old))
    old_sess, new_sess = cpu_session(old), cpu_session(path)
    assert "next_tokens" not in [o.name for o in old_sess.get_outputs()]
    ids = np.random.default_rng(3).integers(0, 128, (2, 5))
    mask = np.ones_like(ids)
    mask[0, :2] = 0
    want = pyquant.ort.generate(new_sess, ids, 9, attention_mask=mask, eos_token_id=2)
    got = pyquant.ort.generate(old_sess, ids, 9, attention_mask=mask, eos_token_id=2)
    np.testing.assert_array_equal(got, want)
    assert len(_PER_SESSION[new_sess].state.buffers) == 1
    assert len(_PER_SESSION[old_sess].state.buffers) == 2
    # a second call on the in-place buffers (slots of the first call still in them, masked)
    np.testing.assert_array_equal(
        pyquant.ort.generate(new_sess, ids, 9, attention_mask=mask, eos_token_id=2), want
    )


def test_static_generate_errors(exported, exported_static) -> None:
    import pyquant.ort

    with pytest.raises(ValueError, match="cache_length 7 < prompt 3"):
        pyquant.ort.generate(cpu_session(exported_static[1]), np.ones((1, 3), np.int64), 5, cache_length=7)
    with pytest.raises(ValueError, match="static-cache graphs"):
        pyquant.ort.generate(cpu_session(exported[1]), np.ones((1, 3), np.int64), 5, cache_length=9)
    assert not pyquant.ort.uses_cuda_graph(cpu_session(exported_static[1]))


def test_static_generate_threads(exported_static) -> None:
    """Concurrent static-cache generate() calls on one session take turns (they share its buffers)."""
    from concurrent.futures import ThreadPoolExecutor

    import pyquant.ort

    sess = cpu_session(exported_static[1])
    ids = np.random.default_rng(11).integers(0, 128, (2, 5))
    want = pyquant.ort.generate(sess, ids, 6, cache_length=16)
    with ThreadPoolExecutor(4) as pool:
        runs = list(pool.map(lambda _: pyquant.ort.generate(sess, ids, 6, cache_length=16), range(8)))
    for got in runs:
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("mask_heads", [0, 1, 8])
def test_grouped_query_attention_matches_repeated_kv(mask_heads: int) -> None:
    from pyquant.export_lm import grouped_query_attention

    g = torch.Generator().manual_seed(mask_heads)
    b, heads, kv_heads, s, length, d = 2, 8, 2, 3, 7, 16
    q = torch.randn(b, heads, s, d, generator=g)
    k, v = torch.randn(b, kv_heads, length, d, generator=g), torch.randn(b, kv_heads, length, d, generator=g)
    mask = None
    if mask_heads:
        mask = torch.zeros(b, mask_heads, s, length).masked_fill(
            torch.rand(b, mask_heads, s, length, generator=g) < 0.3, torch.finfo(torch.float32).min
        )
    got, _ = grouped_query_attention(nn.Module(), q, k, v, mask, scaling=0.25)
    # reference: every query head against its KV head repeated (transformers' repeat_kv order)
    k_rep, v_rep = (
        k.repeat_interleave(heads // kv_heads, dim=1),
        v.repeat_interleave(heads // kv_heads, dim=1),
    )
    scores = q @ k_rep.transpose(2, 3) * 0.25 + (0 if mask is None else mask)
    want = (torch.softmax(scores, dim=-1) @ v_rep).transpose(1, 2)
    assert got.shape == (b, s, heads, d)
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
