"""
Checkpoints, written atomically and read without unpickling code, and the one place a model is
loaded from: a training run's ckpt.pt (glassgpt's or nanoGPT's), GPT-2 from Hugging Face, or a
folder export.py wrote. A checkpoint is a dict of tensors and plain values (train.py's keys: model,
optimizer, model_args, config, iter_num, best_val_loss, ...), so torch.load(weights_only=True) reads
it: a file you are handed runs no code.
"""

import difflib
import glob
import json
import math
import os
import re
import urllib.error
import urllib.request
import warnings
from dataclasses import fields
from pathlib import Path

import torch

from configurator import ConfigError, did_you_mean
from model import GPT, GPTConfig
from tokenizer import find_meta, gpt2_meta, padded_vocab, replace_file

PRETRAINED = ("gpt2", "gpt2-medium", "gpt2-large", "gpt2-xl")  # OpenAI's sizes on the hub
# Hugging Face's names for GPT-2's tanh GELU and the exact (erf) one
HF_ACTIVATIONS = {"gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh", "gelu": "gelu"}


def save_checkpoint(obj, path):
    """Written beside path, fsynced, renamed over it: a crash or kill -9 at any moment leaves a
    whole ckpt.pt. Where it cannot be written (a full disk), the ConfigError says how far the
    checkpoint there before goes."""
    # A save killed mid-write leaves its temporary file, named by its (now dead) process's id.
    for old in glob.glob(glob.escape(os.fspath(path)) + ".tmp.*"):
        pid = old.rsplit(".", 1)[1]
        if pid.isdigit() and os.path.isdir("/proc") and not os.path.exists(f"/proc/{pid}"):
            os.remove(old)
    try:
        replace_file(path, lambda f: torch.save(obj, f))
    except ConfigError as e:
        if not os.path.isfile(path):
            raise
        kept = load_checkpoint(path, mmap=True).get("iter_num")
        raise ConfigError(f"{e}, from iter {kept}") from None


def rng_state(device):
    """The random state dropout draws from, for ckpt.pt: a list per process (train.py saves rank
    0's)."""
    state = {"torch": [torch.get_rng_state()]}
    if "cuda" in device:
        state["cuda"] = [torch.cuda.get_rng_state()]
    return state


def set_rng_state(state, device):
    torch.set_rng_state(state["torch"][0].cpu())
    if "cuda" in state and "cuda" in device:
        torch.cuda.set_rng_state(state["cuda"][0].cpu())


def load_checkpoint(path, map_location="cpu", mmap=False):
    """The checkpoint dict at path, tensors only (mmap=True maps them: a glance costs nothing); else
    a ConfigError."""
    if not os.path.isfile(path):
        raise ConfigError(f"no checkpoint at {path}")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ckpt = torch.load(path, map_location=map_location, weights_only=True, mmap=mmap)
    except Exception as e:  # never torch's advice to load it with weights_only=False
        named = re.search(r"GLOBAL ([\w.]+)", str(e))
        if named:
            raise ConfigError(f"refused checkpoint {path}: it names {named.group(1)} "
                              "(nothing in it was run)") from None
        raise ConfigError(f"cannot read checkpoint {path}: "
                          "truncated, corrupt or not a torch file") from None
    if not isinstance(ckpt, dict) or "model" not in ckpt or "model_args" not in ckpt:
        raise ConfigError(f"{path} is not a glassgpt or nanoGPT checkpoint "
                          "(no model or model_args)")
    return ckpt


def is_nanogpt(ckpt):  # nanoGPT's model_args have no norm, glassgpt's always do
    return "norm" not in ckpt["model_args"]


def current_model_args(ckpt):
    """model_args with today's fields. nanoGPT's mean learned positions, LayerNorm, a tied head and
    its nn.GELU (exact erf); older glassgpt's mean the tanh GELU and a sinusoidal table of
    amplitude 1."""
    args = dict(ckpt["model_args"])
    args.setdefault("activation", "gelu" if is_nanogpt(ckpt) else "gelu_tanh")
    args.setdefault("sinusoidal_scale", 1.0)
    return args


