"""The adaptive draft length (engine/policy.py): its choices on simulated costs (a draft that pays, one that does
not, one that starts paying mid-call), and exactness of every drafter when rounds without a draft come between
drafting rounds in any order (greedy == target-only generate(), sampling with the target's distribution)."""
import itertools

import pytest
import torch

from optimum_uag import assisted_generate
from optimum_uag.engine.policy import PROBE_GAPS, AdaptivePolicy

from test_engine import _chi2, _joint_first_two, _sharp_llama, batch, reference
from test_feature_drafter import make_head


def _simulate(policy, rounds, t0, cost, alpha, rng, batch_size=1):
    """Run `policy` for `rounds` rounds where a round with K drafted tokens takes cost(K) seconds and each draft
    position is accepted with probability alpha(round) (a tree: alpha is its tokens per round); returns the Ks."""
    ks = []
    for r in range(rounds):
        k = policy.next()
        ks.append(k)
        if policy.tree:
            tokens = 1 if k == 0 else alpha(r)
            policy.observe(k, t0 if k == 0 else cost(k), tokens * batch_size, batch_size, None)
            continue
        hist = [0] * (k + 1)
        for _ in range(batch_size):
            a = 0
            while a < k and rng.random() < alpha(r):
                a += 1
            hist[a] += 1
        tokens = sum((a + 1) * n for a, n in enumerate(hist))
        policy.observe(k, cost(k), tokens, batch_size, hist if k else None)
    return ks


def test_a_cheap_accurate_draft_drafts_long_chains():
    import random

    policy = AdaptivePolicy(start_k=3)
    ks = _simulate(policy, 200, 1.0, lambda k: 1.0 + 0.05 * k, lambda r: 0.85, random.Random(0))
    later = ks[20:]
    assert sum(k == 0 for k in later) / len(later) < 0.05  # only the rounds that re-measure t0
    assert sum(later) / len(later) >= 4


def test_a_draft_that_costs_more_than_it_earns_is_switched_off_with_rare_probes():
    """An expensive draft (each drafted token costs a target step, half of them accepted): the policy stops
    drafting; probes of two rounds come after 4, 8, 16, 32 rounds without a draft, with the cheapest chain."""
    import random

    policy = AdaptivePolicy(start_k=5)
    ks = _simulate(policy, 200, 1.0, lambda k: 1.0 + 1.0 * k, lambda r: 0.5, random.Random(1))
    later = ks[10:]
    assert sum(k == 0 for k in later) / len(later) > 0.9
    probes = [i for i, k in enumerate(ks) if k > 0 and i > 10]
    assert all(ks[i] == 1 for i in probes)
    starts = [i for i in probes if ks[i - 1] == 0]  # a probe is two drafting rounds in a row
    assert all(ks[i + 1] == 1 for i in starts)
    gaps = [b - a - 2 for a, b in itertools.pairwise(starts)]
    assert gaps[-1] == PROBE_GAPS[-1] and gaps == sorted(gaps)


def test_a_draft_that_could_not_pay_even_if_always_right_stops_after_one_timed_round():
    """Issue 31 (a draft as costly as the target, 0.94x): when the measured cost alone rules drafting out (each
    drafted token costs 1.2 target rounds: K + 1 tokens in more than K + 1 rounds, whatever is accepted), the policy
    stops after the warm-up and the first timed drafting round, not after MIN_ROUNDS, and probes every 32 rounds."""
    import random

    policy = AdaptivePolicy(start_k=3)
    ks = _simulate(policy, 120, 1.0, lambda k: 1.0 + 1.2 * k, lambda r: 0.9, random.Random(3))
    drafting = [i for i, k in enumerate(ks) if k > 0]
    assert drafting[:2] == [2, 3] and 4 not in drafting  # (two plain rounds: t0) warm-up, one timed, then none
    starts = [i for i in drafting[2:] if ks[i - 1] == 0]
    assert [b - a - 2 for a, b in itertools.pairwise(starts)] == [PROBE_GAPS[-1]] * (len(starts) - 1)
    assert len(drafting) <= 2 + 2 * 4


