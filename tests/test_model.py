"""
model.py against what it claims: causality, the two attention paths agree, the norms, activations and
position tables are their formulas, KV-cache generation equals recomputation, sampling, GPT-2 weight
import, parameter counts as sizing.py's, a tiny model can learn, bad configs fail naming the field.
"""

import dataclasses
import itertools
import math
from dataclasses import asdict

import pytest
import torch
from torch.nn import functional as F

from model import GPT, GPTConfig, KVCache, LayerNorm, RMSNorm, apply_rope, rope_tables, sample_next, sinusoidal_table
from muon import configure_muon
from sizing import gpt_params, param_counts

POSITIONS = ("learned", "sinusoidal", "rope")
ATTENTIONS = ("sdpa", "manual")


def tiny(**kw):
    args = dict(block_size=16, vocab_size=50, n_layer=2, n_head=2, n_embd=32, dropout=0.0)
    args.update(kw)
    return GPTConfig(**args)


def sharpen(model, std=0.3, seed=0):
    """
    Re-initialise with large weights. A fresh model (std 0.02) nearly always repeats one token, so
    two generators agreeing on it would prove nothing; with std 0.3 the greedy token depends on context.
    """
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=g) * std
            is_norm_gain = name.split(".")[-2].startswith("ln") and name.endswith("weight")
            p.copy_(1.0 + noise if is_norm_gain else noise)
    return model.eval()


def make(seed=0, **kw):
    torch.manual_seed(seed)
    return sharpen(GPT(tiny(**kw)), seed=seed)


def all_logits(model, idx):
    """Logits at every position (forward returns only the last one without targets)."""
    logits, _ = model(idx, targets=torch.zeros_like(idx))
    return logits


# ---------------------------------------------------------------------------------------------
# causality


@pytest.mark.parametrize("position,attention", list(itertools.product(POSITIONS, ATTENTIONS)))
def test_causal_changing_the_future_leaves_the_past_unchanged(position, attention):
    model = make(position=position, attention=attention)
    g = torch.Generator().manual_seed(1)
    idx = torch.randint(0, 50, (2, 16), generator=g)
    with torch.no_grad():
        base = all_logits(model, idx)
        for t in (0, 5, 14):
            other = idx.clone()
            other[:, t + 1:] = (idx[:, t + 1:] + 1 + torch.randint(0, 48, other[:, t + 1:].shape, generator=g)) % 50
            changed = all_logits(model, other)
            torch.testing.assert_close(changed[:, :t + 1], base[:, :t + 1], atol=1e-6, rtol=0)
            # the later positions did see the change: the comparison above can tell
            assert (changed[:, t + 1:] - base[:, t + 1:]).abs().max() > 1e-3


def test_causality_check_catches_a_missing_mask(monkeypatch):
    """The causality test is not vacuous: with the manual path's mask removed, the past moves."""
    from model import CausalSelfAttention
    model = make(attention="manual")
    attend = CausalSelfAttention.attend
    everything = lambda self, q, k, v, mask=None: attend(self, q, k, v, torch.ones(16, 16, dtype=torch.bool))  # noqa: E731
    monkeypatch.setattr(CausalSelfAttention, "attend", everything)
    idx = torch.randint(0, 50, (1, 16), generator=torch.Generator().manual_seed(2))
    other = idx.clone()
    other[:, 8:] = (other[:, 8:] + 1) % 50
    with torch.no_grad():
        assert (all_logits(model, idx)[:, :8] - all_logits(model, other)[:, :8]).abs().max() > 1e-3


# ---------------------------------------------------------------------------------------------
# the two attention paths


