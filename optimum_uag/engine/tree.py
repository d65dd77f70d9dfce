"""Dynamic draft trees on static shapes (EAGLE-2, Li et al. 2024): the tree a drafter proposes, how the target
verifies it in one forward, and which path it accepts.

A tree has N nodes per row (a fixed bucket: one verify shape), stored parents-before-children. The verify block
is [root, node_1 .. node_N]: the root is the row's last committed token, node i sits at block column i, attends
to the committed tokens and to its ancestors, and its position is the root's + its depth. Greedy acceptance walks
from the root: a node is accepted when its token equals the target's argmax at its parent and its parent was
accepted; the children of a node carry distinct tokens, so the accepted nodes form one path. Sampling is the same
walk with the target's sample at each node in place of its argmax (lossless: see Verifier._verify_tree). The path's keys /
values are then moved to contiguous slots after the root (one fixed-size gather per layer; on eager CPU runs trimmed to the columns that move), so the caches look
exactly as after a chain of that path.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class TreeShape:
    """depth D (levels below the root), top_k W (children per expanded node and frontier width), nodes N (the
    verify bucket: the best N of the expanded candidates by cumulative draft log-probability)."""

    depth: int
    top_k: int
    nodes: int

    def __post_init__(self):
        for name in ("depth", "top_k", "nodes"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"tree_{name} must be an integer >= 1, got {value!r}")
        most = self.top_k + (self.depth - 1) * self.top_k * self.top_k
        if self.nodes > most:
            raise ValueError(f"tree_nodes={self.nodes} exceeds the {most} candidates a tree of depth {self.depth} "
                             f"and top_k {self.top_k} expands; lower tree_nodes or raise tree_depth / tree_top_k")


@dataclass
class Tree:
    """The structure of one round's draft trees; the node tokens are the Proposal's `tokens` (B, N)."""

    parents: torch.Tensor  # (B, N) block column of each node's parent (0 = the root)
    depths: torch.Tensor  # (B, N) 1..D
    ancestors: torch.Tensor  # (B, N + 1, N + 1) bool: column j is an ancestor of (or is) block column i
    max_depth: int

    @property
    def block_depths(self) -> torch.Tensor:
        """(B, N + 1): the root's depth 0, then the nodes'."""
        return torch.cat([self.depths.new_zeros(self.depths.shape[0], 1), self.depths], 1)


def ancestor_matrix(parents: torch.Tensor, max_depth: int) -> torch.Tensor:
    """(B, N + 1, N + 1) ancestor-or-self matrix of the block [root, nodes] from each node's parent column."""
    batch, n = parents.shape
    full = torch.cat([parents.new_zeros(batch, 1), parents], 1)  # the root is its own parent
    eye = torch.eye(n + 1, dtype=torch.bool, device=parents.device).expand(batch, -1, -1)
    anc = eye
    for _ in range(max_depth):
        anc = eye | anc.gather(1, full[:, :, None].expand(-1, -1, n + 1))
    return anc


def chain_tree(batch: int, k: int, device) -> Tree:
    """A chain of k nodes as a tree (node i's parent is node i - 1)."""
    parents = torch.arange(k, device=device).expand(batch, -1)
    depths = torch.arange(1, k + 1, device=device).expand(batch, -1)
    return Tree(parents=parents, depths=depths, ancestors=ancestor_matrix(parents, k), max_depth=k)


@dataclass
class TreePath:
    """The accepted path of every row: block columns of its nodes (padded), its length, its last column."""

    columns: torch.Tensor  # (B, D) block columns of the accepted nodes in depth order (padding: repeats)
    accepted: torch.Tensor  # (B,) accepted nodes (the path's depth)
    last: torch.Tensor  # (B,) block column of the deepest accepted node (0 = the root)


