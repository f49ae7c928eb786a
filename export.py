"""
Export a trained model as a Hugging Face folder, for transformers and the tools that read its format
(the hub, llama.cpp's converter, interpretability libraries):

    python export.py --out_dir=out-tiny-gpt2                   # writes out-tiny-gpt2/hf
    python export.py --out_dir=out-tiny-gpt2 --folder=my-gpt   # or anywhere else
    hf upload <you>/my-gpt my-gpt                              # share it (needs hf auth login and network)

It needs transformers (pip install transformers, which brings tokenizers and safetensors too).

The folder holds model.safetensors and config.json (GPT-2's architecture; Arcee's, a Llama-style
model, for rotary positions with RMSNorm as config/tiny.py trains), the tokenizer (GPT-2's BPE,
or the char-level vocabulary as a `tokenizers` file) and a README.md model card. It loads offline with
AutoModelForCausalLM.from_pretrained(folder), AutoTokenizer.from_pretrained(folder) and
pipeline("text-generation", model=folder), and back into glassgpt with --init_from=<folder>.
GPT-2 can express learned (or sinusoidal, stored as a learned table) positions, LayerNorm, a tied or
untied head, with or without biases (no bias is exported as zero biases, read back as no bias). Rotary
positions with RMSNorm export as Arcee; rotary with LayerNorm, or RMSNorm with learned positions, have no
match: a one-line error.
A folder inside out_dir belongs to the run: a new training run there moves it to previous/ with the run.
"""

import hashlib
import importlib.util
import json
import math
import os
import re
import shutil
import sys

if __name__ == "__main__":  # before torch loads: a Ctrl-C meanwhile is one line; OpenMP's idle threads sleep
    from configurator import let_idle_threads_sleep, quit_quietly_on_early_ctrl_c
    quit_quietly_on_early_ctrl_c()
    let_idle_threads_sleep()
import torch

from checkpoint import ARCEE_NAMES, is_export, is_nanogpt, quiet_transformers
from configurator import (ConfigError, config_keys, configure, held_work, run, uninterrupted, unwritable,
                          writing)
from sample import load_run, too_few_characters
from sizing import non_embedding_label, param_counts
from tokenizer import EOT, gpt2_encoding, write_meta

# -----------------------------------------------------------------------------
out_dir = "out"  # the training run to export
ckpt = ""  # "ckpt.pt" | "best.pt"; "" = best.pt if there is one, else ckpt.pt (as sample.py)
meta = ""  # the tokenizer: a meta.json or nanoGPT meta.pkl; "" = as sample.py finds it
to = "hf"  # the format: "hf" (a Hugging Face transformers folder: GPT-2, or Arcee for rope + rmsnorm)
folder = ""  # where to write it; "" = <out_dir>/hf
overwrite = False  # replace an earlier export (swapped in once the new one is complete; files you added refuse it)
# -----------------------------------------------------------------------------
DEFAULTS = config_keys(globals())
CONV1D = ("attn.c_attn.weight", "attn.c_proj.weight", "mlp.c_fc.weight", "mlp.c_proj.weight")


def architecture(config):
    """
    The transformers architecture that computes exactly this model: "gpt2" (learned or sinusoidal
    positions, LayerNorm) or "arcee" (rotary positions, RMSNorm: a Llama-style model whose MLP is
    ungated, up_proj -> GELU -> down_proj, as ours; equal logits checked in tests/test_export.py).
    Other mixes have none: a ConfigError names the switch GPT-2 can't express.
    """
    if config.norm == "layernorm" and config.position != "rope":
        return "gpt2"
    if config.norm == "rmsnorm" and config.position == "rope":
        return "arcee"
    if config.position == "rope":
        raise ConfigError("position=rope with norm=layernorm: GPT-2 has no rotary positions and no transformers "
                          "architecture was found to match; train with position=learned (config/tiny_gpt2.py) to export")
    raise ConfigError(f"norm=rmsnorm with position={config.position}: GPT-2 has only LayerNorm and no transformers "
                      "architecture was found to match; train with norm=layernorm (config/tiny_gpt2.py) to export")


