"""The assisted decoding loop: draft -> translate -> verify -> commit, on static-shape caches."""
from __future__ import annotations

import contextlib
import time
import warnings
from dataclasses import dataclass

import torch
from transformers import GenerationConfig
from transformers.utils import ModelOutput

from ..distributed import choice_agreement, stop_agreement
from ..runners import plan_for
from .commit import commit, stopping_criteria
from .config import DEVICE_TREES, AssistedConfig, resolve_config, validate_inputs
from .drafters import Drafter, build_drafter, pad_proposal, resolve_assistant
from .metrics import Metrics
from .processors import TargetScorer
from .sampling import LogitsWarper, TokenSampler
from .policy import MAX_K as ADAPTIVE_MAX_K
from .policy import AdaptivePolicy, cost_prior
from .state import DecodingState, Proposal
from .verify import Verifier


@dataclass
class AssistedGenerateOutput(ModelOutput):
    """`sequences` (prompt + new tokens, as transformers) and the call's `metrics`."""

    sequences: torch.Tensor = None
    metrics: Metrics = None
    scores: tuple | None = None  # output_scores: per generated token, the target's processed scores (B, V)
    logits: tuple | None = None  # output_logits: per generated token, the target's raw logits (B, V)


class Schedule:
    """Draft length per round: constant, heuristic (+2 if all accepted, else -1) or confidence-stopped."""

    def __init__(self, cfg: AssistedConfig):
        self.k = cfg.num_assistant_tokens
        self.kind = cfg.schedule
        self.max_k = cfg.max_assistant_tokens

    def update(self, all_accepted: bool) -> None:
        if self.kind == "heuristic":
            self.k = min(self.max_k, self.k + 2) if all_accepted else max(1, self.k - 1)


def assisted_generate(
    model,
    assistant_model=None,
    input_ids: torch.Tensor | None = None,
    attention_mask: torch.Tensor | None = None,
    *,
    tokenizer=None,
    assistant_tokenizer=None,
    generation_config: GenerationConfig | None = None,
    streamer=None,
    stopping_criteria=None,
    logits_processor=None,
    prefix_allowed_tokens_fn=None,
    **kwargs,
) -> AssistedGenerateOutput:
    """Speculative decoding with a draft model (any tokenizer) or prompt lookup; output equals the target's own.

    Generation options mean what they mean in transformers' generate(): logits processors (repetition_penalty,
    no_repeat_ngram_size, min_new_tokens, bad_words_ids, sequence_bias, logits_processor=...), stop_strings (with
    tokenizer=), num_return_sequences (sampling), output_scores / output_logits."""
    with torch.inference_mode():  # ~17% less per-forward overhead than no_grad for small drafts
        out = _assisted_generate(model, assistant_model, input_ids, attention_mask, tokenizer, assistant_tokenizer,
                                 generation_config, streamer, stopping_criteria, logits_processor,
                                 prefix_allowed_tokens_fn, kwargs)
    out.sequences = out.sequences.clone()  # an ordinary tensor, as transformers returns
    return out