def tree_accept(target_tokens: torch.Tensor, nodes: torch.Tensor, tree: Tree,
                       valid: torch.Tensor | None = None) -> TreePath:
    """The deepest path whose every node equals the target's token at its parent (its argmax when greedy, its
    sample when sampling).

    target_tokens: (B, N + 1) the target's token at every block column; nodes: (B, N); valid: (B, N) or None."""
    match = nodes == target_tokens.gather(1, tree.parents)
    if valid is not None:
        match &= valid
    ok = torch.cat([torch.ones_like(match[:, :1]), match], 1)  # the root is always "accepted"
    accepted = ~(tree.ancestors & ~ok[:, None, :]).any(-1)  # every ancestor-or-self matched
    depth = torch.where(accepted, tree.block_depths, -1)
    last = depth.argmax(1)  # the deepest accepted column (first among equals: unique anyway)
    return path_of(tree, last)


def same_prefix_columns(tree: Tree, nodes: torch.Tensor, valid: torch.Tensor | None = None) -> torch.Tensor:
    """(B, N + 1): for every block column, the first valid column whose tokens from the root are the same (itself
    when unique). A lookup branch can repeat a head node (the same token under the same parent): sampling draws one
    target sample per distinct prefix and every duplicate reads it, so the tree acts as the trie of its token paths.
    (Two independent samples at two copies of one prefix, with the round taking whichever copy goes deeper, would
    favour drafted tokens: not the target's distribution.)"""
    batch, n = nodes.shape
    device = nodes.device
    tokens = torch.cat([nodes.new_full((batch, 1), -1), nodes], 1)  # the root's own token is unique here
    parents = torch.cat([tree.parents.new_zeros(batch, 1), tree.parents], 1)
    ok = torch.ones(batch, n + 1, dtype=torch.bool, device=device)
    if valid is not None:  # a valid node under an invalid one is never reached either (its logits are another's)
        ok[:, 1:] = valid
        ok = ~(tree.ancestors & ~ok[:, None, :]).any(-1)
    column = torch.arange(n + 1, device=device)
    earlier = column[None, :] <= column[:, None]  # [i, j]: j at or before i
    same_token = (tokens[:, :, None] == tokens[:, None, :]) & earlier & (ok[:, None, :] | torch.eye(
        n + 1, dtype=torch.bool, device=device))
    first = column.expand(batch, -1)
    for _ in range(tree.max_depth):  # one level of the tree settles per pass (parents before children)
        up = first.gather(1, parents)
        same = same_token & (up[:, :, None] == up[:, None, :])
        first = torch.where(same, column, n + 1).min(-1).values  # the first such column (itself at the latest)
    return first


def path_of(tree: Tree, last: torch.Tensor) -> TreePath:
    """The path from the root to block column `last` (B,): its node columns in depth order, padded to D."""
    batch, width = tree.ancestors.shape[:2]
    on_path = tree.ancestors[torch.arange(batch, device=last.device), last]  # (B, N + 1)
    on_path[:, 0] = False
    columns = torch.arange(width, device=last.device).expand(batch, -1)
    # nodes are stored parents-before-children: the path's columns in block order are in depth order
    ordered = torch.where(on_path, columns, width).sort(1).values[:, : tree.max_depth]
    accepted = on_path.sum(1)
    filler = torch.where(accepted > 0, last, 0)[:, None]
    ordered = torch.where(ordered < width, ordered, filler)
    return TreePath(columns=ordered, accepted=accepted, last=last)


def tree_visibility(tree: Tree, start: torch.Tensor, pad: torch.Tensor, key_slots: torch.Tensor) -> torch.Tensor:
    """(B, N + 1, C) bool: block column i (written at slot start + i) sees the committed slots pad..start - 1 and
    its ancestors' slots (itself included)."""
    batch, width = tree.ancestors.shape[:2]
    committed = (key_slots >= pad[:, None]) & (key_slots < start[:, None])  # (B, C)
    visible = committed[:, None, :].expand(-1, width, -1).clone()
    slots = (start[:, None] + torch.arange(width, device=start.device))[:, None, :].expand(-1, width, -1)
    return visible.scatter_(2, slots, tree.ancestors)
