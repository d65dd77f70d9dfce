"""Draft length that adapts, per call, to what drafting costs and earns on this device.

A draft pays only when the tokens it adds per round outweigh its cost: the draft's own steps and the wider verify.
Neither is known in advance (users bring any draft: one cheaper than the target, or one larger with a 256k-token
vocabulary; a CPU where a verify of 9 tokens costs 1.3 one-token forwards, a GPU where it costs one). The policy
measures both during the call, as dynamic speculation lookahead (Mamou et al. 2024) and cost-aware draft length
(SpecDec++, Huang et al. 2024) do, and picks each round's K to maximise expected tokens per second:

  t0        wall time of a round without a draft: the target decodes one token on the same cache (EMA)
  s         extra wall time per drafted token (draft step + wider verify), from drafting rounds (EMA)
  alpha_j   acceptance at draft position j given j - 1 accepted (decayed counts, prior 1/2)
  E(K)      = 1 + sum_{i <= K} prod_{j <= i} alpha_j tokens per row, in t0 + s K seconds

K = 0 (no draft) is one of the choices. A draft whose token costs at least a target token (by the weights each
multiplies with) can never gain, E(K) <= K + 1 tokens for at least 1 + K target steps: it is not run at all, the
prefill included: the call runs the target's own generate(). Otherwise the first MIN_ROUNDS timed drafting rounds
always draft (one round's acceptance is noise), unless the measured cost alone rules drafting out (even with every
token accepted it would lose: then probes come only every 32 rounds); then a draft whose expected rate falls below
0.97 of the rate without one is switched off, and a probe of two drafting rounds comes after 4, 8, 16, 32 rounds
without one (with the K the estimates favour, the cheapest when the draft is costly), so prompt-lookup matches or a
passage the draft knows bring it back (drafting resumes once its expected rate exceeds the rate without it). The
first drafting round after rounds without a draft is not timed (its acceptance counts): it also runs the draft
over the tokens committed meanwhile, a cost of having stopped, not of drafting. s is priced against the current
t0 (a refreshed t0 re-prices every past drafting round). A drafting round's extra time is fitted as a line c + s K
over the timed rounds once their K has varied (cost_line()): a round's fixed part (the draft's catch-up, the verify's
start) priced per drafted token made every longer chain look dearer (at batch 4: c 0.13 t0, s 0.19 t0 a token).
Inside a drafting round a chain is cut by a gate: a token after the first is verified only while the active rows'
mean cumulative draft probability is at least what one more token costs at the best chain's rate (gate()), up to
the best fixed length. At batch > 1 one verify serves every row, so a position pays by the rows likely to reach it:
a fixed K must be short for the unsure rows. While
drafting, a round without a draft every 32 rounds keeps t0 current (this CPU drifts 25-35% within minutes); every
128 while drafting's rate is 1.35x or more. A draft
tree (a feature head's default) is one option against no draft, its tokens and time per round measured as they
come.

Greedy output stays exactly the target's and sampling stays lossless whatever the choices: each round's K is fixed
before that round's draws, and a round without a draft is the target's own decoding step.
"""
from __future__ import annotations