def arcee_config(config, meta, inner=None):
    """transformers' ArceeConfig for a rope + RMSNorm model (MLP inner width inner; None: model.py's 4 x n_embd):
    all heads keep their own keys and values."""
    from transformers import ArceeConfig
    eot = 50256 if meta["tokenizer"] == "gpt2" else None
    return ArceeConfig(
        vocab_size=config.vocab_size, hidden_size=config.n_embd, intermediate_size=inner or 4 * config.n_embd,
        num_hidden_layers=config.n_layer, num_attention_heads=config.n_head, num_key_value_heads=config.n_head,
        hidden_act="gelu_pytorch_tanh" if config.activation == "gelu_tanh" else "gelu",
        max_position_embeddings=config.block_size, rms_norm_eps=1e-5, attention_bias=config.bias,
        mlp_bias=config.bias, tie_word_embeddings=config.tie_weights, attention_dropout=0.0,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0}, bos_token_id=eot, eos_token_id=eot,
        pad_token_id=None)


def arcee_state_dict(model):
    """
    Our weights under Arcee's names: the fused c_attn cut into q, k and v (rows [q; k; v], as we split).
    Every tensor must find its place: one model.py gained (a fork's new weight) is refused, not dropped,
    which would leave transformers computing another model.
    """
    sd = {k: v.detach().float() for k, v in model.state_dict().items()}
    C = model.config.n_embd
    out = {"model.embed_tokens.weight": sd.pop("transformer.wte.weight"),
           "model.norm.weight": sd.pop("transformer.ln_f.weight")}
    head = sd.pop("lm_head.weight", None)  # tied: the same matrix as wte
    if not model.config.tie_weights:
        out["lm_head.weight"] = head
    for i in range(model.config.n_layer):
        ours, theirs = f"transformer.h.{i}.", f"model.layers.{i}."
        for kind in ("weight", "bias"):
            if ours + "attn.c_attn." + kind in sd:
                for name, part in zip(("q_proj", "k_proj", "v_proj"), sd.pop(ours + "attn.c_attn." + kind).split(C)):
                    out[f"{theirs}self_attn.{name}.{kind}"] = part.clone()
            for a, b in ARCEE_NAMES.items():
                if f"{ours}{a}.{kind}" in sd:
                    out[f"{theirs}{b}.{kind}"] = sd.pop(f"{ours}{a}.{kind}")
    if sd:
        raise ConfigError(f"export: weights do not match ArceeForCausalLM's layout (no place for "
                          f"{sorted(sd)[:3]}{' and more' if len(sd) > 3 else ''})")
    return out


def gpt2_config(config, meta, inner=None):
    """transformers' GPT2Config for a glassgpt GPTConfig and MLP inner width (None: model.py's 4 x n_embd;
    dropout off: an exported model is for inference)."""
    from transformers import GPT2Config
    eot = meta["tokenizer"] == "gpt2"
    return GPT2Config(
        vocab_size=config.vocab_size, n_positions=config.block_size, n_embd=config.n_embd, n_inner=inner,
        n_layer=config.n_layer, n_head=config.n_head, layer_norm_epsilon=1e-5,
        activation_function="gelu_new" if config.activation == "gelu_tanh" else "gelu",  # tanh vs erf
        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, tie_word_embeddings=config.tie_weights,
        bos_token_id=50256 if eot else None, eos_token_id=50256 if eot else None)


def gpt2_state_dict(model):
    """Our weights under GPT-2's Hugging Face names: Conv1D matrices transposed, zeros for absent biases."""
    sd = {k: v.detach().float() for k, v in model.state_dict().items()}
    out = {}
    for k, v in sd.items():
        out[k] = v.t().contiguous() if k.endswith(CONV1D) else v
        if k.endswith(".weight") and not k.startswith("lm_head") and "wte" not in k and "wpe" not in k \
                and k[:-len("weight")] + "bias" not in sd:  # trained without biases: GPT-2's are zero
            out[k[:-len("weight")] + "bias"] = torch.zeros(v.shape[0])
    if model.config.position == "sinusoidal":  # a fixed table added to x is a learned table never trained
        out["transformer.wpe.weight"] = model.pos_table.detach().float().clone()
    if model.config.tie_weights:
        out.pop("lm_head.weight")  # the same matrix as wte: transformers ties them
    return out


