"""
What a glassgpt model costs, worked out on paper: parameters per component, FLOPs per token,
training memory, checkpoint size. tests/ prove every count equals the instantiated model.

    python sizing.py                      # GPT-2 small (124M)
    python sizing.py config/tiny.py       # any config, --key=value overrides as train.py
    python sizing.py --out_dir=out-tiny   # the model a run trained, from its ckpt.pt (else best.pt)
    python sizing.py --n_layer=48 --n_head=25 --n_embd=1600   # gpt2-xl, sized in a second
"""

import os
import sys

if __name__ == "__main__":  # before numpy loads: a Ctrl-C meanwhile is one line, not a traceback
    from configurator import quit_quietly_on_early_ctrl_c
    quit_quietly_on_early_ctrl_c()
from configurator import ConfigError, configure, config_keys, run
from tokenizer import read_meta

REPO = os.path.dirname(os.path.abspath(__file__))
KEYS = dict(  # sizing.py's own keys, beside GPTConfig's (model.py); a train.py config file sets them too
    seq_len=0,  # the sequence length FLOPs are counted at; 0: block_size
    vocab_size=0,  # 0: the vocab of the config's dataset (its meta.json), as train.py uses; else GPT-2's 50257
    dataset="",  # train.py's key: a folder under data/ (vocab_size comes from its meta.json)
    data_dir="",  # train.py's key: the dataset's folder, if not data/<dataset>
    optimizer="adamw",  # train.py's key: adamw | muon, whose state the checkpoint and training memory hold
    out_dir="",  # on the command line, a run's folder: size the model its ckpt.pt holds (shape, vocab, optimizer)
)


def dataset_vocab(dataset, data_dir=""):
    """
    (vocab_size, meta.json path) of the dataset a config trains on, read as train.py reads it: from
    data_dir, else data/<dataset>. vocab_size is None if there is no dataset or no meta.json (yet).
    """
    folder = data_dir or os.path.join(REPO, "data", dataset)
    path = os.path.join(folder, "meta.json")
    if (dataset or data_dir) and os.path.isfile(path):
        return read_meta(folder)["vocab_size"], path
    return None, path


def gpt_params(seq_len, vocab_size, d_model, num_heads, num_layers):
    """
    nanoGPT's scaling_laws notebook formula: GPT-2 shape (learned positions, LayerNorm with bias,
    biased Linears, head tied to the token table). The position table is left out and the tied
    token table is counted once, as the head ("dense"). GPT-2 small: 123,653,376.
    """
    ffw_size = 4 * d_model
    attention = 3 * d_model**2 + 3 * d_model  # c_attn: weights and biases
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
    d, V, L, b = config.n_embd, config.vocab_size, config.n_layer, int(config.bias)
    norm = d * (2 if config.norm == "layernorm" and b else 1)  # RMSNorm never has a bias
    c = {
        "wte": V * d,
        "wpe": config.block_size * d if config.position == "learned" else 0,  # sinusoidal, rope: no parameters
        "ln_1": norm,
        "attn.c_attn": d * 3 * d + 3 * d * b,
        "attn.c_proj": d * d + d * b,
        "ln_2": norm,
        "mlp.c_fc": d * 4 * d + 4 * d * b,
        "mlp.c_proj": 4 * d * d + d * b,
    }
    c["block"] = sum(c[k] for k in BLOCK_PARTS)
    c["blocks"] = L * c["block"]
    c["ln_f"] = norm
    c["lm_head"] = 0 if config.tie_weights else V * d  # tied: the same matrix as wte
    c["total"] = c["wte"] + c["wpe"] + c["blocks"] + c["ln_f"] + c["lm_head"]
    # lookups do no matmul: drop the position table, and the token table unless it is also the head
    c["non_embedding"] = c["total"] - c["wpe"] - (0 if config.tie_weights else c["wte"])
    return c


def non_embedding_label(config, counts=None):
    """
    How the non-embedding count relates to nanoGPT's, for a line such as "N parameters (<this>)".
    nanoGPT's get_num_params leaves out the learned position table (its head is always tied to wte);
    an untied wte, a lookup as wpe is, is left out too, which nanoGPT has no case of: said so.
    """
    c = counts or param_counts(config)
    if c["non_embedding"] == c["total"]:
        return (f"the same non-embedding, as nanoGPT counts: it subtracts only a learned position table, and "
                f"{config.position} positions have none")
    if config.tie_weights:
        return f"{c['non_embedding']:,} non-embedding, as nanoGPT counts"
    return (f"{c['non_embedding']:,} non-embedding: without the untied wte"
            + (" and wpe (nanoGPT, always tied, leaves out wpe alone)" if config.position == "learned"
               else " (nanoGPT, always tied, would leave out nothing)"))


