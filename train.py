"""
Train a GPT: from scratch, from a checkpoint, or from OpenAI's GPT-2 weights; on a CPU, a GPU, or
many processes with DDP.

    python train.py config/tiny.py                       # char-level Shakespeare in a few minutes on a CPU
    python train.py config/tiny.py --batch_size=32 --compile=false
    python train.py config/tiny.py --init_from=resume    # continue exactly where ckpt.pt stopped
    python train.py config/train_shakespeare_char.py --init_from=resume --out_dir=../nanoGPT/out-shakespeare-char
                                                         # continue a nanoGPT run (not exactly: see README)
    python train.py config/tiny.py --nproc=2 --gradient_accumulation_steps=2 --batch_size=16   # DDP, 2 processes
    torchrun --standalone --nproc_per_node=8 train.py config/train_gpt2.py       # or many machines: torchrun

out_dir receives:
    ckpt.pt     the latest state (at each eval, at the end, on Ctrl-C; with always_save_checkpoint=False
                only at evals that improve val, and on Ctrl-C), enough to resume exactly
    best.pt     the state with the lowest val loss so far, of the evals after the start (so never a fine-tune's
                starting model)
    log.jsonl   one JSON object per line: every log_interval iterations
                {"iter", "loss", "lr", "tokens_per_sec", "elapsed", "grad_norm"} (loss: the iteration's mean over
                all micro-batches and processes; grad_norm: the gradient's global norm before clipping), and
                every eval {"iter", "train_loss", "val_loss", "lr", "elapsed"}
    meta.json   the dataset's tokenizer, so sample.py can decode
    loss.png    the loss curves and the gradient norm (if matplotlib is installed)
    previous/   earlier runs: a new run (not a resume) into an out_dir that holds one first moves its files,
                and the folders export.py wrote there (hf/), to previous/<when it last saved>-iter<N>/, says so,
                and sample.py reads that folder as before; ending having trained nothing (stopped before its
                first iteration, max_iters=0), the new run puts it back. While one run trains into out_dir,
                a second one there is refused (an flock on the folder, where the filesystem has one)

--init_from=resume continues the checkpoint's model: the model keys left unset take its values, and one set
(in a config file or on the command line) to another value is an error. --eval_only=true evaluates a model
(resume or GPT-2's weights) and writes nothing.

Ctrl-C (SIGINT) or SIGTERM is acknowledged at once; an eval or a half-done iteration in progress is cut
short (under DDP, at the next eval batch or micro-batch), and ckpt.pt is saved as it was after the last
complete iteration, within seconds; the exit code is 128 + the signal's number (130, 143), as an
interrupted command's: `train.py && sample.py` stops there. A second Ctrl-C quits without saving. A stop
before the run's first iteration (optimizer step) has nothing to save, and its one line says so: a new run
leaves no ckpt.pt, nor anything the next run would move aside as an earlier run; a resumed one leaves its
ckpt.pt and log as they were. stdout's reader going away (`train.py | head`) is a stop too: ckpt.pt is
saved, one line on stderr says so, and the exit code is 141 (128 + SIGPIPE). A non-finite loss stops the
run with exit code 1 and leaves the last good checkpoint alone. A run that cannot fit in memory is refused
before it starts. Long evals show progress, and a long run estimates its time from its first iterations.
"""

import filecmp
import itertools
import json
import logging
import math
import os
import re
import select
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from contextlib import contextmanager, nullcontext, suppress
from dataclasses import asdict

try:
    import fcntl  # POSIX: out_dir's lock
except ImportError:
    fcntl = None

if __name__ == "__main__":  # before torch loads: a Ctrl-C meanwhile is one line; OpenMP's idle threads sleep
    from configurator import let_idle_threads_sleep, quit_quietly_on_early_ctrl_c
    quit_quietly_on_early_ctrl_c()
    let_idle_threads_sleep()
import numpy as np
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from tqdm import tqdm

from checkpoint import (check_init_from, checkpoint_summary, current_model_args, in_use, is_export, is_nanogpt,
                        load_checkpoint, model_from_checkpoint, model_from_pretrained, save_checkpoint)
from configurator import (FALSE, TRUE, ConfigError, autocast, code_in, config_keys, configure, held_work,
                          keep_freed_memory, new_parents, remove_empty, resolve_device, run, silence_stdout,
                          tell_stderr, unwritable)
from model import GPT, OPTIMIZERS, GPTConfig
from sizing import activation_bytes, memory_bytes, non_embedding_label
from tokenizer import find_meta, read_bin, read_meta, same_tokenizer, tokenizer_label, write_meta

# -----------------------------------------------------------------------------
# default config values: GPT-2 (124M) on OpenWebText, as nanoGPT. config/*.py and --key=value override them.
# I/O
out_dir = "out"  # the run's folder: ckpt.pt, best.pt, log.jsonl, meta.json, loss.png
eval_interval = 2000  # evaluate (and checkpoint) every this many iterations
log_interval = 1  # print and log the training loss every this many iterations
eval_iters = 200  # eval batches per split, always the same windows of the data
eval_only = False  # evaluate once, then exit
always_save_checkpoint = True  # ckpt.pt at every eval; False: only when val loss improves
init_from = "scratch"  # "scratch", "resume" (out_dir/ckpt.pt), "gpt2", "gpt2-medium", ... or a Hugging Face folder
# wandb logging (optional: a warning, not a crash, if wandb is missing)
wandb_log = False  # also log to Weights & Biases
wandb_project = "glassgpt"  # the wandb project
wandb_run_name = "gpt2"  # the wandb run's name
# data
dataset = "openwebtext"  # a folder under data/ (its prepare.py runs first if its bins are missing)
data_dir = ""  # the folder with train.bin, val.bin and meta.json; "" means data/<dataset>
gradient_accumulation_steps = 5 * 8  # micro-batches per iteration, all processes together
batch_size = 12  # sequences per micro-batch
block_size = 1024  # tokens of context per sequence
# model (vocab_size comes from the dataset's meta.json)
n_layer = 12  # transformer blocks
n_head = 12  # attention heads per block; n_embd must be a multiple
n_embd = 768  # width of the residual stream
dropout = 0.0  # 0 for pretraining; try 0.1+ for finetuning
bias = True  # biases in Linears and LayerNorms, as GPT-2
norm = "layernorm"  # "layernorm" | "rmsnorm"
position = "learned"  # "learned" | "sinusoidal" | "rope"
attention = "sdpa"  # "sdpa" | "manual"
activation = "gelu_tanh"  # the MLP's GELU: "gelu_tanh" (GPT-2's tanh approximation) | "gelu" (exact erf, nanoGPT's)
tie_weights = True  # lm_head shares wte's matrix
optimizer = "adamw"  # "adamw" | "muon" (Muon for the blocks' matmul weights, AdamW as below for the rest)
muon_lr = 0.02  # Muon's peak lr; the lr schedule scales it as it scales learning_rate
muon_momentum = 0.95  # Muon's momentum (Nesterov)
muon_weight_decay = 0.0  # Muon's decoupled weight decay on the blocks' matrices
muon_ns_steps = 5  # Newton-Schulz iterations per Muon step (torch's default 5); fewer are cheaper, rougher
# AdamW
learning_rate = 6e-4  # peak learning rate, after warmup
max_iters = 600000  # iterations (optimizer steps) in all; the run ends there
# a time budget: the lr decays over max_seconds of training steps (evals and checkpoints not counted), or over
# lr_decay_iters where that is further along, so the run ends decayed wherever the time runs out: the best
# model for the time on any machine. How many iterations fit depends on the machine: two such runs differ
max_seconds = 0.0  # > 0: end after this many seconds of training steps (or at max_iters, if sooner)
weight_decay = 1e-1  # AdamW decay of the matrices (not biases or norm gains)
beta1 = 0.9  # AdamW's first-moment decay
beta2 = 0.95  # AdamW's second-moment decay
grad_clip = 1.0  # clip the gradient's global norm to this; 0 disables
# learning rate: linear warmup, then cosine decay to min_lr
decay_lr = True  # False: learning_rate throughout
warmup_iters = 2000  # iterations of linear warmup
lr_decay_iters = 600000  # the cosine reaches min_lr here: about max_iters, per Chinchilla
min_lr = 6e-5  # the learning rate after the decay: about learning_rate / 10, per Chinchilla
# system
backend = "auto"  # DDP: "nccl" on CUDA, "gloo" otherwise
device = "auto"  # "auto" (cuda, then mps, then cpu), "cpu", "cuda", "cuda:1", "mps"
dtype = "auto"  # "auto": bfloat16 on GPUs that have it, float16 on older ones; on a CPU with native bf16, bfloat16 from 64 wide; else float32
compile = "auto"  # torch.compile the model: "auto" (on for CUDA), "true", "false"
num_threads = 0  # CPU threads per process; 0: torch's default, or the cores shared out among DDP processes
nproc = 1  # DDP processes to start on this machine (as torchrun --standalone --nproc_per_node); 1: this one alone
seed = 1337  # initial weights, data order and dropout all follow from it
# -----------------------------------------------------------------------------

_REPO = os.path.dirname(os.path.abspath(__file__))
MODEL_KEYS = ("n_layer", "n_head", "n_embd", "block_size", "bias", "norm", "position", "attention", "activation",
              "tie_weights")
RUN_FILES = ("ckpt.pt", "best.pt", "log.jsonl", "loss.png", "meta.json")  # what a run leaves in out_dir


def get_lr(it, learning_rate, warmup_iters, lr_decay_iters, min_lr, time_spent=0.0):
    """
    The learning rate of iteration it: linear warmup to learning_rate, then cosine down to min_lr.
    time_spent (0 -> 1: the share of a time budget used) moves the decay on where it is further along.
    """
    min_lr = min(min_lr, learning_rate)  # a floor above the peak would make the "decay" climb
    if it < warmup_iters:
        return learning_rate * (it + 1) / (warmup_iters + 1)
    if it >= lr_decay_iters or time_spent >= 1.0:  # also when warmup_iters >= lr_decay_iters: no 0/0
        return min_lr
    progress = max((it - warmup_iters) / (lr_decay_iters - warmup_iters), time_spent)  # 0 -> 1
    return min_lr + 0.5 * (1.0 + math.cos(math.pi * progress)) * (learning_rate - min_lr)


def scheduled_lr(c, it, trained):
    """The lr config c's schedule gives iteration it after trained seconds of training steps."""
    if not c["decay_lr"]:
        return c["learning_rate"]
    spent = trained / c["max_seconds"] if c["max_seconds"] > 0 else 0.0
    return get_lr(it, c["learning_rate"], c["warmup_iters"], c["lr_decay_iters"], c["min_lr"], spent)


def undecayed(c, trained=0.0):
    """The note for a run whose max_iters comes before its lr has decayed (config/tiny.py --max_iters=200, its
    decay set over 5000 iterations or 180 s): what its last lr is, with no more time than trained (the seconds
    a resumed run has spent) counted; else None."""
    floor = min(c["min_lr"], c["learning_rate"])
    last = scheduled_lr(c, c["max_iters"] - 1, trained)
    nearly_decayed = last < floor + 0.1 * (c["learning_rate"] - floor)
    if not c["decay_lr"] or c["max_iters"] >= c["lr_decay_iters"] or nearly_decayed:
        return None
    budget = f" (unless its max_seconds={c['max_seconds']:g} budget runs out first)" if c["max_seconds"] > 0 else ""
    return (f"note: max_iters={c['max_iters']} ends the run before lr_decay_iters={c['lr_decay_iters']}: its last lr "
            f"is {last:.2e}, not min_lr {floor:.2e}{budget}; --lr_decay_iters={c['max_iters']} decays it within "
            "the run")