def model_from_checkpoint(ckpt, **overrides):
    """The GPT a checkpoint holds, on the CPU; overrides change config fields (dropout). A
    ValueError if it misfits."""
    args = current_model_args(ckpt)
    unknown = sorted(set(args) - {f.name for f in fields(GPTConfig)})
    if unknown:  # a switch this model.py lacks: the weights may fit, but it would be another model
        raise ValueError(f"it was saved with {unknown[0]}={args[unknown[0]]!r}, "
                         "a key this model.py does not have")
    model = GPT(GPTConfig.from_dict({**args, **overrides}))
    old = ("wte.", "wpe.", "h.", "ln_f.")  # glassgpt's first layout, before the transformer
    # nanoGPT saves a compiled model's weights under torch.compile's prefix
    sd = {k.removeprefix("_orig_mod."): v for k, v in ckpt["model"].items()}
    load_weights(model, {"transformer." + k if k.startswith(old) else k: v for k, v in sd.items()})
    return model


def load_weights(model, sd):
    """model.load_state_dict(sd), or a one-line ValueError naming the first weight that does not
    fit."""
    built = model.state_dict()
    bad = [f"{k}: saved {tuple(sd[k].shape)}, model.py builds {tuple(v.shape)}"
           for k, v in built.items() if k in sd and sd[k].shape != v.shape]
    bad += [f"{k}: model.py builds it, none saved" for k in built if k not in sd]
    bad += [f"{k}: saved, model.py builds none" for k in sd if k not in built]
    if bad:
        raise ValueError(bad[0] + (f" (and {len(bad) - 1} more)" if len(bad) > 1 else ""))
    model.load_state_dict(sd)


def quiet_transformers():
    """Import transformers with its progress bars and notices off: our own lines say what was
    loaded."""
    import transformers
    transformers.utils.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    return transformers


def is_export(folder):
    """True for a Hugging Face folder as export.py writes it: config.json, the weights and
    glassgpt's meta.json."""
    has = lambda name: os.path.isfile(os.path.join(folder, name))  # noqa: E731
    weights = has("model.safetensors") or has("model.safetensors.index.json")
    return has("config.json") and has("meta.json") and weights


def model_from_pretrained(name_or_folder, dropout=0.0):
    """GPT-2 from the hub or a GPT-2 folder (through transformers), or an Arcee folder as export.py
    writes it. ImportError without transformers, OSError without the weights or network, ValueError
    for anything else."""
    path = os.path.join(name_or_folder, "config.json")
    if name_or_folder not in PRETRAINED and not os.path.isfile(path):
        hint = did_you_mean(name_or_folder, ("resume", *PRETRAINED))
        if os.path.isfile(os.path.join(name_or_folder, "ckpt.pt")):  # a training run's folder
            hint = f" (did you mean --init_from=resume --out_dir={name_or_folder}?)"
        raise ValueError(f"{name_or_folder!r} is not resume, {', '.join(PRETRAINED)} "
                         f"or a folder with config.json{hint}")
    try:
        config = {"model_type": "gpt2"}
        if name_or_folder not in PRETRAINED:
            config = json.loads(Path(path).read_text())
        if config.get("model_type") == "arcee":
            return model_from_arcee(name_or_folder, config, dropout)
        if config.get("model_type") == "gpt2":
            return model_from_gpt2(name_or_folder, dropout)
    except (ImportError, OSError, ValueError):
        raise
    except Exception as e:  # whatever else transformers or safetensors raise on a folder
        raise ValueError(f"{type(e).__name__}: {(str(e).splitlines() or [''])[0][:200]}") from None
    raise ValueError(f"{name_or_folder} holds a {config.get('model_type')!r} model, "
                     "not GPT-2 or Arcee")


