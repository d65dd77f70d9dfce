"""The main job: examples/run_generation.py on the embedded pair, in a subprocess."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def run(args, tmp_path):
    return subprocess.run([sys.executable, str(REPO / "examples" / "run_generation.py"), *args], cwd=tmp_path,
                          capture_output=True, text=True, timeout=600)


@pytest.mark.parametrize("extra", [[], ["--assistant_model", "same"]])
def test_run_generation_writes_results(tmp_path, extra):
    if extra:
        from optimum_uag import embedded_models

        extra = ["--assistant_model", embedded_models()["assistant_same_tokenizer"]]
    proc = run(["--max_new_tokens", "12", "--batch_size", "2", "--n_iterations", "1", "--output_dir",
                str(tmp_path / "out"), *extra], tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "speedup vs target" in proc.stdout
    res = json.loads((tmp_path / "out" / "results.json").read_text())
    for key in ("throughput_tokens_per_s", "speedup_vs_target", "tau", "acceptance_rate", "outputs_match_target",
                "generated_tokens", "output_ids", "world_size", "graph_captures", "args"):
        assert key in res, key
    assert res["outputs_match_target"] is True
    assert len(res["output_ids"]) == 2 and res["generated_tokens"] > 0


def test_bad_model_path_is_one_line(tmp_path):
    proc = run(["--model_name_or_path", "no/such/model", "--max_new_tokens", "4"], tmp_path)
    assert proc.returncode == 2
    assert "nothing is downloaded" in proc.stderr and "Traceback" not in proc.stderr


def test_gaudi_flag_without_gaudi(tmp_path):
    proc = run(["--use_hpu_graphs", "--max_new_tokens", "4"], tmp_path)
    assert proc.returncode == 2 and "needs Intel Gaudi" in proc.stderr


def test_malformed_prompt_file_names_the_line(tmp_path):
    bad = tmp_path / "p.jsonl"
    bad.write_text('{"prompt": "def f():"}\nnot json\n')
    proc = run(["--prompt_file", str(bad), "--max_new_tokens", "4"], tmp_path)
    assert proc.returncode == 2 and "p.jsonl:2" in proc.stderr
