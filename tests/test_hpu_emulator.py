"""The HPU emulator's graph wrapper against the behaviour of habana's own `wrap_in_hpu_graph`.

Reference: habana_frameworks/torch/hpu/graphs.py (`wrapped_hpugraph_forward`, `input_hash`, `copy_to`,
`get_user_input_tensor_list`): a graph is keyed by the hash of (args, kwargs) with tensors hashed by shape and
view (not dtype) and other objects by hash(); a replay copies the user input tensors (those inside
dicts/lists/tuples) into the capture's, replays the recorded device work and returns the capture's outputs.
Everything the forward reaches otherwise (module attributes, tensors inside objects) is what it was at capture.
"""
import pytest
import torch

from optimum_uag.testing.hpu_emulator import HPUEmulator, input_hash, wrap_in_hpu_graph


class Stateful(torch.nn.Module):
    """Reads a Python int, an attribute tensor (replaced between calls), and writes into a buffer in place."""

    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(3, 2)
        self.scale = 1
        self.state = torch.zeros(2)
        self.writes = torch.zeros(4)

    def forward(self, x, where=None, holder=None):
        self.state.add_(1)
        if where is not None:
            self.writes.index_copy_(0, where, torch.ones_like(where, dtype=self.writes.dtype))
        out = self.lin(x) * self.scale + self.state
        if holder is not None:
            out = out + holder.t
        return out


@pytest.fixture
def emu():
    with HPUEmulator() as emulator:
        yield emulator


def test_replay_copies_inputs_into_the_capture_and_returns_its_outputs(emu):
    m = wrap_in_hpu_graph(Stateful())
    x1 = torch.ones(1, 3)
    out1 = m(x1)
    x2 = torch.full((1, 3), 2.0)
    out2 = m(x2)
    assert out2 is out1  # the capture's own output object, refilled
    assert torch.equal(x1, x2)  # the new input was copied into the captured input tensor
    with torch.no_grad():
        expected = m.lin(x2) + 2  # state was incremented twice (in place, on the captured tensor)
    assert torch.allclose(out2, expected)
    assert emu.captures["Stateful"] == 1 and emu.replays["Stateful"] == 1


def test_attribute_state_is_frozen_at_capture(emu):
    m = wrap_in_hpu_graph(Stateful())
    m(torch.ones(1, 3))
    captured_state = m.state
    m.scale = 100  # a Python int read by the forward
    m.state = torch.full((2,), 50.0)  # an attribute tensor replaced (as KVCache.allocate does)
    out = m(torch.ones(1, 3))
    with torch.no_grad():
        frozen = m.lin(torch.ones(1, 3)) * 1 + 2
    assert torch.allclose(out, frozen)  # scale 1 and the OLD state tensor, incremented in place
    assert torch.equal(captured_state, torch.full((2,), 2.0)) and torch.equal(m.state, torch.full((2,), 50.0))


def test_in_place_index_writes_go_to_the_captured_buffer_at_captured_indices(emu):
    m = wrap_in_hpu_graph(Stateful())
    m(torch.ones(1, 3), where=torch.tensor([0]))
    m.writes.zero_()
    m(torch.ones(1, 3), where=torch.tensor([3]))  # a tensor index is an input: the replay honours it
    assert m.writes.tolist() == [0.0, 0.0, 0.0, 1.0]


def test_tensors_inside_objects_are_not_inputs_and_objects_key_by_hash(emu):
    class Holder:  # default hash: identity, as habana's input_hash falls back to hash(obj)
        def __init__(self, value):
            self.t = torch.full((2,), value)

    m = wrap_in_hpu_graph(Stateful())
    h = Holder(10.0)
    m(torch.ones(1, 3), holder=h)
    h.t = torch.full((2,), 1000.0)  # replaced inside the same object: the graph still reads the old tensor
    out = m(torch.ones(1, 3), holder=h)
    assert out.max() < 100
    assert emu.captures["Stateful"] == 1
    m(torch.ones(1, 3), holder=Holder(10.0))  # another object: another graph
    assert emu.captures["Stateful"] == 2


