"""
How fast glassgpt runs on this machine, now: medians of repeats after warm-up (--json=PATH: also
in a file).

    python bench.py --mode=peak                       # matmul GFLOP/s (--dtype=bfloat16: bf16's)
    python bench.py --mode=train config/tiny.py       # a step's tokens/s, FLOPs, MFU (--profile)
    python bench.py --mode=sample                     # tokens/s with and without the KV cache
    python bench.py --mode=attention --backward=True  # attention's time and memory against T
    python bench.py --mode=race --nanogpt=../nanoGPT  # nanoGPT's CPU recipe vs config/tiny.py
    python bench.py --mode=train --help               # one mode's keys (a config's others ignored)
"""

import filecmp
import itertools
import json
import math
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import time

# else torch's profiler logs its every start and stop on stderr
os.environ.setdefault("KINETO_LOG_LEVEL", "99")
from device import autocast, cpu_attention_in_float32, peak_flops, resolve_device  # before torch
import torch
from torch.nn import functional as F

from configurator import ConfigError, configure, run
from model import GPT, GPTConfig
from sample import sampling_dtype
from muon import configure_muon
from checkpoint import load_model, quiet_transformers
from sizing import flops_per_token, forward_flops
from tokenizer import char_meta, find_meta

REPO = os.path.dirname(os.path.abspath(__file__))
COMMON = dict(
    mode="train",  # peak | train | sample | attention | race: what to measure
    quick=False,  # tiny sizes, few repeats, a short race: a smoke test whose figures mean nothing
    json="",  # also write the figures and the settings to this JSON file
    seed=1337,  # the random weights and tokens measured
    num_threads=0,  # torch CPU threads (the race: each side's); 0: torch's default (one per core)
    device="cpu")  # cpu | cuda | cuda:1 | auto
# nanoGPT's CPU recipe
MODEL = dict(n_layer=4, n_head=4, n_embd=128, block_size=64, dropout=0.0, bias=False,
             tie_weights=True, norm="layernorm", position="learned", attention="sdpa",
             activation="gelu_tanh")
DEFAULTS = {  # a key without a comment here is train.py's, explained there (and in --help)
    "peak": dict(
        repeats=5,  # timed calls (the race: runs each side), the median reported
        warmup=1,  # untimed calls before them
        # float32 | bfloat16 | auto (train.py's choice; train: autocast to it, MFU against its peak)
        dtype="float32",
        peak_sizes="2048,3072,4096"),  # the square matmul sizes n the peak is the best of
    "train": dict(**MODEL, vocab_size=0,  # 0: the meta's in data_dir (or data/<dataset>), else 65
                  dataset="", data_dir="", batch_size=12, gradient_accumulation_steps=1,
                  compile=False,  # torch.compile the model (compiling in the untimed warm-up)
                  profile=False,  # also list the ops the time goes to (torch.profiler)
                  optimizer="adamw", weight_decay=0.1, learning_rate=1e-3, beta1=0.9, beta2=0.99,
                  grad_clip=1.0, dtype="auto", peak_sizes="2048,3072,4096", repeats=30, warmup=3),
    "sample": dict(**dict(MODEL, n_layer=6, n_head=6, n_embd=384, block_size=256, bias=True),
                   vocab_size=65,
                   out_dir="",  # a training run to sample from; "": random weights of this shape
                   new_tokens=0,  # greedy tokens per timed call; 0: as many as fill the window
                   prompt_len=1,  # random tokens the generation continues
                   init_std=0.3,  # random weights' std: sharper than GPT-2's, so greedy tokens vary
                   compile=False, dtype="auto", repeats=5, warmup=1),
    "attention": dict(batch_size=1, n_head=6,
                      head_size=64,  # q, k and v are (batch_size, n_head, T, head_size)
                      t_min=128,  # T: every power of 2 from t_min ...
                      t_max=4096,  # ... to t_max
                      backward=False,  # time forward and backward, not the forward alone
                      dtype="float32", repeats=5, warmup=3),
    # nanogpt: a nanoGPT checkout, its data/shakespeare_char prepared from glassgpt's text
    "race": dict(nanogpt="",
                 glassgpt_config="config/tiny.py",  # glassgpt's side, against nanoGPT's CPU recipe
                 nanogpt_iters=2000,  # the recipe's iterations
                 glassgpt_iters=0,  # > 0: glassgpt's run ends there, lr decaying; 0: its config's
                 nanogpt_eval_interval=50,  # nanoGPT's (the README's 250 is too coarse to time)
                 eval_interval=25,  # glassgpt's, likewise
                 thresholds="1.88,1.70,1.60",  # the val losses each side is timed to
                 repeats=1),
}
QUICK = {"peak": dict(repeats=3, peak_sizes="256,512"),
         "train": dict(repeats=5, peak_sizes="256,512", n_layer=2, n_head=2, n_embd=64,
                       block_size=32, batch_size=4),
         "sample": dict(n_layer=2, n_head=2, n_embd=64, block_size=64, repeats=2),
         "attention": dict(repeats=3, n_head=2, head_size=32, t_min=64, t_max=1024),
         "race": dict(nanogpt_iters=100, glassgpt_iters=100)}


