"""
Export a trained model as a Hugging Face folder, for transformers and the tools that read its
format:

    python export.py --out_dir=out-tiny-gpt2                   # writes out-tiny-gpt2/hf
    python export.py --out_dir=out-tiny-gpt2 --folder=my-gpt   # or anywhere else
    hf upload <you>/my-gpt my-gpt                              # share it (after hf auth login)

It needs transformers (pip install transformers, which brings tokenizers and safetensors too).

The folder holds config.json and model.safetensors (GPT-2's architecture for learned or sinusoidal
positions with LayerNorm; Arcee's, a Llama-style model, for rotary positions with RMSNorm), the
tokenizer (GPT-2's BPE, or the char-level vocabulary), a README.md model card and glassgpt's
meta.json. It loads with AutoModelForCausalLM.from_pretrained(folder), and back into glassgpt with
--init_from=<folder>.
"""

import importlib.util
import json
import os
import shutil

import torch

from checkpoint import ARCEE_NAMES, is_export, load_model, quiet_transformers
from configurator import ConfigError, config_keys, configure, run
from tokenizer import EOT, gpt2_encoding, write_meta

# -----------------------------------------------------------------------------
out_dir = "out"  # the training run to export
ckpt = ""  # "ckpt.pt" | "best.pt"; "" = best.pt if there is one, else ckpt.pt
meta = ""  # the tokenizer: a meta.json or nanoGPT meta.pkl; "" = the one beside the run
# The format: "hf", a Hugging Face transformers folder (GPT-2, or Arcee for rope + rmsnorm).
to = "hf"
folder = ""  # where to write it; "" = <out_dir>/hf
overwrite = False  # replace an earlier export in folder
# -----------------------------------------------------------------------------
DEFAULTS = config_keys(globals())
CONV1D = ("attn.c_attn.weight", "attn.c_proj.weight", "mlp.c_fc.weight", "mlp.c_proj.weight")


def architecture(config):
    """The transformers architecture for this model's switches, "gpt2" or "arcee"; other mixes have
    none."""
    if config.norm == "layernorm" and config.position != "rope":
        return "gpt2"
    if config.norm == "rmsnorm" and config.position == "rope":
        return "arcee"
    raise ConfigError(f"norm={config.norm} with position={config.position} has no transformers "
                      "architecture: export takes learned/sinusoidal + layernorm (GPT-2) or rope + "
                      "rmsnorm (Arcee)")


def gpt2_config(config, eot, inner):
    """
    transformers' GPT2Config for our GPTConfig, dropout off, as an export is for inference. GPT-2
    names the tanh GELU gelu_new and the erf one gelu.
    """
    from transformers import GPT2Config
    return GPT2Config(
        vocab_size=config.vocab_size, n_positions=config.block_size, n_embd=config.n_embd,
        n_inner=inner, n_layer=config.n_layer, n_head=config.n_head, layer_norm_epsilon=1e-5,
        activation_function="gelu_new" if config.activation == "gelu_tanh" else "gelu",
        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, tie_word_embeddings=config.tie_weights,
        bos_token_id=eot, eos_token_id=eot)


def gpt2_state_dict(model):
    """Our weights under GPT-2's names: Conv1D matrices transposed, zeros for absent biases."""
    sd = {k: v.detach().float() for k, v in model.state_dict().items()}
    out = {}
    for k, v in sd.items():
        out[k] = v.t().contiguous() if k.endswith(CONV1D) else v
        # A model trained without biases has GPT-2's biases at zero.
        bias = k[:-len("weight")] + "bias"
        in_blocks = k.startswith(("transformer.h.", "transformer.ln_f."))
        if in_blocks and k.endswith("weight") and bias not in sd:
            out[bias] = torch.zeros(v.shape[0])
    # A fixed table added to x is a learned table never trained.
    if model.config.position == "sinusoidal":
        out["transformer.wpe.weight"] = model.pos_table.detach().float().clone()
    if model.config.tie_weights:
        out.pop("lm_head.weight")  # the same matrix as wte, which transformers ties to it
    return out


def arcee_config(config, eot, inner):
    """transformers' ArceeConfig for a rope + RMSNorm model, where every head keeps its own keys and
    values."""
    from transformers import ArceeConfig
    return ArceeConfig(
        vocab_size=config.vocab_size, hidden_size=config.n_embd, intermediate_size=inner,
        num_hidden_layers=config.n_layer, num_attention_heads=config.n_head,
        num_key_value_heads=config.n_head,
        hidden_act="gelu_pytorch_tanh" if config.activation == "gelu_tanh" else "gelu",
        max_position_embeddings=config.block_size, rms_norm_eps=1e-5, attention_bias=config.bias,
        mlp_bias=config.bias, tie_word_embeddings=config.tie_weights, attention_dropout=0.0,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0}, bos_token_id=eot,
        eos_token_id=eot, pad_token_id=None)