def resolve(config):
    """Check the config's values and turn each "auto" into this machine's choice. Raises ConfigError."""
    c = dict(config)
    for key in ("batch_size", "block_size", "gradient_accumulation_steps", "eval_interval", "eval_iters",
                "log_interval", "nproc", "muon_ns_steps"):
        if c[key] < 1:
            raise ConfigError(f"{key} must be at least 1, got {c[key]}")
    for key in ("max_iters", "max_seconds", "num_threads", "warmup_iters", "lr_decay_iters", "learning_rate",
                "min_lr", "muon_lr", "weight_decay", "muon_weight_decay", "grad_clip"):
        if not c[key] >= 0:  # not "< 0": nan fails this too
            raise ConfigError(f"{key} must not be negative, got {c[key]}")
    for key in ("beta1", "beta2", "muon_momentum"):  # decay rates: 1 would never forget
        if not 0 <= c[key] < 1:
            raise ConfigError(f"{key} must be in [0, 1), got {c[key]}")
    if c["optimizer"] == "muon" and not hasattr(torch.optim, "Muon"):  # torch.optim.Muon came in torch 2.9
        raise ConfigError(f"optimizer=muon needs torch >= 2.9 (torch.optim.Muon); this is torch {torch.__version__}: "
                          f"pip install -U 'torch>=2.9', or --optimizer=adamw")
    check_init_from(c["init_from"], ("scratch", "resume"))
    if c["optimizer"] not in OPTIMIZERS:
        raise ConfigError(f"optimizer must be one of {', '.join(OPTIMIZERS)}, got {c['optimizer']!r}")
    if c["eval_only"] and c["init_from"] == "scratch":
        raise ConfigError("eval_only evaluates a trained model: add --init_from=resume (out_dir's ckpt.pt) "
                          "or --init_from=gpt2")
    world_size = int(os.environ.get("WORLD_SIZE", c["nproc"]))  # set by torchrun: checked before the processes connect
    if c["gradient_accumulation_steps"] % world_size:
        steps = c["gradient_accumulation_steps"]
        raise ConfigError(f"gradient_accumulation_steps={steps} must be divisible by the number of processes "
                          f"({world_size}): e.g. --gradient_accumulation_steps={-(-steps // world_size) * world_size}, "
                          "with batch_size lowered to keep the tokens per iteration")
    c["data_dir"] = c["data_dir"] or os.path.join(_REPO, "data", c["dataset"])

    c["device"], kind, c["dtype"] = resolve_device(c["device"], c["dtype"], c["n_embd"])
    if kind == "cuda" and "LOCAL_RANK" in os.environ:  # DDP: one GPU per process
        c["device"] = f"cuda:{os.environ['LOCAL_RANK']}"
    choice = str(c["compile"]).lower()
    if choice not in ("auto",) + TRUE + FALSE:
        raise ConfigError(f"compile must be auto, true or false; got {c['compile']!r}")
    # compiling pays off at once on GPUs; on a CPU its ~15-20% faster step repays the 20-70 s of
    # compiling only on runs longer than a few minutes (docs/cpu.md)
    c["compile"] = kind == "cuda" if choice == "auto" else choice in TRUE
    if c["backend"] == "auto":
        c["backend"] = "nccl" if kind == "cuda" else "gloo"
    if c["backend"] not in ("gloo", "nccl", "mpi", "ucc") or (c["backend"] == "nccl" and kind != "cuda"):
        raise ConfigError(f"backend must be auto, gloo or nccl (nccl on CUDA only), or mpi or ucc where torch "
                          f"has them; got {c['backend']!r} on {kind}")
    return c


def needs_prepare(data_dir):
    """True if data_dir lacks its train.bin, val.bin or meta (ours, or nanoGPT's meta.pkl) but has a
    prepare.py to write them."""
    have = [os.path.exists(os.path.join(data_dir, n)) for n in ("train.bin", "val.bin")]
    have.append(any(os.path.exists(os.path.join(data_dir, n)) for n in ("meta.json", "meta.pkl")))
    return not all(have) and os.path.isfile(os.path.join(data_dir, "prepare.py"))


def ensure_data(data_dir, master, ddp):
    """If data_dir lacks its bins and has a prepare.py, run it once (rank 0; the others wait)."""
    if not needs_prepare(data_dir):
        return
    prepare = os.path.join(data_dir, "prepare.py")
    rc = [0]
    if master:
        print(f"{data_dir} has no train.bin/val.bin/meta.json yet: running its prepare.py", flush=True)
        # told so, a prepare.py can refuse what no one should start unasked (OpenWebText's 55 GB)
        rc[0] = subprocess.run([sys.executable, prepare], cwd=data_dir,
                               env=dict(os.environ, GLASSGPT_PREPARE_FROM_TRAIN="1")).returncode
    if ddp:
        dist.broadcast_object_list(rc, src=0)
    if rc[0] == 2:  # bad input, which prepare.py has said in its own one line (as every script here does)
        raise SystemExit(2)
    if rc[0] != 0:
        raise ConfigError(f"{prepare} failed (exit code {rc[0]})")


def load_data(data_dir, block_size):
    """The train and val tokens, memory-mapped once, and the dataset's meta dict."""
    if not os.path.isdir(data_dir):
        raise ConfigError(f"no dataset folder {data_dir} (set dataset or data_dir)")
    found = find_meta(data_dir)  # meta.json, or a nanoGPT dataset's meta.pkl
    if not found:
        raise ConfigError(f"no meta.json (or nanoGPT's meta.pkl) in {data_dir}")
    meta = found[0]
    splits = []
    for split in ("train", "val"):
        path = os.path.join(data_dir, f"{split}.bin")
        data = read_bin(path, meta)
        if len(data) < block_size + 1:  # one window is block_size inputs plus the next token
            more = " or a larger --val_fraction preparing it (data/text/prepare.py)" if split == "val" else ""
            raise ConfigError(f"{path} has {len(data)} tokens, too few for block_size={block_size} "
                              f"(needs at least {block_size + 1}): a smaller --block_size{more}")
        splits.append(data)
    return splits[0], splits[1], meta


def get_windows(data, starts, block_size):
    """Inputs x and next-token targets y, each (len(starts), block_size) int64: one gather, no Python loop."""
    w = torch.from_numpy(data[starts[:, None] + np.arange(block_size + 1)].astype(np.int64))
    return w[:, :-1].contiguous(), w[:, 1:].contiguous()


def eval_starts(n_tokens, block_size, count):
    """count window starts spread evenly over a split: the same windows at every eval, no RNG involved."""
    return np.linspace(0, n_tokens - block_size - 1, count).round().astype(np.int64)


def read_log(path):
    """The records of a log.jsonl: JSON objects with an int "iter", as train.py writes each (a missing file, a
    torn last line, or a line of some other file's is passed over)."""
    records = []
    if os.path.isfile(path):
        with open(path, "rb") as f:  # bytes: a line that is not UTF-8 (no log of ours) fails as JSON, not the read
            for line in f:
                try:
                    record = json.loads(line)
                except ValueError:
                    continue
                if isinstance(record, dict) and type(record.get("iter")) is int:  # not True: bool is an int
                    records.append(record)
    return records


