"""
Sample from a trained model, printing each token as it is generated:

    python sample.py --out_dir=out-tiny
    python sample.py --out_dir=out-tiny --start="ROMEO:" --num_samples=1 --max_new_tokens=1000
    python sample.py --init_from=gpt2 --start=FILE:prompt.txt --temperature=0.7 --top_p=0.9
    python sample.py --out_dir=../nanoGPT/out-shakespeare-char    # a nanoGPT run, as it is

Samples go to stdout, separated by a line of dashes; what was loaded goes to stderr.
"""

import itertools
import os
import sys
import time

if __name__ == "__main__":  # before torch loads: a Ctrl-C meanwhile is one line; OpenMP's idle threads sleep
    from configurator import let_idle_threads_sleep, quit_quietly_on_early_ctrl_c
    quit_quietly_on_early_ctrl_c()
    let_idle_threads_sleep()
import torch

from checkpoint import (check_init_from, checkpoint_summary, is_export, load_checkpoint, model_from_checkpoint,
                        model_from_pretrained)
from configurator import ConfigError, autocast, config_keys, configure, resolve_device, run, training_into
from tokenizer import find_meta, gpt2_meta, load_tokenizer, read_meta, read_nanogpt_meta, stream_decode

# -----------------------------------------------------------------------------
init_from = "resume"  # "resume" (a checkpoint in out_dir) | "gpt2" | "gpt2-medium" | ... | a Hugging Face model folder
out_dir = "out"  # the training run's folder (with init_from="resume")
ckpt = ""  # "ckpt.pt" (latest) | "best.pt" (lowest val loss); "" = best.pt if there is one, else ckpt.pt
meta = ""  # the tokenizer: a meta.json or nanoGPT meta.pkl; "" = look beside the checkpoint, then in its dataset
start = "\n"  # the prompt, or "FILE:path" to read it from a file; "\n" typed in a shell is a newline too
num_samples = 3  # samples, one after another, separated by a line of dashes
max_new_tokens = 500  # tokens generated per sample (characters, for a char-level model)
temperature = 0.8  # 0 = greedy (always the most likely token); above 1 = more random
top_k = 200  # sample only among the k most likely tokens; None = all
top_p = None  # nucleus sampling: the smallest set of tokens whose probability reaches top_p (0: the top one); None = off
seed = 1337  # the same seed, the same samples
device = "auto"  # "auto" (cuda, then mps, then cpu) | "cpu" | "cuda" | "cuda:1" | "mps"
dtype = "auto"  # "auto" (bfloat16 on GPUs that have it, float16 on older ones; on a CPU with native bf16, bfloat16 from 512 wide; else float32) | "float32" | "bfloat16" | "float16"
use_cache = True  # KV cache: each new token costs one position, not the whole context (up to block_size)
compile = False  # torch.compile the forward: compiling takes a while (a minute on a CPU), so only for long runs
# -----------------------------------------------------------------------------
DEFAULTS = config_keys(globals())
REPO = os.path.dirname(os.path.abspath(__file__))


def log(*args):
    print(*args, file=sys.stderr, flush=True)


def check(cfg):
    """Values configurator cannot check by type alone."""
    for key in ("num_samples", "max_new_tokens"):  # 0 new tokens would print the prompt back, and nothing else
        if cfg[key] < 1:
            raise ConfigError(f"{key} must be >= 1, got {cfg[key]}")
    if cfg["temperature"] < 0:
        raise ConfigError(f"temperature must be >= 0, got {cfg['temperature']}")
    if cfg["top_k"] is not None and (not isinstance(cfg["top_k"], int) or isinstance(cfg["top_k"], bool) or cfg["top_k"] < 1):
        raise ConfigError(f"top_k must be a positive integer or None, got {cfg['top_k']!r}")
    p = cfg["top_p"]
    if p is not None and (not isinstance(p, (int, float)) or isinstance(p, bool) or not 0 <= p <= 1):
        raise ConfigError(f"top_p must be a number in [0, 1] or None, got {p!r}")
    check_init_from(cfg["init_from"], ("resume",))


