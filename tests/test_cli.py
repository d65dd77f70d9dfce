"""The main job: examples/run_generation.py on the embedded pair, in a subprocess."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def run(args, tmp_path, env=None):
    import os

    return subprocess.run([sys.executable, str(REPO / "examples" / "run_generation.py"), *args], cwd=tmp_path,
                          capture_output=True, text=True, timeout=600, env={**os.environ, **(env or {})})


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
    assert proc.returncode == 2 and "needs Intel Gaudi" in proc.stderr and "--emulate_hpu" in proc.stderr
    proc = run(["--device", "hpu", "--max_new_tokens", "4"], tmp_path)
    assert proc.returncode == 2 and "--emulate_hpu" in proc.stderr and "Traceback" not in proc.stderr
    proc = run(["--use_flash_attention", "--max_new_tokens", "4"], tmp_path)
    assert proc.returncode == 2 and "--emulate_hpu" in proc.stderr
    proc = run(["--torch_compile", "--max_new_tokens", "4"], tmp_path)
    assert proc.returncode == 2 and "--use_hpu_graphs" in proc.stderr


def test_emulated_gaudi_dry_run_reports_graph_captures(tmp_path):
    """A Gaudi command line (HPU graphs, reuse_cache, static prompt length) dry-run on CPU."""
    proc = run(["--emulate_hpu", "--use_hpu_graphs", "--reuse_cache", "--max_input_tokens", "48", "--batch_size", "2",
                "--max_new_tokens", "10", "--n_iterations", "2", "--warmup", "0", "--output_dir", str(tmp_path / "o"),
                "--use_flash_attention", "--trim_logits", "--attn_softmax_bf16"], tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    res = json.loads((tmp_path / "o" / "results.json").read_text())
    assert res["device"] == "hpu (emulated on CPU)"
    assert res["outputs_match_target"] is True
    # target: optimum-habana's own loop (prefill + decode) and ours (prefill + verify), whatever the iterations
    assert res["graph_captures"]["target"] == 4
    assert 2 <= res["graph_captures"]["assistant"] <= 4  # decode + re-feed + prefill bucket(s)
    assert res["args"]["use_flash_attention"] is True
    assert any("--trim_logits, --attn_softmax_bf16" in note for note in res["notes"])


def test_quant_config_env(tmp_path):
    configs = REPO / "habana_configs" / "quantization_config"
    proc = run(["--max_new_tokens", "4"], tmp_path, env={"QUANT_CONFIG": str(configs / "maxabs_quant.json")})
    assert proc.returncode == 2 and "maxabs_quant_qdq.json" in proc.stderr
    proc = run(["--max_new_tokens", "4"], tmp_path, env={"QUANT_CONFIG": str(tmp_path / "none.json")})
    assert proc.returncode == 2 and "does not exist" in proc.stderr and "Traceback" not in proc.stderr
    proc = run(["--max_new_tokens", "8", "--output_dir", str(tmp_path / "q"), "--assistant_quant_config",
                str(configs / "cpu_rtn_int8.json"), "--prompt", "def f(x):", "--batch_size", "2"], tmp_path,
               env={"QUANT_CONFIG": str(configs / "cpu_rtn_int8.json")})
    assert proc.returncode == 0, proc.stderr[-2000:]
    res = json.loads((tmp_path / "q" / "results.json").read_text())
    assert res["outputs_match_target"] is True and len(res["output_ids"]) == 2
    assert any("repeated" in note for note in res["notes"]) and "repeated" in proc.stdout


def test_malformed_prompt_file_names_the_line(tmp_path):
    bad = tmp_path / "p.jsonl"
    bad.write_text('{"prompt": "def f():"}\nnot json\n')
    proc = run(["--prompt_file", str(bad), "--max_new_tokens", "4"], tmp_path)
    assert proc.returncode == 2 and "p.jsonl:2" in proc.stderr


def test_tune_ranks_two_drafts_and_two_k(tmp_path):
    from optimum_uag import embedded_models

    paths = embedded_models()
    proc = subprocess.run([sys.executable, "-m", "optimum_uag.cli", "tune", "--assistant_model", paths["assistant"],
                           "--assistant_model", paths["assistant_same_tokenizer"], "--num_assistant_tokens", "2,4",
                           "--schedules", "none", "--num_prompts", "2", "--max_new_tokens", "8",
                           "--output_dir", str(tmp_path / "t")], cwd=tmp_path, capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "recommended: optimum-uag generate" in proc.stdout
    res = json.loads((tmp_path / "t" / "results.json").read_text())
    rows = res["results"]
    assert {(r["draft"], r["num_assistant_tokens"]) for r in rows} == {
        (d, k) for d in ("assistant", "assistant_same_tokenizer") for k in (2, 4)}
    assert [r["speedup_vs_target"] for r in rows] == sorted((r["speedup_vs_target"] for r in rows), reverse=True)
    assert all(r["outputs_match_target"] for r in rows)
    assert res["best"] == rows[0] and f"--num_assistant_tokens {rows[0]['num_assistant_tokens']}" in res[
        "recommended_command"]
    assert (tmp_path / "t" / "speedup.png").stat().st_size > 1000


def test_tune_bad_grid(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "optimum_uag.cli", "tune", "--num_assistant_tokens", "3,x"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2 and "comma-separated integers" in proc.stderr and "Traceback" not in proc.stderr
