"""
Config files plus --key=value overrides, as nanoGPT, but checked:

    python train.py config/tiny.py --batch_size=32 --compile=false --top_k=None

A config file is plain Python whose top-level names override the defaults. Every key must be one
the script defines and every value must fit the default's type; otherwise a one-line error names it.
"""

import ast
import difflib
import os
import sys
import types

TRUE, FALSE = ("true", "yes", "on", "1"), ("false", "no", "off", "0")


class ConfigError(ValueError):
    pass


def _unknown(key, defaults, where):
    close = difflib.get_close_matches(key, defaults, n=1)
    hint = f" (did you mean {close[0]}?)" if close else ""
    return ConfigError(f"unknown config key '{key}' {where}{hint}")


def _coerce(key, value, default, where, nullable=()):
    """value (parsed Python, or a str from the command line) as the type of default."""
    if default is None:  # a key that is off by default takes any value
        return value
    if value is None:
        if key in nullable:  # None turns it off, e.g. --top_k=None
            return value
        raise ConfigError(f"config key '{key}' {where} cannot be None")
    kind = type(default)
    if kind is bool:
        if isinstance(value, str) and value.lower() in TRUE + FALSE:
            return value.lower() in TRUE
        if isinstance(value, bool):
            return value
        if type(value) is int and value in (0, 1):  # --compile=0 parses as the int 0
            return bool(value)
    elif kind is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    elif kind is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
    elif kind is str:
        return value if isinstance(value, str) else str(value)
    else:
        return value
    raise ConfigError(f"config key '{key}' {where} expects {kind.__name__}, got {value!r}")


def _parse(text):
    """A command-line value: a Python literal if it is one (3, 1e-3, None, 'x'), else the raw string."""
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text


def configure(defaults, argv=None, strict_files=True, nullable=(), given=None):
    """
    Return defaults updated by argv: config file paths and --key=value, applied left to right.
    strict_files=False lets a file set keys this script does not use (sizing.py reading a train config).
    nullable names keys that may be set to None although their default is not (sample.py's top_k).
    given, a dict, receives each key that was set and where ("in config/tiny.py", "on the command
    line"): a key set to its default value was still asked for (train.py checks them against a checkpoint).
    """
    given = {} if given is None else given
    config = dict(defaults)
    for arg in sys.argv[1:] if argv is None else argv:
        if not arg.startswith("--"):
            try:
                with open(arg) as f:
                    source = f.read()
            except OSError as e:
                raise ConfigError(f"cannot read config file {arg}: {e.strerror}") from None
            scope = {}
            try:
                exec(compile(source, arg, "exec"), scope)  # config files are the user's own Python
            except Exception as e:
                raise ConfigError(f"config file {arg} failed: {type(e).__name__}: {e}") from None
            for key, value in scope.items():
                if key.startswith("_") or callable(value) or isinstance(value, types.ModuleType):  # imports, helpers
                    continue
                if key not in defaults:
                    if not strict_files:
                        continue
                    raise _unknown(key, defaults, f"in {arg}")
                config[key] = _coerce(key, value, defaults[key], f"in {arg}", nullable)
                given[key] = f"in {arg}"
        else:
            key, eq, text = arg[2:].partition("=")
            if not eq:
                raise ConfigError(f"expected --key=value, got '{arg}'")
            if key not in defaults:
                raise _unknown(key, defaults, "on the command line")
            # a str default keeps the text as typed: --out_dir=123 is the folder "123"
            value = text if isinstance(defaults[key], str) else _parse(text)
            config[key] = _coerce(key, value, defaults[key], "on the command line", nullable)
            given[key] = "on the command line"
    return config


def config_keys(namespace):
    """The configurable names of a script's globals: public ints, floats, bools, strs and Nones."""
    return {k: v for k, v in namespace.items()
            if not k.startswith("_") and isinstance(v, (int, float, bool, str, type(None)))}


DTYPES = ("float32", "bfloat16", "float16")


def resolve_device(device="auto", dtype="auto"):
    """
    (device, device type, dtype name) for this machine: device "auto" is cuda, then mps, then cpu;
    dtype "auto" is bfloat16 on GPUs that have it, float16 on other GPUs, float32 elsewhere.
    """
    import torch  # here, so that sizing.py's arithmetic needs no torch
    mps = torch.backends.mps.is_available()
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "mps" if mps else "cpu"
    try:
        kind = torch.device(device).type
    except RuntimeError:
        raise ConfigError(f"device={device!r} is not a torch device (try cpu, cuda, cuda:1, mps)") from None
    if kind not in ("cpu", "cuda", "mps") or (kind == "cuda" and not torch.cuda.is_available()) \
            or (kind == "mps" and not mps):
        raise ConfigError(f"device={device!r} is not available here")
    if dtype == "auto":
        dtype = "float32" if kind != "cuda" else "bfloat16" if torch.cuda.is_bf16_supported() else "float16"
    if dtype not in DTYPES:
        raise ConfigError(f"dtype must be auto or one of {', '.join(DTYPES)}, got {dtype!r}")
    if kind == "cpu" and dtype == "float16":  # CPUs have no fast float16 matmuls: autocast makes it crawl
        raise ConfigError("dtype=float16 on a CPU is ~10x slower than float32 (no fast float16 matmuls): use "
                          "--dtype=float32, or bfloat16 on a CPU that has it natively (AVX512-BF16, AMX)")
    return device, kind, dtype


def autocast(device_type, dtype):
    """Matmuls in a low-precision dtype, softmax and norms kept in float32; nothing to do in float32."""
    import contextlib
    import torch
    if dtype == "float32":
        return contextlib.nullcontext()
    return torch.autocast(device_type, dtype=getattr(torch, dtype))


def set_malloc_thresholds(mmap_threshold, trim_threshold):
    """
    glibc's M_MMAP_THRESHOLD (blocks this big or bigger get their own mmap, unmapped on free) and
    M_TRIM_THRESHOLD (free space at the heap's top beyond this goes back to the OS), in bytes. A fixed
    value also stops glibc adjusting them as it goes. True if both took; off glibc, False.
    """
    import ctypes
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL("libc.so.6")
        return bool(libc.mallopt(-3, mmap_threshold) and libc.mallopt(-1, trim_threshold))
    except (OSError, AttributeError):  # not glibc (musl, for one, has no libc.so.6)
        return False


def keep_freed_memory():
    """
    Keep freed memory in the process for the next step to reuse. By default glibc gives every freed
    block of 128 KiB or more back to the OS and the next step faults it in again, page by page:
    ~1,100 page faults and ~2 ms of a 30 ms CPU training step for nanoGPT's small CPU model
    (docs/cpu.md). Blocks under 32 MiB (glibc's ceiling) now come from the heap, which keeps up to
    256 MiB free. True if the setting took (Linux with glibc).
    """
    return set_malloc_thresholds(32 << 20, 256 << 20)


def run(main):
    """
    Run a script's main(): a ConfigError (bad input) becomes one line on stderr and exit code 2, and
    a Ctrl-C the script did not handle itself one line and 130, as the shell reports an interrupt.
    Under torchrun every process meets the same bad input: only rank 0 says so.
    """
    speak = os.environ.get("RANK", "0") == "0"
    try:
        main()
    except ConfigError as e:
        if speak:
            print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
    except KeyboardInterrupt:
        if speak:
            print("interrupted", file=sys.stderr)
        sys.exit(130)