EMA = 0.3  # weight of the newest round in the time averages
# weight of the newest round without a draft in t0: those rounds are rare while drafting pays (one per REFRESH), and
# this CPU drifts between them, so the newest counts most
T0_EMA = 0.6
DECAY = 0.9  # per drafting round, on a chain's acceptance counts (text changes: code, prose, a quote)
# per tree round, on its tokens and seconds: a tree round's tokens vary from 1 to depth + 1, so over ~10 rounds the
# estimate swings ~20% and a tree worth 1.17x was switched off in a third of the rounds (0.63 drafting share,
# 1.11x, simulated); over ~33 rounds 0.84 and 1.14x (tests/test_policy.py)
TREE_DECAY = 0.97
# a tree's rate starts from a prior of TREE_PRIOR_ROUNDS rounds at TREE_PRIOR_RATE times the rate without a draft,
# shrunk toward as its own rounds come: a tree's first rounds are few and vary (1-5 tokens), and a head's tree that
# pays overall was switched off by an unlucky start (a poem: 1, 2, 1, 1, 1 tokens in its first five rounds, then 30
# of its 56 rounds without a draft, 46 tok/s against 52 with a draft every round; Intel Xeon). On 8 held-out chat
# requests there, 1.43x the fastest target-only path with the prior against 1.41x without (tau 2.35 against 2.05;
# a draft every round 1.45x; benchmarks/results/tree_prior.json). A tree that does not pay (0.86x) is given up after
# ~24 rounds instead of ~5 (tests/test_policy.py). The prior's weight does not decay while the tree's rounds do
# (their decayed count levels off at ~33), so it keeps ~19% of the estimate: a tree measured at 0.92-0.97x keeps
# drafting (simulated: ~89% of its rounds; it costs those trees up to ~8%). A prior that decays too (TREE_PRIOR_DECAY)
# measured no better; on this CPU a draft every round was the fastest row in both groups.
TREE_PRIOR_ROUNDS = 8.0
TREE_PRIOR_RATE = 1.2
# the prior's weight times this per tree round (TREE_DECAY: the prior as rounds before the first); decaying measured no
# better on 8 held-out chat requests: 1.374x against 1.375x (benchmarks/results/tree_prior_decay.json)
TREE_PRIOR_DECAY = 1.0
# an A/B option, off: a tree drafts from the first round after the prefill and measures t0 after its first MIN_ROUNDS
# timed rounds, in one round without a draft (the call's first round, the warm-up, is a drafting one), so one round
# without a draft at the start instead of two. It halved the rounds without a draft (input-grounded requests, ~75
# new tokens: 6.9% -> 3.4%; chat 4.7% -> 2.8%) but was no faster: 1.81x against 1.84x on grounded, 1.47x against
# 1.48x on chat (SmolLM2 + its head, Intel Xeon, 3 repeats; benchmarks/results/tree_first.json). A likely reason (not
# measured): its round without a draft lands in the answer's first copy, where the lookup branch was growing; the
# start's two fall in the answer's preamble. (Its t0 is one round's, with no warm-up: a slow first one-token round
# would read the tree's rate high, and at REFRESH_MARGIN or more that t0 stays for REFRESH_FAR rounds)
TREE_FIRST = False
PROBE_GAPS = (4, 8, 16, 32)  # rounds without a draft between probe rounds, growing while drafting does not pay
REFRESH = 32  # drafting rounds between two rounds without a draft (t0 measured again)
# ... while drafting's expected rate is within REFRESH_MARGIN of the rate without a draft; further above it, one every
# REFRESH_FAR rounds. A stale t0 only moves the estimate by the CPU's drift since it was measured (25-35% here), which
# takes a rate of 1.35 to 1.0 at worst, above OFF_BELOW; where it errs the other way (the CPU slowed: the rate read low) a switch-off
# costs one round without a draft, which measures t0 again. SmolLM2 + its head on chat at 128 new tokens (~65
# rounds): 2 of its ~4 rounds without a draft were refreshes (rounds_without_draft_share 0.05)
REFRESH_MARGIN = 1.35
REFRESH_FAR = 128
MIN_ROUNDS = 4  # timed drafting rounds before the policy may stop drafting
PROBE_ROUNDS = 2  # drafting rounds per probe
OFF_BELOW = 0.97  # drafting stops when its expected rate falls below this share of the rate without a draft
CATCH_UP = 2  # rounds without a draft after which the next drafting round's time is the draft's catch-up's
# a chain's K past the best fixed length, for the gate to cut (gate()). SmolLM2 + its head, chat at batch 4, 16
# held-out requests, interleaved, median of 3 (benchmarks/results/batch4_policy.json, run 5): 1 past the best 1.14x
# the fastest target-only path, 2 past it 1.05x (15% of its rounds without a draft against 5%), 0 past it 1.14x
# (1.145 vs 1.140; means 1.13 vs 1.11). With the cost line (COST_LINE), whose K is already longer where a round's fixed
# part pays for it, one past drafted too much: mean K 1.99, 1.09x against 1.14x at 0 past (benchmarks/results/
# cost_line.json, Intel Xeon)
GATE_REACH = 0
# the share of a drafted token's measured cost (draft step + verify width) still ahead when the gate judges it: its
# draft step has run. SmolLM2 + its head, chat at batch 4 (benchmarks/results/batch4_policy.json): the adaptive chain
# with the gate 1.11-1.16x the fastest target-only path in runs 1-4, with it off 0.99-1.05x in three (K 2 past the
# best)
GATE_SHARE = 0.6
GATE_MAX = 0.9  # the gate never asks more of a token than this cumulative draft probability
# a chain round's cost as a line c + s K fitted over the timed rounds (AdaptivePolicy.cost_line), not s K alone;
# LINE_DECAY per timed chain round on its sums (~20 rounds: the line needs rounds of several K, and this CPU drifts)
COST_LINE = True
LINE_DECAY = 0.95
LINE_MIN_WEIGHT = 6.0  # decayed timed rounds before the line is used
LINE_MIN_VAR = 0.15  # variance of their K below which the line is not fitted (K = 1 + 0 / 1 in 1 round of 6: 0.14)
MAX_K = 8  # the longest chain the policy drafts (a 9-token verify costs ~1.3 one-token forwards on this CPU)


