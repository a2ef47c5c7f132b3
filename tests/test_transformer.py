"""The chapter's model: shapes, RoPE, masking, parameter counts, the Llama convention."""

import math

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import mlexp
from mlexp.transformer import (
    Attention,
    Block,
    PatchEmbed,
    RMSNorm,
    SwiGLU,
    TransformerLM,
    VisionTransformer,
    WriteNothing,
    apply_rope,
)


def test_shapes_through_every_module():
    x = torch.randn(2, 10, 128)
    assert apply_rope(torch.randn(2, 4, 10, 32)).shape == (2, 4, 10, 32)
    assert Attention(128, 4)(x).shape == x.shape
    assert SwiGLU(128)(x).shape == x.shape
    assert SwiGLU(128).gate.out_features == int(8 * 128 / 3) == 341
    assert SwiGLU(128, hidden=64).up.out_features == 64
    assert RMSNorm(128)(x).shape == x.shape
    assert Block(128, 4)(x).shape == x.shape
    logits, loss = TransformerLM(65)(torch.randint(65, (2, 10)))
    assert logits.shape == (2, 10, 65) and loss is None
    assert PatchEmbed(4, 3, 128)(torch.randn(2, 3, 32, 32)).shape == (2, 64, 128)
    assert VisionTransformer(10)(torch.randn(2, 3, 32, 32)).shape == (2, 10)


def test_rope_dot_product_depends_only_on_distance():
    torch.manual_seed(0)
    q, k = torch.randn(32, dtype=torch.float64), torch.randn(32, dtype=torch.float64)
    rot_q = apply_rope(q.expand(1, 1, 40, 32))[0, 0]
    rot_k = apply_rope(k.expand(1, 1, 40, 32))[0, 0]
    for distance in (0, 1, 2, 7):
        dots = torch.stack([rot_q[m] @ rot_k[m - distance] for m in range(distance, 40)])
        assert torch.allclose(dots, dots[0].expand_as(dots), atol=1e-10)
    assert not torch.isclose(rot_q[2] @ rot_k[0], rot_q[5] @ rot_k[0])


def test_rope_keeps_norms_and_leaves_position_zero_alone():
    x = torch.randn(1, 2, 16, 8)
    rotated = apply_rope(x)
    assert torch.allclose(rotated.norm(dim=-1), x.norm(dim=-1), atol=1e-5)
    assert torch.equal(rotated[:, :, 0], x[:, :, 0])


def llama_attention(x, wq, wk, wv, wo, n_heads):
    """Attention written the way Hugging Face's Llama writes it (rotate_half, repeated cos/sin)."""
    B, T, C = x.shape
    D = C // n_heads
    inv_freq = 1.0 / (10000 ** (torch.arange(0, D, 2, dtype=torch.float32) / D))
    freqs = torch.outer(torch.arange(T, dtype=torch.float32), inv_freq)
    emb = torch.cat([freqs, freqs], dim=-1)
    cos, sin = emb.cos(), emb.sin()

    def rotate_half(t):
        t1, t2 = t[..., : D // 2], t[..., D // 2 :]
        return torch.cat([-t2, t1], dim=-1)

    q, k, v = ((x @ w.T).view(B, T, n_heads, D).transpose(1, 2) for w in (wq, wk, wv))
    q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
    scores = (q @ k.transpose(-1, -2)) / math.sqrt(D)
    scores = scores.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), float("-inf"))
    y = scores.softmax(-1) @ v
    return y.transpose(1, 2).reshape(B, T, C) @ wo.T


def test_attention_weights_port_to_llama_convention():
    torch.manual_seed(0)
    attn = Attention(64, 4)
    x = torch.randn(2, 12, 64)
    wq, wk, wv = attn.qkv.weight.split(64, dim=0)  # the fused projection is q | k | v
    expected = llama_attention(x, wq, wk, wv, attn.out.weight, 4)
    assert torch.allclose(attn(x), expected, atol=1e-5)


def test_rmsnorm_and_swiglu_match_their_formulas():
    torch.manual_seed(0)
    norm, x = RMSNorm(16), torch.randn(3, 16)
    norm.weight.data.uniform_(0.5, 1.5)
    expected = x / torch.sqrt((x**2).mean(-1, keepdim=True) + 1e-6) * norm.weight
    assert torch.allclose(norm(x), expected, atol=1e-6)
    ffn = SwiGLU(16)
    gated = F.silu(x @ ffn.gate.weight.T) * (x @ ffn.up.weight.T)
    assert torch.allclose(ffn(x), gated @ ffn.down.weight.T, atol=1e-6)
    assert all(m.bias is None for m in (ffn.gate, ffn.up, ffn.down))


def test_causal_mask_hides_the_future():
    torch.manual_seed(0)
    model = TransformerLM(65, dim=32, n_layers=2, n_heads=4).eval()
    idx = torch.randint(65, (1, 12))
    changed = idx.clone()
    changed[0, 8] = (idx[0, 8] + 1) % 65
    before, _ = model(idx)
    after, _ = model(changed)
    assert torch.allclose(before[:, :8], after[:, :8], atol=1e-6)
    assert not torch.allclose(before[:, 8:], after[:, 8:])