def median_time(fn, repeats, warmup, device):
    """Median seconds of fn() over repeats calls, after warmup untimed calls. fn a dict of
    functions: the median of each and what each returned last, called in turn each round, so that
    a busy spell slows all of them, not one."""
    sync = torch.cuda.synchronize if device.startswith("cuda") else lambda: None
    fns = fn if isinstance(fn, dict) else {0: fn}
    times = {}
    last = {}
    for i in range(warmup + repeats):
        for name, f in fns.items():
            sync()
            t0 = time.perf_counter()
            last[name] = f()
            sync()
            times[name] = times.get(name, []) + [time.perf_counter() - t0] * (i >= warmup)
    medians = {name: statistics.median(t) for name, t in times.items()}
    return (medians, last) if isinstance(fn, dict) else medians[0]


def machine():
    """This machine: the line every report starts with, and as a dict."""
    with open("/proc/cpuinfo" if os.path.isfile("/proc/cpuinfo") else os.devnull) as f:
        names = re.findall(r"model name\s*:\s*(.+)", f.read())
    cpu = (names or [platform.processor() or platform.machine()])[0]
    m = {"torch": torch.__version__, "python": platform.python_version(), "cpu": cpu.strip(),
         "cpus": os.cpu_count(), "threads": torch.get_num_threads(),
         "load_avg_1m": os.getloadavg()[0] if hasattr(os, "getloadavg") else 0.0,
         "cuda": torch.cuda.get_device_name() if torch.cuda.is_available() else None}
    # others share the cores
    busy = " (busy: expect low, noisy figures)" if m["load_avg_1m"] > m["cpus"] / 2 else ""
    gpu = f", GPU {m['cuda']}" if m["cuda"] else ""
    print(f"machine: torch {m['torch']}, python {m['python']}, {m['cpu']}, {m['cpus']} CPUs, "
          f"{m['threads']} threads{gpu}, load {m['load_avg_1m']:.1f}{busy}")
    return m


def slope(xs, ys):
    """Least-squares slope of log y against log x (1: linear growth, 2: quadratic); NaN below 2
    points."""
    pts = [(math.log(x), math.log(y)) for x, y in zip(xs, ys) if y and y > 0]
    if len(pts) < 2:
        return float("nan")
    mx, my = (sum(p[i] for p in pts) / len(pts) for i in (0, 1))
    return sum((x - mx) * (y - my) for x, y in pts) / sum((x - mx) ** 2 for x, _ in pts)


def fmt(x, spec=".2f", none="n/a"):
    return none if x is None or (isinstance(x, float) and math.isnan(x)) else format(x, spec)


def bench_peak(cfg):
    """GFLOP/s of n x n matmuls (2n^3 FLOPs) per size n, and the peak: the best size's."""
    dtype, per_size = cfg["dtype"], {}
    for n in map(int, cfg["peak_sizes"].split(",")):
        a, b, out = (torch.randn(n, n, device=cfg["device"]).to(getattr(torch, dtype))
                     for _ in range(3))
        mm = lambda: torch.mm(a, b, out=out)  # noqa: E731
        dt = median_time(mm, cfg["repeats"], cfg["warmup"], cfg["device"])
        per_size[n] = 2 * n**3 / dt / 1e9
    p = {"dtype": dtype, "gflops_by_size": per_size, "peak_gflops": max(per_size.values())}
    sizes = "  ".join(f"n={n}: {g:.1f}" for n, g in per_size.items())
    return p, [f"{dtype} torch.mm GFLOP/s  {sizes}  -> peak {p['peak_gflops']:.1f} GFLOP/s"]


