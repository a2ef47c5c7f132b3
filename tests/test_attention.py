"""Chapter 4's attention variants, proven from outside where a reference exists.

Grouped-query attention is checked against Hugging Face's LlamaDecoderLayer (the
reference implementation) with the same weights; latent attention's two forms against
each other; the cache against generation without it; every shape-based cache size
against the bytes the cache really holds.
"""

import pytest
import torch
import torch.nn as nn

import mlexp
from mlexp.attention import (
    GroupedQueryAttention,
    KVCache,
    LatentAttention,
    RecurrentLM,
    attention_lm,
    generate,
    hidden_to_match,
    kv_cache,
    kv_cache_bytes_per_token,
)
from mlexp.transformer import Block, TransformerLM, apply_rope

transformers = pytest.importorskip("transformers")
from transformers import LlamaConfig  # noqa: E402
from transformers.models.llama.modeling_llama import (  # noqa: E402
    LlamaDecoderLayer,
    LlamaRotaryEmbedding,
)

DIM, HEADS, HIDDEN, T = 64, 4, 96, 11


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def llama_layer(n_kv_heads):
    """A float64 LlamaDecoderLayer of our block's shape, with its RoPE table."""
    config = LlamaConfig(
        hidden_size=DIM,
        intermediate_size=HIDDEN,
        num_attention_heads=HEADS,
        num_key_value_heads=n_kv_heads,
        rms_norm_eps=1e-6,
        rope_theta=10000.0,  # Chapter 1's base; transformers 5 moves it into rope_parameters
        max_position_embeddings=64,
        attention_bias=False,
        mlp_bias=False,
        hidden_act="silu",
        attn_implementation="eager",
    )
    layer = LlamaDecoderLayer(config, layer_idx=0).double().eval()
    return layer, LlamaRotaryEmbedding(config)


def randomize(module):
    """Weights away from their initial values (norm gains too), so a swapped or
    transposed weight cannot go unnoticed."""
    torch.manual_seed(1)
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(torch.randn_like(p) * 0.2 + (1.0 if p.dim() == 1 else 0.0))


def run_llama(layer, rotary, x):
    positions = torch.arange(x.shape[1])[None]
    cos_sin = rotary(x, positions)
    # The decoder layer alone gets no mask from a model around it: pass the causal one.
    future = torch.ones(x.shape[1], x.shape[1], dtype=torch.bool).triu(1)
    mask = torch.zeros(1, 1, *future.shape, dtype=x.dtype).masked_fill(future, float("-inf"))
    out = layer(x, attention_mask=mask, position_ids=positions, position_embeddings=cos_sin)
    return out[0] if isinstance(out, tuple) else out  # transformers 4 returned a tuple


def copy_norms_and_ffn(block, layer):
    layer.input_layernorm.weight.copy_(block.norm1.weight)
    layer.post_attention_layernorm.weight.copy_(block.norm2.weight)
    layer.mlp.gate_proj.weight.copy_(block.ffn.gate.weight)
    layer.mlp.up_proj.weight.copy_(block.ffn.up.weight)
    layer.mlp.down_proj.weight.copy_(block.ffn.down.weight)


@pytest.mark.parametrize("n_kv_heads", [4, 2, 1])
def test_grouped_block_equals_llama_decoder_layer(n_kv_heads):
    block = Block(DIM, HEADS, ffn=mlexp.transformer.SwiGLU(DIM, HIDDEN))
    block.attn = GroupedQueryAttention(DIM, HEADS, n_kv_heads)
    block = block.double().eval()
    randomize(block)
    layer, rotary = llama_layer(n_kv_heads)
    with torch.no_grad():
        copy_norms_and_ffn(block, layer)
        for name in ("q_proj", "k_proj", "v_proj", "o_proj"):
            getattr(layer.self_attn, name).weight.copy_(getattr(block.attn, name).weight)
        x = torch.randn(2, T, DIM, dtype=torch.float64)
        ours, theirs = block(x), run_llama(layer, rotary, x)
    assert layer.self_attn.k_proj.out_features == n_kv_heads * DIM // HEADS
    assert (ours - theirs).abs().max() < 1e-5
    # The comparison can fail: a different grouping of query heads is caught.
    if n_kv_heads == 2:
        with torch.no_grad():
            k = layer.self_attn.k_proj.weight.view(2, -1, DIM)
            layer.self_attn.k_proj.weight.copy_(k.flip(0).reshape(-1, DIM))
            assert (block(x) - run_llama(layer, rotary, x)).abs().max() > 1e-3


