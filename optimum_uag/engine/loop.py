"""The assisted decoding loop: draft -> translate -> verify -> commit, on static-shape caches."""
from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field

import torch
from transformers import GenerationConfig
from transformers.utils import ModelOutput

from ..runners import plan_for
from ..runners.registry import make_runner
from .config import AssistedConfig, resolve_config, validate_inputs
from .processors import TargetScorer
from .draft import ModelDrafter, PromptLookupDrafter, TokenSampler, output_vocab_size
from .state import DecodingState, Proposal
from .verify import LogitsWarper, Verdict, greedy_verify, speculative_sampling


@dataclass
class Metrics:
    """Counters of one assisted generation call (tau = generated tokens per target call, per row)."""

    target_calls: int = 0
    draft_tokens: int = 0
    accepted_tokens: int = 0
    generated_tokens: int = 0
    row_target_calls: int = 0
    draft_seconds: float = 0.0
    translate_seconds: float = 0.0
    verify_seconds: float = 0.0
    bookkeeping_seconds: float = 0.0
    target_shapes: list = field(default_factory=list)
    draft_shapes: list = field(default_factory=list)
    target_forwards: int = 0  # model invocations (a Gaudi token_idx draft may split a block into single tokens)
    draft_forwards: int = 0

    @property
    def acceptance_rate(self) -> float:
        return self.accepted_tokens / self.draft_tokens if self.draft_tokens else 0.0

    @property
    def tau(self) -> float:
        return self.generated_tokens / self.row_target_calls if self.row_target_calls else 0.0

    @property
    def target_tokens(self) -> int:
        """Tokens produced by the target itself (corrections and bonus tokens)."""
        return self.generated_tokens - self.accepted_tokens

    def as_dict(self) -> dict:
        out = asdict(self)
        out.update(acceptance_rate=self.acceptance_rate, tau=self.tau, target_tokens=self.target_tokens)
        return out


@dataclass
class AssistedGenerateOutput(ModelOutput):
    """`sequences` (prompt + new tokens, as transformers) and the call's `metrics`."""

    sequences: torch.Tensor = None
    metrics: Metrics = None
    scores: tuple | None = None  # output_scores: per generated token, the target's processed scores (B, V)
    logits: tuple | None = None  # output_logits: per generated token, the target's raw logits (B, V)


class Verifier:
    """Verify stage: one target forward over [unprocessed committed tokens, candidates]; accept a prefix.

    With logits processors (`scorer`), the target's logits at each position are processed with that position's
    prefix first, so greedy picks and the distribution verified against are those of target-only generate()."""

    def __init__(self, runner, warper: LogitsWarper | None, scorer: TargetScorer | None = None,
                 keep_scores: bool = False):
        self.runner = runner
        self.warper = warper
        self.scorer = scorer
        self.keep_scores = keep_scores
        self.last = None  # (scores, logits) of the last call, when keep_scores

    def __call__(self, state: DecodingState, proposal: Proposal) -> tuple[Verdict, torch.Tensor]:
        k = proposal.tokens.shape[1]
        width = state.prompt_len if state.round == 0 else 1
        start = state.length - width
        inputs = torch.cat([state.window(start, width), proposal.tokens], dim=1)
        logits = self.runner.forward(inputs, start, logits_to_keep=k + 1)
        finite = torch.isfinite(logits).all()
        if self.scorer is not None:
            scores = self.scorer(state, logits, proposal.tokens)  # warpers included when sampling
        elif self.warper is not None:
            scores = self.warper.scores(logits)
        else:
            scores = logits
        if self.keep_scores:
            self.last = (scores, logits)
        if self.warper is None:
            return greedy_verify(scores, proposal.tokens, proposal.valid), finite
        probs = proposal.probs
        if probs is None:  # a deterministic proposal is a one-hot distribution
            probs = torch.nn.functional.one_hot(proposal.tokens, logits.shape[-1]).float()
        verdict = speculative_sampling(torch.softmax(scores, -1), proposal.tokens, probs, proposal.valid)
        return verdict, finite