def byte_symbols():
    """
    GPT-2's vocab.json spells each byte as a printable character: printable Latin-1 bytes as
    themselves, the rest (control codes, space, ...) as the characters from U+0100 on, in byte order.
    """
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    symbols, extra = {}, 0
    for b in range(256):
        if b in printable:
            symbols[b] = chr(b)
        else:
            symbols[b] = chr(256 + extra)
            extra += 1
    return symbols


def split_token(ranks, token):
    """The two tokens whose merge made token: byte-pair merging of its bytes with the ranks below its own."""
    parts, limit = [bytes([b]) for b in token], ranks[token]
    while len(parts) > 2:
        best = min(range(len(parts) - 1), key=lambda i: ranks.get(parts[i] + parts[i + 1], limit))
        if ranks.get(parts[best] + parts[best + 1], limit) >= limit:
            break
        parts[best:best + 2] = [parts[best] + parts[best + 1]]
    if len(parts) != 2:
        raise ValueError(f"token {token!r} is not one merge of two tokens")
    return parts


def write_gpt2_tokenizer(path, block_size):
    """
    GPT-2's tokenizer (tokenizer.json, and vocab.json with merges.txt for tools that read those),
    derived offline from tiktoken's ranks, which are GPT-2's ids.
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast
    ranks = gpt2_encoding()._mergeable_ranks  # bytes -> id, the 50256 tokens before <|endoftext|>
    symbols = byte_symbols()
    spell = lambda token: "".join(symbols[b] for b in token)  # noqa: E731
    vocab = {spell(t): i for t, i in ranks.items()}
    merges = [tuple(spell(p) for p in split_token(ranks, t)) for t, _ in
              sorted(((t, i) for t, i in ranks.items() if len(t) > 1), key=lambda ti: ti[1])]
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)  # GPT-2's split, then bytes as symbols
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([EOT])  # id 50256: the next id after the ranks
    PreTrainedTokenizerFast(tokenizer_object=tok, bos_token=EOT, eos_token=EOT, unk_token=EOT,
                            clean_up_tokenization_spaces=False, model_max_length=block_size).save_pretrained(path)
    with open(os.path.join(path, "vocab.json"), "w", encoding="utf-8") as f:
        json.dump({**vocab, EOT: gpt2_encoding().eot_token}, f, ensure_ascii=False)
    with open(os.path.join(path, "merges.txt"), "w", encoding="utf-8") as f:
        f.write("#version: 0.2\n" + "".join(f"{a} {b}\n" for a, b in merges))


def write_char_tokenizer(path, itos, block_size):
    """A `tokenizers` file that cuts text into single characters and maps each to glassgpt's id."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast
    tok = Tokenizer(models.WordLevel(vocab={c: i for i, c in enumerate(itos)}))
    tok.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")  # every character, newlines too
    tok.decoder = decoders.Fuse()  # join the characters as they are: no spaces between them
    PreTrainedTokenizerFast(tokenizer_object=tok, clean_up_tokenization_spaces=False,
                            model_max_length=block_size).save_pretrained(path)


