"""Quantized targets/drafts through Intel Neural Compressor: assisted output == the quantized target's own output."""
import json
from pathlib import Path

import pytest
import torch

from optimum_uag import assisted_generate, load_embedded
from optimum_uag.quantization import finalize_measurements, quant_kind, quantize_model, read_quant_config

from helpers import pad_batch

CONFIGS = Path(__file__).resolve().parents[1] / "habana_configs" / "quantization_config"


def _write(tmp_path, name, config):
    path = tmp_path / name
    path.write_text(json.dumps(config))
    return path


def _greedy(model, ids, mask, n=24):
    return model.generate(ids, attention_mask=mask, max_new_tokens=n, do_sample=False)


@pytest.fixture(scope="module")
def batch(prompts):
    _, tok = load_embedded("target")
    return pad_batch(tok, prompts[6:8])


def test_habana_configs_have_optimum_habana_keys():
    for name in ("maxabs_measure", "maxabs_quant"):
        config = read_quant_config(CONFIGS / f"{name}.json")
        assert {"method", "mode", "observer", "allowlist", "blocklist", "dump_stats_path"} <= set(config)
        assert set(config["allowlist"]) == set(config["blocklist"]) == {"types", "names"}
    assert read_quant_config(CONFIGS / "maxabs_quant.json")["scale_method"] == "maxabs_hw"
    assert quant_kind(read_quant_config(CONFIGS / "maxabs_measure_qdq.json")) == "fp8-measure"
    assert quant_kind(read_quant_config(CONFIGS / "maxabs_quant_qdq.json")) == "fp8-quantize"


@pytest.mark.slow
def test_fp8_measure_then_quantize_assisted_equals_quantized_target(tmp_path, monkeypatch, batch):
    """INC's FP8 flow (QDQ on CPU): measure on a calibration run, quantize, then assisted == quantized target."""
    monkeypatch.chdir(tmp_path)  # dump_stats_path is relative, as in optimum-habana
    ids, mask = batch
    target, _ = load_embedded("target")
    with torch.no_grad():
        fp32_logits = target(ids, attention_mask=mask).logits
    measured = quantize_model(target, CONFIGS / "maxabs_measure_qdq.json")
    _greedy(measured, ids, mask, 8)  # calibration
    finalize_measurements(measured)
    assert any((tmp_path / "hqt_output").glob("measure_qdq*.json"))

    quantized = quantize_model(load_embedded("target")[0], CONFIGS / "maxabs_quant_qdq.json")
    with torch.no_grad():
        fp8_logits = quantized(ids, attention_mask=mask).logits
    assert (fp8_logits - fp32_logits).abs().max() > 1e-3  # FP8 really changed the numbers
    draft, _ = load_embedded("assistant_same_tokenizer")
    out = assisted_generate(quantized, draft, ids, mask, max_new_tokens=24, do_sample=False)
    assert torch.equal(out.sequences, _greedy(quantized, ids, mask))


@pytest.mark.parametrize("quantize_draft", [False, True])
def test_rtn_weight_only_assisted_equals_quantized_target(tmp_path, batch, quantize_draft):
    ids, mask = batch
    config = _write(tmp_path, "rtn4.json", {"method": "RTN", "bits": 4, "group_size": 32, "use_sym": True})
    target, _ = load_embedded("target")
    with torch.no_grad():
        fp32_logits = target(ids, attention_mask=mask).logits
    quantized = quantize_model(target, config)
    with torch.no_grad():
        assert (quantized(ids, attention_mask=mask).logits - fp32_logits).abs().max() > 1e-2
    (draft, dt), (_, tt) = load_embedded("assistant"), load_embedded("target")
    if quantize_draft:
        draft = quantize_model(draft, CONFIGS / "cpu_rtn_int8.json")
    out = assisted_generate(quantized, draft, ids, mask, tokenizer=tt, assistant_tokenizer=dt, max_new_tokens=24,
                            do_sample=False)
    assert torch.equal(out.sequences, _greedy(quantized, ids, mask))


def test_dynamic_int8_draft_is_fine_but_a_dynamic_int8_target_is_refused(tmp_path, batch):
    """Dynamic activation scales make a token's logits depend on the other tokens of the forward: a target
    quantized that way has no well-defined "own output" to reproduce, so it is refused with the fix."""
    ids, mask = batch
    config = _write(tmp_path, "dyn.json", {"method": "DYNAMIC_INT8"})
    target = load_embedded("target")[0]
    draft = quantize_model(load_embedded("assistant_same_tokenizer")[0], config)
    out = assisted_generate(target, draft, ids, mask, max_new_tokens=16, do_sample=False)
    assert torch.equal(out.sequences, _greedy(target, ids, mask, 16))
    with pytest.raises(ValueError, match="weight-only"):
        assisted_generate(quantize_model(target, config), draft, ids, mask, max_new_tokens=4)


def test_bad_quant_configs(tmp_path):
    with pytest.raises(FileNotFoundError, match="habana_configs"):
        read_quant_config(tmp_path / "missing.json")
    bad = tmp_path / "bad.json"
    bad.write_text('{"method": "RTN",\n "bits": }')
    with pytest.raises(ValueError, match="line 2"):
        read_quant_config(bad)
    with pytest.raises(ValueError, match="needs a \"method\""):
        read_quant_config(_write(tmp_path, "nomethod.json", {"bits": 4}))
    with pytest.raises(ValueError, match="unknown quantization method"):
        quant_kind({"method": "AWQ4"})
    with pytest.raises(ValueError, match="MEASURE or QUANTIZE"):
        quant_kind({"method": "HOOKS", "mode": "CALIBRATE"})
    with pytest.raises(ValueError, match="unknown RTN keys"):
        quantize_model(torch.nn.Linear(2, 2), _write(tmp_path, "rtn.json", {"method": "RTN", "bitz": 4}))


def test_the_cli_quantizes_on_the_cpu_before_moving_to_an_accelerator(tmp_path, monkeypatch):
    """Issue 29, finding 11: with QUANT_CONFIG on an accelerator, the target (and a draft given
    --assistant_quant_config) is quantized while on the CPU and moved afterwards, as optimum-habana's setup_model does
    (setup_quantization before .to(device)): a model that only fits in FP8 loads at all. The accelerator here is
    PyTorch's meta device; quantize_model records where each model was when it was quantized."""
    from optimum_uag.cli import generate, loading

    seen = []
    monkeypatch.setattr(loading, "resolve_device", lambda name, emulate=False: (torch.device("meta"), None))
    monkeypatch.setattr(generate, "resolve_device", lambda name, emulate=False: (torch.device("meta"), None))
    monkeypatch.setattr(generate, "maybe_quantize",
                        lambda model, path, flag: seen.append((flag, model.device.type if path else None)) or model)
    config = tmp_path / "rtn.json"
    config.write_text('{"method": "RTN", "bits": 8, "group_size": -1, "use_sym": true}')
    monkeypatch.setenv("QUANT_CONFIG", str(config))
    from optimum_uag import embedded_models

    paths = embedded_models()
    args, _ = generate.parse(["--model_name_or_path", str(paths["target"]), "--assistant_model",
                              str(paths["assistant_same_tokenizer"]), "--assistant_quant_config", str(config)])
    args.assistant_model_given = True
    setup = generate.load_models(args, [])
    assert seen and all(device == "cpu" for _, device in seen), seen
    assert setup.model.device.type == "meta"
    assert all(next(d.parameters()).device.type == "meta" for d, _, _ in setup.drafts.values())
