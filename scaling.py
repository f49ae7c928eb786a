"""
Chinchilla's scaling laws (Hoffmann et al. 2022, https://arxiv.org/abs/2203.15556), reproduced
with the figures of nanoGPT's scaling_laws notebook, and run in miniature on this machine.

    python scaling.py                          # the reproduced figures, in a few milliseconds
    python scaling.py sweep                    # IsoFLOP experiment with train.py (~11 min, 2 cores)
    python scaling.py sweep --quick            # its first budget only: a minimum, no exponent (67 s measured on
                                               # 2 cores, 2026-11-25; docs/scaling.md has the earlier timings)
    python scaling.py sweep --out_dir=out-scaling --dataset=shakespeare_char
    python scaling.py --help                   # the sweep's keys, with their defaults

The question: with a compute budget of C FLOPs, how big a model (N parameters) should be trained
on how many tokens (D)? Training costs about 6 FLOPs per parameter per token (2 forward, 4
backward), so C = 6*N*D, and a bigger model means fewer tokens. Chinchilla answers it three ways;
this file reproduces approach 3 (a fitted loss surface L(N, D)) and approach 2 (IsoFLOP curves),
and runs approach 2 itself on tiny character-level models (the `sweep`).
Only numpy is needed; matplotlib (optional) draws isoflop.png.
"""

import difflib
import json
import math
import os
import signal
import subprocess
import sys
import threading
import time

if __name__ == "__main__":  # before numpy loads: a Ctrl-C meanwhile is one line, not a traceback
    from configurator import quit_quietly_on_early_ctrl_c
    quit_quietly_on_early_ctrl_c()
import numpy as np

from configurator import (HELP, ConfigError, Terminated, code_in, configure, held_work, json_mark, means_help, not_ours,
                          png_mark, remove_empty, replacing, run, spaced_values, unwritable)

MARK = "glassgpt scaling.py"  # in the isoflop.json and .png a sweep writes: a later sweep replaces those, no other file

# -----------------------------------------------------------------------------
# Approach 3: a loss surface fitted to ~400 training runs (the paper's equation 10)
#   L(N, D) = E + A / N^alpha + B / D^beta
# E is the loss of a perfect model on this text (its entropy); the A term is what a finite model
# loses, the B term what finite data loses.

E, A, B, ALPHA, BETA = 1.69, 406.4, 410.7, 0.34, 0.28


def chinchilla_loss(N, D):
    """Predicted final training loss (nats per token) of N parameters trained on D tokens."""
    N, D = np.asarray(N, dtype=float), np.asarray(D, dtype=float)
    return E + A / N**ALPHA + B / D**BETA


def compute_optimal(C):
    """
    (N, D) minimising chinchilla_loss subject to 6*N*D = C, in closed form. Put D = C/(6N) into L
    and set dL/dN = 0: alpha*A*N^-alpha = beta*B*(C/6)^-beta * N^beta, so
        N_opt = G * (C/6)^(beta/(alpha+beta)),  G = (alpha*A / (beta*B))^(1/(alpha+beta))
    and D_opt = C / (6 N_opt), which grows as (C/6)^(alpha/(alpha+beta)).
    """
    G = (ALPHA * A / (BETA * B)) ** (1 / (ALPHA + BETA))
    N = G * (C / 6) ** (BETA / (ALPHA + BETA))
    return N, C / (6 * N)


def compute_optimal_grid(C, lo=7.0, hi=11.0, step=2**-4):
    """
    The notebook's way: try model sizes 10^lo .. 10^hi spaced `step` decades apart (2^-4: 16 per
    decade, each 15% bigger than the last), give each D = C/(6N) tokens, keep the lowest loss.
    The answer is always a grid point, so it can miss the true minimum by up to half a step.
    """
    ns = 10 ** np.arange(lo, hi, step)
    ds = C / (6 * ns)
    best = int(np.argmin(chinchilla_loss(ns, ds)))
    return float(ns[best]), float(ds[best])


NOTEBOOK_BUDGET = 2.21e19  # the notebook's example: 6 * 400e6 * 9.2e9, the paper's Table 3, approach-3 row 1

# -----------------------------------------------------------------------------
# Chinchilla's own architecture, counted as the notebook counts it. It differs from GPT-2 in
# relative positions (no position table, but extra per-layer weights) and a free ffw_size.