def model_card(name, checkpoint, config, meta, source, arch="gpt2", weights=None):
    """README.md for the folder: what the model is, what it learned from, how long, how well, how to load it.
    weights: the model's own parameter count, which a fork's model.py may make differ from sizing.py's."""
    train = checkpoint.get("config") or {}
    it = checkpoint.get("iter_num", 0)
    per_iter = [train.get(k) for k in ("gradient_accumulation_steps", "batch_size", "block_size")]
    tokens = (f"{it:,} iterations x {per_iter[0] * per_iter[1] * per_iter[2]:,} tokens = "
              f"{it * per_iter[0] * per_iter[1] * per_iter[2]:,} tokens" if all(per_iter) else f"{it:,} iterations")
    counts = param_counts(config)
    vocab = (f"characters, {meta['vocab_size']} of them (one token per character)" if meta["tokenizer"] == "char"
             else "GPT-2's BPE (50257 tokens)")
    params = f"{counts['total']:,} ({non_embedding_label(config, counts)}), counted by glassgpt's sizing.py"
    if weights is not None and weights != counts["total"]:
        params = (f"{weights:,}, counted from the weights (sizing.py's arithmetic, for glassgpt's own model.py, "
                  f"gives {counts['total']:,})")
    if arch == "gpt2" and not config.bias:
        params += ("\n  (trained without biases; the export adds GPT-2 biases that are all zero, which glassgpt "
                   "reads back as none)")
    loss = float(checkpoint.get("best_val_loss", "nan"))
    if math.isfinite(loss):
        loss = f"{loss:.4f} nats per token (the lowest validation loss the run recorded)"
    else:  # inf: the run's starting value, so the checkpoint was saved before its first eval
        loss = "none yet (saved before the run's first eval)" if loss == math.inf else "not recorded"
    return f"""---
library_name: transformers
pipeline_tag: text-generation
tags: [glassgpt, {arch}]
---

# {name}

A language model trained with {"nanoGPT" if is_nanogpt(checkpoint) else "glassgpt"}, exported by glassgpt from `{source}` as transformers' {
    "GPT-2 (`GPT2LMHeadModel`)" if arch == "gpt2" else
    "Arcee (`ArceeForCausalLM`: rotary positions, RMSNorm, an ungated GELU MLP)"}.

- Trained on: dataset `{train.get('dataset', '?')}`{f" ({meta['source']})" if meta.get('source') else ''}
- Tokens: {vocab}
- Training: {tokens}
- Validation loss: {loss}
- Parameters: {params}
- Shape: {config.n_layer} layers, {config.n_head} heads, {config.n_embd} wide, a context of {config.block_size} tokens,
  {'GPT-2 tanh' if config.activation == 'gelu_tanh' else 'exact (erf)'} GELU{'' if config.tie_weights else ', untied head'}

## Use

```python
from transformers import AutoModelForCausalLM, AutoTokenizer, pipeline
model = AutoModelForCausalLM.from_pretrained("path/to/this/folder")
tokenizer = AutoTokenizer.from_pretrained("path/to/this/folder")
# the prompt and the new tokens together fit the model's context of {config.block_size} tokens
print(pipeline("text-generation", model="path/to/this/folder")("ROMEO:", max_new_tokens={card_tokens(config)})[0]["generated_text"])
```

or with glassgpt, which slides its window along past the context: `python sample.py --init_from=path/to/this/folder`.

## Share

`hf upload <you>/{name} path/to/this/folder` (after `hf auth login`; an older huggingface_hub calls it `huggingface-cli`)
"""


def card_tokens(config):
    """The card's max_new_tokens: 100, or fewer where "ROMEO:" (at most 8 tokens) and they would overflow the
    context. transformers' GPT-2 fails past its n_positions (its Arcee runs on, with other text than ours)."""
    return max(1, min(100, config.block_size - 8))


def model_name(path):
    """
    The name the model card gives the model at path (its title, the hub repo in its upload line): the
    folder's name, or for the default <out_dir>/hf the run's, out-tiny-gpt2 rather than hf.
    """
    path = os.path.abspath(path)
    return os.path.basename(os.path.dirname(path)) if os.path.basename(path) == "hf" else os.path.basename(path)


