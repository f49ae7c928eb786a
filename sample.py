"""
Sample from a trained model, printing each token as it is generated:

    python sample.py --out_dir=out-tiny
    python sample.py --out_dir=out-tiny --start="ROMEO:" --num_samples=1 --max_new_tokens=1000
    python sample.py --init_from=gpt2 --start=FILE:prompt.txt --temperature=0.7 --top_p=0.9
    python sample.py --out_dir=../nanoGPT/out-shakespeare-char    # a nanoGPT run, as it is

Samples go to stdout, separated by a line of dashes; what was loaded goes to stderr.
"""

import itertools
import sys
import time

from device import autocast, compiling, resolve_device  # before torch: OpenMP's setting
import torch

from checkpoint import load_model
from configurator import ConfigError, config_keys, configure, run
from tokenizer import EOT, load_tokenizer, stream_decode

# -----------------------------------------------------------------------------
init_from = "resume"  # "resume" (a checkpoint in out_dir) | "gpt2" | "gpt2-medium" | ... | a Hugging Face model folder
out_dir = "out"  # the training run's folder (with init_from="resume")
ckpt = ""  # "ckpt.pt" (latest) | "best.pt" (lowest val loss); "" = best.pt if there is one, else ckpt.pt
meta = ""  # the tokenizer: a meta.json, nanoGPT's meta.pkl or a folder with one; "" = beside the run, or its dataset's
start = "\n"  # the prompt, or "FILE:path" to read it from a file; "\n" typed in a shell is a newline too
num_samples = 3  # samples, one after another, separated by a line of dashes
max_new_tokens = 500  # tokens generated per sample (characters, for a char-level model)
temperature = 0.8  # 0 = greedy (always the most likely token); above 1 = more random
top_k = 200  # sample only among the k most likely tokens; None = all
top_p = None  # nucleus sampling: the smallest set of tokens whose probability reaches top_p; None = off
seed = 1337  # the same seed, the same samples
device = "auto"  # "auto" (cuda, then mps, then cpu) | "cpu" | "cuda" | "cuda:1" | "mps"
dtype = "auto"  # "auto" (device.py's choice; on a CPU float32 below 512 wide) | "float32" | "bfloat16" | "float16"
use_cache = True  # KV cache: each new token costs one position, not the whole context
compile = False  # torch.compile the forward: compiling takes a while (a minute on a CPU), so only for long runs
# -----------------------------------------------------------------------------
DEFAULTS = config_keys(globals())


def log(*args):
    print(*args, file=sys.stderr, flush=True)


def check(cfg):
    """Values configurator cannot check by type alone."""
    if cfg["num_samples"] < 1 or cfg["max_new_tokens"] < 1:
        raise ConfigError("num_samples and max_new_tokens must be >= 1")
    if cfg["temperature"] < 0:
        raise ConfigError(f"temperature must be >= 0, got {cfg['temperature']}")
    if cfg["compile"] and not cfg["use_cache"]:  # recomputing, every length is a shape of its own: nothing to compile
        raise ConfigError("compile=true compiles the KV cache's steps: it needs use_cache=true")
    if cfg["top_k"] is not None and (not isinstance(cfg["top_k"], int) or cfg["top_k"] < 1):
        raise ConfigError(f"top_k must be a positive integer or None, got {cfg['top_k']!r}")
    p = cfg["top_p"]
    if p is not None and (not isinstance(p, (int, float)) or not 0 <= p <= 1):
        raise ConfigError(f"top_p must be a number in [0, 1] or None, got {p!r}")


def read_prompt(start):
    """The prompt text: --start as typed, or a file's contents with --start=FILE:path."""
    if not start.startswith("FILE:"):
        return start.replace("\\n", "\n")  # a shell passes --start="\n" as a backslash and an n
    try:
        with open(start[len("FILE:"):], encoding="utf-8") as f:
            return f.read()
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"cannot read prompt file {start[5:]}: {getattr(e, 'strerror', None) or e}") from None


