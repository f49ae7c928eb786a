"""
What a glassgpt model costs, worked out on paper: parameters per component, FLOPs per token,
training memory, checkpoint size. tests/ prove every count equals the instantiated model.

    python sizing.py                      # GPT-2 small (124M)
    python sizing.py config/tiny.py       # any train.py config, --key=value overrides
    python sizing.py --out_dir=out-tiny   # the model a run trained, from its ckpt.pt
    python sizing.py --n_layer=48 --n_head=25 --n_embd=1600   # gpt2-xl, sized in a second
"""

import os
import sys

from configurator import ConfigError, config_keys, configure, run

REPO = os.path.dirname(os.path.abspath(__file__))
OPTIMIZERS = ("adamw", "muon")
# sizing.py's own keys, beside GPTConfig's (model.py). A train.py config file sets them too.
KEYS = dict(
    vocab_size=0,  # 0: the vocab of the config's dataset (its meta.json), else GPT-2's 50257
    seq_len=0,  # the sequence length FLOPs are counted at; 0: block_size
    dataset="",  # train.py's key: vocab_size comes from data/<dataset>/meta.json
    data_dir="",  # train.py's key: the dataset's folder, if not data/<dataset>
    optimizer="adamw",  # adamw | muon: whose state the checkpoint and training memory hold
    dtype="float32",  # train.py's (auto is float32): the autocast the activations are counted in
    batch_size=12,  # train.py's: the sequences per micro-batch whose activations are counted
    fsdp_processes=1,  # FSDP over N processes: each holds 1/N of params, grads, optimizer state
    out_dir="",  # on the command line: size the model of this run's ckpt.pt
)


def dataset_vocab(dataset, data_dir=""):
    """(vocab_size, meta.json path) of a config's dataset, as train.py reads it; vocab_size is None
    if the file is absent."""
    folder = data_dir or os.path.join(REPO, "data", dataset)
    path = os.path.join(folder, "meta.json")
    if (dataset or data_dir) and os.path.isfile(path):
        from tokenizer import read_meta
        return read_meta(folder)["vocab_size"], path
    return None, path


def gpt_params(seq_len, vocab_size, d_model, num_heads, num_layers):
    """
    nanoGPT's scaling_laws notebook formula: GPT-2 shape (learned positions, LayerNorm with bias,
    biased Linears, head tied to the token table). The position table is left out and the tied
    token table is counted once, as the head ("dense"). GPT-2 small: 123,653,376.
    """
    ffw_size = 4 * d_model
    # c_attn, weights and biases
    attention = 3 * d_model**2 + 3 * d_model
    attproj = d_model**2 + d_model
    ffw = d_model * ffw_size + ffw_size
    ffwproj = ffw_size * d_model + d_model
    layernorms = 2 * 2 * d_model  # ln_1 and ln_2, weight and bias each
    ln_f = 2 * d_model
    dense = d_model * vocab_size  # no bias
    return num_layers * (attention + attproj + ffw + ffwproj + layernorms) + ln_f + dense


BLOCK_PARTS = ("ln_1", "attn.c_attn", "attn.c_proj", "ln_2", "mlp.c_fc", "mlp.c_proj")


def param_counts(config):
    """Parameters of each component of GPT(config), per block where it repeats, and the totals."""
    d = config.n_embd
    V = config.vocab_size
    b = int(config.bias)
    # RMSNorm never has a bias.
    norm = d * (2 if config.norm == "layernorm" and b else 1)
    c = {
        "wte": V * d,
        # Sinusoidal and rotary positions have no parameters.
        "wpe": config.block_size * d if config.position == "learned" else 0,
        "ln_1": norm,
        "attn.c_attn": d * 3 * d + 3 * d * b,
        "attn.c_proj": d * d + d * b,
        "ln_2": norm,
        "mlp.c_fc": d * 4 * d + 4 * d * b,
        "mlp.c_proj": 4 * d * d + d * b,
    }
    c["block"] = sum(c[k] for k in BLOCK_PARTS)
    c["blocks"] = config.n_layer * c["block"]
    c["ln_f"] = norm
    c["lm_head"] = 0 if config.tie_weights else V * d  # a tied head is the same matrix as wte
    c["total"] = c["wte"] + c["wpe"] + c["blocks"] + c["ln_f"] + c["lm_head"]
    # Lookups do no matmul, so the position table is dropped, and the token table unless it is also
    # the head.
    c["non_embedding"] = c["total"] - c["wpe"] - (0 if config.tie_weights else c["wte"])
    return c


