"""Per-call counters of the decoding loop: observed once per round, mergeable across calls."""
from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields


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
    tree_rounds: int = 0  # rounds that verified a draft tree (engine/tree.py)
    tree_shapes: list = field(default_factory=list)  # (depth, top_k, nodes) of the call's draft trees
    adaptive_rounds: int = 0  # rounds whose draft length the adaptive policy chose (engine/policy.py)
    rounds_without_draft: int = 0  # of those, rounds it verified no draft (the target's own decoding step)
    row_rounds_without_draft: int = 0  # the same, counted per active row
    target_cache_bytes: int = 0  # the KV cache the target's runner wrote (where the runner reports it: Gaudi)
    draft_cache_bytes: int = 0  # the same for a draft model's runner

    @property
    def acceptance_rate(self) -> float:
        return self.accepted_tokens / self.draft_tokens if self.draft_tokens else 0.0

    @property
    def tau(self) -> float:
        return self.generated_tokens / self.row_target_calls if self.row_target_calls else 0.0

    @property
    def mean_draft_length(self) -> float:
        """Draft tokens per row and round that drafted (a tree: its depth; the prefill round counts as drafting)."""
        rounds = self.row_target_calls - self.row_rounds_without_draft
        return self.draft_tokens / rounds if rounds else 0.0

    @property
    def target_tokens(self) -> int:
        """Tokens produced by the target itself (corrections and bonus tokens)."""
        return self.generated_tokens - self.accepted_tokens

    @property
    def seconds(self) -> float:
        return self.draft_seconds + self.translate_seconds + self.verify_seconds + self.bookkeeping_seconds

    def observe(self, drafted: int, accepted: int, generated: int, active: int, draft_s: float, verify_s: float,
                other_s: float) -> None:
        """Count one round: tokens drafted / accepted / generated over the active rows, and where the time went."""
        self.target_calls += 1
        self.row_target_calls += active
        self.draft_tokens += drafted
        self.accepted_tokens += accepted
        self.generated_tokens += generated
        self.draft_seconds += draft_s
        self.verify_seconds += verify_s
        self.bookkeeping_seconds += other_s

    def merge(self, other: "Metrics") -> "Metrics":
        """Add another call's counters to these (shapes united); returns self."""
        for f in fields(self):
            mine, theirs = getattr(self, f.name), getattr(other, f.name)
            if isinstance(mine, list):
                setattr(self, f.name, sorted(set(map(tuple, mine)) | set(map(tuple, theirs))))
            elif f.name.endswith("_cache_bytes"):  # sizes, not counts
                setattr(self, f.name, max(mine, theirs))
            else:
                setattr(self, f.name, mine + theirs)
        return self

    def as_dict(self) -> dict:
        out = asdict(self)
        out.update(acceptance_rate=self.acceptance_rate, tau=self.tau, target_tokens=self.target_tokens,
                   mean_draft_length=self.mean_draft_length)
        return out
