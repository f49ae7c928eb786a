"""
Train a GPT: from scratch, from a checkpoint, or from OpenAI's GPT-2 weights; on a CPU, a GPU, or
many processes with torchrun (PyTorch DDP, or FSDP2 for a model one GPU cannot hold).

    python train.py config/tiny.py                         # char-level Shakespeare, 3 minutes, CPU
    python train.py config/tiny.py --batch_size=16 --n_layer=4
    python train.py --init_from=resume --out_dir=out-tiny  # continue that run, as it was configured
    torchrun --standalone --nproc_per_node=2 train.py config/tiny.py \\
        --gradient_accumulation_steps=2 --batch_size=16

out_dir receives ckpt.pt (the latest state, enough to resume exactly), best.pt (the lowest val
loss), log.jsonl, meta.json and loss.png; an earlier run there is moved to out_dir/previous/ first
(rundir.py). Ctrl-C or SIGTERM saves ckpt.pt as of the last complete iteration and exits 130 or 143
(stopping.py); before the first iteration it saves nothing.
"""

import math
import os
import signal
import subprocess
import sys
import time
from types import SimpleNamespace

from device import autocast, check_fits, compiling, peak_flops, resolve_device  # before torch
from device import cpu_attention_in_float32
import numpy as np
import torch
import torch.distributed as dist

import parallel
from checkpoint import (MODEL_KEYS, adopt_checkpoint, is_nanogpt, model_from_checkpoint,
                        model_from_pretrained, restarted, rng_state, save_checkpoint, set_rng_state)
from configurator import ConfigError, config_keys, configure, did_you_mean, run, speak
from model import GPT, GPTConfig
from muon import configure_muon
from rundir import RunLog, check_writable, lock, plot_losses, read_log
from sizing import (flops_per_token, instantiated_params, memory_bytes, param_counts,
                    training_bytes)
from stopping import Stopper
from tokenizer import find_meta, padded_vocab, read_bin, read_meta, same_tokenizer

# -----------------------------------------------------------------------------
# default config values: GPT-2 (124M) on OpenWebText, as nanoGPT. config/*.py and --key=value
# override them; the comment beside each is its --help.
# I/O
out_dir = "out"  # the run's folder: ckpt.pt, best.pt, log.jsonl, meta.json, loss.png
eval_interval = 2000  # evaluate and save every this many iterations
log_interval = 1  # print and log the training loss every this many iterations
eval_iters = 200  # eval batches per split, always the same windows of the data
eval_only = False  # evaluate once, then exit, writing nothing
always_save_checkpoint = True  # ckpt.pt at every eval; False: only when the val loss improves
init_from = "scratch"  # "scratch" | "resume" (out_dir/ckpt.pt) | "gpt2" ... | a Hugging Face folder
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
max_seconds = 0.0  # > 0: stop after this many seconds of training steps, the lr decaying over them
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
lr_decay_iters = 0  # the cosine reaches min_lr here; 0: at max_iters (per Chinchilla)
min_lr = 6e-5  # the learning rate after the decay: about learning_rate / 10, per Chinchilla
# system
backend = "auto"  # torchrun's processes talk over "nccl" on CUDA, "gloo" otherwise
fsdp = False  # under torchrun: shard parameters, gradients and optimizer state (FSDP2), not copy
fsdp_sync_once = False  # fsdp: reduce-scatter gradients once an iteration (+4 bytes a parameter)
device = "auto"  # "auto" (cuda, then mps, then cpu) | "cpu" | "cuda" | "cuda:1" | "mps"
dtype = "auto"  # "auto" (bfloat16 where native, float16 on older GPUs, else float32) | "float32"
compile = "auto"  # torch.compile the model: "auto" (on CUDA) | "true" | "false"
num_threads = 0  # CPU threads per process; 0: torch's, shared out among the processes of torchrun
seed = 1337  # initial weights, data order and dropout all follow from it
# -----------------------------------------------------------------------------


