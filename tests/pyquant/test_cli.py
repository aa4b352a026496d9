"""CLI parsing and the commands that need no model packages."""

from __future__ import annotations

import pytest

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
    assert args.scheme == ["int4", "fp8-b128"]
