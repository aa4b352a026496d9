"""CLI parsing and the commands that need no model packages."""

from __future__ import annotations

import pytest
import torch

from pyquant.cli import build_parser, main
from pyquant.config import Fp8Config, Int4Config
from pyquant.models import RECIPES, parse_scheme


def test_parse_scheme() -> None:
    assert parse_scheme("float") is None
    assert parse_scheme("int4") == Int4Config(128)
    assert parse_scheme("int4-b64-asym") == Int4Config(64, symmetric=False)
    assert parse_scheme("fp8-channel") == Fp8Config(0)
    assert parse_scheme("fp8-b128-static") == Fp8Config(128, "static")
    assert parse_scheme("fp8", {"fp8": Fp8Config(64)}) == Fp8Config(64)
    with pytest.raises(ValueError, match="unknown scheme"):
        parse_scheme("int3")
    with pytest.raises(ValueError, match="power of two"):
        parse_scheme("int4-b48")


def test_recipes_keep_lm_head_float() -> None:
    cfg = RECIPES["smollm2"].quantize_config("fp8")
    assert "lm_head" in cfg.exclude and isinstance(cfg.default, Fp8Config)
    assert RECIPES["minilm"].quantize_config("float") is None


def test_cli_list_and_errors(capsys) -> None:
    assert main(["eval", "--list"]) == 0
    assert "smollm2" in capsys.readouterr().out
    assert main(["export", "--model", "no-such-model", "--out", "x.onnx"]) == 2
    assert "unknown model 'no-such-model'" in capsys.readouterr().err
    args = build_parser().parse_args(["eval", "--scheme", "int4", "--scheme", "fp8-b128"])
    assert args.scheme == ["int4", "fp8-b128"] and args.int4_gpu_layout is None
    args = build_parser().parse_args(["eval", "--provider", "cuda", "--int4-gpu-layout", "all"])
    assert args.int4_gpu_layout == "all"  # passed to pyquant.ort.make_session (tests/ops/test_library.py)
    with pytest.raises(SystemExit):
        build_parser().parse_args(["eval", "--int4-gpu-layout", "shuffled"])
    assert "invalid choice: 'shuffled'" in capsys.readouterr().err


def test_plan_command_arguments_and_errors(tmp_path, capsys) -> None:
    args = build_parser().parse_args(
        ["plan", "--model", "smollm2", "--budget", "1%", "--candidates", "fp8,int4-b128", "-o", "p.json"]
    )
    assert args.candidates == ["fp8,int4-b128"] and args.budget == "1%" and args.max_evals == 6
    args = build_parser().parse_args(["eval", "--plan", "a.json", "--plan", "b.json", "--threads", "1"])
    assert args.plan == ["a.json", "b.json"] and args.threads == 1
    # bad budget / candidates fail before any model is loaded
    out = ["-o", str(tmp_path / "p.json")]
    assert main(["plan", "--model", "minilm", "--budget=-1%", *out]) == 2
    assert "budget must be >= 0" in capsys.readouterr().err
    assert (
        main(["plan", "--model", "minilm", "--candidates", "fp8,int3", "-o", str(tmp_path / "p.json")]) == 2
    )
    assert "unknown candidate 'int3'" in capsys.readouterr().err
    assert main(["plan", "--model", "smollm2", "--candidates", "fp8-mlp", *out]) == 2
    assert "not a per-layer precision" in capsys.readouterr().err
    # --plan with a missing / broken file, or a plan made for another model
    assert main(["eval", "--plan", str(tmp_path / "missing.json")]) == 2
    assert "does not exist" in capsys.readouterr().err
    bad = tmp_path / "bad.json"
    bad.write_text('{"format": "something-else"}')
    assert main(["export", "--plan", str(bad), "--out", str(tmp_path / "m.onnx")]) == 2
    assert "not a pyquant plan" in capsys.readouterr().err


def test_plan_for_another_model_is_refused(tmp_path, capsys) -> None:
    import torch.nn as nn

    from pyquant.planner import make_plan, measure_sensitivity

    model = nn.Sequential(nn.Linear(32, 32))
    sens = measure_sensitivity(
        model, ["fp8"], [torch.randn(4, 32)], lambda m, x: m(x), proxy="mse", progress=False
    )
    path = tmp_path / "toy.json"
    make_plan(sens, 0.01, None, model_name="toy-model", progress=False).save(path)
    assert main(["eval", "--model", "minilm", "--plan", str(path)]) == 2
    assert "made for model 'toy-model', not 'minilm'" in capsys.readouterr().err
    assert main(["quantize", "--model", "smollm2", "--plan", str(path), "--out", str(tmp_path / "q.pt")]) == 2
    assert "made for model 'toy-model'" in capsys.readouterr().err


def test_export_kv_cache_command(tmp_path, capsys) -> None:
    """`pyquant export --kv-cache` on an HF causal-LM directory writes a graph with the cache."""
    from tests.pyquant.ort_session import cpu_session
    from tests.pyquant.tiny_models import tiny_llama

    tokenizers = pytest.importorskip("tokenizers")
    transformers = pytest.importorskip("transformers")
    tiny_llama(eager=False).save_pretrained(tmp_path / "lm")
    # the directory loader reads a tokenizer too: a word-level one over the model's 128 ids
    vocab = {f"w{i}": i for i in range(128)}
    tok = tokenizers.Tokenizer(tokenizers.models.WordLevel(vocab, unk_token="w0"))
    fast = transformers.PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="w0")
    fast.save_pretrained(tmp_path / "lm")
    out, model_dir = tmp_path / "lm.onnx", str(tmp_path / "lm")
    cmd = ["export", "--model", model_dir, "--scheme", "int4-b32", "--kv-cache", "--out", str(out)]
    assert main(cmd) == 0
    assert "MatMulInt4=14" in capsys.readouterr().out
    names = [i.name for i in cpu_session(out).get_inputs()]
    assert names[:3] == ["input_ids", "attention_mask", "position_ids"] and "past_key_values.1.value" in names
    static = tmp_path / "lm_static.onnx"
    assert main([*cmd[:-1], str(static), "--static-cache"]) == 0
    assert "cache_position" in [i.name for i in cpu_session(static).get_inputs()]
    capsys.readouterr()
    assert (
        main(["export", "--model", model_dir, "--scheme", "int4-b32", "--static-cache", "--out", str(static)])
        == 2
    )
    assert "--static-cache goes with --kv-cache" in capsys.readouterr().err


def test_default_eval_schemes_by_provider():
    """The main job shows INT4 with int8 activations on the CPU EP only (on CUDA it would repeat int4)."""
    from pyquant.cli import default_eval_schemes

    assert default_eval_schemes(["cpu"]) == ["int4", "int4-a8", "fp8"]
    assert default_eval_schemes(["cuda", "cpu"]) == ["int4", "fp8"]