def bench_train(cfg):
    device = cfg["device"]
    device_type = torch.device(device).type
    config = GPTConfig.from_dict(cfg)
    # this run's peak, in its dtype
    peak = bench_peak(dict(cfg, repeats=3 if cfg["quick"] else 5, warmup=1))[0]
    B, T, accum = cfg["batch_size"], config.block_size, cfg["gradient_accumulation_steps"]
    model = GPT(config).to(device).train()
    cpu_attention_in_float32(model, device_type, cfg["dtype"])  # as train.py
    args = (cfg["weight_decay"], cfg["learning_rate"], (cfg["beta1"], cfg["beta2"]), device_type)
    muon = cfg["optimizer"] == "muon"
    opt = configure_muon(model, *args) if muon else model.configure_optimizers(*args)
    opt_label = f"AdamW (fused={opt.defaults.get('fused')})"
    if muon:
        n_muon = sum(len(g["params"]) for g in opt.muon.param_groups)
        opt_label = f"Muon for {n_muon} block matrices + {opt_label}"
    step_model = torch.compile(model) if cfg["compile"] else model
    # any tokens cost the same
    x, y = (torch.randint(0, config.vocab_size, (B, T), device=device) for _ in range(2))

    def step():
        for _ in range(accum):
            with autocast(device_type, cfg["dtype"]):
                _, loss = step_model(x, y)
            (loss / accum).backward()
        if cfg["grad_clip"]:
            torch.nn.utils.clip_grad_norm_(model.parameters(), cfg["grad_clip"])
        opt.step()
        opt.zero_grad(set_to_none=True)
    dt, tokens = median_time(step, cfg["repeats"], cfg["warmup"], device), B * T * accum
    flops = flops_per_token(config, T) * tokens  # 6N + 12LHQT per token (sizing.py)
    r = {"model": vars(config), "optimizer": opt_label, "params": model.get_num_params(),
         "step_ms": 1e3 * dt, "tokens_per_step": tokens, "tokens_per_s": tokens / dt,
         "flops_per_step": flops, "gflops": flops / dt / 1e9, "peak": peak,
         "mfu": flops / dt / (peak["peak_gflops"] * 1e9)}
    shape = f"{config.n_layer}L {config.n_head}H {config.n_embd}d block {T}"
    shape += f" vocab {config.vocab_size}"
    lines = [f"{peak['dtype']} matmul peak {peak['peak_gflops']:.1f} GFLOP/s "
             f"(the best of n = {cfg['peak_sizes']})",
             f"model {shape}, {r['params']:,} non-embedding params, batch {B} x accum {accum}, "
             f"{cfg['dtype']}, compile={cfg['compile']}, grad_clip={cfg['grad_clip']}, {opt_label}",
             f"{'step ms':>9}{'tokens/s':>11}{'GFLOP/step':>12}{'GFLOP/s':>9}{'MFU':>8}",
             f"{r['step_ms']:9.2f}{r['tokens_per_s']:11,.0f}{flops / 1e9:12.3f}{r['gflops']:9.1f}"
             f"{r['mfu']:8.1%}"]
    if cfg["profile"]:  # the ops the time goes to over 10 steps, largest self CPU time first
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
            for _ in range(10):
                step()
        r["profile"] = prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=15)
        lines += ["", "top ops over 10 profiled steps (profiler overhead included):", r["profile"]]
    return r, lines


def memory_bandwidth(device):
    """Bytes a second the memory moves: copies of 256 MB, each read and written."""
    a, b = (torch.empty(2 ** 26, device=device) for _ in range(2))
    return 2 * a.nbytes / median_time(lambda: b.copy_(a), 5, 1, device)


def hugging_face(model, meta, device):
    """transformers' model of the same weights (export.py's folder, read back), or None without
    transformers."""
    try:
        from transformers import AutoModelForCausalLM
    except ImportError:
        return None
    from export import export_hf
    quiet_transformers()
    with tempfile.TemporaryDirectory() as folder:
        export_hf(model.cpu(), meta, folder, "bench")
        return AutoModelForCausalLM.from_pretrained(folder).to(device).eval()


