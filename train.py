"""
Train a GPT: from scratch, from a checkpoint, or from OpenAI's GPT-2 weights; on a CPU, a GPU, or many
processes with torchrun (PyTorch DDP, or FSDP2 for a model one GPU cannot hold).

    python train.py config/tiny.py                         # char-level Shakespeare in 3 minutes on a CPU
    python train.py config/tiny.py --batch_size=16 --n_layer=4
    python train.py --init_from=resume --out_dir=out-tiny  # continue that run, as it was configured
    torchrun --standalone --nproc_per_node=2 train.py config/tiny.py --gradient_accumulation_steps=2 --batch_size=16

out_dir receives ckpt.pt (the latest state, enough to resume exactly), best.pt (the lowest val loss), log.jsonl,
meta.json and loss.png; an earlier run there is moved to out_dir/previous/ first (rundir.py). Ctrl-C or SIGTERM
saves ckpt.pt as of the last complete iteration, exits 130 or 143 (stopping.py); before the first it saves nothing.
"""

import math
import os
import signal
import subprocess
import sys
import time

from device import autocast, check_fits, compiling, peak_flops, resolve_device  # before torch: OpenMP's setting
from device import cpu_attention_in_float32
import numpy as np
import torch
import torch.distributed as dist

import parallel
from checkpoint import (current_model_args, is_nanogpt, load_checkpoint, model_from_checkpoint,
                        model_from_pretrained, rng_state, save_checkpoint, set_rng_state)
from configurator import ConfigError, config_keys, configure, did_you_mean, run, speak
from model import GPT, GPTConfig
from muon import configure_muon
from rundir import RunLog, check_writable, plot_losses, read_log
from sizing import built_costs
from stopping import Stopper
from tokenizer import find_meta, padded_vocab, read_bin, read_meta, same_tokenizer

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
lr_decay_iters = 0  # the cosine reaches min_lr here; 0: at max_iters (about max_iters, per Chinchilla)
min_lr = 6e-5  # the learning rate after the decay: about learning_rate / 10, per Chinchilla
# system
backend = "auto"  # torchrun's processes talk over "nccl" on CUDA, "gloo" otherwise
fsdp = False  # under torchrun: shard parameters, gradients and optimizer state over the processes (FSDP2), not copy them
fsdp_sync_once = False  # fsdp: reduce-scatter gradients once an iteration, not per micro-batch (+4 bytes a parameter)
device = "auto"  # "auto" (cuda, then mps, then cpu) | "cpu" | "cuda" | "cuda:1" | "mps"
dtype = "auto"  # "auto" (bfloat16 where the device has it natively, float16 on older GPUs, else float32) | "float32" | ...
compile = "auto"  # torch.compile the model: "auto" (on CUDA) | "true" | "false"
num_threads = 0  # CPU threads per process; 0: torch's default, shared out among the processes under torchrun
seed = 1337  # initial weights, data order and dropout all follow from it
# -----------------------------------------------------------------------------
MODEL_KEYS = ("n_layer", "n_head", "n_embd", "block_size", "bias", "norm", "position", "attention", "activation",
              "tie_weights")


def progress(it, trained=0.0):
    """How far the lr's decay has got, 0 to 1: by iterations (lr_decay_iters) or, with a time budget, by seconds of
    training steps, whichever is further along: the run ends decayed wherever it ends."""
    done = (it - warmup_iters) / max((lr_decay_iters or max_iters) - warmup_iters, 1)
    return min(max(done, trained / max_seconds if max_seconds > 0 else 0.0, 0.0), 1.0)


def get_lr(it, done):
    """Linear warmup, then cosine decay to min_lr as done (the progress) goes from 0 to 1."""
    if not decay_lr:
        return learning_rate
    if it < warmup_iters:
        return learning_rate * (it + 1) / (warmup_iters + 1)
    return min_lr + 0.5 * (1.0 + math.cos(math.pi * done)) * (learning_rate - min_lr)