def chinchilla_params(seq_len, vocab_size, d_model, num_heads, num_layers, ffw_size, kv_size=None):
    """
    Parameters: blocks, final norm and output matrix; the input embedding is not counted. The
    notebook makes the attention as wide as the model (kv_size = d_model / num_heads); Table A9
    has models whose num_heads * kv_size is narrower than d_model, so pass kv_size for those.
    """
    d, f = d_model, ffw_size
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
    Training FLOPs for one sequence of seq_len tokens, following the paper's Appendix F: a matmul
    (m,k)@(k,n) costs 2mkn, softmax 3 per score, backward twice the forward. As in the notebook,
    the embedding and the output logits are left out (per the authors, that is how Table A4 was
    made), which is why the ratio to 6ND can drop below 1 for the largest model.
    """
    T, d, H = seq_len, d_model, num_heads
    heads_width = (d // H) * H  # key_size * num_heads
    attention = (
        2 * 3 * T * d * heads_width  # q, k, v projections
        + 2 * T * T * heads_width  # q @ k^T: every query against every key, the T^2 term
        + 3 * H * T * T  # softmax: max-subtract, exp, divide
        + 2 * T * T * heads_width  # weights @ v: the other T^2 term
        + 2 * T * heads_width * d  # output projection
    )
    mlp = 2 * T * 2 * d * ffw_size
    forward = num_layers * (attention + mlp)
    return 3 * forward  # forward + backward (2x forward)


# The five largest of the paper's 50 models (Table A9): params, d_model, ffw_size, kv_size, n_heads, n_layers
TABLE_A9_LARGEST = [
    (12295e6, 4608, 18432, 128, 36, 44),
    (12569e6, 4608, 18432, 128, 32, 47),
    (13735e6, 4864, 19456, 128, 32, 47),
    (14940e6, 4992, 19968, 128, 32, 49),
    (16183e6, 5120, 20480, 128, 40, 47),
]

# Table A4's six models: n_layers, d_model, ffw_size, n_heads, kv_size (seq_len 2048, vocab 32,000)
TABLE_A4 = [
    (10, 640, 2560, 10, 64),
    (20, 1024, 4096, 16, 64),
    (24, 1280, 5120, 10, 128),
    (26, 1792, 7168, 14, 128),
    (28, 2048, 8192, 16, 128),
    (40, 3584, 14336, 28, 128),
]


def table_a4():
    """For each Table A4 model: N, exact FLOPs per 2048-token sequence, 6*N*D with D = 2048, ratio."""
    rows = []
    for n_layers, d_model, ffw_size, n_heads, _ in TABLE_A4:
        shape = dict(seq_len=2048, vocab_size=32000, d_model=d_model, num_heads=n_heads,
                     num_layers=n_layers, ffw_size=ffw_size)
        N, F = chinchilla_params(**shape), chinchilla_flops(**shape)
        approx = 6 * N * shape["seq_len"]  # D = one sequence: D cancels in the ratio anyway
        rows.append(dict(d_model=d_model, n_layers=n_layers, N=N, flops=F, approx=approx, ratio=F / approx))
    return rows


# -----------------------------------------------------------------------------
# Approach 2: for each of nine FLOP budgets, train models of several sizes, fit a parabola to loss
# against log N, take its minimum. The paper's Table 3 lists the resulting compute-optimal pairs.

TABLE3_APPROACH2 = [  # (parameters, tokens)
    (400e6, 7.7e9), (1e9, 20.0e9), (10e9, 219.5e9), (67e9, 1.7e12), (175e9, 4.3e12),
    (280e9, 7.1e12), (520e9, 13.4e12), (1e12, 26.5e12), (10e12, 292.0e12),
]


def fit_power_law(x, y):
    """Least-squares line through (log10 x, log10 y): y = 10^intercept * x^slope. Returns (slope, intercept)."""
    lx, ly = np.log10(np.asarray(x, dtype=float)), np.log10(np.asarray(y, dtype=float))
    slope, intercept = np.polyfit(lx, ly, 1)
    return float(slope), float(intercept)


def power_law(x, slope, intercept):
    return 10 ** (slope * np.log10(x) + intercept)


def tokens_for_params(N):
    """Compute-optimal training tokens for an N-parameter model, interpolated from Table 3 (approach 2)."""
    return float(power_law(N, *fit_power_law(*zip(*TABLE3_APPROACH2))))


def fit_parabola(log_n, loss):
    """
    loss = a*x^2 + b*x + c through points (x = log10 N, loss). Returns (a, b, c, x_min) where x_min is
    the vertex -b/(2a); x_min is None when a <= 0 (no minimum: the points do not bracket one).
    """
    a, b, c = np.polyfit(np.asarray(log_n, dtype=float), np.asarray(loss, dtype=float), 2)
    x_min = float(-b / (2 * a)) if a > 0 else None
    return float(a), float(b), float(c), x_min


# -----------------------------------------------------------------------------
# The sweep: approach 2 in miniature. For each budget C, each model of FAMILY is trained on
# tokens = C / flops_per_token (sizing.py: 6N plus attention's T-dependent term), its final
# validation loss read from out_dir/log.jsonl, and a parabola in log10 N gives that budget's N_opt.

# (n_layer, n_head, n_embd): 4K .. 450K non-embedding parameters, each ~1.7-3x the last
FAMILY = [(1, 1, 16), (1, 2, 24), (1, 2, 32), (2, 2, 32), (2, 4, 48), (3, 4, 64), (4, 4, 96)]
# (budget, the models trained on it): as in the paper, each budget gets sizes around its expected
# optimum, five per budget, the window moving one size up per half decade of compute. In a pilot
# the 3e11 minimum fell near 10K parameters, far more tokens per parameter than Chinchilla's ~20.
# --quick is the default's first budget: five sizes bracket its minimum, on the canonical text and
# on the offline one alike (smaller budgets were tried: their losses differ by less than the noise).
# An exponent needs two budgets or more, and the next one alone costs twice the time: the full sweep
# fits it, and reuses the quick sweep's runs.
SWEEPS = {
    "default": [(3e11, FAMILY[0:5]), (1e12, FAMILY[1:6]), (3e12, FAMILY[2:7])],
    "quick": [(3e11, FAMILY[0:5])],
}
BLOCK_SIZE, BATCH_SIZE = 64, 16  # small batches: at this scale the number of steps limits more than tokens


def run_config(n_layer, n_head, n_embd, vocab_size=65, block_size=None):
    from model import GPTConfig
    return GPTConfig(block_size=block_size or BLOCK_SIZE, vocab_size=vocab_size, n_layer=n_layer,
                     n_head=n_head, n_embd=n_embd)


def plan_sweep(plan, vocab_size=65, batch_size=None, block_size=None):
    """
    plan: [(budget, [(n_layer, n_head, n_embd), ...]), ...]. One dict per training: its shape, N,
    FLOPs per token, iterations (tokens = budget / FLOPs per token, rounded to whole batches) and FLOPs.
    """
    from sizing import flops_per_token, param_counts
    batch_size, block_size = batch_size or BATCH_SIZE, block_size or BLOCK_SIZE
    runs = []
    for C, shapes in plan:
        for n_layer, n_head, n_embd in shapes:
            cfg = run_config(n_layer, n_head, n_embd, vocab_size, block_size)
            fpt = flops_per_token(cfg, block_size)
            iters = max(1, round(C / fpt / (batch_size * block_size)))
            tokens = iters * batch_size * block_size
            runs.append(dict(budget=C, n_layer=n_layer, n_head=n_head, n_embd=n_embd,
                             N=param_counts(cfg)["non_embedding"], flops_per_token=fpt, iters=iters,
                             tokens=tokens, flops=tokens * fpt, batch_size=batch_size, block_size=block_size))
    return runs


def train_args(run, out_dir, dataset, data_dir):
    """train.py command line for one run: cosine decay over exactly its iterations (Chinchilla's advice)."""
    iters = run["iters"]
    lr = 2e-3 if run["n_embd"] <= 64 else 1e-3  # the smallest models tolerate and need a larger step
    args = [f"--out_dir={out_dir}", f"--dataset={dataset}", f"--n_layer={run['n_layer']}",
            f"--n_head={run['n_head']}", f"--n_embd={run['n_embd']}", f"--block_size={run['block_size']}",
            f"--batch_size={run['batch_size']}", "--gradient_accumulation_steps=1",
            f"--max_iters={iters}", f"--lr_decay_iters={iters}",
            f"--warmup_iters={max(1, iters // 20)}", f"--learning_rate={lr}", f"--min_lr={lr / 10}",
            f"--eval_interval={iters}", "--eval_iters=20", f"--log_interval={max(1, iters // 10)}",
            "--beta2=0.99", "--weight_decay=0.1", "--seed=1337",  # every value fixed here, not by config/tiny.py,
            "--dropout=0.0", "--always_save_checkpoint=false", "--compile=false", "--device=cpu",  # which moves on
            "--optimizer=adamw", "--max_seconds=0", "--position=rope", "--norm=rmsnorm", "--bias=False"]
    if data_dir:
        args.append(f"--data_dir={data_dir}")
    return args


def final_val_loss(log_path, max_iters):
    """The val_loss of the last evaluation in a train.py log.jsonl; it must be at max_iters."""
    evals = []
    with open(log_path) as f:
        for line in f:
            line = line.strip()
            if line:
                record = json.loads(line)
                if record.get("val_loss") is not None:
                    evals.append(record)
    if not evals:
        raise RuntimeError(f"{log_path}: no line with val_loss")
    last = evals[-1]
    if last.get("iter", -1) < max_iters:
        raise RuntimeError(f"{log_path}: last evaluation at iter {last.get('iter')}, expected {max_iters}")
    return float(last["val_loss"])


def analyse(runs):
    """Per budget: the parabola fit and its N_opt (and D_opt); across budgets: N_opt ~ C^a."""
    per_budget = []
    for C in sorted({r["budget"] for r in runs}):
        rs = sorted((r for r in runs if r["budget"] == C), key=lambda r: r["N"])
        x = np.log10([r["N"] for r in rs])
        a, b, c, x_min = fit_parabola(x, [r["val_loss"] for r in rs])
        row = dict(budget=C, a=a, b=b, c=c, N_opt=None, D_opt=None, loss_opt=None, inside=False)
        if x_min is not None:
            row["N_opt"] = 10**x_min
            # tokens at that size: log D is a straight line in log N within a budget (D = C / FLOPs per token)
            slope, intercept = np.polyfit(x, np.log10([r["tokens"] for r in rs]), 1)
            row["D_opt"] = float(10 ** (slope * x_min + intercept))
            row["loss_opt"] = c - b * b / (4 * a)
            row["inside"] = bool(x[0] <= x_min <= x[-1])
        per_budget.append(row)
    fits = [r for r in per_budget if r["N_opt"] is not None]
    exponent = None
    if len(fits) >= 2:
        a_n, k_n = fit_power_law([r["budget"] for r in fits], [r["N_opt"] for r in fits])
        a_d, k_d = fit_power_law([r["budget"] for r in fits], [r["D_opt"] for r in fits])
        exponent = dict(a=a_n, log10_k_n=k_n, b=a_d, log10_k_d=k_d)
    return per_budget, exponent


def plot_isoflop(runs, per_budget, exponent, path):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4.2))
    colors = plt.cm.viridis(np.linspace(0, 0.85, len(per_budget)))
    for row, color in zip(per_budget, colors):
        rs = sorted((r for r in runs if r["budget"] == row["budget"]), key=lambda r: r["N"])
        x = np.log10([r["N"] for r in rs])
        ax1.scatter([r["N"] for r in rs], [r["val_loss"] for r in rs], color=color, label=f"C = {row['budget']:.0e}")
        xs = np.linspace(x[0] - 0.1, x[-1] + 0.1, 100)
        ax1.plot(10**xs, row["a"] * xs**2 + row["b"] * xs + row["c"], color=color, lw=1)
        if row["N_opt"]:
            ax1.axvline(row["N_opt"], color=color, ls=":", lw=1)
    ax1.set(xscale="log", xlabel="parameters N (non-embedding)", ylabel="final val loss",
            title="IsoFLOP curves (parabola in log N)")
    ax1.legend()
    fits = [r for r in per_budget if r["N_opt"]]
    ax2.scatter([r["budget"] for r in fits], [r["N_opt"] for r in fits], color="k", zorder=3)
    if exponent:
        cs = np.logspace(math.log10(fits[0]["budget"]) - 0.2, math.log10(fits[-1]["budget"]) + 0.2, 50)
        ax2.plot(cs, power_law(cs, exponent["a"], exponent["log10_k_n"]), label=f"N_opt ~ C^{exponent['a']:.2f}")
        ax2.legend()
    ax2.set(xscale="log", yscale="log", xlabel="FLOPs C", ylabel="N_opt", title="compute-optimal size")
    fig.tight_layout()
    fig.savefig(path, dpi=110, metadata={"Software": MARK})
    plt.close(fig)
    return True