def forward_flops(config, seq_len):
    """
    Forward FLOPs per token by component (a matmul (m,k)@(k,n) costs 2mkn), in the spirit of
    nanoGPT's transformer_sizing notebook. Norms, softmax and GELU are left out: they are tiny.
    Attention's scores and weighted sum grow with seq_len: the quadratic term, per token linear.
    """
    d, L, T, hs = config.n_embd, config.n_layer, seq_len, config.n_embd // config.n_head
    f = {
        "attn.c_attn": 2 * d * 3 * d,
        "attn.scores": 2 * T * d,  # q @ k^T: T keys per head, hs each, over n_head heads
        "attn.reduce": 2 * config.n_head * T * hs,  # att @ v
        "attn.c_proj": 2 * d * d,
        "mlp.c_fc": 2 * d * 4 * d,
        "mlp.c_proj": 2 * 4 * d * d,
    }
    f["block"] = sum(f.values())
    f["blocks"] = L * f["block"]
    f["lm_head"] = 2 * d * config.vocab_size
    f["total"] = f["blocks"] + f["lm_head"]
    return f


def flops_per_token(config, seq_len):
    """Forward + backward model FLOPs per token: 6N + 12*L*H*Q*T (PaLM appendix B, as nanoGPT's MFU)."""
    N = param_counts(config)["non_embedding"]
    Q = config.n_embd // config.n_head
    return 6 * N + 12 * config.n_layer * config.n_head * Q * seq_len


def muon_params(config):
    """The parameters optimizer="muon" gives Muon (model.configure_optimizers): the blocks' matmul weights,
    c_attn 3d^2, attn.c_proj d^2, c_fc 4d^2, mlp.c_proj 4d^2; AdamW keeps the rest."""
    return 12 * config.n_layer * config.n_embd ** 2


def memory_bytes(config, bytes_per_param=4, optimizer="adamw"):
    """
    Training state (params, grads, the optimizer's state) and checkpoint sizes in bytes, the state in fp32.
    AdamW keeps two moments per parameter; Muon one momentum buffer per matrix it updates (muon_params).
    """
    n = param_counts(config)["total"]
    m = muon_params(config) if optimizer == "muon" else 0
    state = {"adamw": 2 * (n - m) * 4, "muon": m * 4}  # exp_avg and exp_avg_sq; momentum_buffer
    return {
        "params": n * bytes_per_param,
        "grads": n * bytes_per_param,
        **state,
        "train_state": 2 * n * bytes_per_param + sum(state.values()),
        "checkpoint": n * bytes_per_param + sum(state.values()),  # weights plus optimizer state, as ckpt.pt stores
        "weights_only": n * bytes_per_param,
    }


def activation_bytes(config, batch_size, seq_len, bytes_per_value=4):
    """
    A lower bound on the activations one training micro-batch keeps for its backward pass, in bytes.
    Whatever the kernels, each matmul's input must be kept for its weight's gradient: per layer and
    token, c_attn's d, attention's q, k, v and output 4d (the output is c_proj's input), c_fc's d and
    mlp.c_proj's 4d; and the loss's gradient needs the logits, V per token. Norms, GELU, residuals and
    the T x T scores of manual attention come on top (tests/ measure the real figure against it).
    """
    per_token = config.n_layer * 10 * config.n_embd + config.vocab_size
    return batch_size * seq_len * per_token * bytes_per_value


def human(n):
    for unit, scale in (("E", 1e18), ("P", 1e15), ("T", 1e12), ("G", 1e9), ("M", 1e6), ("K", 1e3)):
        if abs(n) >= scale:
            return f"{n / scale:.2f}{unit}"
    return str(n)


