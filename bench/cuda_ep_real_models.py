"""Real models on ONNX Runtime's CUDA execution provider: MiniLM float / INT4 / FP8, accuracy and latency.

Two steps, on two machines:

    # here (CPU, pyquant + torch + transformers + the offline model packages installed):
    python bench/cuda_ep_real_models.py prepare --out .device/realmodels

    # on the GPU machine (needs only numpy + onnxruntime-gpu + the built libpyquant_ops.so):
    python bench/cuda_ep_real_models.py run --dir .device/realmodels --provider cuda \
        --lib build/libpyquant_ops.so --out bench/results/<date>-<gpu>-cuda-ep-real-models.json

``prepare`` exports all-MiniLM-L6-v2 (recipe ``minilm``) three times with ``pyquant.export``: float,
the recipe's ``int4`` default and its ``fp8`` default, all with float16 activations (``--dtype``;
quantized with the float32 model, then ``model.half()``: on CUDA, float32 X would run the INT4
reference kernel, not the tuned ones). Initializers that several models share (token / position
embeddings, LayerNorms) are stored once, in ``shared.bin``, which every model's ONNX file references as
external data; each model's own weights are in ``<model>.bin``, so every file stays far below 55 MB and
the whole directory is about 61 MiB. It also writes ``data.npz``: the tokenized BBC news documents of
the recipe's metric (train + test split, ids as int32 with their lengths), labels, the float32
PyTorch embeddings (the reference), the logistic-regression probe fitted on the float train
embeddings (coefficients), and per model a torch-eager output of the same quantized fp16 model on a few
documents (op numerics: a check of the kernels). ``manifest.json`` lists everything.

``run`` imports only numpy and onnxruntime (no torch, no pyquant: the op library is registered with
``SessionOptions.register_custom_ops_library``). Per model found in the directory (missing ones are
reported and skipped, so the files may be shipped in several calls) it measures

* where ORT placed the nodes (one profiled run: nodes per execution provider, pyquant ops included),
* accuracy: mean cosine similarity of the mean-pooled embeddings to the float32 PyTorch ones, the
  5-class accuracy of the float probe on the model's test embeddings ("fixed probe"), and the
  accuracy of a probe re-fitted on the model's own train embeddings ("refit probe": what
  ``pyquant eval`` reports; same objective as its scikit-learn LogisticRegression(C=10), solved with
  Newton's method in numpy),
* the error against the torch-eager output of the same quantized model (the op numerics),
* latency: median and p90 of ``run_with_iobinding`` with the inputs already on the device and the
  output left there, per batch shape (default 1x128, 8x128, 32x128), and the wall time of the whole
  embedding pass,

and writes ``--out`` (JSON) and the same name with ``.md`` (table, device, command).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import shlex
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

MANIFEST = "manifest.json"
DATA = "data.npz"
SHARED = "shared.bin"
MAX_FILE_BYTES = 55 * 10**6
ALIGN = 4096  # external-data offsets aligned so that ORT may memory-map them
MIN_EXTERNAL_BYTES = 1024  # smaller initializers stay inside the .onnx file


# --- prepare (CPU, torch + pyquant) ---------------------------------------------------------------


def _externalize(models: dict[str, Any], out: Path) -> dict[str, list[str]]:
    """Move the large initializers of the ONNX ModelProtos in ``models`` (name -> proto) to external
    data files in ``out``: tensors present in two or more models (same type, shape and bytes) once in
    shared.bin, the rest in <name>.bin. Writes <name>.onnx. -> {name: files it needs}."""
    from onnx import TensorProto, numpy_helper

    def raw(t: Any) -> bytes | None:
        if t.data_location == TensorProto.EXTERNAL:
            raise ValueError(f"initializer {t.name!r} is already external")
        if t.HasField("raw_data"):
            return t.raw_data
        try:
            return numpy_helper.from_array(numpy_helper.to_array(t)).raw_data
        except Exception:
            return None

    def key(t: Any, b: bytes) -> tuple:
        return (t.data_type, tuple(t.dims), hashlib.sha256(b).hexdigest())

    users: dict[tuple, set[str]] = {}
    for name, m in models.items():
        for t in m.graph.initializer:
            b = raw(t)
            if b is not None and len(b) >= MIN_EXTERNAL_BYTES:
                users.setdefault(key(t, b), set()).add(name)
    handles: dict[str, Any] = {}
    offsets: dict[str, int] = {}
    written: dict[tuple, tuple[str, int, int]] = {}  # shared tensors already in shared.bin
    files: dict[str, list[str]] = {}

    def append(fname: str, b: bytes) -> int:
        if fname not in handles:
            handles[fname] = open(out / fname, "wb")  # noqa: SIM115 - closed below
            offsets[fname] = 0
        f, off = handles[fname], offsets[fname]
        pad = (-off) % ALIGN
        f.write(b"\0" * pad)
        f.write(b)
        offsets[fname] = off + pad + len(b)
        return off + pad

    try:
        for name, m in models.items():
            need = {f"{name}.onnx"}
            for t in m.graph.initializer:
                b = raw(t)
                if b is None or len(b) < MIN_EXTERNAL_BYTES:
                    continue
                k = key(t, b)
                if len(users[k]) > 1:
                    if k not in written:
                        written[k] = (SHARED, append(SHARED, b), len(b))
                    loc, off, n = written[k]
                else:
                    loc, off, n = f"{name}.bin", append(f"{name}.bin", b), len(b)
                need.add(loc)
                t.ClearField("raw_data")
                for field in ("float_data", "int32_data", "int64_data", "double_data", "uint64_data"):
                    t.ClearField(field)
                del t.external_data[:]
                for k2, v in (("location", loc), ("offset", str(off)), ("length", str(n))):
                    e = t.external_data.add()
                    e.key, e.value = k2, v
                t.data_location = TensorProto.EXTERNAL
            (out / f"{name}.onnx").write_bytes(m.SerializeToString())
            files[name] = sorted(need)
    finally:
        for f in handles.values():
            f.close()
    return files


def manifest_head(recipe) -> dict[str, Any]:
    """The fields every prepare step's manifest starts with: when, the command, the commit and the
    recipe (``pyquant.models`` recipe object)."""
    from pyquant.eval import git_commit

    return {
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "command": "python " + " ".join(shlex.quote(a) for a in sys.argv),
        "git_commit": git_commit(),
        "recipe": recipe.name,
        "title": recipe.title,
    }


def write_models(
    protos: dict[str, Any], entries: list[dict], arrays: dict[str, np.ndarray], out: Path, check: bool = False
) -> dict[str, int]:
    """The end of a prepare step: the models' ONNX files with shared / own external data
    (``_externalize``), each entry's ``files``, the arrays in data.npz; -> bytes per file written
    (the manifest aside). ``check``: onnx.checker on every written model."""
    import onnx

    files = _externalize(protos, out)
    for e in entries:
        e["files"] = files[e["name"]]
        if check:
            onnx.checker.check_model(str(out / f"{e['name']}.onnx"))
    np.savez_compressed(out / DATA, **arrays)
    return {p.name: p.stat().st_size for p in sorted(out.iterdir()) if p.is_file() and p.name != MANIFEST}


def prepare(args: argparse.Namespace) -> int:
    import copy

    import onnx
    import torch
    from sklearn.linear_model import LogisticRegression

    import pyquant
    from pyquant.eval import _example_inputs
    from pyquant.export import export, verify_onnx_model
    from pyquant.models import data, get_recipe, metrics
    from pyquant.quantize import quantize

    t0 = time.perf_counter()
    torch.manual_seed(0)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for p in out.iterdir():  # stale files of an earlier prepare would be shipped and misread
        if p.is_file() and (p.suffix in (".onnx", ".bin", ".npz") or p.name == MANIFEST):
            p.unlink()
    recipe = get_recipe("minilm")
    s = recipe.eval_settings
    max_len, batch = s["max_len"], s["batch_size"]
    dtype = {"float16": torch.float16, "float32": torch.float32, "bfloat16": torch.bfloat16}[args.dtype]
    model, tok = recipe.load()

    # The evaluation data of `pyquant eval --model minilm` (BBC news, fixed train/test split).
    bbc = data.bbc_news(args.max_per_class or s.get("max_per_class"))
    texts = bbc.train_texts + bbc.test_texts
    ntrain = len(bbc.train_texts)
    enc = tok(list(texts), truncation=True, max_length=max_len)["input_ids"]
    lengths = np.array([len(t) for t in enc], dtype=np.int32)
    ids = np.full((len(enc), int(lengths.max())), tok.pad_token_id or 0, dtype=np.int32)
    for i, t in enumerate(enc):
        ids[i, : len(t)] = t
    print(f"prepare: {len(texts)} documents ({ntrain} train), max {lengths.max()} tokens", flush=True)

    float_emb = metrics.embed_texts(
        metrics.torch_forward(recipe.wrap(model)), tok, texts, max_len, batch
    ).astype(np.float32)
    probe = LogisticRegression(max_iter=2000, C=10.0)  # = pyquant.models.metrics.classification_accuracy
    probe.fit(float_emb[:ntrain], bbc.train_labels)
    float_acc = float((probe.predict(float_emb[ntrain:]) == bbc.test_labels).mean())
    coef, intercept = refit_probe(float_emb[:ntrain], bbc.train_labels, len(bbc.classes))
    numpy_acc = float((np.argmax(float_emb[ntrain:] @ coef.T + intercept, 1) == bbc.test_labels).mean())
    print(
        f"prepare: float accuracy {float_acc:.4f} (scikit-learn), {numpy_acc:.4f} (numpy probe)", flush=True
    )

    # Documents of the numerics check: the first `check_docs` in embedding order, padded together.
    check_idx = np.argsort(lengths, kind="stable")[: args.check_docs]
    check_len = max(int(lengths[check_idx].max()), 2)
    check_ids = ids[check_idx, :check_len].astype(np.int64)
    check_mask = (np.arange(check_len)[None, :] < lengths[check_idx, None]).astype(np.int64)
    check_ids[check_mask == 0] = tok.pad_token_id or 0

    arrays: dict[str, np.ndarray] = {
        "ids": ids,
        "lengths": lengths,
        "labels": np.concatenate([bbc.train_labels, bbc.test_labels]).astype(np.int64),
        "ntrain": np.array(ntrain),
        "float_embeddings": float_emb,
        "probe_coef": probe.coef_.astype(np.float64),
        "probe_intercept": probe.intercept_.astype(np.float64),
        "check_ids": check_ids,
        "check_mask": check_mask,
    }
    protos: dict[str, Any] = {}
    entries = []
    with __import__("tempfile").TemporaryDirectory(prefix="pyquant-realmodels-") as tmp:
        for scheme in args.schemes:
            cfg = recipe.quantize_config(scheme)
            q = copy.deepcopy(model)
            if cfg is not None:
                q = quantize(q, cfg)
            q = recipe.wrap(q).to(dtype).eval()
            name = f"minilm-{scheme}-{args.dtype}"
            rep = export(q, _example_inputs(), Path(tmp) / f"{name}.onnx")
            counts = verify_onnx_model(rep.path)
            with torch.inference_mode():
                ref = q(torch.from_numpy(check_ids), torch.from_numpy(check_mask)).float().numpy()
            ref = ref.astype(np.float16 if dtype == torch.float16 else np.float32)
            arrays[f"check_out__{name}"] = ref
            protos[name] = onnx.load(str(rep.path))
            entries.append(
                {
                    "name": name,
                    "scheme": scheme,
                    "config": "float" if cfg is None else cfg.default.describe(),
                    "dtype": args.dtype,
                    "pyquant_ops": counts,
                    "export_bytes": rep.file_bytes,
                }
            )
            print(f"prepare: {name}: {rep}", flush=True)
            del q
    sizes = write_models(protos, entries, arrays, out, check=True)
    manifest = {
        **manifest_head(recipe),
        "dtype": args.dtype,
        "max_len": max_len,
        "batch_size": batch,
        "pad_token_id": int(tok.pad_token_id or 0),
        "classes": list(bbc.classes),
        "n_docs": len(texts),
        "n_train": ntrain,
        "float_accuracy_sklearn": float_acc,
        "float_accuracy_numpy_probe": numpy_acc,
        "versions": {
            "pyquant": pyquant.__version__,
            "torch": torch.__version__,
            "onnx": onnx.__version__,
            "transformers": __import__("transformers").__version__,
        },
        "models": entries,
        "data": DATA,
        "file_bytes": sizes,
        "total_bytes": sum(sizes.values()),
    }
    (out / MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n")
    big = {k: v for k, v in sizes.items() if v > MAX_FILE_BYTES}
    for k, v in sizes.items():
        print(f"  {k:40s} {v / 2**20:8.2f} MiB")
    print(
        f"prepare: {out}: {manifest['total_bytes'] / 2**20:.1f} MiB in {len(sizes) + 1} files, "
        f"{time.perf_counter() - t0:.0f} s",
        flush=True,
    )
    if big:
        print(f"prepare: files over {MAX_FILE_BYTES / 1e6:.0f} MB: {big}", file=sys.stderr)
        return 1
    return 0


# --- metrics (numpy only) ----------------------------------------------------------------------------


def refit_probe(
    x: np.ndarray, y: np.ndarray, n_classes: int, c: float = 10.0, iters: int = 50
) -> tuple[np.ndarray, np.ndarray]:
    """Multinomial logistic regression with the objective of scikit-learn's
    LogisticRegression(C=c) (C * sum of cross-entropies + ||W||^2 / 2, intercept not penalized),
    minimized with Newton's method and a backtracking line search. -> (coef [K, d], intercept [K])."""
    x = np.asarray(x, np.float64)
    n, d = x.shape
    xa = np.hstack([x, np.ones((n, 1))])
    yo = np.eye(n_classes)[np.asarray(y)]
    theta = np.zeros((n_classes, d + 1))
    reg = np.ones(d + 1)
    reg[-1] = 0.0

    def loss(th: np.ndarray) -> tuple[float, np.ndarray]:
        z = xa @ th.T
        z -= z.max(1, keepdims=True)
        lse = np.log(np.exp(z).sum(1))
        p = np.exp(z - lse[:, None])
        return float(c * (lse - (z * yo).sum(1)).sum() + 0.5 * (th[:, :-1] ** 2).sum()), p

    f, p = loss(theta)
    for _ in range(iters):
        g = c * (p - yo).T @ xa + theta * reg
        if np.abs(g).max() < 1e-9 * max(1.0, c * n):
            break
        # H[(k,i),(l,j)] = c * sum_n (p_nk [k=l] - p_nk p_nl) xa_ni xa_nj + [k=l][i=j] reg_i
        h = np.zeros((n_classes, d + 1, n_classes, d + 1))
        for k in range(n_classes):
            for j in range(k, n_classes):
                w = p[:, k] * ((k == j) - p[:, j])
                blk = c * (xa * w[:, None]).T @ xa
                h[k, :, j, :] = blk
                h[j, :, k, :] = blk.T
            h[k, :, k, :] += np.diag(reg)
        m = n_classes * (d + 1)
        hm = h.reshape(m, m) + 1e-10 * np.eye(m)  # the intercepts' common shift is a null direction
        step = np.linalg.solve(hm, g.reshape(-1)).reshape(theta.shape)
        t = 1.0
        while True:
            f2, p2 = loss(theta - t * step)
            if f2 <= f - 1e-4 * t * float((g * step).sum()) or t < 1e-8:
                break
            t *= 0.5
        theta, f, p = theta - t * step, f2, p2
    return theta[:, :-1], theta[:, -1]


