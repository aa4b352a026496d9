"""pyquant::KVCacheWrite (ort_ops/ops/kv_cache_write.h, docs/ops.md): one step's keys / values
written into a static cache at given slots, against a numpy reference and the torch op, out of
place (session.run: past is copied first) and in place (IOBinding with one buffer bound as both
past and present: only the step's slots change), on the CPU EP and, behind the cuda marker, the
CUDA EP; and its errors."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from onnx import TensorProto, helper

from pyquant.ops_spec import DOMAIN, KV_CACHE_WRITE_OP
from pyquant.ort import make_session
from tests.ops.graphs import ORT_ERRORS

ONNX = {np.float32: TensorProto.FLOAT, np.float16: TensorProto.FLOAT16}
DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.cuda)]


def _model(dtype) -> bytes:
    t = ONNX[dtype]
    node = helper.make_node(
        KV_CACHE_WRITE_OP, ["past", "new", "cache_position"], ["present"], domain=DOMAIN, name="write"
    )
    graph = helper.make_graph(
        [node],
        "g",
        [
            helper.make_tensor_value_info("past", t, ["b", "h", "L", "d"]),
            helper.make_tensor_value_info("new", t, ["b", "h", "s", "d"]),
            helper.make_tensor_value_info("cache_position", TensorProto.INT64, ["s"]),
        ],
        [helper.make_tensor_value_info("present", t, ["b", "h", "L", "d"])],
    )
    opsets = [helper.make_opsetid("", 21), helper.make_opsetid(DOMAIN, 1)]
    return helper.make_model(graph, opset_imports=opsets, ir_version=10).SerializeToString()


def _reference(past: np.ndarray, new: np.ndarray, slots: np.ndarray) -> np.ndarray:
    out = past.copy()
    for s, slot in enumerate(slots):
        out[:, :, slot] = new[:, :, s]
    return out


def _session(dtype, device: str):
    return make_session(_model(dtype), providers=(device,), strict=True)


def _case(rng, dtype, batch=2, heads=3, length=11, steps=4, head_dim=8):
    past = rng.standard_normal((batch, heads, length, head_dim)).astype(dtype)
    new = rng.standard_normal((batch, heads, steps, head_dim)).astype(dtype)
    slots = rng.permutation(length)[:steps].astype(np.int64)
    return past, new, slots


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize(("length", "steps", "head_dim"), [(11, 4, 8), (7, 1, 64), (5, 5, 3), (9, 0, 16)])
def test_out_of_place(rng, device: str, dtype, length: int, steps: int, head_dim: int) -> None:
    past, new, slots = _case(rng, dtype, length=length, steps=steps, head_dim=head_dim)
    sess = _session(dtype, device)
    (got,) = sess.run(None, {"past": past, "new": new, "cache_position": slots})
    want = _reference(past, new, slots)
    np.testing.assert_array_equal(got, want)
    torch_out = torch.ops.pyquant.kv_cache_write(
        torch.from_numpy(past), torch.from_numpy(new), torch.from_numpy(slots)
    )
    np.testing.assert_array_equal(torch_out.numpy(), want)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_in_place_writes_only_the_slots(rng, device: str, dtype) -> None:
    """One OrtValue bound as past and present: after three steps the buffer holds each step's
    entries at its slots and the untouched slots' old values."""
    import onnxruntime as ort

    past, _, _ = _case(rng, dtype, length=12)
    sess = _session(dtype, device)
    buf = ort.OrtValue.ortvalue_from_numpy(past, device, 0)
    want = past
    for slots in (np.array([0, 1, 2], np.int64), np.array([3], np.int64), np.array([9, 5], np.int64)):
        new = rng.standard_normal((*past.shape[:2], len(slots), past.shape[3])).astype(dtype)
        binding = sess.io_binding()
        binding.bind_ortvalue_input("past", buf)
        binding.bind_cpu_input("new", new)
        binding.bind_cpu_input("cache_position", slots)
        binding.bind_ortvalue_output("present", buf)
        sess.run_with_iobinding(binding)
        want = _reference(want, new, slots)
        np.testing.assert_array_equal(buf.numpy(), want)


def test_errors(rng) -> None:
    past, new, slots = _case(rng, np.float32)
    sess = _session(np.float32, "cpu")

    def run(p=past, n=new, s=slots):  # noqa: ANN001, ANN202
        return sess.run(None, {"past": p, "new": n, "cache_position": s})

    with pytest.raises(ORT_ERRORS, match=r"cache_position\[1\] = 11 is outside \[0, 11\)"):
        run(s=np.array([0, 11, 2, 3], np.int64))
    with pytest.raises(ORT_ERRORS, match=r"outside \[0, 11\)"):
        run(s=np.array([0, -1, 2, 3], np.int64))
    with pytest.raises(ORT_ERRORS, match="names slot 2 twice"):
        run(s=np.array([2, 1, 2, 3], np.int64))
    with pytest.raises(ORT_ERRORS, match="one slot per new entry"):
        run(s=slots[:3])
    with pytest.raises(ORT_ERRORS, match="must match past"):
        run(n=new[:, :2])
    with pytest.raises(ORT_ERRORS, match="only 11 slots"):
        big = rng.standard_normal((2, 3, 12, 8)).astype(np.float32)
        run(n=big, s=np.arange(12, dtype=np.int64))
    with pytest.raises(ORT_ERRORS, match=r"must be 4-D|[Ii]nvalid rank"):  # ORT's own check comes first
        run(p=past[0], n=new[0])
    flat = torch.zeros(2, 3)
    with pytest.raises(ValueError, match="must be 4-D"):
        torch.ops.pyquant.kv_cache_write(flat, flat, torch.zeros(1, dtype=torch.int64))


@pytest.mark.cuda
def test_cuda_skips_slots_out_of_range(rng) -> None:
    """The CUDA kernel cannot raise without a host sync: a slot outside [0, L) is not written
    (documented in docs/ops.md), the others are."""
    past, new, _ = _case(rng, np.float16, length=6, steps=2)
    slots = np.array([1, 6], np.int64)
    (got,) = _session(np.float16, "cuda").run(None, {"past": past, "new": new, "cache_position": slots})
    want = past.copy()
    want[:, :, 1] = new[:, :, 0]
    np.testing.assert_array_equal(got, want)