def test_graphs_are_keyed_by_shape_not_dtype(emu):
    m = wrap_in_hpu_graph(Stateful())
    m(torch.ones(1, 3))
    m(torch.ones(1, 3, dtype=torch.float64))
    assert emu.captures["Stateful"] == 1
    m(torch.ones(2, 3))
    assert emu.captures["Stateful"] == 2
    assert input_hash(((torch.ones(2),), {})) == input_hash(((torch.ones(2, dtype=torch.int64),), {}))
    assert input_hash(((torch.ones(2),), {"a": 1})) != input_hash(((torch.ones(2),), {"a": 2}))


def test_replays_run_no_python_and_bypass_and_clear_cache(emu):
    from optimum_uag.testing.hpu_emulator import mark_step

    calls = []

    class Counting(torch.nn.Module):
        def forward(self, x):
            calls.append(1)
            mark_step()
            return x * 2

    m = wrap_in_hpu_graph(Counting())
    m(torch.ones(2))
    m(torch.ones(2))
    assert len(calls) == 1 and emu.mark_steps == 1  # the replay ran no Python (no mark_step either)
    m(torch.ones(2), bypass_hpu_graphs=True)
    assert len(calls) == 2
    m.clear_cache()
    m(torch.ones(2))
    assert len(calls) == 3 and emu.captures["Counting"] == 2


@pytest.mark.parametrize("table_shape", ["SD", "11SD"])
def test_fused_rope_takes_optimum_habanas_call_shapes(table_shape):
    """Finding 9: optimum-habana calls FusedRoPE with the cos/sin tables as (1, 1, S, D) and position_ids (B, L)
    (modeling_all_models.apply_customized_rope_module); the kernel must index the positions, as transformers'
    apply_rotary_pos_emb does on the gathered cos/sin."""
    from transformers.models.llama.modeling_llama import apply_rotary_pos_emb as reference

    from optimum_uag.testing.hpu_emulator import RotaryPosEmbeddingHelperV2

    torch.manual_seed(0)
    B, H, L, S, D = 2, 3, 4, 16, 8
    q = torch.randn(B, H, L, D)
    cos, sin = torch.randn(S, D), torch.randn(S, D)
    position_ids = torch.tensor([[3, 4, 5, 6], [0, 1, 2, 3]])
    table = (cos, sin) if table_shape == "SD" else (cos[None, None], sin[None, None])
    got = RotaryPosEmbeddingHelperV2.apply(q, *table, position_ids)
    expected, _ = reference(q, q, cos[position_ids], sin[position_ids])
    torch.testing.assert_close(got, expected)


# ----------------------------------------------------------- blind spots habana's wrapper has (issue 22)
def test_wrapping_twice_nests_a_capture_in_a_capture(emu):
    """graphs.py's wrap_in_hpu_graph has no already-wrapped guard: a second wrap wraps the wrapper, whose first
    call starts a capture inside a capture. The emulator refuses it (an earlier version returned early)."""
    m = wrap_in_hpu_graph(wrap_in_hpu_graph(Stateful()))
    with pytest.raises(RuntimeError, match="wrapped twice|inside another"):
        m(torch.ones(1, 3))


def test_a_captured_input_passed_again_is_copied_onto_itself(emu):
    """graphs.py's copy_to copies every user input tensor into the captured one, with no identity check: passing
    the captured tensor again (a KV cache as an argument) is a full self-copy per replay. Counted, in bytes."""
    m = wrap_in_hpu_graph(Stateful())
    x = torch.ones(1, 3)
    m(x)
    m(x)
    assert emu.self_copy_bytes == x.numel() * x.element_size()
    m(torch.ones(1, 3))
    assert emu.self_copy_bytes == x.numel() * x.element_size()


def test_disabled_tensor_cache_replays_on_the_new_inputs(emu, monkeypatch):
    """PT_HPUGRAPH_DISABLE_TENSOR_CACHE=1 overrides the argument per call (graphs.py reads it on every forward);
    the replay then reads the call's own input tensors (replayV3) and the captured ones are not refilled."""
    monkeypatch.setenv("PT_HPUGRAPH_DISABLE_TENSOR_CACHE", "1")
    m = wrap_in_hpu_graph(Stateful())
    first = torch.ones(1, 3)
    m(first)
    second = torch.full((1, 3), 2.0)
    out = m(second)
    assert torch.equal(first, torch.ones(1, 3))  # with the tensor cache, it would now hold 2s
    assert emu.self_copy_bytes == 0
    monkeypatch.delenv("PT_HPUGRAPH_DISABLE_TENSOR_CACHE")
    ref = Stateful()
    ref.load_state_dict(m.state_dict())
    ref.state.fill_(1)
    assert torch.allclose(out, ref(second))