def forward_flops(config, seq_len):
    """
    Forward FLOPs per token by component (a matmul (m,k)@(k,n) costs 2mkn), in the spirit of
    nanoGPT's transformer_sizing notebook. Norms, softmax and GELU are left out, as they are tiny.
    Attention's scores and weighted sum grow with seq_len: the quadratic term, linear per token.
    """
    d = config.n_embd
    hs = d // config.n_head
    f = {
        "attn.c_attn": 2 * d * 3 * d,
        # q @ k^T: seq_len keys per head, hs each, over n_head heads.
        "attn.scores": 2 * seq_len * d,
        "attn.reduce": 2 * config.n_head * seq_len * hs,  # att @ v
        "attn.c_proj": 2 * d * d,
        "mlp.c_fc": 2 * d * 4 * d,
        "mlp.c_proj": 2 * 4 * d * d,
    }
    f["block"] = sum(f.values())
    f["blocks"] = config.n_layer * f["block"]
    f["lm_head"] = 2 * d * config.vocab_size
    f["total"] = f["blocks"] + f["lm_head"]
    return f


def flops_per_token(config, seq_len):
    """Forward + backward model FLOPs per token, 6N + 12*L*H*Q*T (PaLM's appendix B, as nanoGPT's
    MFU)."""
    N = param_counts(config)["non_embedding"]
    Q = config.n_embd // config.n_head
    return 6 * N + 12 * config.n_layer * config.n_head * Q * seq_len


def memory_bytes(config, bytes_per_param=4, optimizer="adamw", shards=1):
    """
    Training state (params, grads, optimizer state in fp32) and checkpoint sizes in bytes. AdamW
    keeps two moments per parameter, Muon one buffer per block matrix (12 d^2 a block,
    muon.configure_muon). FSDP over shards processes holds 1/shards of the training state in each;
    the checkpoint is whole.
    """
    n = param_counts(config)["total"]
    weights = n * bytes_per_param
    m = 12 * config.n_layer * config.n_embd ** 2 if optimizer == "muon" else 0
    state = {"adamw": 2 * (n - m) * 4, "muon": m * 4}  # exp_avg and exp_avg_sq; momentum_buffer
    return {
        "params": weights,
        "grads": weights,
        **state,
        "train_state": (2 * weights + sum(state.values())) // shards,
        # The weights and the optimizer state, as ckpt.pt stores them.
        "checkpoint": weights + sum(state.values()),
        "weights_only": weights,
    }


def activation_bytes(config, batch_size, seq_len, bytes_per_value=4):
    """
    What autograd keeps of one micro-batch for its backward pass, in bytes, as counted from the
    tensors it saves. Per block and token that is 16 d: ln_1's input and output, q, k and v,
    attention's output and its re-assembled copy, ln_2's input and output, and the MLP's 4d hidden
    before and after GELU. Rope adds 2 d (q and k rotated), and each RMSNorm d (its composite ops).
    Manual attention adds its T probabilities per head; dropout adds its masks and, in torch's
    attention with dropout, 3 T per head. Then come ln_f's input and output and the logits'
    log-softmax.
    """
    d = config.n_embd
    hT = config.n_head * seq_len
    rms = config.norm == "rmsnorm"
    block = 16 * d + 2 * d * (config.position == "rope") + 2 * d * rms
    block += hT * (config.attention == "manual") + (2.5 * d + 3 * hT) * (config.dropout > 0)
    per_token = config.n_layer * block + (2 + rms) * d + config.vocab_size
    return int(batch_size * seq_len * per_token * bytes_per_value)


def training_bytes(config, batch_size, optimizer="adamw", shards=1, acts=None, state=None):
    """
    The most bytes a training process holds beyond what it held before building the model: the
    training state (under FSDP its shard), a micro-batch's activations, the logits' gradient as the
    backward pass begins, and what the allocator keeps of freed memory for reuse, a quarter of the
    activations and 128 MiB as measured on CPUs (docs/training.md). acts and state are as counted
    on the built model (built_costs); None counts them on paper.
    """
    if acts is None:
        acts = activation_bytes(config, batch_size, config.block_size)
    if state is None:
        state = memory_bytes(config, optimizer=optimizer, shards=shards)["train_state"]
    logits_grad = batch_size * config.block_size * config.vocab_size * 4
    return state + acts + logits_grad + acts // 4 + 2 ** 27


