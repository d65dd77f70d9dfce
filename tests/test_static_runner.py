"""The static runner on an eager CPU attends over the live prefix of its cache (the slots up to the block's end,
rounded up to LIVE_BUCKET), not its whole capacity: same logits as the whole width, chains and trees, batches with
left padding; a model that refuses the shorter keys falls back to the whole width once, exactly."""
import torch

from optimum_uag.engine.tree import Tree, ancestor_matrix
from optimum_uag.registry import model_state
from optimum_uag.runners.registry import make_runner
from optimum_uag.runners.static import LIVE_BUCKET, StaticCacheRunner

from test_engine import batch

CAPACITY = 4 * LIVE_BUCKET + 9


def _blocks(runner, ids):
    """Logits of the prompt, a 6-token chain block and a 4-node tree block after it (row b's own slots)."""
    gen = torch.Generator().manual_seed(0)
    out = [runner.forward(ids, torch.zeros(ids.shape[0], dtype=torch.long), logits_to_keep=ids.shape[1])]
    start = torch.full((ids.shape[0],), ids.shape[1])
    out.append(runner.forward(torch.randint(0, 500, (ids.shape[0], 6), generator=gen), start, logits_to_keep=6))
    parents = torch.tensor([[0, 0, 1, 3]]).expand(ids.shape[0], -1)
    depths = torch.tensor([[1, 1, 2, 3]]).expand(ids.shape[0], -1)
    tree = Tree(parents=parents, depths=depths, ancestors=ancestor_matrix(parents, 3), max_depth=3)
    out.append(runner.forward(torch.randint(0, 500, (ids.shape[0], 5), generator=gen), start + 6, logits_to_keep=5,
                              tree=tree))
    return out


def test_attention_reads_the_live_prefix_and_matches_the_whole_width(embedded, prompts):
    model, tok = embedded["target"]
    ids, mask = batch(tok, [prompts[1][:80], prompts[2][:40]])
    pad = (mask == 0).sum(1)
    live = make_runner(model, 2, CAPACITY, pad)
    assert isinstance(live, StaticCacheRunner) and live.live_prefix
    whole = make_runner(model, 2, CAPACITY, pad)
    whole.live_prefix = False
    got, want = _blocks(live, ids), _blocks(whole, ids)
    assert live.cache.live is not None and live.cache.live < CAPACITY and live.cache.live % LIVE_BUCKET == 0
    assert whole.cache.live is None
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-4)


def test_a_model_that_refuses_shorter_keys_gets_the_whole_width(embedded, prompts, monkeypatch):
    """A model that sizes its attention by the cache's capacity (here: it raises on a narrower mask, as a shape
    mismatch inside attention would) is retried at the whole width, and stays there."""
    model, tok = embedded["target"]
    ids, mask = batch(tok, [prompts[3][:60]])
    pad = (mask == 0).sum(1)
    whole = make_runner(model, 1, CAPACITY, pad)
    whole.live_prefix = False
    want = _blocks(whole, ids)
    forward = type(model).forward

    def capacity_only(self, *args, **kwargs):
        if kwargs["attention_mask"].shape[-1] != CAPACITY:
            raise RuntimeError("The size of tensor a must match the size of tensor b")
        return forward(self, *args, **kwargs)

    monkeypatch.setattr(type(model), "forward", capacity_only)
    monkeypatch.setitem(model_state(model), "live_prefix", True)  # (the shared model gets its state back after)
    runner = StaticCacheRunner(model, 1, CAPACITY, pad)
    got = _blocks(runner, ids)
    assert not runner.live_prefix and runner.cache.live is None
    assert not StaticCacheRunner(model, 1, CAPACITY, pad).live_prefix  # remembered for the model: no second failure
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-4)