def commit(state: DecodingState, verdict: Verdict, eos_ids: torch.Tensor | None, stopping_criteria=None) -> torch.Tensor:
    """Append each row's new tokens, stopping at EOS / max_new_tokens; return how many each row took."""
    width = verdict.tokens.shape[1]
    offsets = torch.arange(width, device=state.tokens.device)
    n_new = verdict.accepted + 1
    hit_eos = torch.zeros_like(state.done)
    if eos_ids is not None:
        is_eos = torch.isin(verdict.tokens, eos_ids) & (offsets < n_new[:, None])
        hit_eos = is_eos.any(1)
        n_new = torch.where(hit_eos, is_eos.long().argmax(1) + 1, n_new)
    n_new = torch.minimum(n_new, state.max_new_tokens - state.generated)
    n_new = torch.where(state.done, 0, n_new)
    slots = state.length[:, None] + offsets
    current = state.tokens.gather(1, slots)
    state.tokens.scatter_(1, slots, torch.where(offsets < n_new[:, None], verdict.tokens, current))
    if stopping_criteria:
        n_new, stopped = _apply_stopping_criteria(state, n_new, stopping_criteria)
        hit_eos |= stopped
    state.length += n_new
    state.generated += n_new
    state.done |= (hit_eos & (n_new > 0)) | (state.generated >= state.max_new_tokens)
    return n_new


def _apply_stopping_criteria(state: DecodingState, n_new: torch.Tensor, criteria) -> tuple[torch.Tensor, torch.Tensor]:
    """User stopping criteria, checked after every new token of every row (as transformers does per step)."""
    n_list = n_new.tolist()
    stopped = [False] * len(n_list)
    for row, n in enumerate(n_list):
        base = int(state.length[row])
        for j in range(n):
            if bool(criteria(state.tokens[row : row + 1, : base + j + 1], None).any()):
                n_list[row], stopped[row] = j + 1, True
                break
    device = n_new.device
    return torch.tensor(n_list, device=device), torch.tensor(stopped, device=device)


class Schedule:
    """Draft length per round: constant, heuristic (+2 if all accepted, else -1) or confidence-stopped."""

    def __init__(self, cfg: AssistedConfig):
        self.k = cfg.num_assistant_tokens
        self.kind = cfg.schedule
        self.max_k = cfg.max_assistant_tokens

    def update(self, all_accepted: bool) -> None:
        if self.kind == "heuristic":
            self.k = min(self.max_k, self.k + 2) if all_accepted else max(1, self.k - 1)


def pad_proposal(proposal: Proposal, width: int) -> Proposal:
    """Pad a proposal to `width` candidates, the extra ones invalid (static verify shape)."""
    tokens = proposal.tokens
    batch, k = tokens.shape
    valid = proposal.valid if proposal.valid is not None else torch.ones_like(tokens, dtype=torch.bool)
    if k >= width:
        return Proposal(tokens=tokens, probs=proposal.probs, valid=valid)
    extra = width - k
    tokens = torch.cat([tokens, tokens[:, -1:].expand(-1, extra)], 1)
    valid = torch.cat([valid, valid.new_zeros(batch, extra)], 1)
    probs = proposal.probs
    if probs is not None:
        probs = torch.cat([probs, probs[:, -1:].expand(-1, extra, -1)], 1)
    return Proposal(tokens=tokens, probs=probs, valid=valid)