def _assisted_generate(model, assistant_model, input_ids, attention_mask, tokenizer, assistant_tokenizer,
                       generation_config, streamer, user_criteria, logits_processor, prefix_allowed_tokens_fn,
                       kwargs) -> AssistedGenerateOutput:
    if input_ids is None:
        input_ids = kwargs.pop("inputs", None)
    if input_ids is None:
        raise ValueError("input_ids is required (a (batch, length) tensor of the target tokenizer's ids)")
    kwargs = dict(kwargs)
    torch_compile = kwargs.pop("torch_compile", False)
    assistant_model = resolve_assistant(assistant_model)
    plan = plan_for(model, kwargs, generation_config)  # pops the backend's own knobs (Gaudi: lazy_mode, ...)
    cfg = resolve_config(model, assistant_model, generation_config, kwargs, ignore_eos=plan.ignore_eos,
                         prompt_length=input_ids.shape[-1] if isinstance(input_ids, torch.Tensor) else None)
    if torch_compile or plan.static_verify:
        # one fixed verify width (HPU graphs, torch.compile): a round without a draft would cost the full verify, so
        # these backends keep a fixed K (the adaptive policy runs on eager CPU / CUDA)
        if cfg.adaptive_requested:
            warnings.warn("optimum-uag: draft_policy='adaptive' runs on eager CPU / CUDA; with one fixed verify width "
                          f"(HPU graphs, torch_compile) every round drafts K={cfg.num_assistant_tokens}", stacklevel=3)
        cfg.adaptive = False
        cfg.tree_branch_nodes = cfg.tree_branch_max = 0  # one verify shape per tree: the lookup branch replaces the
        # tree's weakest nodes
    if torch_compile:
        plan = _compiled_plan(plan, model, torch_compile, cfg)
    input_ids, attention_mask = validate_inputs(model, assistant_model, input_ids, attention_mask, cfg)
    criteria = stopping_criteria(cfg, tokenizer, user_criteria)  # (validates stop_strings for both paths)
    # (a left-padded batch stays on the engine's runners, which the registry checked against each row's own forward:
    # transformers' padded-batch generate() differs from each row alone for some models, BLOOM and CodeGen among them)
    if cfg.adaptive and cost_prior(model, assistant_model) >= 1.0 and not (
            bool((attention_mask == 0).any()) and _runs_on_the_engine(model)):
        return _target_only(model, assistant_model, input_ids, attention_mask, cfg, tokenizer, streamer, user_criteria,
                            logits_processor, prefix_allowed_tokens_fn)
    if cfg.num_return_sequences > 1:  # rows of the batch, as transformers expands them
        input_ids = input_ids.repeat_interleave(cfg.num_return_sequences, 0)
        attention_mask = attention_mask.repeat_interleave(cfg.num_return_sequences, 0)
    if streamer is not None and input_ids.shape[0] > 1:
        raise ValueError("streamer supports batch size 1 only (as in transformers); drop streamer= for batches")
    made: list = []  # every runner of this call, closed at the end (a Gaudi runner puts back the model's cache)

    def runner_factory(*args, **kw):
        made.append(plan.make_runner(*args, **kw))
        return made[-1]

    try:
        call = _Call(model, cfg, plan, runner_factory, input_ids, attention_mask, criteria, streamer,
                     TargetScorer(model, cfg.generation_config, input_ids, cfg.max_new_tokens, logits_processor,
                                  prefix_allowed_tokens_fn))
        runner = runner_factory(model, call.state.batch_size, call.capacity, call.pad)
        cfg.tree = _tree_or_chain(cfg, runner, call.scorer.needed, assistant_model, call.state.batch_size)
        if (cfg.tree is not None and cfg.tree_default and runner_device(runner) == "cpu" and not plan.static_verify
                and not torch_compile):
            cfg.tree = _device_tree(model, call.state.batch_size, cost_prior(model, assistant_model), plan.make_runner,
                                    input_ids)
        if cfg.tree is None and cfg.lookup_is_default and call.state.batch_size > 1 and runner_device(runner) == "cpu":
            # a head's chain at batch > 1 on a CPU drafts without the default n-grams in front: a round where one
            # row's n-gram matches verifies B x (lookup + 1) tokens, and the adaptive policy, timing those rounds,
            # switched drafting off in most rounds (SmolLM2, batch 4: docs/benchmarks.md, chat@4).
            # prompt_lookup_num_tokens=N keeps them
            cfg.prompt_lookup_num_tokens = None
        call.policy = _adaptive_policy(cfg, model, assistant_model)
        if call.policy is not None and call.policy.never:  # a draft that cannot gain is not even set up
            _say_target_only(model, assistant_model, stacklevel=4)  # (a left-padded batch: the target alone here)
            drafter = Drafter()  # (a UAG draft's vocabulary tables, a draft's cache: seconds for a 262k vocabulary)
        else:
            drafter = build_drafter(model, assistant_model, tokenizer, assistant_tokenizer, call.state,
                                    call.capacity, cfg, call.sampler, runner_factory,
                                    call.scorer.for_draft() if call.scorer.needed else None)
        with contextlib.ExitStack() as packs:
            # prepacked CPU linears (runners/packed.py) swapped in once for the whole call, not per forward: ~1 ms a
            # round of bookkeeping over SmolLM2's 151 linears, 3% of a one-token step
            for pack in {id(p): p for p in _packs(made, drafter)}.values():
                packs.enter_context(pack)
            return call.run(drafter, runner)
    finally:
        for runner in reversed(made):
            close = getattr(runner, "close", None)
            if close is not None:
                close()


