"""
Chinchilla's scaling laws (Hoffmann et al., https://arxiv.org/abs/2203.15556): with C = 6*N*D
FLOPs to spend, how many parameters N, on how many tokens D? Approach 3 (a fitted loss surface) and
approach 2 (IsoFLOP curves) are reproduced with nanoGPT's scaling_laws notebook's figures. The sweep
runs approach 2 on tiny character-level models with train.py, and matplotlib, if installed, draws
isoflop.png. docs/scaling.md#the-sweep-approach-2-on-this-cpu says how long the sweep takes.

    python scaling.py                  # the reproduced figures, in a few milliseconds
    python scaling.py sweep            # 3 budgets x 5 models
    python scaling.py sweep --quick    # the first budget only: a minimum, no exponent
"""

import json
import math
from contextlib import closing
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

from configurator import HELP, ConfigError, configure, run

REPO = os.path.dirname(os.path.abspath(__file__))

# -----------------------------------------------------------------------------
# Approach 3: a loss surface fitted to about 400 training runs (the paper's equation 10),
# L(N, D) = E + A / N^alpha + B / D^beta. E is the text's entropy, A / N^alpha what a finite model
# loses, and B / D^beta what finite data loses.
E, A, B, ALPHA, BETA = 1.69, 406.4, 410.7, 0.34, 0.28
# The notebook's example, 6 * 400e6 * 9.2e9: the paper's Table 3, approach 3's first row.
NOTEBOOK_BUDGET = 2.21e19


def chinchilla_loss(N, D):
    """Predicted final training loss (nats per token) of N parameters trained on D tokens, numbers
    or numpy arrays."""
    return E + A / N**ALPHA + B / D**BETA


def compute_optimal(C):
    """(N, D) minimising chinchilla_loss with 6*N*D = C: D = C/(6N) in L, dL/dN = 0 gives
    N_opt = G * (C/6)^(beta/(alpha+beta)),  G = (alpha*A / (beta*B))^(1/(alpha+beta))."""
    G = (ALPHA * A / (BETA * B)) ** (1 / (ALPHA + BETA))
    N = G * (C / 6) ** (BETA / (ALPHA + BETA))
    return N, C / (6 * N)


def compute_optimal_grid(C, lo=7.0, hi=11.0, step=2**-4):
    """
    The notebook's way: model sizes 10^lo .. 10^hi, `step` decades apart (16 per decade), each given
    D = C/(6N) tokens, and the lowest loss wins. The answer is always a grid point, up to half a
    step off the minimum.
    """
    ns = 10 ** np.arange(lo, hi, step)
    best = float(ns[np.argmin(chinchilla_loss(ns, C / (6 * ns)))])
    return best, C / (6 * best)


# -----------------------------------------------------------------------------
# Chinchilla's architecture, counted as the notebook does: relative positions (no position table,
# but extra per-layer weights) and a free ffw_size.

def chinchilla_params(seq_len, vocab_size, d_model, num_heads, num_layers, ffw_size, kv_size=None):
    """
    Blocks, final norm and output matrix (not the input embedding). The notebook makes attention as
    wide as the model; Table A9 has models whose num_heads * kv_size is narrower, and kv_size counts
    those.
    """
    d = d_model
    f = ffw_size
    w = num_heads * kv_size if kv_size else d_model  # width of the concatenated heads
    per_layer = (
        3 * d * w + 3 * w  # q, k, v projections, weights and biases
        + d * w + 2 * w  # relative positions: key projection, content and position biases
        + w * d + d  # attention output projection
        + d * f + f  # MLP up
        + f * d + d  # MLP down
        + 2 * 2 * d  # two LayerNorms, gain and bias each
    )
    return num_layers * per_layer + 2 * d + d * vocab_size