def build_drafter(model, assistant_model, tokenizer, assistant_tokenizer, state, capacity, cfg, sampler,
                  runner_factory=make_runner, processors=None):
    """Pick the draft (+translate) stage for this model pair."""
    vocab_size = output_vocab_size(model)
    if assistant_model is None:
        if not cfg.prompt_lookup_num_tokens:
            raise ValueError("pass assistant_model=... (a draft model) or prompt_lookup_num_tokens=... (n-gram drafting)")
        return PromptLookupDrafter(cfg.max_matching_ngram_size, vocab_size, cfg.do_sample)
    threshold = cfg.confidence_threshold if cfg.schedule == "confidence" else None
    from ..translation import same_vocabulary

    if tokenizer is None and assistant_tokenizer is not None:
        raise ValueError(
            "tokenizer is missing: pass both tokenizer= (the target's) and assistant_tokenizer= (the assistant's), "
            "or neither when the two models share one tokenizer"
        )
    if assistant_tokenizer is None:  # one tokenizer for both (tokenizer= alone serves stop_strings, as in transformers)
        draft_vocab = assistant_model.config.vocab_size
        if draft_vocab != model.config.vocab_size:
            raise ValueError(
                f"the assistant's vocabulary ({draft_vocab} tokens) differs from the model's "
                f"({model.config.vocab_size}); pass tokenizer= and assistant_tokenizer= (assistant_tokenizer is "
                "missing) to use Universal Assisted Generation across tokenizers"
            )
        return ModelDrafter(assistant_model, state, capacity, vocab_size, sampler, threshold, runner_factory,
                            processors)
    if same_vocabulary(tokenizer, assistant_tokenizer):
        return ModelDrafter(assistant_model, state, capacity, vocab_size, sampler, threshold, runner_factory,
                            processors)
    from ..universal import UniversalDrafter

    return UniversalDrafter(
        assistant_model, tokenizer, assistant_tokenizer, state, capacity, vocab_size, sampler, threshold, cfg,
        runner_factory,
    )


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
                       generation_config, streamer, stopping_criteria, logits_processor, prefix_allowed_tokens_fn,
                       kwargs) -> AssistedGenerateOutput:
    if input_ids is None:
        input_ids = kwargs.pop("inputs", None)
    if input_ids is None:
        raise ValueError("input_ids is required (a (batch, length) tensor of the target tokenizer's ids)")
    kwargs = dict(kwargs)
    torch_compile = kwargs.pop("torch_compile", False)
    plan = plan_for(model, kwargs, generation_config)  # pops the backend's own knobs (Gaudi: lazy_mode, ...)
    cfg = resolve_config(model, assistant_model, generation_config, kwargs)
    if torch_compile:
        plan = _compiled_plan(plan, model, torch_compile, cfg)
    if plan.ignore_eos:
        cfg.eos_token_ids = ()
    input_ids, attention_mask = validate_inputs(model, assistant_model, input_ids, attention_mask, cfg)
    if cfg.num_return_sequences > 1:  # rows of the batch, as transformers expands them
        input_ids = input_ids.repeat_interleave(cfg.num_return_sequences, 0)
        attention_mask = attention_mask.repeat_interleave(cfg.num_return_sequences, 0)
    stopping_criteria = _stopping_criteria(cfg, tokenizer, stopping_criteria)
    if streamer is not None and input_ids.shape[0] > 1:
        raise ValueError("streamer supports batch size 1 only (as in transformers); drop streamer= for batches")
    pad = (attention_mask == 0).sum(1)
    capacity = input_ids.shape[1] + cfg.max_new_tokens + cfg.max_assistant_tokens + 2
    state = DecodingState.create(input_ids, pad, capacity, cfg.pad_token_id, cfg.max_new_tokens)
    warper = LogitsWarper(cfg.temperature, cfg.top_k, cfg.top_p) if cfg.do_sample else None
    sampler = TokenSampler(warper, need_confidence=cfg.schedule == "confidence")
    made: list = []  # every runner of this call, closed at the end (a Gaudi runner puts back the model's cache)

    def runner_factory(*args, **kwargs):
        made.append(plan.make_runner(*args, **kwargs))
        return made[-1]

    try:
        return _decode(model, assistant_model, tokenizer, assistant_tokenizer, input_ids, pad, state, cfg, plan,
                       runner_factory, streamer, stopping_criteria, logits_processor, prefix_allowed_tokens_fn,
                       capacity, warper, sampler)
    finally:
        for runner in reversed(made):
            close = getattr(runner, "close", None)
            if close is not None:
                close()


