"""Quantized target/draft through Intel Neural Compressor, the way optimum-habana does it.

One entry point reads a JSON file (the `QUANT_CONFIG` convention of optimum-habana's text-generation example):

- FP8 (Gaudi): optimum-habana's maxabs_measure.json / maxabs_quant.json (`"method": "HOOKS"`, `"mode": "MEASURE"`
  or `"QUANTIZE"`) -> `FP8Config.from_json_file`, `prepare` in measure mode (then `finalize_calibration` after the
  calibration run dumps the statistics), `convert` in quantize mode.
- Weight-only RTN (any device, runs on CPU): `{"method": "RTN", "bits": 8, "group_size": -1, "use_sym": true}`
  -> `RTNConfig`, `prepare` + `convert`.
- Dynamic int8 (CPU, torch.ao): `{"method": "DYNAMIC_INT8"}` -> `torch.ao.quantization.quantize_dynamic`.
"""
from __future__ import annotations

import json
import os

import torch

from .registry import model_state

FP8_MODES = ("MEASURE", "QUANTIZE")
_RTN_KEYS = ("bits", "group_size", "use_sym", "dtype", "group_dim", "use_full_range", "use_mse_search", "quant_lm_head")


def read_quant_config(path: str | os.PathLike) -> dict:
    """Parse a quantization JSON; errors name the file and the fix."""
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise FileNotFoundError(f"quantization config {path!r} does not exist (see habana_configs/quantization_config/)")
    try:
        with open(path, encoding="utf-8") as handle:
            config = json.load(handle)
    except json.JSONDecodeError as err:
        raise ValueError(f"quantization config {path!r} is not valid JSON: line {err.lineno}: {err.msg}") from None
    if not isinstance(config, dict) or "method" not in config:
        raise ValueError(f"quantization config {path!r} needs a \"method\" key (HOOKS for FP8, RTN, DYNAMIC_INT8)")
    return config


def quant_kind(config: dict) -> str:
    """"fp8-measure", "fp8-quantize", "rtn" or "dynamic-int8"."""
    method = str(config["method"]).upper()
    if method == "HOOKS":
        mode = str(config.get("mode", "")).upper()
        if mode not in FP8_MODES:
            raise ValueError(f"FP8 quantization config has mode={config.get('mode')!r}; use MEASURE or QUANTIZE")
        return f"fp8-{mode.lower()}"
    if method == "RTN":
        return "rtn"
    if method == "DYNAMIC_INT8":
        return "dynamic-int8"
    raise ValueError(f"unknown quantization method {config['method']!r}; use HOOKS (FP8), RTN or DYNAMIC_INT8")


def _need_inc(kind: str) -> None:
    import importlib.util

    if importlib.util.find_spec("neural_compressor") is None:
        raise ValueError(f"{kind} quantization needs Intel Neural Compressor: pip install 'optimum-uag[quant]'")


def quantize_model(model: torch.nn.Module, config_path: str | os.PathLike) -> torch.nn.Module:
    """Quantize (or prepare for FP8 measurement) `model` as the JSON at `config_path` says; returns the model."""
    config = read_quant_config(config_path)
    kind = quant_kind(config)
    if kind.startswith("fp8"):
        device = next(model.parameters()).device
        if device.type != "hpu" and not config.get("use_qdq"):  # INC runs FP8 off Gaudi only in QDQ mode
            qdq = "maxabs_measure_qdq.json" if kind == "fp8-measure" else "maxabs_quant_qdq.json"
            raise ValueError(f"FP8 on {device.type} needs QDQ mode (\"use_qdq\": true); use "
                             f"habana_configs/quantization_config/{qdq}, or run on Gaudi")
        _need_inc(kind)
        from neural_compressor.torch.quantization import FP8Config, convert, prepare

        fp8 = FP8Config.from_json_file(os.fspath(config_path))
        model = prepare(model, fp8) if kind == "fp8-measure" else convert(model, fp8)
        if getattr(model, "device", None) is not None and model.device.type == "hpu":
            from .gaudi import device as hpu

            hpu.initialize_fp8(model)
        model_state(model)["quant"] = kind
        return model
    if kind == "rtn":
        _need_inc(kind)
        from neural_compressor.torch.quantization import RTNConfig, convert, prepare

        unknown = sorted(set(config) - set(_RTN_KEYS) - {"method"})
        if unknown:
            raise ValueError(f"unknown RTN keys {unknown} in {os.fspath(config_path)!r}; allowed: {list(_RTN_KEYS)}")
        rtn = RTNConfig(use_layer_wise=False, **{k: v for k, v in config.items() if k in _RTN_KEYS})
        model = convert(prepare(model, rtn))
    else:
        model = torch.ao.quantization.quantize_dynamic(model, {torch.nn.Linear}, dtype=torch.qint8)
    model_state(model)["quant"] = kind
    return model


def finalize_measurements(model: torch.nn.Module) -> bool:
    """After an FP8 MEASURE run: dump the statistics (INC finalize_calibration); False (no-op) for other models."""
    if model_state(model).get("quant") != "fp8-measure":
        return False
    from neural_compressor.torch.quantization import finalize_calibration

    finalize_calibration(model)
    return True