def export_hf(model, meta, checkpoint, path, source, name):
    """Write the Hugging Face folder for model at path (which must not exist yet); name heads the model card."""
    config = model.config
    arch = architecture(config)
    inner = model.transformer.h[0].mlp.c_fc.out_features  # 4 x n_embd in model.py; a fork may choose another
    if arch == "gpt2":
        from transformers import GPT2LMHeadModel
        hf, weights = GPT2LMHeadModel(gpt2_config(config, meta, inner)), gpt2_state_dict(model)
    else:
        try:
            from transformers import ArceeForCausalLM
        except ImportError:
            raise ConfigError("a rope + rmsnorm model exports as Arcee, which needs transformers >= 4.53") from None
        hf, weights = ArceeForCausalLM(arcee_config(config, meta, inner)), arcee_state_dict(model)
    try:
        missing, unexpected = hf.load_state_dict(weights, strict=False)
    except RuntimeError as e:  # a weight of another shape than the architecture's (a fork's model.py)
        found = re.search(r"size mismatch for [^\n]*", str(e))
        raise ConfigError(f"export: weights do not match {type(hf).__name__}'s layout "
                          f"({found.group(0).rstrip('.') if found else str(e).splitlines()[0]})") from None
    # only GPT-2's causal-mask buffers (older transformers) and the tied head may be absent
    missing = [k for k in missing if not k.endswith((".attn.bias", ".attn.masked_bias")) and
               not (k == "lm_head.weight" and config.tie_weights)]
    if missing or unexpected:
        parts = [f"{what} {names[:3]}" for what, names in (("missing", missing), ("unexpected", unexpected)) if names]
        raise ConfigError(f"export: weights do not match {type(hf).__name__}'s layout ({', '.join(parts)})")
    if config.tie_weights:
        hf.tie_weights()
    hf.save_pretrained(path)  # model.safetensors (a tied head stored once) and config.json
    if meta["tokenizer"] == "gpt2":
        write_gpt2_tokenizer(path, config.block_size)
    else:
        write_char_tokenizer(path, meta["itos"], config.block_size)
    card = model_card(name, checkpoint, config, meta, source, arch, model.get_num_params(non_embedding=False))
    with open(os.path.join(path, "README.md"), "w", encoding="utf-8", newline="") as f:  # as hashed, byte for byte
        f.write(card)
    # for glassgpt's sample.py --init_from=<folder>; and the card's hash, so a re-export can tell it was edited
    write_meta(path, {**{k: v for k, v in meta.items() if k != "dtype"}, "card_sha256": sha256(card)})


def sha256(text):
    return hashlib.sha256(text.encode()).hexdigest()


def edited_card(path):
    """Whether the folder's README.md differs from the model card export.py wrote there (known from the hash
    in its meta.json; an export older than that hash is taken as unedited)."""
    card = os.path.join(path, "README.md")
    try:
        with open(os.path.join(path, "meta.json")) as f:
            wrote = json.load(f).get("card_sha256")
        with open(card, encoding="utf-8", newline="") as f:
            return bool(wrote) and sha256(f.read()) != wrote
    except (OSError, ValueError, AttributeError):  # no card, an unreadable meta.json: nothing to keep
        return False


def empty_folder(path):
    try:
        return os.path.isdir(path) and not os.listdir(path)
    except OSError:  # unreadable: not known to be empty
        return False


def check_replaceable(path, out_dir, overwrite):
    """
    --overwrite replaces only what export.py wrote: never a training run, the run being exported, or a folder
    of the user's own, which rmtree would take with it. (An empty folder is not checked: main writes into it.)
    """
    inside = os.path.commonpath([os.path.abspath(path), os.path.abspath(out_dir)]) == os.path.abspath(path)
    same = os.path.abspath(path) == os.path.abspath(out_dir)
    held = (("a training run (the one being exported)" if same else f"the training run being exported, in {out_dir}")
            if inside else held_work(path, ("a training run",)))
    why = None  # why --overwrite would be refused
    if held:
        why = f"{path} holds {held}: --overwrite replaces only a folder export.py wrote; choose another --folder"
    elif not is_export(path):  # a file, or a folder export.py did not write
        why = f"{path} is not a folder export.py wrote: --overwrite replaces only those; choose another --folder"
    if not overwrite:  # --overwrite is offered only where it would be taken
        raise ConfigError(f"{path} exists: choose another --folder" +
                          ("" if why else ", or --overwrite=true to replace it"))
    if why:
        raise ConfigError(why)
    if edited_card(path):  # the file people edit before uploading: kept, as a file of their own is
        raise ConfigError(f"{path}/README.md was edited since export.py wrote it: --overwrite would replace it "
                          "with a new model card; move it away first (the new card can then take your edits)")