def _decode(model, assistant_model, tokenizer, assistant_tokenizer, input_ids, pad, state, cfg, plan, runner_factory,
            streamer, stopping_criteria, logits_processor, prefix_allowed_tokens_fn, capacity, warper, sampler):
    """The decoding loop of one call: draft, verify, commit (translation inside the drafter), until every row ends."""
    scorer = TargetScorer(model, cfg.generation_config, input_ids, cfg.max_new_tokens, logits_processor,
                          prefix_allowed_tokens_fn)
    drafter = build_drafter(model, assistant_model, tokenizer, assistant_tokenizer, state, capacity, cfg, sampler,
                            runner_factory, scorer.for_draft() if scorer.needed else None)
    keep_scores = cfg.output_scores or cfg.output_logits
    verifier = Verifier(runner_factory(model, state.batch_size, capacity, pad), warper,
                        scorer if scorer.needed else None, keep_scores)
    kept: list[list] = [[] for _ in range(state.batch_size)]  # per row: (scores, logits) of each new token
    # static shapes (Gaudi): every round verifies the same number of candidates, padded as invalid
    static_k = None if not plan.static_verify else (cfg.num_assistant_tokens if cfg.schedule == "constant"
                                           else cfg.max_assistant_tokens)
    eos_ids = torch.tensor(cfg.eos_token_ids, device=input_ids.device) if cfg.eos_token_ids else None
    schedule, metrics = Schedule(cfg), Metrics()
    if streamer is not None:
        streamer.put(input_ids.cpu())

    while True:
        t0 = time.perf_counter()
        proposal = drafter.propose(state, schedule.k)
        if static_k is not None:
            proposal = pad_proposal(proposal, static_k)
        t1 = time.perf_counter()
        verdict, finite = verifier(state, proposal)
        t2 = time.perf_counter()
        active = ~state.done
        n_new = commit(state, verdict, eos_ids, stopping_criteria)
        if keep_scores:
            for b, n in enumerate(n_new.tolist()):
                kept[b] += [(verifier.last[0][b, j].clone(), verifier.last[1][b, j].clone()) for j in range(n)]
        t3 = time.perf_counter()
        if hasattr(drafter, "commit"):  # translate the new target tokens back for the draft (UAG)
            drafter.commit(state, n_new)
        t4 = time.perf_counter()
        k = proposal.tokens.shape[1] if proposal.valid is None else proposal.valid.sum(1)  # drafted per row
        accepted = torch.minimum(verdict.accepted, n_new)
        stats = torch.stack([
            state.done.all().long(), finite.long(), ((verdict.accepted == k) | ~active).all().long(),
            (active.long() * k).sum(), accepted.sum(), n_new.sum(), active.sum(),
        ]).tolist()  # the one host sync of the round
        all_done, ok, all_accepted, drafted, n_acc, n_gen, n_active = stats
        if not ok:
            raise FloatingPointError(
                "the target produced NaN/inf logits; check the model's dtype (fp16 overflow) and weights"
            )
        if streamer is not None and n_gen:
            streamer.put(state.tokens[0, state.length[0] - n_gen : state.length[0]].cpu())
        state.round += 1
        schedule.update(bool(all_accepted))
        metrics.target_calls += 1
        metrics.row_target_calls += n_active
        metrics.draft_tokens += drafted
        metrics.accepted_tokens += n_acc
        metrics.generated_tokens += n_gen
        metrics.draft_seconds += t1 - t0
        metrics.verify_seconds += t2 - t1
        metrics.translate_seconds += t4 - t3
        metrics.bookkeeping_seconds += time.perf_counter() - t2 - (t4 - t3)
        if all_done:
            break
    if streamer is not None:
        streamer.end()
    propose_translate = getattr(drafter, "translate_seconds", 0.0)  # translation inside the draft stage
    metrics.translate_seconds += propose_translate
    metrics.draft_seconds -= propose_translate
    metrics.target_shapes = sorted(verifier.runner.shapes)
    metrics.draft_shapes = sorted(drafter.shapes)
    metrics.target_forwards = verifier.runner.calls
    runner = getattr(drafter, "runner", None)
    metrics.draft_forwards = runner.calls if runner is not None else 0
    out = AssistedGenerateOutput(sequences=state.sequences(), metrics=metrics)
    if keep_scores:
        scores, logits = _per_step(kept)
        out.scores = scores if cfg.output_scores else None
        out.logits = logits if cfg.output_logits else None
    return out


def _compiled_plan(plan, model, torch_compile, cfg):
    """The plan with compiled runners and a fixed verify width (one target graph per batch size); blocks wider than
    the verify width (the prompt's prefill) run eagerly."""
    import dataclasses

    from ..runners.compile import CompileOptions, compiling_factory

    opts = CompileOptions.for_device(model.device, torch_compile)
    width = cfg.num_assistant_tokens if cfg.schedule == "constant" else cfg.max_assistant_tokens
    opts = dataclasses.replace(opts, max_tokens=max(2, width + 1))
    return dataclasses.replace(plan, make_runner=compiling_factory(plan.make_runner, opts), static_verify=True)


def _per_step(kept: list[list]) -> tuple[tuple, tuple]:
    """Per-row lists of (scores, logits) -> one (B, V) tensor per generation step, as transformers returns them.
    A row that has already finished gets zeros at later steps (transformers computes scores for its padding)."""
    steps = max(len(row) for row in kept)
    zero = torch.zeros_like(next(pair for row in kept for pair in row)[0])
    return tuple(tuple(torch.stack([row[t][which] if t < len(row) else zero for row in kept]) for t in range(steps))
                 for which in (0, 1))


def _stopping_criteria(cfg, tokenizer, user_criteria):
    """The user's stopping criteria plus stop_strings / max_time from the generation config (transformers')."""
    from transformers.generation.stopping_criteria import MaxTimeCriteria, StopStringCriteria, StoppingCriteriaList

    criteria = StoppingCriteriaList(user_criteria or [])
    if cfg.stop_strings:
        if tokenizer is None:
            raise ValueError("stop_strings needs the target's tokenizer: pass tokenizer=... to generate() "
                             "(as transformers requires)")
        criteria.append(StopStringCriteria(tokenizer=tokenizer, stop_strings=list(cfg.stop_strings)))
    if cfg.generation_config is not None and cfg.generation_config.max_time is not None:
        criteria.append(MaxTimeCriteria(max_time=cfg.generation_config.max_time))
    return criteria or None