def test_chapter1_block_equals_llama_decoder_layer():
    block = Block(DIM, HEADS, ffn=mlexp.transformer.SwiGLU(DIM, HIDDEN)).double().eval()
    randomize(block)
    layer, rotary = llama_layer(HEADS)
    with torch.no_grad():
        copy_norms_and_ffn(block, layer)
        wq, wk, wv = block.attn.qkv.weight.split(DIM, dim=0)  # the fused projection is q | k | v
        layer.self_attn.q_proj.weight.copy_(wq)
        layer.self_attn.k_proj.weight.copy_(wk)
        layer.self_attn.v_proj.weight.copy_(wv)
        layer.self_attn.o_proj.weight.copy_(block.attn.out.weight)
        x = torch.randn(2, T, DIM, dtype=torch.float64)
        assert (block(x) - run_llama(layer, rotary, x)).abs().max() < 1e-5


def test_grouped_attention_with_all_heads_is_chapter1_attention():
    torch.manual_seed(0)
    ours = GroupedQueryAttention(DIM, HEADS, HEADS)
    theirs = mlexp.transformer.Attention(DIM, HEADS)
    with torch.no_grad():
        theirs.qkv.weight.copy_(torch.cat([ours.q_proj.weight, ours.k_proj.weight, ours.v_proj.weight]))
        theirs.out.weight.copy_(ours.o_proj.weight)
    x = torch.randn(2, T, DIM)
    assert torch.allclose(ours(x), theirs(x), atol=1e-6)


def test_rope_from_a_start_position_continues_the_whole_sequence():
    x = torch.randn(2, 3, 20, 16, dtype=torch.float64)
    whole = apply_rope(x)
    # position p turns by the same angle whether it comes first or after a cache
    assert torch.equal(apply_rope(x[:, :, 7:], start=7), whole[:, :, 7:])
    assert not torch.allclose(apply_rope(x[:, :, 7:], start=6), whole[:, :, 7:])


def test_shared_keys_and_values_are_read_without_copies_per_query_head():
    """A new token's query heads read their shared key/value heads where the cache holds them:
    nothing in the step allocates as much as the keys copied out to every query head."""
    from torch.profiler import ProfilerActivity, profile

    attn = GroupedQueryAttention(DIM, HEADS, n_kv_heads=1)
    S, D = 2048, DIM // HEADS
    with torch.no_grad(), kv_cache(attn):
        attn(torch.randn(1, S, DIM))
        with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
            attn(torch.randn(1, 1, DIM))
    copied_keys = HEADS * S * D * 4  # bytes of the keys repeated for every query head
    largest = max(event.cpu_memory_usage for event in prof.key_averages())
    assert 0 < largest < copied_keys


def mla(absorb=False, dtype=torch.float64):
    torch.manual_seed(0)
    return LatentAttention(DIM, HEADS, latent_dim=24, rope_dim=8, absorb=absorb).to(dtype)


def test_latent_attention_absorbed_equals_explicit():
    explicit, absorbed = mla(), mla(absorb=True)
    absorbed.load_state_dict(explicit.state_dict())
    x = torch.randn(2, T, DIM, dtype=torch.float64)
    a, b = explicit(x), absorbed(x)
    assert a.shape == x.shape
    assert (a - b).abs().max() < 1e-10
    # and token by token from the cache, as the absorbed form is served
    with torch.no_grad():
        with kv_cache(absorbed):
            steps = torch.cat([absorbed(x[:, :5]), *(absorbed(x[:, t : t + 1]) for t in range(5, T))], 1)
    assert (steps - a).abs().max() < 1e-10
    # not equal by accident: another W_UK changes the output
    with torch.no_grad():
        absorbed.w_uk.weight.mul_(1.5)
    assert (explicit(x) - absorbed(x)).abs().max() > 1e-3


def test_latent_attention_caches_the_normalized_latent():
    """As DeepSeek's released code does (kv_a_layernorm), the latent is RMS-normalized before it
    is cached and up-projected, so its scale does not follow W_DKV's."""
    attn = mla()
    x = torch.randn(2, T, DIM, dtype=torch.float64)
    with torch.no_grad(), kv_cache(attn) as (cache,):
        before = attn(x)
        latent = cache.tensors[0]
    assert latent.shape == (2, T, 24)
    rms = latent.pow(2).mean(-1).sqrt()  # the norm's gain starts at one
    assert torch.allclose(rms, torch.ones_like(rms), atol=1e-4)
    with torch.no_grad():
        attn.w_dkv.weight.mul_(10.0)
        assert (attn(x) - before).abs().max() < 1e-5  # eps's share only


def test_latent_attention_position_enters_only_through_the_rope_parts():
    """Without the decoupled RoPE key, content scores ignore position; with it, moving a
    token changes the outputs that attend to it."""
    attn = mla()
    x = torch.randn(1, 6, DIM, dtype=torch.float64)
    out = attn(x)
    with torch.no_grad():
        attn.w_kr.weight.zero_()
        attn.w_qr.weight.zero_()
    blind = attn(x)
    assert not torch.allclose(out, blind)
    # with no position at all, the last token sees a set: permuting its past changes nothing
    shuffled = x[:, [2, 0, 1, 4, 3, 5]]
    assert torch.allclose(attn(shuffled)[:, -1], blind[:, -1], atol=1e-12)


