"""
The glassgpt model: a GPT-2 style decoder-only transformer in one file.

References:
1) OpenAI's GPT-2 release (TensorFlow): https://github.com/openai/gpt-2/blob/master/src/model.py
2) Hugging Face's GPT-2 (PyTorch), whose weights checkpoint.py imports.
3) "Attention is all you need" (sinusoidal positions), RoFormer (rotary positions),
   Zhang & Sennrich 2019 (RMSNorm).

sizing.py says analytically what this model costs; tests/ prove the two agree.
"""

import math
from dataclasses import dataclass, fields

import torch
import torch.nn as nn
from torch.nn import functional as F

NORMS = ("layernorm", "rmsnorm")
POSITIONS = ("learned", "sinusoidal", "rope")
ATTENTIONS = ("sdpa", "manual")
ACTIVATIONS = ("gelu_tanh", "gelu")


@dataclass
class GPTConfig:
    block_size: int = 1024  # tokens of context: the longest sequence the model reads
    vocab_size: int = 50257  # GPT-2's BPE; 50304 (a multiple of 64) is faster on GPUs
    n_layer: int = 12  # transformer blocks
    n_head: int = 12  # attention heads per block; n_embd must be a multiple
    n_embd: int = 768  # width of the residual stream
    dropout: float = 0.0  # training only: the chance each activation is zeroed
    bias: bool = True  # biases in the Linears and LayerNorms, as GPT-2
    norm: str = "layernorm"  # "layernorm" | "rmsnorm"
    position: str = "learned"  # "learned" | "sinusoidal" | "rope"
    attention: str = "sdpa"  # "sdpa" (fused kernel) | "manual" (explicit T x T scores)
    tie_weights: bool = True  # lm_head shares its weight with wte
    # "gelu_tanh" (GPT-2's tanh approximation) | "gelu" (the exact erf, nanoGPT's nn.GELU)
    activation: str = "gelu_tanh"
    # Sinusoidal only: the table's amplitude, that of wte's RMS. Sines of amplitude 1 would drown
    # the token embeddings, whose init std is 0.02.
    sinusoidal_scale: float = 0.02 * math.sqrt(2)

    def __post_init__(self):
        def bad(field, why):
            raise ValueError(f"GPTConfig.{field}={getattr(self, field)!r}: {why}")
        choices = dict(norm=NORMS, position=POSITIONS, attention=ATTENTIONS, activation=ACTIVATIONS)
        for name, allowed in choices.items():
            if getattr(self, name) not in allowed:
                bad(name, f"must be one of {', '.join(allowed)}")
        for name in ("block_size", "vocab_size", "n_layer", "n_head", "n_embd"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                bad(name, "must be a positive integer")
        if self.n_embd % self.n_head:
            bad("n_embd", f"must be divisible by n_head={self.n_head}")
        head_size = self.n_embd // self.n_head
        if self.position == "rope" and head_size % 2:
            bad("n_head", f"rope needs an even head size, got n_embd/n_head = {head_size}")
        if not 0.0 <= self.dropout < 1.0:
            bad("dropout", "must be in [0, 1)")

    @classmethod
    def from_dict(cls, d):
        """Build from a dict that may hold other keys too (a train.py config, a checkpoint)."""
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in names})


def to_dtype_of(t, x):
    """t in x's dtype. t itself where it already is, or is None: even a .to() that changes nothing
    costs a call, and a sampled token makes dozens of these."""
    return t if t is None or t.dtype == x.dtype else t.to(x.dtype)


class LayerNorm(nn.Module):
    """LayerNorm with an optional bias (PyTorch's nn.LayerNorm had no bias=False before 2.1)."""

    def __init__(self, ndim, bias, eps=1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(ndim))
        self.bias = nn.Parameter(torch.zeros(ndim)) if bias else None

    def forward(self, x):
        # In x's dtype: FSDP may gather a float32 stream's norm weights in bf16 (train.py --fsdp).
        weight = to_dtype_of(self.weight, x)
        return F.layer_norm(x, self.weight.shape, weight, to_dtype_of(self.bias, x), self.eps)