def sweep_table(runs, per_budget, exponent):
    lines = [f"{'budget':>9} {'shape (L,H,d)':>14} {'N':>9} {'tokens':>10} {'iters':>6} {'val_loss':>9} {'secs':>6}"]
    for r in runs:
        lines.append(f"{r['budget']:9.1e} {str((r['n_layer'], r['n_head'], r['n_embd'])):>14} {r['N']:9,d} "
                     f"{r['tokens']:10,d} {r['iters']:6d} {r['val_loss']:9.4f} {r['seconds']:6.1f}")
    lines += ["", f"{'budget':>9} {'N_opt':>10} {'D_opt':>12} {'D/N':>6} {'loss at N_opt':>14}"]
    for row in per_budget:
        if row["N_opt"] is None:
            lines.append(f"{row['budget']:9.1e}  no minimum: the loss does not curve upwards over these sizes")
        else:
            note = "" if row["inside"] else "  (outside the sizes tried: extrapolated)"
            lines.append(f"{row['budget']:9.1e} {row['N_opt']:10,.0f} {row['D_opt']:12,.0f} "
                         f"{row['D_opt'] / row['N_opt']:6.1f} {row['loss_opt']:14.4f}{note}")
    if exponent:
        lines += ["", f"fit: N_opt ~ C^{exponent['a']:.3f}, D_opt ~ C^{exponent['b']:.3f}  "
                  f"(Chinchilla: a = 0.50 / 0.49 / 0.46 by approaches 1 / 2 / 3, b = 0.50 / 0.51 / 0.54)"]
    elif len(per_budget) == 1:
        lines += ["", "fit: one budget, so no exponent (N_opt ~ C^a needs two or more): "
                  "python scaling.py sweep runs three (~11 min on 2 cores) and reuses these runs"]
    else:
        lines += ["", "fit: fewer than two budgets have a minimum; no exponent"]
    return "\n".join(lines)


