"""
The learners' notes in ../shared/seeds/ make claims about GPT's parameters, attention, positions
and normalisation. docs/seeds.md answers each one; this file checks every answer that can be
checked. Each test names the claim it settles.
"""

import math

import numpy as np
import pytest
import torch
from torch.nn import functional as F

from model import GPT, GPTConfig, LayerNorm, RMSNorm, apply_rope, rope_tables, sinusoidal_table
from sizing import forward_flops, gpt_params, param_counts

GPT2 = dict(vocab_size=50257, n_layer=12, n_head=12, n_embd=768)


def meta_gpt(**kw):
    """A GPT with shapes but no memory: GPT-2 small in a fraction of a second."""
    with torch.device("meta"):
        return GPT(GPTConfig(**kw))


def n_params(model):
    return sum(p.numel() for p in model.parameters())  # a tied tensor is yielded once


def tiny_gpt(seed=0, **kw):
    torch.manual_seed(seed)
    cfg = dict(block_size=16, vocab_size=11, n_layer=2, n_head=2, n_embd=16)
    cfg.update(kw)
    return GPT(GPTConfig(**cfg)).eval()


# --- "doubling the context at least quadruples the number of parameters" (seed 000) -------------

def test_context_length_changes_parameters_only_through_the_position_table():
    totals = {T: n_params(meta_gpt(block_size=T, **GPT2)) for T in (512, 1024, 2048, 4096)}
    assert totals[1024] == 124_439_808
    for T in (512, 1024, 2048):
        # doubling T adds T more rows of 768 to wpe, and nothing else: +0.6%, not x4
        assert totals[2 * T] - totals[T] == T * 768
        assert totals[2 * T] / totals[T] < 1.03
    # without a learned position table the count does not depend on T at all
    for position in ("sinusoidal", "rope"):
        assert n_params(meta_gpt(block_size=256, position=position, **GPT2)) == \
            n_params(meta_gpt(block_size=8192, position=position, **GPT2))


def test_what_grows_quadratically_is_attention_compute_per_sequence():
    cfg = lambda T: GPTConfig(block_size=T, **GPT2)  # noqa: E731
    f1, f2 = forward_flops(cfg(1024), 1024), forward_flops(cfg(2048), 2048)
    # per token the scores and the weighted sum grow linearly in T, so per sequence (x T) quadratically
    for part in ("attn.scores", "attn.reduce"):
        assert f2[part] * 2048 == 4 * f1[part] * 1024
    # everything else costs the same per token: the whole model's FLOPs per sequence grow 2x-4x
    per_seq = f2["total"] * 2048 / (f1["total"] * 1024)
    assert 2 < per_seq < 4
    assert per_seq == pytest.approx(2.265, abs=0.005)  # GPT-2 small, 1024 -> 2048


# --- gpt_params: what it counts (seeds 000, 002) -------------------------------------------------

def test_gpt_params_counts_the_token_table_as_the_head_and_leaves_out_positions():
    g = gpt_params(seq_len=1024, vocab_size=50257, d_model=768, num_heads=12, num_layers=12)
    assert g == 123_653_376
    model_total = n_params(meta_gpt(block_size=1024, **GPT2))
    assert model_total - g == 1024 * 768  # exactly the position table is missing
    # the "dense" term is the token table: tied, the same matrix embeds tokens and scores them
    assert g - gpt_params(1024, 0, 768, 12, 12) == 50257 * 768
    # seq_len and num_heads do not enter the result at all
    assert gpt_params(1, 50257, 768, 1, 12) == gpt_params(8192, 50257, 768, 64, 12) == g


# --- embedding arithmetic and shapes (seeds 000, 002, 004) ----------------------------------------