class RMSNorm(nn.Module):
    """y = x / sqrt(mean(x^2) + eps) * weight: LayerNorm without centring and without a bias."""

    def __init__(self, ndim, eps=1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(ndim))

    def forward(self, x):
        return F.rms_norm(x, self.weight.shape, to_dtype_of(self.weight, x), self.eps)


def make_norm(config):
    if config.norm == "layernorm":
        return LayerNorm(config.n_embd, config.bias)
    return RMSNorm(config.n_embd)


def angles(n_pos, dim):
    """pos / 10000^(2i/dim) for each position and each i < dim/2, (n_pos, ceil(dim/2)), in float64:
    the angles of the sinusoidal and the rotary positions."""
    inv_freq = 10000.0 ** (-torch.arange(0, dim, 2, dtype=torch.float64) / dim)
    return torch.arange(n_pos, dtype=torch.float64)[:, None] * inv_freq


def sinusoidal_table(n_pos, dim):
    """PE(pos, 2i) = sin(angle), PE(pos, 2i+1) = cos(angle), as in "Attention is all you need"."""
    a = angles(n_pos, dim)
    return torch.stack((a.sin(), a.cos()), dim=-1).view(n_pos, -1)[:, :dim].float()


def rope_tables(n_pos, head_size):
    """cos and sin of the angles for the rotary embedding, (n_pos, head_size) each: the cosines
    twice, and the sines negated then as they are."""
    a = angles(n_pos, head_size)
    cos = torch.cat((a.cos(), a.cos()), dim=-1)
    sin = torch.cat((-a.sin(), a.sin()), dim=-1)
    return cos.float(), sin.float()


