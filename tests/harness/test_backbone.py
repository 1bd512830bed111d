import shutil

import pytest
import torch

from harness.backbone import Backbone, BackboneConfig


def _cfg(**kw):
    base = dict(vocab_in=11, vocab_out=10, seq_len=12, d_model=32, n_layers=2, n_heads=4)
    base.update(kw)
    return BackboneConfig(**base)


def _randomize(model, std=0.1):
    torch.manual_seed(0)
    for p in model.parameters():
        torch.nn.init.normal_(p, std=std)
    return model


def test_shapes_and_time_conditioning():
    b = Backbone(_cfg(time_conditioning=True))
    x = torch.randint(0, 11, (3, 12))
    assert b(x, torch.rand(3)).shape == (3, 12, 10)


def test_causal_backbone_ignores_the_future():
    b = _randomize(Backbone(_cfg(causal=True))).eval()
    x = torch.randint(0, 11, (2, 12))
    y = x.clone()
    y[:, 7:] = (y[:, 7:] + 1) % 11
    assert torch.allclose(b(x)[:, :7], b(y)[:, :7], atol=1e-6)
    assert not torch.allclose(b(x)[:, 7:], b(y)[:, 7:])


def test_bidirectional_backbone_sees_the_future():
    b = _randomize(Backbone(_cfg(causal=False))).eval()
    x = torch.randint(0, 11, (2, 12))
    y = x.clone()
    y[:, -1] = (y[:, -1] + 1) % 11
    assert not torch.allclose(b(x)[:, 0], b(y)[:, 0])


def test_padding_is_never_attended():
    b = _randomize(Backbone(_cfg())).eval()
    x = torch.randint(0, 11, (1, 12))
    mask = torch.ones(1, 12, dtype=torch.long)
    mask[:, 8:] = 0
    y = x.clone()
    y[:, 8:] = (y[:, 8:] + 3) % 11
    assert torch.allclose(b(x, attention_mask=mask)[:, :8], b(y, attention_mask=mask)[:, :8], atol=1e-6)


def test_rotary_breaks_permutation_equivariance():
    # without position information a bidirectional transformer is permutation-equivariant
    b = _randomize(Backbone(_cfg()), std=0.5).eval()
    x = torch.randint(0, 11, (1, 12))
    perm = torch.randperm(12, generator=torch.Generator().manual_seed(1))
    out, out_perm = b(x), b(x[:, perm])
    assert not torch.allclose(out[:, perm], out_perm, atol=1e-2)
    b.blocks[0].rotary.cos.fill_(1.0)
    b.blocks[0].rotary.sin.fill_(0.0)  # identity rotation (one table for every block): equivariance comes back
    assert torch.allclose(b(x)[:, perm], b(x[:, perm]), atol=1e-4)


def test_zero_init_head_predicts_uniform():
    b = Backbone(_cfg())
    logits = b(torch.randint(0, 11, (2, 12)))
    assert torch.all(logits == 0)


def test_too_long_sequence_rejected():
    b = Backbone(_cfg())
    try:
        b(torch.zeros(1, 13, dtype=torch.long))
    except ValueError as exc:
        assert "seq_len" in str(exc)
    else:
        raise AssertionError("expected a ValueError")


@pytest.mark.parametrize("placement", ["input", "blocks"])
def test_neighbour_mixer_keeps_the_causal_backbone_causal_and_padding_out(placement):
    b = _randomize(Backbone(_cfg(causal=True, mixer_width=3, mixer_placement=placement))).eval()
    x = torch.randint(0, 11, (2, 12))
    y = x.clone()
    y[:, 7:] = (y[:, 7:] + 1) % 11
    assert torch.allclose(b(x)[:, :7], b(y)[:, :7], atol=1e-6)
    assert not torch.allclose(b(x)[:, 7:], b(y)[:, 7:])
    bi = _randomize(Backbone(_cfg(mixer_width=5, mixer_placement=placement))).eval()
    mask = torch.ones(1, 12, dtype=torch.long)
    mask[:, 8:] = 0
    z = x[:1].clone()
    w = z.clone()
    w[:, 8:] = (w[:, 8:] + 3) % 11  # padding next to real tokens: the mixer must not carry it in
    assert torch.allclose(bi(z, attention_mask=mask)[:, :8], bi(w, attention_mask=mask)[:, :8], atol=1e-6)


