"""The main job: examples/run_generation.py on the embedded pair, in a subprocess."""
import argparse
import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[1]


def run(args, tmp_path, env=None):
    """The CLI on the embedded tiny pair (no model argument means SmolLM2: see test_default_runs_smollm2)."""
    import os

    if "--model_name_or_path" not in args:
        args = ["--model_name_or_path", "target", *args]
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
    assert "speedup vs the fastest target-only path" in proc.stdout
    res = json.loads((tmp_path / "out" / "results.json").read_text())
    for key in ("throughput_tokens_per_s", "speedup_vs_best_target_only", "speedup_vs_transformers_generate", "tau", "acceptance_rate", "outputs_match_target",
                "generated_tokens", "output_ids", "world_size", "graph_captures", "args"):
        assert key in res, key
    assert res["outputs_match_target"] is True
    assert len(res["output_ids"]) == 2 and res["generated_tokens"] > 0


def _error_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("error:")]


def test_hub_id_without_network_is_one_line(tmp_path):
    """A Hub id is passed to from_pretrained; offline, the failure is one line naming the fix."""
    for env in ({"HF_HUB_OFFLINE": "1"}, {"HF_HUB_OFFLINE": "0", "HF_ENDPOINT": "https://no-such-host.invalid"}):
        proc = run(["--model_name_or_path", "meta-llama/Llama-3.1-8B", "--max_new_tokens", "4"], tmp_path, env)
        assert proc.returncode == 2 and "Traceback" not in proc.stderr
        (line,) = _error_lines(proc.stderr)
        assert "could not fetch 'meta-llama/Llama-3.1-8B'" in line and "local directory" in line