def test_drafting_resumes_when_it_starts_to_pay():
    """A passage the draft knows (acceptance 0.05 -> 0.95 at round 60): drafting comes back at the next probe."""
    import random

    policy = AdaptivePolicy(start_k=3)
    ks = _simulate(policy, 160, 1.0, lambda k: 1.0 + 0.1 * k, lambda r: 0.05 if r < 60 else 0.95, random.Random(2))
    assert sum(k == 0 for k in ks[20:60]) >= 35
    assert sum(k > 0 for k in ks[100:]) >= 55


def test_tree_or_no_draft():
    """A tree is one option against no draft: kept while its tokens per second beat one token per t0."""
    good = AdaptivePolicy(start_k=3, tree=True)
    ks = _simulate(good, 100, 1.0, lambda k: 1.4, lambda r: 2.5, None)
    assert sum(k == 0 for k in ks[10:]) <= 4
    bad = AdaptivePolicy(start_k=3, tree=True)  # 0.86x: given up once its rounds outweigh the prior (~24 rounds)
    ks = _simulate(bad, 100, 1.0, lambda k: 1.4, lambda r: 1.2, None)
    assert sum(k > 0 for k in ks) <= 36 and sum(k > 0 for k in ks[40:]) <= 8  # then probes only: 4 of 2 rounds


def test_a_tree_with_an_unlucky_start_stays_on(monkeypatch):
    """A tree that pays 1.2x (2 tokens a round for 1.65 t0) whose first five rounds gave 1, 2, 1, 1, 1 tokens (a poem's
    opening on SmolLM2 + its head, Intel Xeon: 1.65 t0 a tree round there): the prior on the tree's rate
    (TREE_PRIOR_ROUNDS at TREE_PRIOR_RATE) keeps it drafting; without the prior it stays off for most of the call, its
    probes (2 tokens a round) lifting the estimate too slowly."""
    import optimum_uag.engine.policy as policy_module

    start = [1, 2, 1, 1, 1]

    def run():
        policy, ks, drafted = AdaptivePolicy(start_k=3, tree=True), [], 0
        for _ in range(60):
            k = policy.next()
            ks.append(k)
            tokens = 1
            if k > 0:
                tokens = start[drafted] if drafted < len(start) else 2
                drafted += 1
            policy.observe(k, 1.0 if k == 0 else 1.65, tokens, 1, None)
        return ks

    assert sum(k == 0 for k in run()[2:]) <= 2  # the first two rounds measure t0
    monkeypatch.setattr(policy_module, "TREE_PRIOR_ROUNDS", 0.0)
    assert sum(k == 0 for k in run()[2:]) >= 30


def test_a_probes_first_round_carries_the_catch_up_and_is_not_timed():
    """The first drafting round after rounds without a draft also runs the draft over the tokens those rounds
    committed (its catch-up): its seconds and tokens stay out of the tree's rate; one plain round (a refresh of t0)
    leaves the next drafting round timed."""
    policy = AdaptivePolicy(start_k=3, tree=True)
    for k, seconds, tokens in [(0, 1.0, 1), (0, 1.0, 1), (0, 1.0, 1), (3, 2.0, 2), (3, 2.0, 2), (3, 2.0, 2)]:
        policy.observe(k, seconds, tokens, 1, None)
    rate = policy.tree_rate
    for _ in range(8):
        policy.observe(0, 1.0, 1, 1, None)
    policy.observe(3, 9.0, 2, 1, None)  # the probe's first round: 8 tokens of catch-up
    assert policy.tree_rate == rate
    policy.observe(3, 2.0, 3, 1, None)  # the probe's second round is timed
    assert policy.tree_rate > rate
    policy.observe(0, 1.0, 1, 1, None)
    policy.observe(3, 4.0, 2, 1, None)  # after a single plain round: timed
    assert policy.tree_rate < rate


def test_a_tree_that_pays_stays_on_although_its_tokens_per_round_vary():
    """A tree worth 1.17x (2.05 t0 a round, 1-5 tokens a round, 2.4 on average; 10% time noise): drafted in most
    rounds. Over a 10-round window the rate estimate swung enough to switch it off in a third of the rounds."""
    import random
    import statistics

    shares = []
    for seed in range(12):
        rng, policy, ks = random.Random(seed), AdaptivePolicy(start_k=3, tree=True), []
        for _ in range(300):
            k = policy.next()
            ks.append(k)
            tokens = 1 if k == 0 else rng.choices([1, 2, 3, 4, 5], [0.4, 0.2, 0.15, 0.1, 0.15])[0]
            policy.observe(k, (1.0 if k == 0 else 2.05) * rng.lognormvariate(0, 0.1), tokens, 1, None)
        shares.append(sum(k > 0 for k in ks) / len(ks))
    assert statistics.mean(shares) > 0.78, shares