def plot_losses(records, path, title=""):
    """
    loss.png: the batch loss of each logged iteration and the eval losses, best.pt's eval marked, under
    title (the run's out_dir), and below them the gradient norm. The y-axis shows the curves from the
    second eval on, or from a quarter of the run if that comes first: the first iterations' loss (~4
    nats for characters) would squeeze the part that matters into a sliver. False if matplotlib is missing.
    """
    try:
        import matplotlib
        matplotlib.use("Agg")  # files only, no display needed
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    steps = [r for r in records if r.get("loss") is not None]
    evals = [r for r in records if r.get("val_loss") is not None and r.get("train_loss") is not None]
    norms = [r for r in steps if r.get("grad_norm") is not None]  # a log from before grad_norm has none
    fig, axes = plt.subplots(2 if norms else 1, 1, figsize=(8, 7.5 if norms else 4.5), sharex=True, squeeze=False,
                             gridspec_kw={"height_ratios": [2, 1] if norms else [1]})
    ax = axes[0][0]
    ax.plot([r["iter"] for r in steps], [r["loss"] for r in steps], lw=1, alpha=0.5, label="train (batch)")
    ax.plot([r["iter"] for r in evals], [r["train_loss"] for r in evals], "o-", ms=3, label="train (eval)")
    ax.plot([r["iter"] for r in evals], [r["val_loss"] for r in evals], "o-", ms=3, label="val (eval)")
    saved = [r for r in evals if r["iter"] > 0]  # an eval at iteration 0 is never saved
    if saved:
        best = min(saved, key=lambda r: r["val_loss"])
        ax.plot(best["iter"], best["val_loss"], "*", ms=14, color="crimson", zorder=3,
                label=f"best.pt: iter {best['iter']}, val {best['val_loss']:.4f}")
    points = [(r["iter"], r["loss"]) for r in steps] + [(r["iter"], r[k]) for r in evals for k in ("train_loss", "val_loss")]
    if len(evals) >= 2 and points:
        # a run with few evals (a 10 s run evals at 0 and at its end) would show only its last point
        cut = min(evals[1]["iter"], max(i for i, _ in points) // 4)
        low, high = min(v for _, v in points), max(v for i, v in points if i >= cut)
        pad = 0.05 * (high - low) or 0.05
        ax.set_ylim(low - pad, high + pad)
        first = evals[0]
        if first["val_loss"] > high + pad:  # said in the legend, which a note in a corner could end up under
            ax.plot([], [], " ", label=f"iter {first['iter']}: val {first['val_loss']:.2f}, above the plot")
    ax.set_title(title)
    ax.set_ylabel("cross-entropy (nats per token)")
    ax.grid(alpha=0.3)
    ax.legend()
    if norms:
        axes[1][0].plot([r["iter"] for r in norms], [r["grad_norm"] for r in norms], lw=1)
        axes[1][0].set_yscale("log")
        axes[1][0].set_ylabel("gradient norm\n(before clipping)")
        axes[1][0].grid(alpha=0.3)
    axes[-1][0].set_xlabel("iteration")
    fig.savefig(path, dpi=120, bbox_inches="tight")
    plt.close(fig)
    return True


def rng_state(device_type):
    state = {"torch": torch.get_rng_state()}
    if device_type == "cuda":
        state["cuda"] = torch.cuda.get_rng_state()
    return state


def set_rng_state(state, device_type):
    torch.set_rng_state(state["torch"].cpu())
    if device_type == "cuda" and "cuda" in state:
        torch.cuda.set_rng_state(state["cuda"].cpu())


def compiled_or_eager(model, x, y, ctx, device_type):
    """
    torch.compile(model), tried now on one real batch (a training forward and backward, an eval
    forward) so that a failure falls back to the eager model with a warning before training starts.
    The random state and gradients are restored: the trial leaves no trace in the run.
    """
    state = rng_state(device_type)
    if device_type == "cpu":  # a CUDA build of torch on a CPU-only machine warns 'No CUDA runtime is found' as it compiles
        logging.getLogger("torch.utils.cpp_extension").setLevel(logging.ERROR)
    try:
        compiled = torch.compile(model)
        with ctx:
            _, loss = compiled(x, y)
        loss.backward()
        model.eval()
        with torch.no_grad(), ctx:
            compiled(x, y)
        return compiled
    except Exception as e:
        first_line = (str(e).strip().splitlines() or [""])[0][:200]
        print(f"warning: torch.compile failed ({type(e).__name__}: {first_line}); training without it", file=sys.stderr)
        return model
    finally:
        model.train()
        model.zero_grad(set_to_none=True)
        set_rng_state(state, device_type)


def check_model_keys(config, given, model_args, source, free=(), other="", more=()):
    """
    A model key set in a config file or on the command line (given) must match the model being loaded:
    a checkpoint trained with 4 layers does not become 6 because --n_layer=6 was asked for. One line
    names every clash (and the caller's more), and how to use the model's values (other: the alternative,
    if any); keys in free may differ (dropout, say, changes no weights).
    """
    keys = [k for k in MODEL_KEYS if k in given and k not in free and k in model_args and config[k] != model_args[k]]
    if not keys:
        if more:
            raise ConfigError("; ".join(more))
        return
    clashes = "; ".join([*more, *(f"{k}={config[k]} ({given[k]}) but {source} has {k}={model_args[k]}" for k in keys)])
    # a key set in a config file cannot be left out without editing the file: the command line overrides it
    in_files = [f"--{k}={model_args[k]}" for k in keys if given[k] != "on the command line"]
    hint = "leave the key out to use the model's value" if not in_files else \
        f"to use the model's, add {' '.join(in_files)} to the command line (it overrides the file)"
    on_line = [f"--{k}" for k in keys if given[k] == "on the command line"]
    if in_files and on_line:
        hint += f" and drop {' '.join(on_line)} from it"
    if other:
        hint += f", or {other}"
    raise ConfigError(f"{clashes} ({hint})")


def checkpoint_state(raw_model, optimizer, scaler, config, iter_num, best_val_loss, trained, rng, sampler_state,
                     stopped_by=None):
    """What ckpt.pt holds: tensors and plain values only (weights_only loads it), and all a resume needs to
    continue exactly: the optimizer's state, the random and data-sampler state, the time trained; and, where
    a stop saved it, what stopped it (so the next run into out_dir can say that it was stopped short)."""
    state = {
        "model": raw_model.state_dict(),
        "optimizer": optimizer.state_dict(),
        "scaler": scaler.state_dict() if scaler.is_enabled() else None,
        "model_args": asdict(raw_model.config),
        "config": config,
        "iter_num": iter_num,
        "best_val_loss": best_val_loss,
        "trained_seconds": trained,
        "rng": rng,
        "sampler": {"generator": sampler_state},
    }
    if stopped_by:
        state["stopped_by"] = stopped_by
    return state


def check_same_tokenizer(folder, data_dir, meta, key):
    """The dataset's tokenizer must be the one the model in folder was trained with, if folder has its
    meta.json: the same ids must mean the same characters or tokens."""
    if os.path.isfile(os.path.join(folder, "meta.json")):
        was = read_meta(folder)
        if not same_tokenizer(was, meta):
            source = (find_meta(data_dir) or (None, data_dir))[1]  # meta.json, or nanoGPT's meta.pkl
            raise ConfigError(f"{key}: {source} ({tokenizer_label(meta, was)}) is not the tokenizer this model was "
                              f"trained with ({folder}/meta.json: {tokenizer_label(was)})")


def adopt_checkpoint_model(config, given):
    """init_from=resume: the config with ckpt.pt's model keys, checked against those set explicitly."""
    path = os.path.join(config["out_dir"], "ckpt.pt")
    if not os.path.exists(path) and in_use(config["out_dir"]):  # a run there that has yet to save: say that
        raise out_dir_busy(config["out_dir"], " (it has saved no ckpt.pt yet)")
    ckpt = load_checkpoint(path, mmap=True)  # mapped, not read: cheap at any size
    trained = ckpt.get("config") or {}
    key = "data_dir" if trained.get("data_dir") else "dataset"  # where its data came from
    if trained.get(key) and trained[key] != config[key] and "dataset" not in given and "data_dir" not in given:
        raise ConfigError(f"{path} trained on {key}={trained[key]}, and this run would read dataset="
                          f"{config['dataset']} (the default): pass the config file it trained with (resume takes "
                          "only the model keys from ckpt.pt; the data, batch and schedule come from the config)")
    model_args = {**asdict(GPTConfig()), **current_model_args(ckpt)}  # nanoGPT's lack norm, position, ...
    check_model_keys(config, given, model_args, path, free=("attention",),  # sdpa or manual: the same weights
                     other="train this config from scratch into another --out_dir")
    return {**config, **{k: model_args[k] for k in MODEL_KEYS if k in model_args and k not in given}}


# the keys that steer training from where a resume picks up: taken from this run's config, not ckpt.pt's
# (max_iters only says where it ends: raising it is how a run trains on; max_seconds paces the lr's decay)
SCHEDULE_KEYS = ("max_seconds", "learning_rate", "min_lr", "warmup_iters", "lr_decay_iters", "decay_lr",
                 "batch_size", "gradient_accumulation_steps", "weight_decay", "beta1", "beta2", "grad_clip", "dropout",
                 "muon_lr", "muon_momentum", "muon_weight_decay", "muon_ns_steps")


def schedule_changes(config, trained):
    """'key=new (was old)' for each schedule key this resume sets otherwise than the run it continues."""
    return [f"{k}={config[k]:g} (was {trained[k]:g})" if isinstance(config[k], float) else
            f"{k}={config[k]} (was {trained[k]})" for k in SCHEDULE_KEYS if k in trained and trained[k] != config[k]]


def available_memory(device_type):
    """Bytes a run may use: a CUDA device's total memory, the RAM Linux has available now; None if unknown."""
    if device_type == "cuda":
        return torch.cuda.mem_get_info()[1]
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def check_fits(model_config, batch_size, device_type, processes=1, optimizer="adamw"):
    """
    Refuse, before anything is allocated, a run that clearly cannot fit: its weights, gradients and
    optimizer state plus a lower bound on one micro-batch's activations (sizing.py's arithmetic) against
    this machine's memory (the processes on one CPU share it).
    """
    state = memory_bytes(model_config, optimizer=optimizer)["train_state"]
    acts = activation_bytes(model_config, batch_size, model_config.block_size)
    need = (state + acts) * (processes if device_type == "cpu" else 1)
    have = available_memory(device_type) if device_type in ("cpu", "cuda") else None
    if have is not None and need > have:
        size = lambda n: f"{n / 2**30:.1f} GiB" if n >= 2**30 else f"{n / 2**20:.1f} MiB"  # a small model's state
        each = f" x {processes} processes" if device_type == "cpu" and processes > 1 else ""
        opt = "Muon and AdamW" if optimizer == "muon" else "AdamW"
        if state * (processes if device_type == "cpu" else 1) > have:  # no batch is small enough: the model is
            raise ConfigError(f"the model alone (n_layer={model_config.n_layer}, n_embd={model_config.n_embd}) "
                              f"needs {size(state)} for weights, gradients and {opt}{each} (sizing.py) but "
                              f"{device_type} has {size(have)} available: a smaller model")
        raise ConfigError(f"block_size={model_config.block_size} x batch_size={batch_size} needs at least "
                          f"{size(need)} ({size(acts)} of activations + {size(state)} of weights, gradients and "
                          f"{opt}{each}; sizing.py) but {device_type} has {size(have)} available: "
                          "lower batch_size or block_size")


def check_out_dir(out_dir):
    """out_dir can be written in (checked before the processes of a DDP run connect: after, only rank 0 would
    know). Raises ConfigError."""
    why = "empty name" if not out_dir else unwritable(out_dir)
    if not why and os.path.isdir(out_dir):
        there = lambda name: os.path.join(out_dir, name)  # noqa: E731
        odd = [n for n in RUN_FILES if os.path.lexists(there(n)) and not os.path.isfile(there(n))]
        other = held_work(out_dir, ("a dataset", "a Hugging Face model"))  # whose meta.json would be the run's
        if not other and not held_work(out_dir, ("a training run",)):  # a run's folder may keep its config.py
            other = code_in(out_dir)
        if odd:  # a folder (or a broken link) where the run writes a file of its own
            why = f"its {odd[0]} is not a file, and a run writes its own {odd[0]} there"
        elif os.path.lexists(there("previous")) and not os.path.isdir(there("previous")):
            why = "its previous is not a folder, and an earlier run there moves into previous/"
        elif other:
            why = f"it holds {other}: a run's files go in a folder of their own"
    if why:
        raise ConfigError(f"cannot use out_dir={out_dir!r}: {why}")


def auto_dtype(config, given, width):
    """The dtype to train a model of this width in: dtype "auto" (the default, not given) follows the width of
    the model built, which a resume or init_from takes from the checkpoint or weights, not the config's n_embd."""
    return config["dtype"] if "dtype" in given else resolve_device(config["device"], "auto", width)[2]


def preflight(config, given):
    """
    What can be checked before the processes connect and before anything big is allocated: the
    checkpoint a resume continues (its model keys become the config's), the data (unless prepare.py
    has yet to write it), and whether the run fits in memory. GPT-2's weights are checked once loaded
    (their shape is known only then).
    """
    if not config["eval_only"]:
        check_out_dir(config["out_dir"])
    if config["init_from"] == "resume":
        config = adopt_checkpoint_model(config, given)
    vocab = 1  # until prepare.py has written the data, the bound below leaves the logits out
    if not needs_prepare(config["data_dir"]):  # the data's errors now, before the processes connect
        vocab = load_data(config["data_dir"], config["block_size"])[2]["vocab_size"]
    if config["init_from"] in ("scratch", "resume"):
        try:
            model_config = GPTConfig(vocab_size=vocab, **{k: config[k] for k in MODEL_KEYS})
        except ValueError as e:
            raise ConfigError(f"cannot build the model ({config['init_from']}): {e}") from None
        check_fits(model_config, config["batch_size"], torch.device(config["device"]).type,
                   int(os.environ.get("LOCAL_WORLD_SIZE", config["nproc"])), config["optimizer"])
    return config


def stopped_short(ckpt):
    """How a stop ended the run that saved ckpt, against its goal (max_seconds of steps, else max_iters), or
    None if no stop saved it."""
    config, stopped, n = ckpt.get("config") or {}, ckpt.get("stopped_by"), ckpt.get("iter_num")
    if not stopped:
        return None
    if config.get("max_seconds", 0) > 0 and isinstance(ckpt.get("trained_seconds"), (int, float)):
        return (f"{stopped} stopped it at iter {n}, {ckpt['trained_seconds']:.0f} s into its "
                f"{config['max_seconds']:g} s of training")
    return f"{stopped} stopped it at iter {n}" + (f" of {config['max_iters']:,}" if "max_iters" in config else "")


def run_summary(out_dir):
    """(iter_num, best val loss, how it was stopped short) of the run in out_dir, from its checkpoint or else
    its log; None where unknown or where the run was not stopped (a stop's save says so in ckpt.pt)."""
    for name in ("ckpt.pt", "best.pt"):
        if os.path.isfile(os.path.join(out_dir, name)):
            try:
                ckpt = load_checkpoint(os.path.join(out_dir, name), mmap=True)  # mapped: cheap at any size
            except ConfigError:  # unreadable: the log may still tell
                continue
            return ckpt.get("iter_num"), ckpt.get("best_val_loss"), name == "ckpt.pt" and stopped_short(ckpt)
    records = read_log(os.path.join(out_dir, "log.jsonl"))
    if not records:  # none, or not a log train.py wrote
        return None, None, None
    return (max(r["iter"] for r in records),
            min((r["val_loss"] for r in records if r.get("val_loss") is not None), default=None), None)


def readable(path):
    try:
        load_checkpoint(path, mmap=True)  # mapped, not read: cheap at any size
        return True
    except ConfigError:
        return False


def keep_previous_run(out_dir):
    """
    A new run into an out_dir that holds an earlier run's checkpoints or log first moves that run's files
    to out_dir/previous/<when it last saved>-iter<N>/: a rename each, cheap at any size, and sample.py
    reads that folder as it read out_dir. Its Hugging Face exports (export.py's hf/, or any folder inside
    out_dir export.py wrote) go with it: left behind, --init_from=out_dir/hf would load the old model.
    Returns a line saying so and the folder it went to, or (None, None) if out_dir held no run.
    """
    path = lambda name: os.path.join(out_dir, name)
    files = [n for n in RUN_FILES if os.path.isfile(path(n))]  # any of them: the run writes each anew
    if not files or (files == ["log.jsonl"] and os.path.getsize(path("log.jsonl")) == 0):
        return None, None
    iter_num, best, stopped = run_summary(out_dir)
    exports = [n for n in sorted(os.listdir(out_dir)) if n != "previous" and is_export(path(n))]
    # when it last saved: a resume that trained nothing rewrites the log and meta.json, never a checkpoint
    saved = [n for n in ("ckpt.pt", "best.pt") if n in files] or files
    stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(max(os.path.getmtime(path(n)) for n in saved)))
    dest = os.path.join(out_dir, "previous", stamp + (f"-iter{iter_num}" if iter_num is not None else ""))
    while os.path.exists(dest):
        dest += "+"
    os.makedirs(dest)
    for name in files + exports:
        os.replace(path(name), os.path.join(dest, name))
    unreadable = [n for n in ("ckpt.pt", "best.pt") if n in files and not readable(os.path.join(dest, n))]
    # a truncated file is still a checkpoint, moved as it is: said so, not "no checkpoint"
    broken = f"{' and '.join(unreadable)} that cannot be read" if unreadable else ""
    has_ckpt = bool({"ckpt.pt", "best.pt"} & set(files))
    if iter_num is not None and has_ckpt:
        held = checkpoint_summary(iter_num, best) + (f"; its {broken}" if broken else "")
    elif iter_num is not None:  # a run quit before its first checkpoint (a second Ctrl-C): its log alone
        held = f"no checkpoint; its log.jsonl reaches {checkpoint_summary(iter_num, best)}"
    else:
        held = broken or "no checkpoint" + ("" if has_ckpt else "; " + ", ".join(
            n + " with no iteration in it" * (n == "log.jsonl") for n in files))
    if exports:
        held += f", exported as {', '.join(n + '/' for n in exports)}"
    # sample.py only where there is a model to sample from (a run stopped before its first checkpoint has a log)
    sample = f" (python sample.py --out_dir={dest})" if {"ckpt.pt", "best.pt"} & set(files) - set(unreadable) else ""
    line = f"{out_dir} held an earlier run ({held}): moved to {dest}{sample}"
    if stopped:  # the same command again after a Ctrl-C, where --init_from=resume was meant
        line += (f"\n{stopped}: to continue that run instead of this new one, stop this one and run the same "
                 f"command with --init_from=resume --out_dir={dest}")
    return line, dest