@pytest.mark.parametrize("position", POSITIONS)
def test_sdpa_equals_manual_forward_and_gradients(position):
    """float32: logits, loss and every gradient agree within atol 1e-5, rtol 1e-4."""
    torch.manual_seed(0)
    sdpa = GPT(tiny(position=position, attention="sdpa"))
    manual = GPT(tiny(position=position, attention="manual"))
    sharpen(sdpa)
    manual.load_state_dict(sdpa.state_dict())  # the same keys: the paths differ in compute alone
    idx = torch.randint(0, 50, (3, 16))
    targets = torch.randint(0, 50, (3, 16))
    out = {}
    for name, model in (("sdpa", sdpa), ("manual", manual)):
        logits, loss = model(idx, targets)
        loss.backward()
        out[name] = (logits, loss, {n: p.grad for n, p in model.named_parameters()})
    torch.testing.assert_close(out["manual"][0], out["sdpa"][0], atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(out["manual"][1], out["sdpa"][1], atol=1e-5, rtol=1e-4)
    assert out["sdpa"][2].keys() == out["manual"][2].keys()
    for n, grad in out["sdpa"][2].items():
        assert grad is not None and grad.abs().sum() > 0, n
        torch.testing.assert_close(out["manual"][2][n], grad, atol=1e-5, rtol=1e-4, msg=n)


@pytest.mark.parametrize("position,attention", list(itertools.product(POSITIONS, ATTENTIONS)))
def test_cached_chunks_equal_one_full_forward(position, attention):
    """Prefill 5, a chunk of 4 after a past (the offset-mask path), then single tokens: same logits as all at once."""
    model = make(position=position, attention=attention)
    idx = torch.randint(0, 50, (2, 12), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        full = all_logits(model, idx)
        cache = KVCache(model.config.n_layer, model.config.block_size)
        pieces = [all_logits_cached(model, idx[:, a:b], cache) for a, b in ((0, 5), (5, 9), (9, 10), (10, 12))]
    assert cache.pos == 12
    torch.testing.assert_close(torch.cat(pieces, dim=1), full, atol=1e-5, rtol=1e-4)


def all_logits_cached(model, idx, cache):
    logits, _ = model(idx, targets=torch.zeros_like(idx), kv_cache=cache)
    return logits


# ---------------------------------------------------------------------------------------------
# norms and positions are their formulas


def test_rmsnorm_is_its_formula():
    torch.manual_seed(0)
    norm = RMSNorm(8)
    with torch.no_grad():
        norm.weight.copy_(torch.randn(8))
    x = torch.randn(4, 3, 8) * 3 + 1
    by_hand = x / torch.sqrt((x * x).mean(dim=-1, keepdim=True) + 1e-5) * norm.weight
    torch.testing.assert_close(norm(x), by_hand, atol=1e-6, rtol=1e-5)
    assert [n for n, _ in norm.named_parameters()] == ["weight"]  # no bias, ever


@pytest.mark.parametrize("bias", [True, False])
def test_layernorm_is_its_formula(bias):
    torch.manual_seed(0)
    norm = LayerNorm(8, bias=bias)
    with torch.no_grad():
        for p in norm.parameters():
            p.copy_(torch.randn(8))
    x = torch.randn(4, 3, 8) * 3 + 1
    mean = x.mean(dim=-1, keepdim=True)
    var = ((x - mean) ** 2).mean(dim=-1, keepdim=True)  # biased variance, as LayerNorm
    by_hand = (x - mean) / torch.sqrt(var + 1e-5) * norm.weight + (norm.bias if bias else 0)
    torch.testing.assert_close(norm(x), by_hand, atol=1e-5, rtol=1e-5)
    assert (norm.bias is not None) == bias


@pytest.mark.parametrize("activation", ["gelu_tanh", "gelu"])
def test_mlp_activation_is_its_formula(activation):
    """gelu_tanh: GPT-2's tanh approximation; gelu: the exact erf GELU nanoGPT's nn.GELU() trained with.
    The two differ by up to ~5e-4, enough to tell a checkpoint's logits apart."""
    torch.manual_seed(0)
    mlp = GPT(tiny(activation=activation)).transformer.h[0].mlp
    x = torch.randn(2, 5, 32) * 3
    h = mlp.c_fc(x)
    if activation == "gelu_tanh":
        act = 0.5 * h * (1 + torch.tanh(math.sqrt(2 / math.pi) * (h + 0.044715 * h**3)))
    else:
        act = 0.5 * h * (1 + torch.erf(h / math.sqrt(2)))
    torch.testing.assert_close(mlp(x), mlp.c_proj(act), atol=1e-6, rtol=1e-5)
    other = F.gelu(h, approximate="none" if activation == "gelu_tanh" else "tanh")
    assert (mlp(x) - mlp.c_proj(other)).abs().max() > 1e-5


@pytest.mark.parametrize("norm,cls", [("layernorm", LayerNorm), ("rmsnorm", RMSNorm)])
def test_model_uses_the_configured_norm(norm, cls):
    model = GPT(tiny(norm=norm))
    for m in [b.ln_1 for b in model.transformer.h] + [b.ln_2 for b in model.transformer.h] + [model.transformer.ln_f]:
        assert type(m) is cls


@pytest.mark.parametrize("dim", [16, 15])
def test_sinusoidal_table_is_its_formula(dim):
    table = sinusoidal_table(40, dim)
    assert table.shape == (40, dim)
    for pos in range(40):
        for j in range(dim):
            i = j // 2  # columns 2i and 2i+1 share a frequency
            angle = pos / 10000 ** (2 * i / dim)
            expected = math.sin(angle) if j % 2 == 0 else math.cos(angle)
            assert abs(table[pos, j].item() - expected) < 1e-6, (pos, j)


def test_sinusoidal_positions_are_a_buffer_not_parameters():
    model = GPT(tiny(position="sinusoidal"))
    assert not hasattr(model.transformer, "wpe")
    assert torch.equal(model.pos_table, model.config.sinusoidal_scale * sinusoidal_table(16, 32))
    assert all("pos_table" not in n for n, _ in model.named_parameters())


def test_sinusoidal_table_has_the_token_embeddings_scale():
    """Amplitude 1 would drown the token embeddings (init std 0.02): the table's RMS is theirs, as a learned
    wpe's init. A checkpoint from before the scale (no sinusoidal_scale in model_args) keeps amplitude 1."""
    from checkpoint import model_from_checkpoint
    model = GPT(tiny(position="sinusoidal", block_size=64, n_embd=64, n_head=2))
    assert model.pos_table.pow(2).mean().sqrt().item() == pytest.approx(0.02, rel=0.01)
    assert model.transformer.wte.weight.std().item() == pytest.approx(0.02, rel=0.1)
    old_args = {k: v for k, v in dataclasses.asdict(model.config).items() if k != "sinusoidal_scale"}
    old = model_from_checkpoint({"model": model.state_dict(), "model_args": old_args, "config": {}})
    assert torch.equal(old.pos_table, sinusoidal_table(64, 64))


def test_rope_score_depends_only_on_relative_offset():
    hs, n_pos = 8, 64
    cos, sin = rope_tables(n_pos, hs)
    torch.manual_seed(0)
    q, k = torch.randn(1, 1, 1, hs), torch.randn(1, 1, 1, hs)

    def score(m, n):  # q at position m, k at position n
        qm = apply_rope(q, cos[m:m + 1], sin[m:m + 1])
        kn = apply_rope(k, cos[n:n + 1], sin[n:n + 1])
        return (qm * kn).sum().item()

    for m, n in ((3, 1), (10, 10), (5, 9), (0, 7)):
        for shift in (1, 13, 40):
            assert abs(score(m + shift, n + shift) - score(m, n)) < 1e-5
    # and it does depend on the offset, and rotation keeps lengths
    assert abs(score(5, 1) - score(5, 2)) > 1e-3
    rotated = apply_rope(q, cos[17:18], sin[17:18])
    assert abs(rotated.norm().item() - q.norm().item()) < 1e-5


# ---------------------------------------------------------------------------------------------
# generation and the KV cache


def c_attn_lengths(model, fn):
    """Run fn() and return the sequence length T of every call to the first block's c_attn."""
    seen = []
    handle = model.transformer.h[0].attn.c_attn.register_forward_hook(lambda mod, inp, out: seen.append(inp[0].size(1)))
    try:
        result = fn()
    finally:
        handle.remove()
    return result, seen


@pytest.mark.parametrize("position,attention", list(itertools.product(POSITIONS, ATTENTIONS)))
def test_kv_cache_generation_equals_recompute_past_block_size(position, attention):
    # block_size 16; seed and width chosen so that greedy decoding of every scheme keeps moving
    model = make(seed=1, position=position, attention=attention, n_embd=64)
    prompt = torch.randint(0, 50, (2, 5), generator=torch.Generator().manual_seed(4))
    n_new = 40  # well past block_size: the context is cropped and the cache rebuilt
    cached, t_cached = c_attn_lengths(model, lambda: model.generate(prompt, n_new, temperature=0, use_cache=True))
    plain, t_plain = c_attn_lengths(model, lambda: model.generate(prompt, n_new, temperature=0, use_cache=False))
    assert cached.shape == (2, 5 + n_new)
    assert torch.equal(cached[:, :5], prompt)  # generate returns the prompt, then the new tokens
    assert torch.equal(cached, plain)
    for row in cached[:, 5:].tolist():  # not a constant stream: the equality above has something to prove
        assert len(set(row)) >= 3 and len(set(row[-20:])) >= 2, row  # also past block_size
    # the cache saves work: after the prefill, one position per token until the window is full;
    # from then on the window moves and the cache is rebuilt (block_size positions per token)
    steps_in_window = 16 - 5  # the prefill plus 11 single tokens fill the 16 positions
    assert t_cached == [5] + [1] * steps_in_window + [16] * (n_new - 1 - steps_in_window)
    assert t_plain == [min(5 + i, 16) for i in range(n_new)]


@pytest.mark.parametrize("use_cache", [True, False])
def test_generation_cost_grows_linearly_with_length(use_cache):
    """Twice the tokens, twice the work, far past block_size (16): the positions the model computes double.
    A context that grew with the text (no cropping, or a cache never cut back) would make them grow
    quadratically: x4. (Counted, not timed: a timing bound failed on a loaded machine; bench.py times.)"""
    model = make(position="rope")
    prompt = torch.randint(0, 50, (1, 4), generator=torch.Generator().manual_seed(7))
    n = 300

    def work(n_new):
        _, lengths = c_attn_lengths(model, lambda: model.generate(prompt, n_new, temperature=1.0, use_cache=use_cache))
        return sum(lengths)

    assert work(2 * n) / work(n) == pytest.approx(2, rel=0.03)


@pytest.mark.parametrize("position", POSITIONS)
def test_kv_cache_sampling_equals_recompute(position):
    """Sampled (temperature 1) with the same seed: a varied stream, and still the same tokens."""
    model = make(position=position)
    prompt = torch.randint(0, 50, (2, 5), generator=torch.Generator().manual_seed(4))
    out = []
    for use_cache in (True, False):
        torch.manual_seed(123)
        out.append(model.generate(prompt, 40, temperature=1.0, top_k=20, use_cache=use_cache))
    assert torch.equal(out[0], out[1])
    assert all(len(set(row[-20:])) >= 5 for row in out[0].tolist())


@pytest.mark.parametrize("use_cache", [True, False])
def test_generate_from_a_prompt_longer_than_block_size(use_cache):
    model = make(position="rope")
    prompt = torch.randint(0, 50, (1, 23), generator=torch.Generator().manual_seed(5))
    out = model.generate(prompt, 6, temperature=0, use_cache=use_cache)
    assert out.shape == (1, 29) and torch.equal(out[:, :23], prompt)
    # the first new token is the greedy next token of the last block_size tokens
    logits, _ = model(prompt[:, -16:])
    assert out[0, 23].item() == logits[0, -1].argmax().item()


def test_generate_leaves_no_state_between_calls():
    model = make()
    prompt = torch.randint(0, 50, (1, 4), generator=torch.Generator().manual_seed(6))
    first = model.generate(prompt, 10, temperature=0)
    assert torch.equal(model.generate(prompt, 10, temperature=0), first)


# ---------------------------------------------------------------------------------------------
# sampling


def test_sampling_top_k_and_top_p_limits():
    torch.manual_seed(0)
    logits = torch.randn(64, 30) * 3
    greedy = logits.argmax(dim=-1, keepdim=True)
    assert torch.equal(sample_next(logits, temperature=0), greedy)
    assert torch.equal(sample_next(logits, temperature=1.0, top_k=1), greedy)
    assert torch.equal(sample_next(logits, temperature=1.0, top_p=1e-6), greedy)
    assert torch.equal(sample_next(logits, temperature=1.0, top_p=0.0), greedy)
    # top_k=5: every sample among the 5 largest logits of its row, and it really samples
    row = logits[:1].expand(4000, -1)
    top5 = set(torch.topk(logits[0], 5).indices.tolist())
    drawn = sample_next(row, temperature=1.5, top_k=5).flatten().tolist()
    assert set(drawn) <= top5 and len(set(drawn)) >= 3
    # top_p: the smallest set of most likely tokens reaching p. probs .4 .3 .2 .1 with p=0.5 -> {0, 1}
    probs = torch.tensor([[0.4, 0.3, 0.2, 0.1]]).log().expand(4000, -1)
    drawn = sample_next(probs, temperature=1.0, top_p=0.5).flatten().tolist()
    assert set(drawn) == {0, 1}
    share0 = drawn.count(0) / len(drawn)  # renormalised: 0.4 / 0.7 = 0.571
    assert abs(share0 - 0.4 / 0.7) < 0.05
    drawn = sample_next(probs, temperature=1.0, top_p=0.75).flatten().tolist()  # .4 + .3 < .75 -> {0, 1, 2}
    assert set(drawn) == {0, 1, 2}
    # without limits every token can come
    drawn = sample_next(probs, temperature=1.0).flatten().tolist()
    assert set(drawn) == {0, 1, 2, 3}


def test_generate_top_k_1_is_greedy():
    model = make()
    prompt = torch.randint(0, 50, (2, 3), generator=torch.Generator().manual_seed(7))
    greedy = model.generate(prompt, 12, temperature=0)
    assert torch.equal(model.generate(prompt, 12, temperature=0.8, top_k=1), greedy)
    assert torch.equal(model.generate(prompt, 12, temperature=0.8, top_p=1e-6), greedy)


# ---------------------------------------------------------------------------------------------
# Hugging Face GPT-2 import


def test_from_pretrained_matches_transformers(tmp_path):
    transformers = pytest.importorskip("transformers", reason="checkpoint.model_from_pretrained needs transformers")
    from checkpoint import model_from_pretrained
    torch.manual_seed(0)
    hf_config = transformers.GPT2Config(n_layer=2, n_head=2, n_embd=32, n_positions=64, vocab_size=100,
                                        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    hf = transformers.GPT2LMHeadModel(hf_config).eval()
    # a fresh HF model has zero biases and unit norms: perturb everything so that a skipped tensor
    # or a wrong activation shows up in the logits
    with torch.no_grad():
        for p in hf.parameters():
            p.add_(0.2 * torch.randn_like(p))
    hf.save_pretrained(tmp_path)

    model = model_from_pretrained(str(tmp_path)).eval()
    assert model.config.n_layer == 2 and model.config.block_size == 64 and model.config.vocab_size == 100
    idx = torch.randint(0, 100, (2, 24))
    with torch.no_grad():
        ref = hf(idx).logits
        ours = all_logits(model, idx)
        assert (ours - ref).abs().max() < 1e-4

        # the same greedy continuation; the reference recomputes with HF's model
        seq = idx[:1, :6]
        for _ in range(20):
            seq = torch.cat((seq, hf(seq).logits[:, -1].argmax(dim=-1, keepdim=True)), dim=1)
        assert torch.equal(model.generate(idx[:1, :6], 20, temperature=0), seq)
        assert len(set(seq[0, 6:].tolist())) >= 3

        # the check is sharp enough to catch exact GELU in place of GPT-2's tanh approximation
        exact = model_from_pretrained(str(tmp_path))
        exact.load_state_dict(model.state_dict())
        for block in exact.transformer.h:
            block.mlp.approximate = "none"
        assert (all_logits(exact.eval(), idx) - ref).abs().max() > 1e-4


# ---------------------------------------------------------------------------------------------
# training signal, config validation, crop, optimizer, MFU


def test_tiny_model_overfits_one_batch():
    torch.manual_seed(0)
    model = GPT(tiny(n_embd=32, vocab_size=20))
    x = torch.randint(0, 20, (4, 16))
    y = torch.randint(0, 20, (4, 16))
    opt = model.configure_optimizers(0.0, 1e-2, (0.9, 0.99), "cpu")
    for step in range(300):
        _, loss = model(x, y)
        if step == 0:  # an untrained model is near uniform: loss about ln(20) = 3.0
            assert loss.item() > 2.5
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if loss.item() < 0.1:
            break
    assert loss.item() < 0.1, f"loss {loss.item():.3f} after {step + 1} steps"  # about 30 steps, 0.1 s


@pytest.mark.parametrize("kw,field", [
    (dict(norm="batchnorm"), "norm"),
    (dict(position="alibi"), "position"),
    (dict(attention="flash"), "attention"),
    (dict(n_embd=100, n_head=3), "n_embd"),
    (dict(n_layer=0), "n_layer"),
    (dict(block_size=-1), "block_size"),
    (dict(dropout=1.0), "dropout"),
])
def test_bad_config_names_the_field(kw, field):
    with pytest.raises(ValueError, match=rf"GPTConfig\.{field}="):
        GPTConfig(**kw)


def test_rope_needs_an_even_head_size():
    with pytest.raises(ValueError, match=r"GPTConfig\.n_head=.*rope needs an even head size"):
        GPTConfig(n_embd=15, n_head=5, position="rope")  # head size 3
    GPTConfig(n_embd=15, n_head=5, position="learned")  # fine without rope
    GPTConfig(n_embd=16, n_head=4, position="rope")


def test_forward_longer_than_block_size_is_a_clear_error():
    model = GPT(tiny())
    model(torch.zeros(1, 16, dtype=torch.long))
    with pytest.raises(ValueError, match="17 is longer than block_size 16"):
        model(torch.zeros(1, 17, dtype=torch.long))


def test_from_dict_ignores_other_keys():
    config = GPTConfig.from_dict({"n_layer": 3, "batch_size": 8, "out_dir": "x"})
    assert config.n_layer == 3 and config.n_embd == 768


@pytest.mark.parametrize("position,attention", list(itertools.product(POSITIONS, ATTENTIONS)))
def test_crop_block_size(position, attention):
    model = make(position=position, attention=attention, block_size=32)
    before = model.get_num_params(non_embedding=False)
    idx = torch.randint(0, 50, (2, 8), generator=torch.Generator().manual_seed(8))
    with torch.no_grad():
        ref = all_logits(model, idx)
    model.crop_block_size(8)
    assert model.config.block_size == 8
    shrink = before - model.get_num_params(non_embedding=False)
    assert shrink == (24 * 32 if position == "learned" else 0)
    if position == "learned":
        assert model.transformer.wpe.weight.shape == (8, 32)
    with torch.no_grad():  # positions 0..7 are computed as before the crop
        torch.testing.assert_close(all_logits(model, idx), ref, atol=1e-6, rtol=0)
        assert model.generate(idx, 12, temperature=0).shape == (2, 20)
        assert torch.equal(model.generate(idx[:, :3], 12, temperature=0),
                           model.generate(idx[:, :3], 12, temperature=0, use_cache=False))
    with pytest.raises(ValueError, match="block_size"):
        model(torch.zeros(1, 9, dtype=torch.long))
    with pytest.raises(ValueError, match="not 16"):  # cropping cannot grow the context
        model.crop_block_size(16)
    _, loss = model(idx, idx)  # and it still trains
    loss.backward()


@pytest.mark.parametrize("bias,norm,tie", [(True, "layernorm", True), (False, "rmsnorm", False)])
def test_configure_optimizers_decays_exactly_the_matrices(bias, norm, tie):
    model = GPT(tiny(bias=bias, norm=norm, tie_weights=tie))
    opt = model.configure_optimizers(0.1, 3e-4, (0.9, 0.95), "cpu")
    assert isinstance(opt, torch.optim.AdamW)
    decay, no_decay = opt.param_groups
    assert decay["weight_decay"] == 0.1 and no_decay["weight_decay"] == 0.0
    matrices = {id(p) for p in model.parameters() if p.dim() >= 2}
    vectors = {id(p) for p in model.parameters() if p.dim() < 2}
    assert {id(p) for p in decay["params"]} == matrices and len(decay["params"]) == len(matrices)
    assert {id(p) for p in no_decay["params"]} == vectors and len(no_decay["params"]) == len(vectors)
    assert id(model.transformer.wte.weight) in matrices and (id(model.transformer.h[0].attn.c_attn.bias) in vectors) == bias
    assert all(g["lr"] == 3e-4 and g["betas"] == (0.9, 0.95) for g in opt.param_groups)
    _, loss = model(torch.zeros(1, 4, dtype=torch.long), torch.ones(1, 4, dtype=torch.long))
    loss.backward()
    opt.step()  # the (fused on CPU) optimizer really runs


@pytest.mark.parametrize("tie", [True, False])
def test_configure_muon_takes_the_blocks_matrices(tie):
    """muon.configure_muon: Muon holds exactly the blocks' 2-D weights (c_attn, c_proj, c_fc) at muon_lr, AdamW
    the rest (embeddings, an untied lm_head, norm gains, biases); one step moves every parameter, and the
    state dict round-trips into a fresh optimizer."""
    model = GPT(tiny(bias=True, tie_weights=tie))
    opt = configure_muon(model, 0.1, 1e-3, (0.9, 0.95), "cpu", muon_lr=0.05, muon_momentum=0.9,
                         muon_weight_decay=0.01, muon_ns_steps=3)
    assert isinstance(opt.muon, torch.optim.Muon) and isinstance(opt.adamw, torch.optim.AdamW)
    hidden = {id(p) for n, p in model.named_parameters() if n.startswith("transformer.h.") and p.dim() == 2}
    in_muon = [id(p) for g in opt.muon.param_groups for p in g["params"]]
    in_adamw = [id(p) for g in opt.adamw.param_groups for p in g["params"]]
    assert set(in_muon) == hidden and len(in_muon) == 4 * model.config.n_layer
    assert set(in_adamw) == {id(p) for p in model.parameters()} - hidden and len(in_adamw) == len(set(in_adamw))
    assert id(model.transformer.wte.weight) in in_adamw and id(model.lm_head.weight) in in_adamw
    for g in opt.muon.param_groups:
        assert (g["lr"], g["momentum"], g["weight_decay"], g["lr_scale"]) == (0.05, 0.9, 0.01, pytest.approx(50.0))
        assert g["ns_steps"] == 3
    qkv = [id(p) for p in opt.muon.param_groups[1]["params"]]  # c_attn: q, k, v orthogonalised one by one
    assert opt.muon.param_groups[1]["split"] == 3 and qkv == [id(b.attn.c_attn.weight) for b in model.transformer.h]
    assert [g["lr_scale"] for g in opt.adamw.param_groups] == [1.0, 1.0]
    assert opt.param_groups == opt.muon.param_groups + opt.adamw.param_groups
    before = [p.detach().clone() for p in model.parameters()]
    idx = torch.randint(0, model.config.vocab_size, (2, 8))
    model(idx, idx)[1].backward()
    opt.step()
    assert all(not torch.equal(a, p) for a, p in zip(before, model.parameters()))
    fresh = configure_muon(model, 0.1, 1e-3, (0.9, 0.95), "cpu")
    fresh.load_state_dict(opt.state_dict())
    assert fresh.param_groups[0]["lr"] == 0.05 and fresh.param_groups[0] is fresh.muon.param_groups[0]
    buf = opt.muon.state[model.transformer.h[0].attn.c_attn.weight]["momentum_buffer"]
    assert torch.equal(fresh.muon.state[model.transformer.h[0].attn.c_attn.weight]["momentum_buffer"], buf)
    with pytest.raises(ValueError, match="adamw"):
        fresh.load_state_dict(model.configure_optimizers(0.1, 1e-3, (0.9, 0.95), "cpu").state_dict())


def test_block_muon_is_torchs_muon_with_float32_newton_schulz_and_qkv_blocks():
    """BlockMuon in bfloat16 steps exactly as torch.optim.Muon; in float32 (chosen on a CPU without native
    bf16) closely; and a group with split=3 updates each row block as torch's Muon updates that block alone."""
    from muon import BlockMuon
    torch.manual_seed(0)
    w = [torch.randn(24, 8), torch.randn(8, 32)]
    grads = [[torch.randn_like(t) for t in w] for _ in range(3)]

    def run(make, weights, steps=grads):
        weights = [t.clone().requires_grad_() for t in weights]
        opt = make(weights)
        for gs in steps:
            for t, g in zip(weights, gs):
                t.grad = g.clone()
            opt.step()
        return [t.detach() for t in weights]
    kw = dict(lr=0.02, weight_decay=0.1, adjust_lr_fn="original")
    ref = run(lambda p: torch.optim.Muon(p, **kw), w)
    assert all(torch.equal(a, b) for a, b in zip(ref, run(lambda p: BlockMuon(p, ns_dtype=torch.bfloat16, **kw), w)))
    fp32 = run(lambda p: BlockMuon(p, ns_dtype=torch.float32, **kw), w)
    assert all(torch.allclose(a, b, atol=2e-3) and not torch.equal(a, b) for a, b in zip(ref, fp32))
    # split=3 on the (24, 8) matrix == torch's Muon on its three (8, 8) blocks, each its own parameter
    blocks = run(lambda p: torch.optim.Muon(p, **kw), list(w[0].chunk(3)), [list(gs[0].chunk(3)) for gs in grads])
    split = run(lambda p: BlockMuon([{"params": p[:1], "split": 3}], ns_dtype=torch.bfloat16, **kw), w[:1])
    assert torch.equal(split[0], torch.cat(blocks))
    assert configure_muon(GPT(tiny()), 0.1, 1e-3, (0.9, 0.95), "cpu", ns_dtype=torch.bfloat16).muon.ns_dtype == \
        torch.bfloat16


@pytest.mark.parametrize("unscaled", [True, False])  # train.py unscales first when it clips; else the step does
def test_muon_under_a_float16_grad_scaler_skips_an_inf_step_without_asking_the_host(unscaled):
    """A GradScaler hands an optimizer that takes them its scale and found_inf, as tensors on the device (torch's
    amp/grad_scaler.py); otherwise its step waits on the GPU for found_inf.item() every iteration. MuonAdamW takes
    them: with found_inf set (as GradScaler sets it) a step changes no weight or state; without, under a scaler or
    with found_inf 0, a step is the one taken without any scaler, to the bit. Then a scaler skips a real inf step."""
    def state(model, opt):
        return [t.clone() for t in [*model.parameters(), *(v for o in (opt.muon, opt.adamw)
                                                          for s in o.state.values() for v in s.values())]]

    def run(how, steps=3):
        model = make(bias=True)
        opt, scaler = configure_muon(model, 0.1, 1e-2, (0.9, 0.95), "cpu", muon_weight_decay=0.1), None
        for i in range(steps):
            idx = torch.randint(0, 50, (2, 8), generator=torch.Generator().manual_seed(i))
            loss = model(idx, idx)[1]
            if how == "scaler":
                scaler = scaler or torch.amp.GradScaler("cpu", init_scale=2.0 ** 10)
                scaler.scale(loss).backward()
                if unscaled:
                    scaler.unscale_(opt)
                scaler.step(opt)
                scaler.update()
            else:
                loss.backward()
                before = state(model, opt)
                opt.grad_scale, opt.found_inf = None, torch.tensor(float(how == "inf" and i == steps - 1))
                opt.step()
            opt.zero_grad()
        return model, opt, scaler, before if how == "inf" else None

    plain, clean, scaled = (state(*run(how)[:2]) for how in ("plain", "clean", "scaler"))
    assert all(torch.equal(a, b) and torch.equal(a, c) for a, b, c in zip(plain, clean, scaled, strict=True))
    model, opt, _, before = run("inf")
    assert all(torch.equal(a, b) for a, b in zip(before, state(model, opt), strict=True))
    model, opt, scaler, _ = run("scaler", steps=1)
    before = state(model, opt)
    model(torch.zeros(1, 4, dtype=torch.long), torch.ones(1, 4, dtype=torch.long))[1].backward()
    model.transformer.h[0].mlp.c_fc.weight.grad[0, 0] = math.inf  # Muon's
    scaler.step(opt)
    scaler.update()
    assert all(torch.equal(a, b) for a, b in zip(before, state(model, opt), strict=True)) and scaler.get_scale() == 512


def test_under_autocast_q_k_v_and_the_cache_share_one_dtype(monkeypatch):
    """Rotary tables are float32; under bf16 autocast q and k must not be promoted to them while v stays bf16."""
    from model import CausalSelfAttention
    seen, attend = [], CausalSelfAttention.attend
    monkeypatch.setattr(CausalSelfAttention, "attend", lambda self, q, k, v, mask: seen.append((q.dtype, k.dtype,
                        v.dtype)) or attend(self, q, k, v, mask))
    model, cache = make(position="rope"), KVCache(2, 16)
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        model(torch.zeros(1, 3, dtype=torch.long), kv_cache=cache)
    assert set(seen) == {(torch.bfloat16,) * 3} and cache.k[0].dtype == cache.v[0].dtype == torch.bfloat16


@pytest.mark.slow
def test_a_compiled_step_gives_the_same_tokens_and_compiles_two_graphs_for_any_length():
    """sample.py --compile=true: the steps after the prompt always have one of two shapes (a token, or the whole
    window once it moves), positions come as a tensor: two graphs, none more per position, the same greedy tokens."""
    from torch._dynamo.utils import counters
    torch._dynamo.reset()
    counters.clear()
    model = make(position="rope", norm="rmsnorm")
    prompt = torch.randint(0, 50, (1, 3), generator=torch.Generator().manual_seed(4))  # one row: the window's stride
    step = torch.compile(model, dynamic=False)  # (1, L) was contiguous for every L: a recompile per token
    for n in (30, 40):  # past block_size (16)
        compiled = torch.cat([prompt, *model.generate_tokens(prompt, n, temperature=0, step=step)], dim=1)
        assert torch.equal(compiled, model.generate(prompt, n, temperature=0))
    assert counters["stats"]["unique_graphs"] == 2


def test_parameter_counts_are_sizings():
    """GPT-2 small, built on the meta device: 124,439,808 parameters, 123,653,376 without the position table,
    as nanoGPT's scaling notebook (sizing.gpt_params) and sizing.param_counts count them."""
    with torch.device("meta"):
        model = GPT(GPTConfig())
    assert model.get_num_params(non_embedding=False) == param_counts(model.config)["total"] == 124_439_808
    assert model.get_num_params() == gpt_params(1024, 50257, 768, 12, 12) == 123_653_376
    for kw in (dict(tie_weights=False), dict(position="rope", norm="rmsnorm", bias=False)):
        small = GPT(tiny(**kw))
        counts = param_counts(small.config)
        assert (small.get_num_params(False), small.get_num_params()) == (counts["total"], counts["non_embedding"])


def test_tie_weights_shares_one_matrix_or_keeps_two():
    tied, untied = GPT(tiny()), GPT(tiny(tie_weights=False))
    assert tied.lm_head.weight is tied.transformer.wte.weight
    assert untied.lm_head.weight is not untied.transformer.wte.weight
    idx = torch.randint(0, 50, (2, 8))
    untied(idx, idx)[1].backward()
    assert untied.lm_head.weight.grad.abs().sum() > 0 and untied.transformer.wte.weight.grad.abs().sum() > 0
    assert untied.get_num_params(False) - tied.get_num_params(False) == 50 * 32


@pytest.mark.parametrize("position", POSITIONS)
def test_model_compiles_in_one_graph(position):
    # a graph break splits torch.compile's fused code and runs the rest eagerly: slower, silently
    torch._dynamo.reset()
    model = GPT(tiny(position=position, norm="rmsnorm" if position == "rope" else "layernorm"))
    x = torch.randint(0, 50, (2, 16))
    explained = torch._dynamo.explain(model)(x, x)
    assert explained.graph_count == 1 and explained.graph_break_count == 0, explained.break_reasons


def test_state_dict_names_are_nanogpt_and_hugging_face_names():
    """One layout: transformer.{wte,wpe,h,ln_f} and lm_head, as nanoGPT's and HF GPT-2's state dicts."""
    model = GPT(GPTConfig(block_size=8, vocab_size=11, n_layer=2, n_head=2, n_embd=8))
    keys = set(model.state_dict())
    assert {"transformer.wte.weight", "transformer.wpe.weight", "transformer.ln_f.weight", "transformer.ln_f.bias",
            "transformer.h.1.attn.c_attn.weight", "transformer.h.1.mlp.c_proj.bias", "lm_head.weight"} <= keys
    assert all(k == "lm_head.weight" or k.startswith("transformer.") for k in keys)
    transformers = pytest.importorskip("transformers", reason="the Hugging Face side of the comparison")
    hf = transformers.GPT2LMHeadModel(transformers.GPT2Config(n_layer=2, n_head=2, n_embd=8, n_positions=8,
                                                              vocab_size=11))
    hf_keys = {k for k in hf.state_dict() if not k.endswith((".attn.bias", ".attn.masked_bias"))}
    assert keys == hf_keys


@pytest.mark.parametrize("compiled", [False, True])
def test_first_layout_checkpoint_still_loads(compiled):
    """A checkpoint glassgpt wrote before the transformer container (wte.weight, h.0...) loads unchanged."""
    from checkpoint import model_from_checkpoint
    torch.manual_seed(0)
    config = GPTConfig(block_size=8, vocab_size=11, n_layer=2, n_head=2, n_embd=8)
    model = GPT(config).eval()
    prefix = "_orig_mod." if compiled else ""
    old = {prefix + k.removeprefix("transformer."): v for k, v in model.state_dict().items()}
    assert "wte.weight" in {k.removeprefix(prefix) for k in old}
    loaded = model_from_checkpoint({"model": old, "model_args": asdict(config)}).eval()
    idx = torch.randint(0, 11, (2, 8))
    assert torch.equal(loaded(idx, idx)[0], model(idx, idx)[0])
