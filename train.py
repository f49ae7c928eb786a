"""
Train a GPT: from scratch, from a checkpoint, or from OpenAI's GPT-2 weights; on a CPU, a GPU, or many
processes with torchrun (PyTorch DDP).

    python train.py config/tiny.py                         # char-level Shakespeare in 3 minutes on a CPU
    python train.py config/tiny.py --batch_size=16 --n_layer=4
    python train.py config/tiny.py --init_from=resume      # continue where out_dir/ckpt.pt stopped
    torchrun --standalone --nproc_per_node=2 train.py config/tiny.py --gradient_accumulation_steps=2 --batch_size=16

out_dir receives ckpt.pt (the latest state, enough to resume exactly), best.pt (the lowest val loss),
log.jsonl, meta.json and loss.png; an earlier run there is moved to out_dir/previous/ first (rundir.py).
Ctrl-C or SIGTERM saves ckpt.pt as it was after the last complete iteration and exits 130 or 143
(stopping.py); a stop before the first iteration saves nothing.
"""

import math
import os
import signal
import subprocess
import sys
import time
from contextlib import nullcontext

from device import autocast, check_fits, cpu_has_native_bf16, resolve_device  # before torch: OpenMP's setting
import numpy as np
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

from checkpoint import (current_model_args, is_nanogpt, load_checkpoint, model_from_checkpoint,
                        model_from_pretrained, save_checkpoint)
from configurator import FALSE, TRUE, ConfigError, config_keys, configure, run
from model import GPT, GPTConfig
from muon import configure_muon
from rundir import RunLog, check_writable, plot_losses, read_log
from sizing import activation_bytes, memory_bytes
from stopping import Stopper
from tokenizer import find_meta, read_bin, read_meta, same_tokenizer

# -----------------------------------------------------------------------------
# default config values: GPT-2 (124M) on OpenWebText, as nanoGPT. config/*.py and --key=value override them.
# I/O
out_dir = "out"  # the run's folder: ckpt.pt, best.pt, log.jsonl, meta.json, loss.png
eval_interval = 2000  # evaluate and save every this many iterations
log_interval = 1  # print and log the training loss every this many iterations
eval_iters = 200  # eval batches per split, always the same windows of the data
eval_only = False  # evaluate once, then exit, writing nothing
always_save_checkpoint = True  # ckpt.pt at every eval; False: only when the val loss improves
init_from = "scratch"  # "scratch" | "resume" (out_dir/ckpt.pt) | "gpt2" ... "gpt2-xl" | a Hugging Face folder
# wandb logging (optional)
wandb_log = False  # also log to Weights & Biases
wandb_project = "glassgpt"  # the wandb project
wandb_run_name = "gpt2"  # the wandb run's name
# data
dataset = "openwebtext"  # a folder under data/; its prepare.py runs first if its bins are missing
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
attention = "sdpa"  # "sdpa" (fused kernel) | "manual" (explicit T x T scores)
activation = "gelu_tanh"  # "gelu_tanh" (GPT-2's) | "gelu" (exact erf, as nanoGPT's nn.GELU)
tie_weights = True  # lm_head shares wte's matrix
# optimizer
optimizer = "adamw"  # "adamw" | "muon" (Muon for the blocks' matrices, AdamW for the rest)
learning_rate = 6e-4  # peak learning rate, after warmup
max_iters = 600000  # iterations (optimizer steps) in all
max_seconds = 0.0  # > 0: a time budget: stop after this many seconds of training steps, the lr decaying over them
weight_decay = 1e-1  # AdamW's decay of the matrices (not biases or norm gains)
beta1 = 0.9  # AdamW's first-moment decay
beta2 = 0.95  # AdamW's second-moment decay
grad_clip = 1.0  # clip the gradient's global norm to this; 0 disables
muon_lr = 0.02  # Muon's peak lr; the schedule scales it as it scales learning_rate
muon_momentum = 0.95  # Muon's (Nesterov) momentum
muon_weight_decay = 0.0  # Muon's decoupled weight decay
muon_ns_steps = 5  # Newton-Schulz iterations per Muon step
# learning rate schedule: linear warmup, then cosine decay to min_lr
decay_lr = True  # False: learning_rate throughout
warmup_iters = 2000  # iterations of linear warmup
lr_decay_iters = 600000  # the cosine reaches min_lr here: about max_iters, per Chinchilla
min_lr = 6e-5  # the learning rate after the decay: about learning_rate / 10, per Chinchilla
# system
backend = "auto"  # DDP: "nccl" on CUDA, "gloo" otherwise
device = "auto"  # "auto" (cuda, then mps, then cpu) | "cpu" | "cuda" | "cuda:1" | "mps"
dtype = "auto"  # "auto" (bfloat16 where the device has it natively, float16 on older GPUs, else float32) | "float32" | ...
compile = "auto"  # torch.compile the model: "auto" (on CUDA) | "true" | "false"
num_threads = 0  # CPU threads per process; 0: torch's default, shared out among the processes under torchrun
seed = 1337  # initial weights, data order and dropout all follow from it
# -----------------------------------------------------------------------------
MODEL_KEYS = ("n_layer", "n_head", "n_embd", "block_size", "bias", "norm", "position", "attention", "activation",
              "tie_weights")