class _Call:
    """One assisted generation call: its state, stages and counters."""

    def __init__(self, model, cfg, plan, runner_factory, input_ids, attention_mask, criteria, streamer, scorer):
        self.model, self.cfg, self.plan, self.runner_factory = model, cfg, plan, runner_factory
        self.input_ids, self.criteria, self.streamer = input_ids, criteria, streamer
        self.pad = (attention_mask == 0).sum(1)
        self.capacity = input_ids.shape[1] + cfg.max_new_tokens + max(cfg.max_assistant_tokens,
                                                                      cfg.max_draft_tokens) + 2
        self.state = DecodingState.create(input_ids, self.pad, self.capacity, cfg.pad_token_id, cfg.max_new_tokens)
        self.warper = LogitsWarper(cfg.temperature, cfg.top_k, cfg.top_p) if cfg.do_sample else None
        # each draft token's probability: the "confidence" schedule's stop, the adaptive policy's gate (draft_loop)
        self.sampler = TokenSampler(self.warper, need_confidence=cfg.schedule == "confidence" or cfg.adaptive)
        self.scorer = scorer  # the target's logits processors, applied per verified position
        self.all_accepted = False
        self.round_stats = (0, 0, None)  # tokens committed, active rows, accepted-count histogram of the last round
        self.policy = None  # engine/policy.py AdaptivePolicy where cfg.adaptive

    def run(self, drafter, runner) -> AssistedGenerateOutput:
        """The loop: draft, verify, commit (translation inside the drafter), until every row ends."""
        cfg, state, scorer = self.cfg, self.state, self.scorer
        keep_scores = cfg.output_scores or cfg.output_logits
        verifier = Verifier(runner, self.warper, scorer if scorer.needed else None, keep_scores,
                            features=drafter.needs_features and (drafter.feature_layers or True))
        kept: list[list] = [[] for _ in range(state.batch_size)]  # per row: (scores, logits) of each new token
        static_k = cfg.max_draft_tokens if self.plan.static_verify else None
        eos_ids = torch.tensor(cfg.eos_token_ids, device=state.tokens.device) if cfg.eos_token_ids else None
        schedule, metrics = Schedule(cfg), Metrics()
        if self.streamer is not None:
            self.streamer.put(self.input_ids.cpu())
        rounds = self.plan.rounds
        agree = stop_agreement()  # multi-card: one stopping decision for every rank
        policy = self.policy
        agree_k = choice_agreement() if policy is not None and not policy.never else None  # and one draft length
        if rounds is not None:
            rounds.start()
        while True:
            t0 = time.perf_counter()
            if policy is None or (state.round == 0 and not policy.never):
                k = schedule.k
            else:
                k = policy.next()
                if agree_k is not None:
                    k = agree_k(k, state.tokens)
                else:  # (multi-card: no gate, whose host reads could differ per rank)
                    state.draft_gate = policy.gate()
            if k == 0:  # no draft this round (the adaptive policy): the target's own decoding step
                proposal = Proposal(tokens=state.tokens[:, :0])
            else:
                proposal = drafter.propose(state, k)
                if proposal.tree is None and proposal.tokens.shape[1] < k:
                    k = proposal.tokens.shape[1]  # the gate (or a confidence stop) cut the chain: what was drafted
            if static_k is not None:
                proposal = pad_proposal(proposal, static_k)
            t1 = time.perf_counter()
            verdict, finite = verifier(state, proposal)
            t2 = time.perf_counter()
            active = ~state.done
            n_new = commit(state, verdict, eos_ids, self.criteria, agree)
            if keep_scores:
                for b, n in enumerate(n_new.tolist()):
                    kept[b] += [(verifier.last[0][b, j].clone(), verifier.last[1][b, j].clone()) for j in range(n)]
            t3 = time.perf_counter()
            if k == 0:
                if policy is None or not policy.never:  # (a draft never run keeps nothing)
                    drafter.skipped(state, verdict, n_new)
            else:
                drafter.commit(state, proposal, verdict, n_new)
            t4 = time.perf_counter()
            first = state.round == 0
            all_done = self._observe(metrics, state, proposal, verdict, n_new, active, finite,
                                     (t1 - t0) + (t4 - t3), t2 - t1, time.perf_counter() - t2 - (t4 - t3), k)
            if static_k is None:  # eager: drafters catch up on what was committed (a head's block that wide)
                state.round_max_new = int(self.round_tokens)
            if policy is not None:
                if not first:
                    policy.observe(k, time.perf_counter() - t0, *self.round_stats)
            schedule.update(self.all_accepted)
            if rounds is not None:
                rounds.step(self.round_tokens)
            if all_done:
                break
        if rounds is not None:
            rounds.stop()
        if self.streamer is not None:
            self.streamer.end()
        return self._output(metrics, verifier, drafter, kept)

    def _observe(self, metrics, state, proposal, verdict, n_new, active, finite, draft_s, verify_s, other_s,
                 chosen: int = 0) -> bool:
        """Count the round (one host sync); stream its tokens; True when every row has ended."""
        if proposal.tree is not None:  # a tree's "drafted" is its depth: the most one round can accept
            k = proposal.tree.max_depth
            metrics.tree_rounds += 1
        else:
            k = proposal.tokens.shape[1] if proposal.valid is None else proposal.valid.sum(1)  # drafted per row
        accepted = torch.minimum(verdict.accepted, n_new)
        stats = torch.stack([
            state.done.all().long(), finite.long(), ((verdict.accepted == k) | ~active).all().long(),
            (active.long() * k).sum(), accepted.sum(), n_new.sum(), active.sum(), n_new.max(),
        ])
        hist = None
        if self.policy is not None and proposal.tree is None and chosen > 0:
            # active rows that accepted 0, 1, ..., `chosen` draft tokens: the adaptive policy's acceptance per
            # position of the length it chose (a longer lookup proposal counts as that length)
            index = torch.where(active, verdict.accepted.clamp_max(chosen), chosen + 1)
            hist = torch.zeros(chosen + 2, dtype=torch.long, device=index.device).scatter_add_(
                0, index, torch.ones_like(index))[: chosen + 1]
            stats = torch.cat([stats, hist])
        stats = stats.tolist()  # the one host sync of the round
        all_done, ok, all_accepted, drafted, n_acc, n_gen, n_active, self.round_tokens = stats[:8]
        self.round_stats = (n_gen, n_active, stats[8:] if hist is not None else None)
        if not ok:
            raise FloatingPointError(
                "the target produced NaN/inf logits; check the model's dtype (fp16 overflow) and weights"
            )
        if self.streamer is not None and n_gen:
            self.streamer.put(state.tokens[0, state.length[0] - n_gen : state.length[0]].cpu())
        state.round += 1
        self.all_accepted = bool(all_accepted)
        metrics.observe(drafted, n_acc, n_gen, n_active, draft_s, verify_s, other_s)
        if self.policy is not None and state.round > 1:  # rounds after the prefill
            metrics.adaptive_rounds += 1
            if proposal.tokens.shape[1] == 0:
                metrics.rounds_without_draft += 1
                metrics.row_rounds_without_draft += n_active
        return bool(all_done)

    def _output(self, metrics, verifier, drafter, kept) -> AssistedGenerateOutput:
        stats = drafter.stats()
        metrics.translate_seconds += stats.translate_seconds  # translation inside the draft stage
        metrics.draft_seconds -= stats.translate_seconds
        metrics.target_shapes = sorted(verifier.runner.shapes)
        metrics.draft_shapes = list(stats.shapes)
        metrics.target_forwards = verifier.runner.calls
        metrics.draft_forwards = stats.forwards
        metrics.target_cache_bytes = getattr(verifier.runner, "cache_bytes", 0)
        metrics.draft_cache_bytes = getattr(getattr(drafter, "runner", None), "cache_bytes", 0)
        if self.cfg.tree is not None:
            shape = self.cfg.tree
            metrics.tree_shapes = [(shape.depth, shape.top_k, shape.nodes)]
        out = AssistedGenerateOutput(sequences=self.state.sequences(), metrics=metrics)
        if self.cfg.output_scores or self.cfg.output_logits:
            scores, logits = _per_step(kept)
            out.scores = scores if self.cfg.output_scores else None
            out.logits = logits if self.cfg.output_logits else None
        return out