def chinchilla_flops(seq_len, vocab_size, d_model, num_heads, num_layers, ffw_size):
    """
    Training FLOPs for one sequence, by the paper's Appendix F: a matmul (m,k)@(k,n) costs 2mkn,
    softmax 3 per score, and the backward pass twice the forward. The embedding and the logits are
    left out, as Table A4 was made.
    """
    T = seq_len
    d = d_model
    H = num_heads
    heads_width = (d // H) * H  # key_size * num_heads
    attention = (
        2 * 3 * T * d * heads_width  # q, k, v projections
        + 2 * T * T * heads_width  # q @ k^T: every query against every key, the T^2 term
        + 3 * H * T * T  # softmax: max-subtract, exp, divide
        + 2 * T * T * heads_width  # weights @ v: the other T^2 term
        + 2 * T * heads_width * d  # output projection
    )
    mlp = 2 * T * 2 * d * ffw_size
    return 3 * num_layers * (attention + mlp)  # forward + backward (2x forward)


# The five largest of the paper's 50 models (Table A9):
# params, d_model, ffw_size, kv_size, n_heads, n_layers.
TABLE_A9_LARGEST = [(12295e6, 4608, 18432, 128, 36, 44), (12569e6, 4608, 18432, 128, 32, 47),
                    (13735e6, 4864, 19456, 128, 32, 47), (14940e6, 4992, 19968, 128, 32, 49),
                    (16183e6, 5120, 20480, 128, 40, 47)]
# Table A4's six models: n_layers, d_model, ffw_size, n_heads, kv_size (seq_len 2048, vocab 32,000).
TABLE_A4 = [(10, 640, 2560, 10, 64), (20, 1024, 4096, 16, 64), (24, 1280, 5120, 10, 128),
            (26, 1792, 7168, 14, 128), (28, 2048, 8192, 16, 128), (40, 3584, 14336, 28, 128)]


def table_a4():
    """For each Table A4 model: N, the exact FLOPs per sequence of 2048 tokens, 6*N*D with
    D = 2048, and their ratio."""
    rows = []
    for L, d, f, H, _ in TABLE_A4:
        N = chinchilla_params(2048, 32000, d, H, L, f)
        F = chinchilla_flops(2048, 32000, d, H, L, f)
        approx = 6 * N * 2048  # D is one sequence; D cancels in the ratio anyway
        rows.append(dict(d_model=d, n_layers=L, N=N, flops=F, approx=approx, ratio=F / approx))
    return rows


# -----------------------------------------------------------------------------
# Approach 2: per FLOP budget, models of several sizes, a parabola through loss against log N, its
# minimum the compute-optimal size. The paper's Table 3 lists the pairs of its nine budgets.
# (N, D) of each budget.
TABLE3_APPROACH2 = [(400e6, 7.7e9), (1e9, 20.0e9), (10e9, 219.5e9), (67e9, 1.7e12), (175e9, 4.3e12),
                    (280e9, 7.1e12), (520e9, 13.4e12), (1e12, 26.5e12), (10e12, 292.0e12)]


def fit_power_law(x, y):
    """Least-squares line through (log10 x, log10 y), y = 10^intercept * x^slope. Returns
    (slope, intercept)."""
    slope, intercept = np.polyfit(np.log10(x), np.log10(y), 1)
    return float(slope), float(intercept)


def fit_parabola(log_n, loss):
    """loss = a*x^2 + b*x + c through (x = log10 N, loss). Returns (a, b, c, the vertex -b/(2a)),
    the vertex None if a <= 0."""
    a, b, c = np.polyfit(log_n, loss, 2)
    vertex = float(-b / (2 * a)) if a > 0 else None
    return float(a), float(b), float(c), vertex


def report():
    """Every reproduced figure, as `python scaling.py` prints it."""
    C = NOTEBOOK_BUDGET
    ng, dg = compute_optimal_grid(C)
    nc, dc = compute_optimal(C)
    grid_loss = chinchilla_loss(ng, dg)
    closed_loss = chinchilla_loss(nc, dc)
    out = ["Approach 3: L(N, D) = 1.69 + 406.4/N^0.34 + 410.7/D^0.28, compute C = 6ND",
           f"  optimum grows as N_opt ~ C^{BETA / (ALPHA + BETA):.3f}, "
           f"D_opt ~ C^{ALPHA / (ALPHA + BETA):.3f}",
           f"  at C = {C:.2e} FLOPs:",
           f"    notebook grid (16 sizes per decade): N = {ng / 1e6:.2f}M, D = {dg / 1e9:.2f}B, "
           f"loss {grid_loss:.5f}",
           f"    closed form:                         N = {nc / 1e6:.2f}M, D = {dc / 1e9:.2f}B, "
           f"loss {closed_loss:.5f}",
           "    the grid answers the grid point nearest the minimum "
           f"10^{math.log10(nc):.4f}; the loss differs by {grid_loss - closed_loss:.1e}",
           "  tokens per parameter at the optimum, closed form:"]
    for c in (1e18, 1e20, 1e22, 6 * 70e9 * 1.4e12):
        n, d = compute_optimal(c)
        out.append(f"    C = {c:.2e}: N = {n:.3g}, D = {d:.3g}, D/N = {d / n:.1f}")
    out += ["", "Chinchilla parameter counts vs the paper's Table A9 (its five largest models):",
            f"  {'d_model':>7} {'heads x kv':>10} {'layers':>6} {'notebook':>12} "
            f"{'heads x kv':>12} {'paper':>9}"]
    for p, d, f, kv, h, layers in TABLE_A9_LARGEST:
        notebook = chinchilla_params(1024, 32000, d, h, layers, f) / 1e6
        narrow = chinchilla_params(1024, 32000, d, h, layers, f, kv) / 1e6
        out.append(f"  {d:7d} {f'{h} x {kv}':>10} {layers:6d} {notebook:11.4f}M {narrow:11.4f}M "
                   f"{p / 1e6:8.0f}M")
    out += ["", "Table A4: exact training FLOPs vs 6ND (a sequence of 2048 tokens, vocab 32,000):",
            f"  {'d_model':>7} {'layers':>6} {'N':>14} {'FLOPs':>18} {'6ND':>18} {'ratio':>8}"]
    out += [f"  {r['d_model']:7d} {r['n_layers']:6d} {r['N']:14,d} {r['flops']:18,d} "
            f"{r['approx']:18,d} {r['ratio']:8.4f}" for r in table_a4()]
    slope, intercept = fit_power_law(*zip(*TABLE3_APPROACH2))
    D = 10 ** (slope * math.log10(124e6) + intercept)  # compute-optimal tokens for GPT-2 small
    out += ["", "Approach 2: log10(tokens) fitted against log10(params) over Table 3's nine rows:",
            f"  log10 D = {slope:.4f} log10 N + {intercept:.4f}",
            f"  GPT-2 small (124M params) -> {D / 1e9:.2f}B tokens ({D / 124e6:.1f} per parameter)"]
    return "\n".join(out)


# -----------------------------------------------------------------------------
# The sweep: approach 2 in miniature. Per budget C, each model trains (train.py) on
# tokens = C / FLOPs per token (sizing.py), and a parabola in log10 N through the final val losses
# gives that budget's N_opt.

# (n_layer, n_head, n_embd): 4K .. 450K non-embedding parameters, each 1.7-3x the last, and five
# sizes per budget around its expected optimum. --quick, the first budget, brackets a minimum but
# fits no exponent.
FAMILY = [(1, 1, 16), (1, 2, 24), (1, 2, 32), (2, 2, 32), (2, 4, 48), (3, 4, 64), (4, 4, 96)]
SWEEPS = {"default": [(3e11, FAMILY[0:5]), (1e12, FAMILY[1:6]), (3e12, FAMILY[2:7])],
          "quick": [(3e11, FAMILY[0:5])]}
BLOCK_SIZE = 64
# Small batches, as at this scale the number of steps limits more than the tokens do.
BATCH_SIZE = 16


def plan_sweep(plan, vocab_size=65, batch_size=BATCH_SIZE, block_size=BLOCK_SIZE):
    """plan, [(budget, [(n_layer, n_head, n_embd), ...])], as one dict per training: its shape, N,
    iters, tokens and FLOPs."""
    from model import GPTConfig
    from sizing import flops_per_token, param_counts
    runs = []
    for C, shapes in plan:
        for n_layer, n_head, n_embd in shapes:
            cfg = GPTConfig(block_size=block_size, vocab_size=vocab_size, n_layer=n_layer,
                            n_head=n_head, n_embd=n_embd)
            fpt = flops_per_token(cfg, block_size)
            iters = max(1, round(C / fpt / (batch_size * block_size)))
            tokens = iters * batch_size * block_size
            runs.append(dict(budget=C, n_layer=n_layer, n_head=n_head, n_embd=n_embd,
                             N=param_counts(cfg)["non_embedding"], flops_per_token=fpt, iters=iters,
                             tokens=tokens, flops=tokens * fpt, batch_size=batch_size,
                             block_size=block_size))
    return runs


def train_args(run, out_dir, dataset, data_dir):
    """train.py's keys for one run, each pinned, with a cosine decay over exactly its iterations
    (Chinchilla's advice)."""
    iters = run["iters"]
    # The smallest models tolerate and need a larger step.
    lr = 2e-3 if run["n_embd"] <= 64 else 1e-3
    shape = {k: run[k] for k in ("n_layer", "n_head", "n_embd", "block_size", "batch_size")}
    keys = dict(out_dir=out_dir, dataset=dataset, data_dir=data_dir, gradient_accumulation_steps=1,
                max_iters=iters, lr_decay_iters=iters, warmup_iters=max(1, iters // 20),
                learning_rate=lr, min_lr=lr / 10, eval_interval=iters, eval_iters=20,
                log_interval=max(1, iters // 10), beta2=0.99, weight_decay=0.1, seed=1337,
                dropout=0.0, always_save_checkpoint=False, compile=False, device="cpu",
                optimizer="adamw", max_seconds=0, position="rope", norm="rmsnorm", bias=False,
                **shape)
    return [f"--{k}={v}" for k, v in keys.items()]


def final_eval(run_dir, iters):
    """(val_loss, seconds) of the evaluation at iteration iters in run_dir/log.jsonl; None if it has
    none."""
    from rundir import read_log
    log = read_log(os.path.join(run_dir, "log.jsonl"))
    evals = [r for r in log if r["iter"] == iters and "val_loss" in r]
    return (float(evals[-1]["val_loss"]), float(evals[-1].get("elapsed", 0))) if evals else None


def analyse(runs):
    """Per budget, the parabola fit and its N_opt (and D_opt); across budgets, N_opt ~ C^a."""
    per_budget = []
    for C in sorted({r["budget"] for r in runs}):
        rs = sorted((r for r in runs if r["budget"] == C), key=lambda r: r["N"])
        x = np.log10([r["N"] for r in rs])
        a, b, c, x_min = fit_parabola(x, [r["val_loss"] for r in rs])
        row = dict(budget=C, a=a, b=b, c=c, N_opt=None, D_opt=None, loss_opt=None, inside=False)
        if x_min is not None:
            # The tokens at that size: within a budget log D is a straight line in log N, as
            # D = C / FLOPs per token.
            slope, intercept = np.polyfit(x, np.log10([r["tokens"] for r in rs]), 1)
            row.update(N_opt=10**x_min, D_opt=float(10 ** (slope * x_min + intercept)),
                       loss_opt=c - b * b / (4 * a), inside=bool(x[0] <= x_min <= x[-1]))
        per_budget.append(row)
    fits = [r for r in per_budget if r["N_opt"] is not None]
    if len(fits) < 2:
        return per_budget, None
    budgets = [r["budget"] for r in fits]
    a_n, k_n = fit_power_law(budgets, [r["N_opt"] for r in fits])
    a_d, k_d = fit_power_law(budgets, [r["D_opt"] for r in fits])
    return per_budget, dict(a=a_n, log10_k_n=k_n, b=a_d, log10_k_d=k_d)


def sweep_table(runs, per_budget, exponent):
    lines = [f"{'budget':>9} {'shape (L,H,d)':>14} {'N':>9} {'tokens':>10} {'iters':>6} "
             f"{'val_loss':>9} {'secs':>6}"]
    for r in runs:
        shape = str((r["n_layer"], r["n_head"], r["n_embd"]))
        lines.append(f"{r['budget']:9.1e} {shape:>14} {r['N']:9,d} {r['tokens']:10,d} "
                     f"{r['iters']:6d} {r['val_loss']:9.4f} {r['seconds']:6.1f}")
    lines += ["", f"{'budget':>9} {'N_opt':>10} {'D_opt':>12} {'D/N':>6} {'loss at N_opt':>14}"]
    for row in per_budget:
        if row["N_opt"] is None:
            lines.append(f"{row['budget']:9.1e}  no minimum: the loss does not curve upwards over "
                         "these sizes")
            continue
        line = (f"{row['budget']:9.1e} {row['N_opt']:10,.0f} {row['D_opt']:12,.0f} "
                f"{row['D_opt'] / row['N_opt']:6.1f} {row['loss_opt']:14.4f}")
        if not row["inside"]:
            line += "  (outside the sizes tried: extrapolated)"
        lines.append(line)
    if exponent:
        lines.append(f"\nfit: N_opt ~ C^{exponent['a']:.3f}, D_opt ~ C^{exponent['b']:.3f}  "
                     "(Chinchilla: a = 0.50 / 0.49 / 0.46 by approaches 1 / 2 / 3, "
                     "b = 0.50 / 0.51 / 0.54)")
    else:
        lines.append("\nfit: fewer than two budgets with a minimum, so no exponent "
                     "(the full sweep reuses these runs)")
    return "\n".join(lines)


def plot_isoflop(runs, per_budget, exponent, path):
    """isoflop.png: loss against N per budget with its parabola, and N_opt against C. False without
    matplotlib."""
    try:
        from matplotlib import colormaps
        from matplotlib.figure import Figure  # no pyplot: no GUI backend, nothing to close
    except ImportError:
        return False
    fig = Figure(figsize=(11, 4.2), layout="tight")
    ax1, ax2 = fig.subplots(1, 2)
    colors = colormaps["viridis"](np.linspace(0, 0.85, len(per_budget)))
    for row, color in zip(per_budget, colors):
        rs = sorted((r for r in runs if r["budget"] == row["budget"]), key=lambda r: r["N"])
        ns = [r["N"] for r in rs]
        ax1.scatter(ns, [r["val_loss"] for r in rs], color=color, label=f"C = {row['budget']:.0e}")
        xs = np.linspace(math.log10(ns[0]) - 0.1, math.log10(ns[-1]) + 0.1, 100)
        ax1.plot(10**xs, row["a"] * xs**2 + row["b"] * xs + row["c"], color=color, lw=1)
        if row["N_opt"]:
            ax1.axvline(row["N_opt"], color=color, ls=":", lw=1)
            ax2.scatter(row["budget"], row["N_opt"], color=color, zorder=3)
    title = "compute-optimal size"
    if exponent:
        first = math.log10(per_budget[0]["budget"])
        last = math.log10(per_budget[-1]["budget"])
        cs = np.logspace(first - 0.2, last + 0.2, 50)
        ax2.plot(cs, 10 ** exponent["log10_k_n"] * cs ** exponent["a"], color="k", lw=1)
        title += f": N_opt ~ C^{exponent['a']:.2f}"
    ax1.set(xscale="log", xlabel="parameters N (non-embedding)", ylabel="final val loss",
            title="IsoFLOP curves")
    ax1.legend()
    ax2.set(xscale="log", yscale="log", xlabel="FLOPs C", ylabel="N_opt", title=title)
    fig.savefig(path, dpi=110)
    return True


def prepare(dataset, data_dir):
    """
    (folder, vocab_size) of the sweep's dataset, data/<dataset>/prepare.py run first if it has no
    train.bin. It takes char-level data only: GPT-2's 50,257-token table would dwarf the sweep's
    models, sized for a char vocabulary.
    """
    from tokenizer import read_meta
    folder = os.path.abspath(data_dir) if data_dir else os.path.join(REPO, "data", dataset)
    script = os.path.join(folder, "prepare.py")
    if not data_dir and not os.path.exists(os.path.join(folder, "train.bin")):
        if subprocess.run([sys.executable, script], cwd=REPO).returncode:
            raise ConfigError(f"{script} failed")
    meta = read_meta(folder)
    if meta["tokenizer"] != "char":
        raise ConfigError(f"the sweep trains char-level models; {folder} is tokenized with "
                          f"{meta['tokenizer']}")
    return folder, meta["vocab_size"]


def train_all(todo, jobs):
    """
    Run todo's (run, train.py command) pairs, jobs at a time, and yield (run, None or the last line
    train.py printed if it failed) as each ends. Stopped by Ctrl-C or a failure, the running
    trainings get SIGTERM, and they save.
    """
    running = []  # (run, process, its output)
    try:
        while todo or running:
            while todo and len(running) < jobs:
                r, cmd = todo.pop(0)
                out = tempfile.TemporaryFile("w+")
                # Each training has a session of its own, so a terminal's Ctrl-C reaches the sweep
                # alone, which stops each training once.
                proc = subprocess.Popen(cmd, cwd=REPO, stdout=out, stderr=subprocess.STDOUT,
                                        start_new_session=True)
                running.append((r, proc, out))
            time.sleep(0.1)
            for r, proc, out in [item for item in running if item[1].poll() is not None]:
                running.remove((r, proc, out))
                with out:
                    out.seek(0)
                    yield r, proc.returncode and (out.read().strip().splitlines() or ["?"])[-1]
    finally:
        for _, proc, _ in running:
            proc.terminate()
        for _, proc, _ in running:
            proc.wait()


def sweep(quick=False, out_dir="out-scaling", dataset="shakespeare_char", data_dir="", jobs=0,
          plan=None):
    """Train (or reuse) every run of the plan, then fit and report. Returns (runs, per_budget,
    exponent)."""
    if not out_dir or jobs < 0:
        raise ConfigError("out_dir must not be empty and jobs >= 0 (0: one per core): "
                          f"{out_dir!r}, {jobs}")
    out_dir = os.path.abspath(out_dir)
    data_dir, vocab_size = prepare(dataset, data_dir)
    runs = plan_sweep(plan or SWEEPS["quick" if quick else "default"], vocab_size)
    jobs = jobs or os.cpu_count() or 1
    threads = max(1, (os.cpu_count() or 1) // jobs)
    print(f"{len(runs)} trainings on {data_dir}, {sum(r['flops'] for r in runs):.2e} FLOPs, "
          f"{jobs} at a time")
    # The dataset in each run's name: another's runs are not reused.
    name = os.path.basename(data_dir)
    todo = []
    for r in runs:
        shape = f"C{r['budget']:.0e}_L{r['n_layer']}_d{r['n_embd']}"
        r["run_dir"] = os.path.join(out_dir, f"{name}_{shape}")
        # A run an earlier sweep finished is reused.
        done = final_eval(r["run_dir"], r["iters"])
        if done:
            r["val_loss"], r["seconds"] = done
            print(f"reused {r['run_dir']}: val_loss {r['val_loss']:.4f}")
        else:
            args = train_args(r, r["run_dir"], dataset, data_dir) + [f"--num_threads={threads}"]
            todo.append((r, [sys.executable, os.path.join(REPO, "train.py"), *args]))
    # Longest first: the pool does not end on one long run.
    todo.sort(key=lambda t: -t[0]["flops"] / t[0]["N"] ** 0.5)
    # Closed (the trainings stopped) on any exception here too.
    with closing(train_all(list(todo), jobs)) as ended:
        for n, (r, error) in enumerate(ended, 1):
            done = None if error else final_eval(r["run_dir"], r["iters"])
            if not done:
                why = error or "no final evaluation"
                raise SystemExit(f"error: train.py failed in {r['run_dir']}: {why}")
            r["val_loss"], r["seconds"] = done
            print(f"[{n}/{len(todo)}] C={r['budget']:.0e} N={r['N']:,} tokens={r['tokens']:,} "
                  f"val_loss {r['val_loss']:.4f} ({r['seconds']:.0f}s)")
    per_budget, exponent = analyse(runs)
    print("\n" + sweep_table(runs, per_budget, exponent))
    with open(os.path.join(out_dir, "isoflop.json"), "w") as f:
        json.dump(dict(runs=runs, per_budget=per_budget, exponent=exponent), f, indent=1)
    if plot_isoflop(runs, per_budget, exponent, os.path.join(out_dir, "isoflop.png")):
        print(f"plot: {out_dir}/isoflop.png")
    return runs, per_budget, exponent


SWEEP = dict(  # the sweep's keys: python scaling.py sweep --key=value
    quick=False,  # the first budget only, 5 models: a minimum, no exponent
    out_dir="out-scaling",  # where the runs, isoflop.json and isoflop.png go
    dataset="shakespeare_char",  # a char-level dataset under data/ (prepared on first use)
    data_dir="",  # the dataset's folder; "": data/<dataset>
    # Tiny models keep a core busier one to a core than on several threads.
    jobs=0,  # trainings at once; 0: one per core, each on one thread
)


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    # A sweep's progress shows as it comes, through a pipe too.
    sys.stdout.reconfigure(line_buffering=True)
    sweeping = argv[:1] == ["sweep"]
    args = argv[sweeping:]
    if args and not sweeping and not any(a in HELP for a in args):
        raise ConfigError("scaling.py takes no arguments (the figures), or sweep and its "
                          f"--key=value; got {args[0]!r}")
    cfg = configure(SWEEP, args)
    if sweeping:
        sweep(**cfg)
    else:
        print(report())


if __name__ == "__main__":
    run(main)