def prepare(model, device, dtype):
    """The model on device as sample.py samples with it, and the dtype it samples in (bench.py times the same)."""
    _, kind, name = resolve_device(device, dtype)  # "auto" on a CPU below 512 wide: float32, bf16 ran slower there
    name = "float32" if dtype == "auto" and kind == "cpu" and model.config.n_embd < 512 else name
    for m in model.to(device).modules():  # in float32 on a CPU, one row times a weight ran 1.4x as fast column-major
        if isinstance(m, torch.nn.Linear) and kind == "cpu" and name == "float32":
            m.weight.data = m.weight.data.t().contiguous().t()  # the same matrix; docs/cpu.md has the figures
    return name


def encode_prompt(text, meta):
    """The prompt's ids; an empty prompt is GPT-2's <|endoftext|> (a document's start), for a char model an error."""
    ids = load_tokenizer(meta)[0](text or (EOT if meta["tokenizer"] == "gpt2" else ""))
    if not ids:
        raise ConfigError("the prompt is empty: pass --start with some text")
    return ids


def main(argv=None):
    cfg = configure(DEFAULTS, argv, nullable=("top_k", "top_p"))
    check(cfg)
    dev, device_type, _ = resolve_device(cfg["device"], cfg["dtype"])
    text = read_prompt(cfg["start"])  # before loading: a bad prompt file fails at once
    model, meta, loaded = load_model(cfg["init_from"], cfg["out_dir"], cfg["ckpt"], cfg["meta"])
    ids = encode_prompt(text, meta)
    log(loaded)
    n = 1 if cfg["temperature"] == 0 else cfg["num_samples"]
    if n < cfg["num_samples"]:
        log(f"temperature=0 is greedy: all {cfg['num_samples']} samples would be this one")
    dtype_name = prepare(model, dev, cfg["dtype"])
    x = torch.tensor([ids] * n, dtype=torch.long, device=dev)  # the samples as one batch: a step costs ~one sample's
    generate = lambda k, step=None: model.generate_tokens(  # noqa: E731
        x, k, cfg["temperature"], cfg["top_k"], cfg["top_p"], cfg["use_cache"], step)
    step = None
    if cfg["compile"]:  # the steps after the prompt, in the shapes they always have: one token, or the whole window
        log("compiling the model's steps (torch.compile): on a CPU this takes from seconds to a minute")
        step, t, block = torch.compile(model, dynamic=False), time.time(), model.config.block_size
        try:  # compiling happens (and fails) at the first calls: make here those the sample will make, a token through
            with compiling(), torch.no_grad(), autocast(device_type, dtype_name):  # the cache after the prompt ...
                list(generate(min(cfg["max_new_tokens"], 2), step))
                if len(ids) + cfg["max_new_tokens"] > block + 1:  # ... and the whole window, if the sample moves it
                    step(x.new_zeros(n, block))
            log(f"compiled in {time.time() - t:.1f}s")
        except Exception as e:
            step = None
            log(f"warning: {e}; running uncompiled")
    torch.manual_seed(cfg["seed"])
    t0, rest = time.time(), [[] for _ in range(n - 1)]

    def first_sample():  # the first sample's ids as they come; the others' kept, to print after it
        for token in generate(cfg["max_new_tokens"], step):
            row = token[:, 0].tolist()
            for kept, i in zip(rest, row[1:]):
                kept.append(i)
            yield row[0]
    try:
        with torch.no_grad(), autocast(device_type, dtype_name):
            for tokens in itertools.chain([first_sample()], rest):
                print(text.lstrip("\n"), end="", flush=True)  # not the default prompt's blank line: the text
                for piece in stream_decode(meta, tokens):
                    print(piece, end="", flush=True)
                print("\n---------------", flush=True)
    except KeyboardInterrupt:
        print(flush=True)  # the stop's word gets a line of its own
        raise
    total, dt = n * cfg["max_new_tokens"], time.time() - t0
    log(f"{total:,} tokens in {dt:.1f}s ({total / max(dt, 1e-9):,.0f} tokens/s, {device_type} {dtype_name}, "
        f"use_cache={cfg['use_cache']}{', compiled' if step is not None else ''})")


if __name__ == "__main__":
    run(main)
