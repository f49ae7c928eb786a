"""
The run folder's life cycle: what train.py writes into out_dir, and how an earlier run there is
kept.

    out_dir/ckpt.pt, best.pt    checkpoints (checkpoint.py writes them atomically)
    out_dir/log.jsonl           one JSON record per logged iteration and per eval
    out_dir/meta.json           the dataset's tokenizer, so sample.py can decode
    out_dir/loss.png            the loss curves (with matplotlib)
    out_dir/lens.html, hf/      what lens.py and export.py write about the run's model
    out_dir/previous/<when>/    earlier runs, all of the above: a new run moves them here

Nothing is written until the run has trained its first iteration: a run stopped before then leaves
out_dir as it found it. From then on the run holds a lock on out_dir: a second run into it is
refused.
"""

import contextlib
import json
import math
import os
import sys
import tempfile
import time

try:
    import fcntl
except ImportError:  # Windows: runs go unlocked
    fcntl = None

from checkpoint import load_checkpoint
from configurator import ConfigError
from tokenizer import replace_file, write_meta

RUN_FILES = ("ckpt.pt", "best.pt", "log.jsonl", "meta.json")
PAGES = (".png", ".html", ".htm")  # loss.png, and what lens.py draws in a run's folder


def check_writable(out_dir):
    """A one-line ConfigError now, before training, where out_dir cannot take files: the folder is
    made and a file written in it, then what was made is taken away again (a run stopped before its
    first iteration leaves none)."""
    made, there = [], os.path.abspath(out_dir)
    while not os.path.exists(there):
        made.append(there)
        there = os.path.dirname(there)
    try:
        os.makedirs(out_dir, exist_ok=True)
        tempfile.TemporaryFile(dir=out_dir).close()
    except OSError as e:
        raise ConfigError(f"cannot write to out_dir={out_dir}: {e.strerror or e}") from None
    finally:
        for folder in made:
            with contextlib.suppress(OSError):
                os.rmdir(folder)


def move_aside(out_dir):
    """Move an earlier run to out_dir/previous/<when>-iter<N>/: its files, its pictures and pages
    (lens.py's too) and export.py's folders. Returns that folder, or None if out_dir held no run. A
    rename each: cheap at any size, and nothing is overwritten."""
    path = lambda *names: os.path.join(out_dir, *names)  # noqa: E731
    names = [n for n in os.listdir(out_dir) if n in RUN_FILES or n.endswith(PAGES)
             or os.path.isfile(path(n, "config.json"))]
    if not {"ckpt.pt", "best.pt", "log.jsonl"} & set(names):
        return None
    try:  # mapped: a glance, cheap at any size
        iters = [load_checkpoint(path("ckpt.pt"), mmap=True)["iter_num"]]
    except (ConfigError, KeyError):  # no readable ckpt.pt: the log tells how far the run got
        iters = [r["iter"] for r in read_log(path("log.jsonl"))]
    last = max(os.path.getmtime(path(n)) for n in names)
    stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(last))
    dest = path("previous", stamp + (f"-iter{max(iters)}" if iters else ""))
    while os.path.exists(dest):
        dest += "+"
    os.makedirs(dest)
    for name in names:
        os.replace(path(name), os.path.join(dest, name))
    return dest