def main(argv=None):
    cfg = configure(DEFAULTS, argv, reads_run=True)
    if cfg["to"] != "hf":
        raise ConfigError(f"to must be hf (a Hugging Face transformers folder), got {cfg['to']!r}")
    path = cfg["folder"] or os.path.join(cfg["out_dir"], "hf")
    if os.path.exists(path) and not empty_folder(path):  # an empty one, made for it, takes the export as it is
        check_replaceable(path, cfg["out_dir"], cfg["overwrite"])
    why = unwritable(os.path.dirname(os.path.abspath(path)))  # the new folder is made beside it, then renamed
    if why:
        raise ConfigError(f"cannot write {path}: {why}; choose another --folder")
    checkpoint, source, model, meta, _ = load_run(cfg["out_dir"], cfg["ckpt"], cfg["meta"])
    fewer = too_few_characters(meta, model.config.vocab_size)
    if fewer:  # the folder's tokenizer would decode the model's other ids to nothing: said, as sample.py says it
        print(f"warning: {fewer}: the folder's tokenizer cannot decode the rest (is this model's meta.json "
              "another?)", file=sys.stderr)
    try:
        arch = architecture(model.config)
    except ConfigError as e:
        raise ConfigError(f"cannot export {source}: {e}") from None
    # transformers writes model.safetensors with safetensors, the tokenizer with tokenizers: name all missing
    missing = [name for name in ("transformers", "tokenizers", "safetensors") if importlib.util.find_spec(name) is None]
    if missing:
        raise ConfigError(f"export needs transformers, tokenizers and safetensors ({', '.join(missing)} "
                          f"{'is' if len(missing) == 1 else 'are'} missing): pip install transformers "
                          "(it brings the others)")
    quiet_transformers()  # its shard bars and notices are noise: our line says what was written
    tmp = f"{os.path.normpath(path)}.tmp.{os.getpid()}"
    old = f"{os.path.normpath(path)}.old.{os.getpid()}"  # the export it replaces, whole, until the new one is in
    with writing(path):  # a read-only or full disk: one line, and the temporary folder goes
        try:
            export_hf(model.eval(), meta, checkpoint, tmp, source, model_name(path))
            umask = os.umask(0)  # read it: os has no other way
            os.umask(umask)
            for name in os.listdir(tmp):  # safetensors writes a private temp file (0600) and renames it: give
                os.chmod(os.path.join(tmp, name), 0o666 & ~umask)  # every file the mode open() would have
            if os.path.exists(path):  # the old folder goes only now that the new one is complete
                added = sorted(set(os.listdir(path)) - set(os.listdir(tmp)))  # files of the user's, put in since
                if added:
                    raise ConfigError(f"{path} holds {', '.join(added[:3])}{' and more' if len(added) > 3 else ''}, "
                                      "which export.py did not write: --overwrite would delete it; move it away first")
            with uninterrupted():  # renames, then the old one's files unlinked: a Ctrl-C waits for them
                if os.path.exists(path):
                    os.replace(path, old)
                os.replace(tmp, path)
                shutil.rmtree(old, ignore_errors=True)
        finally:
            if os.path.isdir(old) and not os.path.exists(path):  # failed between the two renames: put it back
                os.replace(old, path)
            shutil.rmtree(tmp, ignore_errors=True)
    print(f"wrote {path}: {source} as a Hugging Face {'GPT-2' if arch == 'gpt2' else 'Arcee (Llama-style)'} "
          f"model ({meta['tokenizer']} tokenizer); "
          f"load it with AutoModelForCausalLM.from_pretrained({path!r})")


if __name__ == "__main__":
    run(main)