def put_back_previous_run(out_dir, dest):
    """
    Undo keep_previous_run for a new run stopped before its first iteration: it has nothing of its own to
    keep, so the earlier run comes back into out_dir as if the new one had never started (its files replace
    the new run's empty log.jsonl and meta.json), and a resume finds it there.
    """
    for name in os.listdir(dest):
        os.replace(os.path.join(dest, name), os.path.join(out_dir, name))
    os.rmdir(dest)
    with suppress(OSError):  # previous/ goes too if that run was all it held
        os.rmdir(os.path.dirname(dest))


def open_out_dir(out_dir, data_dir, meta, resume_iter):
    """
    Make out_dir ready for a run: an earlier run there moves aside (unless this one resumes it, from
    resume_iter), meta.json comes from the dataset for sample.py (written from meta where the dataset has
    nanoGPT's meta.pkl instead), and log.jsonl opens with the records a
    resume keeps: those before its iteration, and the eval at it, which the checkpoint's weights (often
    best.pt's too) had when they were saved. Returns the open log, keep_previous_run's line and folder,
    and the iteration of that eval if the log kept one (the resumed run does not log it again).
    """
    claim_out_dir(out_dir)  # held since train() began, unless the folder has gone since
    moved, moved_to = keep_previous_run(out_dir) if resume_iter is None else (None, None)
    meta_out, meta_in = os.path.join(out_dir, "meta.json"), os.path.join(data_dir, "meta.json")
    if not os.path.isfile(meta_in):
        write_meta(out_dir, meta)
    elif not os.path.exists(meta_out) or not os.path.samefile(meta_in, meta_out):
        shutil.copyfile(meta_in, meta_out)
    log_path = os.path.join(out_dir, "log.jsonl")
    kept = [r for r in read_log(log_path) if r["iter"] < resume_iter or (r["iter"] == resume_iter and "val_loss" in r)
            ] if resume_iter is not None else []
    log_file = open(log_path, "w")
    for r in kept:
        log_file.write(json.dumps(r) + "\n")
    log_file.flush()
    return log_file, moved, moved_to, resume_iter if any(r["iter"] == resume_iter for r in kept) else None


OUT_DIR_LOCKS = {}  # folder -> its open descriptor, locked by this process (main lets them go at its end)
OUT_DIR_MADE = []  # (out_dir, the new folders above it) this process made: removed at its end if left empty


def claim_out_dir(out_dir):
    """Make out_dir if it is new, and lock it for this run (lock_out_dir). Raises ConfigError."""
    parents = new_parents(out_dir)
    try:  # preflight's check_out_dir found it writable; a folder on its path may have gone since
        os.makedirs(out_dir)
        OUT_DIR_MADE.append((out_dir, parents))
    except FileExistsError:  # there already, or another run made it just now: the lock decides
        pass
    except OSError as e:
        raise ConfigError(f"cannot use out_dir={out_dir!r}: {e.strerror or e}") from None
    lock_out_dir(out_dir)