def progress(it, trained, c):
    """How far the lr's decay has got, 0 to 1 (c: the config): by iterations or, with a time
    budget, by seconds of training steps, whichever is further along: the run ends decayed wherever
    it ends."""
    done = (it - c.warmup_iters) / max((c.lr_decay_iters or c.max_iters) - c.warmup_iters, 1)
    if c.max_seconds > 0:
        done = max(done, trained / c.max_seconds)
    return min(max(done, 0.0), 1.0)


def get_lr(it, done, c):
    """Linear warmup, then cosine decay to min_lr as done (the progress) goes from 0 to 1."""
    if not c.decay_lr:
        return c.learning_rate
    if it < c.warmup_iters:
        return c.learning_rate * (it + 1) / (c.warmup_iters + 1)
    return c.min_lr + 0.5 * (1.0 + math.cos(math.pi * done)) * (c.learning_rate - c.min_lr)


def check_config(config):
    """The values configurator cannot check by type alone. Raises ConfigError."""
    at_least_1 = ("batch_size", "block_size", "gradient_accumulation_steps", "eval_interval",
                  "eval_iters", "log_interval")
    at_least_0 = ("max_iters", "max_seconds", "learning_rate", "min_lr", "weight_decay",
                  "grad_clip", "warmup_iters", "lr_decay_iters", "muon_lr", "muon_weight_decay")
    decays = ("beta1", "beta2", "muon_momentum")  # 1 would never forget
    for keys, low, high in ((at_least_1, 1, math.inf), (at_least_0, 0, math.inf), (decays, 0, 1)):
        for key in (k for k in keys if not low <= config[k] < high):  # (nan fails too)
            raise ConfigError(f"{key} must be in [{low}, {high}), got {config[key]}")
    config["compile"] = str(config["compile"]).lower()  # a config file's True, --compile=False
    choices = {"optimizer": ("adamw", "muon"), "compile": ("auto", "true", "false")}
    for key, allowed in choices.items():
        if config[key] not in allowed:
            raise ConfigError(f"{key} must be one of {', '.join(allowed)}, got {config[key]!r}")
    if config["fsdp"] and config["optimizer"] == "muon":
        raise ConfigError("optimizer=muon orthogonalises whole matrices, which fsdp splits over "
                          "the processes: use optimizer=adamw with fsdp")
    try:  # the model's shape: GPTConfig checks it
        GPTConfig(dropout=config["dropout"], **{k: config[k] for k in MODEL_KEYS})
    except ValueError as e:
        raise ConfigError(str(e)) from None
    if config["eval_only"] and config["init_from"] == "scratch":
        raise ConfigError("eval_only evaluates a trained model: add --init_from=resume or gpt2")
    world = int(os.environ.get("WORLD_SIZE", 1))
    accum = config["gradient_accumulation_steps"]
    if accum % world:
        raise ConfigError(f"gradient_accumulation_steps={accum} must be divisible by the number of "
                          f"processes ({world}): e.g. double it and halve --batch_size, the same "
                          "batch")


def load_data(c, rank):
    """train and val tokens (memory-mapped) and the dataset's meta (c: the config);
    data/<dataset>/prepare.py runs first (on rank 0) if the bins are missing."""
    have = all(os.path.exists(os.path.join(c.data_dir, n)) for n in ("train.bin", "val.bin"))
    prepare = os.path.join(c.data_dir, "prepare.py")
    if not have and os.path.isfile(prepare) and rank == 0:  # it says what it does, or refuses
        env = dict(os.environ, GLASSGPT_PREPARE_FROM_TRAIN="1")
        code = subprocess.run([sys.executable, prepare], env=env).returncode
        if code:
            raise SystemExit(code)
    if dist.is_initialized():
        dist.barrier()
    found = find_meta(c.data_dir) if os.path.isdir(c.data_dir) else None
    if not found:
        parent = os.path.dirname(c.data_dir)
        datasets = os.listdir(parent) if os.path.isdir(parent) else []
        near = did_you_mean(os.path.basename(c.data_dir), datasets)
        raise ConfigError(f"no dataset at {c.data_dir}{near}: set dataset or data_dir (a folder "
                          "with meta.json, train.bin and val.bin)")
    meta = found[0]
    splits = {s: read_bin(os.path.join(c.data_dir, f"{s}.bin"), meta) for s in ("train", "val")}
    for split, data in splits.items():
        if len(data) <= c.block_size:
            raise ConfigError(f"{split}.bin has {len(data)} tokens, too few for "
                              f"block_size={c.block_size}")
    return splits, meta