def load_model(cfg):
    """(model, meta, what was loaded): the model and its tokenizer's meta, from out_dir or GPT-2's weights."""
    name = cfg["init_from"]
    if name == "resume":
        checkpoint, path, model, meta, meta_from = load_run(cfg["out_dir"], cfg["ckpt"], cfg["meta"])
        summary = checkpoint_summary(checkpoint.get("iter_num", "?"), checkpoint.get("best_val_loss"))
        loaded = f"loaded {path} ({summary})" + ("" if cfg["ckpt"] else better_latest(path, checkpoint))
    else:
        try:
            model = model_from_pretrained(name)
        except (ImportError, OSError, ValueError) as e:  # no transformers, no network, a folder it cannot read
            raise ConfigError(f"cannot load {name}: {str(e).splitlines()[0][:300]}") from None
        # a folder export.py wrote carries glassgpt's meta.json: a char model keeps its characters
        found = read_meta_path(cfg["meta"]) if cfg["meta"] else os.path.isdir(name) and find_meta(name)
        meta, meta_from = found or (gpt2_meta(), "GPT-2's BPE")
        kind = "GPT-2" if model.config.position != "rope" else "Arcee"  # the format; a folder's weights are its own
        loaded = f"loaded {name}, a Hugging Face {kind} folder" if os.path.isdir(name) else f"loaded {kind} weights {name}"
        meta_from = check_meta_fits(meta, meta_from, model.config.vocab_size)
    return model, meta, f"{loaded}, tokenizer from {meta_from}"


def check_meta_fits(meta, meta_from, vocab_size):
    """
    A tokenizer with more tokens than the model has ids is another dataset's (a run copied away from its
    data/, a nanoGPT run beside this repo's own data/shakespeare_char): refused in one line. One with fewer
    characters may be too (seldom does a run train on characters it lacks): meta_from, returned, says so.
    """
    if meta["vocab_size"] > vocab_size:
        raise ConfigError(f"the tokenizer from {meta_from} has {meta['vocab_size']} tokens but the model only "
                          f"{vocab_size}: not this model's; name its meta.json (or nanoGPT's meta.pkl) with "
                          "--meta=PATH")
    fewer = too_few_characters(meta, vocab_size)
    return meta_from + (f" (warning: {fewer}, which print as \ufffd: this model's meta.json?)" if fewer else "")


def too_few_characters(meta, vocab_size):
    """Words for a char tokenizer with fewer characters than the model has ids, else ""."""
    if meta["tokenizer"] == "char" and meta["vocab_size"] < vocab_size:
        return f"the tokenizer's {meta['vocab_size']} characters are fewer than the model's {vocab_size} ids"
    return ""


def better_latest(path, checkpoint):
    """
    When best.pt was taken by default and ckpt.pt beside it records a lower best val loss (nanoGPT,
    which writes only ckpt.pt, trained on in the folder after glassgpt), the words that say so.
    """
    latest = os.path.join(os.path.dirname(path), "ckpt.pt")
    if os.path.basename(path) != "best.pt" or not os.path.isfile(latest):
        return ""
    try:
        glance = load_checkpoint(latest, mmap=True)
        lower, best = float(glance["best_val_loss"]), float(checkpoint["best_val_loss"])
    except (ConfigError, KeyError, TypeError, ValueError):
        return ""
    if not lower < best:
        return ""
    return (f"; ckpt.pt beside it records a lower val loss ({checkpoint_summary(glance.get('iter_num', '?'), lower)}):"
            " --ckpt=ckpt.pt samples that")