def test_local_json_dataset_with_column_name(tmp_path):
    rows = [{"id": i, "title": f"t{i}", "code": p} for i, p in enumerate(["def add(a, b):\n", "import os\n", "x = ["])]
    (tmp_path / "data.json").write_text("\n".join(json.dumps(r) for r in rows))
    proc = run(["--dataset_name", str(tmp_path / "data.json"), "--column_name", "code", "--dataset_max_samples", "2",
                "--batch_size", "2", "--max_new_tokens", "6", "--output_dir", str(tmp_path / "out")], tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    res = json.loads((tmp_path / "out" / "results.json").read_text())
    assert res["prompt_source"].startswith("dataset") and res["outputs_match_target"] is True
    proc = run(["--dataset_name", str(tmp_path / "data.json"), "--column_name", "nope", "--max_new_tokens", "4"],
               tmp_path)
    assert proc.returncode == 2 and "not a text column" in proc.stderr and "Traceback" not in proc.stderr


def test_jsonl_chat_file(tmp_path):
    """Chat messages are applied with the target's template; the draft sees the same text (UAG)."""
    import shutil

    from optimum_uag import embedded_models

    target = tmp_path / "chat_target"
    shutil.copytree(embedded_models()["target"], target)
    template = ("{% for m in messages %}### {{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
                "{% if add_generation_prompt %}### assistant:{% endif %}")
    (tmp_path / "template.jinja").write_text(template)
    chats = [{"messages": [{"role": "user", "content": "def add(a, b):"}]},
             {"messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": "import os"}]}]
    (tmp_path / "chats.jsonl").write_text("\n".join(json.dumps(c) for c in chats))
    proc = run(["--model_name_or_path", str(target), "--prompt_file", str(tmp_path / "chats.jsonl"), "--chat_template",
                str(tmp_path / "template.jinja"), "--batch_size", "2", "--max_new_tokens", "6", "--output_dir",
                str(tmp_path / "out")], tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    res = json.loads((tmp_path / "out" / "results.json").read_text())
    assert res["outputs_match_target"] is True
    proc = run(["--prompt_file", str(tmp_path / "chats.jsonl"), "--max_new_tokens", "4"], tmp_path)
    assert proc.returncode == 2 and "no chat template" in proc.stderr


def test_upstream_flags_never_stack_trace(tmp_path):
    proc = run(["--num_beams", "2", "--max_new_tokens", "4"], tmp_path)
    assert proc.returncode == 2 and "beam search" in proc.stderr and "Traceback" not in proc.stderr
    proc = run(["--peft_model", "x", "--max_new_tokens", "4"], tmp_path)
    assert proc.returncode == 2 and "merge_and_unload" in proc.stderr
    proc = run(["--no_such_flag", "--max_new_tokens", "4"], tmp_path)
    assert proc.returncode == 2 and "unrecognized arguments: --no_such_flag" in proc.stderr
    proc = run(["--prompt", "def f():", "import os", "--batch_size", "2", "--max_new_tokens", "4", "--sdp_on_bf16",
                "--attn_batch_split", "2", "--bad_words", "zzz", "--output_dir", str(tmp_path / "o")], tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    res = json.loads((tmp_path / "o" / "results.json").read_text())
    assert any("--sdp_on_bf16" in n and "--attn_batch_split" in n for n in res["notes"])
    assert res["outputs_match_target"] is True


def test_gaudi_flag_without_gaudi(tmp_path):
    proc = run(["--use_hpu_graphs", "--max_new_tokens", "4"], tmp_path)
    assert proc.returncode == 2 and "needs Intel Gaudi" in proc.stderr and "--emulate_hpu" in proc.stderr
    proc = run(["--device", "hpu", "--max_new_tokens", "4"], tmp_path)
    assert proc.returncode == 2 and "--emulate_hpu" in proc.stderr and "Traceback" not in proc.stderr
    proc = run(["--use_flash_attention", "--max_new_tokens", "4"], tmp_path)
    assert proc.returncode == 2 and "--emulate_hpu" in proc.stderr
    proc = run(["--torch_compile", "--emulate_hpu", "--max_new_tokens", "4"], tmp_path)
    assert proc.returncode == 2 and "hpu_backend" in proc.stderr and "Traceback" not in proc.stderr


def test_emulated_gaudi_dry_run_reports_graph_captures(tmp_path):
    """A Gaudi command line (HPU graphs, reuse_cache, static prompt length) dry-run on CPU."""
    if importlib.util.find_spec("optimum") is None or importlib.util.find_spec("optimum.habana") is None:
        proc = run(["--emulate_hpu", "--max_new_tokens", "4"], tmp_path)  # the CPU/CUDA install: one clear line
        assert proc.returncode == 2 and "optimum-uag[gaudi]" in proc.stderr and "Traceback" not in proc.stderr
        return
    proc = run(["--emulate_hpu", "--use_hpu_graphs", "--reuse_cache", "--max_input_tokens", "48", "--batch_size", "2",
                "--max_new_tokens", "10", "--n_iterations", "2", "--warmup", "0", "--output_dir", str(tmp_path / "o"),
                "--use_flash_attention", "--trim_logits", "--attn_softmax_bf16"], tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    res = json.loads((tmp_path / "o" / "results.json").read_text())
    assert res["device"] == "hpu (emulated on CPU)"
    assert res["outputs_match_target"] is True
    # ours: prefill + verify; optimum-habana's own target-only loop: prefill + decode, whatever the iterations
    assert res["graph_captures"]["target"] == 2 and res["baseline_graph_captures"]["target"] == 2
    assert 2 <= res["graph_captures"]["assistant"] <= 4  # decode + re-feed + prefill bucket(s)
    assert res["args"]["use_flash_attention"] is True
    assert res["args"]["ignore_eos"] is True  # optimum-habana's default for Gaudi command lines
    # the target's KV cache against optimum-habana's own target-only run (48 + 10 columns): no more than its
    # columns + the verify block (K + 2) + the runner's margin, rounded to it (issue 29, item 3)
    from optimum_uag.gaudi.runner import MARGIN

    kv = res["kv_cache_bytes"]
    per_column = kv["target_only"] // 58
    assert kv["target_only"] % 58 == 0 and kv["target"] <= kv["target_only"] + per_column * (7 + 2 * MARGIN - 1)
    assert any("--trim_logits" in note for note in res["notes"])  # a no-op flag, said so
    assert not any("--attn_softmax_bf16" in note for note in res["notes"])  # applied to our forwards (issue 22)


@pytest.mark.slow
def test_emulated_gaudi_three_prompt_lengths_bounded_graphs(tmp_path):
    """Issue 12: three batches of different prompt lengths, two iterations, HPU graphs: target-only outputs in
    every batch of every iteration, the same acceptance in both iterations (nothing stale survives a call),
    at most 4 captures per model, and the same draft captures for 16 and 96 new tokens. (The target's cache follows
    the request's length in 32-column steps, as optimum-habana's own generate() sizes it per request: three prompt
    lengths may need two widths, each a prefill and a verify graph.)"""
    prompts = ["def f(x):", "import numpy as np\nimport os\nclass Config:\n    def __init__(self):",
               "# a longer prompt that spans more tokens than the other two\ndef parse(line):\n    parts = line.split()"]
    captures = []
    for max_new in (16, 96):
        out = tmp_path / f"o{max_new}"
        proc = run(["--emulate_hpu", "--use_hpu_graphs", "--reuse_cache", "--prompt", *prompts, "--max_new_tokens",
                    str(max_new), "--n_iterations", "2", "--warmup", "1", "--output_dir", str(out)], tmp_path)
        assert proc.returncode == 0, proc.stderr[-2000:]
        res = json.loads((out / "results.json").read_text())
        assert res["outputs_match_target"] is True, res["mismatched_batches"]
        first, second = res["acceptance_per_iteration"]
        assert first == second > 0
        assert all(n <= 4 for n in res["graph_captures"].values()), res["graph_captures"]
        captures.append(res["graph_captures"])
    assert captures[0]["assistant"] == captures[1]["assistant"]


def test_quant_config_env(tmp_path):
    configs = REPO / "habana_configs" / "quantization_config"
    proc = run(["--max_new_tokens", "4"], tmp_path, env={"QUANT_CONFIG": str(configs / "maxabs_quant.json")})
    assert proc.returncode == 2 and "maxabs_quant_qdq.json" in proc.stderr
    proc = run(["--max_new_tokens", "4"], tmp_path, env={"QUANT_CONFIG": str(tmp_path / "none.json")})
    assert proc.returncode == 2 and "does not exist" in proc.stderr and "Traceback" not in proc.stderr
    proc = run(["--max_new_tokens", "8", "--output_dir", str(tmp_path / "q"), "--assistant_quant_config",
                str(configs / "cpu_rtn_int8.json"), "--prompt", "def f(x):", "--batch_size", "2"], tmp_path,
               env={"QUANT_CONFIG": str(configs / "cpu_rtn_int8.json")})
    if importlib.util.find_spec("neural_compressor") is None:  # the CPU/CUDA install without [quant]
        assert proc.returncode == 2 and "pip install 'optimum-uag[quant]'" in proc.stderr, proc.stderr[-2000:]
        return
    assert proc.returncode == 0, proc.stderr[-2000:]
    res = json.loads((tmp_path / "q" / "results.json").read_text())
    assert res["outputs_match_target"] is True and len(res["output_ids"]) == 2
    assert any("repeated" in note for note in res["notes"]) and "repeated" in proc.stdout


@pytest.mark.slow
def test_fp8_measure_dumps_target_and_assistant_statistics(tmp_path):
    """Issue 12 finding 7: a MEASURE run finalizes every measured model, the assistant included (its own
    dump_stats_path), as the two-step FP8 flow needs both."""
    configs = REPO / "habana_configs" / "quantization_config"
    assistant_config = json.loads((configs / "maxabs_measure_qdq.json").read_text())
    assistant_config["dump_stats_path"] = "./hqt_output/measure_assistant_qdq"
    (tmp_path / "measure_assistant_qdq.json").write_text(json.dumps(assistant_config))
    proc = run(["--max_new_tokens", "6", "--prompt", "def f(x):", "--output_dir", str(tmp_path / "o"),
                "--assistant_quant_config", str(tmp_path / "measure_assistant_qdq.json")], tmp_path,
               env={"QUANT_CONFIG": str(configs / "maxabs_measure_qdq.json")})
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert any((tmp_path / "hqt_output").glob("measure_qdq*.json"))
    assert any((tmp_path / "hqt_output").glob("measure_assistant_qdq*.json"))
    res = json.loads((tmp_path / "o" / "results.json").read_text())
    assert any("assistant FP8 measurement dumped" in note for note in res["notes"])


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
    key = "speedup_vs_best_target_only"
    assert [r[key] for r in rows] == sorted((r[key] for r in rows), reverse=True)
    assert res["best_target_only"] in ("target_only", "target_only_packed") and res["verify_cost"]
    assert all(r["outputs_match_target"] for r in rows)
    assert res["best"] == rows[0] and f"--num_assistant_tokens {rows[0]['num_assistant_tokens']}" in res[
        "recommended_command"]
    assert (tmp_path / "t" / "speedup.png").stat().st_size > 1000


def test_tune_bad_grid(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "optimum_uag.cli", "tune", "--num_assistant_tokens", "3,x"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2 and "comma-separated integers" in proc.stderr and "Traceback" not in proc.stderr


def test_train_draft_feature_layers_flag():
    from optimum_uag.cli.train_draft import parse_feature_layers

    assert parse_feature_layers("none", 30) == [] and parse_feature_layers("eagle3", 30) == [2, 15, 27]
    assert parse_feature_layers("15, 2", 30) == [2, 15]
    for bad in ("2,30", "x", "-1"):
        with pytest.raises(SystemExit, match="feature_layers"):
            parse_feature_layers(bad, 30)


def test_train_draft_then_generate_with_the_head(tmp_path):
    """optimum-uag train-draft (fused features, --feature_layers eagle3) on a little text makes a head directory that
    --assistant_model takes (exact output),
    next to a UAG row (--uag_assistant_model) in the same side-by-side run."""
    from optimum_uag import embedded_models, eval_prompts

    data = tmp_path / "data.jsonl"
    data.write_text("\n".join(json.dumps({"text": p * 3}) for p in eval_prompts()))
    head = tmp_path / "head"
    proc = subprocess.run([sys.executable, "-m", "optimum_uag.cli", "train-draft", "--model_name_or_path", "target",
                           "--dataset_name", str(data), "--output_dir", str(head), "--max_minutes", "0.3",
                           "--draft_vocab_size", "256", "--window", "32", "--seq_len", "64", "--batch_size", "4",
                           "--feature_layers", "eagle3"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    config = json.loads((head / "config.json").read_text())
    assert config["optimum_uag_head"] == "eagle" and config["draft_vocab_size"] == 256
    assert config["feature_layers"] == [2, 4, 5]  # EAGLE-3's layers of the 8-layer target; the final norm after them
    assert (head / "model.safetensors").is_file() and (head / "training_log.json").is_file()
    proc = run(["--assistant_model", str(head), "--uag_assistant_model", embedded_models()["assistant"],
                "--max_new_tokens", "12", "--output_dir", str(tmp_path / "out")], tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    res = json.loads((tmp_path / "out" / "results.json").read_text())
    assert set(res["rows"]) >= {"target_only", "optimum_uag", "optimum_uag_uag"}
    # transformers 5.25's own UAG assisted generation raises on this pair (an empty assistant prefill): said in a note
    failed = [n for n in res["notes"] if n.startswith("transformers' own assisted generation (a comparison row) failed")]
    assert ("transformers_assisted" in res["rows"]) != bool(failed), (res["rows"].keys(), failed)
    assert res["rows"]["optimum_uag"]["outputs_match_target"] and res["rows"]["optimum_uag_uag"]["outputs_match_target"]
    if not failed:
        assert "speedup_vs_transformers_assisted" in res["rows"]["optimum_uag_uag"]
        # every greedy row is compared with target-only, transformers' own included; every row has both ratios
        assert res["rows"]["transformers_assisted"]["outputs_match_target"] is True
    for row in res["rows"].values():
        assert row["speedup_vs_best_target_only"] > 0 and row["speedup_vs_transformers_generate"] > 0
    # no length given: ours adapts, transformers runs its own default policy (set where it reads it)
    notes = " ".join(res["notes"])
    assert "num_assistant_tokens=20" in notes and "assistant_confidence_threshold=0.4" in notes
    assert "rounds_without_draft_share" in res["rows"]["optimum_uag_uag"] and "mean_draft_length" in res
    assert "optimum-uag UAG" in proc.stdout and "adaptive draft length" in proc.stdout


CHAT_TEMPLATE = ("{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}</s>{% endfor %}"
                 "{% if add_generation_prompt %}<|assistant|>{% endif %}")


def test_train_draft_conversations_train_on_the_answers_only():
    """Conversations through the chat template as id lists on every transformers line (5.x returns a BatchEncoding
    from apply_chat_template(tokenize=True)); the loss mask covers the assistant turns and nothing else; the
    split key is the first user turn."""
    from optimum_uag import load_embedded
    from optimum_uag.cli.train_draft import token_sequences

    _, tok = load_embedded("target")
    tok.chat_template = CHAT_TEMPLATE
    records = [{"prompt": "Write a function that adds two numbers.", "answer": "def add(a, b):\n    return a + b"},
               {"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi there"},
                             {"role": "assistant", "content": "Hello, how can I help?"},
                             {"role": "user", "content": "Name a color."}, {"role": "assistant", "content": "Blue."}]},
               {"messages": [{"role": "user", "content": "no answer yet"}]}]
    seqs = token_sequences(records, tok, "text", 256)
    assert len(seqs) == 2  # the conversation without an assistant turn has nothing to learn from
    for seq in seqs:
        assert isinstance(seq["ids"], list) and all(isinstance(i, int) for i in seq["ids"])
        assert len(seq["loss_mask"]) == len(seq["ids"])
    trained = lambda seq: tok.decode([i for i, m in zip(seq["ids"], seq["loss_mask"]) if m])  # noqa: E731
    assert "def add(a, b)" in trained(seqs[0]) and "Write a function" not in trained(seqs[0])
    text = trained(seqs[1])
    assert "Hello, how can I help?" in text and "Blue." in text
    assert "Be brief" not in text and "Hi there" not in text and "Name a color" not in text
    assert seqs[0]["group"] == records[0]["prompt"] and seqs[1]["group"] == "Hi there"


def test_head_of_another_target_is_one_line(tmp_path):
    """A head trained for another target: one error line naming the fix, no traceback."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from optimum_uag.engine.drafters.feature_head import save_feature_head
    from optimum_uag.training.feature import head_config, init_head

    other = LlamaForCausalLM(LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                                         num_attention_heads=2))
    save_feature_head(init_head(other, head_config(other, None, "some-other-model"), None), tmp_path / "h",
                      dtype=torch.float32)
    proc = run(["--assistant_model", str(tmp_path / "h"), "--max_new_tokens", "4"], tmp_path)
    assert proc.returncode != 0 and "Traceback" not in proc.stderr, proc.stderr[-1500:]
    assert "trained for some-other-model" in proc.stderr


def test_docs_flag_tables_match_the_parsers():
    """docs/cli.md's flag tables are the parsers' own help (regenerate with optimum_uag.cli.flags.flag_table), and
    every train-draft flag is documented."""
    from optimum_uag.cli import flags, train_draft, tune

    doc = (REPO / "docs" / "cli.md").read_text(encoding="utf-8")

    def section_table(heading):
        start = doc.index(heading)
        t0 = doc.index("| flag | default | meaning |", start)
        return doc[t0 : doc.index("\n\n", t0)]

    assert section_table("## `optimum-uag generate`") == flags.flag_table(flags.build_parser())
    assert section_table("## `optimum-uag tune`") == flags.flag_table(tune.build_parser())
    train_doc = doc[doc.index("## `optimum-uag train-draft`") : doc.index("## `optimum-uag tune`")]
    for action in train_draft.build_parser()._actions:
        for option in action.option_strings:
            if option.startswith("--") and option != "--help":
                assert f"`{option}`" in train_doc, option


def test_divergence_counts_rows_and_tokens_after_the_first_difference():
    """results.json's rows_differing / token_mismatch_rate (what bf16 runs report): rows cut after their first EOS,
    since a static-shape loop keeps writing after it."""
    import torch

    from optimum_uag.cli.harness import count_divergence

    acc = dict(rows=0, rows_differing=0, tokens=0, tokens_after=0)
    prompt, eos = [7, 7], 0
    ours = torch.tensor([prompt + [1, 2, 3, 4], prompt + [1, eos, 9, 9], prompt + [5, 6, eos, 3]])
    ref = torch.tensor([prompt + [1, 2, 8, 8], prompt + [1, eos, 4, 4], prompt + [5, 6, 3, 3]])
    count_divergence(acc, ours, ref, len(prompt), [eos])
    # row 0 differs at its 3rd token (2 of 4 after); row 1 equal up to EOS; row 2: ours ends early (at index 2)
    assert acc == dict(rows=3, rows_differing=2, tokens=4 + 2 + 4, tokens_after=2 + 2)


def test_readme_and_docs_tables_come_from_the_results_files():
    """README.md / docs/benchmarks.md tables are what scripts/bench_tables.py generates from the committed results
    files (benchmarks/results/*.json, the head's training_log.json): a number cannot drift from its source."""
    proc = subprocess.run([sys.executable, str(REPO / "scripts" / "bench_tables.py"), "--check"], capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr


def test_readme_names_only_flags_and_commands_the_code_has():
    """Every `--flag` README.md names is a flag of generate, tune, train-draft, a benchmark script (or the deepspeed
    launcher's --num_gpus); every `optimum-uag X` is a command; every results.json key it names in backticks is written."""
    import re

    from optimum_uag.cli import USAGE, flags, train_draft, tune

    readme = (REPO / "README.md").read_text(encoding="utf-8")
    known = {"--num_gpus"}  # deepspeed's own
    for parser in (flags.build_parser(), tune.build_parser(), train_draft.build_parser()):
        known |= {o for action in parser._actions for o in action.option_strings}
    for script in [*(REPO / "benchmarks").glob("*.py"), *(REPO / "scripts").glob("*.py")]:  # their own flags
        known |= set(re.findall(r"add_argument\(\s*\"(--[a-z_][a-z_0-9]*)\"", script.read_text(encoding="utf-8")))
    assert set(re.findall(r"--[a-z_][a-z_0-9]*", readme)) - known == set()
    commands = set(re.findall(r"optimum-uag (\w[\w-]*)", USAGE))
    assert set(re.findall(r"optimum-uag ([a-z][a-z-]*)", readme)) <= commands
    report = (REPO / "optimum_uag" / "cli" / "report.py").read_text(encoding="utf-8")
    for key in re.findall(r"`(speedup_\w+|best_target_only\w*|tokens_per_s|draft_tree|tree_rounds_share)`", readme):
        assert f'"{key}"' in report, key


def test_tune_tries_tree_shapes_for_a_feature_head(tmp_path):
    """tune with a feature head: chains of the K grid and the tree shapes, each paired with the fastest target-only
    path, all exact; the verify cost curve is written; a tree recommendation is a command generate accepts."""
    from test_feature_drafter import make_head

    from optimum_uag import load_embedded
    from optimum_uag.cli import flags, tune
    from optimum_uag.engine.drafters.feature_head import save_feature_head

    model, _ = load_embedded("target")
    save_feature_head(make_head(model, 300), tmp_path / "head", dtype=torch.float32)
    report = tune.run_tune(["--assistant_model", str(tmp_path / "head"), "--num_assistant_tokens", "2",
                            "--schedules", "none", "--num_prompts", "1", "--max_new_tokens", "6",
                            "--output_dir", str(tmp_path / "t")])
    rows = report["results"]
    assert {tuple(r["tree"]) for r in rows if r["tree"]} == set(tune.TREE_GRID)
    assert any(r["num_assistant_tokens"] == 2 for r in rows)
    assert all(r["outputs_match_target"] for r in rows)
    assert set(report["verify_cost"]["relative"]) >= {1, 16}
    best_tree = next(r for r in rows if r["tree"])
    command = tune._command(argparse.Namespace(model_name_or_path=None), best_tree).split()[2:]
    args = flags.build_parser().parse_args(command)
    assert args.draft_tree == "on" and [args.tree_depth, args.tree_top_k, args.tree_nodes] == best_tree["tree"]


def test_upstream_command_line_values_parse_as_upstream(monkeypatch):
    """Issue 29, item 4: optimum-habana's own flag forms: `-d hpu`, `--flash_attention_fast_softmax False` (its
    SetTrueOrFalseOrNone: False, not the truthy string), the fast softmax on by default with --use_flash_attention,
    `--csp PATH` (declared upstream, read nowhere), and --device defaulting to hpu where the Gaudi software is
    installed (upstream's default device)."""
    from optimum_uag.cli import generate

    monkeypatch.setattr(generate, "check_args", lambda args, on_gaudi: None)  # (no Gaudi here to check against)
    args, on_gaudi = generate.parse(["-d", "hpu", "--use_flash_attention", "--flash_attention_fast_softmax", "False",
                                     "--csp", "/tmp/consts"])
    assert args.device == "hpu" and on_gaudi and args.flash_attention_fast_softmax is False and args.csp == "/tmp/consts"
    args, _ = generate.parse(["--use_flash_attention"])
    assert args.flash_attention_fast_softmax is True
    args, _ = generate.parse(["--use_flash_attention", "--flash_attention_fast_softmax"])
    assert args.flash_attention_fast_softmax is True
    args, _ = generate.parse([])
    assert args.flash_attention_fast_softmax is False
    with pytest.raises(SystemExit):
        generate.parse(["--flash_attention_fast_softmax", "maybe"])
    monkeypatch.setattr(generate, "_gaudi_installed", lambda: False)
    assert generate.parse([])[0].device == "auto"
    monkeypatch.setattr(generate, "_gaudi_installed", lambda: True)
    assert generate.parse([])[0].device == "hpu"
    assert generate.parse(["--emulate_hpu"])[0].device == "auto"


def test_models_are_bf16_under_deepspeed_on_gaudi_as_upstream():
    """Issue 29: upstream's initialize_model loads bf16 with --bf16 or under DeepSpeed; CPU ranks stay fp32."""
    from optimum_uag.cli.generate import model_dtype

    hpu, cpu = torch.device("hpu"), torch.device("cpu")
    assert model_dtype(False, 8, hpu) is torch.bfloat16 and model_dtype(False, 1, hpu) is torch.float32
    assert model_dtype(True, 1, hpu) is torch.bfloat16 and model_dtype(True, 1, cpu) is torch.bfloat16
    assert model_dtype(False, 2, cpu) is torch.float32


def test_a_failing_comparison_row_is_left_out_with_a_note_and_ours_are_not():
    """transformers 5.25's own UAG assisted generation raises inside the assistant's prefill (an empty block):
    the main job leaves that comparison row out with a note naming it; a failure of any other row still ends the run."""
    from optimum_uag.cli.harness import Method, run_side_by_side

    enc = {"input_ids": torch.tensor([[5, 6, 7]]), "attention_mask": torch.ones(1, 3, dtype=torch.long)}
    ok = Method(lambda e: torch.cat([e["input_ids"], torch.tensor([[8]])], 1))

    def broken(e):
        raise RuntimeError("cannot reshape tensor of 0 elements")

    notes = []
    rows = run_side_by_side({"target_only": ok, "transformers_assisted": Method(broken, optional="their row")},
                            [enc], 1, 2, 0, lambda: None, set(), notes=notes)
    assert set(rows) == {"target_only"} and rows["target_only"].tokens == 2
    assert len(notes) == 1 and notes[0].startswith("their row failed on this run (RuntimeError: cannot reshape")
    with pytest.raises(RuntimeError, match="cannot reshape"):
        run_side_by_side({"target_only": ok, "optimum_uag": Method(broken)}, [enc], 1, 2, 0, lambda: None, set())