class RunLog:
    """log.jsonl, opened at the run's first complete iteration (records before that wait in memory):
    only then is out_dir locked for this run, an earlier run moved aside (unless this run resumes it
    from resume_iter, whose records up to its checkpoint it keeps) and meta.json written. wandb:
    wandb.init's arguments, to log there too (optional: where wandb cannot start, one line says so
    and the run trains on)."""

    def __init__(self, out_dir, resume_iter, meta, wandb=None):
        self.out_dir, self.resume_iter, self.meta = out_dir, resume_iter, meta
        self.file, self.pending, self.lock, self.wandb = None, [], None, None
        if wandb is not None:
            try:
                import wandb as w
                self.wandb = w.init(**wandb)
            except Exception as e:  # not installed, not logged in, offline
                print(f"warning: wandb logging is off ({type(e).__name__}: {e})", file=sys.stderr)

    def open(self):
        """Returns the folder an earlier run was moved to, or None."""
        os.makedirs(self.out_dir, exist_ok=True)
        self.lock = lock(self.out_dir)
        path = os.path.join(self.out_dir, "log.jsonl")
        start = self.resume_iter
        # a resume keeps what led to its checkpoint: the records before it, and the eval at it
        kept = [] if start is None else [r for r in read_log(path) if r["iter"] < start or
                                         (r["iter"] == start and "val_loss" in r)]
        moved = None if start is not None else move_aside(self.out_dir)
        write_meta(self.out_dir, self.meta)
        self.file = open(path, "w")
        for record in kept + self.pending:
            self.write(record, remote=False)
        return moved

    def write(self, record, remote=True):
        if remote and self.wandb is not None:
            self.wandb.log(record)
        if self.file is None:
            self.pending.append(record)
            return
        # strict JSON: a diverged value (nan, inf) is written as null
        record = {k: None if isinstance(v, float) and not math.isfinite(v) else v
                  for k, v in record.items()}
        self.file.write(json.dumps(record) + "\n")
        self.file.flush()

    def close(self):
        if self.file is not None:
            self.file.close()
        if self.lock is not None:
            os.close(self.lock)
        if self.wandb is not None:
            self.wandb.finish()


def lock(out_dir):
    """One run at a time writes into out_dir: a second would move the first's files aside under it,
    then both would write the same ckpt.pt. A lock on the folder itself, where the filesystem has
    one; it goes when its descriptor (returned) is closed, or with the process, however it ends."""
    if fcntl is None:
        return None
    fd = os.open(out_dir, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise ConfigError(f"another train.py is training into {out_dir} now: let it end, "
                          "or pass another --out_dir")
    except OSError:  # no locks on this filesystem
        os.close(fd)
        return None
    return fd


def read_log(path):
    """The records of a log.jsonl (a missing file, or a torn last line, is passed over)."""
    records = []
    if os.path.isfile(path):
        with open(path, "rb") as f:
            for line in f:
                try:
                    record = json.loads(line)
                except ValueError:
                    continue
                if isinstance(record, dict) and isinstance(record.get("iter"), int):
                    records.append(record)
    return records


def plot_losses(records, path, title=""):
    """loss.png: the whole run's batch loss and eval losses against the iteration, and below them
    the gradient norm. False without matplotlib."""
    try:
        import matplotlib
        matplotlib.use("Agg")  # files only, no display needed
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    steps = [r for r in records if r.get("loss") is not None]
    evals = [r for r in records if None not in (r.get("val_loss"), r.get("train_loss"))]
    norms = [r for r in steps if r.get("grad_norm") is not None]
    fig, (ax, ax2) = plt.subplots(2, 1, figsize=(8, 7), sharex=True,
                                  gridspec_kw={"height_ratios": [2, 1]})
    ax.plot([r["iter"] for r in steps], [r["loss"] for r in steps], lw=1, alpha=0.5,
            label="train (batch)")
    for key, label in (("train_loss", "train (eval)"), ("val_loss", "val (eval)")):
        ax.plot([r["iter"] for r in evals], [r[key] for r in evals], "o-", ms=3, label=label)
    ax.set(title=title, ylabel="cross-entropy (nats per token)")
    ax.grid(alpha=0.3)
    ax.legend()
    ax2.plot([r["iter"] for r in norms], [r["grad_norm"] for r in norms], lw=1)
    ax2.set(yscale="log" if norms else "linear", ylabel="gradient norm\n(before clipping)",
            xlabel="iteration")
    ax2.grid(alpha=0.3)
    replace_file(path, lambda f: fig.savefig(f, format="png", dpi=120, bbox_inches="tight"))
    plt.close(fig)
    return True