def test_hpu_kernels_refuse_out_of_range_positions(emu):
    """FusedRoPE gathers cos/sin rows by position_ids with no bounds check on a Gaudi: the emulator raises."""
    from optimum_uag.testing.hpu_emulator import apply_rotary_pos_emb

    x, table = torch.ones(1, 1, 2, 4), torch.ones(8, 4)
    apply_rotary_pos_emb(x, table, table, torch.tensor([[6, 7]]))
    with pytest.raises(IndexError, match="does not check bounds"):
        apply_rotary_pos_emb(x, table, table, torch.tensor([[7, 8]]))


def test_the_emulated_moe_kernel_is_a_gated_mixture_over_the_held_experts():
    """torch.ops.hpu.mixture_of_experts as optimum-habana calls it (w1 gate, w2 up, w3 down, nn.Linear layout with
    permuted_weights): each token gets the routed experts' SiLU-gated MLPs weighted by its router weights; with
    experts_min/max (expert parallelism) only the held experts contribute; [in, out] weights without permuted_weights.
    (The MoE classes' assisted output is also checked against transformers' own in test_gaudi.py.)"""
    torch.manual_seed(0)
    tokens, hidden, inner, experts = 5, 8, 12, 4
    x = torch.randn(tokens, hidden)
    gate = [torch.randn(inner, hidden) for _ in range(experts)]
    up = [torch.randn(inner, hidden) for _ in range(experts)]
    down = [torch.randn(hidden, inner) for _ in range(experts)]
    table = torch.tensor([[0, 2], [1, 3], [3, 0], [2, 1], [0, 1]])
    weights = torch.rand(tokens, 2)

    def expected(held):
        out = torch.zeros(tokens, hidden)
        for t in range(tokens):
            for k in range(2):
                e = int(table[t, k])
                if e in held:
                    h = torch.nn.functional.silu(gate[e] @ x[t]) * (up[e] @ x[t])
                    out[t] += weights[t, k] * (down[e] @ h)
        return out

    with HPUEmulator():
        moe = torch.ops.hpu.mixture_of_experts
        full = moe(hidden_states=x, expert_routing_table=table, router_weights=weights, w1=gate, w2=up, w3=down,
                   permuted_weights=True, activation="silu", experts_min=0, experts_max=experts - 1)
        part = moe(hidden_states=x, expert_routing_table=table, router_weights=weights, w1=gate[2:], w2=up[2:],
                   w3=down[2:], permuted_weights=True, activation="silu", experts_min=2, experts_max=3)
        plain = moe(hidden_states=x, expert_routing_table=table, router_weights=weights,
                    w1=[w.t() for w in gate], w2=[w.t() for w in up], w3=[w.t() for w in down],
                    permuted_weights=False, activation="silu", experts_min=0, experts_max=experts - 1)
    with pytest.raises(RuntimeError, match="outside the HPU emulator"):
        torch.ops.hpu.mixture_of_experts(hidden_states=x, expert_routing_table=table, router_weights=weights, w1=gate,
                                         w2=up, w3=down, permuted_weights=True, activation="silu", experts_min=0,
                                         experts_max=experts - 1)
    torch.testing.assert_close(full, expected(range(4)), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(part, expected({2, 3}), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(plain, full, rtol=1e-5, atol=1e-5)


def test_the_emulator_puts_back_the_deepspeed_accelerator_choice(monkeypatch):
    """While emulating, DeepSpeed runs its CPU accelerator; the variable is as it was afterwards (set or not)."""
    import os

    monkeypatch.delenv("DS_ACCELERATOR", raising=False)
    with HPUEmulator():
        assert os.environ["DS_ACCELERATOR"] == "cpu"
    assert "DS_ACCELERATOR" not in os.environ
    monkeypatch.setenv("DS_ACCELERATOR", "cuda")
    with HPUEmulator():
        assert os.environ["DS_ACCELERATOR"] == "cpu"
    assert os.environ["DS_ACCELERATOR"] == "cuda"