def check_config(c):
    """The values configurator cannot check by type alone (c: the config). Raises ConfigError."""
    for keys, low, high in ((("batch_size", "block_size", "gradient_accumulation_steps", "eval_interval", "eval_iters",
                              "log_interval"), 1, math.inf),
                            (("max_iters", "max_seconds", "learning_rate", "min_lr", "weight_decay", "grad_clip",
                              "warmup_iters", "lr_decay_iters", "muon_lr", "muon_weight_decay"), 0, math.inf),
                            (("beta1", "beta2", "muon_momentum"), 0, 1)):  # decays: 1 would never forget
        for key in (k for k in keys if not low <= c[k] < high):  # (nan fails too)
            raise ConfigError(f"{key} must be in [{low}, {high}), got {c[key]}")
    c["compile"] = str(c["compile"]).lower()  # a config file's True, --compile=False
    for key, allowed in {"optimizer": ("adamw", "muon"), "compile": ("auto", "true", "false")}.items():
        if c[key] not in allowed:
            raise ConfigError(f"{key} must be one of {', '.join(allowed)}, got {c[key]!r}")
    if c["fsdp"] and c["optimizer"] == "muon":
        raise ConfigError("optimizer=muon orthogonalises whole matrices, which fsdp splits over the processes: "
                          "use optimizer=adamw with fsdp")
    try:  # the model's shape: GPTConfig checks it
        GPTConfig(dropout=c["dropout"], **{k: c[k] for k in MODEL_KEYS})
    except ValueError as e:
        raise ConfigError(str(e)) from None
    if c["eval_only"] and c["init_from"] == "scratch":
        raise ConfigError("eval_only evaluates a trained model: add --init_from=resume or --init_from=gpt2")
    world = int(os.environ.get("WORLD_SIZE", 1))
    if c["gradient_accumulation_steps"] % world:
        raise ConfigError(f"gradient_accumulation_steps={c['gradient_accumulation_steps']} must be divisible by the "
                          f"number of processes ({world}): e.g. double it and halve --batch_size, the same batch")


def adopt_checkpoint(config, given):
    """init_from=resume: the run in out_dir is its own config (but nanoGPT's device keys: its GPU's). Every key comes
    from its ckpt.pt but those given in a config file or on the command line; a given model key or optimizer that
    differs is an error, any other is named once (a new max_iters is how a run is extended). (config, ckpt)."""
    path = os.path.join(config["out_dir"], "ckpt.pt")
    ckpt = load_checkpoint(path, mmap=True)  # the processes of a machine share one copy: the file's pages
    skip = ("init_from", "out_dir", "eval_only") + ("device", "dtype", "compile", "backend") * is_nanogpt(ckpt)
    run = {k: v for k, v in (ckpt.get("config") or {}).items() if k in config and k not in skip}
    run = {**run, "optimizer": run.get("optimizer", "adamw"), **{**vars(GPTConfig()), **current_model_args(ckpt)}}
    differ = [k for k in given if k in run and k != "attention" and config[k] != run[k]]  # sdpa, manual: same weights
    clash = [f"{k}={config[k]!r} ({given[k]}) but the run has {run[k]!r}" for k in differ
             if k in MODEL_KEYS + ("optimizer",)]  # the weights and the optimizer state would not fit
    if clash:
        raise ConfigError(f"resume {path}: {'; '.join(clash)}")
    if differ and os.environ.get("RANK", "0") == "0":
        print(f"resuming {path} with " + ", ".join(f"{k}={config[k]!r} (the run's {run[k]!r})" for k in differ))
    return {**config, **{k: v for k, v in run.items() if k in config and k not in given}, "init_from": "resume"}, ckpt


def restarted(out_dir):
    """True in a process torchrun restarted (a worker died; --max-restarts) once this job's run has saved ckpt.pt: it
    picks that run up, not an earlier run's checkpoint in out_dir, nor starts it over."""
    path = os.path.join(out_dir, "ckpt.pt")
    return (int(os.environ.get("TORCHELASTIC_RESTART_COUNT", 0)) > 0 and os.path.isfile(path)
            and load_checkpoint(path, mmap=True).get("torchrun_id") == os.environ.get("TORCHELASTIC_RUN_ID"))


