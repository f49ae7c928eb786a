"""
Checkpoints: written atomically, read without unpickling code.

A checkpoint is a dict of tensors and plain Python values (see train.py for its keys), so that
torch.load(..., weights_only=True) can read it: a file someone hands you cannot run code. Models come
from Hugging Face here too: GPT-2 (the hub or a folder, through transformers) and export.py's folders.
"""

import importlib.util
import json
import math
import os
import pickle
import re
import urllib.error
import urllib.request
import warnings
from dataclasses import fields

import torch

try:
    import fcntl  # POSIX: train.py's lock on its out_dir
except ImportError:
    fcntl = None

from configurator import ConfigError, library_help
from model import GPT, GPTConfig

if __name__ == "__main__":  # imported, not run: say what this module is and which commands use it
    library_help(__file__)
PRETRAINED = ("gpt2", "gpt2-medium", "gpt2-large", "gpt2-xl")  # OpenAI's GPT-2 sizes on the Hugging Face hub


def save_checkpoint(obj, path):
    """Write to a temporary file beside path, then rename over it: a crash mid-save leaves the old file."""
    remove_dead_temps(path)
    tmp = f"{path}.tmp.{os.getpid()}"
    try:
        with open(tmp, "wb") as f:
            torch.save(obj, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)  # atomic on POSIX and Windows
    except Exception as e:
        # torch's zip writer, cut short (a full disk, a second Ctrl-C's exit), raises its own RuntimeError
        # on the way out, over the cause: the cause is what to report (or to let end the process)
        chain = [e]
        while chain[-1].__context__ is not None and len(chain) < 8:
            chain.append(chain[-1].__context__)
        stop = next((c for c in chain if isinstance(c, (SystemExit, KeyboardInterrupt))), None)
        if stop is not None:
            raise stop from None
        cause = next((c for c in chain if isinstance(c, OSError)), None)
        if cause is None:
            raise
        before = "the one there before is intact" if os.path.exists(path) else "there was none before"
        raise ConfigError(f"cannot save {path}: {cause.strerror or cause} ({before})") from None
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


def remove_dead_temps(path):
    """A save killed mid-write (SIGKILL, a crash) leaves path.tmp.<pid>: remove those whose process is gone."""
    if os.name != "posix":  # os.kill(pid, 0) asks "alive?" on POSIX only; on Windows it would end the process
        return
    folder, prefix = os.path.dirname(path) or ".", os.path.basename(path) + ".tmp."
    for name in os.listdir(folder):
        pid = name[len(prefix):]
        if not (name.startswith(prefix) and pid.isdigit()):
            continue
        try:
            os.kill(int(pid), 0)
        except ProcessLookupError:  # dead: its half-written file is no one's
            try:
                os.remove(os.path.join(folder, name))
            except OSError:
                pass
        except (OSError, OverflowError):  # alive under another user, or not a pid at all: leave it
            pass


def other_checkpoint(path):
    """For an error about a run's ckpt.pt (best.pt): "; <the other one> is there" if it is, which may serve."""
    name = {"ckpt.pt": "best.pt", "best.pt": "ckpt.pt"}.get(os.path.basename(path))
    other = os.path.join(os.path.dirname(path), name) if name else ""
    return f"; {other} is there" if other and os.path.isfile(other) else ""