def model_from_gpt2(name, dropout=0.0):
    transformers = quiet_transformers()
    try:  # the cache (or a folder) first: no network touched
        hf = transformers.GPT2LMHeadModel.from_pretrained(name, local_files_only=True)
    except OSError:
        if name not in PRETRAINED:
            raise
        # Without a network this is one line at once, not the hub client's long retries.
        from huggingface_hub import constants
        how = (f"{name} is not in the Hugging Face cache and %s; with no network, "
               "pass a local copy: --init_from=FOLDER")
        if constants.HF_HUB_OFFLINE:
            raise OSError(how % "HF_HUB_OFFLINE is set") from None
        try:
            url = f"{constants.ENDPOINT}/{name}/resolve/main/config.json"
            urllib.request.urlopen(urllib.request.Request(url, method="HEAD"), timeout=5).close()
        except urllib.error.HTTPError:
            pass  # the hub answered
        except OSError as e:
            raise OSError(how % f"{constants.ENDPOINT} is not reachable "
                                f"({getattr(e, 'reason', None) or e})") from None
        hf = transformers.GPT2LMHeadModel.from_pretrained(name)
    c = hf.config
    activation = HF_ACTIVATIONS.get(c.activation_function)
    if activation is None or c.layer_norm_epsilon != 1e-5:
        raise ValueError(f"{name}: activation {c.activation_function!r} or layer_norm_epsilon "
                         "is not GPT-2's")
    masks = (".attn.bias", ".attn.masked_bias")
    sd_hf = {k: v for k, v in hf.state_dict().items() if not k.endswith(masks)}
    # export.py writes zero biases for a model trained without them: all zero reads back as no bias
    bias = any(v.any().item() for k, v in sd_hf.items() if k.endswith(".bias"))
    model = GPT(GPTConfig(block_size=c.n_positions, vocab_size=c.vocab_size, n_layer=c.n_layer,
                          n_head=c.n_head, n_embd=c.n_embd, dropout=dropout, bias=bias,
                          activation=activation, tie_weights=c.tie_word_embeddings))
    # Hugging Face's GPT-2 keeps OpenAI's Conv1D, a Linear stored as (in, out): transposed here
    conv1d = ("attn.c_attn.weight", "attn.c_proj.weight", "mlp.c_fc.weight", "mlp.c_proj.weight")
    ours = model.state_dict()
    sd = {k: v.t() if k.endswith(conv1d) else v for k, v in sd_hf.items() if k in ours}
    load_weights(model, sd)
    return model


# export.py's Arcee folder (a rope + RMSNorm model) is read from config.json and model.safetensors
# alone. These are its names for a block's weights; its q, k and v are stacked here into c_attn.
ARCEE_NAMES = {"ln_1": "input_layernorm", "ln_2": "post_attention_layernorm",
               "attn.c_proj": "self_attn.o_proj", "mlp.c_fc": "mlp.up_proj",
               "mlp.c_proj": "mlp.down_proj"}