def _tree_or_chain(cfg: AssistedConfig, runner, processors: bool, assistant_model, batch_size: int = 1):
    """The call's draft tree, or None (a chain) with one printed line saying why, when something cannot take one:
    the runner (no explicit positions / tree mask), logits processors or scores, the kind of draft. The automatic
    choice (draft_tree unset) drafts a chain for batches: B x (nodes + 1) verify tokens cost more than a tree gains
    on a CPU (SmolLM2, batch 4: tree 0.75x the prepacked target-only path, docs/benchmarks.md)."""
    from .drafters import FeatureHead

    if cfg.tree is None:
        return None
    if batch_size > 1 and not cfg.tree_requested and runner_device(runner) == "cpu":
        return None
    why = None
    if not getattr(runner, "supports_tree", False):
        why = f"the target's {getattr(runner, 'kind', type(runner).__name__)} runner takes no tree mask"
    elif processors or cfg.output_scores or cfg.output_logits:
        why = "logits processors / output_scores verify a chain"
    elif not isinstance(assistant_model, FeatureHead):
        why = "only a feature head drafts a tree"
    if why is None:
        return cfg.tree
    if cfg.tree_requested or isinstance(assistant_model, FeatureHead):
        warnings.warn(f"optimum-uag: drafting a chain instead of a tree: {why}", stacklevel=4)
    return None