def load_run(folder, ckpt="", meta=""):
    """
    (checkpoint, its path, model, meta, where meta came from) of a training run's out_dir, glassgpt's
    or nanoGPT's: ckpt names the file ("" = best.pt if there is one, else ckpt.pt), meta the tokenizer.
    """
    if not folder:  # "" would read as "out_dir  does not exist", and train into --out_dir=
        raise ConfigError("out_dir is empty: pass a training run's folder, e.g. --out_dir=out-tiny")
    if ckpt and not ckpt.endswith(".pt"):  # log.jsonl, meta.json: not read as a checkpoint, by any tool
        raise ConfigError(f"ckpt must be ckpt.pt, best.pt or another .pt file in out_dir, got {ckpt!r}")
    if folder.endswith(".pt") and os.path.isfile(folder):  # a checkpoint named as out_dir
        parent, name = os.path.dirname(folder) or ".", os.path.basename(folder)
        raise ConfigError(f"out_dir {folder} is a file: out_dir is a run's folder; for that file pass "
                          f"--out_dir={parent} --ckpt={name}")
    if os.path.exists(folder) and not os.path.isdir(folder):  # nothing trains into a file
        raise ConfigError(f"out_dir {folder} is a file, not a training run's folder (its ckpt.pt or best.pt): "
                          "pass --out_dir=<its out_dir>")
    if not os.path.isdir(folder):
        raise ConfigError(f"out_dir {folder} does not exist: expected a training run's folder there (its ckpt.pt or "
                          f"best.pt); train a model into it first ({training_into(folder)}) or pass --out_dir=<its out_dir>")
    path = os.path.join(folder, ckpt or ("best.pt" if os.path.isfile(os.path.join(folder, "best.pt")) else "ckpt.pt"))
    if not os.path.isfile(path) and is_export(folder):  # config.json and weights: --init_from's kind of folder
        raise ConfigError(f"no checkpoint at {path}: {folder} is a Hugging Face folder as export.py writes, not a "
                          f"training run; sample.py and lens.py read it with --init_from={folder}")
    runs = [] if os.path.isfile(path) else sorted(
        d for d in os.listdir(folder) if any(os.path.isfile(os.path.join(folder, d, n)) for n in ("ckpt.pt", "best.pt")))
    if runs:  # out_dir/previous (named by time, so the last is the newest), or a folder of runs
        raise ConfigError(f"no checkpoint at {path}, but {folder} holds {len(runs)} run{'s' * (len(runs) > 1)} "
                          f"({', '.join(runs[-3:])}{', ...' if len(runs) > 3 else ''}): pass one as out_dir, "
                          f"e.g. --out_dir={os.path.join(folder, runs[-1])}")
    checkpoint = load_checkpoint(path)
    try:
        model = model_from_checkpoint(checkpoint)
    except (RuntimeError, TypeError, ValueError, KeyError) as e:
        why = str(e).splitlines()[0][:300]
        raise ConfigError(f"{path} does not hold a model this code can build: "
                          + (why if isinstance(e, ValueError) else f"{type(e).__name__}: {why}")) from None
    vocab_size = model.config.vocab_size
    meta, meta_from = read_meta_path(meta) if meta else meta_for_run(folder, checkpoint.get("config") or {}, vocab_size)
    return checkpoint, path, model, meta, check_meta_fits(meta, meta_from, vocab_size)


GPT2_VOCAB = 50257  # tiktoken's GPT-2 BPE: a model with fewer ids cannot have been trained on it


def meta_for_run(folder, train_config, vocab_size):
    """
    (meta, where from): a meta.json or nanoGPT's meta.pkl in out_dir, else in the training dataset's
    folder data/<dataset>: beside out_dir (a nanoGPT checkout), from here (as nanoGPT looks), in this
    repo. Neither: GPT-2's BPE, as nanoGPT assumes, where the model has ids enough for it.
    """
    dataset = os.path.join("data", str(train_config.get("dataset", "")))
    seen = set()
    for where in (folder, os.path.normpath(os.path.join(folder, "..", dataset)), dataset, os.path.join(REPO, dataset)):
        if os.path.realpath(where) not in seen:
            seen.add(os.path.realpath(where))
            found = find_meta(where)
            if found:
                return found
    if vocab_size < GPT2_VOCAB:  # a char model moved away from its data/: say so, not GPT-2's BPE (or its download)
        raise ConfigError(f"no meta.json or meta.pkl for {folder} (looked in it and in {dataset} beside it, here "
                          f"and in this repo), and its {vocab_size} ids are too few for GPT-2's BPE: name its "
                          "tokenizer with --meta=PATH")
    return gpt2_meta(), "GPT-2's BPE (no meta.json or meta.pkl found)"


def read_meta_path(path):
    """(meta, path) for --meta: a meta.json, a nanoGPT meta.pkl, or the folder holding one."""
    if os.path.isdir(path):
        found = find_meta(path)
        if not found:
            raise ConfigError(f"no meta.json or meta.pkl in {path}")
        return found
    if not os.path.isfile(path):
        raise ConfigError(f"no tokenizer file {path} (--meta wants a meta.json or meta.pkl)")
    if not path.endswith((".json", ".pkl")):  # README.md: not unpickled to say "not plain data"
        raise ConfigError(f"--meta wants a meta.json, nanoGPT's meta.pkl or the folder holding one, got {path}")
    return (read_meta(path) if path.endswith(".json") else read_nanogpt_meta(path)), path