def get_lr(it, trained=0.0):
    """Linear warmup, then cosine decay to min_lr over lr_decay_iters or, with a time budget, over max_seconds of
    training steps (trained so far), whichever is further along: the run ends decayed wherever it ends."""
    if not decay_lr:
        return learning_rate
    if it < warmup_iters:
        return learning_rate * (it + 1) / (warmup_iters + 1)
    progress = (it - warmup_iters) / max(lr_decay_iters - warmup_iters, 1)
    if max_seconds > 0:
        progress = max(progress, trained / max_seconds)
    return min_lr + 0.5 * (1.0 + math.cos(math.pi * min(progress, 1.0))) * (learning_rate - min_lr)


def check_config(config):
    """The values configurator cannot check by type alone. Raises ConfigError."""
    c = config
    for key in ("batch_size", "block_size", "gradient_accumulation_steps", "eval_interval", "eval_iters",
                "log_interval"):
        if c[key] < 1:
            raise ConfigError(f"{key} must be at least 1, got {c[key]}")
    for key in ("max_iters", "max_seconds", "learning_rate", "min_lr", "weight_decay", "grad_clip", "warmup_iters"):
        if not c[key] >= 0:
            raise ConfigError(f"{key} must not be negative, got {c[key]}")
    choices = {"optimizer": ("adamw", "muon"), "compile": ("auto",) + TRUE + FALSE}
    for key, allowed in choices.items():
        if str(c[key]).lower() not in allowed:
            raise ConfigError(f"{key} must be one of {', '.join(allowed[:4])}, got {c[key]!r}")
    try:  # the model's shape: GPTConfig checks it
        GPTConfig(**{k: c[k] for k in MODEL_KEYS})
    except ValueError as e:
        raise ConfigError(str(e)) from None
    if c["eval_only"] and c["init_from"] == "scratch":
        raise ConfigError("eval_only evaluates a trained model: add --init_from=resume or --init_from=gpt2")
    world = int(os.environ.get("WORLD_SIZE", 1))
    if c["gradient_accumulation_steps"] % world:
        raise ConfigError(f"gradient_accumulation_steps={c['gradient_accumulation_steps']} must be divisible by the "
                          f"number of processes ({world}): e.g. double it and halve --batch_size, the same batch")


def adopt_checkpoint(config, given):
    """init_from=resume: ckpt.pt's model keys become the config's; one set otherwise, in a config file or on the
    command line, is an error (a 4-layer model does not become a 6-layer one). Returns (config, ckpt)."""
    path = os.path.join(config["out_dir"], "ckpt.pt")
    ckpt = load_checkpoint(path)
    args = {**vars(GPTConfig()), **current_model_args(ckpt)}
    clash = [f"{k}={config[k]!r} ({given[k]}) but the checkpoint has {args[k]!r}" for k in MODEL_KEYS
             if k in given and k != "attention" and config[k] != args[k]]  # sdpa or manual: the same weights
    if clash:
        raise ConfigError(f"resume {path}: {'; '.join(clash)}")
    trained_with = (ckpt.get("config") or {}).get("optimizer", "adamw")  # nanoGPT's: AdamW
    if trained_with != config["optimizer"]:
        raise ConfigError(f"resume {path}: it was trained with optimizer={trained_with}, not {config['optimizer']}")
    return {**config, **{k: args[k] for k in MODEL_KEYS if k not in given}}, ckpt