def test_batches_weigh_every_active_row():
    import random

    policy = AdaptivePolicy(start_k=3)
    ks = _simulate(policy, 120, 1.0, lambda k: 1.0 + 0.3 * k, lambda r: 0.2, random.Random(3), batch_size=4)
    assert sum(k == 0 for k in ks[10:]) / len(ks[10:]) > 0.85


def test_a_rounds_fixed_cost_is_not_priced_per_drafted_token():
    """A drafting round costing a fixed 0.2 t0 (the draft's catch-up, the verify's start) plus 0.1 t0 per drafted
    token: priced per token alone (the line through the origin) a K=1 round reads 0.3 a token and the best chain looks
    short; the fitted line (AdaptivePolicy.cost_line) recovers c and s and prices K=3 right. Where the rounds' K has
    not varied, there is no line (the estimate through the mean, as before)."""
    policy = AdaptivePolicy(start_k=3)
    policy.t0 = 1.0
    for k in [1, 2, 3, 1, 2, 3, 2, 1, 3, 2]:
        policy.observe(k, 1.0 + 0.2 + 0.1 * k, k + 1, 1, [0] * k + [1])  # every drafted token accepted
    c, s = policy.cost_line()
    assert abs(c - 0.2) < 1e-6 and abs(s - 0.1) < 1e-6
    c3, s3 = policy._line()
    assert abs(c3 + 3 * s3 - 0.5) < 1e-6 and abs(s3 - 0.1) < 1e-6
    best, rate = policy.best_k()
    assert best == policy.max_k and abs(rate - policy.expected_tokens(best) / (1.2 + 0.1 * best)) < 1e-9
    flat = AdaptivePolicy(start_k=3)
    flat.t0 = 1.0
    for _ in range(10):
        flat.observe(2, 1.4, 3, 1, [0, 0, 1])
    assert flat.cost_line() is None and flat._line() == (0.0, flat.s) and abs(flat.s - 0.2) < 1e-9


def test_the_cost_line_gives_up_on_noise_that_reads_a_negative_fixed_part():
    """Rounds whose time falls with K (noise, or a slow spell on the short ones) fit no line: the estimate through
    the mean instead, never a negative slope or fixed part."""
    policy = AdaptivePolicy(start_k=3)
    policy.t0 = 1.0
    for k in [1, 3, 1, 3, 1, 3, 1, 3]:
        policy.observe(k, 1.6 if k == 1 else 1.3, 2, 1, [1, 0] if k == 1 else [1, 0, 0, 0])
    assert policy.cost_line() is None and policy._line()[0] == 0.0 and policy._line()[1] > 0


def test_a_refreshed_t0_reprices_every_drafting_round_at_once():
    """This CPU slows by 25% while drafting (K=1 rounds 1.25 t0, half accepted: 1.2x): the round without a draft
    that follows re-measures t0 and drafting resumes at once. A drafting round's cost taken against the t0 of its
    time read the slowdown as a costlier draft and kept drafting off for rounds."""
    import random

    rng, policy, ks = random.Random(4), AdaptivePolicy(start_k=1, max_k=1), []
    for r in range(160):
        k = policy.next()
        ks.append(k)
        slow = 1.0 if r < 80 else 1.25
        accepted = int(rng.random() < 0.5) if k else 0
        policy.observe(k, (1.25 if k else 1.0) * slow, 1 + accepted, 1, [1 - accepted, accepted] if k else None)
    assert sum(k == 0 for k in ks[80:]) <= 3, ks[80:]