def dataset_vocab_size(data_dir):
    """vocab_size from the dataset's meta.json, running its prepare.py first as train.py would. A dataset that
    is not char-level is refused: GPT-2's 50,257-token embedding would dwarf the sweep's models, whose budgets
    are sized for a char vocabulary (a trial on shakespeare's BPE: val 9.48, a minute per model)."""
    from train import ensure_data  # imported here: only a sweep needs train.py (and torch)
    from tokenizer import read_meta
    ensure_data(data_dir, master=True, ddp=False)
    meta = read_meta(data_dir)
    if meta["tokenizer"] != "char":
        raise ConfigError(f"the sweep trains char-level models; {data_dir} is tokenized with {meta['tokenizer']} "
                          f"(vocab {meta['vocab_size']:,}): prepare a char dataset (data/shakespeare_char, data/text)")
    return meta["vocab_size"]


class Trainings:
    """The sweep's train.py processes: the running ones, so that a stop can end them, and whether a stop
    came, so that queued ones do not start."""

    def __init__(self):
        self.running, self.stopping = set(), threading.Event()

    def stop(self, pool):
        """No queued training starts; the running ones are asked to stop (train.py saves and exits on SIGTERM)."""
        self.stopping.set()
        pool.shutdown(wait=False, cancel_futures=True)
        for proc in list(self.running):
            proc.terminate()
        for proc in list(self.running):
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()