def load_data(rank):
    """train and val tokens (memory-mapped) and the dataset's meta; data/<dataset>/prepare.py runs first (on rank 0)
    if the bins are missing."""
    have = all(os.path.exists(os.path.join(data_dir, n)) for n in ("train.bin", "val.bin"))
    prepare = os.path.join(data_dir, "prepare.py")
    if not have and os.path.isfile(prepare) and rank == 0:
        print(f"{data_dir} has no train.bin/val.bin yet: running its prepare.py", flush=True)
        env = dict(os.environ, GLASSGPT_PREPARE_FROM_TRAIN="1")  # it may refuse a 55 GB download unasked
        code = subprocess.run([sys.executable, prepare], cwd=data_dir, env=env).returncode
        if code:
            raise SystemExit(code)
    if dist.is_initialized():
        dist.barrier()
    found = find_meta(data_dir) if os.path.isdir(data_dir) else None
    if not found:
        raise ConfigError(f"no dataset at {data_dir} (its meta.json, train.bin, val.bin): set dataset or data_dir")
    meta = found[0]
    splits = [read_bin(os.path.join(data_dir, f"{s}.bin"), meta) for s in ("train", "val")]
    for split, data in zip(("train", "val"), splits):
        if len(data) <= block_size:
            raise ConfigError(f"{split}.bin has {len(data)} tokens, too few for block_size={block_size}")
    return splits[0], splits[1], meta


def get_windows(data, starts):
    """Inputs x and next-token targets y, (len(starts), block_size) each, in one gather."""
    w = torch.from_numpy(data[starts[:, None] + np.arange(block_size + 1)].astype(np.int64))
    return w[:, :-1].contiguous(), w[:, 1:].contiguous()


def init_model(meta, ckpt):
    """The model init_from names, on device. Any failure to build it is a one-line ConfigError."""
    try:
        if init_from == "scratch":
            model = GPT(GPTConfig(vocab_size=meta["vocab_size"], dropout=dropout, **{k: globals()[k] for k in MODEL_KEYS}))
        elif init_from == "resume":
            model = model_from_checkpoint(ckpt, dropout=dropout, attention=attention)
        else:
            model = model_from_pretrained(init_from, dropout=dropout)
            model.crop_block_size(block_size)  # e.g. fine-tune GPT-2 (1024) with 256-token windows
    except (ImportError, OSError, ValueError) as e:
        raise ConfigError(f"cannot build the model ({init_from}): {str(e).splitlines()[0][:300]}") from None
    if meta["vocab_size"] > model.config.vocab_size:
        raise ConfigError(f"the dataset's vocab_size {meta['vocab_size']} exceeds the model's {model.config.vocab_size}")
    folder = out_dir if init_from == "resume" else init_from
    if os.path.isfile(os.path.join(folder, "meta.json")) and not same_tokenizer(read_meta(folder), meta):
        raise ConfigError(f"{data_dir} is not the tokenizer {folder}'s model was trained with")
    return model.to(device)


def rng_state():
    """The random state dropout draws from, as a list per process (rank 0's is saved)."""
    return {"torch": [torch.get_rng_state()], **({"cuda": [torch.cuda.get_rng_state()]} if "cuda" in device else {})}


def set_rng_state(state):
    torch.set_rng_state(state["torch"][0].cpu())
    if "cuda" in state and "cuda" in device:
        torch.cuda.set_rng_state(state["cuda"][0].cpu())