def read_prompt(start):
    """The prompt text: --start as typed, or a file's contents with --start=FILE:path."""
    if not start.startswith("FILE:"):
        return start.replace("\\n", "\n")  # a shell passes --start="\n" as a backslash and an n
    path = start[len("FILE:"):]
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"cannot read prompt file {path}: {getattr(e, 'strerror', None) or e}") from None
    if not text:
        raise ConfigError(f"prompt file {path} is empty")
    return text


def encode_prompt(text, meta, default=False):
    """The prompt's ids; default: text is the script's default --start, which a small vocabulary may lack."""
    encode, _ = load_tokenizer(meta)
    try:
        ids = encode(text)
    except ConfigError as e:
        if not default:
            raise
        raise ConfigError(f"{e}, which the default prompt ({text!r}) uses: pass --start with text of its own "
                          "characters") from None
    if not ids:
        if meta["tokenizer"] != "gpt2":
            raise ConfigError("the prompt is empty: pass --start with some text")
        ids = encode("<|endoftext|>")  # GPT-2's "start of a document"
    return ids


def without_leading_newlines(pieces):
    """A sample's pieces from its first one that is not all newlines: the default prompt is a newline,
    and the text after it often opens with more, which would start each sample with blank lines."""
    pieces = iter(pieces)
    for piece in pieces:
        piece = piece.lstrip("\n")
        if piece:
            yield piece
            break
    yield from pieces


def main(argv=None):
    cfg = configure(DEFAULTS, argv, nullable=("top_k",), reads_run=True)
    check(cfg)
    torch.manual_seed(cfg["seed"])
    dev, _, _ = resolve_device(cfg["device"], "float32")  # the device; the dtype once the model's width is known

    text = read_prompt(cfg["start"])  # before loading: a bad prompt file fails at once
    model, meta, loaded = load_model(cfg)
    _, device_type, dtype = resolve_device(dev, cfg["dtype"], model.config.n_embd, sampling=True)  # by its width
    model.eval().to(dev)
    ids = encode_prompt(text, meta, default=cfg["start"] == DEFAULTS["start"])
    log(loaded)  # only now: a bad input leaves just its one error line on stderr
    if cfg["temperature"] == 0 and cfg["num_samples"] > 1:
        log(f"note: temperature=0 is greedy, so the {cfg['num_samples']} samples will be the same: "
            "--num_samples=1 gives it once")
    x = torch.tensor([ids], dtype=torch.long, device=dev)
    if cfg["compile"]:
        eager = model.forward
        log("compiling the model (torch.compile): on a CPU this takes from seconds to a minute")
        try:  # torch.compile is lazy: compiling happens, and fails, at the first call, so make it here
            model.forward = torch.compile(eager)
            with torch.no_grad(), autocast(device_type, dtype):
                model(x[:, -model.config.block_size:])
        except Exception as e:
            model.forward = eager
            log(f"warning: torch.compile failed ({type(e).__name__}), running uncompiled")

    t0, n_tokens, mid_line = time.time(), 0, False
    try:
        for _ in range(cfg["num_samples"]):
            with torch.no_grad(), autocast(device_type, dtype):
                tokens = (t.item() for t in model.generate_tokens(
                    x, cfg["max_new_tokens"], cfg["temperature"], cfg["top_k"], cfg["top_p"], cfg["use_cache"]))
                said = False
                for piece in without_leading_newlines(itertools.chain([text], stream_decode(meta, tokens))):
                    print(piece, end="", flush=True)
                    mid_line, said = not piece.endswith("\n"), True
                if not said:  # else an empty sample, as if nothing were generated
                    print(f"(nothing but line breaks in {cfg['max_new_tokens']} new token(s): a model sampled greedily "
                          "or nearly so can repeat one; a prompt such as --start=\"ROMEO:\", or more choice (a higher "
                          "temperature, top_k, top_p), gives text)", end="")
            print("\n---------------", flush=True)
            n_tokens, mid_line = n_tokens + cfg["max_new_tokens"], False
    except KeyboardInterrupt:
        if mid_line:  # end the text's line, so that "interrupted" is not glued to it
            print(flush=True)
        raise
    dt = time.time() - t0
    log(f"{n_tokens:,} tokens in {dt:.1f}s ({n_tokens / max(dt, 1e-9):,.0f} tokens/s, {device_type} {dtype}, "
        f"use_cache={cfg['use_cache']})")


if __name__ == "__main__":
    run(main)