def _gated_rate(gate: bool, seed: int, batch: int = 4, rounds: int = 300) -> float:
    """Tokens per no-draft round's time of the adaptive chain at `batch`, on a calibrated draft: each row's draft
    probability per step is drawn from [0.05, 1) and the verify accepts the token with that probability. A round
    costs 1.1 + 0.05 per draft step + 0.1 per verified position (one wide verify for every row)."""
    import random

    rng, policy, tokens, time = random.Random(seed), AdaptivePolicy(start_k=3), 0.0, 0.0
    for _ in range(rounds):
        k = policy.next()
        cut = policy.gate() if gate else None
        probs = [[rng.choice([0.05, 0.3, 0.6, 0.9, 0.99]) for _ in range(k)] for _ in range(batch)]
        used, steps, cumulative = 0, 0, [1.0] * batch
        for j in range(k):
            steps += 1
            cumulative = [c * p[j] for c, p in zip(cumulative, probs)]
            if j > 0 and cut is not None and sum(cumulative) / batch < cut:
                break
            used = j + 1
        accepted = []
        for p in probs:
            a = 0
            while a < used and rng.random() < p[a]:
                a += 1
            accepted.append(a)
        seconds = 1.0 if used == 0 else 1.1 + 0.05 * steps + 0.1 * used
        tokens += sum(a + 1 for a in accepted) / batch
        time += seconds
        policy.observe(used, seconds * rng.lognormvariate(0, 0.05), sum(a + 1 for a in accepted), batch,
                       [accepted.count(a) for a in range(used + 1)] if used else None)
    return tokens / time


def test_a_fitted_cost_line_beats_pricing_a_rounds_fixed_part_per_token(monkeypatch):
    """At batch 4 one verify serves every row, and a round costs a fixed part beside its drafted tokens (simulated:
    1.1 + 0.05 per draft step + 0.1 per verified position; each row's draft probability is its acceptance). Priced
    per drafted token alone the policy keeps chains too short; the fitted line (COST_LINE, shipped with the gate up to
    the best fixed length) is faster on the same rounds (simulated: 1.34 against 1.30 tokens per no-draft round's
    time), and its gate never loses against the same policy without it."""
    import statistics

    from optimum_uag.engine import policy

    assert policy.COST_LINE and policy.GATE_REACH == 0
    line = statistics.mean(_gated_rate(True, s) for s in range(8))
    line_no_gate = statistics.mean(_gated_rate(False, s) for s in range(8))
    monkeypatch.setattr(policy, "COST_LINE", False)
    origin = statistics.mean(_gated_rate(True, s) for s in range(8))
    assert line > 1.02 * origin, (line, origin)
    assert line >= line_no_gate, (line, line_no_gate)


def test_draft_loop_keeps_a_token_while_the_rows_mean_cumulative_probability_reaches_the_gate():
    from optimum_uag.engine.drafters.base import draft_loop

    class Runner:  # the next logits: row 0 sure of token 1 (p ~ 1), row 1 unsure (p ~ 0.34 over 3 tokens)
        calls = 0

        def forward(self, token, positions, logits_to_keep=1):
            Runner.calls += 1
            return _logits()[:, None]

    def _logits():
        return torch.tensor([[30.0, 40.0, 0.0], [1.0, 1.0, 1.0 + 1e-3]])

    from optimum_uag.engine.sampling import TokenSampler

    pick = TokenSampler(None, need_confidence=True)  # greedy, with each token's draft probability
    done = torch.tensor([False, False])
    def run(gate, done=done):
        return draft_loop(Runner(), _logits(), 4, pick, torch.tensor([5, 5]), None, done, gate)[0]
    assert run(None).shape[1] == 4
    # cumulative means: (1 + 1/3) / 2 = 0.67, (1 + 1/9) / 2 = 0.56, (1 + 1/27) / 2 = 0.52
    assert run(0.6).shape[1] == 1 and run(0.55).shape[1] == 2 and run(0.5).shape[1] == 4
    assert run(0.99).shape[1] == 1  # the first token is always drafted (the policy chose to draft)
    assert run(0.99, torch.tensor([False, True])).shape[1] == 4  # an ended row does not count
    # the step whose token the gate would likely cut is not run: the next token's chance is read from the last one's
    Runner.calls = 0
    assert run(0.6).shape[1] == 1 and Runner.calls == 0
    assert run(0.55).shape[1] == 2 and Runner.calls == 1


# ------------------------------------------------------------------------- exactness under any choice
PATTERN = [0, 0, 3, 0, 5, 1, 0, 0, 0, 2, 8, 0, 4] + [0] * 24 + [2]
GATES = [None, 0.3, 0.99, 0.6, None, 0.0]