def test_token_table_is_V_by_E():
    assert 50257 * 768 == 38_597_376 != 38_603_776  # seed 004's prose has the wrong product
    model = meta_gpt(block_size=1024, **GPT2)
    assert tuple(model.transformer.wte.weight.shape) == (50257, 768)  # (vocab_size, n_embd): no batch dimension
    assert tuple(model.transformer.wpe.weight.shape) == (1024, 768)  # (block_size, n_embd)
    assert model.transformer.wte.weight.numel() == 38_597_376 and model.transformer.wpe.weight.numel() == 786_432


def test_embedding_lookup_is_a_one_hot_matmul():
    model = tiny_gpt()
    idx = torch.randint(0, 11, (3, 7))  # (B, T) token ids
    one_hot = F.one_hot(idx, 11).float()  # (B, T, V)
    looked_up = model.transformer.wte(idx)
    assert looked_up.shape == (3, 7, 16)  # (B, T, E): the last axis V is replaced by E
    torch.testing.assert_close(one_hot @ model.transformer.wte.weight, looked_up)  # (B,T,V) @ (V,E)
    # positions: rows 0..T-1 of the (block_size, E) table, broadcast over the batch and added
    x = looked_up + model.transformer.wpe(torch.arange(7))
    assert x.shape == (3, 7, 16)


# --- attention formula, Q, K, V (seed 001) --------------------------------------------------------

def test_attention_is_softmax_of_q_times_k_transposed_and_matches_sdpa():
    torch.manual_seed(0)
    q, k, v = torch.randn(3, 2, 2, 6, 8).unbind(0)  # (B, nh, T, hs) each
    with pytest.raises(RuntimeError):
        q @ k  # (T, hs) @ (T, hs) is undefined: the formula needs K transposed
    att = (q @ k.transpose(-2, -1)) / math.sqrt(8)
    att = att.masked_fill(~torch.ones(6, 6, dtype=torch.bool).tril(), float("-inf"))
    y = F.softmax(att, dim=-1) @ v
    torch.testing.assert_close(y, F.scaled_dot_product_attention(q, k, v, is_causal=True))
    # .T on a batched tensor reverses every axis; the last two are swapped with transpose(-2, -1)
    x = torch.zeros(4, 2, 1)
    assert x.permute(2, 1, 0).shape == (1, 2, 4) and x.transpose(-2, -1).shape == (4, 1, 2)


def test_k_is_not_q_transposed_and_v_is_not_q():
    model = tiny_gpt()
    attn = model.transformer.h[0].attn
    w_q, w_k, w_v = attn.c_attn.weight.split(16, dim=0)  # three separate learned projections
    assert not torch.equal(w_q, w_k) and not torch.equal(w_q, w_v)
    x = torch.randn(1, 5, 16)
    q, k, v = attn.c_attn(x).split(16, dim=2)
    assert not torch.allclose(k, q) and not torch.allclose(v, q)
    scores = q[0] @ k[0].T
    assert not torch.allclose(scores, scores.T)  # if K were Q, the scores would be symmetric


def test_softmax_rows_sum_to_one_columns_do_not():
    torch.manual_seed(0)
    att = F.softmax(torch.randn(5, 5).masked_fill(~torch.ones(5, 5, dtype=torch.bool).tril(), float("-inf")), dim=-1)
    torch.testing.assert_close(att.sum(dim=-1), torch.ones(5))
    assert not torch.allclose(att.sum(dim=0), torch.ones(5))
    assert att.sum(dim=0)[0] > 1  # the first token is visible to every row


def test_the_diagonal_need_not_be_the_largest_score():
    # even with no projections (Q = K = X) a dot product is not a similarity: a longer vector wins
    x = torch.tensor([[1.0, 0.0], [2.0, 0.0]])
    scores = x @ x.T
    assert scores[0].argmax() == 1  # token 0 scores token 1 (2.0) above itself (1.0)
    # with GPT's learned q and k projections, many rows' largest visible score is off the diagonal
    model = tiny_gpt(seed=1)
    x = model.transformer.wte(torch.randint(0, 11, (1, 16))) + model.transformer.wpe(torch.arange(16))
    q, k, _ = model.transformer.h[0].attn.c_attn(model.transformer.h[0].ln_1(x)).split(16, dim=2)
    s = (q[0] @ k[0].T).masked_fill(~torch.ones(16, 16, dtype=torch.bool).tril(), float("-inf"))
    off_diagonal = sum(int(s[i].argmax()) != i for i in range(1, 16))
    assert off_diagonal >= 5