def lock_out_dir(out_dir):
    """
    One run at a time writes to out_dir: a second, started while the first trains, would move the first's
    files aside under it, then overwrite what it saves. The lock is on the folder itself (no file to leave
    behind) and goes with the process, however it ends. Where there is no flock (Windows, some network
    filesystems) runs go unlocked, as before.
    """
    folder = os.path.realpath(out_dir)
    if fcntl is None or folder in OUT_DIR_LOCKS:  # held since the run began
        return
    fd = os.open(folder, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise out_dir_busy(out_dir) from None
    except OSError:
        os.close(fd)
        return
    OUT_DIR_LOCKS[folder] = fd


def out_dir_busy(out_dir, more=""):
    """The error for a run into an out_dir whose lock another run holds."""
    return ConfigError(f"another train.py is writing to out_dir={out_dir} now{more}: let it end (or stop it), "
                       "or pass another --out_dir")


def release_out_dirs():
    """At the process's end: an out_dir it made, locked and left empty (bad input, a stop during setup) goes
    while still locked, so no other run is using it; then the locks go. (A run refused by the lock leaves
    the folder it made to the run that holds it.)"""
    for folder, parents in OUT_DIR_MADE:
        if os.path.realpath(folder) in OUT_DIR_LOCKS:
            remove_empty([folder] + parents)
    while OUT_DIR_LOCKS:
        os.close(OUT_DIR_LOCKS.popitem()[1])  # closing the folder's descriptor lets its lock go


def exit_now(code):
    """End the process at once, from any thread, whatever the main thread is doing (os._exit: no finally
    runs), after what the main thread's end would do: an out_dir this run made and left empty goes."""
    release_out_dirs()
    os._exit(code)


def keep_nanogpt_checkpoint(out_dir):
    """
    out_dir's ckpt.pt is nanoGPT's and glassgpt's will replace it: copy it for nanoGPT's tools to
    ckpt_nanogpt.pt, or ckpt_nanogpt.2.pt, ... where an earlier copy holds another of nanoGPT's checkpoints
    (nanoGPT trained on after glassgpt did). Returns the copy's path, which may be an earlier identical one.
    """
    ckpt = os.path.join(out_dir, "ckpt.pt")
    for k in itertools.count(1):
        kept = os.path.join(out_dir, "ckpt_nanogpt.pt" if k == 1 else f"ckpt_nanogpt.{k}.pt")
        if not os.path.exists(kept):
            shutil.copyfile(ckpt, kept + ".tmp")
            os.replace(kept + ".tmp", kept)  # whole or not at all, as every checkpoint here
            return kept
        if filecmp.cmp(ckpt, kept, shallow=False):  # kept by a run that stopped before replacing ckpt.pt
            return kept


def human_time(seconds):
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 90 * 60:
        return f"{seconds / 60:.0f} min"
    if seconds < 48 * 3600:
        return f"{seconds / 3600:.1f} hours"
    return f"{seconds / 86400:.1f} days"


def time_left(iter_num, max_iters, eval_interval, step_time, eval_time):
    """
    (seconds, a line saying so): what the rest of a run costs at the measured speeds, iterations
    iter_num .. max_iters - 1 and the evals still to come (each multiple of eval_interval from iter_num
    on, and the last iteration).
    """
    iters = max(max_iters - iter_num, 0)
    evals = max_iters // eval_interval - (iter_num - 1) // eval_interval + (max_iters % eval_interval != 0)
    total = iters * step_time + evals * eval_time
    return total, (f"{iters:,} iteration{'s' * (iters != 1)} x {step_time:.2f} s + {evals:,} eval{'s' * (evals != 1)} "
                   f"x {human_time(eval_time)}: about {human_time(total)} to go")


class Interrupted(BaseException):
    """A stop cutting short work whose result saving does not need (an eval, a half-done iteration)."""


class Stopper:
    """
    Ctrl-C (SIGINT) and SIGTERM, acknowledged at once. Until the loop starts there is nothing to save and
    a signal exits there and then. Once armed (with what a stop will do, to say so, and whether it saves:
    not before the run's first iteration, nor under eval_only), the first signal is recorded and the loop
    saves and exits: inside an interruptible section (an eval, an iteration up to its optimizer step) the
    signal raises Interrupted at once; elsewhere, and under DDP (whose processes must agree when to stop),
    the loop checks it between eval batches, micro-batches and iterations. A second signal quits without
    saving; the same signal again within ECHO seconds is the same stop, sent twice (GNU timeout signals the
    command, then its process group; a launcher may forward what the process also got). Disarmed (armed =
    None) once all is saved: a signal just exits.

    Python runs a handler only between operations, and one operation can take minutes (attention over
    100,000 tokens). So each signal is also written, in C, to a pipe that a thread watches: whichever of
    the two reads it first decides and says what happens, at once. If the main thread is still busy
    GRACE seconds later, the thread acts for it: inside an interruptible section it saves through the
    section's rescue (the state of the last complete iteration, which such a section leaves untouched)
    and ends the process; a quit it ends at once.
    """
    GRACE, ECHO = 2.0, 0.25

    def __init__(self, master):
        self.master, self.signum, self.armed, self.saves, self.cut = master, None, "", False, False
        self.quit, self.rescue, self.holding = None, None, False  # exit code decided; the section's saver
        self.heard = 0.0  # when the stop was heard
        self.lock, self.save_lock = threading.RLock(), threading.RLock()  # re-entrant: a handler may interrupt its holder
        for name in ("SIGINT", "SIGTERM", "SIGHUP"):  # a hang-up (terminal closed, ssh dropped) saves too
            if hasattr(signal, name):  # Windows has no SIGHUP
                signal.signal(getattr(signal, name), self.handle)
        self.pipe, write = os.pipe()
        os.set_blocking(self.pipe, False)
        os.set_blocking(write, False)
        signal.set_wakeup_fd(write)
        threading.Thread(target=self.watch, daemon=True).start()

    def hear(self):
        """Decide, and say, what each signal not yet heard means. Returns whether a stop was newly recorded."""
        stopped = False
        with self.lock:
            while True:
                try:
                    signums = os.read(self.pipe, 64)
                except BlockingIOError:
                    return stopped
                for signum in signums:
                    if signal.getsignal(signum) != self.handle:  # not ours (--nproc's launcher forwards them)
                        continue
                    name = signal.Signals(signum).name
                    if signum == self.signum and time.monotonic() - self.heard < self.ECHO:
                        continue
                    if self.armed and self.signum is None:
                        self.signum, stopped, self.heard = signum, True, time.monotonic()
                        again = "Ctrl-C" if signum == signal.SIGINT else name  # kill's, timeout's: no Ctrl-C there
                        self.tell(f"{name}: stopping; {self.armed}" +
                                  (f" ({again} again quits without saving)" if self.saves else ""))
                    elif self.quit is None:
                        self.quit = 128 + signum
                        self.tell(f"{name}: " + ("stopped before training began" if self.armed == "" else
                                                 "quitting; everything is saved" if self.armed is None else
                                                 "quitting without saving"))

    def handle(self, signum, frame):
        if self.holding:  # held: heard when the hold ends
            return
        self.hear()
        self.quit_if_saved()
        if self.quit is not None:
            raise SystemExit(self.quit)
        if self.cut and self.signum is not None:
            self.cut = False
            raise Interrupted

    def watch(self):
        while True:
            select.select([self.pipe], [], [])
            stopped = self.hear()
            self.quit_if_saved()
            if self.quit is None and not stopped:
                continue
            # the main thread's turn: it answers within GRACE unless one operation holds it. Meanwhile each
            # signal is heard as it comes (when, tells an echo from a second Ctrl-C, which quits as promised)
            end = time.monotonic() + self.GRACE
            while time.monotonic() < end:
                if select.select([self.pipe], [], [], max(0.0, end - time.monotonic()))[0]:
                    self.hear()
            if self.quit is not None:
                exit_now(self.quit)
            with self.save_lock:
                if self.cut and self.rescue is not None:  # still inside the section: the main thread is not saving
                    self.rescue()
                    exit_now(128 + self.signum)

    def quit_if_saved(self):
        """A quit once all is saved (a second Ctrl-C while loss.png is drawn) ends the process at once: there is
        nothing left to lose, and unwinding torch and matplotlib can take seconds on a busy machine."""
        if self.quit is not None and self.armed is None:
            exit_now(self.quit)

    @contextmanager
    def held(self):
        """Signals wait while the body runs, then are heard as if they came at its end: for steps a stop must
        not come between (a new run moving an earlier one aside, and arming a stop to put it back)."""
        with self.lock:  # the watching thread waits on it too
            self.holding = True
            try:
                yield
            finally:
                self.holding = False
        self.handle(None, None)

    @contextmanager
    def interruptible(self, allowed=True, rescue=None):
        """A section a stop may cut short by raising Interrupted in it (if allowed); rescue() saves what the
        section leaves untouched, should one long operation in it keep the main thread from answering."""
        self.cut, self.rescue = allowed, rescue if allowed else None
        try:
            if allowed and self.signum is not None:  # heard just before the section began
                raise Interrupted
            yield
        finally:
            self.cut, self.rescue = False, None

    def tell(self, message):
        if self.master:  # os.write, not print: the signal may have interrupted a print
            below_the_bar = "\n" if sys.stderr.isatty() else ""
            os.write(sys.stderr.fileno(), f"{below_the_bar}{message}\n".encode())


class Progress:
    """
    Progress through long work on rank 0: a tqdm bar on a terminal (after 2 s, so quick work shows none);
    otherwise (a log file) a line every 10 s.
    """

    def __init__(self, total, what, show, say):
        self.total, self.what, self.say, self.done = total, what, say, 0
        self.t0 = self.last = time.time()
        tty = show and sys.stderr.isatty()
        self.lines = show and not tty
        self.bar = tqdm(total=total, desc=what, unit="batch", leave=False, delay=2, dynamic_ncols=True,
                        disable=not tty)

    def update(self):
        self.done += 1
        self.bar.update(1)
        now = time.time()
        if self.lines and now - self.last >= 10:
            self.last = now
            left = (self.total - self.done) * (now - self.t0) / self.done
            self.say(f"{self.what}: {self.done:,}/{self.total:,} batches in {human_time(now - self.t0)}, "
                     f"about {human_time(left)} left")

    def close(self):
        self.bar.close()


def cpu_cores():
    """The cores this process may run on."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def launch(nproc):
    """
    --nproc=N: DDP on this machine without torchrun. N processes of this same command, each given what
    torchrun --standalone gives its processes (RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT) and
    OMP_NUM_THREADS, its share of the cores. The config was checked here, once, so bad input is one line.
    The processes run in their own session: a Ctrl-C, SIGTERM or hang-up reaches them from here, once
    each. A process that fails ends the others after 10 s (they would wait for it in a collective).
    Returns the exit code of the first process seen to fail (130 after a Ctrl-C that saved, 2 for bad
    input), else 0.
    """
    with socket.socket() as s:  # a free port for the processes to meet on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = dict(os.environ, WORLD_SIZE=str(nproc), LOCAL_WORLD_SIZE=str(nproc), MASTER_ADDR="127.0.0.1",
               MASTER_PORT=str(port), OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS", str(max(1, cpu_cores() // nproc))))
    procs, sent = [], set()

    def forward(signum, frame):
        for p in procs:
            if p.poll() is None:
                sent.add(signal.SIGTERM if signum == signal.SIGHUP else signum)
                p.send_signal(signal.SIGTERM if signum == signal.SIGHUP else signum)

    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, forward)
    for rank in range(nproc):
        procs.append(subprocess.Popen([sys.executable] + sys.argv, start_new_session=True,
                                      env=dict(env, RANK=str(rank), LOCAL_RANK=str(rank),
                                               GLASSGPT_LAUNCHER=str(os.getpid()))))
    first, since = None, None
    while [p.poll() for p in procs].count(None):  # poll each: a failure is seen as it happens
        if first is None:
            first, since = next((p for p in procs if p.returncode), None), time.time()
        elif time.time() - since > 10:
            for p in procs:
                if p.poll() is None:
                    p.kill()
        time.sleep(0.1)
    first = first or next((p for p in procs if p.returncode), None)
    code = first.returncode if first else 0
    if code < 0 and -code not in sent:  # killed from outside (kill -9, the OOM killer): say which
        print(f"rank {procs.index(first)} was killed by {signal.Signals(-code).name}, "
              "so the run ended", file=sys.stderr)
    return 128 - code if code < 0 else code  # killed by a signal: 128 + its number, as a shell says


def follow_launcher():
    """
    A process --nproc started runs in its own session, out of the terminal's reach: should the launcher
    die without passing a signal on (kill -9), the process is sent SIGTERM, and saves and ends as for a
    stop. Linux only (prctl); elsewhere it trains on to its end.
    """
    launcher = int(os.environ.get("GLASSGPT_LAUNCHER", 0))
    if not launcher or not sys.platform.startswith("linux"):
        return
    import ctypes
    PR_SET_PDEATHSIG = 1
    with suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    if os.getppid() != launcher:  # it died before the line above
        os.kill(os.getpid(), signal.SIGTERM)


PEER_GONE = re.compile(r"(closed|reset) by peer|Broken pipe|Connection refused")  # gloo's words for a lost peer


def peer_gone(error, saved=None):
    """One line, not a traceback, where another process of a DDP run ended mid-collective (killed, or out of
    memory): what this one saw and what is on disk (saved: what it has just saved itself). Returns the exit
    code, 1."""
    reason = PEER_GONE.search(str(error)).group(0)
    ckpt_path = os.path.join(out_dir, "ckpt.pt")
    saved = (f"{saved} (continue with --init_from=resume)" if saved else
             f"{ckpt_path} holds the last save (continue with --init_from=resume)" if os.path.exists(ckpt_path)
             else "nothing was saved yet")
    print(f"rank {os.environ.get('RANK')}: another process of this run is gone (gloo: {reason}), "
          f"so this one stops too; {saved}", file=sys.stderr)
    return 1


def main():
    ddp = int(os.environ.get("RANK", -1)) != -1  # torchrun (or --nproc) sets RANK, LOCAL_RANK, WORLD_SIZE
    stopper = Stopper(master=os.environ.get("RANK", "0") == "0")  # first: a stop during setup is honoured
    follow_launcher()
    given = {}  # the keys set in config files or on the command line, and where
    config = preflight(resolve(configure(config_keys(globals()), given=given)), given)
    if config["nproc"] > 1 and not ddp:  # checked once, here: now the processes, each running this command
        if not config["eval_only"] and in_use(config["out_dir"]):  # one line from here, not rank 0's line and
            raise out_dir_busy(config["out_dir"])  # its peers' tracebacks (rank 0 takes the lock itself)
        sys.exit(launch(config["nproc"]))
    globals().update(config)  # as nanoGPT: from here on every config key is a plain name
    if ddp:
        dist.init_process_group(backend=backend)
    try:
        signum = train(config, ddp, given, stopper)
        if ddp:  # leave together: a process that exits while its peer is still busy can abort in gloo's threads
            dist.barrier()
    except RuntimeError as e:
        if not (ddp and PEER_GONE.search(str(e))):
            raise
        sys.exit(peer_gone(e))
    finally:
        release_out_dirs()
        if ddp:
            dist.destroy_process_group()
    code = 128 + signum if signum else 0
    if ddp:  # torch 2.13's DDP keeps gloo's threads alive past destroy_process_group, and their teardown
        # at interpreter exit aborts a finished process now and then (SIGABRT, ~1 run in 25): leave at once
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    sys.exit(code)


def set_up_device(ddp, rank, world_size):
    """Ready torch for this process: the device, its threads, its seed. Returns the device type."""
    device_type = torch.device(device).type
    if device_type == "cuda":
        torch.cuda.set_device(device)
        torch.backends.cuda.matmul.allow_tf32 = True  # tf32 matmuls on Ampere+: much faster, accurate enough
        torch.backends.cudnn.allow_tf32 = True
    if device_type == "cpu":
        keep_freed_memory()  # each step reuses the last step's memory instead of faulting it in again
    if num_threads:
        torch.set_num_threads(num_threads)
    elif ddp:  # torchrun sets 1 thread per process; give each process its share of this node's cores
        torch.set_num_threads(max(1, cpu_cores() // int(os.environ.get("LOCAL_WORLD_SIZE", world_size))))
    torch.manual_seed(seed + rank)  # dropout masks differ per process; the weights are rank 0's (DDP broadcasts)
    return device_type


def build_model(config, given, meta, device_type):
    """The model init_from asks for, on device, and the checkpoint it resumes (else None). Every way it can
    fail (a bad shape, a checkpoint that does not fit, a name Hugging Face cannot find) is a ConfigError."""
    ckpt = None
    try:
        if init_from == "scratch":
            model_args = {k: config[k] for k in MODEL_KEYS}
            raw_model = GPT(GPTConfig(vocab_size=meta["vocab_size"], dropout=dropout, **model_args))
        elif init_from == "resume":
            ckpt = load_checkpoint(os.path.join(out_dir, "ckpt.pt"), map_location=device)
            exact = () if is_nanogpt(ckpt) else ("rng", "sampler")  # nanoGPT's saves no RNG or data order
            missing = [k for k in ("optimizer", "iter_num", "best_val_loss") + exact if k not in ckpt]
            if missing:
                raise ConfigError(f"{out_dir}/ckpt.pt cannot be resumed: it has no {', '.join(missing)}")
            check_same_tokenizer(out_dir, data_dir, meta, "resume")
            raw_model = model_from_checkpoint(ckpt, dropout=dropout, attention=attention)
            trained_with = (ckpt.get("config") or {}).get("optimizer", "adamw")  # nanoGPT's: AdamW, no key
            if trained_with != config["optimizer"]:  # each keeps its own state: one cannot continue the other
                raise ConfigError(f"resume: the checkpoint was trained with optimizer={trained_with}; "
                                  f"resume with --optimizer={trained_with}")
        else:
            raw_model = model_from_pretrained(init_from, dropout=dropout)
            check_same_tokenizer(init_from, data_dir, meta, "init_from")  # a folder export.py wrote has meta.json
            longest = raw_model.config.block_size  # shorter windows are fine: crop_block_size below
            check_model_keys(config, given, asdict(raw_model.config), init_from, free=("block_size",),
                             more=[f"block_size={block_size} is longer than {init_from}'s {longest}"]
                             if block_size > longest else [])
            raw_model.crop_block_size(block_size)  # e.g. fine-tune GPT-2 (1024) with 256-token windows
            check_fits(raw_model.config, batch_size, device_type, int(os.environ.get("LOCAL_WORLD_SIZE", 1)),
                       config["optimizer"])
    except ConfigError:
        raise
    except ImportError as e:
        raise ConfigError(str(e)) from None
    except (ValueError, OSError, RuntimeError) as e:  # a bad model shape, a model name Hugging Face cannot find
        raise ConfigError(f"cannot build the model ({init_from}): {str(e).splitlines()[0][:300]}") from None
    if meta["vocab_size"] > raw_model.config.vocab_size:
        raise ConfigError(f"the dataset's vocab_size {meta['vocab_size']} exceeds the model's "
                          f"{raw_model.config.vocab_size}")
    raw_model.to(device)
    return raw_model, ckpt


def build_optimizer(raw_model, ckpt, config, device_type):
    """The optimizer, fp16's loss scaler and the data sampler, new or as the resumed checkpoint left them; and
    each param group's lr scale (Muon's group runs at its own peak lr on the same schedule)."""
    optimizer = raw_model.configure_optimizers(weight_decay, learning_rate, (beta1, beta2), device_type,
                                               config["optimizer"], muon_lr, muon_momentum, muon_weight_decay,
                                               muon_ns_steps)
    scaler = torch.amp.GradScaler(device_type, enabled=(dtype == "float16"))  # fp16 needs loss scaling
    sampler = torch.Generator().manual_seed(seed)  # the same on every process: all draw the same global batch
    lr_scales = [g["lr_scale"] for g in optimizer.param_groups]  # this config's: a loaded state (nanoGPT's) has none
    if ckpt is not None:
        try:
            optimizer.load_state_dict(ckpt["optimizer"])
        except (ValueError, KeyError, RuntimeError) as e:
            raise ConfigError(f"{out_dir}/ckpt.pt: its optimizer state does not fit this model's optimizer "
                              f"({str(e).splitlines()[0][:200]})") from None
        if scaler.is_enabled() and ckpt.get("scaler"):
            scaler.load_state_dict(ckpt["scaler"])
        if "sampler" in ckpt:
            sampler.set_state(ckpt["sampler"]["generator"].cpu())
    return optimizer, scaler, sampler, lr_scales


def done_line(iter_num, start_iter, best_val_loss, ckpt_iter, spent, came_back, start_val=math.inf):
    """The run's last line, once it has ended by itself: how far it got and where its checkpoints are, and
    whether a fine-tune beat the model it started from (start_val, its first eval's val loss)."""
    if iter_num == start_iter and spent:
        held = checkpoint_summary(iter_num, best_val_loss)  # saved before its first eval: no val loss
        return f"done: nothing to train: the run in {out_dir} ended at {held}: {spent}"
    if iter_num > start_iter or math.isfinite(best_val_loss):
        budget = f" ({max_seconds:g} s of training steps)" if iter_num < max_iters else ""
        behind = ("" if ckpt_iter == iter_num else  # always_save_checkpoint=False, as nanoGPT's
                  f"; ckpt.pt is at iter {ckpt_iter}, the last eval that improved val "
                  "(always_save_checkpoint=False saves only then)")
        if best_val_loss >= start_val:  # best.pt is the best after the start: here, worse than init_from itself
            behind += (f"; not below {init_from}'s own val loss, {start_val:.4f} at iter {start_iter}: this training "
                       "has not improved on the model it started from")
        return f"done: iter {iter_num}{budget}, best val loss {best_val_loss:.4f}, checkpoints in {out_dir}" + behind
    back = f"; the earlier run is back in {out_dir}" if came_back else ""  # max_iters=0: evaluated, nothing trained
    return f"done: nothing to train (max_iters={max_iters}): evaluated at iter {iter_num}, no checkpoint written{back}"


def train(config, ddp, given, stopper):
    """One training run, start to end. Returns the signal this process was stopped by, if any."""
    job = Run(config, ddp, given, stopper)
    job.announce()
    job.prepare_out_dir()
    try:  # a lost DDP process ends the loop in a collective: what this one holds is saved first
        job.loop()
    except RuntimeError as e:
        if not (ddp and PEER_GONE.search(str(e))):
            raise
        job.bar.close()
        raise SystemExit(peer_gone(e, job.save_alone())) from None
    return job.finish()


class Run:
    """
    One training run on this process: its data, model and optimizer, and the state its parts share (where
    the loop is, what out_dir holds, what a stop saves). train() calls them in order: __init__ (everything
    built, nothing written yet), announce, prepare_out_dir, loop, finish. Config keys are the module's globals,
    as in nanoGPT; config (the dict) is what a checkpoint records.
    """

    def __init__(self, config, ddp, given, stopper):
        self.config, self.ddp, self.stopper = config, ddp, stopper
        self.rank = dist.get_rank() if ddp else 0
        self.world_size = dist.get_world_size() if ddp else 1
        self.master = self.rank == 0  # only this process prints and writes files
        if self.master and not eval_only:  # a run training there now: refused before any work or line
            claim_out_dir(out_dir)
        self.accum = gradient_accumulation_steps // self.world_size  # micro-batches per process per iteration
        self.tokens_per_iter = gradient_accumulation_steps * batch_size * block_size
        self.device_type = set_up_device(ddp, self.rank, self.world_size)

        # data: the bins are opened once and read by slicing; each split must hold one window
        ensure_data(data_dir, self.master, ddp)
        train_data, val_data, self.meta = load_data(data_dir, block_size)
        self.splits = {"train": train_data, "val": val_data}
        self.eval_windows = {s: eval_starts(len(d), block_size, eval_iters * batch_size) for s, d in self.splits.items()}

        ckpt = self.build(config, given)
        self.t0 = time.time()
        self.model = self.raw_model
        if compile:
            if self.master:  # else nothing shows for the 20 s to a minute or more it takes on a CPU
                print("compiling the model (torch.compile) before the first iteration: on a 2-core CPU 20-70 s "
                      "by its speed, more with other jobs on the cores", flush=True)
            x, y = self.to_device(*get_windows(train_data, self.eval_windows["train"][:batch_size], block_size))
            self.model = compiled_or_eager(self.raw_model, x, y, self.ctx, self.device_type)
        self.train_model = self.model
        if ddp:  # averages the gradients across processes during backward
            self.train_model = DDP(self.model, device_ids=[torch.cuda.current_device()] if self.device_type == "cuda" else None)
        self.wandb_run = start_wandb(config) if wandb_log and self.master else None
        self.restore_rng(ckpt)  # last, so that nothing above consumes the restored random numbers

        # what the later parts fill in
        self.start_iter, self.opt_seconds = self.iter_num, 0.0
        self.in_flight = None  # an iteration's start state, while it may still be dropped
        self.ckpt_iter = self.iter_num if init_from == "resume" else None  # the iteration out_dir/ckpt.pt holds
        self.log_file, self.log_was, self.moved_to = None, "", None
        self.logged_eval = None  # a resume's iteration whose eval the earlier run logged
        self.wrote = []  # the files a new run adds to out_dir: a run that trains nothing takes them away again
        self.bar, self.stop = None, False

    def build(self, config, given):
        """The model, its dtype, the optimizer, and where a resumed run stands. Returns the checkpoint (or None)."""
        self.raw_model, ckpt = build_model(config, given, self.meta, self.device_type)
        globals()["dtype"] = config["dtype"] = auto_dtype(config, given, self.raw_model.config.n_embd)  # its own width
        self.ctx = autocast(self.device_type, dtype)
        self.nanogpt = ckpt is not None and is_nanogpt(ckpt)  # nanoGPT's train.py saves no RNG or data-order state
        self.iter_num = ckpt["iter_num"] if ckpt else 0
        self.best_val_loss = float(ckpt["best_val_loss"]) if ckpt else float("inf")  # nanoGPT's is a tensor
        self.start_val = math.inf  # a fine-tune's first val loss: the model it starts from
        self.changed = schedule_changes(config, ckpt.get("config") or {}) if ckpt else []
        # seconds of training steps so far, agreed by all processes: what max_seconds counts
        self.trained = float(ckpt.get("trained_seconds", 0.0)) if ckpt else 0.0
        if self.changed:  # where the lr lands matters most: a time budget dropped sends it back up the cosine
            lrs = [scheduled_lr(c, self.iter_num, self.trained) for c in (config, {**config, **ckpt["config"]})]
            if not math.isclose(*lrs, rel_tol=0.01):
                self.changed.append(f"so the lr at iter {self.iter_num} is {lrs[0]:.2e}, where the run's own "
                                    f"schedule has {lrs[1]:.2e}")
        # (here optimizer is the object; the config key's value is config["optimizer"])
        self.optimizer, self.scaler, self.sampler, self.lr_scales = build_optimizer(self.raw_model, ckpt, config,
                                                                                    self.device_type)
        return ckpt

    def restore_rng(self, ckpt):
        if ckpt is None or "rng" not in ckpt:
            return
        if len(ckpt["rng"]["torch"]) == self.world_size:
            set_rng_state({k: v[self.rank] for k, v in ckpt["rng"].items()}, self.device_type)
        elif self.master and dropout > 0 and not eval_only:  # the random numbers are dropout's alone: else no matter
            print(f"warning: the checkpoint holds the random state of {len(ckpt['rng']['torch'])} process(es), "
                  f"this run has {self.world_size}: dropout draws new random numbers (the data order still continues "
                  "exactly)", file=sys.stderr)

    def announce(self):
        """The run's first lines: what it trains, on what, from where."""
        if self.master and decay_lr and min_lr > learning_rate and not eval_only:  # get_lr floors it at the peak
            print(f"warning: min_lr={min_lr:g} is above learning_rate={learning_rate:g}: the lr stays at "
                  f"{learning_rate:g} after warmup, with no decay", file=sys.stderr)
        note = self.master and not eval_only and self.iter_num < max_iters and undecayed(self.config, self.trained)
        if note:
            print(note, file=sys.stderr)
        total = self.raw_model.get_num_params(non_embedding=False)
        counted = non_embedding_label(self.raw_model.config)
        train_data, val_data = self.splits.values()
        self.say(f"{total:,} parameters ({counted}) | vocab {self.meta['vocab_size']} ({self.meta['tokenizer']}) | "
                 f"train {len(train_data):,} tokens, val {len(val_data):,}")
        threads, n = torch.get_num_threads(), self.world_size
        self.say(f"{init_from} at iter {self.iter_num} | {device} {dtype}{' compiled' if self.model is not self.raw_model else ''} | "
                 f"{n} process{'es' * (n > 1)} x {threads} thread{'s' * (threads > 1)} | "
                 f"{self.tokens_per_iter:,} tokens per iteration")
        if self.changed and not eval_only:  # resume takes the schedule from this command: said, so a change is not silent
            self.say(f"resume: this command's schedule differs from the run's: {', '.join(self.changed)}; to continue "
                     "the run's own, pass its values")

    def prepare_out_dir(self):
        """
        out_dir (rank 0), last before training: an earlier run there moves aside, then meta.json and log.jsonl
        (eval_only writes nothing). From then until the first iteration a stop has nothing new to save (a new
        run's untrained ckpt.pt would only pass for a run, and the next run would move it aside as one) and
        puts that earlier run back: held, so that no stop falls between the move and arming it to say so.
        """
        log_path, moved = os.path.join(out_dir, "log.jsonl"), None
        with self.stopper.held():
            if self.master and not eval_only:
                if init_from == "resume" and os.path.isfile(log_path):  # put back by a stop before the first iteration
                    with open(log_path) as f:
                        self.log_was = f.read()
                if init_from != "resume":
                    self.wrote = [n for n in ("log.jsonl", "meta.json") if not os.path.exists(os.path.join(out_dir, n))]
                self.log_file, moved, self.moved_to, self.logged_eval = open_out_dir(
                    out_dir, data_dir, self.meta, self.iter_num if init_from == "resume" else None)
            self.stopper.armed = ("nothing to save (eval_only)" if eval_only else
                                  f"nothing trained since {out_dir}/ckpt.pt (iter {self.iter_num}), which stays as it was"
                                  if init_from == "resume" else "nothing trained yet, nothing saved" +
                                  (f"; the earlier run goes back from {self.moved_to} into {out_dir}" if self.moved_to else ""))
        if moved:
            self.say(moved)
        if self.nanogpt and self.master and not eval_only:
            kept_as = keep_nanogpt_checkpoint(out_dir)
            print(f"warning: {out_dir}/ckpt.pt is nanoGPT's (kept as {kept_as}): it holds no random-number or "
                  "data-order state, so training continues from its weights and optimizer but not exactly as "
                  "the original run would have", file=sys.stderr)

    # ------------------------------------------------------------------ the loop

    def loop(self):
        """Evaluate (and checkpoint) every eval_interval iterations and at the end, train in between, until
        max_iters, the time budget, or a stop."""
        self.bar = tqdm(total=max_iters, initial=self.iter_num, unit="it", dynamic_ncols=True,
                        disable=not (self.master and sys.stderr.isatty()))
        self.stop = False
        tokens_since_log, time_since_log = 0, 0.0
        step_times, eval_time, estimated = [], None, False  # measured, for the estimate of the time the run takes
        # a stop between micro-batches: alone, a check costs nothing; under DDP it is a collective, so only
        # while iterations are slow (the first, unmeasured, counts as slow)
        watch = self.accum > 1
        while True:
            if self.stop:
                self.save_on_stop()
                break
            time_spent = self.trained / max_seconds if max_seconds > 0 else 0.0
            lr = scheduled_lr(self.config, self.iter_num, self.trained)
            last = self.iter_num >= max_iters or time_spent >= 1.0
            if self.iter_num % eval_interval == 0 or last or eval_only:
                seconds = self.evaluate(lr)
                if seconds is None:  # a stop came mid-eval (self.stop is set): saving does not need its result
                    continue
                eval_time = seconds
            if last or eval_only:
                break

            t = time.time()
            loss_value, self.stop, seconds, grad_norm = self.train_step(lr, watch)
            if loss_value is None:  # dropped mid-iteration by a stop
                continue
            self.trained += seconds
            watch = self.accum > 1 and (not self.ddp or seconds > 1.0)
            step_times.append(time.time() - t)
            tokens_since_log += self.tokens_per_iter
            time_since_log += step_times[-1]
            if self.iter_num % log_interval == 0:
                tokens_per_sec = tokens_since_log / max(time_since_log, 1e-9)
                elapsed = time.time() - self.t0
                self.log({"iter": self.iter_num, "loss": loss_value, "lr": lr, "tokens_per_sec": tokens_per_sec,
                          "elapsed": elapsed, "grad_norm": grad_norm.item()})
                self.say(f"iter {self.iter_num}: loss {loss_value:.4f}, lr {lr:.2e}, {tokens_per_sec:,.0f} tok/s, "
                         f"{elapsed:.1f}s")
                self.bar.set_postfix_str(f"loss {loss_value:.4f}, {tokens_per_sec:,.0f} tok/s")
                tokens_since_log, time_since_log = 0, 0.0
            self.iter_num += 1
            self.bar.update(1)
            if not estimated and (len(step_times) == 3 or sum(step_times) > 20) and self.iter_num < max_iters:
                estimated = True
                self.say_estimate(step_times, eval_time)

    def evaluate(self, lr):
        """The eval at this iteration: logged, said, and saved as ckpt.pt (and best.pt) if it is news. Returns
        its seconds; None, with self.stop set, if a stop cut it short."""
        t = time.time()
        losses = self.estimate_loss()
        if losses is None:
            self.stop = True
            return None
        seconds = time.time() - t
        if self.iter_num != self.logged_eval:
            self.log({"iter": self.iter_num, "train_loss": losses["train"], "val_loss": losses["val"], "lr": lr,
                      "elapsed": time.time() - self.t0})
        self.say(f"step {self.iter_num}: train loss {losses['train']:.4f}, val loss {losses['val']:.4f}")
        if not (math.isfinite(losses["train"]) and math.isfinite(losses["val"])):
            self.fail(f"eval loss is not finite at iter {self.iter_num} (train {losses['train']}, val {losses['val']})")
        if self.iter_num == self.start_iter and init_from not in ("scratch", "resume"):
            self.start_val = losses["val"]
        if self.iter_num > self.start_iter and not eval_only:  # at start_iter there is nothing new to save
            improved = losses["val"] < self.best_val_loss
            self.best_val_loss = min(self.best_val_loss, losses["val"])
            names = (["ckpt.pt"] if improved or always_save_checkpoint else []) + (["best.pt"] if improved else [])
            if names:
                self.save(names)
        return seconds

    def say_estimate(self, step_times, eval_time):
        """From the first iterations (the first warms up: left out where there are more): the time the run
        takes, said if it is a minute or more; and where a time budget ends it, on the bar."""
        step = sum(step_times[1:] or step_times) / len(step_times[1:] or step_times)
        guess = eval_time or 2 * -(-eval_iters // self.world_size) * step / self.accum / 3  # a forward: ~1/3 of a step
        end = self.end_iter(step)
        left, line = time_left(self.iter_num, end, eval_interval, step, guess)
        if max_seconds > 0:  # the bar shows where the budget ends
            self.bar.total = end
            self.bar.refresh()
        if left >= 60:  # a shorter run is over before anyone wonders
            self.say(f"estimate: {line} on {device}")

    def finish(self):
        """After the loop: the log closed and drawn, the run's last line. Returns the signal that stopped it, if any."""
        self.bar.close()
        came_back = not self.stop and self.iter_num == self.start_iter and self.leave_as_found()  # max_iters=0, or ended
        self.stopper.armed = None  # all is saved
        if self.master and self.log_file is not None:
            self.log_file.close()
            records = read_log(os.path.join(out_dir, "log.jsonl"))  # none if a new run stopped before its first iteration
            if records and not plot_losses(records, os.path.join(out_dir, "loss.png"), title=out_dir):
                self.say(f"no {out_dir}/loss.png: drawing it needs matplotlib (pip install matplotlib)")
        if self.master:
            if self.wandb_run is not None:
                self.wandb_run.finish()
            if not (eval_only or self.stop):
                self.say(done_line(self.iter_num, self.start_iter, self.best_val_loss, self.ckpt_iter, self.spent(),
                                   came_back, self.start_val))
        return self.stopper.signum  # the signal this process was stopped by, if any

    def spent(self):
        """Why a resumed run trained nothing, and how to train on, where it had already ended; else None."""
        if init_from == "resume" and self.iter_num >= max_iters:
            return f"it had already reached max_iters={max_iters}; raise --max_iters to train on"
        if init_from == "resume" and 0 < max_seconds <= self.trained:
            return (f"it had already used its max_seconds={max_seconds:g} budget ({self.trained:.0f} s of "
                    "training steps); raise --max_seconds to train on")
        return None

    # ------------------------------------------------------------------ one iteration

    def to_device(self, *tensors):
        if self.device_type == "cuda":  # pinned memory lets the copy overlap with the GPU's work
            return [t.pin_memory().to(device, non_blocking=True) for t in tensors]
        return [t.to(device) for t in tensors]

    def get_batch(self):
        """This process's micro-batches, (accum, batch_size, block_size) each for x and y. The iteration's
        global batch is drawn whole from the shared sampler and each process takes its slice, so the
        global batch is the same for any number of processes."""
        train_data, accum = self.splits["train"], self.accum
        starts = torch.randint(len(train_data) - block_size, (gradient_accumulation_steps * batch_size,),
                               generator=self.sampler).numpy()
        mine = starts[self.rank * accum * batch_size:(self.rank + 1) * accum * batch_size]
        x, y = get_windows(train_data, mine, block_size)
        return self.to_device(x.view(accum, batch_size, block_size), y.view(accum, batch_size, block_size))

    def train_step(self, lr, watch):
        """
        One iteration: accum micro-batches per process, then one optimizer step. Returns the loss (mean
        over micro-batches and processes), whether a stop was requested, the seconds of training it adds
        (its micro-batches and the previous iteration's optimizer step, whose time is known only after the
        collective; the mean over processes: the same number everywhere), and the gradient's global norm before
        clipping (a tensor, on clipping or logging iterations; else None). A stop before the optimizer step
        (at once alone; under DDP between micro-batches, with watch, and at the collective after them) drops
        the iteration (loss None, see drop). Past that point the iteration completes, and from the first
        one a stop saves: the stop's line says which.
        """
        stopper, optimizer = self.stopper, self.optimizer
        for group, scale in zip(optimizer.param_groups, self.lr_scales):
            group["lr"] = lr * scale  # Muon's group: its own peak lr, on the same schedule
        t = time.time()
        before = self.in_flight = (self.sampler.get_state(), rng_state(self.device_type))  # what a stop goes back to
        try:
            with stopper.interruptible(not self.ddp, lambda: self.save_on_stop(before)):
                xs, ys = self.get_batch()
                loss_sum = torch.zeros((), device=device)
                for micro_step in range(self.accum):
                    if micro_step and watch and self.stop_agreed():
                        raise Interrupted
                    # DDP averages gradients across processes; only on the last micro-batch is that needed
                    sync = not self.ddp or micro_step == self.accum - 1
                    with (nullcontext() if sync else self.train_model.no_sync()):
                        with self.ctx:
                            _, loss = self.train_model(xs[micro_step], ys[micro_step])
                        loss_sum += loss.detach()
                        self.scaler.scale(loss / self.accum).backward()  # the mean over micro-batches, as one big batch
        except Interrupted:
            return self.drop(before)
        # one collective for the logged loss, the stop flag and the time taken
        stats = torch.tensor([0.0, float(stopper.signum is not None), time.time() - t + self.opt_seconds], device=device)
        stats[0] = loss_sum / self.accum
        if self.ddp:
            dist.all_reduce(stats)
        n = self.world_size
        loss_value, stop, seconds = stats[0].item() / n, stats[1].item() > 0, stats[2].item() / n
        if not math.isfinite(loss_value):
            self.fail(f"loss is {loss_value} at iter {self.iter_num}")
        with stopper.held():  # the stop's line says whether this iteration is saved: it must hold either way
            if stop or (not self.ddp and stopper.signum is not None):  # under DDP only the agreed flag: all drop, or none
                return self.drop(before)  # before the optimizer step, as a stop inside the section would
            # from now a stop saves; under DDP, one heard in the few statements since the collective was told
            # "nothing saved" and will save (closing that window would take another collective)
            if self.iter_num == self.start_iter:
                stopper.armed = f"saving {out_dir}/ckpt.pt as it was after the last complete iteration"
                stopper.saves = True
        grad_norm, t = None, time.time()
        if grad_clip > 0.0 or self.iter_num % log_interval == 0:
            self.scaler.unscale_(optimizer)  # the true gradient: to clip it, and to log its global norm before clipping
            grad_norm = torch.nn.utils.clip_grad_norm_(self.raw_model.parameters(),
                                                       grad_clip if grad_clip > 0.0 else math.inf)
        self.in_flight = None  # no collective from here on: the iteration completes
        self.scaler.step(optimizer)
        self.scaler.update()
        optimizer.zero_grad(set_to_none=True)
        self.opt_seconds = time.time() - t
        return loss_value, False, seconds, grad_norm

    def drop(self, before):
        """An iteration a stop cut short: its gradients go, and the data sampler and random state go back to
        where it began, so that what is saved is the state after the last complete iteration."""
        self.sampler.set_state(before[0])
        set_rng_state(before[1], self.device_type)
        self.optimizer.zero_grad(set_to_none=True)
        return None, True, 0.0, None

    def end_iter(self, step_time):
        """Where the run ends: max_iters, or sooner if the time budget runs out first at this pace."""
        if max_seconds <= 0:
            return max_iters
        left = max(max_seconds - self.trained, 0.0)
        return min(max_iters, self.iter_num + math.ceil(left / max(step_time, 1e-9)))

    def stop_agreed(self):
        """Whether any process has been asked to stop. Under DDP a collective: all call it at the same point."""
        if not self.ddp:
            return self.stopper.signum is not None
        flag = torch.tensor(float(self.stopper.signum is not None), device=device)
        dist.all_reduce(flag)
        return flag.item() > 0

    @torch.no_grad()
    def estimate_loss(self):
        """
        Mean loss over each split's fixed eval windows; the eval batches are shared out among the
        processes. None if a stop came first: checked after every batch, so a long eval never delays it.
        """
        model, world_size = self.model, self.world_size
        model.eval()
        out = {}
        rounds = -(-eval_iters // world_size)  # the same number of rounds on every process
        progress = Progress(2 * rounds, "eval", self.master, self.say)
        begun = time.time()
        try:
            with self.stopper.interruptible(not self.ddp, self.save_on_stop):  # under DDP, checked after every batch
                for split, data in self.splits.items():
                    total = torch.zeros(2, device=device)  # sum of batch losses, number of batches
                    for k in range(self.rank, rounds * world_size, world_size):
                        if k < eval_iters:
                            starts = self.eval_windows[split][k * batch_size:(k + 1) * batch_size]
                            x, y = self.to_device(*get_windows(data, starts, block_size))
                            with self.ctx:
                                _, loss = model(x, y)
                            total += torch.stack((loss.float(), torch.ones((), device=device)))
                        if self.stop_agreed():
                            raise Interrupted
                        progress.update()
                        if progress.done == 1 and self.iter_num == self.start_iter and not eval_only:
                            self.forecast(time.time() - begun, 2 * rounds)
                    if self.ddp:
                        dist.all_reduce(total)
                    out[split] = (total[0] / total[1]).item()
            return out
        except Interrupted:
            return None
        finally:
            progress.close()
            model.train()

    def forecast(self, batch_seconds, eval_batches):
        """Before any iteration, from the run's first eval batch (a training micro-batch costs about three
        forwards): the time the run takes, said where that is hours (a GPU recipe on a CPU). The estimate
        from measured iterations follows them."""
        step = 3 * self.accum * batch_seconds
        left, line = time_left(self.iter_num, self.end_iter(step), eval_interval, step, eval_batches * batch_seconds)
        if left >= 3600:
            self.say(f"estimate: {line} on {device}, from the first eval batch")

    # ------------------------------------------------------------------ saving, stopping, failing

    def save(self, names, before=None, stopped_by=None):
        """Write the full training state to out_dir/<name> for each name (with the data sampler's and random
        state from before, if given: what an iteration cut short began with; and what stopped the run, if a
        stop saves). Every process must call this."""
        with self.stopper.save_lock:  # one writer at a time: a stop's rescue may save from its own thread
            return self.write_state(names, before, stopped_by)

    def write_state(self, names, before, stopped_by, alone=False):
        """As save; returns stopped_by, a peer's signal (None) named on rank 0 as "<signal> to rank <r>".
        alone: rank 0 saves without its peers (one is gone), with its own random state only."""
        states = [before[1] if before else rng_state(self.device_type)]
        if self.ddp and not alone:  # each process's dropout RNG, so a resume with as many processes continues exactly; and its signal
            gathered = [None] * self.world_size
            dist.all_gather_object(gathered, (rng_state(self.device_type), self.stopper.signum))
            states = [state for state, _ in gathered]
            peers = [f"{signal.Signals(s).name} to rank {r}" for r, (_, s) in enumerate(gathered) if s]
            stopped_by = stopped_by or next(iter(peers), None)
        if not self.master:
            return stopped_by
        rng = {"torch": [s["torch"] for s in states]}
        if self.device_type == "cuda":
            rng["cuda"] = [s["cuda"] for s in states]
        state = checkpoint_state(self.raw_model, self.optimizer, self.scaler, self.config, self.iter_num,
                                 self.best_val_loss, self.trained, rng,
                                 before[0] if before else self.sampler.get_state(), stopped_by)
        for name in names:
            save_checkpoint(state, os.path.join(out_dir, name))
        if "ckpt.pt" in names:  # once written: a save cut short wrote nothing
            self.ckpt_iter = self.iter_num
        return stopped_by

    def save_alone(self):
        """Another process of a DDP run is gone (killed, out of memory) and took the collectives with it: rank 0
        saves ckpt.pt as it was after the last complete iteration, alone. Returns what it saved, to say, or None."""
        if not self.master or eval_only:
            return None
        if self.iter_num == self.start_iter:  # nothing trained: out_dir as it was found, an earlier run put back
            self.leave_as_found()
            return None
        if self.ckpt_iter == self.iter_num:
            return None
        with self.stopper.save_lock:
            self.write_state(["ckpt.pt"], self.in_flight, "a lost DDP process", alone=True)
        lost = "; the other processes' random state is lost: dropout will draw new numbers" if dropout > 0 else ""
        return f"saved {out_dir}/ckpt.pt at iter {self.iter_num}, its last complete iteration{lost}"

    def save_on_stop(self, before=None):
        """After a stop: ckpt.pt as it was after the last complete iteration, and say so. Before this run's first
        iteration, and under eval_only, there is nothing new to save, and out_dir is left as found. The stop's
        line has said so; a closed stdout's is said here."""
        stopper = self.stopper
        if eval_only or self.iter_num == self.start_iter:
            self.leave_as_found()
            if stopper.signum == signal.SIGPIPE and self.master:
                tell_stderr(f"stdout closed: stopped; {stopper.armed}")
            return
        name = self.save(["ckpt.pt"], before, stopped_by=signal.Signals(stopper.signum).name if stopper.signum else None)
        if stopper.signum == signal.SIGPIPE:  # stdout is gone: the one line goes to stderr
            if self.master:
                tell_stderr(f"stdout closed at iter {self.iter_num}: stopped and saved {out_dir}/ckpt.pt; "
                            "continue with --init_from=resume")
            return
        self.say(f"{name or 'a stop'} at iter {self.iter_num}: saved {out_dir}/ckpt.pt; continue with --init_from=resume")

    def leave_as_found(self):
        """A run that trained nothing (stopped before its first iteration, eval_only, max_iters=0) leaves
        out_dir as it found it: a resumed run's log.jsonl as it was, a new run's empty (its eval's record
        would make the next run take it for an earlier run to move aside), and the earlier run it moved
        aside back; the files a new run added go (and a folder it made, with release_out_dirs), so that
        sample.py does not take it for a run. Returns whether that run came back."""
        if self.log_file is not None and "log.jsonl" in self.wrote:  # a new run's, into a folder that held no log
            self.log_file.close()
            self.log_file = None
            for name in self.wrote:
                with suppress(OSError):
                    os.remove(os.path.join(out_dir, name))
        if self.log_file is not None:
            self.log_file.seek(0)
            self.log_file.truncate()
            self.log_file.write(self.log_was)
            self.log_file.flush()
        if not self.moved_to:
            return False
        if self.log_file is not None:  # the earlier run's files replace this run's: nothing more goes to it (nor a loss.png)
            self.log_file.close()
        self.log_file = None
        put_back_previous_run(out_dir, self.moved_to)
        self.moved_to = None
        return True

    def fail(self, message):
        self.bar.close()
        if self.master:
            if self.ckpt_iter is not None:
                kept = f"{out_dir}/ckpt.pt (iter {self.ckpt_iter}) is the last good checkpoint"
            else:  # a new run with nothing to keep leaves out_dir as found, an earlier run put back
                back = self.leave_as_found()
                kept = (f"nothing saved: no eval had written {out_dir}/ckpt.pt yet" +
                        (f"; the earlier run is back in {out_dir}" if back else ""))
            print(f"error: {message}; stopped, {kept}", file=sys.stderr)
        raise SystemExit(1)

    # ------------------------------------------------------------------ what the run says and logs

    def say(self, message):
        if self.master:
            try:
                tqdm.write(message)
                sys.stdout.flush()
            except BrokenPipeError:  # | head has read its lines: a stop request, not the end of the run
                self.stdout_closed()

    def stdout_closed(self):
        """stdout's reader has gone. Training must not end there silently and lose what it has not saved:
        this is a stop as Ctrl-C's (saved, then exit code 141, 128 + SIGPIPE, as the shell reports a command
        its closed pipe ended), said on stderr."""
        stopper = self.stopper
        silence_stdout()
        if eval_only:  # it writes no files: whenever its reader went, there is nothing to save
            tell_stderr("stdout closed: stopped; eval_only has nothing to save")
            raise SystemExit(128 + signal.SIGPIPE)
        if stopper.armed is None:  # all is saved: the run is over
            tell_stderr(f"stdout closed: the run is over and saved in {out_dir}")
        elif not stopper.armed:  # before training began: nothing to save
            tell_stderr("stdout closed before training began: nothing trained, nothing saved")
            raise SystemExit(128 + signal.SIGPIPE)
        elif stopper.signum is None:  # the loop saves and says so on stderr (save_on_stop)
            stopper.signum = signal.SIGPIPE
            if stopper.cut:  # in a long eval's progress line: cut it short, as a signal's handler does
                stopper.cut = False
                raise Interrupted

    def log(self, record):
        if self.master:  # strict JSON: a diverged (nan, inf) value is written as null
            record = {k: None if isinstance(v, float) and not math.isfinite(v) else v for k, v in record.items()}
            if self.log_file is not None:
                self.log_file.write(json.dumps(record) + "\n")
                self.log_file.flush()
            if self.wandb_run is not None:
                self.wandb_run.log(record)


def start_wandb(config):
    """A wandb run to log to, or None (with a warning) where wandb cannot start: train anyway."""
    try:
        import wandb
        return wandb.init(project=wandb_project, name=wandb_run_name, config=config)
    except Exception as e:  # not installed, not logged in, offline
        print(f"warning: wandb logging is off ({type(e).__name__}: {e})", file=sys.stderr)
        return None


if __name__ == "__main__":
    run(main)