@pytest.fixture
def forced(monkeypatch):
    """Every assisted call's adaptive policy follows PATTERN (cycled): rounds without a draft between drafting rounds
    of every length, including several in a row (the drafters' catch-up over more tokens than one round makes)."""
    def choose(self):
        self.forced = getattr(self, "forced", 0) + 1
        return PATTERN[(self.forced - 1) % len(PATTERN)]

    def gate(self):  # and every kind of gate on the chains: none, one that cuts after the first token, in between
        return GATES[getattr(self, "forced", 0) % len(GATES)]

    monkeypatch.setattr(AdaptivePolicy, "_choose", choose)
    monkeypatch.setattr(AdaptivePolicy, "gate", gate)


@pytest.mark.parametrize("draft", ["model", "uag", "head_chain", "head_tree", "lookup", "head_chain_lookup"])
def test_greedy_is_exact_whatever_the_policy_chooses(forced, embedded, prompts, draft):
    target, tok = embedded["target"]
    kwargs = dict(draft_policy="adaptive")
    if draft == "model":
        assistant = embedded["assistant_same_tokenizer"][0]
    elif draft == "uag":
        assistant, assistant_tok = embedded["assistant"]
        kwargs.update(tokenizer=tok, assistant_tokenizer=assistant_tok)
    elif draft == "lookup":
        assistant = None
        kwargs.update(prompt_lookup_num_tokens=4)
    else:
        assistant = make_head(target, 300)
        # a lookup longer than the policy's longest chain (its acceptance counted up to the chosen length)
        kwargs.update(draft_tree=draft == "head_tree", prompt_lookup_num_tokens=10 if "lookup" in draft else 0)
    ids, mask = batch(tok, [prompts[2], prompts[3][:40], prompts[6], prompts[5][:90]])
    ref = reference(target, ids, mask, 40, tok)
    out = assisted_generate(target, assistant, ids, mask, max_new_tokens=40, **kwargs)
    assert torch.equal(out.sequences, ref)
    m = out.metrics
    assert m.adaptive_rounds > 0 and 0 < m.rounds_without_draft < m.adaptive_rounds
    assert (m.tree_rounds > 0) == (draft == "head_tree")


@pytest.mark.parametrize("draft", ["model", "head"])
def test_a_row_that_ended_early_survives_a_long_run_without_a_draft(forced, embedded, prompts, draft):
    """Short prompts, one row ends at its first token (its EOS), then 24 rounds in a row without a draft: the
    catch-up block reaches back further than that row's length (it is clamped; the row's draft is unused)."""
    target, tok = embedded["target"]
    assistant = embedded["assistant_same_tokenizer"][0] if draft == "model" else make_head(target, 300)
    ids, mask = batch(tok, [prompts[0][:12], prompts[1][:30]])
    first = int(reference(target, ids[:1], mask[:1], 1, tok)[0, -1])
    ref = target.generate(ids, attention_mask=mask, do_sample=False, max_new_tokens=48, pad_token_id=tok.pad_token_id,
                          eos_token_id=first)
    out = assisted_generate(target, assistant, ids, mask, max_new_tokens=48, draft_policy="adaptive",
                            eos_token_id=first, pad_token_id=tok.pad_token_id)
    assert torch.equal(out.sequences, ref)
    assert out.metrics.rounds_without_draft >= 24


def test_sampling_keeps_the_target_distribution_across_rounds_without_a_draft(forced):
    """The prefill round drafts, the next has no draft (the draft's cache then catches up): the first two tokens
    follow the target's own distribution (chi-square)."""
    from optimum_uag.engine.sampling import LogitsWarper

    from helpers import tiny_llama

    vocab, n = 8, 6000
    target, draft = tiny_llama(vocab, 0, layers=2, hidden=16), _sharp_llama(vocab, 1, 3.0)  # (a cheaper draft)
    with torch.no_grad():
        target.lm_head.weight.mul_(4.0)
    prompt = torch.tensor([[1, 2, 3]])
    expected = _joint_first_two(target, prompt, LogitsWarper())
    torch.manual_seed(99)
    out = assisted_generate(target, draft, prompt.repeat(n, 1), max_new_tokens=4, do_sample=True, top_k=0,
                            num_assistant_tokens=1, draft_policy="adaptive", eos_token_id=None)
    samples = (out.sequences[:, 3] * vocab + out.sequences[:, 4]).numpy()
    assert _chi2(samples, expected, n) > 0.01
    assert out.metrics.rounds_without_draft > 0 and out.metrics.accepted_tokens > 0