def in_use(out_dir):
    """Whether a train.py run holds out_dir's lock now (train.lock_out_dir): a shared lock, tried and let go, fails only against it."""
    if fcntl is None or not os.path.isdir(out_dir):
        return False
    fd = os.open(out_dir, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        return False
    except BlockingIOError:
        return True
    except OSError:
        return False
    finally:
        os.close(fd)  # closing lets a shared lock go


def load_checkpoint(path, map_location="cpu", mmap=False):
    """
    The checkpoint dict at path; a missing or unreadable file is a one-line ConfigError. mmap=True maps
    the tensors instead of reading them: a glance at model_args or iter_num costs nothing, whatever the size.
    """
    if not os.path.isfile(path):
        folder = os.path.dirname(path)
        # out_dir holds no run: say where its last one went
        earlier = [] if holds_checkpoint(folder) else earlier_runs(folder)
        if in_use(folder):  # a run training there has yet to save
            raise ConfigError(f"no checkpoint at {path} yet: a train.py run is training there now and has not "
                              "saved yet (it saves at each eval_interval)")
        raise ConfigError(f"no checkpoint at {path}" + (f" (an earlier run there was moved aside to {earlier[-1]}: "
                                                         f"pass --out_dir={earlier[-1]})" if earlier else "")
                          + other_checkpoint(path))
    try:
        with warnings.catch_warnings():  # a foreign file can make torch warn first: keep the error one line
            warnings.simplefilter("ignore")
            ckpt = torch.load(path, map_location=map_location, weights_only=True, mmap=mmap)
    except Exception as e:  # torch's own text would suggest weights_only=False: never, for a file from outside
        named = names_code(e)
        if named:
            raise ConfigError(f"refused checkpoint {path}: {named}{other_checkpoint(path)}") from None
        raise ConfigError(f"cannot read checkpoint {path}: truncated, corrupt, or not a tensors-only torch file "
                          f"({type(e).__name__}){other_checkpoint(path)}") from None
    if not isinstance(ckpt, dict) or "model" not in ckpt or "model_args" not in ckpt:
        raise ConfigError(f"{path} is not a glassgpt checkpoint (no model or model_args)")
    return ckpt


def names_code(e):
    """For torch.load(weights_only=True) refusing a pickle that names a function or class, those few words
    (what it names, that nothing ran); else ""."""
    named = re.search(r"GLOBAL ([\w.]+)", str(e)) if isinstance(e, pickle.UnpicklingError) else None
    return f"it names {named.group(1)}, which tensors and plain values never do (nothing in it was run)" if named else ""


def checkpoint_summary(iter_num, best_val_loss):
    """
    "iter N, best val loss X": what a checkpoint holds, for the lines that say so (sample.py, lens.py,
    train.py's run moved aside, and its resume with nothing to train). A run saved before its first eval
    after the start still holds inf (the eval at the start scored weights it no longer has): "no val loss for
    these weights yet".
    """
    if best_val_loss is None:
        return f"iter {iter_num}"
    loss = float(best_val_loss)  # nanoGPT saves a tensor
    held = f"best val loss {loss:.4f}" if math.isfinite(loss) else "no val loss for these weights yet"
    return f"iter {iter_num}, {held}"


def earlier_runs(out_dir):
    """The runs a new run moved aside into out_dir/previous/<when>-iter<N>/ (train.py), oldest first."""
    previous = os.path.join(out_dir or ".", "previous")
    names = sorted(os.listdir(previous)) if os.path.isdir(previous) else []
    return [os.path.join(previous, n) for n in names if holds_checkpoint(os.path.join(previous, n))]


def holds_checkpoint(folder):
    """True if folder holds a training run's checkpoint (train.py's ckpt.pt or best.pt)."""
    return any(os.path.isfile(os.path.join(folder, name)) for name in ("ckpt.pt", "best.pt"))


OLD_TOP_LEVEL = ("wte.", "wpe.", "h.", "ln_f.")  # glassgpt before the transformer container


def current_keys(state):
    """
    A model state dict with today's key names: torch.compile's "_orig_mod." prefix dropped (nanoGPT
    saves it from a compiled model), and glassgpt's first layout (wte.weight, h.0.attn...) moved
    under transformer., as nanoGPT and Hugging Face name them. The one place old names are mapped.
    """
    out = {}
    for k, v in state.items():
        k = k.removeprefix("_orig_mod.")
        out["transformer." + k if k.startswith(OLD_TOP_LEVEL) else k] = v
    return out


def is_nanogpt(ckpt):
    """True for a checkpoint nanoGPT's train.py wrote: its model_args have no norm (glassgpt's always do)."""
    return "norm" not in ckpt["model_args"]


def current_model_args(ckpt):
    """
    The checkpoint's model_args with today's fields. nanoGPT's (block_size, vocab_size, n_layer, n_head,
    n_embd, bias, dropout) mean learned positions, LayerNorm, a tied head (GPTConfig's defaults) and the
    exact erf GELU of its nn.GELU(); glassgpt's from before the activation switch, GPT-2's tanh GELU;
    and from before sinusoidal_scale, a table of amplitude 1.
    """
    args = dict(ckpt["model_args"])
    args.setdefault("activation", "gelu" if is_nanogpt(ckpt) else "gelu_tanh")
    args.setdefault("sinusoidal_scale", 1.0)
    return args


def model_from_checkpoint(ckpt, **overrides):
    """
    The GPT a checkpoint holds, weights loaded, on the CPU; overrides change config fields (dropout). A
    model key this model.py lacks (a fork's switch, since backed out) is a ValueError: the model it named
    is not the one this code would build, however well the weights fit.
    """
    args = current_model_args(ckpt)
    unknown = sorted(set(args) - {f.name for f in fields(GPTConfig)})
    if unknown:
        raise ValueError(f"it was saved with {', '.join(f'{k}={args[k]!r}' for k in unknown)}, a model key this "
                         "model.py does not have: put the switch back in model.py to use it")
    model = GPT(GPTConfig.from_dict({**args, **overrides}))
    load_weights(model, current_keys(ckpt["model"]))
    return model


def load_weights(model, sd):
    """
    model.load_state_dict(sd), or a one-line ValueError naming the first weight that does not fit (a
    model.py changed since the save, say): torch's own text puts the names on lines an error cuts off.
    """
    built = model.state_dict()
    resized = [f"{k}: saved {tuple(sd[k].shape)}, model.py builds {tuple(v.shape)}" for k, v in built.items()
               if k in sd and sd[k].shape != v.shape]
    missing = [f"{k}: model.py builds it, none saved" for k in built if k not in sd]
    unexpected = [f"{k}: saved, model.py builds none" for k in sd if k not in built]
    if resized or missing or unexpected:
        first = [group[0] for group in (resized, missing, unexpected) if group]
        more = len(resized) + len(missing) + len(unexpected) - len(first)
        raise ValueError("; ".join(first) + (f" (and {more} more that do not fit)" if more else ""))
    model.load_state_dict(sd)


# A Hugging Face folder export.py wrote for a rope + RMSNorm model (transformers' Arcee), read back
# from config.json and model.safetensors alone: no transformers needed, nothing unpickled.
ARCEE_NAMES = {"ln_1": "input_layernorm", "ln_2": "post_attention_layernorm", "attn.c_proj": "self_attn.o_proj",
               "mlp.c_fc": "mlp.up_proj", "mlp.c_proj": "mlp.down_proj"}  # per block; c_attn is q, k, v stacked
ARCEE_ACTIVATIONS = {"gelu_pytorch_tanh": "gelu_tanh", "gelu_new": "gelu_tanh", "gelu": "gelu"}


def is_export(folder):
    """True for a Hugging Face folder as export.py writes it: config.json, the weights and glassgpt's meta.json."""
    has = lambda name: os.path.isfile(os.path.join(folder, name))  # noqa: E731
    return has("config.json") and has("meta.json") and (has("model.safetensors") or has("model.safetensors.index.json"))


def folder_config(folder):
    """A Hugging Face folder's config.json as a dict; {} if it has none."""
    path = os.path.join(folder, "config.json")
    if not os.path.isfile(path):
        return {}
    try:
        with open(path, encoding="utf-8") as f:
            config = json.load(f)
    except (OSError, ValueError) as e:  # named here: the JSON error alone does not say which file it read
        raise ValueError(f"cannot read {path}: {getattr(e, 'strerror', None) or e}") from None
    if not isinstance(config, dict):
        raise ValueError(f"{path} is not a JSON object")
    return config


def check_init_from(name, modes):
    """
    --init_from checked before anything loads: one of modes ("resume", ...), a GPT-2 size, or a folder
    with a Hugging Face model's config.json. Else a one-line ConfigError saying what is missing where.
    """
    if name in modes + PRETRAINED:
        return
    want = "a Hugging Face model folder (config.json and model.safetensors, as export.py writes)"
    if not os.path.isdir(name):
        base, parent = os.path.basename(os.path.normpath(name)), os.path.dirname(os.path.normpath(name))
        moved = [os.path.join(d, base) for d in earlier_runs(parent) if os.path.isdir(os.path.join(d, base))]
        if moved:  # out_dir/hf, moved with its run by a new run into out_dir (train.py)
            raise ConfigError(f"init_from folder {name} does not exist: an earlier run's export there was moved "
                              f"aside to {moved[-1]}: pass --init_from={moved[-1]}")
        what = "is a file, not a folder" if os.path.exists(name) else "does not exist"
        raise ConfigError(f"init_from folder {name} {what}; init_from takes {', '.join(modes + PRETRAINED)}, "
                          f"or {want}")
    if not os.path.isfile(os.path.join(name, "config.json")):
        run = f"; it holds a training run, which --init_from=resume --out_dir={name} reads" \
            if holds_checkpoint(name) else ""
        raise ConfigError(f"init_from folder {name} has no config.json: expected {want}{run}")


def model_from_pretrained(name_or_path, dropout=0.0):
    """
    The GPT that --init_from names: GPT-2 from the hub or a GPT-2 folder (model_from_gpt2, through
    transformers), or an Arcee folder as export.py writes it (read here). Other folders, and any folder that
    cannot be read: a ValueError (ImportError without transformers, OSError without the weights or network).
    """
    kind = folder_config(name_or_path).get("model_type") if os.path.isdir(name_or_path) else "gpt2"
    if kind not in ("gpt2", "arcee", None):  # None: no config.json, model_from_gpt2 says what is missing
        raise ValueError(f"{name_or_path} holds a {kind!r} model: glassgpt reads back GPT-2 and Arcee folders "
                         "(what export.py writes)")
    try:
        return (model_from_arcee if kind == "arcee" else model_from_gpt2)(name_or_path, dropout)
    except (ImportError, OSError, ValueError):  # said well already (a ConfigError is a ValueError)
        raise
    except Exception as e:  # whatever else transformers or safetensors raise on a folder they cannot read
        raise ValueError(f"{type(e).__name__}: {str(e).splitlines()[0][:200]}") from None


def model_from_gpt2(name_or_path, dropout=0.0):
    """
    GPT-2 weights from Hugging Face (GPT.from_pretrained): a hub name (gpt2, gpt2-medium, gpt2-large,
    gpt2-xl), read from the local Hugging Face cache if it is there, else downloaded; or a local folder
    written by save_pretrained. Needs `transformers`, only here.
    """
    if name_or_path not in PRETRAINED and not os.path.isdir(name_or_path):
        raise ValueError(f"{name_or_path!r} is neither one of {', '.join(PRETRAINED)} nor a model folder")
    if importlib.util.find_spec("transformers") is None:
        raise ImportError("reading GPT-2 weights needs the transformers package: pip install transformers")
    cached = name_or_path in PRETRAINED and hub_cached(name_or_path)  # before transformers' slow import
    quiet_transformers()
    from transformers import GPT2LMHeadModel
    if os.path.isdir(name_or_path):  # another architecture would load as GPT-2 with its weights left random
        kind = GPT2LMHeadModel.config_class.get_config_dict(name_or_path)[0].get("model_type")
        if kind != "gpt2":
            raise ValueError(f"{name_or_path} holds a {kind!r} model, not GPT-2 (checkpoint.model_from_pretrained "
                             "reads Arcee folders too)")
    try:
        hf = GPT2LMHeadModel.from_pretrained(name_or_path, local_files_only=cached)
    except pickle.UnpicklingError as e:  # a pytorch_model.bin that is more than tensors: refused, never run
        raise ValueError(f"refused its pytorch_model.bin: "
                         f"{names_code(e) or 'truncated, corrupt, or not a tensors-only torch file'}") from None
    c = hf.config
    # GPT-2's tanh GELU under its two Hugging Face names, or the exact one (a nanoGPT model exported)
    activation = {"gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh", "gelu": "gelu"}.get(c.activation_function)
    if activation is None or c.layer_norm_epsilon != 1e-5:
        raise ValueError(f"{name_or_path}: activation {c.activation_function!r} or layer_norm_epsilon "
                         f"{c.layer_norm_epsilon} is not GPT-2's")
    sd_hf = {k: v for k, v in hf.state_dict().items()  # the same key names as ours
             if not k.endswith((".attn.bias", ".attn.masked_bias"))}  # causal-mask buffers, not weights
    # GPT-2's format always has biases: export.py writes zeros for a model trained without them. All
    # zero computes exactly what no bias does, so read it back as that model (its size, its fine-tune
    # config); one non-zero bias (OpenAI's GPT-2) keeps them all.
    bias = any(v.any().item() for k, v in sd_hf.items() if k.endswith(".bias"))
    config = GPTConfig(block_size=c.n_positions, vocab_size=c.vocab_size, n_layer=c.n_layer,
                       n_head=c.n_head, n_embd=c.n_embd, dropout=dropout, bias=bias,
                       activation=activation, tie_weights=c.tie_word_embeddings)
    model = GPT(config)
    sd = model.state_dict()
    missing = set(sd) - set(sd_hf)
    if missing:
        raise ValueError(f"{name_or_path}: no weights for {sorted(missing)[:5]}")
    # HF's GPT-2 keeps OpenAI's Conv1D, a Linear stored as (in, out): transpose to (out, in)
    conv1d = ("attn.c_attn.weight", "attn.c_proj.weight", "mlp.c_fc.weight", "mlp.c_proj.weight")
    with torch.no_grad():
        for k in sd:
            w = sd_hf[k].t() if k.endswith(conv1d) else sd_hf[k]
            if w.shape != sd[k].shape:
                raise ValueError(f"{name_or_path}: {k} has shape {tuple(w.shape)}, expected {tuple(sd[k].shape)}")
            sd[k].copy_(w)
    return model


def quiet_transformers():
    """
    Import transformers with its progress bars ("Loading weights: 100%|...") and notices off: our own
    lines say what was loaded or written, and an error stays one line. Every tool that imports it calls this.
    """
    import transformers
    transformers.utils.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    return transformers


def hub_cached(name):
    """
    True if the local Hugging Face cache holds name's config and weights. If not, check in a few
    seconds that the hub answers, so that no network is one clear OSError at once (Hugging Face's
    client would retry for ~25 s, printing each failure).
    """
    from huggingface_hub import constants, try_to_load_from_cache
    found = lambda f: isinstance(try_to_load_from_cache(name, f), str)  # noqa: E731
    if found("config.json") and (found("model.safetensors") or found("pytorch_model.bin")):
        return True
    how = ("with no network, pass a local copy: --init_from=FOLDER (its config.json and model.safetensors, "
           "as transformers' save_pretrained writes them)")
    if constants.HF_HUB_OFFLINE:
        raise OSError(f"{name} is not in the Hugging Face cache and HF_HUB_OFFLINE is set; {how}")
    try:
        url = f"{constants.ENDPOINT}/{name}/resolve/main/config.json"
        urllib.request.urlopen(urllib.request.Request(url, method="HEAD"), timeout=5).close()
    except urllib.error.HTTPError:
        pass  # the hub answered: its client takes it from here
    except OSError as e:  # no route, no DNS, refused, timed out
        raise OSError(f"{name} is not in the Hugging Face cache and {constants.ENDPOINT} is not reachable "
                      f"({getattr(e, 'reason', None) or e}); {how}") from None
    return False


def arcee_gpt_config(c, dropout=0.0):
    """The GPTConfig computing exactly what an Arcee config.json (a dict) does; else a ValueError naming the key."""
    sizes = ("hidden_size", "num_attention_heads", "num_hidden_layers", "vocab_size", "max_position_embeddings")
    if not all(isinstance(c.get(k), int) and c[k] > 0 for k in sizes):
        raise ValueError(f"config.json needs positive integers {', '.join(sizes)}")
    n_embd, n_head = c["hidden_size"], c["num_attention_heads"]
    rope = c.get("rope_parameters") or c.get("rope_scaling") or {}  # transformers 5's name, and 4.x's
    rope_type = rope.get("rope_type", rope.get("type", "default"))
    theta = rope.get("rope_theta", c.get("rope_theta", 10000.0))
    partial = rope.get("partial_rotary_factor", c.get("partial_rotary_factor", 1.0))
    bias = c.get("attention_bias", False)
    checks = [  # (key, its value, whether glassgpt computes it exactly, what glassgpt computes)
        ("hidden_act", c.get("hidden_act"), c.get("hidden_act") in ARCEE_ACTIVATIONS, " or ".join(ARCEE_ACTIVATIONS)),
        ("intermediate_size", c.get("intermediate_size"), c.get("intermediate_size") == 4 * n_embd, "4 x hidden_size"),
        ("num_key_value_heads", c.get("num_key_value_heads"), c.get("num_key_value_heads", n_head) == n_head,
         "one key and value per head (num_key_value_heads = num_attention_heads)"),
        ("head_dim", c.get("head_dim"), c.get("head_dim") in (None, n_embd // n_head) and n_embd % n_head == 0,
         "hidden_size / num_attention_heads"),
        ("mlp_bias", c.get("mlp_bias", False), c.get("mlp_bias", False) == bias, "one bias switch (attention_bias)"),
        ("rms_norm_eps", c.get("rms_norm_eps"), c.get("rms_norm_eps") == 1e-5, "1e-05"),
        ("rope_type", rope_type, rope_type == "default", "default rotary positions, unscaled"),
        ("rope_theta", theta, theta == 10000.0, "10000.0"),
        ("partial_rotary_factor", partial, partial == 1.0, "1.0 (every dimension rotated)"),
    ]
    for key, value, exact, ours in checks:
        if not exact:
            raise ValueError(f"{key}={value!r}, but glassgpt computes only {ours}")
    return GPTConfig(block_size=c["max_position_embeddings"], vocab_size=c["vocab_size"],
                     n_layer=c["num_hidden_layers"], n_head=n_head, n_embd=n_embd, dropout=dropout,
                     bias=bool(bias), norm="rmsnorm", position="rope", activation=ARCEE_ACTIVATIONS[c["hidden_act"]],
                     tie_weights=bool(c.get("tie_word_embeddings", False)))  # Arcee's default: untied


def read_safetensors(folder):
    """Every tensor in a folder's model.safetensors (or the shards its index names), in float32."""
    try:
        from safetensors.torch import load_file
    except ImportError:
        raise ImportError("reading an Arcee folder needs the safetensors package: pip install safetensors") from None
    index = os.path.join(folder, "model.safetensors.index.json")
    if os.path.isfile(index):
        with open(index, encoding="utf-8") as f:
            weight_map = json.load(f)
        if not isinstance(weight_map, dict) or not isinstance(weight_map.get("weight_map"), dict):
            raise ValueError(f"{index} has no weight_map")
        files = sorted(set(map(str, weight_map["weight_map"].values())))
    else:
        files = ["model.safetensors"]
    weights = {}
    for name in files:
        path = os.path.join(folder, name)
        if not os.path.isfile(path):
            raise ValueError(f"no {path} (glassgpt reads an Arcee folder's weights from safetensors)")
        try:
            weights.update(load_file(path))
        except Exception as e:  # safetensors' own error for a truncated or foreign file
            raise ValueError(f"cannot read {path}: {type(e).__name__}: {str(e).splitlines()[0][:200]}") from None
    return {k: v.float() for k, v in weights.items()}


def model_from_arcee(folder, dropout=0.0):
    """The GPT an Arcee folder holds: q, k and v stacked into c_attn, every other weight renamed."""
    config = arcee_gpt_config(folder_config(folder), dropout)
    w = read_safetensors(folder)
    take = lambda name: w.pop(name, None)  # noqa: E731  (what is left over at the end has no place here)
    sd = {"transformer.wte.weight": take("model.embed_tokens.weight"),
          "transformer.ln_f.weight": take("model.norm.weight"), "lm_head.weight": take("lm_head.weight")}
    for i in range(config.n_layer):
        ours, theirs = f"transformer.h.{i}.", f"model.layers.{i}."
        for kind in ("weight", "bias") if config.bias else ("weight",):
            parts = [take(f"{theirs}self_attn.{p}_proj.{kind}") for p in "qkv"]
            sd[f"{ours}attn.c_attn.{kind}"] = None if None in parts else torch.cat(parts)
            for a, b in ARCEE_NAMES.items():
                if not (kind == "bias" and a.startswith("ln_")):  # RMSNorm has no bias
                    sd[f"{ours}{a}.{kind}"] = take(f"{theirs}{b}.{kind}")
    if config.tie_weights:
        sd["lm_head.weight"] = sd["transformer.wte.weight"]  # one matrix, as transformers ties it
    missing = [k for k, v in sd.items() if v is None]
    if missing or w:
        raise ValueError(f"{folder}: weights do not match its config.json (missing {missing[:3]}, "
                         f"unexpected {sorted(w)[:3]})")
    model = GPT(config)
    try:
        load_weights(model, sd)
    except ValueError as e:  # a shape that disagrees with config.json
        raise ValueError(f"{folder}: {e}") from None
    return model