DEVICE_TREE_MARGIN = 1.05  # another candidate replaces the first only when its expected rate is this much higher
# above this many weights per token the measurement is skipped (the first candidate kept): its ~20 forwards would cost
# a large model on a CPU seconds to minutes, and a forward that streams that many weights is memory-bound, so its
# cost curve is flat across a few tokens (the first candidate's case)
DEVICE_TREE_MAX_WEIGHTS = 1_000_000_000


def _device_tree(model, batch: int, head_cost: float, make, like: torch.Tensor):
    """The default tree for this CPU (config.DEVICE_TREES: (shape, tau, head steps), the first the default): the
    candidate with the best expected rate, tau / (cost of a (nodes + 1)-token forward + head steps x head_cost), the
    verify costs measured on the call's own runner factory (runners/cost.py relative_curve). Another candidate
    replaces the first only when it is DEVICE_TREE_MARGIN ahead (two within noise of each other keep the default, the
    same in every process). The first is kept without measuring with OPTIMUM_UAG_DEVICE_TREE=0, above
    DEVICE_TREE_MAX_WEIGHTS weights per token, or when the measurement fails in a single-process run (a warning says
    so). Ranks of a multi-process run measure together (the forwards' collectives) and take rank 0's choice."""
    import os

    from ..runners.cost import relative_curve
    from .policy import weights_per_token

    shapes = [shape for shape, _, _ in DEVICE_TREES]
    choice = 0
    if os.environ.get("OPTIMUM_UAG_DEVICE_TREE", "1") != "0" and weights_per_token(model) <= DEVICE_TREE_MAX_WEIGHTS:
        agree = choice_agreement()
        try:
            curve = relative_curve(model, batch, [shape.nodes + 1 for shape in shapes], make)
        except Exception as err:  # (a model too short for the measurement's context, memory)
            if agree is not None:
                raise
            first = shapes[0]
            warnings.warn(f"optimum-uag: could not measure this device's verify cost ({type(err).__name__}: {err}); "
                          f"drafting the default tree {(first.depth, first.top_k, first.nodes)}", stacklevel=4)
            curve = None
        if curve is not None:
            rates = [tau / (curve[shape.nodes + 1] + steps * head_cost) for shape, tau, steps in DEVICE_TREES]
            best = max(range(len(rates)), key=rates.__getitem__)
            choice = best if rates[best] > DEVICE_TREE_MARGIN * rates[0] else 0
        if agree is not None:
            choice = agree(choice, like)
    return shapes[choice]


def _runs_on_the_engine(model) -> bool:
    """Whether the runner registry takes this model as a target (else it is refused by name: transformers' own
    generate() still serves a call that needs no draft)."""
    from ..runners.registry import select_runner

    try:
        select_runner(model)
    except ValueError:
        return False
    return True


def _say_target_only(model, assistant_model, stacklevel: int = 5) -> None:
    cost = cost_prior(model, assistant_model)
    warnings.warn(f"optimum-uag: the draft multiplies {cost:.1f}x the target's weights per token, so no draft length "
                  "can gain; generating with the target alone (draft_policy='fixed' drafts anyway)",
                  stacklevel=stacklevel)