def mean_cosine(a: np.ndarray, b: np.ndarray) -> float:
    a = a / np.linalg.norm(a, axis=1, keepdims=True)
    b = b / np.linalg.norm(b, axis=1, keepdims=True)
    return float((a * b).sum(1).mean())


def embed(forward: Any, ids: np.ndarray, lengths: np.ndarray, batch: int, pad: int) -> np.ndarray:
    """Mean-pooled, L2-normalized embeddings in document order; batches of documents sorted by
    length, each padded to its longest (what pyquant.models.metrics.embed_texts does)."""
    order = np.argsort(lengths, kind="stable")
    out = np.zeros((len(lengths), 0))
    for s in range(0, len(order), batch):
        b = order[s : s + batch]
        length = max(int(lengths[b].max()), 2)
        x = np.full((len(b), length), pad, dtype=np.int64)
        mask = np.zeros((len(b), length), dtype=np.int64)
        for r, i in enumerate(b):
            x[r, : lengths[i]] = ids[i, : lengths[i]]
            mask[r, : lengths[i]] = 1
        h = forward(x, mask).astype(np.float64)
        m = mask[..., None].astype(np.float64)
        e = (h * m).sum(1) / np.maximum(m.sum(1), 1e-9)
        e /= np.maximum(np.linalg.norm(e, axis=1, keepdims=True), 1e-12)
        if out.shape[1] == 0:
            out = np.zeros((len(lengths), e.shape[1]))
        out[b] = e
    return out.astype(np.float32)