def get_windows(data, starts, block_size, device):
    """Inputs x and next-token targets y, (len(starts), block_size) each, in one gather, on the
    device: to a GPU from pinned memory without waiting (as nanoGPT), so that the host gathers the
    next batch while the GPU computes."""
    w = torch.from_numpy(data[starts[:, None] + np.arange(block_size + 1)].astype(np.int64))
    x = w[:, :-1].contiguous()
    y = w[:, 1:].contiguous()
    if "cuda" in device:
        x = x.pin_memory()
        y = y.pin_memory()
    return x.to(device, non_blocking=True), y.to(device, non_blocking=True)


def check_memory(shape, c, world_size, local_procs, device_type):
    """A one-line ConfigError where a model of shape cannot train here (device.check_fits), by
    sizing.py's arithmetic: activations in float32, as a CPU's bfloat16 runs peaked as high. The
    training state scales with the parameters model.py builds, counted on the meta device, so a
    fork's wider model is checked as it is."""
    shards = world_size if c.fsdp else 1
    state = memory_bytes(shape, optimizer=c.optimizer, shards=shards)["train_state"]
    paper = param_counts(shape)["total"]
    state = state * (instantiated_params(shape) or paper) // paper
    need = training_bytes(shape, c.batch_size, c.optimizer, shards, state=state)
    check_fits({"training_bytes": need, "train_state": state}, device_type, local_procs)


def init_model(c, meta, ckpt, shape):
    """The model init_from names (from scratch: of shape), on the CPU (c: the config); any failure
    is a one-line ConfigError."""
    try:
        if c.init_from == "scratch":
            model = GPT(shape)
        elif c.init_from == "resume":
            model = model_from_checkpoint(ckpt, dropout=c.dropout, attention=c.attention)
        else:
            model = model_from_pretrained(c.init_from, dropout=c.dropout)
            model.crop_block_size(c.block_size)  # e.g. fine-tune GPT-2 (1024) on 256-token windows
    except (ImportError, OSError, ValueError) as e:
        first = str(e).splitlines()[0][:300]
        raise ConfigError(f"cannot build the model ({c.init_from}): {first}") from None
    vocab = model.config.vocab_size
    if vocab not in (meta["vocab_size"], padded_vocab(meta)):  # as sample.py: not this model's
        raise ConfigError(f"the dataset's vocab_size {meta['vocab_size']} is not the model's "
                          f"{vocab}")
    folder = c.out_dir if c.init_from == "resume" else c.init_from
    has_meta = os.path.isfile(os.path.join(folder, "meta.json"))
    if has_meta and not same_tokenizer(read_meta(folder), meta):
        raise ConfigError(f"{c.data_dir} is not the tokenizer {folder}'s model was trained with")
    return model