# --- masked softmax and the causal average (seed 002) ---------------------------------------------

def test_masked_softmax_without_a_row_axis_gives_one_tenth():
    T = 4
    mask = np.tril(np.ones((T, T)))
    filled = np.where(mask == 1, 1.0, -np.inf)
    whole = np.exp(filled) / np.sum(np.exp(filled))  # the seed's softmax: no axis, sums all 16 entries
    assert np.allclose(whole[mask == 1], 0.1)  # 1/10: ten entries are unmasked, T(T+1)/2 = 10
    rows = np.exp(filled) / np.sum(np.exp(filled), axis=-1, keepdims=True)  # per row
    assert np.allclose(rows, mask / mask.sum(axis=-1, keepdims=True))  # row t: 1/(t+1) on t+1 entries
    assert np.allclose(np.diag(rows), [1, 1 / 2, 1 / 3, 1 / 4])
    x = np.linspace(1, 8, 8).reshape(T, 2)
    assert np.allclose(rows @ x, [[1, 2], [2, 3], [3, 4], [4, 5]])  # the running mean, as the seed's loop


def test_causal_attention_with_equal_scores_is_the_average_of_the_past():
    torch.manual_seed(0)
    v = torch.randn(1, 1, 6, 4)
    q = k = torch.zeros(1, 1, 6, 4)  # all scores equal: softmax spreads weight evenly over the visible past
    y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    prefix_mean = v.cumsum(dim=2) / torch.arange(1, 7).view(1, 1, 6, 1)
    torch.testing.assert_close(y, prefix_mean)


def test_the_output_at_t_does_not_see_the_future():
    model = tiny_gpt()
    idx = torch.randint(0, 11, (1, 10))
    changed = idx.clone()
    changed[0, 7] = (idx[0, 7] + 1) % 11
    a, _ = model(idx, targets=idx)  # targets: logits for every position
    b, _ = model(changed, targets=changed)
    torch.testing.assert_close(a[:, :7], b[:, :7])  # positions before 7 are untouched
    assert not torch.allclose(a[:, 7:], b[:, 7:])


def test_attention_keeps_every_past_state_not_one():
    # an RNN carries one fixed-size state; attention keeps a key and a value for every position
    from model import KVCache
    model = tiny_gpt()
    cache = KVCache(model.config.n_layer, model.config.block_size)
    model(torch.randint(0, 11, (1, 9)), kv_cache=cache)
    assert cache.pos == 9
    assert cache.k[0][:, :, :9].abs().sum(dim=-1).min() > 0  # nine stored keys per head and layer


# --- LayerNorm (seeds 001, 003, 004) --------------------------------------------------------------

def test_layernorm_output_is_not_confined_to_zero_one():
    torch.manual_seed(0)
    x = torch.randn(1000, 64) * 5 + 3
    with torch.no_grad():
        y = LayerNorm(64, bias=True)(x)
    assert y.min() < -2 and y.max() > 2  # negative values and values above 1 are normal
    torch.testing.assert_close(y.mean(dim=-1), torch.zeros(1000), atol=1e-5, rtol=0)
    torch.testing.assert_close(y.var(dim=-1, unbiased=False), torch.ones(1000), atol=1e-3, rtol=0)
    # the learned gain and bias then move it anywhere
    ln = LayerNorm(64, bias=True)
    with torch.no_grad():
        ln.weight.fill_(3.0)
        ln.bias.fill_(5.0)
        assert ln(x).mean().item() == pytest.approx(5.0, abs=1e-4)