# --- run (numpy + onnxruntime only) -----------------------------------------------------------------


def _providers(ort: Any, provider: str) -> list[Any]:
    if provider == "cpu":
        return ["CPUExecutionProvider"]
    if "CUDAExecutionProvider" not in ort.get_available_providers():
        raise SystemExit(
            f"onnxruntime {ort.__version__} has no CUDAExecutionProvider "
            f"(available: {ort.get_available_providers()}); install onnxruntime-gpu"
        )
    return [("CUDAExecutionProvider", {"device_id": 0}), "CPUExecutionProvider"]


def _session(ort: Any, path: Path, lib: str, provider: str, threads: int, profile: str | None = None) -> Any:
    so = ort.SessionOptions()
    so.register_custom_ops_library(lib)
    if threads:
        so.intra_op_num_threads = threads
        so.inter_op_num_threads = 1
    if profile:
        so.enable_profiling = True
        so.profile_file_prefix = profile
    return ort.InferenceSession(str(path), so, providers=_providers(ort, provider))


def _placement(ort: Any, path: Path, lib: str, provider: str, threads: int, feeds: dict, tmp: Path) -> dict:
    """Nodes per execution provider (and pyquant nodes per provider), from one profiled run."""
    sess = _session(ort, path, lib, provider, threads, profile=str(tmp / path.stem))
    sess.run(None, feeds)
    prof = Path(sess.end_profiling())
    events = json.loads(prof.read_text())
    prof.unlink()
    nodes: dict[str, dict[str, str]] = {}
    for ev in events:
        a = ev.get("args", {})
        if ev.get("cat") == "Node" and "provider" in a and "op_name" in a:
            nodes[ev["name"].rsplit("_kernel_time", 1)[0]] = {"op": a["op_name"], "provider": a["provider"]}
    per_provider: dict[str, int] = {}
    pyq: dict[str, int] = {}
    for n in nodes.values():
        per_provider[n["provider"]] = per_provider.get(n["provider"], 0) + 1
        if n["op"] in ("MatMulInt4", "LinearFp8"):
            k = f"{n['op']}@{n['provider']}"
            pyq[k] = pyq.get(k, 0) + 1
    return {"nodes_per_provider": per_provider, "pyquant_nodes": pyq}