def built_costs(config, batch_size, optimizer="adamw", shards=1, dtype="float32"):
    """
    What train.py reports and checks, counted on GPT(config) as model.py builds it (a fork's change
    too) in fake tensors, which allocate nothing. That is the forward and backward FLOPs per token
    (MFU's), the bytes of the training state (weights, gradients, optimizer state; under FSDP a
    process's shard) and of the activations autograd keeps, in dtype's autocast, and training_bytes
    of them. The paper's figures above are this for the GPT that model.py ships.
    """
    import torch
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.utils.flop_counter import FlopCounterMode
    from model import GPT
    saved = {}

    def keep(t):
        # What autograd saves for the backward pass: each tensor's memory once, the weights aside.
        storage = t.untyped_storage()
        saved[storage._cdata] = 0 if storage._cdata in weights else storage.nbytes()
        return t
    with FakeTensorMode(), torch.autocast("cpu", getattr(torch, dtype), enabled=dtype != "float32"):
        model = GPT(config)
        x = torch.zeros(batch_size, config.block_size, dtype=torch.long)
        weights = {p.untyped_storage()._cdata for p in model.parameters()}
        # Attention as the math backend's matmuls, which the counter counts.
        with sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as flops:
            model(x, x)[1].backward()
        with torch.autograd.graph.saved_tensors_hooks(keep, lambda t: t):
            model(x, x)
    n = sum(p.numel() for p in model.parameters())
    muon = 0
    if optimizer == "muon":
        muon = sum(p.numel() for p in model.transformer.h.parameters() if p.dim() == 2)
    # In fp32, a weight and its gradient, and AdamW's 2 moments or Muon's 1 buffer.
    state = (16 * n - 4 * muon) // shards
    acts = sum(saved.values())
    return {"flops_per_token": flops.get_total_flops() // x.numel(), "train_state": state,
            "activations": acts,
            "training_bytes": training_bytes(config, batch_size, acts=acts, state=state)}


def human(n):
    for unit, scale in (("E", 1e18), ("P", 1e15), ("T", 1e12), ("G", 1e9), ("M", 1e6), ("K", 1e3)):
        if abs(n) >= scale:
            return f"{n / scale:.2f}{unit}"
    return str(n)


def instantiated_params(config, most_blocks=100):
    """The parameter count of GPT(config) built on the meta device (shapes, no memory). Past
    most_blocks blocks, whose Python objects alone take minutes, 1 and 2 blocks are built and the
    rest counted."""
    import torch
    from dataclasses import replace
    from model import GPT
    try:
        with torch.device("meta"):
            if config.n_layer <= most_blocks:
                return GPT(config).get_num_params(non_embedding=False)
            one, two = (GPT(replace(config, n_layer=n)).get_num_params(False) for n in (1, 2))
    except RuntimeError:  # a matrix past what torch can describe (n_embd=1e9)
        return None
    return one + (config.n_layer - 1) * (two - one)


def report(config, seq_len=None, optimizer="adamw", batch_size=12, shards=1, dtype="float32"):
    """The printed tables: parameters per component, FLOPs per token, memory, and the built model's
    check."""
    T = seq_len or config.block_size
    c = param_counts(config)
    total = c["total"]
    lines = [f"GPT: n_layer={config.n_layer} n_head={config.n_head} n_embd={config.n_embd} "
             f"block_size={config.block_size} vocab_size={config.vocab_size} norm={config.norm} "
             f"position={config.position} bias={config.bias} tie_weights={config.tie_weights} "
             f"activation={config.activation}",
             "", f"{'component':<28}{'params':>16}{'share':>9}"]
    # Named as the model's state dict names them (transformer.h.0.attn.c_attn.weight, ...).
    rows = [("transformer.wte", c["wte"]), ("transformer.wpe", c["wpe"])]
    rows += [(f"  {k} (per block)", c[k]) for k in BLOCK_PARTS]
    rows += [(f"transformer.h (x{config.n_layer})", c["blocks"]), ("transformer.ln_f", c["ln_f"]),
             ("lm_head (tied to wte)" if config.tie_weights else "lm_head", c["lm_head"])]
    for name, n in rows:
        share = "" if name.startswith("  ") else f"{100 * n / total:8.2f}%"
        lines.append(f"{name:<28}{n:>16,}{share:>9}")
    lines += [f"{'total':<28}{total:>16,}", f"{'non_embedding':<28}{c['non_embedding']:>16,}"]
    # nanoGPT's formula counts GPT-2's shape alone.
    gpt2_like = config.position == "learned" and config.norm == "layernorm"
    if gpt2_like and config.bias and config.tie_weights:
        g = gpt_params(config.block_size, config.vocab_size, config.n_embd, config.n_head,
                       config.n_layer)
        same = "== non_embedding" if g == c["non_embedding"] else "DIFFERS"
        lines.append(f"{'gpt_params (nanoGPT)':<28}{g:>16,}  {same}")
    built = instantiated_params(config)
    if built is None:
        lines.append(f"{'instantiated model':<28}{'-':>16}  too large to build")
    else:
        check = "matches" if built == total else "DOES NOT MATCH"
        lines.append(f"{'instantiated model':<28}{built:>16,}  {check}")

    f = forward_flops(config, T)
    lines += ["", f"forward FLOPs per token at seq_len {T}:"]
    for k in ("attn.c_attn", "attn.scores", "attn.reduce", "attn.c_proj", "mlp.c_fc", "mlp.c_proj"):
        lines.append(f"  {k:<20}{f[k]:>16,}  {100 * f[k] / f['block']:6.2f}% of a block")
    lines.append(f"  {'lm_head':<20}{f['lm_head']:>16,}  "
                 f"{100 * f['lm_head'] / f['total']:6.2f}% of all")
    lines.append(f"  {'total':<20}{f['total']:>16,}")
    fpt = flops_per_token(config, T)
    lines.append(f"forward+backward per token (6N + 12LHQT): {fpt:,} = {human(fpt)}FLOP "
                 f"({human(fpt * T)}FLOP per sequence of {T})")

    m = memory_bytes(config, optimizer=optimizer)
    if optimizer != "muon":
        del m["muon"]
    sizes = ", ".join(f"{k} {human(v)}B" for k, v in m.items())
    lines += ["", f"memory (fp32, optimizer={optimizer}): {sizes}"]
    # What train.py checks, counted on the model as built where it can be built.
    if built and config.n_layer <= 100:
        need = built_costs(config, batch_size, optimizer, shards, dtype)["training_bytes"]
    else:
        need = training_bytes(config, batch_size, optimizer, shards)
    fsdp = f", FSDP over {shards}" if shards > 1 else ""
    lines.append(f"training, per process (batch {batch_size} x {config.block_size}{fsdp}): "
                 f"{human(need)}B with the activations in {dtype} "
                 "(train.py counts them on the model as built)")
    return "\n".join(lines)


