"""A causal LM exported with its KV cache (pyquant.export_causal_lm) on the CUDA EP: every linear a
pyquant node (INT4 symmetric / asymmetric, W8A8 FP8, weight-only FP8) in float16, against the
quantized model in torch (float32, CPU) at prefill and decode shapes, and greedy decoding with the
cache kept on the GPU (pyquant.ort.generate(device="cuda")) giving the same tokens as with the
cache copied through the host; the static cache (export_causal_lm(static_cache=True)) with its
decode steps replayed as CUDA graphs giving the same tokens as without graphs and as the growing
cache, call after call, with its cache written in place (KVCacheWrite) and its greedy tokens
chosen on the device (next_tokens)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

pytestmark = pytest.mark.cuda


@pytest.fixture(scope="module")
def lm16(tmp_path_factory):  # noqa: ANN201
    pytest.importorskip("transformers")
    from pyquant.config import Fp8Config, Int4Config, QuantizeConfig
    from pyquant.export_lm import export_causal_lm
    from pyquant.quantize import quantize
    from tests.pyquant.tiny_models import tiny_llama

    cfg = QuantizeConfig(
        default=Int4Config(64),
        overrides={
            "*.mlp.down_proj": Fp8Config(),
            "*.self_attn.o_proj": Int4Config(32, symmetric=False),
            "lm_head": Fp8Config(activation="none"),
        },
    )
    model = quantize(tiny_llama(eager=False, hidden_size=128, intermediate_size=256, vocab_size=256), cfg)
    path = tmp_path_factory.mktemp("lm16") / "lm16.onnx"
    export_causal_lm(model.half(), path)
    static_path = path.with_name("lm16_static.onnx")
    export_causal_lm(model, static_path, static_cache=True)
    return model.float(), path, static_path


def _cuda_session(path):  # noqa: ANN001, ANN202
    import pyquant.ort

    return pyquant.ort.make_session(path, providers=("cuda",), strict=True)


@pytest.mark.parametrize(("batch", "past", "seq"), [(2, 0, 7), (3, 5, 1), (1, 40, 1), (2, 6, 4)])
def test_cuda_logits_match_torch(lm16, batch: int, past: int, seq: int) -> None:
    from pyquant.export_lm import CausalLMWithCache, cache_spec

    model, path, _ = lm16
    spec = cache_spec(model)
    g = torch.Generator().manual_seed(batch * 1000 + past * 10 + seq)
    ids = torch.randint(0, 256, (batch, seq), generator=g)
    mask = torch.ones(batch, past + seq, dtype=torch.int64)
    pos = torch.arange(past, past + seq).expand(batch, seq).contiguous()
    kv = [torch.randn(batch, spec.num_kv_heads, past, spec.head_dim, generator=g) for _ in spec.past_names]
    feeds = {"input_ids": ids.numpy(), "attention_mask": mask.numpy(), "position_ids": pos.numpy()}
    feeds.update({n: t.half().numpy() for n, t in zip(spec.past_names, kv, strict=True)})
    outs = _cuda_session(path).run(None, feeds)
    with torch.no_grad():
        ref = CausalLMWithCache(model)(ids, mask, pos, [t.half().float() for t in kv])
    logits = outs[0].astype(np.float32)
    want = ref[0].numpy()
    # float16 activations through 2 layers: compare the tensor's relative error, and the argmax
    rel = np.linalg.norm(logits - want) / np.linalg.norm(want)
    assert rel < 2e-2, rel
    for got, w in zip(outs[1:], ref[1:], strict=True):
        np.testing.assert_allclose(got.astype(np.float32), w.numpy(), atol=3e-2, rtol=3e-2)


def test_cuda_generate_cache_on_gpu(lm16) -> None:
    import pyquant.ort

    _, path, _ = lm16
    sess = _cuda_session(path)
    ids = np.random.default_rng(3).integers(0, 256, (3, 9))
    mask = np.ones_like(ids)
    mask[0, :4] = 0
    on_gpu = pyquant.ort.generate(sess, ids, 16, attention_mask=mask, device="cuda")
    via_host = pyquant.ort.generate(sess, ids, 16, attention_mask=mask, device="cpu")
    assert on_gpu.shape == (3, 16)
    np.testing.assert_array_equal(on_gpu, via_host)


def test_cuda_static_cache_graph_replay(lm16) -> None:
    import pyquant.ort

    _, path, static_path = lm16
    graph_sess = pyquant.ort.make_session(
        static_path, providers=(("cuda", {"enable_cuda_graph": "1"}),), strict=True
    )
    assert pyquant.ort.uses_cuda_graph(graph_sess)
    plain_sess = _cuda_session(static_path)
    assert not pyquant.ort.uses_cuda_graph(plain_sess)
    rng = np.random.default_rng(5)
    for batch, prompt in ((3, 9), (1, 4)):
        ids = rng.integers(0, 256, (batch, prompt))
        mask = np.ones_like(ids)
        mask[0, : prompt // 2] = 0
        growing = pyquant.ort.generate(_cuda_session(path), ids, 16, attention_mask=mask, device="cuda")
        plain = pyquant.ort.generate(plain_sess, ids, 16, attention_mask=mask, device="cuda", cache_length=32)
        # float16: attention over 32 slots (the hidden ones weigh 0) may round differently from
        # attention over the grown length, so only the first tokens must agree exactly
        np.testing.assert_array_equal(plain[:, :8], growing[:, :8])
        # three calls on one session: the first captures the two decode graphs, the others replay them
        for _ in range(3):
            got = pyquant.ort.generate(
                graph_sess, ids, 16, attention_mask=mask, device="cuda", cache_length=32
            )
            np.testing.assert_array_equal(got, plain)
        # the in-place cache (KVCacheWrite on CUDA): one buffer set bound as past and present
        from pyquant.generation import _PER_SESSION

        assert len(_PER_SESSION[graph_sess].state.buffers) == 1
        # a shorter call replays the same graphs (same cache length) and stops early
        np.testing.assert_array_equal(
            pyquant.ort.generate(graph_sess, ids, 5, attention_mask=mask, device="cuda", cache_length=32),
            plain[:, :5],
        )