def load_data(rank):
    """train and val tokens (memory-mapped) and the dataset's meta; data/<dataset>/prepare.py runs first (on rank 0)
    if the bins are missing."""
    have = all(os.path.exists(os.path.join(data_dir, n)) for n in ("train.bin", "val.bin"))
    prepare = os.path.join(data_dir, "prepare.py")
    if not have and os.path.isfile(prepare) and rank == 0:  # it says what it does, or refuses in one line (55 GB)
        env = dict(os.environ, GLASSGPT_PREPARE_FROM_TRAIN="1")
        code = subprocess.run([sys.executable, prepare], env=env).returncode
        if code:
            raise SystemExit(code)
    if dist.is_initialized():
        dist.barrier()
    found = find_meta(data_dir) if os.path.isdir(data_dir) else None
    if not found:
        parent = os.path.dirname(data_dir)
        datasets = os.listdir(parent) if os.path.isdir(parent) else []
        near = did_you_mean(os.path.basename(data_dir), datasets)
        raise ConfigError(f"no dataset at {data_dir}{near}: set dataset or data_dir (a folder with "
                          "meta.json, train.bin and val.bin)")
    splits = {s: read_bin(os.path.join(data_dir, f"{s}.bin"), found[0]) for s in ("train", "val")}
    for split, data in splits.items():
        if len(data) <= block_size:
            raise ConfigError(f"{split}.bin has {len(data)} tokens, too few for block_size={block_size}")
    return splits["train"], splits["val"], found[0]


def get_windows(data, starts):
    """Inputs x and next-token targets y, (len(starts), block_size) each, in one gather, on the device: to a GPU
    from pinned memory without waiting (as nanoGPT), so the host gathers the next batch while the GPU computes."""
    w = torch.from_numpy(data[starts[:, None] + np.arange(block_size + 1)].astype(np.int64))
    x, y = w[:, :-1].contiguous(), w[:, 1:].contiguous()
    return (x.pin_memory().to(device, non_blocking=True), y.pin_memory().to(device, non_blocking=True)) \
        if "cuda" in device else (x.to(device), y.to(device))


def init_model(meta, ckpt, shape):
    """The model init_from names (from scratch: of shape), on the CPU; any failure is a one-line ConfigError."""
    try:
        if init_from == "scratch":
            model = GPT(shape)
        elif init_from == "resume":
            model = model_from_checkpoint(ckpt, dropout=dropout, attention=attention)
        else:
            model = model_from_pretrained(init_from, dropout=dropout)
            model.crop_block_size(block_size)  # e.g. fine-tune GPT-2 (1024) with 256-token windows
    except (ImportError, OSError, ValueError) as e:
        raise ConfigError(f"cannot build the model ({init_from}): {str(e).splitlines()[0][:300]}") from None
    if model.config.vocab_size not in (meta["vocab_size"], padded_vocab(meta)):  # as sample.py: not this model's
        raise ConfigError(f"the dataset's vocab_size {meta['vocab_size']} is not the model's {model.config.vocab_size}")
    folder = out_dir if init_from == "resume" else init_from
    if os.path.isfile(os.path.join(folder, "meta.json")) and not same_tokenizer(read_meta(folder), meta):
        raise ConfigError(f"{data_dir} is not the tokenizer {folder}'s model was trained with")
    return model