def test_a_local_band_sliced_by_key_length_is_not_run_on_the_live_prefix():
    """GPT-Neo's local layers cut their band out of a buffer by key length: over the live prefix the band is right
    in the runner's probe and wrong past the window (a query loses its oldest window keys), so the probe compares
    the live prefix with the whole width and the static runner is refused; decoding past the window stays exact."""
    from transformers import GPTNeoConfig, GPTNeoForCausalLM

    from optimum_uag import assisted_generate
    from optimum_uag.runners.registry import select_runner

    torch.manual_seed(0)
    config = GPTNeoConfig(vocab_size=96, hidden_size=32, num_layers=2, num_heads=4, max_position_embeddings=256,
                          attention_types=[[["global", "local"], 1]], window_size=40, pad_token_id=0, eos_token_id=None)
    model = GPTNeoForCausalLM(config).eval()
    assert select_runner(model) != "static"
    ids = torch.randint(1, 96, (1, 60), generator=torch.Generator().manual_seed(1))
    ref = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=24, do_sample=False, pad_token_id=0,
                         output_logits=True, return_dict_in_generate=True)
    out = assisted_generate(model, None, ids, torch.ones_like(ids), max_new_tokens=24, prompt_lookup_num_tokens=4,
                            output_logits=True)
    assert torch.equal(out.sequences, ref.sequences)
    torch.testing.assert_close(torch.stack(out.logits), torch.stack(ref.logits), rtol=1e-4, atol=1e-4)


def _gqa_model():
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=500, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512)
    config._attn_implementation = "sdpa"
    return LlamaForCausalLM(config).eval()


def test_grouped_query_heads_reach_the_kernel_without_key_value_copies_with_the_same_logits(monkeypatch):
    """On an eager CPU the static runner lets torch's SDPA kernel map grouped-query heads (`masked_gqa`): no
    `repeat_kv` copy of any layer's keys / values for a masked block, and the logits of the prompt, a chain block
    and a tree block are the same bit for bit as with the copies; transformers' own hook is back after each forward."""
    import contextlib

    from transformers.integrations import sdpa_attention

    model = _gqa_model()
    original = sdpa_attention.use_gqa_in_sdpa
    copies = []
    repeat_kv = sdpa_attention.repeat_kv
    monkeypatch.setattr(sdpa_attention, "repeat_kv", lambda x, n: copies.append(n) or repeat_kv(x, n))
    ids = torch.randint(3, 500, (2, 40), generator=torch.Generator().manual_seed(1))
    pad = torch.tensor([0, 5])
    kernel = make_runner(model, 2, CAPACITY, pad)
    got = _blocks(kernel, ids)
    assert copies == [] and sdpa_attention.use_gqa_in_sdpa is original
    copying = make_runner(model, 2, CAPACITY, pad)
    copying.gqa = contextlib.nullcontext()
    want = _blocks(copying, ids)
    assert copies  # (transformers copies them for a masked block: what the runner avoids)
    for a, b in zip(got, want):
        assert torch.equal(a, b), (a - b).abs().max()


def test_half_precision_one_token_steps_equal_transformers_own_generate_bit_for_bit(embedded, prompts):
    """In bf16 / fp16 the CPU attention kernel rounds by the keys' width: the runner attends over exactly the slots
    so far (HALF_LIVE_BUCKET), as transformers' incremental generate() does, so its prefill and one-token steps give
    the same logits bit for bit (with the fp32 bucket of 32 they were ~2-5 bf16 ulps apart on SmolLM2)."""
    import copy

    from optimum_uag.runners.static import HALF_LIVE_BUCKET

    assert HALF_LIVE_BUCKET == 1
    model, tok = embedded["target"]
    ids, _ = batch(tok, [prompts[1][:70]])
    n = ids.shape[1]
    for dtype in (torch.bfloat16, torch.float16):
        half = copy.deepcopy(model).to(dtype)
        ref = half.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False, max_new_tokens=6,
                            min_new_tokens=6, output_logits=True, return_dict_in_generate=True,
                            pad_token_id=tok.pad_token_id)
        runner = make_runner(half, 1, CAPACITY, torch.zeros(1, dtype=torch.long))
        steps = [runner.forward(ids, torch.zeros(1, dtype=torch.long), logits_to_keep=1)[0, -1]]
        for i in range(5):
            steps.append(runner.forward(ref.sequences[:, n + i : n + i + 1], torch.tensor([n + i]),
                                        logits_to_keep=1)[0, -1])
        for got, want in zip(steps, ref.logits):
            assert torch.equal(got, want[0].float()), dtype
        assert runner.cache.live == n + 5  # (the block's end, not rounded up)
