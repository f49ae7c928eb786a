"""
Checkpoints: written atomically, read without unpickling code.

A checkpoint is a dict of tensors and plain Python values (see train.py for its keys), so that
torch.load(..., weights_only=True) can read it: a file someone hands you cannot run code.
"""

import os
import warnings

import torch

from configurator import ConfigError
from model import GPT, GPTConfig


def save_checkpoint(obj, path):
    """Write to a temporary file beside path, then rename over it: a crash mid-save leaves the old file."""
    tmp = f"{path}.tmp.{os.getpid()}"
    try:
        with open(tmp, "wb") as f:
            torch.save(obj, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)  # atomic on POSIX and Windows
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


def load_checkpoint(path, map_location="cpu", mmap=False):
    """
    The checkpoint dict at path; a missing or unreadable file is a one-line ConfigError. mmap=True maps
    the tensors instead of reading them: a glance at model_args or iter_num costs nothing, whatever the size.
    """
    if not os.path.isfile(path):
        folder = os.path.dirname(path)
        ran = any(os.path.isfile(os.path.join(folder, name)) for name in ("ckpt.pt", "best.pt"))
        earlier = [] if ran else earlier_runs(folder)  # out_dir holds no run: say where its last one went
        raise ConfigError(f"no checkpoint at {path}" + (f" (an earlier run there was moved aside to {earlier[-1]}: "
                                                         f"pass --out_dir={earlier[-1]})" if earlier else ""))
    try:
        with warnings.catch_warnings():  # a foreign file can make torch warn first: keep the error one line
            warnings.simplefilter("ignore")
            ckpt = torch.load(path, map_location=map_location, weights_only=True, mmap=mmap)
    except Exception as e:  # torch's own text would suggest weights_only=False: never, for a file from outside
        raise ConfigError(f"cannot read checkpoint {path}: truncated, corrupt, or not a tensors-only torch file "
                          f"({type(e).__name__})") from None
    if not isinstance(ckpt, dict) or "model" not in ckpt or "model_args" not in ckpt:
        raise ConfigError(f"{path} is not a glassgpt checkpoint (no model or model_args)")
    return ckpt


def earlier_runs(out_dir):
    """The runs a new run moved aside into out_dir/previous/<when>-iter<N>/ (train.py), oldest first."""
    previous = os.path.join(out_dir or ".", "previous")
    names = sorted(os.listdir(previous)) if os.path.isdir(previous) else []
    return [os.path.join(previous, n) for n in names
            if any(os.path.isfile(os.path.join(previous, n, f)) for f in ("ckpt.pt", "best.pt"))]


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
    exact erf GELU of its nn.GELU(); glassgpt's from before the activation switch, GPT-2's tanh GELU.
    """
    args = dict(ckpt["model_args"])
    args.setdefault("activation", "gelu" if is_nanogpt(ckpt) else "gelu_tanh")
    return args


def model_from_checkpoint(ckpt, **overrides):
    """The GPT a checkpoint holds, weights loaded, on the CPU; overrides change config fields (dropout)."""
    model = GPT(GPTConfig.from_dict({**current_model_args(ckpt), **overrides}))
    model.load_state_dict(current_keys(ckpt["model"]))
    return model
