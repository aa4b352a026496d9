"""Real-model accuracy checks (offline packages from models/install.sh; skipped when absent).

Small data subsets keep these within a few minutes on 2 CPU cores; bench/results/ has the full runs.
"""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

from pyquant.models import MissingModelPackage, get_recipe
from tests.pyquant.ort_session import cpu_session

pytestmark = pytest.mark.models


def _load(name: str):  # noqa: ANN202
    pytest.importorskip("transformers")
    try:
        return get_recipe(name).load()
    except (MissingModelPackage, ImportError) as e:
        pytest.skip(f"{name}: {e}")


def _first_layers(model, n: int):  # noqa: ANN001, ANN202
    """A copy of a decoder LM cut to its first n layers (the full export takes minutes)."""
    small = copy.deepcopy(model)
    small.model.layers = small.model.layers[:n]
    small.config.num_hidden_layers = n
    return small


@pytest.fixture(scope="module")
def minilm():  # noqa: ANN201
    return _load("minilm")


@pytest.fixture(scope="module")
def smollm2():  # noqa: ANN201
    return _load("smollm2")


# Thresholds sit just under what RTN measures (bench/results/2026-11-22-cpu-accuracy-minilm.md:
# int4 b128 cosine 0.928-0.934, fp8 0.998): they catch regressions, not a goal met.
@pytest.mark.parametrize("scheme,min_cos", [("int4", 0.90), ("fp8", 0.995)])
def test_minilm_ort_embeddings(minilm, tmp_path, scheme: str, min_cos: float) -> None:  # noqa: ANN001
    pytest.importorskip("sklearn")
    from pyquant.eval import _example_inputs
    from pyquant.export import export
    from pyquant.models import data, metrics
    from pyquant.quantize import quantize

    recipe = get_recipe("minilm")
    model, tok = minilm
    try:
        bbc = data.bbc_news(max_per_class=20)
    except (MissingModelPackage, FileNotFoundError) as e:
        pytest.skip(str(e))
    texts = bbc.train_texts + bbc.test_texts
    ref = metrics.embed_texts(metrics.torch_forward(recipe.wrap(model)), tok, texts, max_len=64)
    q = quantize(copy.deepcopy(model), recipe.quantize_config(scheme))
    rep = export(recipe.wrap(q), _example_inputs(), tmp_path / f"minilm-{scheme}.onnx")
    assert (
        rep.op_counts.get("MatMulInt4" if scheme == "int4" else "LinearFp8") == 36
    )  # pooler unused: dropped
    emb = metrics.embed_texts(metrics.ort_forward(cpu_session(rep.path)), tok, texts, max_len=64)
    assert metrics.mean_cosine(emb, ref) > min_cos
    n = len(bbc.train_texts)
    acc_f = metrics.classification_accuracy(ref[:n], bbc.train_labels, ref[n:], bbc.test_labels)
    acc_q = metrics.classification_accuracy(emb[:n], bbc.train_labels, emb[n:], bbc.test_labels)
    assert acc_q >= acc_f - 0.05


# RTN INT4 is far from the 1% goal on SmolLM2 (+53..75% perplexity, see bench/results; GPTQ/AWQ
# are the accuracy issue's work): this bound only catches a broken pass (a layout or scale bug
# gives perplexities in the hundreds or thousands). FP8 measures +2.3..2.8%.
@pytest.mark.parametrize("scheme,max_delta", [("int4-b128", 80.0), ("fp8", 4.0)])
def test_smollm2_perplexity_torch(smollm2, scheme: str, max_delta: float) -> None:  # noqa: ANN001
    """Torch eager with the op numerics (the ORT export matches it: test_export.py)."""
    from pyquant.models import data, metrics
    from pyquant.quantize import quantize

    recipe = get_recipe("smollm2")
    model, tok = smollm2
    try:
        ids = data.wiki_token_sequences(tok, 2, 256)
    except (MissingModelPackage, FileNotFoundError) as e:
        pytest.skip(str(e))
    p_float = metrics.perplexity(metrics.torch_forward(recipe.wrap(model)), ids)
    q = quantize(copy.deepcopy(model), recipe.quantize_config(scheme))
    assert "lm_head" not in q.pyquant_summary.quantized
    p_q = metrics.perplexity(metrics.torch_forward(recipe.wrap(q)), ids)
    assert np.isfinite(p_q) and 0 < 100 * (p_q / p_float - 1) < max_delta


def test_smollm2_export_graph(smollm2, tmp_path) -> None:  # noqa: ANN001
    """One layer-truncated export of the real model through ORT (the full 30-layer export takes ~2.5 min)."""
    from pyquant.eval import _example_inputs
    from pyquant.export import export
    from pyquant.quantize import quantize

    recipe = get_recipe("smollm2")
    model, _ = smollm2
    small = _first_layers(model, 2)
    quantize(small, recipe.quantize_config("fp8"))
    wrapped = recipe.wrap(small)
    rep = export(wrapped, _example_inputs(), tmp_path / "smol2.onnx")
    assert rep.op_counts == {"LinearFp8": 14}
    sess = cpu_session(rep.path)
    ids = torch.randint(0, 49152, (2, 33))
    mask = torch.ones_like(ids)
    y = sess.run(None, {"input_ids": ids.numpy(), "attention_mask": mask.numpy()})[0]
    with torch.no_grad():
        ref = wrapped(ids, mask).numpy()
    # FP8 activation quantization makes the comparison discontinuous: a last-bit difference
    # between torch's and ORT's float ops (RMSNorm, attention) can move one activation to the
    # neighbouring e4m3 code, so a few logits differ by more than rounding. Compare the whole
    # tensor's relative error instead of every element.
    rel = np.linalg.norm(y - ref) / np.linalg.norm(ref)
    assert rel < 5e-3, rel


def test_smollm2_generate_with_kv_cache(smollm2, tmp_path) -> None:  # noqa: ANN001
    """The real model's config (tied embeddings, RoPE, GQA) through export_causal_lm, two layers:
    greedy decoding in ORT with the cache gives transformers' greedy tokens for the quantized model."""
    import pyquant.ort
    from pyquant.export_lm import export_causal_lm
    from pyquant.quantize import quantize

    recipe = get_recipe("smollm2")
    model, tok = smollm2
    small = _first_layers(model, 2)
    quantize(small, recipe.quantize_config("int4-b64-asym"))
    rep = export_causal_lm(small, tmp_path / "smol2kv.onnx")
    assert rep.op_counts == {"MatMulInt4": 14}
    side, tok.padding_side = tok.padding_side, "left"  # generation pads prompts on the left
    try:
        enc = tok(["The capital of France is", "Water boils at"], return_tensors="pt", padding=True)
    finally:
        tok.padding_side = side
    assert (enc["attention_mask"][1] == 0).any()  # prompts of different lengths: padding is covered
    with torch.no_grad():
        ref = small.generate(**enc, max_new_tokens=10, do_sample=False, pad_token_id=tok.eos_token_id)
    got = pyquant.ort.generate(
        cpu_session(rep.path), enc["input_ids"].numpy(), 10, attention_mask=enc["attention_mask"].numpy()
    )
    np.testing.assert_array_equal(got, ref[:, enc["input_ids"].shape[1] :].numpy())