def instantiated_params(config, most_blocks=100):
    """The parameters of config's model as model.py builds it, on the meta device (shapes without memory:
    gpt2-xl in a second). Past most_blocks blocks, whose Python objects alone would take minutes and
    gigabytes, a 1- and a 2-block model are built and the blocks counted from their difference: every
    block is the same. Returns (count, how it was counted)."""
    from dataclasses import replace
    from model import GPT  # imported here: the formulas above need no torch
    import torch

    try:
        with torch.device("meta"):
            if config.n_layer <= most_blocks:
                return GPT(config).get_num_params(non_embedding=False), ""
            one, two = (GPT(replace(config, n_layer=n)).get_num_params(non_embedding=False) for n in (1, 2))
    except RuntimeError as e:  # a matrix past what torch can describe (n_embd=1e9: its size overflows)
        return None, f"not built: {str(e).splitlines()[0]}"
    return one + (config.n_layer - 1) * (two - one), " (built with 1 and 2 blocks, the rest counted)"


def report(config, seq_len=None, optimizer="adamw"):
    """The printed tables: parameters per component, FLOPs per token, memory, and the meta-model check."""
    T = seq_len or config.block_size
    c = param_counts(config)
    total = c["total"]
    lines = [f"GPT: n_layer={config.n_layer} n_head={config.n_head} n_embd={config.n_embd} "
             f"block_size={config.block_size} vocab_size={config.vocab_size} norm={config.norm} "
             f"position={config.position} bias={config.bias} tie_weights={config.tie_weights} "
             f"activation={config.activation}",
             "", f"{'component':<28}{'params':>16}{'share':>9}"]
    # named as the model's state dict names them (transformer.h.0.attn.c_attn.weight, ...)
    rows = [("transformer.wte", c["wte"]), ("transformer.wpe", c["wpe"])]
    rows += [(f"  {k} (per block)", c[k]) for k in BLOCK_PARTS]
    rows += [(f"transformer.h (x{config.n_layer})", c["blocks"]), ("transformer.ln_f", c["ln_f"]),
             ("lm_head (tied to wte)" if config.tie_weights else "lm_head", c["lm_head"])]
    for name, n in rows:
        share = f"{100 * n / total:8.2f}%" if not name.startswith("  ") else ""
        lines.append(f"{name:<28}{n:>16,}{share:>9}")
    lines += [f"{'total':<28}{total:>16,}", f"{'non_embedding':<28}{c['non_embedding']:>16,}"]
    if config.position == "learned" and config.norm == "layernorm" and config.bias and config.tie_weights:
        g = gpt_params(config.block_size, config.vocab_size, config.n_embd, config.n_head, config.n_layer)
        lines.append(f"{'gpt_params (nanoGPT)':<28}{g:>16,}  {'== non_embedding' if g == c['non_embedding'] else 'DIFFERS'}")
    n_model, how = instantiated_params(config)
    if n_model is None:
        lines.append(f"{'instantiated model':<28}{'-':>16}  {how}")
    else:
        lines.append(f"{'instantiated model':<28}{n_model:>16,}  {'matches' if n_model == total else 'DOES NOT MATCH'}{how}")

    f = forward_flops(config, T)
    lines += ["", f"forward FLOPs per token at seq_len {T}:"]
    for k in ("attn.c_attn", "attn.scores", "attn.reduce", "attn.c_proj", "mlp.c_fc", "mlp.c_proj"):
        lines.append(f"  {k:<20}{f[k]:>16,}  {100 * f[k] / f['block']:6.2f}% of a block")
    lines.append(f"  {'lm_head':<20}{f['lm_head']:>16,}  {100 * f['lm_head'] / f['total']:6.2f}% of all")
    lines.append(f"  {'total':<20}{f['total']:>16,}")
    fpt = flops_per_token(config, T)
    lines.append(f"forward+backward per token (6N + 12LHQT): {fpt:,} = {human(fpt)}FLOP "
                 f"({human(fpt * T)}FLOP per sequence of {T})")

    m = memory_bytes(config, optimizer=optimizer)
    if optimizer != "muon":
        del m["muon"]
    which = "Muon for the blocks' matrices, AdamW for the rest" if optimizer == "muon" else "AdamW"
    lines += ["", f"memory (fp32, optimizer={optimizer}: {which}): " + ", ".join(f"{k} {human(v)}B" for k, v in m.items())]
    return "\n".join(lines)