def bench_sample(cfg):
    """Greedy tokens/s of one sample as sample.py runs it: with the KV cache, recomputing, compiled
    (--compile=True), and transformers' generate on its export; beside a token's Linear layers
    alone, its FLOPs and weights' limits."""
    device = cfg["device"]
    device_type = torch.device(device).type
    n_prompt = cfg["prompt_len"]
    if cfg["out_dir"]:
        model, meta, _ = load_model("resume", cfg["out_dir"])
    else:
        model = GPT(GPTConfig.from_dict(cfg)).eval()
        meta = char_meta("".join(chr(256 + i) for i in range(cfg["vocab_size"])))
        # GPT-2's init gives near-uniform logits: sharper weights make greedy tokens vary
        with torch.no_grad():
            for p in (p for p in model.parameters() if p.dim() >= 2):
                p.normal_(0.0, cfg["init_std"])
    config = model.config
    runs = {}
    # transformers' GPT-2 cannot go past the window
    n_new = cfg["new_tokens"] or config.block_size - n_prompt
    hf = hugging_face(model, meta, device)
    model.to(device)
    dtype = sampling_dtype(model, device, cfg["dtype"])
    prompt = torch.randint(0, config.vocab_size, (1, n_prompt), device=device)
    runs["KV cache"] = lambda: model.generate(prompt, n_new, temperature=0)
    runs["recompute"] = lambda: model.generate(prompt, n_new, temperature=0, use_cache=False)
    if cfg["compile"]:  # compiled in the warm-up, untimed
        step = torch.compile(model, dynamic=False)

        def compiled():
            new = model.generate_tokens(prompt, n_new, temperature=0, step=step)
            return torch.cat([prompt, *new], 1)
        runs["compiled"] = compiled
    if hf is not None:
        runs["transformers"] = lambda: hf.generate(prompt, max_new_tokens=n_new,
                                                   min_new_tokens=n_new, do_sample=False,
                                                   pad_token_id=0)
    linears = [m for m in model.modules() if type(m) is torch.nn.Linear]
    rows = {m: torch.zeros(1, 1, m.in_features, device=device) for m in linears}
    # a token's Linear layers alone, n_new times: a batch-1 decode's floor (outputs dropped)
    runs["floor"] = lambda: [[m(x) for m, x in rows.items()] and None for _ in range(n_new)]
    with torch.no_grad(), autocast(device_type, dtype):
        times, tokens = median_time(runs, cfg["repeats"], cfg["warmup"], device)
    floor = times.pop("floor") / n_new
    tokens.pop("floor")
    tokens_per_s = {k: n_new / t for k, t in times.items()}
    flops = forward_flops(config, n_prompt + n_new // 2)["total"]  # at the average context
    # batch 1 reads each weight once a token
    weights = sum(p.numel() * p.element_size() for p in model.parameters())
    peak = peak_flops(device_type, dtype)
    bandwidth = memory_bandwidth(device)
    cached = tokens["KV cache"]
    r = {"model": vars(config), "dtype": dtype, "new_tokens": n_new, "tokens_per_s": tokens_per_s,
         "identical": all(torch.equal(t.cpu(), cached.cpu()) for t in tokens.values()),
         "distinct_tokens": len(set(cached[0].tolist())), "flops_per_token": flops,
         "weight_bytes_per_token": weights, "flop_limit_tokens_per_s": peak / flops,
         "memory_limit_tokens_per_s": bandwidth / weights, "linear_layers_ms": 1e3 * floor}
    weights_from = cfg["out_dir"] or f"random weights, std {cfg['init_std']}"
    lines = [f"model {config.n_layer}L {config.n_head}H {config.n_embd}d block {config.block_size} "
             f"vocab {config.vocab_size} ({weights_from}), {n_new} greedy tokens from a "
             f"{n_prompt}-token prompt, {dtype}, identical tokens: {r['identical']}"]
    kv = tokens_per_s["KV cache"]
    for name, v in tokens_per_s.items():
        ratio = f"  (KV cache / {name}: {kv / v:.2f}x)" if name != "KV cache" else ""
        lines.append(f"  {name:<14}{v:9,.0f} tokens/s{ratio}")
    lines += [f"a token with the KV cache {1e3 / kv:.2f} ms: {1 / kv / floor:.2f}x its "
              f"{len(rows)} Linear layers alone, {1e3 * floor:.2f} ms"]
    lines += [f"limits: {flops / 1e6:.2f} MFLOP a token at the matmul peak of {peak / 1e9:.0f} "
              f"GFLOP/s: {r['flop_limit_tokens_per_s']:,.0f} tokens/s; "
              f"{weights / 2**20:.1f} MiB of weights a token at {bandwidth / 1e9:.1f} GB/s: "
              f"{r['memory_limit_tokens_per_s']:,.0f} tokens/s"]
    return r, lines


def manual_attention(q, k, v, mask):
    scores = q @ k.transpose(-2, -1) / math.sqrt(k.size(-1))
    return F.softmax(scores.masked_fill(~mask, float("-inf")), dim=-1) @ v


# model.py's two paths: the explicit T x T scores, masked and softmaxed, or torch's fused kernel
ATTENTION = {
    "manual": manual_attention,
    "sdpa": lambda q, k, v, mask: F.scaled_dot_product_attention(q, k, v, is_causal=True)}


def peak_bytes(fn):
    """The most bytes fn holds allocated at once: the allocations and frees the allocator reports
    to torch's profiler while fn runs (kernels' scratch too), summed in order."""
    cpu = [torch.profiler.ProfilerActivity.CPU]
    with torch.profiler.profile(activities=cpu, profile_memory=True) as prof:
        fn()
    memory = [e for e in prof.profiler.kineto_results.events() if e.name() == "[memory]"]
    events = sorted((e.start_ns(), e.nbytes()) for e in memory)
    return max([0, *itertools.accumulate(n for _, n in events)])


def bench_attention(cfg):
    B, nh, hs = cfg["batch_size"], cfg["n_head"], cfg["head_size"]
    dtype = getattr(torch, cfg["dtype"])
    device = cfg["device"]
    Ts = [1 << i for i in range(cfg["t_max"].bit_length()) if cfg["t_min"] <= 1 << i]
    rows = []
    for T in Ts:
        q, k, v, grad = (torch.randn(B, nh, T, hs, device=device, dtype=dtype,
                                     requires_grad=i < 3 and cfg["backward"]) for i in range(4))
        mask = torch.ones(T, T, dtype=torch.bool, device=device).tril()  # as model.py's
        rows.append({"T": T, "scores_bytes": B * nh * T * T * dtype.itemsize})
        for name, op in ATTENTION.items():
            def run_op():
                y = op(q, k, v, mask)
                if cfg["backward"]:
                    y.backward(grad)
                    q.grad = k.grad = v.grad = None
            with torch.set_grad_enabled(cfg["backward"]):
                ms = 1e3 * median_time(run_op, cfg["repeats"], cfg["warmup"], device)
                rows[-1][name + "_ms"] = ms
                rows[-1][name + "_bytes"] = peak_bytes(run_op)
    large = Ts[len(Ts) // 2:] if len(Ts) >= 4 else Ts  # the upper half: where the asymptote shows
    slopes = {f"{name}_{key}{part}": slope(ts, [r[f"{name}_{what}"] for r in rows][-len(ts):])
              for name in ATTENTION for what, key in (("ms", "time"), ("bytes", "memory"))
              for part, ts in (("", Ts), ("_large_T", large))}
    mib = lambda b: f"{b / 2**20:.2f}"  # noqa: E731
    size = f"T*T*{dtype.itemsize} MiB"
    passes = "forward+backward" if cfg["backward"] else "forward"
    lines = [f"causal attention alone, {passes}: q, k, v of shape ({B}, {nh}, T, {hs}), "
             f"{cfg['dtype']}; MiB: the most allocated at once (kernels' scratch too); "
             f"{size}: one score matrix, times {B * nh}",
             f"{'T':>6}{'manual ms':>11}{'sdpa ms':>10}{'manual MiB':>12}{'sdpa MiB':>10}"
             f"{size:>11}"]
    lines += [f"{w['T']:>6}{w['manual_ms']:11.3f}{w['sdpa_ms']:10.3f}"
              f"{mib(w['manual_bytes']):>12}{mib(w['sdpa_bytes']):>10}{mib(w['scores_bytes']):>11}"
              for w in rows]
    for label, p in (("log-log slope, all T", ""), (f"log-log slope, T >= {large[0]}", "_large_T")):
        s = {key: fmt(slopes[key + p]) for key in slopes if not key.endswith("_large_T")}
        lines.append(f"{label:<26} time: manual {s['manual_time']} sdpa {s['sdpa_time']}   "
                     f"memory: manual {s['manual_memory']} sdpa {s['sdpa_memory']}")
    result = {"dtype": cfg["dtype"], "backward": cfg["backward"], "T": Ts, "rows": rows,
              "slopes": slopes}
    return result, lines


# nanoGPT's README CPU recipe, its --max_iters=2000 --lr_decay_iters=2000 being nanogpt_iters here
RECIPE = ["config/train_shakespeare_char.py", "--device=cpu", "--compile=False", "--eval_iters=20",
          "--log_interval=1", "--block_size=64", "--batch_size=12", "--n_layer=4", "--n_head=4",
          "--n_embd=128", "--dropout=0.0"]
SAME = "glassgpt, same command"  # glassgpt's train.py given nanoGPT's command (and bias=False)
# the main job's budget: glassgpt's val loss after this many seconds of training steps
THREE_MINUTES = 180.0
# Both sides print these two, as nanoGPT does; what a fork adds to either line between the fields
# is passed over.
EVAL_LINE = re.compile(r"^step (\d+):.*\bval loss ([\d.naif]+)")
ITER_LINE = re.compile(r"^iter (\d+):.*\btime ([\d.]+)ms")
# glassgpt's, then nanoGPT's
TOKENS = re.compile(r"([\d,]+) tokens per iteration|tokens per iteration will be: ([\d,]+)")


def race_plan(cfg):
    """The race's checks: (nanoGPT's checkout, thresholds, glassgpt's args, its data folder)."""
    n = cfg["glassgpt_iters"]
    path = os.path.abspath(cfg["glassgpt_config"])
    # as train.py finds its data
    gg = configure(dict(dataset="", data_dir=""), [path], strict_files=False)
    ng = os.path.abspath(os.path.expanduser(cfg["nanogpt"])) if cfg["nanogpt"] else ""
    is_nanogpt = not os.path.isfile(os.path.join(ng, "muon.py"))  # glassgpt has a muon.py
    if not (os.path.isfile(os.path.join(ng, "train.py")) and is_nanogpt):
        raise ConfigError(f"--nanogpt={cfg['nanogpt']!r} is not a nanoGPT checkout (git clone "
                          "https://github.com/karpathy/nanoGPT, then prepare its "
                          "data/shakespeare_char)")
    data = gg["data_dir"] or os.path.join(REPO, "data", gg["dataset"])
    ng_data = os.path.join(ng, "data", "shakespeare_char")
    bins = [(os.path.join(data, s), os.path.join(ng_data, s)) for s in ("train.bin", "val.bin")]
    same = [os.path.isfile(a) and os.path.isfile(b) and filecmp.cmp(a, b, shallow=False)
            for a, b in bins]
    if not all(same):
        raise ConfigError(f"{data} and {ng_data} must hold the same train.bin and val.bin: prepare "
                          f"glassgpt's (python {data}/prepare.py), copy its input.txt to {ng_data} "
                          "and run prepare.py there")
    thresholds = sorted(map(float, cfg["thresholds"].split(",")), reverse=True)
    args = [path] + ([f"--max_iters={n}", f"--lr_decay_iters={n}"] if n > 0 else [])
    return ng, thresholds, args, data


def run_side(label, cmd, cwd, env):
    """One side's run (its stderr passes through): its evals and per-iteration seconds, read from
    its stdout."""
    evals, steps, tokens, t0 = [], {}, None, time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, text=True)
    try:
        for line in proc.stdout:
            if m := EVAL_LINE.match(line):
                wall_s = time.perf_counter() - t0
                evals.append({"iter": int(m[1]), "val_loss": float(m[2]), "wall_s": wall_s})
                print(f"  {label:>8} {evals[-1]['wall_s']:7.1f}s  {line.rstrip()}", flush=True)
            elif m := ITER_LINE.match(line):
                steps[int(m[1])] = float(m[2]) / 1e3
            elif m := TOKENS.search(line):
                tokens = int((m[1] or m[2]).replace(",", ""))
        proc.wait()
    finally:
        if proc.poll() is None:  # stopped early (Ctrl-C): the child too
            proc.kill()
            proc.wait()
    if proc.returncode or not (evals and steps and tokens):
        raise ConfigError(f"{label} failed (exit code {proc.returncode}) or printed no 'step N', "
                          f"'iter N' or tokens per iteration lines: {' '.join(cmd)}")
    # Training seconds before each iteration. A step whose time also holds an eval (nanoGPT times
    # the eval into the next step) counts as the median of the others.
    evaled, before, total = {e["iter"] for e in evals}, {}, 0.0
    typical = statistics.median([t for i, t in steps.items() if i not in evaled] or [0.0])
    for i in sorted(steps):
        before[i], total = total, total + (typical if i in evaled else steps[i])
    before[max(steps) + 1] = total  # where glassgpt's last eval comes
    return {"evals": evals, "before": before, "train_s": total, "wall_s": evals[-1]["wall_s"],
            "iters": len(steps), "tokens_per_s": len(steps) * tokens / total,
            "tokens_per_iter": tokens, "final_val": evals[-1]["val_loss"]}


def bench_race(cfg, plan):
    ng, thresholds, gg_args, data = plan
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    if cfg["num_threads"]:
        env["OMP_NUM_THREADS"] = str(cfg["num_threads"])
    n = cfg["nanogpt_iters"]
    runs = {"nanoGPT": [], SAME: [], "glassgpt": []}
    # The recipe warms up for 100 iterations, and nanoGPT's lr divides 0/0 where lr_decay_iters is
    # no further: a short race (--quick) warms up for half its iterations.
    recipe = [*RECIPE, f"--max_iters={n}", f"--lr_decay_iters={n}",
              f"--eval_interval={cfg['nanogpt_eval_interval']}",
              *([] if n > 100 else [f"--warmup_iters={n // 2}"])]
    train = [sys.executable, "train.py"]
    # every side's out_dir is a temporary folder: nothing is left in a checkout
    with tempfile.TemporaryDirectory(prefix="race-") as tmp:
        for r in range(cfg["repeats"]):
            print(f"race {r + 1}/{cfg['repeats']}: nanoGPT ({n} iterations), "
                  f"then glassgpt {' '.join(gg_args)}")
            out = lambda name: f"--out_dir={os.path.join(tmp, f'{name}{r}')}"  # noqa: E731
            runs["nanoGPT"].append(run_side("nanoGPT", [*train, *recipe, out("ng")], ng, env))
            # glassgpt on nanoGPT's command: the same step
            cmd = [*train, *recipe, "--bias=False", f"--data_dir={data}", out("same")]
            runs[SAME].append(run_side("same", cmd, REPO, env))
            cmd = [*train, *gg_args, f"--eval_interval={cfg['eval_interval']}", "--log_interval=1"]
            runs["glassgpt"].append(run_side("glassgpt", cmd + [out("gg")], REPO, env))
    return race_report(runs, thresholds, cfg)


def median_or_none(xs):
    return statistics.median(xs) if xs and None not in xs else None


def side_figures(rs, thresholds):
    """One side's figures over its runs, medians; for each threshold, the training seconds before
    its first eval at or below it (None where a run never reached it)."""
    def first_at(r, t):
        return next((r["before"][e["iter"]] for e in r["evals"] if e["val_loss"] <= t), None)
    medians = ("train_s", "wall_s", "final_val", "tokens_per_s")
    return {"runs": [{k: v for k, v in r.items() if k != "before"} for r in rs],
            **{k: median_or_none([r[k] for r in rs]) for k in medians},
            "iters": statistics.median_low([r["iters"] for r in rs]),
            "tokens_per_iter": rs[0]["tokens_per_iter"],
            "thresholds": {f"{t:.2f}": median_or_none([first_at(r, t) for r in rs])
                           for t in thresholds}}


def val_after(runs, seconds):
    """glassgpt's val loss after this much training, the median over its runs: each run's last eval
    within it (and a step more: a budget ends on the step that crosses it)."""
    def last_eval(r):
        within = seconds + r["train_s"] / r["iters"]
        evals = [e for e in r["evals"] if r["before"][e["iter"]] <= within]
        return max((e["iter"], e["val_loss"]) for e in evals)
    return median_or_none([last_eval(r)[1] for r in runs])


def race_report(runs, thresholds, cfg):
    """Each side's figures (medians over the repeats), the race's four comparisons, and the
    report's lines."""
    sides = {name: side_figures(rs, thresholds) for name, rs in runs.items() if rs}
    ng = sides["nanoGPT"]
    gg = sides["glassgpt"]
    same = sides.get(SAME)
    first = f"{thresholds[0]:.2f}"
    to_first = gg["thresholds"][first]
    t = {"time_to_first_threshold_over_nanogpt_run": to_first and to_first / ng["train_s"],
         "glassgpt_val_at_nanogpt_end": val_after(runs["glassgpt"], ng["train_s"]),
         "glassgpt_val_at_3_minutes": val_after(runs["glassgpt"], THREE_MINUTES),
         "same_step_tokens_per_s_ratio": same and same["tokens_per_s"] / ng["tokens_per_s"]}

    def row(label, cells):
        return f"{label:<22}" + "".join(f"{c:>28}" for c in cells)
    short = ""
    if gg["train_s"] < 0.98 * THREE_MINUTES:
        short = f", its whole run being {gg['train_s']:.1f} s"
    lines = []
    if cfg["quick"]:
        lines.append("a quick race (--quick): a smoke test, its runs cut short: its figures mean "
                     "nothing")
    lines += [
        f"race, {cfg['repeats']} run(s) each, medians; nanoGPT's README CPU recipe, glassgpt's "
        f"train.py on the same command, glassgpt's {cfg['glassgpt_config']}; seconds of training "
        "steps (evals left out)",
        row("", sides),
        row("iterations x tokens", [f"{s['iters']} x {s['tokens_per_iter']}"
                                    for s in sides.values()]),
        row("tokens/s", [f"{s['tokens_per_s']:,.0f}" for s in sides.values()])]
    for x in ng["thresholds"]:
        reached = [fmt(s["thresholds"][x], ".1f", "not reached") for s in sides.values()]
        lines.append(row(f"time to val <= {x}", reached))
    lines += [
        row("whole run (wall)", [f"{s['train_s']:.1f} ({s['wall_s']:.1f})"
                                 for s in sides.values()]),
        row("final val loss", [f"{s['final_val']:.4f}" for s in sides.values()]),
        f"glassgpt's time to val <= {first} / nanoGPT's whole run: "
        f"{fmt(t['time_to_first_threshold_over_nanogpt_run'], '.3f')}",
        f"glassgpt's val loss when nanoGPT's run ends ({ng['train_s']:.1f} s of training): "
        f"{fmt(t['glassgpt_val_at_nanogpt_end'], '.4f')}",
        f"glassgpt's val loss after {THREE_MINUTES:g} s of training{short}: "
        f"{fmt(t['glassgpt_val_at_3_minutes'], '.4f')}"]
    if same:
        lines.append(f"the same step (nanoGPT's model and batch), glassgpt / nanoGPT tokens/s "
                     f"(nanoGPT's step time / glassgpt's): "
                     f"{fmt(t['same_step_tokens_per_s_ratio'])}x")
    return {"sides": sides, "comparisons": t, "thresholds": thresholds}, lines


def check(cfg):
    """Each mode's checks, before any output, so that bad input is one line alone; the race's
    plan."""
    positive = ("repeats", "warmup", "batch_size", "gradient_accumulation_steps", "n_head",
                "prompt_len", "head_size", "t_min")
    low = [(k, 1) for k in positive if cfg.get(k, 1) < 1]
    if cfg.get("new_tokens", 0) < 0:
        low.append(("new_tokens", 0))
    if low:
        raise ConfigError(f"{low[0][0]} must be >= {low[0][1]}, got {cfg[low[0][0]]}")
    sizes = cfg.get("peak_sizes", "1").split(",")
    if not all(s.strip().isdigit() and int(s) > 0 for s in sizes):
        raise ConfigError(f"peak_sizes must be comma-separated integers >= 1, "
                          f"got {cfg['peak_sizes']!r}")
    if cfg["mode"] == "train":
        if cfg["optimizer"] not in ("adamw", "muon"):
            raise ConfigError(f"optimizer must be adamw or muon, got {cfg['optimizer']!r}")
        found = find_meta(cfg["data_dir"] or os.path.join(REPO, "data", cfg["dataset"] or "-"))
        if cfg["data_dir"] and not found:
            raise ConfigError(f"no meta.json (or nanoGPT's meta.pkl) in data_dir={cfg['data_dir']}")
        cfg["vocab_size"] = cfg["vocab_size"] or (found[0]["vocab_size"] if found else 65)
    if cfg["mode"] in ("train", "sample"):
        GPTConfig.from_dict(cfg)  # its ValueError: bad input
    if cfg["mode"] == "attention" and cfg["t_max"] < 1 << (cfg["t_min"] - 1).bit_length():
        raise ConfigError(f"no power of 2 between t_min={cfg['t_min']} and t_max={cfg['t_max']}")
    return race_plan(cfg) if cfg["mode"] == "race" else None


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    modes = [a.partition("=")[2] for a in argv if a.startswith("--mode=")]
    mode = (modes or [COMMON["mode"]])[-1]
    if mode not in DEFAULTS:
        raise ConfigError(f"mode must be one of {', '.join(DEFAULTS)}, got {mode!r}")
    defaults = {**COMMON, **DEFAULTS[mode]}
    shown = modes[-1:] or DEFAULTS
    sections = [("every mode", COMMON)] + [(f"--mode={m}", DEFAULTS[m]) for m in shown]
    sources = [f"{REPO}/model.py", f"{REPO}/train.py"]
    cfg = configure(defaults, argv, strict_files=False, sections=sections, sources=sources)
    if cfg["quick"]:  # quick sizes replace the defaults; what the user set still wins
        cfg = configure({**defaults, **QUICK[mode]}, argv, strict_files=False)
    cfg["mode"] = mode
    cfg["device"], _, dtype = resolve_device(cfg["device"], cfg.get("dtype", "float32"))
    if mode != "sample":  # sample's is sample.sampling_dtype's, by the model's width
        cfg["dtype"] = dtype
    if cfg["json"] and not os.access(os.path.dirname(os.path.abspath(cfg["json"])), os.W_OK):
        raise ConfigError(f"cannot write --json={cfg['json']}: its folder is missing or read-only")
    try:
        plan = check(cfg)
    except ValueError as e:  # GPTConfig's, float()'s: one line
        raise ConfigError(str(e)) from None
    if cfg["num_threads"] > 0:
        torch.set_num_threads(cfg["num_threads"])
    torch.manual_seed(cfg["seed"])
    info = machine()
    if mode != "race":  # the race says how it runs as it runs
        quick = " (--quick: tiny sizes, a smoke test whose figures mean nothing)" * cfg["quick"]
        print(f"{mode}: median of {cfg['repeats']} after {cfg['warmup']} warm-up{quick}",
              flush=True)
    if mode == "race":
        result, lines = bench_race(cfg, plan)
    else:
        result, lines = globals()[f"bench_{mode}"](cfg)
    print("\n".join(lines))
    if cfg["json"]:
        with open(cfg["json"], "w") as f:
            json.dump({"mode": mode, "machine": info, "settings": cfg, **result}, f, indent=1)
    return result


if __name__ == "__main__":
    run(main)