def read_result(result_path):
    """An earlier sweep's result.json for one training, as a dict with its val_loss; None where there is none
    or it is unreadable (torn, not JSON), and that training runs again."""
    try:
        with open(result_path, "rb") as f:
            done = json.load(f)
    except (OSError, ValueError):
        return None
    return done if isinstance(done, dict) and "val_loss" in done else None


def finished(done, key):
    """done (read_result's), where an earlier sweep finished that training with the same settings (key); else None."""
    ok = done is not None and {k: done.get(k) for k in key} == key and "seconds" in done
    return done if ok else None


def other_result(done, key, result_path):
    """What differs, as "its result.json is of data_dir='...'", where done (read_result's, from result_path) is
    of this training on other settings; None where there is no result, a torn one (it runs again), or the same."""
    if done is None:
        return None
    differ = next((k for k in key if done.get(k) != key[k]), None)
    name = os.path.join(os.path.basename(os.path.dirname(result_path)), "result.json")
    return differ and f"its {name} is of {differ}={done.get(differ)!r}, not {key[differ]!r}"


def write_json(path, obj, indent=None):
    """path, whole or not at all (written beside it, then renamed over it): a Ctrl-C mid-write leaves no torn
    file for the next sweep to read."""
    with replacing(path) as tmp, open(tmp, "w") as f:
        json.dump(obj, f, indent=indent)