@pytest.mark.parametrize(
    "make",
    [
        lambda: GroupedQueryAttention(DIM, HEADS, 2),
        lambda: LatentAttention(DIM, HEADS, latent_dim=24, rope_dim=8),
    ],
    ids=["gqa", "mla"],
)
def test_causality(make):
    torch.manual_seed(0)
    attn = make()
    x = torch.randn(2, T, DIM)
    changed = x.clone()
    changed[:, 7] += 1.0
    before, after = attn(x), attn(changed)
    assert torch.equal(before[:, :7], after[:, :7])
    assert not torch.allclose(before[:, 7:], after[:, 7:])


def test_bad_arguments_say_what_to_do():
    with pytest.raises(ValueError, match=r"n_heads=4 must be a multiple of n_kv_heads=3.*divisors of 4"):
        GroupedQueryAttention(64, 4, 3)
    with pytest.raises(ValueError, match=r"multiple of n_kv_heads=8"):
        GroupedQueryAttention(64, 4, 8)
    with pytest.raises(ValueError, match=r"n_kv_heads=0"):
        GroupedQueryAttention(64, 4, 0)
    with pytest.raises(ValueError, match=r"dim=66 must be divisible by n_heads=4; pick"):
        GroupedQueryAttention(66, 4, 2)
    with pytest.raises(ValueError, match=r"head_dim = dim / n_heads = 3 must be even"):
        GroupedQueryAttention(12, 4, 2)
    with pytest.raises(ValueError, match=r"latent_dim=200 .* dim=128.*narrower than the model"):
        LatentAttention(128, 4, latent_dim=200, rope_dim=16)
    with pytest.raises(ValueError, match=r"dim=130 must be divisible by n_heads=4"):
        LatentAttention(130, 4, latent_dim=48, rope_dim=16)
    with pytest.raises(ValueError, match=r"rope_dim=15 must be even"):
        LatentAttention(128, 4, latent_dim=48, rope_dim=15)
    with pytest.raises(ValueError, match=r"build it with attention_lm"):
        with kv_cache(TransformerLM(65, dim=32, n_layers=1)):
            pass


def chapter_models():
    """Chapter 4's four attention variants, as the brief sizes them."""
    return {
        "MHA": attention_lm(65, lambda d: GroupedQueryAttention(d, 4, 4)),
        "GQA": attention_lm(65, lambda d: GroupedQueryAttention(d, 4, 2)),
        "MQA": attention_lm(65, lambda d: GroupedQueryAttention(d, 4, 1)),
        "MLA": attention_lm(65, lambda d: LatentAttention(d, 4, 48, 16)),
    }


def test_cache_bytes_from_shapes_match_the_brief_and_the_cache():
    models = chapter_models()
    sizes = {name: kv_cache_bytes_per_token(m) for name, m in models.items()}
    # float32, 4 layers: 2 * 4 * 32 * 4 B * 4, then a half, a quarter; (48 + 16) * 4 B * 4
    assert sizes == {"MHA": 4096, "GQA": 2048, "MQA": 1024, "MLA": 1024}
    assert kv_cache_bytes_per_token(models["MHA"], torch.bfloat16) == 2048
    idx = torch.randint(65, (3, 9))
    for name, model in models.items():
        with torch.no_grad(), kv_cache(model) as caches:
            model(idx)
            held = sum(c.nbytes() for c in caches)
        assert held == sizes[name] * idx.numel(), name


def test_attention_lm_swaps_only_attention():
    model = attention_lm(65, lambda d: GroupedQueryAttention(d, 4, 1))
    assert all(isinstance(b.attn, GroupedQueryAttention) for b in model.blocks)
    chapter1 = TransformerLM(65)
    # MQA drops 2 of MHA's 4 key/value matrices' worth, 3/4 of k and v: 2 * 96 * 128 per layer
    assert mlexp.count_params(chapter1) - mlexp.count_params(model) == 4 * 2 * 96 * 128
    assert mlexp.count_params(chapter_models()["MHA"]) == mlexp.count_params(chapter1)


def test_hidden_to_match_restores_the_parameter_count():
    target = mlexp.count_params(TransformerLM(65))

    def build(hidden):
        return attention_lm(
            65,
            lambda d: GroupedQueryAttention(d, 4, 1),
            make_ffn=lambda d: mlexp.transformer.SwiGLU(d, hidden),
        )

    hidden = hidden_to_match(build, target)
    assert hidden > 341
    # one hidden unit costs 3 * 128 weights per layer: the nearest width is within half
    assert abs(mlexp.count_params(build(hidden)) - target) <= 4 * 3 * 128 / 2