def test_layernorm_standardises_but_does_not_make_values_normal():
    x = torch.tensor([0.0] * 7 + [8.0])  # a skewed vector: seven zeros and one outlier
    y = F.layer_norm(x, (8,), eps=0.0)
    assert len(torch.unique(y)) == 2  # still two values: the shape of the distribution is kept
    skew = lambda t: (((t - t.mean()) / t.std(unbiased=False)) ** 3).mean()  # noqa: E731
    assert skew(y) == pytest.approx(float(skew(x)), rel=1e-5) and skew(y) > 2


def test_layernorm_uses_the_biased_variance_and_is_scale_invariant():
    torch.manual_seed(0)
    x = torch.randn(4, 10, dtype=torch.float64)
    mean, var = x.mean(-1, keepdim=True), x.var(-1, unbiased=False, keepdim=True)
    torch.testing.assert_close(F.layer_norm(x, (10,), eps=1e-5), (x - mean) / torch.sqrt(var + 1e-5))
    wrong = (x - mean) / torch.sqrt(x.var(-1, unbiased=True, keepdim=True) + 1e-5)
    assert not torch.allclose(F.layer_norm(x, (10,), eps=1e-5), wrong)
    # whatever the input's scale, the output's is the same (up to eps): what keeps activations in range
    torch.testing.assert_close(F.layer_norm(100 * x, (10,), eps=1e-5), F.layer_norm(x, (10,), eps=1e-5),
                               atol=1e-4, rtol=0)
    torch.testing.assert_close(F.layer_norm(100 * x, (10,), eps=0.0), F.layer_norm(x, (10,), eps=0.0))


# --- RMSNorm and epsilon (seed 003) --------------------------------------------------------------

def test_rmsnorm_epsilon_on_the_seeds_example():
    x = torch.tensor([1e-6, 0.0, 2e-6], dtype=torch.float64)
    rms = math.sqrt((1e-12 + 0 + 4e-12) / 3)  # 1.29e-6: the mean of squares is 1.67e-12, as the seed says
    # without epsilon nothing explodes: the vector is scaled to RMS 1, and 0 stays 0 (not 0.1)
    y0 = F.rms_norm(x, (3,), eps=0.0)
    torch.testing.assert_close(y0, x / rms)
    assert y0.tolist() == pytest.approx([0.7746, 0.0, 1.5492], abs=1e-4)
    # with eps = 1e-5 (glassgpt's default) the gain 1/sqrt(ms + eps) is capped at 1/sqrt(eps) = 316:
    # a near-zero vector stays near zero instead of being blown up to unit size
    y = RMSNorm(3)(x.float()).double()
    assert RMSNorm(3).eps == 1e-5
    torch.testing.assert_close(y, x / math.sqrt(rms**2 + 1e-5), rtol=1e-5, atol=0)
    assert y.abs().max() < 1e-3
    # the one real division by zero is an all-zero vector: 0/0 = NaN without eps, 0 with it
    z = torch.zeros(3)
    assert torch.isnan(F.rms_norm(z, (3,), eps=0.0)).all()
    assert torch.equal(RMSNorm(3)(z), z)


def test_rmsnorm_is_layernorm_without_centring():
    torch.manual_seed(0)
    x = torch.randn(5, 32)
    x = x - x.mean(dim=-1, keepdim=True)  # already centred: the two agree
    torch.testing.assert_close(RMSNorm(32)(x), LayerNorm(32, bias=False)(x))
    shifted = x + 3.0  # not centred: LayerNorm removes the shift, RMSNorm does not
    torch.testing.assert_close(LayerNorm(32, bias=False)(shifted), LayerNorm(32, bias=False)(x), atol=1e-5, rtol=0)
    assert not torch.allclose(RMSNorm(32)(shifted), RMSNorm(32)(x), atol=1e-2)
    assert sum(p.numel() for p in RMSNorm(32).parameters()) == 32  # gain only
    assert sum(p.numel() for p in LayerNorm(32, bias=True).parameters()) == 64  # gain and bias


# --- positions: sinusoidal, learned, rotary (seeds 001, 003) --------------------------------------