def train_one(cmd, cwd, trainings):
    """Run one train.py; (seconds, None) or (seconds, the last line it printed) if it failed."""
    t0 = time.time()
    if trainings.stopping.is_set():
        return 0.0, "stopped"
    # a session of its own: a terminal's Ctrl-C reaches the sweep alone, which asks each training to stop
    # once (SIGTERM: it saves); a second signal on top of the first would make train.py quit without saving
    proc = subprocess.Popen(cmd, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    trainings.running.add(proc)
    try:
        out, err = proc.communicate()
    finally:
        trainings.running.discard(proc)
    tail = None
    if proc.returncode != 0:
        tail = ((err.strip() or out.strip()).splitlines()[-1:] or ["(no output)"])[0]
    return time.time() - t0, tail


def sweep(quick=False, out_dir="out-scaling", dataset="shakespeare_char", data_dir="", jobs=0, plan=None):
    """
    Run (or reuse) every training of the plan, then fit and report. Returns (runs, per_budget, exponent).
    jobs trainings run at once (default: one per core, each on one thread: tiny models keep a core
    busier that way than two threads on one model do).
    """
    from concurrent.futures import ThreadPoolExecutor, as_completed
    here = os.path.dirname(os.path.abspath(__file__))
    train_py = os.path.join(here, "train.py")
    if not os.path.exists(train_py):
        raise SystemExit("error: scaling.py sweep needs train.py beside it")
    data_dir = os.path.abspath(data_dir) if data_dir else os.path.join(here, "data", dataset)
    if not out_dir:  # abspath("") is the current folder: the runs would land among the user's files
        raise ConfigError("cannot use out_dir='': empty name")
    out_dir = os.path.abspath(out_dir)
    vocab_size = dataset_vocab_size(data_dir)
    runs = plan_sweep(plan or SWEEPS["quick" if quick else "default"], vocab_size)
    cores = os.cpu_count() or 1
    jobs = jobs or cores
    threads = max(1, cores // jobs)
    base = [os.path.join(here, "config", "tiny.py")] if os.path.exists(os.path.join(here, "config", "tiny.py")) else []
    held = held_work(out_dir) or code_in(out_dir)  # code: the checkout, config/ (train.py refuses them too)
    if held:  # a later train.py there would move its own run aside and leave the sweep's folders mixed in
        raise ConfigError(f"cannot use out_dir={out_dir!r}: it holds {held}, and the sweep's trainings would mix "
                          "with it; choose another --out_dir")
    why = unwritable(out_dir)  # a file on its path, or a folder taking no files (/proc, read-only): train.py's check
    if why:
        raise ConfigError(f"cannot use out_dir={out_dir!r}: {why}")
    made = not os.path.exists(out_dir)
    try:
        os.makedirs(out_dir, exist_ok=True)
    except OSError as e:  # gone or changed since the check
        raise ConfigError(f"cannot use out_dir={out_dir!r}: {e.strerror or e}") from None
    for name, mark in (("isoflop.json", json_mark(MARK)), ("isoflop.png", png_mark(MARK))):  # not after the trainings
        why = not_ours(os.path.join(out_dir, name), mark, "scaling.py")
        if why:
            raise ConfigError(f"cannot write {os.path.join(out_dir, name)}: {why}")
    for r in runs:
        r["run_dir"] = os.path.join(out_dir, f"C{r['budget']:.0e}_L{r['n_layer']}_d{r['n_embd']}")
        key = {k: r[k] for k in ("budget", "n_layer", "n_head", "n_embd", "iters", "batch_size", "block_size")}
        r["key"] = dict(key, data_dir=data_dir)
        result_path = os.path.join(r["run_dir"], "result.json")
        earlier = read_result(result_path)  # read once: reused, or refused as another sweep's
        r["done"] = finished(earlier, r["key"])
        why = not r["done"] and other_result(earlier, r["key"], result_path)
        if why:  # another sweep's result (another dataset): training again would replace it
            raise ConfigError(f"cannot use out_dir={out_dir!r}: {why}, which this sweep would replace; choose "
                              "another --out_dir")
    print(f"{len(runs)} trainings on {data_dir} (vocab {vocab_size}), {sum(r['flops'] for r in runs):.2e} "
          f"FLOPs in all, {jobs} at a time, into {out_dir}/", flush=True)
    todo = []
    for r in runs:
        done = r.pop("done")
        if done:  # finished by an earlier sweep with the same plan: reuse it
            r.update(val_loss=done["val_loss"], seconds=done["seconds"])
            print(f"reused {r['run_dir']}: val_loss {r['val_loss']:.4f}", flush=True)
            continue
        if os.path.exists(os.path.join(r["run_dir"], "ckpt.pt")):  # train.py says so only to the sweep's pipe
            print(f"trains again {r['run_dir']}: an earlier sweep stopped it unfinished (its files move to "
                  "previous/ there)", flush=True)
        todo.append(r)
    # largest first, so the pool does not end waiting on one long run
    todo.sort(key=lambda r: -r["flops"] / r["N"] ** 0.5)
    pool, trainings = ThreadPoolExecutor(max_workers=jobs), Trainings()
    try:
        futures = {}
        for r in todo:
            cmd = [sys.executable, train_py] + base + train_args(r, r["run_dir"], dataset, data_dir)
            futures[pool.submit(train_one, cmd + [f"--num_threads={threads}"], here, trainings)] = r
        for n, future in enumerate(as_completed(futures), 1):
            r = futures[future]
            seconds, error = future.result()
            if error:  # stop now: do not wait for the rest of the queue to train first
                trainings.stop(pool)
                raise SystemExit(f"error: train.py failed for {r['run_dir']}: {error}")
            r["seconds"] = seconds
            r["val_loss"] = final_val_loss(os.path.join(r["run_dir"], "log.jsonl"), r["iters"])
            write_json(os.path.join(r["run_dir"], "result.json"),
                       dict(r["key"], val_loss=r["val_loss"], seconds=seconds, N=r["N"], tokens=r["tokens"]))
            print(f"[{n}/{len(todo)}] C={r['budget']:.0e} N={r['N']:,} tokens={r['tokens']:,} "
                  f"val_loss {r['val_loss']:.4f} ({seconds:.0f}s)", flush=True)
    except KeyboardInterrupt as e:  # Ctrl-C: stop at once, not after the queue
        # said before the wait: each running training saves its checkpoint first, seconds with nothing to show
        print(f"{'SIGTERM' if isinstance(e, Terminated) else 'SIGINT'}: stopping; the running trainings save "
              "first", file=sys.stderr, flush=True)
        trainings.stop(pool)
        kept = sum("val_loss" in r for r in runs)  # reused or finished now; none said "kept" when none was
        if made:  # the folder it made, if nothing started in it
            remove_empty([out_dir])
        print(f"interrupted: {kept} of {len(runs)} trainings finished" +
              (f", kept in {out_dir} and reused when the sweep runs again" if kept else ""),
              file=sys.stderr, flush=True)
        raise SystemExit(130) from None
    finally:
        pool.shutdown(wait=True)
    for r in runs:
        del r["key"], r["run_dir"]
    per_budget, exponent = analyse(runs)
    print()
    print(sweep_table(runs, per_budget, exponent))
    write_json(os.path.join(out_dir, "isoflop.json"),
               dict(written_by=MARK, runs=runs, per_budget=per_budget, exponent=exponent), indent=1)
    if plot_isoflop(runs, per_budget, exponent, os.path.join(out_dir, "isoflop.png")):
        print(f"plot: {os.path.join(out_dir, 'isoflop.png')}")
    return runs, per_budget, exponent


# -----------------------------------------------------------------------------


def report():
    """Every reproduced figure, as `python scaling.py` prints it."""
    out = ["Approach 3: L(N, D) = 1.69 + 406.4/N^0.34 + 410.7/D^0.28, compute C = 6ND",
           f"  optimum grows as N_opt ~ C^{BETA / (ALPHA + BETA):.3f}, D_opt ~ C^{ALPHA / (ALPHA + BETA):.3f}"]
    C = NOTEBOOK_BUDGET
    ng, dg = compute_optimal_grid(C)
    nc, dc = compute_optimal(C)
    out += [f"  at C = {C:.2e} FLOPs:",
            f"    notebook grid (16 sizes per decade): N = {ng / 1e6:.2f}M, D = {dg / 1e9:.2f}B, "
            f"loss {chinchilla_loss(ng, dg):.5f}",
            f"    closed form:                         N = {nc / 1e6:.2f}M, D = {dc / 1e9:.2f}B, "
            f"loss {chinchilla_loss(nc, dc):.5f}",
            "    the grid can only answer a grid point: 10^8.5 = 316.23M is the one nearest the true",
            f"    minimum 10^{math.log10(nc):.4f}; the loss differs by {chinchilla_loss(ng, dg) - chinchilla_loss(nc, dc):.1e}"
            " (the minimum is flat).",
            "    the paper's Table 3 says 400M / 9.2B here: its fit's parameters were rounded for print.",
            "  tokens per parameter at the optimum, closed form:"]
    for c in (1e18, 1e20, 1e22, 6 * 70e9 * 1.4e12):
        n, d = compute_optimal(c)
        out.append(f"    C = {c:.2e}: N = {n:.3g}, D = {d:.3g}, D/N = {d / n:.1f}")

    out += ["", "Chinchilla parameter counts vs the paper's Table A9 (its five largest models):",
            f"  {'d_model':>7} {'heads x kv':>10} {'layers':>6} {'notebook':>12} {'heads x kv':>12} {'paper':>9}"]
    for p, d, f, kv, h, l in TABLE_A9_LARGEST:
        shape = dict(seq_len=1024, vocab_size=32000, d_model=d, num_heads=h, num_layers=l, ffw_size=f)
        n_nb, n_kv = chinchilla_params(**shape), chinchilla_params(**shape, kv_size=kv)
        out.append(f"  {d:7d} {f'{h} x {kv}':>10} {l:6d} {n_nb / 1e6:11.4f}M {n_kv / 1e6:11.4f}M {p / 1e6:8.0f}M")
    out.append("  the notebook assumes heads x kv = d_model; counting the real attention width matches to 0.01%")

    out += ["", "Table A4: exact training FLOPs vs 6ND (one 2048-token sequence, vocab 32,000):",
            f"  {'d_model':>7} {'layers':>6} {'N':>14} {'FLOPs':>18} {'6ND':>18} {'ratio':>8}"]
    for r in table_a4():
        out.append(f"  {r['d_model']:7d} {r['n_layers']:6d} {r['N']:14,d} {r['flops']:18,d} "
                   f"{r['approx']:18,d} {r['ratio']:8.4f}")

    slope, intercept = fit_power_law(*zip(*TABLE3_APPROACH2))
    out += ["", "Approach 2: log10(tokens) fitted against log10(params) over Table 3's nine rows:",
            f"  log10 D = {slope:.4f} log10 N + {intercept:.4f}",
            f"  GPT-2 small (124M params) -> {tokens_for_params(124e6) / 1e9:.2f}B tokens "
            f"({tokens_for_params(124e6) / 124e6:.1f} per parameter)"]
    return "\n".join(out)


SWEEP = dict(  # the sweep's keys: python scaling.py sweep --key=value
    quick=False,  # the first budget only, 5 models (67 s on 2 cores, 2026-11-25): a minimum, no exponent
    out_dir="out-scaling",  # where runs, isoflop.json and isoflop.png go
    dataset="shakespeare_char",  # a char-level dataset prepared under data/
    data_dir="",  # the dataset folder; "": data/<dataset>
    jobs=0,  # trainings at once; 0: one per core
)


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    sweeping = argv[:1] == ["sweep"]
    if argv and not sweeping and not any(a in HELP for a in argv):
        folder = (argv[0].partition("=")[2] if argv[0].startswith("--out_dir=") else
                  "" if argv[0].startswith("-") else argv[0])  # --out_dir=out-tiny, or out-tiny alone
        work = folder and held_work(folder, kinds=("a training run",))  # out-tiny: a run to size, not to sweep into
        hint = (" (did you mean --help?)" if means_help(argv[0]) else
                " (did you mean sweep?)" if difflib.get_close_matches(argv[0], ["sweep"]) else
                f" ({folder} holds {work}: sizing.py --out_dir={folder} sizes it; a sweep trains into "
                "a folder of its own)" if work else
                f" (did you mean sweep {argv[0]}?)" if argv[0].startswith("--") else "")
        raise ConfigError(f"scaling.py takes no arguments (the figures), or sweep and its --key=value; "
                          f"got '{argv[0]}'{hint}")
    # argparse's spellings, as before: bare --quick, --out_dir DIR; --help lists the sweep's keys
    cfg = configure(SWEEP, spaced_values(argv[sweeping:], SWEEP), files=False)
    if cfg["jobs"] < 0:
        raise ConfigError(f"jobs must be >= 0 (0: one per core), got {cfg['jobs']}")
    signal.signal(signal.SIGINT, signal.default_int_handler)  # Ctrl-C stops, even if started with it ignored
    if sweeping:
        sweep(**cfg)
    else:
        print(report())


if __name__ == "__main__":
    run(main)  # a dataset that cannot be prepared or read is one line, as in train.py