def test_neighbour_mixer_mixes_the_width_nearest_embeddings():
    from harness.backbone import NeighbourMixer

    h = torch.randn(1, 6, 2)
    for causal, taps in ((False, (-1, 0, 1)), (True, (-2, -1, 0))):
        mixer = NeighbourMixer(2, 3, causal)
        with torch.no_grad():
            mixer.conv.weight.copy_(torch.tensor([[[1.0, 10.0, 100.0]], [[1.0, 10.0, 100.0]]]))
        out = mixer(h)
        for i in range(6):  # weight k of the kernel meets the neighbour at offset taps[k]
            want = h[0, i] + sum(w * h[0, i + o] for w, o in zip((1.0, 10.0, 100.0), taps) if 0 <= i + o < 6)
            assert torch.allclose(out[0, i], want, atol=1e-5)


def test_a_zero_width_mixer_creates_no_parameters():
    torch.manual_seed(3)
    plain = Backbone(_cfg())
    torch.manual_seed(3)
    keyed = Backbone(_cfg(mixer_width=0))
    assert keyed.mixer is None
    assert all(torch.equal(a, b) for a, b in zip(plain.state_dict().values(), keyed.state_dict().values()))


def _rotary_reference(x, cos, sin):
    """The rotation as first written: x * (cos, cos) + swap(x) * (-sin, sin), pairs interleaved."""
    cos2 = torch.stack((cos, cos), -1).flatten(-2)
    sin2 = torch.stack((-sin, sin), -1).flatten(-2)
    return x * cos2 + x.unflatten(-1, (-1, 2)).flip(-1).flatten(-2) * sin2


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
@pytest.mark.parametrize("head", [2, 6, 8, 16, 64])
def test_rotary_equals_its_formula_bit_for_bit_on_strided_inputs(dtype, head):
    from harness.backbone import Rotary

    rot = Rotary(head, 32)
    g = torch.Generator().manual_seed(head)
    fused = torch.randn(3, 32, 3, 4, head, generator=g).to(dtype)
    fused[0, :3] = 0.0  # exact zeros: the no-graph pass may give a zero of the other sign, never another value
    x = fused.permute(2, 0, 3, 1, 4)[:2]  # a fused projection's (2, B, H, L, Dh) view
    positions = torch.arange(32).flip(0) % 20
    for pos in (None, positions):
        rows = slice(0, 32) if pos is None else pos
        want = _rotary_reference(x, rot.cos[rows].to(dtype), rot.sin[rows].to(dtype))
        with torch.no_grad():
            got = rot(x, pos)
            assert torch.equal(got, want)
            # dense, in the projection's (B, L, 2, H, Dh) memory order
            assert got.permute(1, 3, 0, 2, 4).is_contiguous()
            assert torch.equal(rot(x.contiguous(), pos), want) and rot(x.contiguous(), pos).is_contiguous()
        leaf = x.detach().clone().requires_grad_(True)
        graph = rot(leaf, pos)
        assert graph.is_contiguous() and torch.equal(graph, want)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_attention_output_needs_no_copy_without_a_graph(dtype):
    # the rotated queries lie in (B, L, H, Dh) order, so SDPA answers in that order and the block
    # hands its output to the projection as a view; the copy slot stays unused
    from harness.backbone import Workspace

    b = _randomize(Backbone(_cfg(n_layers=2)), std=0.3).to(dtype).eval()
    h = torch.randn(2, 12, 32, dtype=dtype)
    ws = Workspace()
    with torch.no_grad():
        got = b.blocks[0](h, None, None, workspace=ws)
    assert set(ws._slots) == {"wide", "pair"}
    assert torch.equal(got, b.blocks[0](h, None, None))


@pytest.mark.parametrize(
    "kw",
    [dict(), dict(time_conditioning=True), dict(causal=True), dict(mixer_width=3, mixer_placement="blocks")],
    ids=["plain", "adaln", "causal", "mixer"],
)
def test_inference_forward_equals_the_graph_forward_bit_for_bit(kw):
    # without a graph the blocks write residuals and the activation into their own buffers: same numbers
    b = _randomize(Backbone(_cfg(**kw)), std=0.3).eval()
    x = torch.randint(0, 11, (3, 12))
    t = torch.rand(3) if kw.get("time_conditioning") else None
    mask = torch.ones(3, 12, dtype=torch.long)
    mask[1, 9:] = 0
    layout = (torch.rand(12, 12, generator=torch.Generator().manual_seed(3)) < 0.5) | torch.eye(12, dtype=torch.bool)
    for extra in (dict(), dict(attention_mask=mask), dict(attn_mask=layout, outputs=6)):
        graph = b(x, t, **extra)
        assert graph.requires_grad
        with torch.no_grad():
            assert torch.equal(b(x, t, **extra), graph)