def keys():
    """The keys sizing.py takes: the model's (not sinusoidal_scale, an amplitude that sizes
    nothing), then KEYS."""
    from model import GPTConfig
    model_keys = config_keys(vars(GPTConfig()))
    model_keys.pop("sinusoidal_scale", None)
    return dict(model_keys, **KEYS)


def main():
    from model import GPTConfig
    # A train.py config file sets other keys too; only these count here.
    given = {}
    cfg = configure(keys(), strict_files=False, given=given)
    seq_len = cfg.pop("seq_len")
    dataset = cfg.pop("dataset")
    data_dir = cfg.pop("data_dir")
    optimizer = cfg.pop("optimizer")
    out_dir = cfg.pop("out_dir")
    batch_size = cfg.pop("batch_size")
    shards = cfg.pop("fsdp_processes")
    dtype = cfg.pop("dtype")
    if dtype == "auto":
        dtype = "float32"
    # A train config's out_dir is where it would train, so only the command line's names a run.
    if out_dir and given["out_dir"] == "on the command line":
        from checkpoint import current_model_args, load_checkpoint
        path = os.path.join(out_dir, "ckpt.pt")
        ckpt = load_checkpoint(path, mmap=True)  # mapped: nothing read but what is looked at
        # The run's model keys, but for those given by hand (what if it had 4 layers?).
        run_keys = current_model_args(ckpt)
        cfg.update({k: v for k, v in run_keys.items() if k in cfg and k not in given})
        if "optimizer" not in given:
            optimizer = (ckpt.get("config") or {}).get("optimizer", "adamw")
        print(f"the model of {path} (iter {ckpt.get('iter_num')})", file=sys.stderr)
    if optimizer not in OPTIMIZERS or dtype not in ("float32", "bfloat16", "float16"):
        raise ConfigError(f"optimizer must be one of {', '.join(OPTIMIZERS)} and dtype float32, "
                          f"bfloat16 or float16: got {optimizer!r}, {dtype!r}")
    if seq_len < 0 or batch_size < 1 or shards < 1:
        raise ConfigError("need seq_len >= 0, batch_size >= 1 and fsdp_processes >= 1: got "
                          f"seq_len={seq_len}, batch_size={batch_size}, fsdp_processes={shards}")
    if not cfg["vocab_size"]:
        vocab, path = dataset_vocab(dataset, data_dir)
        if not vocab and (dataset or data_dir):
            print(f"note: no {path}: sizing with GPT-2's vocab_size", file=sys.stderr)
        cfg["vocab_size"] = vocab or GPTConfig.vocab_size
    try:
        config = GPTConfig(**cfg)
    except ValueError as e:
        raise ConfigError(str(e)) from None
    print(report(config, seq_len, optimizer, batch_size, shards, dtype))


if __name__ == "__main__":
    run(main)