def weights_per_token(model) -> int:
    """Weights one token's forward multiplies with: every parameter but the input embedding (a lookup), plus the
    output layer when it shares the embedding's storage."""
    params = {id(p): p for p in model.parameters()}
    total = sum(p.numel() for p in params.values())
    get_in = getattr(model, "get_input_embeddings", None)
    embed = get_in() if get_in is not None else getattr(model, "embed_tokens", None)
    if embed is not None and getattr(embed, "weight", None) is not None:
        total -= embed.weight.numel()
        get_out = getattr(model, "get_output_embeddings", None)
        out = get_out() if get_out is not None else None
        if out is not None and out.weight is embed.weight:
            total += embed.weight.numel()
    return total


def cost_prior(model, assistant_model) -> float:
    """A draft token's cost relative to a target token's, from the weights each multiplies with (no draft: 0). On
    a CPU small drafts cost more than this (per-operation overhead); the policy measures the real cost as it drafts."""
    if assistant_model is None:
        return 0.0
    draft = weights_per_token(assistant_model)
    if getattr(assistant_model, "lm_head", True) is None:  # a feature head on the target's own output layer
        out = model.get_output_embeddings()
        draft += out.weight.numel() if out is not None else 0
    return draft / max(1, weights_per_token(model))


class AdaptivePolicy:
    """Chooses each round's draft length: 0 (no draft), 1..max_k (a chain), or the call's tree (`tree=True`: any
    K > 0 means the tree). `next()` before the round, `observe()` after it."""

    def __init__(self, start_k: int, max_k: int = MAX_K, tree: bool = False, cost: float | None = None):
        self.max_k, self.tree = max(1, max_k), tree
        self.start_k = max(1, min(start_k, self.max_k))
        # a draft token that costs as much as a target token can never gain: E(K) <= K + 1 tokens for >= 1 + K steps
        self.never = cost is not None and cost >= 1.0
        if cost is not None and not tree:  # the first drafting rounds: the K the weights suggest (acceptance 0.6)
            self.start_k = max(range(1, self.max_k + 1),
                               key=lambda k: sum(0.6 ** i for i in range(k + 1)) / (1 + (cost + 0.03) * k))
        self.t0: float | None = None  # seconds per round without a draft
        self.chain_sums = [0.0, 0.0]  # EMAs of a timed chain round's seconds and drafted tokens (s, with t0)
        # decayed sums over timed chain rounds of 1, K, K^2, seconds, K * seconds: a drafting round's cost as a fixed
        # part and a part per drafted token (cost_line())
        self.line_sums = [0.0] * 5
        self.tree_rate: float | None = None  # tokens per second of tree rounds
        self.tree_sums = [0.0, 0.0]  # decayed tokens and seconds of tree rounds
        self.tree_count = 0.0  # decayed number of tree rounds (the weight of their rate against the prior)
        self.prior_weight = TREE_PRIOR_ROUNDS  # the prior's weight in pseudo-rounds, times TREE_PRIOR_DECAY a round
        self.plain_tokens: float | None = None  # tokens per round without a draft (the active rows)
        self.reached = [0.0] * (self.max_k + 1)  # [j]: rows that reached draft position j (1-based)
        self.accepted = [0.0] * (self.max_k + 1)
        self.gap = 0  # index into PROBE_GAPS while not drafting
        self.without = 0  # rounds in a row without a draft
        self.drafting = 0  # drafting rounds since the last round without one
        self.rounds = 0  # rounds observed (after the prefill)
        self.probing = 0  # probe rounds still to draft
        self.seen = [0, 0]  # rounds observed without / with a draft (the first of each is a warm-up, not timed)

    # --------------------------------------------------------------------------------------------- estimates
    def cost_line(self) -> tuple[float, float] | None:
        """(c, s): a drafting round's extra seconds over t0 as c + s K, fitted (least squares, decayed) over the timed
        chain rounds once their K has varied (the gate cuts chains, so it does); None until then. A round's fixed
        part (the draft's catch-up over the tokens the last round committed, the gate's reads, the verify's own
        start) priced per drafted token makes every longer chain look dearer than it is: at batch 4 the chain
        stayed at K=1 (mean 1.10) where a fixed K=2 ran 4-5% faster."""
        if not COST_LINE or self.t0 is None:
            return None
        w, sk, skk, st, skt = self.line_sums
        if w < LINE_MIN_WEIGHT:
            return None
        mk, mt = sk / w, st / w
        var = skk / w - mk * mk
        if var < LINE_MIN_VAR:
            return None
        slope = (skt / w - mk * mt) / var
        c = mt - self.t0 - slope * mk
        if slope <= 0 or c < 0:  # noise, or a fixed part below zero: the line through the mean (c = 0) instead
            return None
        return c, slope

    def _line(self) -> tuple[float, float]:
        """(c, s) of a chain round's extra seconds over t0, c + s K: the fitted line, else the line through the mean
        (c = 0). Fitted once per caller: best_k, gate and ceiling each price every K with it."""
        line = self.cost_line()
        return (0.0, self.s) if line is None else line

    @property
    def s(self) -> float | None:
        """Extra seconds per drafted token (chain): the timed drafting rounds' mean seconds over the current t0, per
        mean drafted token. Both averages are kept apart and combined only here, so a refreshed t0 (the CPU slowed
        or sped up since the last one) re-prices every past drafting round at once: a difference taken per round
        against the t0 of its time read a 20% slowdown as a costlier draft and switched drafting off."""
        if self.t0 is None or self.chain_sums[1] <= 0:  # (multi-card: rank 0 may draft before this rank's t0)
            return None
        return max(self.chain_sums[0] - self.t0, 0.0) / self.chain_sums[1]

    def alpha(self, j: int) -> float:
        """Acceptance at position j given j - 1 accepted; an unseen position takes the nearest seen one's value."""
        for i in range(j, 0, -1):
            if self.reached[i] > 0.5:
                return (self.accepted[i] + 0.5) / (self.reached[i] + 1.0)
        return 0.5

    def expected_tokens(self, k: int) -> float:
        total, run = 1.0, 1.0
        for j in range(1, k + 1):
            run *= self.alpha(j)
            total += run
        return total

    def best_k(self) -> tuple[int, float]:
        """The chain length with the most expected tokens per second (K >= 1), and that rate relative to t0."""
        best, rate = 1, 0.0
        c, s = self._line()
        for k in range(1, self.max_k + 1):
            r = self.expected_tokens(k) * self.t0 / (self.t0 + c + s * k)
            if r > rate:
                best, rate = k, r
        return best, rate

    def gate(self) -> float | None:
        """A chain's stop inside a round (engine/drafters/base.py draft_loop): a drafted token after the first is
        verified only while the active rows' mean cumulative draft probability is at least this. One more token
        costs s seconds and earns its acceptance chance, at the best chain's rate of E(K) tokens per t0 + s K
        seconds; so it pays when that chance is at least s E(K) / (t0 + s K). When the gate judges a token its draft
        step has run already (s counts it), so GATE_SHARE of that. Measured from the call's rounds: None until both
        t0 and s are (and for trees, which rank their nodes by the same probabilities)."""
        if self.tree or self.t0 is None or self.s is None or self.t0 <= 0:
            return None
        k, _ = self.best_k()
        c, s = self._line()
        return min(GATE_MAX, GATE_SHARE * s * self.expected_tokens(k) / (self.t0 + c + s * k))

    def ceiling(self) -> float:
        """The rate a chain would reach with every drafted token accepted, relative to no draft (cost alone)."""
        c, s = self._line()
        return max((k + 1) * self.t0 / (self.t0 + c + s * k) for k in range(1, self.max_k + 1))

    # --------------------------------------------------------------------------------------------- choice
    def next(self) -> int:
        """K for the coming round (after the prefill round, which the drafter runs as always)."""
        return self._choose()

    def _choose(self) -> int:
        if self.never:
            return 0
        if self.t0 is None:
            if self.tree and TREE_FIRST and self.seen[1] <= MIN_ROUNDS:
                return self.start_k  # a tree's first rounds draft (they always would), t0 after them
            return 0  # first: rounds without a draft (t0)
        if self.tree:
            if self.tree_rate is None:
                return self.start_k
            k, rate = 1, self.tree_rate * self.t0 / max(self.plain_tokens, 1e-9)
            if self.prior_weight > 0:
                rate = ((self.tree_count * rate + self.prior_weight * TREE_PRIOR_RATE)
                        / (self.tree_count + self.prior_weight))
        else:
            if self.s is None:
                return self.start_k
            k, rate = self.best_k()
            if rate >= 1.0:
                # the gate (self.gate()) cuts each round's chain where the rows' draft probabilities say the next
                # token does not pay: while drafting pays the K chosen is its ceiling, GATE_REACH past the best
                # fixed length (acceptance counted past the gate is conditional on passing it, and positions never
                # drafted are never measured); a probe of a draft that does not pay stays the cheapest chain
                k = min(self.max_k, k + GATE_REACH)
        if not self.tree and self.ceiling() < 1.0:
            # the measured cost alone rules drafting out: with every token accepted it would still lose, so no
            # more warm-up rounds (their acceptance cannot change that), and probes only at the longest gap
            self.gap = max(self.gap, len(PROBE_GAPS) - 1)
        elif self.seen[1] <= MIN_ROUNDS:  # a few timed drafting rounds before any verdict (one round is noise)
            return k
        if self.probing > 0:  # a probe is PROBE_ROUNDS drafting rounds in a row
            self.probing -= 1
            return k
        # hysteresis: drafting stops below OFF_BELOW and resumes above 1 (estimates move with every round)
        draft_pays = rate > (OFF_BELOW if self.without == 0 else 1.0)
        if draft_pays:
            self.gap = 0
            return 0 if self.drafting >= (REFRESH if rate < REFRESH_MARGIN else REFRESH_FAR) else k
        if self.without >= PROBE_GAPS[min(self.gap, len(PROBE_GAPS) - 1)]:
            self.gap += 1
            self.probing = PROBE_ROUNDS - 1
            return k  # a probe
        return 0

    def observe(self, k: int, seconds: float, tokens: int, active: int, accepted_hist: list[int] | None) -> None:
        """One round: its K, wall time, tokens committed over `active` rows, and how many rows accepted 0, 1, ...
        draft tokens (accepted_hist[a]; chains only)."""
        self.rounds += 1
        if active <= 0:
            return
        kind = int(k > 0)
        self.seen[kind] += 1
        # warm-up: the call's first round (first allocations), the draft's first catch-up over the prompt; a first
        # round without a draft that comes after drafting rounds (a tree's t0) is timed
        if self.seen[kind] == 1 and (kind == 1 or self.rounds == 1):
            self.without, self.drafting = (self.without + 1, 0) if k == 0 else (0, self.drafting + 1)
            if k > 0:
                self._count(k, accepted_hist)
            return
        if k > 0 and self.without >= CATCH_UP:
            # the first drafting round after rounds without a draft also runs the draft over the tokens those
            # rounds committed (its catch-up): not a drafting round's time, so not timed (a probe after 32 plain
            # rounds would otherwise look ~10-20% slower than drafting is, and drafting would stay off)
            self.without, self.drafting = 0, self.drafting + 1
            self._count(k, accepted_hist)
            return
        if k == 0:
            self.t0 = seconds if self.t0 is None else (1 - T0_EMA) * self.t0 + T0_EMA * seconds
            self.plain_tokens = tokens if self.plain_tokens is None else (1 - EMA) * self.plain_tokens + EMA * tokens
            self.without += 1
            self.drafting = 0
            return
        self.without = 0
        self.drafting += 1
        if self.tree:  # tokens and seconds of tree rounds as decayed sums: a ratio of means, not a mean of ratios
            self.tree_sums = [TREE_DECAY * self.tree_sums[0] + tokens, TREE_DECAY * self.tree_sums[1] + seconds]
            self.tree_rate = self.tree_sums[0] / max(self.tree_sums[1], 1e-9)
            self.tree_count = TREE_DECAY * self.tree_count + 1.0
            self.prior_weight *= TREE_PRIOR_DECAY
            return
        first = self.chain_sums[1] == 0
        self.chain_sums = [seconds if first else (1 - EMA) * self.chain_sums[0] + EMA * seconds,
                           k if first else (1 - EMA) * self.chain_sums[1] + EMA * k]
        self.line_sums = [LINE_DECAY * a + b for a, b in zip(self.line_sums, (1.0, k, k * k, seconds, k * seconds))]
        self._count(k, accepted_hist)

    def _count(self, k: int, accepted_hist: list[int] | None) -> None:
        if self.tree:
            return
        self.reached = [r * DECAY for r in self.reached]
        self.accepted = [a * DECAY for a in self.accepted]
        for a, rows in enumerate(accepted_hist or []):
            if not rows:
                continue
            for j in range(1, min(a + 1, k, self.max_k) + 1):  # positions 1..a accepted, a + 1 rejected (when drafted)
                self.reached[j] += rows
                if j <= a:
                    self.accepted[j] += rows