def model_from_arcee(folder, c, dropout=0.0):
    """The GPT an Arcee folder holds, if glassgpt computes exactly what its config.json says."""
    from safetensors.torch import load_file
    n_embd, n_head = c.get("hidden_size"), c.get("num_attention_heads")
    rope = c.get("rope_parameters") or c.get("rope_scaling") or {}  # transformers 5's, and 4's
    factor = rope.get("partial_rotary_factor", c.get("partial_rotary_factor", 1.0))
    exact = {"hidden_act": c.get("hidden_act") in HF_ACTIVATIONS,
             "rms_norm_eps": c.get("rms_norm_eps") == 1e-5,
             "intermediate_size": c.get("intermediate_size") == 4 * n_embd,
             "num_key_value_heads": c.get("num_key_value_heads", n_head) == n_head,
             "head_dim": c.get("head_dim") in (None, n_embd // n_head),
             "mlp_bias": c.get("mlp_bias", False) == c.get("attention_bias", False),
             "rope_type": rope.get("rope_type", rope.get("type", "default")) == "default",
             "rope_theta": rope.get("rope_theta", c.get("rope_theta", 10000.0)) == 10000.0,
             "partial_rotary_factor": factor == 1.0}
    wrong = [k for k, ok in exact.items() if not ok]
    if wrong:
        raise ValueError(f"{folder}: config.json's {wrong[0]}={c.get(wrong[0])!r} "
                         "is not what glassgpt computes")
    config = GPTConfig(block_size=c["max_position_embeddings"], vocab_size=c["vocab_size"],
                       n_head=n_head, n_embd=n_embd, n_layer=c["num_hidden_layers"],
                       dropout=dropout, norm="rmsnorm", position="rope",
                       bias=bool(c.get("attention_bias", False)),
                       activation=HF_ACTIVATIONS[c["hidden_act"]],
                       tie_weights=bool(c.get("tie_word_embeddings", False)))
    files = ["model.safetensors"]
    index = Path(folder, "model.safetensors.index.json")  # sharded: the index names the files
    if index.is_file():
        files = set(json.loads(index.read_text())["weight_map"].values())
    w = {k: v.float() for name in files for k, v in load_file(os.path.join(folder, name)).items()}
    sd = {"transformer.wte.weight": w.pop("model.embed_tokens.weight", None),
          "transformer.ln_f.weight": w.pop("model.norm.weight", None)}
    head = w.pop("lm_head.weight", None)
    sd["lm_head.weight"] = sd["transformer.wte.weight"] if config.tie_weights else head
    for i in range(config.n_layer):
        ours, theirs = f"transformer.h.{i}.", f"model.layers.{i}."
        for kind in ("weight", "bias") if config.bias else ("weight",):
            qkv = [w.pop(f"{theirs}self_attn.{p}_proj.{kind}", None) for p in "qkv"]
            sd[f"{ours}attn.c_attn.{kind}"] = None if None in qkv else torch.cat(qkv)
            for a, b in ARCEE_NAMES.items():
                if not (kind == "bias" and a.startswith("ln_")):  # RMSNorm has no bias
                    sd[f"{ours}{a}.{kind}"] = w.pop(f"{theirs}{b}.{kind}", None)
    # load_weights names what is missing or left over
    sd = {k: v for k, v in sd.items() if v is not None} | w
    model = GPT(config)
    load_weights(model, sd)
    return model


def what_else(out_dir, path):
    """What to read instead of the checkpoint at path, missing or unreadable, as the end of its
    error: another checkpoint in out_dir (the nearest name); where out_dir is no folder, the runs
    here or how to make one."""
    name = os.path.basename(path)
    if os.path.isdir(out_dir):  # a run's folder, perhaps of a run that has not saved yet
        saved = sorted(n for n in os.listdir(out_dir) if n.endswith(".pt") and n != name)
        if not saved:
            return f"; {out_dir} holds no other checkpoint yet (a run saves one at each eval)"
        return f" (try --ckpt={difflib.get_close_matches(name, saved, n=1, cutoff=0)[0]})"
    runs = sorted(d for d in os.listdir(".") if os.path.isfile(os.path.join(d, "ckpt.pt")))
    if runs:
        return f": the runs here are {', '.join(runs)} (--out_dir=...)"
    return ": train one first, e.g. python train.py config/tiny.py (out_dir out-tiny)"


def model_from_run(out_dir, ckpt=""):
    """(model, a line saying what was loaded, the folders its tokenizer may be in) from a training
    run's checkpoint in out_dir: ckpt if named, else best.pt if there, else ckpt.pt."""
    path = os.path.join(out_dir, ckpt or "best.pt")
    if not ckpt and not os.path.isfile(path):
        path = os.path.join(out_dir, "ckpt.pt")
    try:
        checkpoint = load_checkpoint(path)
        model = model_from_checkpoint(checkpoint)
    except ConfigError as e:  # missing or unreadable
        raise ConfigError(f"{e}{what_else(out_dir, path)}") from None
    except (ValueError, TypeError, KeyError) as e:
        raise ConfigError(f"{path} does not hold a model this code can build: {e}") from None
    loss = float(checkpoint.get("best_val_loss", math.inf))  # nanoGPT saves a tensor
    held = f"best val loss {loss:.4f}" if math.isfinite(loss) else "no val loss yet"
    loaded = f"loaded {path} (iter {checkpoint.get('iter_num', '?')}, {held})"
    # Its tokenizer is in the run's folder, else in its dataset's: beside out_dir (a nanoGPT
    # checkout), from here, or in this repo.
    dataset = os.path.join("data", str((checkpoint.get("config") or {}).get("dataset", "")))
    places = [out_dir, os.path.normpath(os.path.join(out_dir, "..", dataset)), dataset,
              os.path.join(os.path.dirname(os.path.abspath(__file__)), dataset)]
    return model, loaded, places


def find_tokenizer(meta, places, vocab_size):
    """(tokenizer meta, where it came from): meta if named, else the first found in places, else
    GPT-2's BPE where the model has the ids for it."""
    if meta:
        found = find_meta(meta)
        if not found:
            raise ConfigError("--meta wants a meta.json, nanoGPT's meta.pkl or a folder holding "
                              f"one, got {meta}")
        return found
    found = next(filter(None, (find_meta(p) for p in places if os.path.isdir(p))), None)
    if found is None and vocab_size < 50257:  # too few ids for GPT-2's BPE
        raise ConfigError(f"no meta.json or meta.pkl found for this model of {vocab_size} tokens: "
                          "name its tokenizer with --meta=PATH")
    return found or (gpt2_meta(), "GPT-2's BPE")


def load_model(init_from="resume", out_dir="out", ckpt="", meta=""):
    """(model in eval mode on the CPU, tokenizer meta, a line saying what was loaded) from a
    training run's checkpoint in out_dir (init_from="resume"), a GPT-2 size or a Hugging Face
    folder. meta names the tokenizer (a meta.json, nanoGPT's meta.pkl, or a folder with one); ""
    finds it. Every failure is a ConfigError."""
    if init_from == "resume":
        model, loaded, places = model_from_run(out_dir, ckpt)
    else:
        try:
            model = model_from_pretrained(init_from)
        except (ImportError, OSError, ValueError) as e:  # no transformers or network, a bad folder
            raise ConfigError(f"cannot load {init_from}: "
                              f"{(str(e).splitlines() or [''])[0][:300]}") from None
        loaded = f"loaded {init_from}"
        places = [init_from] if os.path.isdir(init_from) else []
    vocab_size = model.config.vocab_size
    tokens, meta_from = find_tokenizer(meta, places, vocab_size)
    # The model's ids are the tokenizer's, or those padded by train.py (cropped here); other ids
    # would mean other characters.
    if vocab_size not in (tokens["vocab_size"], padded_vocab(tokens)):
        raise ConfigError(f"the tokenizer from {meta_from} has {tokens['vocab_size']} tokens, "
                          f"the model {vocab_size}: not this model's; "
                          "name its own with --meta=PATH")
    if vocab_size == padded_vocab(tokens) > tokens["vocab_size"]:
        model.crop_vocab_size(tokens["vocab_size"])
    return model.eval(), tokens, f"{loaded}, tokenizer from {meta_from}"


# The config keys that shape the model (GPTConfig's): a resume cannot change them.
MODEL_KEYS = ("n_layer", "n_head", "n_embd", "block_size", "bias", "norm", "position", "attention",
              "activation", "tie_weights")


def adopt_checkpoint(config, given):
    """train.py --init_from=resume: the run in out_dir is its own config. Every key comes from its
    ckpt.pt but those given in a config file or on the command line (given); a given model key or
    optimizer that differs is an error, any other is named once (a new max_iters is how a run is
    extended). Returns (config, ckpt)."""
    path = os.path.join(config["out_dir"], "ckpt.pt")
    # mmap: the processes of a machine share one copy, the file's pages
    ckpt = load_checkpoint(path, mmap=True)
    skip = ["init_from", "out_dir", "eval_only"]
    if is_nanogpt(ckpt):  # its device keys were its own GPU's
        skip += ["device", "dtype", "compile", "backend"]
    run = {"optimizer": "adamw"}  # runs from before Muon have no optimizer key
    run.update(ckpt.get("config") or {})
    run.update(vars(GPTConfig()))  # model keys older runs lack take their defaults
    run.update(current_model_args(ckpt))
    run = {k: v for k, v in run.items() if k in config and k not in skip}
    # sdpa and manual attention compute the same function of the same weights
    differ = [k for k in given if k in run and k != "attention" and config[k] != run[k]]
    # the weights and the optimizer state would not fit another model or optimizer
    clash = [f"{k}={config[k]!r} ({given[k]}) but the run has {run[k]!r}"
             for k in differ if k in MODEL_KEYS + ("optimizer",)]
    if clash:
        raise ConfigError(f"resume {path}: {'; '.join(clash)}")
    if differ and os.environ.get("RANK", "0") == "0":
        changes = [f"{k}={config[k]!r} (the run's {run[k]!r})" for k in differ]
        print(f"resuming {path} with {', '.join(changes)}")
    adopted = {k: v for k, v in run.items() if k not in given}
    return {**config, **adopted, "init_from": "resume"}, ckpt


def restarted(out_dir):
    """True in a process torchrun restarted (a worker died; --max-restarts) once this job's run has
    saved ckpt.pt: it picks that run up, not an earlier run's checkpoint in out_dir, nor starts it
    over."""
    path = os.path.join(out_dir, "ckpt.pt")
    if int(os.environ.get("TORCHELASTIC_RESTART_COUNT", 0)) == 0 or not os.path.isfile(path):
        return False
    saved_by = load_checkpoint(path, mmap=True).get("torchrun_id")
    return saved_by == os.environ.get("TORCHELASTIC_RUN_ID")