def test_the_default_is_adaptive_and_a_fixed_length_is_kept(embedded, prompts):
    target, tok = embedded["target"]
    draft = embedded["assistant_same_tokenizer"][0]
    ids, mask = batch(tok, prompts[:1])
    auto = assisted_generate(target, draft, ids, mask, max_new_tokens=24)
    assert auto.metrics.adaptive_rounds > 0
    for kwargs in (dict(num_assistant_tokens=4), dict(draft_policy="fixed"),
                   dict(num_assistant_tokens_schedule="heuristic")):
        fixed = assisted_generate(target, draft, ids, mask, max_new_tokens=24, **kwargs)
        assert fixed.metrics.adaptive_rounds == 0 and fixed.metrics.rounds_without_draft == 0
        assert torch.equal(fixed.sequences, auto.sequences)
    with pytest.raises(ValueError, match="draft_policy must be one of"):
        assisted_generate(target, draft, ids, mask, max_new_tokens=4, draft_policy="fast")
    with pytest.raises(ValueError, match="drop num_assistant_tokens_schedule"):
        assisted_generate(target, draft, ids, mask, max_new_tokens=4, draft_policy="adaptive",
                          num_assistant_tokens_schedule="heuristic")


@pytest.mark.parametrize("size", ["larger", "equal"])
def test_a_draft_costlier_than_the_target_is_never_run(embedded, prompts, size):
    """A draft multiplying at least as many weights per token as the target cannot gain at any length (K + 1 tokens
    for at least K + 1 target steps): it is not run at all (its prefill neither), with one warning; the output is
    the target's (a left-padded batch on the engine's runners, a single row through its own generate(), options as
    given)."""
    import copy

    from transformers import AutoModelForCausalLM

    from optimum_uag.engine.policy import cost_prior, weights_per_token

    target, tok = embedded["target"]
    config = copy.deepcopy(target.config)
    config.num_hidden_layers += 1
    torch.manual_seed(0)
    big = AutoModelForCausalLM.from_config(config).eval()
    assert cost_prior(target, target) == 1.0 and cost_prior(target, big) > 1.0 and weights_per_token(target) > 0
    if size == "equal":  # the target's own weights: as costly per token, and it would accept everything
        big = copy.deepcopy(target)
    ids, mask = batch(tok, prompts[:2])
    with pytest.warns(UserWarning, match="no draft length can gain"):
        out = assisted_generate(target, big, ids, mask, max_new_tokens=12)
    assert torch.equal(out.sequences, reference(target, ids, mask, 12, tok))
    assert out.metrics.draft_forwards == 0 and out.metrics.draft_tokens == 0
    assert out.metrics.rounds_without_draft == out.metrics.adaptive_rounds > 0
    with pytest.warns(UserWarning, match="no draft length can gain"):  # options go to the target's own generate()
        scored = assisted_generate(target, big, ids[:1], max_new_tokens=5, do_sample=True, num_return_sequences=3,
                                   output_scores=True, return_dict_in_generate=True)
    assert scored.sequences.shape[0] == 3 and len(scored.scores) == 5
    fixed = assisted_generate(target, big, ids, mask, max_new_tokens=12, draft_policy="fixed")
    assert fixed.metrics.draft_forwards > 0 and torch.equal(fixed.sequences, out.sequences)


def test_cost_prior_counts_what_a_token_multiplies():
    """The feature head on the target's output layer, a small draft, no draft."""
    from helpers import tiny_llama
    from optimum_uag.engine.policy import cost_prior

    big, small = tiny_llama(64, 0, layers=4, hidden=64), tiny_llama(64, 1, layers=1, hidden=16)
    assert 0 < cost_prior(big, small) < 0.2 and cost_prior(small, big) > 5
    assert cost_prior(big, None) == 0.0