def _target_only(model, assistant_model, input_ids, attention_mask, cfg, tokenizer, streamer, user_criteria,
                 logits_processor, prefix_allowed_tokens_fn) -> AssistedGenerateOutput:
    """A draft whose token multiplies more weights than the target's cannot gain at any length (E(K) <= K + 1
    tokens for more than 1 + K target steps): the call runs the fastest target-only path instead, transformers' own
    generate() (on the prepacked CPU weights), with every generation option as given. Said once, as a warning.
    (Unpadded batches only: a left-padded one runs the target alone on the engine's runners.)"""
    import copy

    from ..runners.packed import packed_weights

    _say_target_only(model, assistant_model)
    config = copy.deepcopy(cfg.generation_config)
    config.prompt_lookup_num_tokens = None
    config.max_new_tokens = cfg.max_new_tokens
    config.eos_token_id = list(cfg.eos_token_ids) or None
    config.pad_token_id = cfg.pad_token_id
    config.return_dict_in_generate = True
    pack = packed_weights(model) if model.device.type == "cpu" else None
    t0 = time.perf_counter()
    with pack if pack is not None else contextlib.nullcontext():
        out = model.generate(input_ids, attention_mask=attention_mask, generation_config=config, streamer=streamer,
                             stopping_criteria=user_criteria, logits_processor=logits_processor,
                             prefix_allowed_tokens_fn=prefix_allowed_tokens_fn, tokenizer=tokenizer)
    seconds = time.perf_counter() - t0
    new = out.sequences[:, input_ids.shape[1]:]
    steps = new.shape[1]
    if cfg.eos_token_ids:  # tokens each row generated up to and including its first EOS
        ended = torch.isin(new, torch.tensor(cfg.eos_token_ids, device=new.device))
        first = torch.where(ended.any(1), ended.float().argmax(1) + 1, torch.full_like(ended[:, 0], steps, dtype=torch.long))
        per_row = first.long()
    else:
        per_row = torch.full((new.shape[0],), steps, dtype=torch.long)
    generated = int(per_row.sum())
    metrics = Metrics(target_calls=steps, generated_tokens=generated, row_target_calls=generated, verify_seconds=seconds,
                      adaptive_rounds=steps, rounds_without_draft=steps, row_rounds_without_draft=generated,
                      target_forwards=steps)
    return AssistedGenerateOutput(sequences=out.sequences, metrics=metrics,
                                  scores=getattr(out, "scores", None) if cfg.output_scores else None,
                                  logits=getattr(out, "logits", None) if cfg.output_logits else None)


def _packs(runners, drafter) -> list:
    """The prepacked-weight contexts of this call's runners and feature head (none off CPU)."""
    from ..runners.packed import PackedCall, PackedWeights

    found = [r.call.pack for r in runners if isinstance(getattr(r, "call", None), PackedCall)]
    for d in (drafter, getattr(drafter, "inner", None)):
        if isinstance(getattr(d, "pack", None), PackedWeights):
            found.append(d.pack)
    return found


def _adaptive_policy(cfg: AssistedConfig, model, assistant_model) -> AdaptivePolicy | None:
    """The call's adaptive draft-length policy (engine/policy.py), or None (a fixed K)."""
    if not cfg.adaptive:
        return None
    cost = cost_prior(model, assistant_model)
    return AdaptivePolicy(cfg.num_assistant_tokens, max(ADAPTIVE_MAX_K, cfg.num_assistant_tokens),
                          tree=cfg.tree is not None, cost=cost)


def runner_device(runner) -> str:
    device = getattr(runner, "device", None)
    return getattr(device, "type", str(device))


def _compiled_plan(plan, model, torch_compile, cfg):
    """The plan with compiled runners and a fixed verify width (one target graph per batch size); blocks wider than
    the verify width (the prompt's prefill) run eagerly."""
    import dataclasses

    from ..runners.compile import CompileOptions, compiling_factory

    opts = CompileOptions.for_device(model.device, torch_compile)
    opts = dataclasses.replace(opts, max_tokens=max(2, cfg.max_draft_tokens + 1))
    return dataclasses.replace(plan, make_runner=compiling_factory(plan.make_runner, opts), static_verify=True)


def _per_step(kept: list[list]) -> tuple[tuple, tuple]:
    """Per-row lists of (scores, logits) -> one (B, V) tensor per generation step, as transformers returns them.
    A row that has already finished gets zeros at later steps (transformers computes scores for its padding)."""
    steps = max(len(row) for row in kept)
    zero = torch.zeros_like(next(pair for row in kept for pair in row)[0])
    return tuple(tuple(torch.stack([row[t][which] if t < len(row) else zero for row in kept]) for t in range(steps))
                 for which in (0, 1))
