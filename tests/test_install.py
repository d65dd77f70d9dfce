"""What the installed package asks of a machine: no exact torch, optimum-habana only in the `gaudi` extra, and the
Gaudi stack's versions checked at enable()."""
from importlib.metadata import requires

import pytest

import optimum_uag.gaudi as gaudi


def _requirements():
    base, extras = [], {}
    for line in requires("optimum-uag") or []:
        spec, _, marker = line.partition(";")
        extra = marker.split("extra ==")[-1].strip().strip("'\"") if "extra ==" in marker else None
        (extras.setdefault(extra, []) if extra else base).append(spec.strip())
    return base, extras


def test_installed_metadata_pins_no_torch_and_keeps_optimum_habana_in_the_gaudi_extra():
    base, extras = _requirements()
    torch_spec = next(r for r in base if r.startswith("torch"))
    assert "==" not in torch_spec and ">=" in torch_spec, torch_spec  # a Gaudi image's torch must stay
    assert not any(r.startswith("optimum-habana") for r in base), base
    assert any(r.startswith("optimum-habana") for r in extras["gaudi"])
    transformers = next(r for r in base if r.startswith("transformers"))
    assert "<6" in transformers and "<4.56" not in transformers, transformers  # transformers 5 admitted
    assert not any(r.startswith("optimum-habana") for r in extras.get("test-cpu", []))


def test_enable_refuses_an_unsupported_stack_naming_the_fix(monkeypatch):
    versions = {"optimum-habana": "1.21.2", "transformers": "4.55.4", "habana-torch-plugin": None}
    monkeypatch.setattr(gaudi, "_version", lambda dist: versions[dist])
    gaudi.check_versions()  # the supported stack (the emulator has no habana-torch-plugin)
    versions["habana-torch-plugin"] = "1.24.0.123"
    gaudi.check_versions()
    versions["habana-torch-plugin"] = "1.19.0"
    with pytest.raises(ImportError, match=r"SynapseAI \(habana-torch-plugin\) 1.19.0 \(supported: 1.24.x\)"):
        gaudi.check_versions()
    versions.update({"habana-torch-plugin": None, "optimum-habana": "1.18.0"})
    with pytest.raises(ImportError, match=r"optimum-habana 1.18.0 \(supported: 1.21.x\).*optimum-uag\[gaudi\]"):
        gaudi.check_versions()
    versions.update({"optimum-habana": "1.21.2", "transformers": "5.23.0"})
    with pytest.raises(ImportError, match=r"transformers 5.23.0 \(optimum-habana 1.21.2 needs 4.55.x\)"):
        gaudi.check_versions()
    versions["optimum-habana"] = None
    with pytest.raises(ImportError, match=r"pip install 'optimum-uag\[gaudi\]'"):
        gaudi.check_versions()
