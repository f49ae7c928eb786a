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
init_from = "resume"  # "resume" (out_dir's run) | "gpt2" ... "gpt2-xl" | a Hugging Face folder
out_dir = "out"  # the training run's folder (with init_from="resume")
ckpt = ""  # "ckpt.pt" (latest) | "best.pt" (lowest val); "" = best.pt if there is one, else ckpt.pt
meta = ""  # the tokenizer's meta.json (or nanoGPT's meta.pkl); "" = the run's, or its dataset's
start = "\n"  # the prompt, or "FILE:path" to read it from a file; "\n" typed in a shell too
num_samples = 3  # samples, one after another, separated by a line of dashes
max_new_tokens = 500  # tokens generated per sample (characters, for a char-level model)
temperature = 0.8  # 0 = greedy (always the most likely token); above 1 = more random
top_k = 200  # sample only among the k most likely tokens; None = all
top_p = None  # nucleus sampling: the fewest tokens whose probability reaches top_p; None = off
seed = 1337  # the same seed, the same samples
device = "auto"  # "auto" (cuda, then mps, then cpu) | "cpu" | "cuda" | "cuda:1" | "mps"
dtype = "auto"  # "auto" (float32 on a CPU below 512 wide) | "float32" | "bfloat16" | "float16"
use_cache = True  # KV cache: each new token costs one position, not the whole context
compile = False  # torch.compile the steps: it takes a while (a minute on a CPU), for long runs
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
    # Recomputing, every length is a shape of its own: there is nothing to compile.
    if cfg["compile"] and not cfg["use_cache"]:
        raise ConfigError("compile=true compiles the KV cache's steps: it needs use_cache=true")
    if cfg["top_k"] is not None and cfg["top_k"] < 1:  # configurator makes it an integer
        raise ConfigError(f"top_k must be a positive integer or None, got {cfg['top_k']}")
    p = cfg["top_p"]
    if p is not None and (not isinstance(p, (int, float)) or not 0 <= p <= 1):
        raise ConfigError(f"top_p must be a number in [0, 1] or None, got {p!r}")


def read_prompt(start):
    """The prompt text: --start as typed, or a file's contents with --start=FILE:path."""
    if not start.startswith("FILE:"):
        return start.replace("\\n", "\n")  # a shell passes --start="\n" as a backslash and an n
    path = start[len("FILE:"):]
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except (OSError, UnicodeDecodeError) as e:
        why = getattr(e, "strerror", None) or e
        raise ConfigError(f"cannot read prompt file {path}: {why}") from None


def sampling_dtype(model, device, dtype):
    """The dtype sample.py samples in, and bench.py times: device.py's choice, but float32 on a CPU
    for a model below 512 wide, where bfloat16 samples slower (docs/cpu.md#which-dtype)."""
    _, device_type, name = resolve_device(device, dtype)
    if dtype == "auto" and device_type == "cpu" and model.config.n_embd < 512:
        return "float32"
    return name


def encode_prompt(text, meta):
    """The prompt's ids. An empty prompt is GPT-2's <|endoftext|> (a document's start); for a
    char-level model it is an error."""
    ids = load_tokenizer(meta)[0](text or (EOT if meta["tokenizer"] == "gpt2" else ""))
    if not ids:
        raise ConfigError("the prompt is empty: pass --start with some text")
    return ids


def compile_steps(model, x, max_new_tokens):
    """A compiled copy of the model for the steps after the prompt, or None where compiling fails.
    It compiles at its first calls, so it makes here those the sample will make: a token through
    the cache and, if the sample moves the window, the whole window."""
    log("compiling the model's steps (torch.compile): on a CPU this takes from seconds to a minute")
    start = time.time()
    step = torch.compile(model, dynamic=False)
    block_size = model.config.block_size
    try:
        with compiling():
            list(model.generate_tokens(x, min(max_new_tokens, 2), step=step))
            if x.size(1) + max_new_tokens > block_size + 1:
                step(x.new_zeros(len(x), block_size))
    except Exception as e:
        log(f"warning: {e}; running uncompiled")
        return None
    log(f"compiled in {time.time() - start:.1f}s")
    return step


def print_sample(prompt, meta, ids):
    """The prompt, then each id's text as it comes, then a line of dashes."""
    print(prompt, end="", flush=True)
    for piece in stream_decode(meta, ids):
        print(piece, end="", flush=True)
    print("\n---------------", flush=True)


def main(argv=None):
    cfg = configure(DEFAULTS, argv, nullable=("top_k", "top_p"))
    check(cfg)
    device, device_type, _ = resolve_device(cfg["device"], cfg["dtype"])
    text = read_prompt(cfg["start"])  # before loading: a bad prompt file fails at once
    model, meta, loaded = load_model(cfg["init_from"], cfg["out_dir"], cfg["ckpt"], cfg["meta"])
    ids = encode_prompt(text, meta)
    log(loaded)
    n = cfg["num_samples"]
    if cfg["temperature"] == 0 and n > 1:
        n = 1
        log(f"temperature=0 is greedy: all {cfg['num_samples']} samples would be this one")
    x = torch.tensor([ids] * n, device=device)  # the samples as one batch: a step costs ~one's
    model.to(device)
    dtype = sampling_dtype(model, device, cfg["dtype"])
    with torch.no_grad(), autocast(device_type, dtype):
        step = compile_steps(model, x, cfg["max_new_tokens"]) if cfg["compile"] else None
        torch.manual_seed(cfg["seed"])
        start = time.time()
        tokens = model.generate_tokens(x, cfg["max_new_tokens"], cfg["temperature"], cfg["top_k"],
                                       cfg["top_p"], cfg["use_cache"], step)
        # The first sample is printed as it is generated; tee keeps every token for the others.
        tokens, kept = itertools.tee(tokens)
        prompt = text.lstrip("\n")  # not the default prompt's blank line: the text
        try:
            print_sample(prompt, meta, (t[0, 0].item() for t in tokens))
            for row in torch.cat(list(kept), dim=1)[1:].tolist():
                print_sample(prompt, meta, row)
        except KeyboardInterrupt:
            print(flush=True)  # the stop's word gets a line of its own
            raise
    seconds = time.time() - start
    total = n * cfg["max_new_tokens"]
    compiled = ", compiled" if step is not None else ""
    log(f"{total:,} tokens in {seconds:.1f}s ({total / max(seconds, 1e-9):,.0f} tokens/s, "
        f"{device_type} {dtype}, use_cache={cfg['use_cache']}{compiled})")


if __name__ == "__main__":
    run(main)