def arcee_state_dict(model):
    """Our weights under Arcee's names: the fused c_attn cut into q, k and v (rows [q; k; v])."""
    sd = {k: v.detach().float() for k, v in model.state_dict().items()}
    out = {"model.embed_tokens.weight": sd.pop("transformer.wte.weight"),
           "model.norm.weight": sd.pop("transformer.ln_f.weight")}
    head = sd.pop("lm_head.weight")
    if not model.config.tie_weights:
        out["lm_head.weight"] = head
    for i in range(model.config.n_layer):
        ours = f"transformer.h.{i}."
        theirs = f"model.layers.{i}."
        for kind in ("weight", "bias"):
            if ours + "attn.c_attn." + kind in sd:
                qkv = sd.pop(ours + "attn.c_attn." + kind).split(model.config.n_embd)
                for name, part in zip(("q_proj", "k_proj", "v_proj"), qkv):
                    out[f"{theirs}self_attn.{name}.{kind}"] = part.clone()
            for a, b in ARCEE_NAMES.items():
                if f"{ours}{a}.{kind}" in sd:
                    out[f"{theirs}{b}.{kind}"] = sd.pop(f"{ours}{a}.{kind}")
    # Anything left has no place in Arcee, and export_hf's check names it.
    out.update(sd)
    return out


def byte_symbols():
    """GPT-2's vocab.json spells each byte as a printable character: printable Latin-1 bytes as
    themselves, the others as the characters from U+0100 on, in byte order."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1)]
    printable += range(ord("®"), ord("ÿ") + 1)
    others = [b for b in range(256) if b not in printable]
    return {b: chr(b) if b in printable else chr(256 + others.index(b)) for b in range(256)}


def split_token(ranks, token):
    """The two tokens whose merge made token, found by byte-pair merging its bytes with the ranks
    below its own."""
    parts = [bytes([b]) for b in token]
    limit = ranks[token]
    while len(parts) > 2:
        best = min(range(len(parts) - 1), key=lambda i: ranks.get(parts[i] + parts[i + 1], limit))
        if ranks.get(parts[best] + parts[best + 1], limit) >= limit:
            break
        parts[best:best + 2] = [parts[best] + parts[best + 1]]
    return parts


def write_gpt2_tokenizer(path, block_size):
    """GPT-2's tokenizer (tokenizer.json, vocab.json, merges.txt), derived offline from tiktoken's
    ranks."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast
    ranks = gpt2_encoding()._mergeable_ranks  # bytes -> id, the 50256 tokens before <|endoftext|>
    symbols = byte_symbols()
    spell = lambda token: "".join(symbols[b] for b in token)  # noqa: E731
    vocab = {spell(t): i for t, i in ranks.items()}
    merges = [tuple(spell(p) for p in split_token(ranks, t)) for t, _ in
              sorted(((t, i) for t, i in ranks.items() if len(t) > 1), key=lambda ti: ti[1])]
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges))
    # GPT-2's split, then each byte as a symbol.
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([EOT])  # id 50256: the next id after the ranks
    PreTrainedTokenizerFast(tokenizer_object=tok, bos_token=EOT, eos_token=EOT, unk_token=EOT,
                            clean_up_tokenization_spaces=False,
                            model_max_length=block_size).save_pretrained(path)
    with open(os.path.join(path, "vocab.json"), "w", encoding="utf-8") as f:
        json.dump({**vocab, EOT: len(ranks)}, f, ensure_ascii=False)
    with open(os.path.join(path, "merges.txt"), "w", encoding="utf-8") as f:
        f.write("#version: 0.2\n" + "".join(f"{a} {b}\n" for a, b in merges))


def write_char_tokenizer(path, itos, block_size):
    """A `tokenizers` file that cuts text into single characters and maps each to glassgpt's id."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast
    tok = Tokenizer(models.WordLevel(vocab={c: i for i, c in enumerate(itos)}))
    # Every character is a token, newlines too.
    tok.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")
    tok.decoder = decoders.Fuse()  # join the characters as they are: no spaces between them
    PreTrainedTokenizerFast(tokenizer_object=tok, clean_up_tokenization_spaces=False,
                            model_max_length=block_size).save_pretrained(path)


def model_card(name, model, meta, arch):
    """README.md for the folder: what the model is and how to load it."""
    c = model.config
    kind = "GPT-2 (`GPT2LMHeadModel`)"
    if arch == "arcee":
        kind = "Arcee (`ArceeForCausalLM`, Llama-style)"
    tokens = "GPT-2's BPE"
    if meta["tokenizer"] == "char":
        tokens = f"characters ({meta['vocab_size']})"
    return f"""---
library_name: transformers
pipeline_tag: text-generation
tags: [glassgpt, {arch}]
---

# {name}

A language model trained with glassgpt, exported as transformers' {kind}:
{model.get_num_params(False):,} parameters, {c.n_layer} layers, {c.n_head} heads, {c.n_embd} wide,
a context of {c.block_size} tokens; tokens: {tokens}.