def apply_rope(x, cos, sin):
    """Rotate each pair (x[i], x[i + hs/2]) of x (B, nh, T, hs) by its position's angle: x cos plus
    x with its halves swapped times sin (rope_tables negates the first half's sines). The tables
    are cast to x's dtype, so that under autocast float32 tables do not promote q and k."""
    swapped = x.roll(x.size(-1) // 2, dims=-1)
    return x * to_dtype_of(cos, x) + swapped * to_dtype_of(sin, x)


class KVCache:
    """Keys and values of every position so far, per layer, in buffers of max_len positions made
    once. A new token writes one position and the shapes never change, so one compiled step serves
    every position. max_len is the model's block_size: GPT.forward masks the buffer by position."""

    def __init__(self, n_layer, max_len):
        self.max_len = max_len
        self.k = [None] * n_layer
        self.v = [None] * n_layer
        self.pos = torch.tensor(0)  # the positions stored; GPT.forward advances it

    def update(self, layer, pos, k, v):
        """Store k, v (B, nh, T, hs) at positions pos (T,); return the whole buffers, (B, nh,
        max_len, hs) each. They start as zeros in the dtype the model computes in: even a masked
        NaN would poison attention."""
        if self.k[layer] is None:
            self.k[layer] = k.new_zeros(k.size(0), k.size(1), self.max_len, k.size(3))
            self.v[layer] = torch.zeros_like(self.k[layer])
        self.k[layer].index_copy_(2, pos, k)
        self.v[layer].index_copy_(2, pos, v)
        return self.k[layer], self.v[layer]


class CausalSelfAttention(nn.Module):

    def __init__(self, config):
        super().__init__()
        self.n_head = config.n_head
        self.n_embd = config.n_embd
        self.dropout = config.dropout
        self.manual = config.attention == "manual"
        # True: also compute the attention probabilities and keep them in self.att (lens.py)
        self.capture = False
        self.att = None
        # one fused projection for query, key and value of all heads
        self.c_attn = nn.Linear(config.n_embd, 3 * config.n_embd, bias=config.bias)
        self.c_proj = nn.Linear(config.n_embd, config.n_embd, bias=config.bias)

    def forward(self, x, rope=None, kv_cache=None, layer=0, pos=None, mask=None):
        B, T, C = x.size()
        nh = self.n_head
        # the heads of query, key and value: (B, T, 3C) -> (B, 3 nh, T, hs)
        qkv = self.c_attn(x).view(B, T, 3 * nh, C // nh).transpose(1, 2)
        qk, v = qkv.split((2 * nh, nh), dim=1)
        if rope is not None:
            qk = apply_rope(qk, *rope)  # q's and k's heads rotated in one go
        q, k = qk.split(nh, dim=1)
        if kv_cache is not None:
            k, v = kv_cache.update(layer, pos, k, v)
        y = self.attend(q, k, v, mask)
        y = y.transpose(1, 2).contiguous().view(B, T, C)  # re-assemble the heads side by side
        return F.dropout(self.c_proj(y), self.dropout, self.training)

    def attend(self, q, k, v, mask=None):
        """Each head's weighted sum of values, (B, nh, T, hs), for T queries over S keys: causal
        (S = T) without a mask, else as mask (T, S) allows."""
        T = q.size(2)
        if self.manual or self.capture:
            if mask is None:  # the T x T lower triangle: row i may look at columns <= i
                mask = torch.ones(T, T, dtype=torch.bool, device=q.device).tril()
            # explicit scores: O(T^2) memory and FLOPs per head, the quadratic cost made visible
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
            att = F.softmax(att.masked_fill(~mask, float("-inf")), dim=-1)
            if self.capture:  # the probabilities themselves; the output below is the usual path's
                self.att = att.detach()
        if self.manual:
            return F.dropout(att, self.dropout, self.training) @ v
        dropout_p = self.dropout if self.training else 0.0
        return F.scaled_dot_product_attention(q, k, v, mask, dropout_p, is_causal=mask is None)


class MLP(nn.Module):

    def __init__(self, config):
        super().__init__()
        self.c_fc = nn.Linear(config.n_embd, 4 * config.n_embd, bias=config.bias)
        self.c_proj = nn.Linear(4 * config.n_embd, config.n_embd, bias=config.bias)
        self.dropout = config.dropout
        # GPT-2's tanh approximation, or the exact erf GELU that nanoGPT's nn.GELU() trained with
        self.approximate = "tanh" if config.activation == "gelu_tanh" else "none"

    def forward(self, x):
        h = self.c_fc(x)
        h = F.gelu(h, approximate=self.approximate)
        return F.dropout(self.c_proj(h), self.dropout, self.training)


class Block(nn.Module):

    def __init__(self, config):
        super().__init__()
        self.ln_1 = make_norm(config)
        self.attn = CausalSelfAttention(config)
        self.ln_2 = make_norm(config)
        self.mlp = MLP(config)

    def forward(self, x, rope=None, kv_cache=None, layer=0, pos=None, mask=None):
        x = x + self.attn(self.ln_1(x), rope, kv_cache, layer, pos, mask)
        x = x + self.mlp(self.ln_2(x))
        return x


def sample_next(logits, temperature=1.0, top_k=None, top_p=None):
    """One token per row of logits (B, V): greedy at temperature 0, else top-k and/or nucleus
    sampling."""
    if temperature == 0:
        return logits.argmax(dim=-1, keepdim=True)
    logits = logits / temperature
    if top_k is not None:
        kth = torch.topk(logits, min(top_k, logits.size(-1))).values[:, [-1]]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p is not None and top_p < 1.0:
        # Keep the fewest most likely tokens whose probability reaches top_p: drop a token where
        # those before it already reach it. The most likely token always stays, so that top_p=0
        # is greedy, not an error.
        sorted_logits, order = torch.sort(logits, descending=True)
        probs = sorted_logits.softmax(dim=-1)
        drop = probs.cumsum(dim=-1) - probs >= top_p
        drop[:, 0] = False
        logits = logits.masked_fill(drop.scatter(-1, order, drop), float("-inf"))
    return torch.multinomial(F.softmax(logits, dim=-1), num_samples=1)


class GPT(nn.Module):

    def __init__(self, config):
        super().__init__()
        self.config = config
        # nanoGPT's and Hugging Face GPT-2's layout, so state-dict keys read the same in all three:
        # transformer.wte, transformer.wpe, transformer.h.0.attn.c_attn.weight, ..., lm_head.weight
        wte = nn.Embedding(config.vocab_size, config.n_embd)
        self.transformer = nn.ModuleDict(dict(wte=wte))
        if config.position == "learned":
            self.transformer.wpe = nn.Embedding(config.block_size, config.n_embd)
        elif config.position == "sinusoidal":  # fixed, not learned: a buffer, not a parameter
            table = sinusoidal_table(config.block_size, config.n_embd)
            self.register_buffer("pos_table", config.sinusoidal_scale * table, persistent=False)
        else:  # rope rotates q and k inside attention instead of adding to x
            cos, sin = rope_tables(config.block_size, config.n_embd // config.n_head)
            self.register_buffer("rope_cos", cos, persistent=False)
            self.register_buffer("rope_sin", sin, persistent=False)
        self.transformer.h = nn.ModuleList([Block(config) for _ in range(config.n_layer)])
        self.transformer.ln_f = make_norm(config)
        self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=False)
        if config.tie_weights:  # one matrix embeds tokens and scores them (Press & Wolf 2017)
            self.lm_head.weight = self.transformer.wte.weight
        self.apply(self._init_weights)
        # GPT-2: scale the residual projections by 1/sqrt(2 * n_layer), two per block, so the
        # residual stream's variance does not grow with depth
        for name, p in self.named_parameters():
            if name.endswith("c_proj.weight"):
                nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * config.n_layer))

    def _init_weights(self, module):
        if isinstance(module, nn.Linear):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)
            if module.bias is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)

    def get_num_params(self, non_embedding=True):
        """
        Parameters, each shared tensor once. non_embedding leaves out the lookup tables that do no
        matmul: the learned position table and, only when untied, the token table (a tied wte is
        the lm_head too, so it stays in), as nanoGPT's scaling notebook counts.
        """
        n = sum(p.numel() for p in self.parameters())
        if non_embedding:
            if self.config.position == "learned":
                n -= self.transformer.wpe.weight.numel()
            if not self.config.tie_weights:
                n -= self.transformer.wte.weight.numel()
        return n

    def forward(self, idx, targets=None, kv_cache=None):
        B, T = idx.size()
        block_size = self.config.block_size
        if T > block_size:
            raise ValueError(f"sequence of length {T} is longer than block_size {block_size}")
        pos = torch.arange(T, device=idx.device)
        mask = None  # causal
        if kv_cache is not None:
            # T new positions after those stored. Each query sees the whole buffer up to its own
            # position, so that the shapes never change.
            pos = pos + kv_cache.pos
            mask = torch.arange(kv_cache.max_len, device=idx.device) <= pos[:, None]
            kv_cache.pos = pos[-1] + 1
        t, rope = self.transformer, None
        x = t.wte(idx)
        if self.config.position == "learned":
            x = x + t.wpe(pos)
        elif self.config.position == "sinusoidal":
            x = x + self.pos_table[pos]
        else:
            rope = (self.rope_cos[pos], self.rope_sin[pos])
        x = F.dropout(x, self.config.dropout, self.training)
        for layer, block in enumerate(t.h):
            x = block(x, rope, kv_cache, layer, pos, mask)
        x = t.ln_f(x)
        if targets is not None:
            logits = self.lm_head(x)
            return logits, self.loss(logits, targets)
        # inference: only the last position's logits are needed (a slice keeps the time dim)
        return self.lm_head(x[:, -1:, :]), None

    @staticmethod
    def loss(logits, targets):
        """The mean next-token cross-entropy (targets of -1 ignored): a function of its own, to
        compile on its own."""
        logits = logits.view(-1, logits.size(-1))
        return F.cross_entropy(logits, targets.view(-1), ignore_index=-1)

    def crop_block_size(self, block_size):
        """Shrink the context, e.g. to fine-tune GPT-2 (block 1024) with a smaller one."""
        if not 0 < block_size <= self.config.block_size:
            raise ValueError(f"can only crop block_size {self.config.block_size} "
                             f"to a smaller size, not {block_size}")
        self.config.block_size = block_size
        if self.config.position == "learned":
            wpe = self.transformer.wpe
            wpe.weight = nn.Parameter(wpe.weight[:block_size])
            wpe.num_embeddings = block_size
        elif self.config.position == "sinusoidal":
            self.pos_table = self.pos_table[:block_size]
        else:
            self.rope_cos = self.rope_cos[:block_size]
            self.rope_sin = self.rope_sin[:block_size]

    def crop_vocab_size(self, vocab_size):
        """Drop the ids past vocab_size, which a padded vocabulary adds (GPT-2's 50257 as 50304).
        They were never trained on, so never sampled; the logits of the others are unchanged."""
        wte, head = self.transformer.wte, self.lm_head
        wte.weight = nn.Parameter(wte.weight[:vocab_size])
        head.weight = wte.weight
        if not self.config.tie_weights:
            head.weight = nn.Parameter(head.weight[:vocab_size])
        wte.num_embeddings = vocab_size
        head.out_features = vocab_size
        self.config.vocab_size = vocab_size

    def configure_optimizers(self, weight_decay, learning_rate, betas, device_type):
        """AdamW that decays the matrices (matmul weights, embeddings), not biases or norm gains."""
        params = [p for p in self.parameters() if p.requires_grad]
        groups = [{"params": [p for p in params if p.dim() >= 2], "weight_decay": weight_decay},
                  {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}]
        # The fused kernel does the whole update in one pass, faster than foreach (docs/cpu.md).
        fused = device_type in ("cuda", "cpu")
        return torch.optim.AdamW(groups, lr=learning_rate, betas=betas, fused=fused)

    @torch.inference_mode()
    def generate_tokens(self, idx, max_new_tokens, temperature=1.0, top_k=None, top_p=None,
                        use_cache=True, step=None):
        """Yield max_new_tokens new tokens, each (B, 1), continuing idx (B, T); temperature 0 is
        greedy. With use_cache each token sends one position through the model; without, the whole
        context is recomputed (the reference). Past block_size the context is cropped to its last
        block_size tokens; every position then shifts, so from there on the window is recomputed,
        as without the cache. step runs the model after the prompt (a compiled copy of it), in
        shapes that never change."""
        block_size = self.config.block_size
        step = self if step is None else step
        cache = KVCache(self.config.n_layer, block_size) if use_cache else None
        logits, _ = self(idx[:, -block_size:], kv_cache=cache)  # the prompt, stored in the cache
        for n in range(1, max_new_tokens + 1):
            token = sample_next(logits[:, -1, :], temperature, top_k, top_p)
            yield token
            idx = torch.cat((idx, token), dim=1)
            if n == max_new_tokens:
                break
            if cache is not None and idx.size(1) <= block_size:
                logits, _ = step(token, kv_cache=cache)  # one new position through the cache
            else:  # the whole window, copied so that its strides never change
                window = idx[:, -block_size:].clone(memory_format=torch.contiguous_format)
                logits, _ = step(window)

    def generate(self, idx, max_new_tokens, temperature=1.0, top_k=None, top_p=None,
                 use_cache=True):
        """The prompt idx (B, T) followed by max_new_tokens generated tokens. Call model.eval()
        first."""
        tokens = self.generate_tokens(idx, max_new_tokens, temperature, top_k, top_p, use_cache)
        return torch.cat([idx, *tokens], dim=1)