def _storages(ws):
    return {t.untyped_storage().data_ptr() for t in ws._slots.values()}


@pytest.mark.parametrize("kw", [dict(), dict(time_conditioning=True)], ids=["plain", "adaln"])
def test_blocks_share_one_workspace_and_return_their_own_output(kw):
    from harness.backbone import Workspace

    b = _randomize(Backbone(_cfg(n_layers=3, **kw)), std=0.3).eval()
    h = torch.randn(2, 12, 32)
    c = torch.randn(2, 64) if kw else None
    ws = Workspace()
    with torch.no_grad():
        want = [blk(h, c, None) for blk in b.blocks]  # each block on its own, fresh memory
        first = b.blocks[0](h, c, None, workspace=ws)
        slots = _storages(ws)
        assert {"wide", "pair"} <= set(ws._slots) <= {"wide", "pair", "tmp"}
        later = [blk(h, c, None, workspace=ws) for blk in b.blocks[1:]]
    assert _storages(ws) == slots  # the later blocks wrote into the first block's memory
    for got, exp in zip([first, *later], want, strict=True):
        assert torch.equal(got, exp)
        assert got.untyped_storage().data_ptr() not in slots  # the output is the caller's, not a slot
    assert torch.equal(first, want[0])  # still intact after the later blocks reused the slots


def test_key_values_from_a_workspace_block_are_new_tensors():
    from harness.backbone import KVCache, Workspace

    b = _randomize(Backbone(_cfg()), std=0.3).eval()
    x = torch.randint(0, 11, (2, 8))
    cache, ws = KVCache(), Workspace()
    with torch.no_grad():
        h = b._embed(x[:, :4], torch.arange(4))
        out, (k, v) = b.blocks[0](h, None, None, torch.arange(4), cache.past(0, None, h, 4), workspace=ws)
    assert not ({k.untyped_storage().data_ptr(), v.untyped_storage().data_ptr()} & _storages(ws))
    # and the cached sampler's pass equals the whole forward under the block-causal layout
    layout = torch.ones(8, 8, dtype=torch.bool)
    layout[:4, 4:] = False
    with torch.no_grad():
        whole = b(x, attn_mask=layout)
        b.extend(x[:, :4], cache, store=True)
        torch.testing.assert_close(b.extend(x[:, 4:], cache), whole[:, 4:])


def test_workspace_only_without_graph_or_autocast():
    from harness.backbone import Workspace

    h = torch.randn(2, 3)
    assert not Workspace.usable(h)  # autograd keeps the intermediates
    with torch.no_grad():
        assert Workspace.usable(h)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            assert not Workspace.usable(h)  # out= products are not autocast
    b = _randomize(Backbone(_cfg()), std=0.3).eval()
    x = torch.randint(0, 11, (2, 12))
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        amp = b(x)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert torch.equal(b(x).detach(), amp)  # the no-graph pass under autocast is the graph pass's


def test_workspace_slot_grows_and_follows_dtype():
    from harness.backbone import Workspace

    ws = Workspace()
    a = ws.take("s", (2, 3), torch.empty(0))
    b = ws.take("s", (4, 3), torch.empty(0))
    assert b.shape == (4, 3) and b.untyped_storage().data_ptr() != a.untyped_storage().data_ptr()
    c = ws.take("s", (2, 2), torch.empty(0))
    assert c.untyped_storage().data_ptr() == b.untyped_storage().data_ptr()  # smaller: the same memory
    d = ws.take("s", (2, 2), torch.empty(0, dtype=torch.float64))
    assert d.dtype == torch.float64


@pytest.mark.skipif(not any(map(shutil.which, ("cc", "gcc", "g++"))), reason="inductor needs a C compiler")
def test_torch_compile_traces_the_no_graph_forward():
    # the paper-shapes bench's --compile: compiled code plans its own buffers, so no workspace there
    b = _randomize(Backbone(_cfg()), std=0.3).eval()
    x = torch.randint(0, 11, (2, 12))
    compiled = torch.compile(b)
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), b(x))


def test_a_time_conditioned_backbone_runs_in_float64():
    # the sinusoidal features are float32; the time MLP takes them in its own dtype
    b = _randomize(Backbone(_cfg(time_conditioning=True)), std=0.3).eval()
    x, t = torch.randint(0, 11, (2, 12)), torch.rand(2)
    with torch.no_grad():
        single = b(x, t)
        double = b.double()(x, t)
    torch.testing.assert_close(double, single, rtol=1e-3, atol=1e-3)