def _latency(ort: Any, sess: Any, provider: str, shape: tuple[int, int], warmup: int, runs: int) -> dict:
    """Median / p90 ms of run_with_iobinding, inputs bound on the device, output left there."""
    dev = "cuda" if provider == "cuda" else "cpu"
    rng = np.random.default_rng(0)
    ids = rng.integers(5, 1000, size=shape, dtype=np.int64)
    feeds = {"input_ids": ids, "attention_mask": np.ones_like(ids)}
    io = sess.io_binding()
    for i in sess.get_inputs():
        io.bind_ortvalue_input(i.name, ort.OrtValue.ortvalue_from_numpy(feeds[i.name], dev, 0))
    for o in sess.get_outputs():
        io.bind_output(o.name, dev)
    for _ in range(warmup):
        sess.run_with_iobinding(io)
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        sess.run_with_iobinding(io)
        times.append(time.perf_counter() - t)
    return {
        "shape": list(shape),
        "median_ms": float(np.median(times) * 1e3),
        "p90_ms": float(np.percentile(times, 90) * 1e3),
        "runs": runs,
    }


def _device_name(provider: str) -> str:
    if provider == "cuda":
        try:
            r = subprocess.run(
                ["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"],
                capture_output=True,
                text=True,
                timeout=30,
            )
            if r.returncode == 0 and r.stdout.strip():
                return "GPU: " + r.stdout.strip().splitlines()[0]
        except (OSError, subprocess.SubprocessError):
            pass
        return "GPU: unknown (nvidia-smi unavailable)"
    name = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                name = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return f"CPU: {name}, {cores} cores"