def test_vit_attention_is_not_causal():
    torch.manual_seed(0)
    block = Block(32, 4, causal=False, rope=False).eval()
    x = torch.randn(1, 6, 32)
    changed = x.clone()
    changed[0, 5] += 1.0
    assert not torch.allclose(block(x)[:, 0], block(changed)[:, 0])


def test_parameter_counts_and_breakdown():
    model = TransformerLM(65)
    assert mlexp.count_params(model) == 803_712
    assert mlexp.count_params(VisionTransformer(10)) == 802_826
    groups = {"embed": 0, "attn": 0, "ffn": 0, "norm": 0, "head": 0}
    for name, p in model.named_parameters():
        parts = name.split(".")
        key = parts[2] if parts[0] == "blocks" else parts[0]  # blocks.<i>.<sub-layer>.<weight>
        groups["norm" if key.startswith("norm") else key] += p.numel()
    assert groups == {"embed": 8_320, "attn": 262_144, "ffn": 523_776, "norm": 1_152, "head": 8_320}


def test_write_nothing_removes_a_sublayer():
    torch.manual_seed(0)
    model = TransformerLM(65, dim=32, n_layers=2, n_heads=4, make_ffn=lambda d: WriteNothing())
    assert all(isinstance(b.ffn, WriteNothing) for b in model.blocks)
    x = torch.randn(2, 5, 32)
    block = model.blocks[0]
    assert torch.allclose(block(x), x + block.attn(block.norm1(x)))


def test_dim_must_divide_into_heads():
    with pytest.raises(ValueError, match="divisible by n_heads"):
        Attention(130, 4)
    with pytest.raises(ValueError, match="multiple of patch"):
        VisionTransformer(10, image=30, patch=4)


class AuxFFN(nn.Module):
    """A feed-forward layer that reports an extra loss, the way a Mixture of Experts does."""

    def __init__(self, dim):
        super().__init__()
        self.inner = SwiGLU(dim)
        self.aux_loss = torch.tensor(0.5)

    def forward(self, x):
        return self.inner(x)


def test_aux_loss_hook():
    torch.manual_seed(0)
    model = TransformerLM(65, dim=32, n_layers=3, n_heads=4, make_ffn=AuxFFN)
    idx = torch.randint(65, (2, 8))
    _, with_aux = model(idx, idx, include_aux=True)
    _, without = model(idx, idx, include_aux=False)
    assert torch.isclose(with_aux - without, torch.tensor(1.5))


def test_generate_length_and_context():
    torch.manual_seed(0)
    model = TransformerLM(65, dim=32, n_layers=1, n_heads=4, context_length=8).eval()
    seen = []
    model.embed.register_forward_hook(lambda m, inp, out: seen.append(inp[0].shape[1]))
    out = model.generate(torch.zeros(2, 3, dtype=torch.long), 20)
    assert out.shape == (2, 23)
    assert max(seen) == 8 and len(seen) == 20
    seen.clear()
    model.generate(torch.zeros(1, 3, dtype=torch.long), 10, context_length=4)
    assert max(seen) == 4


def test_the_block_is_wired_by_the_modules_passed_in():
    """Pre-norm residual by default; Plain drops the shortcut and
    nn.Identity the norms, each computing its formula and nothing else."""
    torch.manual_seed(0)
    x = torch.randn(2, 6, 32)
    block = Block(32, 4).eval()
    h = x + block.attn(block.norm1(x))
    assert torch.allclose(block(x), h + block.ffn(block.norm2(h)), atol=1e-6)
    plain = Block(32, 4, connection=mlexp.transformer.Plain).eval()
    inner = plain.ffn(plain.norm2(plain.attn(plain.norm1(x))))
    assert torch.allclose(plain(x), inner, atol=1e-6)
    bare = Block(32, 4, norm=torch.nn.Identity).eval()
    assert isinstance(bare.norm1, torch.nn.Identity) and isinstance(bare.norm2, torch.nn.Identity)
    h = x + bare.attn(x)
    assert torch.allclose(bare(x), h + bare.ffn(h), atol=1e-6)


def test_the_final_norm_is_passed_in_apart_from_the_blocks():
    """Chapter 1's "no normalization" ablation removes the blocks' norms and
    keeps the final one; a chapter that swaps every norm passes both."""
    model = TransformerLM(65, dim=32, n_layers=2, norm=torch.nn.Identity)
    assert isinstance(model.norm, mlexp.transformer.RMSNorm)
    model = TransformerLM(65, dim=32, n_layers=2, final_norm=torch.nn.LayerNorm)
    assert isinstance(model.norm, torch.nn.LayerNorm)
    assert all(isinstance(b.norm1, mlexp.transformer.RMSNorm) for b in model.blocks)


def test_rmsnorm_of_the_wrong_width_says_which_to_build():
    with pytest.raises(ValueError, match=r"RMSNorm\(16\) got vectors of width 12; build it with RMSNorm\(12\)"):
        RMSNorm(16)(torch.randn(2, 12))