def main():
    # config: the defaults above, config files and --key=value (given: the keys they set, and
    # where); a resume takes the rest from its run. config is what ckpt.pt keeps: "auto" and
    # data/<dataset> are resolved again wherever a resume runs, into c
    given = {}
    config = configure(config_keys(globals()), given=given)
    ckpt = None
    if config["init_from"] == "resume" or restarted(config["out_dir"]):  # torchrun's restart too
        config, ckpt = adopt_checkpoint(config, given)
    check_config(config)
    c = SimpleNamespace(**config)
    here = os.path.dirname(os.path.abspath(__file__))
    c.data_dir = c.data_dir or os.path.join(here, "data", c.dataset)
    if ckpt is not None and not c.eval_only and finished(c, ckpt):
        return 0
    if not c.eval_only and os.environ.get("RANK", "0") == "0":  # rank 0 alone writes
        check_writable(c.out_dir)
        check_free(c.out_dir)
    c.device, device_type, c.dtype = resolve_device(c.device, c.dtype)

    # processes: under torchrun each trains on its own slice of every batch (parallel.py); only
    # rank 0 speaks and writes; they agree on a stop and the time over group
    rank, world_size, local_procs = parallel.start(c.device, device_type, c.backend, c.num_threads)
    group = parallel.host_group()
    master = rank == 0
    torch.manual_seed(c.seed)  # the same initial weights in every process
    accum = c.gradient_accumulation_steps // world_size  # micro-batches per process per iteration
    tokens_per_iter = c.gradient_accumulation_steps * c.batch_size * c.block_size

    # data: the bins are mapped once; the eval windows are fixed, spread over each split
    splits, meta = load_data(c, rank)
    train_data = splits["train"]
    eval_starts = {}
    for split, data in splits.items():
        starts = np.linspace(0, len(data) - c.block_size - 1, c.eval_iters * c.batch_size)
        eval_starts[split] = starts.round().astype(np.int64).reshape(c.eval_iters, c.batch_size)

    # model: a run that cannot fit is refused before anything is allocated; GPT-2's weights have
    # a shape of their own, checked once they are loaded
    model_keys = {k: config[k] for k in MODEL_KEYS}
    shape = GPTConfig(vocab_size=padded_vocab(meta), dropout=c.dropout, **model_keys)
    pretrained = c.init_from not in ("scratch", "resume")
    if not pretrained:
        check_memory(shape, c, world_size, local_procs, device_type)
    raw_model = init_model(c, meta, ckpt, shape)
    if pretrained:
        check_memory(raw_model.config, c, world_size, local_procs, device_type)

    # optimizer, and the model as the processes train it
    compiled = c.compile == "true" or (c.compile == "auto" and device_type == "cuda")
    # FSDP shards raw_model in place; DDP wraps it
    model = parallel.wrap(raw_model, c.device, c.fsdp, compiled, c.dtype, c.fsdp_sync_once)
    torch.manual_seed(c.seed + rank)  # dropout differs per process
    ctx = autocast(device_type, c.dtype)
    cpu_attention_in_float32(raw_model, device_type, c.dtype)  # device.py says why
    betas = (c.beta1, c.beta2)
    if c.optimizer == "muon":
        opt = configure_muon(raw_model, c.weight_decay, c.learning_rate, betas, device_type,
                             c.muon_lr, c.muon_momentum, c.muon_weight_decay, c.muon_ns_steps)
    else:
        opt = raw_model.configure_optimizers(c.weight_decay, c.learning_rate, betas, device_type)
    lr_scales = [g.get("lr_scale", 1.0) for g in opt.param_groups]  # Muon's peak lr over AdamW's
    scaler = parallel.grad_scaler(device_type, c.dtype, c.fsdp)

    # the state a resume continues: the data order, the schedule, the random state
    sampler = torch.Generator().manual_seed(c.seed)  # the same in every process: one global batch
    iter_num = 0
    best_val_loss = math.inf
    trained = 0.0  # seconds of training steps
    reached = 0.0  # the lr schedule's progress: a longer run stretches what is left of the decay
    if ckpt is not None:
        try:
            parallel.load_optimizer(opt, ckpt["optimizer"])
            scaler.load_state_dict(ckpt.get("scaler") or scaler.state_dict())  # float16's scale
        except (ValueError, KeyError, RuntimeError) as e:
            raise ConfigError(f"{c.out_dir}/ckpt.pt: its optimizer state does not fit this "
                              f"optimizer ({e})") from None
        iter_num = ckpt["iter_num"]
        best_val_loss = float(ckpt["best_val_loss"])
        trained = ckpt.get("trained_seconds", 0.0)
        reached = ckpt.get("progress", 0.0)
        if "sampler" in ckpt:  # nanoGPT's ckpt.pt holds no data order or random state
            sampler.set_state(ckpt["sampler"]["generator"].cpu())
        if "rng" in ckpt and world_size == 1:
            set_rng_state(ckpt["rng"], c.device)
    nanogpt = ckpt is not None and is_nanogpt(ckpt)  # its ckpt.pt is moved aside, not written over
    del ckpt  # its tensors are in the model and optimizer now
    wandb = dict(project=c.wandb_project, name=c.wandb_run_name, config=config)
    resumed = iter_num if c.init_from == "resume" and not nanogpt else None
    log = RunLog(c.out_dir, resumed, meta, wandb=wandb if c.wandb_log and master else None)
    start_iter = iter_num
    peak = peak_flops(device_type, c.dtype) if device_type == "cuda" else None  # MFU: docs/cpu.md
    flops_per_iter = flops_per_token(raw_model.config, c.block_size) * tokens_per_iter

    def say(message):  # a closed stdout (| head) costs nothing: the run trains on, logged
        if master:
            speak(message)

    def record(entry):
        if master and not c.eval_only:
            log.write(entry)

    def finite(value, what):
        if not math.isfinite(value):
            raise ConfigError(f"{what} is {value} at iter {iter_num}: stopped; ckpt.pt, if any, is "
                              "from the last eval")

    @torch.no_grad()
    def evaluate():
        """The mean loss over each split's fixed windows, shared out among the processes; None if a
        stop came first (asked between batches)."""
        model.eval()
        losses = {}
        for split, data in splits.items():
            total = torch.zeros(2, device=c.device)  # the sum of batch losses, and their number
            for k, weight in parallel.my_batches(c.eval_iters):
                if parallel.agree(stopper.requested, 0.0, group)[0]:
                    return None
                with ctx:
                    x, y = get_windows(data, eval_starts[split][k], c.block_size, c.device)
                    _, loss = model(x, y)
                total += torch.stack((loss.float(), torch.ones((), device=c.device))) * weight
            total = parallel.mean(total)
            losses[split] = (total[0] / total[1]).item()
        model.train()
        return losses

    def step(lr):
        """One iteration: this process's slice of the global batch, its micro-batches forward and
        backward, the gradient clipped, one optimizer step. Returns what the log prints, as
        tensors: nothing here waits on a GPU, so the host runs ahead to the next batch."""
        starts = torch.randint(len(train_data) - c.block_size, (tokens_per_iter // c.block_size,),
                               generator=sampler).numpy()
        mine = starts.reshape(world_size, -1)[rank]
        x, y = get_windows(train_data, mine, c.block_size, c.device)
        xs = x.view(accum, c.batch_size, c.block_size)
        ys = y.view(accum, c.batch_size, c.block_size)
        for g, scale in zip(opt.param_groups, lr_scales):
            g["lr"] = lr * scale
        loss_sum = torch.zeros((), device=c.device)
        for micro_step in range(accum):
            # DDP averages the gradients on the last micro-batch (alone: nothing to do)
            with parallel.no_sync(model, micro_step == accum - 1):
                with ctx:
                    _, loss = model(xs[micro_step], ys[micro_step])
                loss_sum += loss.detach()
                scaler.scale(loss / accum).backward()  # the mean over micro-batches: one big batch
        stats = {"loss": loss_sum / accum}  # to log one more number, add a tensor the step has
        if c.grad_clip > 0:
            scaler.unscale_(opt)
            norm = torch.nn.utils.clip_grad_norm_(raw_model.parameters(), c.grad_clip)
            stats["grad_norm"] = parallel.whole(norm)
        scaler.step(opt)
        scaler.update()
        opt.zero_grad(set_to_none=True)
        return stats

    def save(*names):  # every process takes part: under FSDP each gathers its shards to rank 0
        state = {
            "model": parallel.gathered(raw_model.state_dict(), master),
            "optimizer": parallel.gathered(opt.state_dict(), master),
            "model_args": vars(raw_model.config),
            "config": config,
            "iter_num": iter_num,
            "best_val_loss": best_val_loss,
            "trained_seconds": trained,
            "progress": reached,
            "rng": rng_state(c.device),
            "sampler": {"generator": sampler.get_state()},
            "scaler": scaler.state_dict(),
            "torchrun_id": os.environ.get("TORCHELASTIC_RUN_ID"),
        }
        for name in names if master else ():
            save_checkpoint(state, os.path.join(c.out_dir, name))

    fsdp_note = " (fsdp)" if c.fsdp and world_size > 1 else ""
    say(f"{raw_model.get_num_params(non_embedding=False):,} parameters | vocab "
        f"{meta['vocab_size']} | train {len(train_data):,} tokens, val {len(splits['val']):,} | "
        f"{c.init_from} at iter {iter_num} | {c.device} {c.dtype}{' compiled' if compiled else ''} "
        f"| {world_size} process(es){fsdp_note} x {torch.get_num_threads()} thread(s) | "
        f"{tokens_per_iter:,} tokens per iteration")
    if compiled:  # compiling is not training: a step's graph and an eval's, untimed, here
        t = time.time()
        before = rng_state(c.device)
        x, y = get_windows(train_data, np.arange(c.batch_size), c.block_size, c.device)
        with compiling(), ctx:
            model(x, y)[1].backward()
            with torch.no_grad():
                model.eval()(x, y)
        model.train()
        opt.zero_grad(set_to_none=True)
        set_rng_state(before, c.device)
        say(f"compiled in {time.time() - t:.1f}s (not counted as training)")

    # the training loop. A signal only sets stopper's flag: it is honoured here, between
    # iterations, and between eval batches, so nothing is ever half done
    stopper = Stopper(master)
    overfit = OverfitWatch()
    t0 = time.time()
    logged = (iter_num, trained)  # the iteration and the training seconds at the last log
    while True:
        # a stop, agreed by the processes, which also keep time as one
        stopped, trained = parallel.agree(stopper.requested, trained, group)
        if stopped:
            break
        last = iter_num >= c.max_iters or 0 < c.max_seconds <= trained or c.eval_only
        reached = max(reached, progress(iter_num, trained, c))  # the lr never climbs back
        lr = get_lr(iter_num, reached, c)

        # every eval_interval and at the end: evaluate, and save
        if iter_num % c.eval_interval == 0 or last:
            losses = evaluate()
            if losses is None:  # a stop cut the eval short: not logged
                stopped = True
                break
            finite(losses["val"], "the val loss")
            say(f"step {iter_num}: train loss {losses['train']:.4f}, val loss {losses['val']:.4f}")
            if iter_num > start_iter or c.init_from != "resume":  # a resume's first: logged before
                record({"iter": iter_num, "train_loss": losses["train"], "val_loss": losses["val"],
                        "lr": lr, "elapsed": time.time() - t0})
            if iter_num > start_iter:  # at the start there is nothing new to save
                improved = losses["val"] < best_val_loss
                best_val_loss = min(best_val_loss, losses["val"])
                if overfit.says(losses, improved):
                    say(f"the val loss has not improved on {best_val_loss:.4f} for 3 evals (train "
                        f"loss now {losses['train']:.4f}): overfitting; best.pt keeps the best "
                        "(docs/training.md)")
                if improved:
                    save("ckpt.pt", "best.pt")
                elif c.always_save_checkpoint:
                    save("ckpt.pt")
        if last:
            break

        # one iteration, timed to the end of its log's wait on the GPU
        t = time.time()
        stats = step(lr)
        if iter_num == start_iter and master:  # the first complete iteration: now worth keeping
            moved = log.open()
            if moved:
                say(f"{c.out_dir} held an earlier run: moved to {moved}")
        values = parallel.means(stats) if iter_num % c.log_interval == 0 else None
        trained += time.time() - t

        # every log_interval: the stats, and the speed since the last log
        if values:
            finite(values["loss"], "the loss")
            dt = (trained - logged[1]) / (iter_num + 1 - logged[0])  # seconds an iteration
            logged = (iter_num + 1, trained)
            speed = f"time {dt * 1000:.2f}ms, lr {lr:.2e}, {tokens_per_iter / dt:,.0f} tok/s"
            mfu = flops_per_iter / dt / (peak * world_size) if peak else None
            if mfu:
                speed += f", mfu {mfu:.1%}"
            record({"iter": iter_num, "lr": lr, "tokens_per_sec": tokens_per_iter / dt,
                    "elapsed": time.time() - t0, "mfu": mfu, **values})
            numbers = ", ".join(f"{k} {v:.4f}" for k, v in values.items())
            say(f"iter {iter_num}: {numbers}, {speed}")
        iter_num += 1

    # the end: a stop saves the last complete iteration; a run that ends draws its log
    if stopped and iter_num > start_iter:
        save("ckpt.pt")
        say(f"saved {c.out_dir}/ckpt.pt at iter {iter_num}; continue with --init_from=resume "
            f"--out_dir={c.out_dir}")
    elif stopped:
        say("stopped before the first iteration: nothing trained, nothing saved")
    elif iter_num > start_iter:
        say(f"done: iter {iter_num}, best val loss {best_val_loss:.4f}, checkpoints in {c.out_dir}")
    log.close()
    # a stop is not kept waiting on the second or so that matplotlib takes to draw loss.png
    if master and log.file is not None and not stopped:
        records = read_log(os.path.join(c.out_dir, "log.jsonl"))
        if not plot_losses(records, os.path.join(c.out_dir, "loss.png"), title=c.out_dir):
            say("no loss.png: drawing it needs matplotlib (pip install matplotlib)")
    model = raw_model = opt = None  # let go of before the process group goes (parallel.end)
    parallel.end()
    if stopped:
        return 128 + (stopper.signum or signal.SIGTERM)  # SIGTERM: a peer's stop, under torchrun
    return 0


def finished(c, ckpt):
    """True, and one line naming the limit and the flag that trains on, where a resumed run has
    reached its max_iters or max_seconds: it has nothing to train."""
    iter_num = ckpt["iter_num"]
    if 0 < c.max_seconds <= ckpt.get("trained_seconds", 0.0):
        key, value = "max_seconds", c.max_seconds
    elif iter_num >= c.max_iters:
        key, value = "max_iters", c.max_iters
    else:
        return False
    if os.environ.get("RANK", "0") == "0":
        speak(f"nothing to train: iter {iter_num} has reached {key}={value:g}: to train on, raise "
              f"it, e.g. --{key}={2 * value:g} (the lr goes on from where its decay got to)")
    return True


def check_free(out_dir):
    """A one-line ConfigError now, before the data or the model, where another train.py is training
    into out_dir (its lock: rundir.lock); the run takes the lock itself at its first iteration."""
    if os.path.isdir(out_dir):
        held = lock(out_dir)
        if held is not None:
            os.close(held)


class OverfitWatch:
    """Says once (says returns True) when the val loss has not improved on its best for 3 evals
    while the train loss fell below its value there: the train split is learned, not the text."""

    def __init__(self):
        self.worse = 0  # evals since the best
        self.best_train = math.inf  # the train loss at the best val loss
        self.said = False

    def says(self, losses, improved):
        self.worse = 0 if improved else self.worse + 1
        if improved:
            self.best_train = losses["train"]
        if self.said or self.worse < 3 or losses["train"] >= self.best_train:
            return False
        self.said = True
        return True


if __name__ == "__main__":
    run(lambda: sys.exit(main()))