def main():
    given = {}  # the keys set in config files or on the command line, and where
    config = configure(config_keys(globals()), given=given)
    resume = config["init_from"] == "resume" or restarted(config["out_dir"])  # torchrun's restart: its run goes on
    config, ckpt = adopt_checkpoint(config, given) if resume else (config, None)
    check_config(config)
    configured = dict(config)  # ckpt.pt's config: where a resume runs, "auto" and data/<dataset> are found anew
    config["data_dir"] = config["data_dir"] or os.path.join(os.path.dirname(os.path.abspath(__file__)), "data",
                                                            config["dataset"])
    if not config["eval_only"] and os.environ.get("RANK", "0") == "0":  # rank 0 alone writes (two would race)
        check_writable(config["out_dir"])
    config["device"], device_type, config["dtype"] = resolve_device(config["device"], config["dtype"])
    globals().update(config)  # as nanoGPT: from here on every config key is a plain name

    # processes: under torchrun each trains on its own slice of every batch (parallel.py); only rank 0 speaks and writes
    rank, world_size, local_procs = parallel.start(device, device_type, backend, num_threads)
    master = rank == 0
    stopper = Stopper(master)
    torch.manual_seed(seed)  # the same initial weights in every process; dropout differs per process (below)
    accum = gradient_accumulation_steps // world_size  # micro-batches per process per iteration
    tokens_per_iter = gradient_accumulation_steps * batch_size * block_size

    # data: the bins are mapped once; the eval windows are fixed, spread over each split
    train_data, val_data, meta = load_data(rank)
    splits = {"train": train_data, "val": val_data}
    eval_starts = {s: np.linspace(0, len(d) - block_size - 1, eval_iters * batch_size).round().astype(np.int64)
                   for s, d in splits.items()}

    # model, optimizer and the state a resume continues; what a step costs (FLOPs, bytes), counted on the model as
    # model.py builds it (sizing.py) but before it is built, where it can be: a run that cannot fit is refused
    shape = GPTConfig(vocab_size=padded_vocab(meta), dropout=dropout, **{k: config[k] for k in MODEL_KEYS})
    raw_model = None if init_from in ("scratch", "resume") else init_model(meta, ckpt, shape)  # GPT-2's: once loaded
    cost = built_costs(raw_model.config if raw_model else shape, batch_size, optimizer, world_size if fsdp else 1,
                       dtype if device_type == "cuda" else "float32")  # a CPU's bf16 runs peaked as high as float32's
    check_fits(cost, device_type, local_procs)
    raw_model = raw_model or init_model(meta, ckpt, shape)
    compiled = compile == "true" or compile == "auto" and device_type == "cuda"
    model = parallel.wrap(raw_model, device, fsdp, compiled, dtype, fsdp_sync_once)  # FSDP shards raw_model in place
    torch.manual_seed(seed + rank)
    ctx = autocast(device_type, dtype)
    cpu_attention_in_float32(raw_model, device_type, dtype)  # device.py says why
    opt = (configure_muon(raw_model, weight_decay, learning_rate, (beta1, beta2), device_type, muon_lr, muon_momentum,
                          muon_weight_decay, muon_ns_steps) if optimizer == "muon" else
           raw_model.configure_optimizers(weight_decay, learning_rate, (beta1, beta2), device_type))
    lr_scales = [g.get("lr_scale", 1.0) for g in opt.param_groups]  # Muon's peak lr over AdamW's
    scaler = parallel.grad_scaler(device_type, dtype, fsdp)
    sampler = torch.Generator().manual_seed(seed)  # the same on every process: all draw the same global batch
    iter_num, best_val_loss, trained, reached = 0, math.inf, 0.0, 0.0  # reached: the lr schedule's progress
    if ckpt is not None:
        try:
            parallel.load_optimizer(opt, ckpt["optimizer"])
            scaler.load_state_dict(ckpt.get("scaler") or scaler.state_dict())  # float16's loss scale
        except (ValueError, KeyError, RuntimeError) as e:
            raise ConfigError(f"{out_dir}/ckpt.pt: its optimizer state does not fit this optimizer ({e})") from None
        iter_num, best_val_loss, trained = ckpt["iter_num"], float(ckpt["best_val_loss"]), ckpt.get("trained_seconds", 0.0)
        reached = ckpt.get("progress", 0.0)  # a longer run stretches what is left of the decay; the lr never climbs back
        if "sampler" in ckpt:  # nanoGPT's checkpoints hold no data order or random state: not an exact resume
            sampler.set_state(ckpt["sampler"]["generator"].cpu())
        if "rng" in ckpt and world_size == 1:
            set_rng_state(ckpt["rng"], device)
    nanogpt = ckpt is not None and is_nanogpt(ckpt)  # a nanoGPT run's ckpt.pt is moved aside, not written over
    del ckpt  # its tensors are in the model and optimizer now
    log = RunLog(out_dir, iter_num if init_from == "resume" and not nanogpt else None, meta,
                 wandb=dict(project=wandb_project, name=wandb_run_name, config=config) if wandb_log and master else None)
    start_iter, stopped, worse, best_train = iter_num, False, 0, math.inf  # worse: evals since the best (None: said)
    flops_per_iter, peak = cost["flops_per_token"] * tokens_per_iter, peak_flops(device_type, dtype)

    def say(message):  # a closed stdout (| head) costs nothing: the run trains on, its log in log.jsonl
        if master:
            speak(message)

    def record(entry):
        if master and not eval_only:
            log.write(entry)

    def finite(value, what):
        if not math.isfinite(value):
            raise ConfigError(f"{what} is {value} at iter {iter_num}: stopped; ckpt.pt, if any, is from the last eval")

    @torch.no_grad()
    def estimate_loss():
        """Mean loss over each split's fixed eval windows, shared out among the processes; None if a stop came
        first (checked after every batch when alone; the processes must agree, so together only at the end)."""
        out = {}
        model.eval()
        for split, data in splits.items():
            total = torch.zeros(2, device=device)  # the sum of batch losses, and their number
            for k in range(rank, -(-eval_iters // world_size) * world_size, world_size):  # as many in each process
                if stopper.requested and world_size == 1:
                    break
                with ctx:  # (past eval_iters a batch is run, for FSDP's collectives, and weighs nothing)
                    _, loss = model(*get_windows(data, eval_starts[split][k % eval_iters * batch_size:][:batch_size]))
                total += torch.stack((loss.float(), torch.ones((), device=device))) * (k < eval_iters)
            total = parallel.mean(total)
            out[split] = (total[0] / total[1]).item()
        model.train()
        return None if parallel.agree(stopper.requested, 0.0)[0] else out

    def save(*names):  # every process takes part: under FSDP each gathers its shards to rank 0, which writes
        state = {"model": parallel.gathered(raw_model.state_dict(), master),
                 "optimizer": parallel.gathered(opt.state_dict(), master), "model_args": vars(raw_model.config),
                 "config": configured, "iter_num": iter_num, "best_val_loss": best_val_loss, "trained_seconds": trained,
                 "rng": rng_state(device), "sampler": {"generator": sampler.get_state()}, "scaler": scaler.state_dict(),
                 "torchrun_id": os.environ.get("TORCHELASTIC_RUN_ID"), "progress": reached}
        for name in names if master else ():
            save_checkpoint(state, os.path.join(out_dir, name))

    say(f"{raw_model.get_num_params(non_embedding=False):,} parameters | vocab {meta['vocab_size']} | train "
        f"{len(train_data):,} tokens, val {len(val_data):,} | {init_from} at iter {iter_num} | {device} {dtype}"
        f"{' compiled' if compiled else ''} | {world_size} process(es){' (fsdp)' * (fsdp and world_size > 1)} x "
        f"{torch.get_num_threads()} thread(s) | {tokens_per_iter:,} tokens per iteration")
    if compiled:  # compiling is not training: a step's graph and an eval's compile here, untimed, on one micro-batch
        t, before, (x, y) = time.time(), rng_state(device), get_windows(train_data, np.arange(batch_size))
        with compiling(), ctx:
            model(x, y)[1].backward()
            with torch.no_grad():
                model.eval()(x, y)
        model.train()
        opt.zero_grad(set_to_none=True)
        set_rng_state(before, device)
        say(f"compiled in {time.time() - t:.1f}s (not counted as training)")

    # the training loop
    t0, logged = time.time(), (iter_num, trained)  # at the last log: the iteration and the training seconds
    while True:
        stopped, trained = parallel.agree(stopper.requested, trained)  # processes stop and keep time as one (alone: as is)
        reached = max(reached, progress(iter_num, trained))
        lr = get_lr(iter_num, reached)
        last = iter_num >= max_iters or (max_seconds > 0 and trained >= max_seconds)
        if stopped or last and iter_num == start_iter and not eval_only:  # a stop after a whole iteration; or done
            break
        if iter_num % eval_interval == 0 or last or eval_only:
            losses = estimate_loss()
            if losses is None:  # a stop cut the eval short: save what the last iteration left
                stopped = True
                break
            finite(losses["val"], "the val loss")
            say(f"step {iter_num}: train loss {losses['train']:.4f}, val loss {losses['val']:.4f}")
            if not (init_from == "resume" and iter_num == start_iter):  # the run it resumes logged that one
                record({"iter": iter_num, "train_loss": losses["train"], "val_loss": losses["val"], "lr": lr,
                        "elapsed": time.time() - t0})
            if iter_num > start_iter:  # at the start there is nothing new to save
                improved = losses["val"] < best_val_loss
                best_val_loss, best_train = (losses["val"], losses["train"]) if improved else (best_val_loss, best_train)
                worse = None if worse is None else 0 if improved else worse + 1
                if worse and worse >= 3 and losses["train"] < best_train:  # the train split is learned, not the text
                    say(f"the val loss has not improved on {best_val_loss:.4f} for 3 evals (train loss now "
                        f"{losses['train']:.4f}): overfitting; best.pt keeps the best (docs/training.md)")
                    worse = None  # said once
                if improved or always_save_checkpoint:
                    save(*["ckpt.pt"] + (["best.pt"] if improved else []))
        if last or eval_only:
            break

        # one iteration: accum micro-batches of the global batch (this process's slice), then one optimizer step.
        # Nothing here waits on a GPU but the log every log_interval: the host runs ahead, gathering the next batch
        t = time.time()
        before = (sampler.get_state(), rng_state(device))  # where a stop mid-iteration puts things back
        starts = torch.randint(len(train_data) - block_size, (gradient_accumulation_steps * batch_size,),
                               generator=sampler).numpy()[rank * accum * batch_size:(rank + 1) * accum * batch_size]
        xs, ys = (v.view(accum, batch_size, block_size) for v in get_windows(train_data, starts))
        for g, scale in zip(opt.param_groups, lr_scales):
            g["lr"] = lr * scale
        loss_sum = torch.zeros((), device=device)
        for micro_step in range(accum):
            if stopper.requested and world_size == 1:
                break
            with parallel.no_sync(model, micro_step == accum - 1):  # DDP averages grads on the last one (alone: nothing)
                with ctx:
                    _, loss = model(xs[micro_step], ys[micro_step])
                loss_sum += loss.detach()
                scaler.scale(loss / accum).backward()  # the mean over micro-batches, as one big batch
        if stopper.requested and world_size == 1:  # alone, drop the half-done iteration: as the last one left it
            sampler.set_state(before[0])
            set_rng_state(before[1], device)
            opt.zero_grad(set_to_none=True)
            stopped = True
            break
        stats = {"loss": loss_sum / accum}  # what the iteration logs: one entry each (below)
        if grad_clip > 0:
            scaler.unscale_(opt)
            stats["grad_norm"] = parallel.whole(torch.nn.utils.clip_grad_norm_(raw_model.parameters(), grad_clip))
        scaler.step(opt)
        scaler.update()
        opt.zero_grad(set_to_none=True)
        if iter_num == start_iter and master and not eval_only:  # the first complete iteration: the run is now worth keeping
            moved = log.open()
            if moved:
                say(f"{out_dir} held an earlier run: moved to {moved}")
        stopper.armed = True
        # the one wait on the GPU, every log_interval: stats averaged over the processes (alone, as they are). To log
        # one more number, add a tensor the step has to stats (a flag set in a compiled model recompiles it: slow)
        values = None if iter_num % log_interval else dict(zip(stats, parallel.mean(torch.stack([*stats.values()])).tolist()))
        trained += time.time() - t  # the host's seconds: between two waits on the GPU, the GPU's too
        if values:
            finite(values["loss"], "the loss")
            dt = (trained - logged[1]) / (iter_num + 1 - logged[0])  # seconds per iteration since the last log
            mfu = flops_per_iter / dt / (peak * world_size) if peak else None
            record({"iter": iter_num, "lr": lr, "tokens_per_sec": tokens_per_iter / dt, "elapsed": time.time() - t0,
                    "mfu": mfu, **values})
            say(f"iter {iter_num}: " + ", ".join(f"{k} {v:.4f}" for k, v in values.items()) + f", time "
                f"{dt * 1000:.2f}ms, lr {lr:.2e}, {tokens_per_iter / dt:,.0f} tok/s" + (f", mfu {mfu:.1%}" if mfu else ""))
            logged = (iter_num + 1, trained)
        iter_num += 1

    # the end: a stop saves the last complete iteration; the log is drawn
    if stopped:
        save("ckpt.pt")
        say(f"saved {out_dir}/ckpt.pt at iter {iter_num}; continue with --init_from=resume --out_dir={out_dir}")
    elif iter_num > start_iter:
        say(f"done: iter {iter_num}, best val loss {best_val_loss:.4f}, checkpoints in {out_dir}")
    elif not eval_only:
        key, value = ("max_seconds", max_seconds) if 0 < max_seconds <= trained else ("max_iters", max_iters)
        say(f"nothing to train: iter {iter_num} has reached {key}={value:g}: to train on, raise it, e.g. --{key}="
            f"{2 * value:g} (the lr goes on from where its decay got to)")
    log.close()
    records = read_log(os.path.join(out_dir, "log.jsonl")) if master and log.file is not None else []
    if records and not plot_losses(records, os.path.join(out_dir, "loss.png"), title=out_dir):
        say("no loss.png: drawing it needs matplotlib (pip install matplotlib)")
    del model, raw_model, opt  # before the process group goes (parallel.end)
    parallel.end()
    return 128 + (stopper.signum or signal.SIGTERM) if stopped else 0  # a peer's stop, under DDP


if __name__ == "__main__":
    run(lambda: sys.exit(main()))