def run_model(out_dir, cfg, given, optimizer):
    """--out_dir: cfg's model keys set to those of the run's ckpt.pt, which given (the keys set on the command
    line or in a file) must not contradict. Returns the optimizer the run trained with, unless given."""
    from checkpoint import current_model_args, is_export, load_checkpoint, other_checkpoint
    if os.path.isfile(out_dir):  # a checkpoint named as out_dir (best.pt holds the same shape as ckpt.pt)
        raise ConfigError(f"out_dir {out_dir} is a file: out_dir is a run's folder, whose ckpt.pt sizing.py reads; "
                          f"pass --out_dir={os.path.dirname(out_dir) or '.'}")
    if is_export(out_dir):
        raise ConfigError(f"{out_dir} is a Hugging Face folder as export.py writes, not a training run: size the run "
                          "it was exported from (--out_dir=<its out_dir>), or give the model's keys (--n_layer=...)")
    path, best = os.path.join(out_dir, "ckpt.pt"), os.path.join(out_dir, "best.pt")
    try:
        ckpt = load_checkpoint(path, mmap=True)  # weights_only; mapped: nothing read but what is looked at
    except ConfigError as e:  # missing or corrupt: best.pt holds the same model's shape
        if not os.path.isfile(best):
            raise
        why = str(e).removesuffix(other_checkpoint(path))
        try:
            ckpt, path = load_checkpoint(best, mmap=True), best
        except ConfigError:
            raise ConfigError(f"{why}; nor can {best} be read") from None
        print(f"{why}: sizing best.pt, the same model", file=sys.stderr)
    args = current_model_args(ckpt)
    args.pop("sinusoidal_scale", None)  # an amplitude, not a size: no key here
    unknown = sorted(set(args) - set(cfg))
    if unknown:
        raise ConfigError(f"{path} was trained with model keys model.py does not have ({', '.join(unknown)}): "
                          "size it with the model.py it was trained with")
    clash = sorted(k for k in given if k in args and k != "dropout" and args[k] != cfg[k])
    if clash:
        raise ConfigError(f"--out_dir sizes the model {path} holds, whose {clash[0]} is {args[clash[0]]!r}, not "
                          f"{cfg[clash[0]]!r}: leave {clash[0]} out, or leave out --out_dir to size another model")
    cfg.update(args)
    print(f"the model of {path} (iter {ckpt.get('iter_num')})", file=sys.stderr)
    return optimizer if "optimizer" in given else (ckpt.get("config") or {}).get("optimizer", "adamw")


def keys():
    """The keys sizing.py takes, with their defaults: the model's (but sinusoidal_scale, an amplitude, which
    sizes nothing and is no key of train.py's), then its own (KEYS)."""
    from model import GPTConfig
    return dict({k: v for k, v in config_keys(vars(GPTConfig())).items() if k != "sinusoidal_scale"}, **KEYS)


def main():
    from model import OPTIMIZERS, GPTConfig
    given = {}  # a train.py config file sets other keys too (batch_size, ...): only model keys count here
    cfg = configure(keys(), strict_files=False, sources=[__file__, os.path.join(REPO, "model.py")], given=given)
    seq_len, dataset, data_dir, optimizer, out_dir = (cfg.pop(k) for k in
                                                      ("seq_len", "dataset", "data_dir", "optimizer", "out_dir"))
    if out_dir and given["out_dir"] == "on the command line":  # a train config's out_dir is where it would train
        optimizer = run_model(out_dir, cfg, given, optimizer)
    if optimizer not in OPTIMIZERS:
        raise ConfigError(f"optimizer must be one of {', '.join(OPTIMIZERS)}, got {optimizer!r}")
    if seq_len < 0:  # 0 means block_size
        raise ConfigError(f"seq_len must not be negative (0: block_size), got {seq_len}")
    note = None
    if not cfg["vocab_size"]:
        vocab, path = dataset_vocab(dataset, data_dir)
        cfg["vocab_size"] = vocab or GPTConfig.vocab_size
        if vocab:
            note = f"vocab_size {vocab} from {path}"
        elif dataset or data_dir:
            note = (f"note: {path} not found (prepare the dataset, or pass --vocab_size): "
                    f"sizing with GPT-2's vocab_size {cfg['vocab_size']}")
    try:
        config = GPTConfig(**cfg)
    except ValueError as e:
        raise ConfigError(str(e)) from None
    if note:  # after the checks: bad input is one line
        print(note, file=sys.stderr)
    if seq_len > config.block_size:  # a learner may size attention's growth past it: said, not refused
        print(f"note: seq_len {seq_len} is past block_size {config.block_size}, more than the model can take at "
              "once: its FLOPs are counted as if it could", file=sys.stderr)
    print(report(config, seq_len, optimizer))


if __name__ == "__main__":
    run(main)
