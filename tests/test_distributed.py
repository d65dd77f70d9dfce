"""Two CPU processes (DeepSpeed AutoTP over gloo): a sharded target with a replicated draft equals one process."""
import glob
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PROMPTS = ["--prompt", "def add(a, b):", "--prompt", "import os\nimport sys\n"]


def _run(command, tmp_path, out):
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run([*command, "--max_new_tokens", "12", "--batch_size", "2", "--warmup", "0", *PROMPTS,
                           "--output_dir", str(out)], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=900)
    assert proc.returncode == 0, (proc.stdout[-1500:], proc.stderr[-3000:])
    return json.loads((out / "results.json").read_text())


@pytest.mark.slow
@pytest.mark.parametrize("draft,launcher", [("assistant", "deepspeed"), ("assistant_same_tokenizer", "gaudi_spawn")])
def test_two_processes_equal_one(tmp_path, draft, launcher):
    from optimum_uag import embedded_models

    before = set(glob.glob("/dev/shm/deepspeed_allreduce_buffer_*"))
    script = [str(REPO / "examples" / "run_generation.py"), "--assistant_model", embedded_models()[draft]]
    single = _run([sys.executable, *script], tmp_path, tmp_path / "one")
    if launcher == "deepspeed":
        launch = [sys.executable, "-m", "deepspeed.launcher.runner", "--num_gpus", "2", "--master_port", "29511"]
    else:
        launch = [sys.executable, str(REPO / "examples" / "gaudi_spawn.py"), "--use_deepspeed", "--world_size", "2",
                  "--master_port", "29512"]
    multi = _run([*launch, *script], tmp_path, tmp_path / "two")
    assert multi["world_size"] == 2 and single["world_size"] == 1
    assert multi["ranks_agree"] is True
    # the Llama target was built on the meta device and each rank loaded its own shard (optimum-habana's way)
    assert multi["target_loaded_on_meta"] is True
    assert multi["output_ids"] == single["output_ids"]
    assert multi["outputs_match_target"] is True
    assert set(glob.glob("/dev/shm/deepspeed_allreduce_buffer_*")) <= before  # nothing left behind


@pytest.mark.slow
def test_two_processes_sampling_is_identical_on_every_rank(tmp_path):
    launch = [sys.executable, "-m", "deepspeed.launcher.runner", "--num_gpus", "2", "--master_port", "29513"]
    res = _run([*launch, str(REPO / "examples" / "run_generation.py"), "--do_sample", "--temperature", "0.8"],
               tmp_path, tmp_path / "s")
    assert res["ranks_agree"] is True and res["generated_tokens"] > 0


def test_shard_assistant_needs_a_launch(tmp_path):
    proc = subprocess.run([sys.executable, str(REPO / "examples" / "run_generation.py"), "--shard_assistant",
                           "--max_new_tokens", "2"], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2 and "deepspeed --num_gpus" in proc.stderr


@pytest.mark.slow
def test_every_rank_follows_rank_zeros_stopping_decision(tmp_path):
    """Issue 22, finding 11: a stopping criterion that fires on one rank only (max_time, a per-rank criterion)
    must not split the ranks: both take rank 0's decision and return the same tokens, the full 12. Likewise the
    adaptive draft length, chosen from per-rank timings (a CI run hung on it)."""
    launch = [sys.executable, "-m", "deepspeed.launcher.runner", "--num_gpus", "2", "--master_port", "29514",
              str(REPO / "tests" / "dist_stop_worker.py"), str(tmp_path)]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(launch, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, (proc.stdout[-1500:], proc.stderr[-3000:])
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]
    assert ranks[0]["ids"] == ranks[1]["ids"]
    assert len(ranks[0]["ids"]) - ranks[0]["prompt_len"] == 12  # rank 0 never stopped early: nor did rank 1
    # the adaptive draft length is rank 0's on every rank (rank 1's own policy would never draft)
    assert ranks[0]["adaptive_ids"] == ranks[1]["adaptive_ids"]
    assert len(ranks[0]["adaptive_ids"]) - ranks[0]["prompt_len"] == 12
    assert ranks[0]["rounds_without_draft"] == ranks[1]["rounds_without_draft"] == 0


@pytest.mark.slow
@pytest.mark.parametrize("draft", ["assistant_same_tokenizer", "assistant"])
def test_launcher_runs_upstreams_script_on_two_ranks_with_an_assistant(tmp_path, draft):
    """Issue 29: optimum-habana's run_generation.py call sequence under DeepSpeed (its setup_distributed_model: the
    Llama target built on the meta device, AutoTP with upstream's injection policy, ScopedLinearAllReduce, the
    assistant left where it was loaded) through `optimum_uag.gaudi.launch` on 2 ranks under the HPU emulator: every
    rank routes to the engine and decodes what optimum-habana's own generate() decodes on the same sharded model;
    "assistant" has another tokenizer (UAG: the launcher gives generate() both from the two paths)."""
    from optimum_uag import embedded_models

    paths = embedded_models()
    out = tmp_path / "report.json"
    # DeepSpeed would take the emulated habana_frameworks for a real HPU; the emulated machine is a CPU (gloo)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "DS_ACCELERATOR": "cpu"}
    launch = [sys.executable, "-m", "deepspeed.launcher.runner", "--num_gpus", "2", "--master_port", "29515"]
    script = [str(REPO / "tests" / "emulated_launch.py"), str(REPO / "tests" / "upstream_calls.py")]
    proc = subprocess.run([*launch, *script,
                           "--model_name_or_path", str(paths["target"]), "--assistant_model", str(paths[draft]),
                           "--batch_size", "2", "--use_hpu_graphs", "--reuse_cache", "--output", str(out)],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, (proc.stdout[-1500:], proc.stderr[-3000:])
    reports = [json.loads((tmp_path / f"report.json.{rank}").read_text()) for rank in (0, 1)]
    for rank, report in enumerate(reports):
        assert report["world_size"] == 2 and report["rank"] == rank
        assert report["target_on_meta"] is True
        sharded = report["sharded"]  # each rank holds half the query heads; o_proj and down_proj all-reduce
        assert sharded["q_rows"] * 2 == sharded["q_rows_whole"], sharded
        assert sharded["scoped_all_reduce"] == 2 * sharded["layers"], sharded
        assert report["routed"] and report["target_calls"] < 24
        assert report["sequences"] == report["reference"] and len(report["sequences"]) == 2
        assert report["captures"]["GraphStep"] > 0
    assert reports[0]["sequences"] == reports[1]["sequences"]