def test_sinusoidal_rows_are_positions_and_i_indexes_dimension_pairs():
    n_pos, d = 50, 16
    table = sinusoidal_table(n_pos, d)
    assert table.shape == (n_pos, d)  # one row per position pos, one column per dimension
    for pos in (0, 7, 49):
        for i in range(d // 2):  # i runs over the d/2 frequency pairs, not over rows
            angle = pos / 10000 ** (2 * i / d)
            assert table[pos, 2 * i] == pytest.approx(math.sin(angle), abs=1e-6)
            assert table[pos, 2 * i + 1] == pytest.approx(math.cos(angle), abs=1e-6)
    assert table[0].tolist() == [0.0, 1.0] * (d // 2)


def test_which_position_schemes_have_parameters():
    counts = {p: param_counts(GPTConfig(block_size=1024, position=p, **GPT2)) for p in ("learned", "sinusoidal", "rope")}
    assert counts["learned"]["wpe"] == 1024 * 768
    assert counts["sinusoidal"]["wpe"] == counts["rope"]["wpe"] == 0
    assert counts["learned"]["total"] - counts["rope"]["total"] == 1024 * 768
    for p in ("sinusoidal", "rope"):
        names = [n for n, _ in meta_gpt(position=p, block_size=64, **GPT2).named_parameters()]
        assert not any("wpe" in n or "pos" in n or "rope" in n for n in names)


def test_rope_turns_absolute_rotations_into_relative_scores():
    torch.manual_seed(0)
    hs, T = 16, 12
    cos, sin = rope_tables(T, hs)
    q = torch.randn(hs).expand(1, 1, T, hs)  # the same query vector at every position
    k = torch.randn(hs).expand(1, 1, T, hs)  # the same key vector at every position
    qr, kr = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
    torch.testing.assert_close(qr.norm(dim=-1), q.norm(dim=-1))  # a rotation keeps lengths
    s = (qr @ kr.transpose(-2, -1))[0, 0]
    # each vector is rotated by its absolute position, yet the score depends only on m - n
    for m, n, shift in ((5, 2, 4), (3, 3, 8), (1, 0, 10)):
        assert s[m + shift, n + shift] == pytest.approx(float(s[m, n]), abs=1e-4)
    assert not torch.allclose(s[5, 2], s[5, 3])


# --- GPT-2 details (seed 004) --------------------------------------------------------------------

def test_gpt2_small_parameters_add_up():
    c = param_counts(GPTConfig(block_size=1024, **GPT2))
    assert c["ln_1"] == 2 * 768 == 1536
    assert c["attn.c_attn"] == 768 * 2304 + 2304 == 1_771_776
    assert c["attn.c_proj"] == 768 * 768 + 768 == 590_592
    assert c["wte"] + c["wpe"] + 12 * c["block"] + c["ln_f"] == c["total"] == 124_439_808
    assert f"{c['total'] / 1e6:.2f}M" == "124.44M"


def test_conv1d_is_a_linear_layer_with_the_weight_transposed():
    torch.manual_seed(0)
    x, w, b = torch.randn(2, 5, 8), torch.randn(8, 24), torch.randn(24)  # Conv1D stores (in, out)
    torch.testing.assert_close(x @ w + b, F.linear(x, w.t(), b))  # nn.Linear stores (out, in)
    conv1d = pytest.importorskip("transformers.pytorch_utils").Conv1D(24, 8)
    with torch.no_grad():
        conv1d.weight.copy_(w)
        conv1d.bias.copy_(b)
    torch.testing.assert_close(conv1d(x), F.linear(x, w.t(), b))


def test_torch_functional_is_not_torch_nn_functional():
    # seed 002 imports `from torch import functional as F`; softmax lives in torch.nn.functional
    assert not hasattr(torch.functional, "softmax")
    assert hasattr(torch.nn.functional, "softmax") and hasattr(torch.nn.functional, "scaled_dot_product_attention")