def main():
    given = {}  # the keys set in config files or on the command line, and where
    config = configure(config_keys(globals()), given=given)
    config["data_dir"] = config["data_dir"] or os.path.join(os.path.dirname(os.path.abspath(__file__)), "data",
                                                            config["dataset"])
    check_config(config)
    config, ckpt = adopt_checkpoint(config, given) if config["init_from"] == "resume" else (config, None)
    if not config["eval_only"]:
        check_writable(config["out_dir"])
    config["device"], device_type, config["dtype"] = resolve_device(config["device"], config["dtype"])
    globals().update(config)  # as nanoGPT: from here on every config key is a plain name

    # processes: torchrun sets RANK, LOCAL_RANK, WORLD_SIZE; each process is one replica with its own slice of the batch
    ddp = int(os.environ.get("RANK", -1)) != -1
    rank, world_size = int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))
    master = rank == 0  # only rank 0 prints and writes files
    stopper = Stopper(master)
    if ddp:
        if device_type == "cuda":  # one GPU per process
            globals()["device"] = config["device"] = f"cuda:{os.environ['LOCAL_RANK']}"
            torch.cuda.set_device(device)
        dist.init_process_group(backend=("nccl" if device_type == "cuda" else "gloo") if backend == "auto" else backend)
    local_procs = int(os.environ.get("LOCAL_WORLD_SIZE", world_size))
    if num_threads or ddp and device_type == "cpu":  # torchrun gives each process 1 thread: share out the cores
        torch.set_num_threads(num_threads or max(1, len(os.sched_getaffinity(0)) // local_procs))
    if device_type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True  # much faster on Ampere+, accurate enough
        torch.backends.cudnn.allow_tf32 = True
    torch.manual_seed(seed + rank)  # dropout differs per process; the weights are rank 0's (DDP broadcasts)
    accum = gradient_accumulation_steps // world_size  # micro-batches per process per iteration
    tokens_per_iter = gradient_accumulation_steps * batch_size * block_size

    # data: the bins are mapped once; the eval windows are fixed, spread over each split
    train_data, val_data, meta = load_data(rank)
    splits = {"train": train_data, "val": val_data}
    eval_starts = {s: np.linspace(0, len(d) - block_size - 1, eval_iters * batch_size).round().astype(np.int64)
                   for s, d in splits.items()}

    # model, optimizer and the state a resume continues
    if init_from in ("scratch", "resume"):  # weights, gradients, optimizer state and a micro-batch's activations
        shape = GPTConfig(vocab_size=meta["vocab_size"], **{k: config[k] for k in MODEL_KEYS})
        check_fits(memory_bytes(shape, optimizer=optimizer)["train_state"] + activation_bytes(shape, batch_size, block_size),
                   device_type, local_procs)
    raw_model = init_model(meta, ckpt)
    ctx = autocast(device_type, dtype)
    if optimizer == "muon":
        native_bf16 = device_type == "cuda" or cpu_has_native_bf16()  # torch's Muon's bf16 is emulated, 10x slower, elsewhere
        opt = configure_muon(raw_model, weight_decay, learning_rate, (beta1, beta2), device_type, muon_lr,
                             muon_momentum, muon_weight_decay, muon_ns_steps, torch.bfloat16 if native_bf16 else torch.float32)
    else:
        opt = raw_model.configure_optimizers(weight_decay, learning_rate, (beta1, beta2), device_type)
    lr_scales = [g.get("lr_scale", 1.0) for g in opt.param_groups]  # Muon's peak lr over AdamW's
    scaler = torch.amp.GradScaler(device_type, enabled=(dtype == "float16"))
    sampler = torch.Generator().manual_seed(seed)  # the same on every process: all draw the same global batch
    iter_num, best_val_loss, trained = 0, math.inf, 0.0
    if ckpt is not None:
        try:
            opt.load_state_dict(ckpt["optimizer"])
        except (ValueError, KeyError, RuntimeError) as e:
            raise ConfigError(f"{out_dir}/ckpt.pt: its optimizer state does not fit this optimizer ({e})") from None
        iter_num, best_val_loss = ckpt["iter_num"], float(ckpt["best_val_loss"])
        trained = float(ckpt.get("trained_seconds", 0.0))
        if "sampler" in ckpt:  # nanoGPT's checkpoints hold no data order or random state: not an exact resume
            sampler.set_state(ckpt["sampler"]["generator"].cpu())
        if "rng" in ckpt and world_size == 1:
            set_rng_state(ckpt["rng"])
    nanogpt = ckpt is not None and is_nanogpt(ckpt)  # a nanoGPT run's ckpt.pt is moved aside, not written over
    del ckpt  # its tensors are in the model and optimizer now
    model = raw_model
    if compile == "auto" and device_type == "cuda" or str(compile).lower() in TRUE:
        if master:
            print("compiling the model (torch.compile): a minute or so on a CPU", flush=True)
        model = torch.compile(raw_model)
    train_model = DDP(model, device_ids=[torch.cuda.current_device()] if device_type == "cuda" else None) if ddp else model
    wandb_run = start_wandb(config) if wandb_log and master else None
    log = RunLog(out_dir, iter_num if init_from == "resume" and not nanogpt else None, meta)
    start_iter, stopped, opt_seconds = iter_num, False, 0.0

    def say(message):
        if master:
            print(message, flush=True)

    def record(entry):
        if master and not eval_only:
            log.write(entry)
            if wandb_run is not None:
                wandb_run.log(entry)

    @torch.no_grad()
    def estimate_loss():
        """Mean loss over each split's fixed eval windows, shared out among the processes; None if a stop came
        first (checked after every batch when alone; under DDP the processes must agree, so only at the end)."""
        out = {}
        model.eval()
        for split, data in splits.items():
            total = torch.zeros(2, device=device)  # the sum of batch losses, and their number
            for k in range(rank, eval_iters, world_size):
                x, y = get_windows(data, eval_starts[split][k * batch_size:(k + 1) * batch_size])
                with ctx:
                    _, loss = model(x.to(device), y.to(device))
                total += torch.stack((loss.float(), torch.ones((), device=device)))
                if stopper.requested and not ddp:
                    model.train()
                    return None
            if ddp:
                dist.all_reduce(total)
            out[split] = (total[0] / total[1]).item()
        model.train()
        return out

    def checkpoint():
        return {"model": raw_model.state_dict(), "optimizer": opt.state_dict(), "model_args": vars(raw_model.config),
                "config": config, "iter_num": iter_num, "best_val_loss": best_val_loss, "trained_seconds": trained,
                "rng": rng_state(), "sampler": {"generator": sampler.get_state()}}

    def save(*names):
        if master:
            state = checkpoint()
            for name in names:
                save_checkpoint(state, os.path.join(out_dir, name))

    params = raw_model.get_num_params(non_embedding=False)
    say(f"{params:,} parameters | vocab {meta['vocab_size']} | train {len(train_data):,} tokens, val {len(val_data):,} | "
        f"{init_from} at iter {iter_num} | {device} {dtype}{' compiled' if model is not raw_model else ''} | "
        f"{world_size} process(es) x {torch.get_num_threads()} thread(s) | {tokens_per_iter:,} tokens per iteration")

    # the training loop
    t0 = time.time()
    while True:
        lr = get_lr(iter_num, trained)
        last = iter_num >= max_iters or (max_seconds > 0 and trained >= max_seconds)
        if iter_num % eval_interval == 0 or last or eval_only:
            losses = estimate_loss()
            if losses is None:  # a stop cut the eval short: save what the last iteration left
                stopped = True
                break
            say(f"step {iter_num}: train loss {losses['train']:.4f}, val loss {losses['val']:.4f}")
            if not (init_from == "resume" and iter_num == start_iter):  # the run it resumes logged that one
                record({"iter": iter_num, "train_loss": losses["train"], "val_loss": losses["val"], "lr": lr,
                        "elapsed": time.time() - t0})
            if iter_num > start_iter:  # at the start there is nothing new to save
                improved = losses["val"] < best_val_loss
                best_val_loss = min(best_val_loss, losses["val"])
                names = (["ckpt.pt"] if improved or always_save_checkpoint else []) + (["best.pt"] if improved else [])
                save(*names)
        if last or eval_only:
            break

        # one iteration: accum micro-batches of the global batch (this process's slice), then one optimizer step
        t = time.time()
        before = (sampler.get_state(), rng_state())  # where a stop mid-iteration puts things back
        starts = torch.randint(len(train_data) - block_size, (gradient_accumulation_steps * batch_size,),
                               generator=sampler).numpy()[rank * accum * batch_size:(rank + 1) * accum * batch_size]
        xs, ys = (v.view(accum, batch_size, block_size).to(device) for v in get_windows(train_data, starts))
        for g, scale in zip(opt.param_groups, lr_scales):
            g["lr"] = lr * scale
        loss_sum = torch.zeros((), device=device)
        for micro_step in range(accum):
            if stopper.requested and not ddp:
                break
            # under DDP the gradients are averaged across processes on the last micro-batch only
            with train_model.no_sync() if ddp and micro_step < accum - 1 else nullcontext():
                with ctx:
                    _, loss = train_model(xs[micro_step], ys[micro_step])
                loss_sum += loss.detach()
                scaler.scale(loss / accum).backward()  # the mean over micro-batches, as one big batch
        stats = torch.stack((loss_sum / accum, torch.tensor(float(stopper.requested), device=device),
                             torch.tensor(time.time() - t + opt_seconds, device=device)))
        if ddp:  # one collective: the logged loss, whether any process was asked to stop, the step's time
            dist.all_reduce(stats)
            stats /= world_size
        if stats[1] > 0:  # drop the half-done iteration: the state is as the last complete one left it
            sampler.set_state(before[0])
            set_rng_state(before[1])
            opt.zero_grad(set_to_none=True)
            stopped = True
            break
        loss_value, dt = stats[0].item(), stats[2].item()  # dt: this step's forward and backward, the last one's update
        if not math.isfinite(loss_value):
            raise ConfigError(f"loss is {loss_value} at iter {iter_num}: stopped; ckpt.pt, if any, is from the last eval")
        grad_norm, t = None, time.time()
        if grad_clip > 0:
            scaler.unscale_(opt)
            grad_norm = torch.nn.utils.clip_grad_norm_(raw_model.parameters(), grad_clip).item()
        scaler.step(opt)
        scaler.update()
        opt.zero_grad(set_to_none=True)
        opt_seconds = time.time() - t
        trained += dt
        if iter_num == start_iter and master and not eval_only:  # the first complete iteration: the run is now worth keeping
            moved = log.open()
            if moved:
                say(f"{out_dir} held an earlier run: moved to {moved}")
        stopper.armed = True
        if iter_num % log_interval == 0:
            record({"iter": iter_num, "loss": loss_value, "lr": lr, "tokens_per_sec": tokens_per_iter / dt,
                    "elapsed": time.time() - t0, "grad_norm": grad_norm})
            say(f"iter {iter_num}: loss {loss_value:.4f}, time {dt * 1000:.2f}ms, lr {lr:.2e}, "
                f"{tokens_per_iter / dt:,.0f} tok/s")
        iter_num += 1

    # the end: a stop saves the last complete iteration; the log is drawn
    if stopped:
        save("ckpt.pt")
        say(f"saved {out_dir}/ckpt.pt at iter {iter_num}; continue with --init_from=resume")
    elif iter_num > start_iter:
        say(f"done: iter {iter_num}, best val loss {best_val_loss:.4f}, checkpoints in {out_dir}")
    elif not eval_only:
        say(f"nothing to train: iter {iter_num} has reached max_iters={max_iters} or the max_seconds budget")
    log.close()
    records = read_log(os.path.join(out_dir, "log.jsonl")) if master and log.file is not None else []
    if records and not plot_losses(records, os.path.join(out_dir, "loss.png"), title=out_dir):
        say("no loss.png: drawing it needs matplotlib (pip install matplotlib)")
    if wandb_run is not None:
        wandb_run.finish()
    if ddp:
        dist.barrier()
        dist.destroy_process_group()
    return 128 + (stopper.signum or signal.SIGTERM) if stopped else 0  # a peer's stop, under DDP


def start_wandb(config):
    """A wandb run to log to, or None (with one line) where wandb cannot start: train anyway."""
    try:
        import wandb
        return wandb.init(project=wandb_project, name=wandb_run_name, config=config)
    except Exception as e:  # not installed, not logged in, offline
        print(f"warning: wandb logging is off ({type(e).__name__}: {e})", file=sys.stderr)
        return None


if __name__ == "__main__":
    run(lambda: sys.exit(main()))