def run(args: argparse.Namespace) -> int:
    import tempfile

    import onnxruntime as ort

    d = Path(args.dir)
    lib = args.lib or os.environ.get("PYQUANT_LIBRARY")
    if not lib or not Path(lib).is_file():
        raise SystemExit(f"--lib: the pyquant op library {lib!r} does not exist")
    lib = str(Path(lib).resolve())
    manifest = json.loads((d / MANIFEST).read_text())
    z = np.load(d / DATA)
    ids, lengths, labels = z["ids"], z["lengths"], z["labels"]
    ntrain = int(z["ntrain"])
    float_emb = z["float_embeddings"]
    coef, intercept = z["probe_coef"], z["probe_intercept"]
    n_classes = len(manifest["classes"])
    shapes = [tuple(int(v) for v in s.lower().split("x")) for s in args.shapes.split(",") if s]
    feeds_check = {"input_ids": z["check_ids"], "attention_mask": z["check_mask"]}
    results = []
    for m in manifest["models"]:
        name = m["name"]
        if args.models and not any(sel in name for sel in args.models):
            continue
        missing = [f for f in m["files"] if not (d / f).is_file()]
        if missing:
            print(f"run: {name}: skipped, missing {missing}", flush=True)
            results.append({"name": name, "skipped": f"missing files {missing}"})
            continue
        path = d / f"{name}.onnx"
        r: dict[str, Any] = {k: m[k] for k in ("name", "scheme", "config", "dtype", "pyquant_ops")}
        r["bytes"] = sum((d / f).stat().st_size for f in m["files"] if f != SHARED)
        t = time.perf_counter()
        sess = _session(ort, path, lib, args.provider, args.threads)
        r["session_s"] = time.perf_counter() - t
        r["providers"] = sess.get_providers()
        with tempfile.TemporaryDirectory() as tmp:
            r["placement"] = _placement(ort, path, lib, args.provider, args.threads, feeds_check, Path(tmp))
        names = [i.name for i in sess.get_inputs()]

        def forward(x: np.ndarray, mask: np.ndarray, sess: Any = sess, names: list = names) -> np.ndarray:
            f = {"input_ids": x, "attention_mask": mask}
            return sess.run(None, {n: f[n] for n in names})[0]

        ref = z[f"check_out__{name}"].astype(np.float32)
        got = forward(feeds_check["input_ids"], feeds_check["attention_mask"]).astype(np.float32)
        err = np.abs(got - ref)
        r["check_vs_torch"] = {
            "max_abs_err": float(err.max()),
            "rel_rms_err": float(np.sqrt((err**2).mean() / max((ref**2).mean(), 1e-30))),
            "max_abs_ref": float(np.abs(ref).max()),
        }
        t = time.perf_counter()
        emb = embed(forward, ids, lengths, manifest["batch_size"], manifest["pad_token_id"])
        r["embed_all_s"] = time.perf_counter() - t
        r["cosine_vs_float_torch"] = mean_cosine(emb, float_emb)
        test_y = labels[ntrain:]
        r["accuracy_fixed_probe"] = float((np.argmax(emb[ntrain:] @ coef.T + intercept, 1) == test_y).mean())
        c2, b2 = refit_probe(emb[:ntrain], labels[:ntrain], n_classes)
        r["accuracy_refit_probe"] = float((np.argmax(emb[ntrain:] @ c2.T + b2, 1) == test_y).mean())
        r["latency"] = [_latency(ort, sess, args.provider, s, args.warmup, args.runs) for s in shapes]
        del sess
        results.append(r)
        lat = ", ".join(f"{x['shape'][0]}x{x['shape'][1]} {x['median_ms']:.2f} ms" for x in r["latency"])
        print(
            f"run: {name}: cos {r['cosine_vs_float_torch']:.5f}, acc fixed {r['accuracy_fixed_probe']:.4f} "
            f"refit {r['accuracy_refit_probe']:.4f}, "
            f"vs torch rel err {r['check_vs_torch']['rel_rms_err']:.2g}, "
            f"{lat}; {r['placement']}",
            flush=True,
        )
    out = {
        "command": "python " + " ".join(shlex.quote(a) for a in sys.argv),
        "device": _device_name(args.provider),
        "provider": args.provider,
        "onnxruntime": ort.__version__,
        "available_providers": ort.get_available_providers(),
        "library": lib,
        "build_info": _build_info(lib),
        "python": platform.python_version(),
        "numpy": np.__version__,
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "threads": args.threads,
        "warmup": args.warmup,
        "prepared": {k: manifest[k] for k in ("created", "command", "git_commit", "versions", "title")},
        "float_accuracy_sklearn": manifest["float_accuracy_sklearn"],
        "float_accuracy_numpy_probe": manifest["float_accuracy_numpy_probe"],
        "n_docs": manifest["n_docs"],
        "n_train": manifest["n_train"],
        "results": results,
    }
    op = Path(args.out)
    op.parent.mkdir(parents=True, exist_ok=True)
    op.write_text(json.dumps(out, indent=1) + "\n")
    op.with_suffix(".md").write_text(markdown(out))
    print(f"run: wrote {op} and {op.with_suffix('.md')}")
    return 0