@pytest.mark.parametrize("tree", [False, True])
def test_the_heads_catch_up_as_wide_as_the_last_round_drafts_what_the_fixed_width_drafts(
        forced, embedded, prompts, monkeypatch, tree):
    """Under the adaptive policy the head's catch-up block is as wide as the last drafting round committed (1-4 of
    its 9 positions), also after rounds without a draft and lookup rounds: every round's draft is the one the fixed
    9-wide block gives (a pair left out would change the head's features, and its drafts), at batch 2."""
    from optimum_uag.engine.drafters.feature import FeatureDrafter

    target, tok = embedded["target"]
    head = make_head(target, 300)
    ids, mask = batch(tok, [prompts[2], prompts[6][:60]])
    original, propose = FeatureDrafter._catch_up, FeatureDrafter.propose

    def run(fixed_width: bool):
        drafts = []

        def catch_up(self, state):
            kept = state.round_max_new
            if fixed_width:
                state.round_max_new = None
            original(self, state)
            state.round_max_new = kept

        def record(self, state, k, branch=None):
            out = propose(self, state, k, branch)
            drafts.append(out.tokens.clone())
            return out

        monkeypatch.setattr(FeatureDrafter, "_catch_up", catch_up)
        monkeypatch.setattr(FeatureDrafter, "propose", record)
        out = assisted_generate(target, head, ids, mask, max_new_tokens=40, draft_policy="adaptive",
                                draft_tree=tree, prompt_lookup_num_tokens=3)
        return out, drafts

    narrow, narrow_drafts = run(False)
    wide, wide_drafts = run(True)
    assert torch.equal(narrow.sequences, wide.sequences)
    assert torch.equal(narrow.sequences, reference(target, ids, mask, 40, tok))
    assert len(narrow_drafts) == len(wide_drafts) > 5
    assert all(torch.equal(a, b) for a, b in zip(narrow_drafts, wide_drafts))
    assert narrow.metrics.accepted_tokens > 0


def test_t0_is_refreshed_rarely_while_drafting_pays_by_far():
    """A round without a draft every REFRESH drafting rounds near the break-even; every REFRESH_FAR rounds while the
    expected rate is REFRESH_MARGIN or more (a tree at 1.6x: ~1 round in 128 without a draft after the start, a
    tree at 1.1x: one in 32)."""
    from optimum_uag.engine.policy import REFRESH, REFRESH_FAR

    for tokens_per_round, gap in ((3.2, REFRESH_FAR), (2.2, REFRESH)):
        policy, ks = AdaptivePolicy(start_k=3, tree=True), []
        for _ in range(400):
            k = policy.next()
            ks.append(k)
            policy.observe(k, 1.0 if k == 0 else 2.0, 1 if k == 0 else tokens_per_round, 1, None)
        plain = [i for i, k in enumerate(ks) if k == 0]
        later = [b - a - 1 for a, b in zip(plain, plain[1:]) if a > 40]  # drafting rounds between refreshes
        assert later and all(g == gap for g in later), (tokens_per_round, later)


@pytest.mark.parametrize("tree_first", [False, True])
def test_t0_is_measured_first_or_after_a_trees_first_rounds(monkeypatch, tree_first):
    """t0 first, in a warm-up and a timed round (the default); with TREE_FIRST (an A/B option) a tree drafts from the
    call's first round (the warm-up) through its first MIN_ROUNDS timed rounds, then one round without a draft
    measures t0 (timed: it is not the call's first round). A chain measures t0 first either way, so that a costly
    draft is judged before it runs."""
    import random

    import optimum_uag.engine.policy as policy_module
    from optimum_uag.engine.policy import MIN_ROUNDS

    monkeypatch.setattr(policy_module, "TREE_FIRST", tree_first)
    tree = AdaptivePolicy(start_k=3, tree=True)
    ks = _simulate(tree, 12, 1.0, lambda k: 1.4, lambda r: 2.5, None)
    first = [3] * (MIN_ROUNDS + 1) + [0] if tree_first else [0, 0]
    assert ks[: len(first)] == first and all(k > 0 for k in ks[len(first):]), ks
    assert tree.t0 == 1.0
    chain = AdaptivePolicy(start_k=3)
    ks = _simulate(chain, 4, 1.0, lambda k: 1.0 + 0.05 * k, lambda r: 0.85, random.Random(0))
    assert ks[:3] == [0, 0, 3], ks