```python
from transformers import pipeline
generate = pipeline("text-generation", model="path/to/this/folder")
print(generate("ROMEO:", max_new_tokens={max(1, min(100, c.block_size - 8))})[0]["generated_text"])
```
"""


def export_hf(model, meta, path, name):
    """Write the Hugging Face folder for model at path; name heads the model card."""
    config = model.config
    arch = architecture(config)
    # 4 x n_embd in model.py; a fork may choose another.
    inner = model.transformer.h[0].mlp.c_fc.out_features
    eot = 50256 if meta["tokenizer"] == "gpt2" else None
    if arch == "gpt2":
        from transformers import GPT2LMHeadModel
        hf = GPT2LMHeadModel(gpt2_config(config, eot, inner))
        weights = gpt2_state_dict(model)
    else:
        from transformers import ArceeForCausalLM
        hf = ArceeForCausalLM(arcee_config(config, eot, inner))
        weights = arcee_state_dict(model)
    cannot = f"export.py cannot write this model as {type(hf).__name__}"
    # A fork's own MLP or attention has weights of other names or shapes than the architecture's.
    want = {k: p.shape for k, p in hf.named_parameters()}
    got = {k: v.shape for k, v in weights.items()}
    odd = sorted(k for k in want.keys() | got.keys() if want.get(k) != got.get(k))
    if odd:
        raise ConfigError(f"{cannot}: {', '.join(odd[:3])} have no place or another shape there")
    hf.load_state_dict(weights, strict=False)
    if config.tie_weights:
        hf.tie_weights()
    probe = torch.arange(min(8, config.block_size))[None] % config.vocab_size
    # A fork's model.py (its own activation, ...) may compute what no switch of transformers' does.
    with torch.no_grad():
        ours = model(probe, probe)[0]
        theirs = hf.eval()(probe).logits
    if not torch.allclose(ours, theirs, rtol=1e-3, atol=1e-3):
        by = (ours - theirs).abs().max()
        raise ConfigError(f"{cannot}: transformers computes other logits (by up to {by:.2g})")
    hf.save_pretrained(path)  # config.json and model.safetensors (a tied head stored once)
    if meta["tokenizer"] == "gpt2":
        write_gpt2_tokenizer(path, config.block_size)
    else:
        write_char_tokenizer(path, meta["itos"], config.block_size)
    with open(os.path.join(path, "README.md"), "w", encoding="utf-8") as f:
        f.write(model_card(name, model, meta, arch))
    # glassgpt's --init_from=<folder> reads the tokenizer from it.
    write_meta(path, {k: v for k, v in meta.items() if k != "dtype"})
    return arch


def main(argv=None):
    cfg = configure(DEFAULTS, argv)
    if cfg["to"] != "hf":
        raise ConfigError(f"to must be hf, got {cfg['to']!r}")
    path = os.path.normpath(cfg["folder"] or os.path.join(cfg["out_dir"], "hf"))
    # An empty folder, made for the export, takes it as it is.
    if os.path.exists(path) and not (os.path.isdir(path) and not os.listdir(path)):
        if not cfg["overwrite"]:
            raise ConfigError(f"{path} exists: choose another --folder, or --overwrite=true to "
                              "replace it")
        # Never rmtree a training run or a user's own folder.
        if not is_export(path):
            raise ConfigError(f"{path} is not a folder export.py wrote; --overwrite replaces only "
                              "those")
    needed = ("transformers", "tokenizers", "safetensors")
    missing = [m for m in needed if not importlib.util.find_spec(m)]
    if missing:
        raise ConfigError(f"export needs {', '.join(missing)}: pip install transformers")
    # safetensors reports a failed write (a full disk) as its own error, not an OSError.
    from safetensors import SafetensorError
    model, meta, loaded = load_model("resume", cfg["out_dir"], cfg["ckpt"], cfg["meta"])
    architecture(model.config)  # before any file is written
    # Its bars and notices are noise beside our line, which says what was written.
    quiet_transformers()
    # The card names the model after its folder, or <out_dir>/hf after the run.
    full = os.path.abspath(path)
    name = os.path.basename(os.path.dirname(full) if os.path.basename(full) == "hf" else full)
    tmp = f"{path}.tmp.{os.getpid()}"
    old = f"{path}.old.{os.getpid()}"
    # The export is written beside the folder, then swapped in whole, so a failure leaves the
    # earlier export as it was.
    try:
        arch = export_hf(model.eval(), meta, tmp, name)
        umask = os.umask(0)
        os.umask(umask)
        # transformers writes model.safetensors private (0600); give it the mode open() gives.
        for f in os.listdir(tmp):
            os.chmod(os.path.join(tmp, f), 0o666 & ~umask)
        if os.path.exists(path):
            os.replace(path, old)
        os.replace(tmp, path)
    except (OSError, SafetensorError) as e:
        raise ConfigError(f"cannot write {path}: {getattr(e, 'strerror', None) or e}") from None
    except ImportError as e:  # a transformers older than 4.53 has no Arcee
        raise ConfigError(f"{e}: pip install -U transformers") from None
    finally:
        # A failure between the two renames puts the old export back.
        if os.path.isdir(old) and not os.path.exists(path):
            os.replace(old, path)
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.rmtree(old, ignore_errors=True)
    print(f"wrote {path}, a Hugging Face {'GPT-2' if arch == 'gpt2' else 'Arcee'} model with the "
          f"{meta['tokenizer']} tokenizer; {loaded}")


if __name__ == "__main__":
    run(main)