def _build_info(lib: str) -> Any:
    f = Path(lib).with_name("build_info.json")
    try:
        return json.loads(f.read_text()) if f.is_file() else None
    except (OSError, ValueError):
        return None


def markdown(o: dict) -> str:
    rows = [r for r in o["results"] if "skipped" not in r]
    shapes = [f"{x['shape'][0]}x{x['shape'][1]}" for x in rows[0]["latency"]] if rows else []
    base = {
        s: x["median_ms"]
        for r in rows
        if r["scheme"] == "float"
        for s, x in zip(shapes, r["latency"], strict=True)
    }
    lines = [
        f"# MiniLM (all-MiniLM-L6-v2) on ONNX Runtime {o['provider'].upper()} EP: "
        "float vs pyquant INT4 / FP8",
        "",
        f"Device: {o['device']}. onnxruntime {o['onnxruntime']}, library `{o['library']}`.",
        "",
        f"Data: BBC news, {o['n_docs']} documents ({o['n_train']} train / "
        f"{o['n_docs'] - o['n_train']} test), "
        f"max 128 tokens. Float32 PyTorch reference accuracy {o['float_accuracy_sklearn']:.4f} "
        f"(scikit-learn probe; numpy probe {o['float_accuracy_numpy_probe']:.4f}).",
        "",
        "| model | config | MiB (own files) | cosine vs float torch | acc fixed probe | acc refit probe | "
        "rel. RMS err vs torch op ref | " + " | ".join(f"{s} ms" for s in shapes) + " | pyquant nodes |",
        "|" + "---|" * (7 + len(shapes) + 1),
    ]
    for r in rows:
        lat = []
        for s, x in zip(shapes, r["latency"], strict=True):
            v = f"{x['median_ms']:.2f}"
            if r["scheme"] != "float" and base.get(s):
                v += f" ({base[s] / x['median_ms']:.2f}x)"
            lat.append(v)
        pq = ", ".join(f"{k}: {v}" for k, v in r["placement"]["pyquant_nodes"].items()) or "-"
        lines.append(
            f"| {r['name']} | {r['config']} | {r['bytes'] / 2**20:.1f} | {r['cosine_vs_float_torch']:.5f} | "
            f"{r['accuracy_fixed_probe']:.4f} | {r['accuracy_refit_probe']:.4f} | "
            f"{r['check_vs_torch']['rel_rms_err']:.2e} | " + " | ".join(lat) + f" | {pq} |"
        )
    for r in o["results"]:
        if "skipped" in r:
            lines.append(f"| {r['name']} | skipped: {r['skipped']} |" + " |" * (6 + len(shapes)))
    lines += [
        "",
        "Latency: median of `run_with_iobinding` (inputs bound on the device, output left there), "
        f"{o['warmup']} warm-up runs; (Nx) = speed-up over the float model of the same dtype. "
        "MiB (own files): the model's .onnx and .bin, without shared.bin (embeddings and LayerNorms, "
        "shared by all models). Rel. RMS err vs torch op ref: RMS of the difference to the torch-eager "
        "output of the same (quantized) model on the check documents (pyquant's reference op numerics) "
        "over the RMS of that output; the float row shows how far ORT's own float16 kernels already are "
        "from torch's. "
        "For FP8 this is not a kernel-exactness check: a chain of per-token FP8 activation roundings turns "
        "the tiny float16 differences of the other ops into different roundings, so two correct FP8 runs "
        "differ by about the FP8 error itself (MiniLM: torch FP8 in float16 vs float32 differ by 7 % "
        "relative RMS, each 8 % from float); the cosine column is the accuracy check.",
        "",
        "Nodes per execution provider: "
        + "; ".join(f"{r['name']}: {r['placement']['nodes_per_provider']}" for r in rows),
        "",
        f"Command: `{o['command']}`",
        "",
        f"Prepared by: `{o['prepared']['command']}` (commit {o['prepared']['git_commit']}, "
        f"{o['prepared']['versions']})",
        "",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("prepare", help="export the models and evaluation data (CPU, needs torch + pyquant)")
    p.add_argument("--out", default=".device/realmodels")
    p.add_argument("--schemes", nargs="+", default=["float", "int4", "fp8"], help="minilm recipe schemes")
    p.add_argument("--dtype", default="float16", choices=["float16", "float32", "bfloat16"])
    p.add_argument("--max-per-class", type=int, default=None, help="default: the recipe's (120)")
    p.add_argument("--check-docs", type=int, default=4, help="documents of the torch-eager numerics check")
    r = sub.add_parser("run", help="evaluate the prepared models (needs only numpy + onnxruntime)")
    r.add_argument("--dir", default=".device/realmodels")
    r.add_argument("--provider", default="cuda", choices=["cuda", "cpu"])
    r.add_argument("--lib", default=None, help="libpyquant_ops.so (default: $PYQUANT_LIBRARY)")
    r.add_argument("--out", required=True, help="results .json (a .md with the same name is written too)")
    r.add_argument("--models", nargs="*", default=None, help="substrings of model names to run (default all)")
    r.add_argument("--shapes", default="1x128,8x128,32x128", help="latency batch shapes BxL")
    r.add_argument("--warmup", type=int, default=10)
    r.add_argument("--runs", type=int, default=50)
    r.add_argument("--threads", type=int, default=0, help="ORT intra-op threads (0: ORT's default)")
    args = ap.parse_args(argv)
    return prepare(args) if args.cmd == "prepare" else run(args)


if __name__ == "__main__":
    sys.exit(main())