@pytest.mark.parametrize("temperature", [0.0, 1.0], ids=["greedy", "sampled"])
@pytest.mark.parametrize("variant", ["GQA", "MLA"])
def test_cached_generation_is_identical(variant, temperature):
    torch.manual_seed(0)
    model = chapter_models()[variant].eval()
    model.context_length = 16
    prompt = torch.randint(65, (2, 5))
    torch.manual_seed(7)
    plain = generate(model, prompt, 30, temperature, use_cache=False)
    torch.manual_seed(7)
    cached = generate(model, prompt, 30, temperature, use_cache=True)
    assert plain.shape == (2, 35) and torch.equal(plain[:, :5], prompt)
    assert torch.equal(plain, cached)
    # past the trained context of 16, and not cropped to it: Chapter 1's cropped generate differs
    torch.manual_seed(7)
    cropped = model.generate(prompt, 30, temperature) if temperature else None
    if cropped is not None:
        assert not torch.equal(cropped, plain)
    # a different seed draws different text, so equality above is not a constant
    if temperature:
        torch.manual_seed(8)
        assert not torch.equal(generate(model, prompt, 30, temperature), cached)
    # the caches are taken away afterwards
    assert all(b.attn.cache is None for b in model.blocks)


def test_cache_continues_a_sequence_in_chunks():
    """Several tokens at once against a cache need the causal mask's bottom rows."""
    torch.manual_seed(0)
    model = chapter_models()["GQA"].eval()
    idx = torch.randint(65, (2, 12))
    full, _ = model(idx)
    with torch.no_grad(), kv_cache(model):
        parts = [model(idx[:, :5])[0], model(idx[:, 5:9])[0], model(idx[:, 9:])[0]]
    assert torch.allclose(torch.cat(parts, 1), full, atol=1e-5)


def test_kv_cache_appends_along_time():
    cache = KVCache()
    assert len(cache) == 0
    cache.append(torch.zeros(1, 2, 3, 4), torch.zeros(1, 3, 5))
    k, latent = cache.append(torch.ones(1, 2, 1, 4), torch.ones(1, 1, 5))
    assert len(cache) == 4 and k.shape == (1, 2, 4, 4) and latent.shape == (1, 4, 5)
    assert cache.nbytes() == (32 + 20) * 4


def test_recurrent_lm_size_contract_and_causality():
    model = RecurrentLM(65)
    chapter1 = mlexp.count_params(TransformerLM(65))
    assert mlexp.count_params(model) == 822_849  # the docstring says so
    assert abs(mlexp.count_params(model) / chapter1 - 1) < 0.05
    idx = torch.randint(65, (2, 10))
    logits, loss = model(idx, idx, include_aux=False)
    assert logits.shape == (2, 10, 65) and loss.dim() == 0
    changed = idx.clone()
    changed[:, 6] = (idx[:, 6] + 1) % 65
    assert torch.equal(model(changed)[0][:, :6], logits[:, :6])
    assert not torch.allclose(model(changed)[0][:, 6:], logits[:, 6:])
    # its state is its cache: stepping one token at a time gives the same logits
    out, state = model.step(idx[:, :4])
    more, _ = model.step(idx[:, 4:], state)
    assert torch.allclose(torch.cat([out, more], 1), logits, atol=1e-5)
    torch.manual_seed(0)
    assert model.generate(idx[:, :3], 7).shape == (2, 10)


def test_train_lm_trains_every_variant():
    ids = torch.randint(65, (2000,))
    for model in (
        RecurrentLM(65, dim=32),
        attention_lm(65, lambda d: LatentAttention(d, 4, 16, 8), dim=32, n_layers=1),
    ):
        torch.manual_seed(0)
        history = mlexp.train_lm(
            model, ids[:1500], ids[1500:], steps=3, block_size=16, log=False, eval_batches=1, batch_size=4
        )
        assert len(history["val"]) == 2 and model.context_length == 16
        assert isinstance(model, nn.Module)


def test_attention_weights_are_the_ones_forward_uses():
    torch.manual_seed(0)
    attn = GroupedQueryAttention(DIM, HEADS, 2).double()
    x = torch.randn(2, T, DIM, dtype=torch.float64)
    weights = attn.attention_weights(x)
    assert weights.shape == (2, HEADS, T, T)
    assert torch.allclose(weights.sum(-1), torch.ones(2, HEADS, T, dtype=torch.float64))
    assert torch.equal(weights.triu(1), torch.zeros_like(weights))  # nothing from the future
    _, _, v = attn._heads(x, 0)
    y = (weights @ v.repeat_interleave(2, dim=1)).transpose(1, 2).reshape(2, T, DIM)  # 2 query heads per value head
    assert (attn.o_proj(y) - attn(x)).abs().max() < 1e-10
