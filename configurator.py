"""
Config files plus --key=value overrides, as nanoGPT, but checked:

    python train.py config/tiny.py --batch_size=32 --compile=false --top_k=None

A config file is plain Python whose top-level names override the defaults. Every key must be one
the script defines and every value must fit the default's type; otherwise a one-line error names it.
"""

import ast
import difflib
import glob
import io
import json
import os
import re
import signal
import sys
import tempfile
import textwrap
import threading
import time
import tokenize
import types
from contextlib import contextmanager, suppress

TRUE, FALSE = ("true", "yes", "on", "1"), ("false", "no", "off", "0")


class ConfigError(ValueError):
    pass


# other projects' names for some keys, where spelling alone would not find ours
ALIASES = {"lr": "learning_rate", "num_layers": "n_layer", "num_heads": "n_head", "d_model": "n_embd",
           "hidden_size": "n_embd", "context_length": "block_size", "seq_len": "block_size", "steps": "max_iters",
           "wd": "weight_decay", "grad_accum": "gradient_accumulation_steps"}


def means_help(arg):
    """Whether a word on the command line was meant as --help: help, -help, /?, --hlep."""
    word = arg.lstrip("-/").lower()
    return word in ("help", "h", "?") or (arg.startswith("--") and bool(difflib.get_close_matches(word, ["help"], n=1)))


def _unknown(key, defaults, where, in_file=False):
    low = key.lower()  # --LR, --Batch_Size
    close = ([low] if low in defaults else [ALIASES[low]] if ALIASES.get(low) in defaults else
             difflib.get_close_matches(key, defaults, n=1))
    hint = f" (did you mean {close[0]}?)" if close else \
        f" (a variable of the file's own: name it _{key}, and it is left alone)" if in_file else \
        " (did you mean --help?)" if means_help("--" + key) else ""
    return ConfigError(f"unknown config key '{key}' {where}{hint}")


def _meant(arg, defaults):
    """A hint for key=value typed without its --, which reads as a config file's name."""
    key, eq, value = arg.partition("=")
    key = key.lstrip("-")  # -n_layer=2: one dash short
    if not eq or not key.isidentifier():
        return ""
    close = [key] if key in defaults else difflib.get_close_matches(key, defaults, n=1)
    return f" (did you mean --{close[0]}={value}?)" if close else ""


def _spaced(arg, rest, default, files):
    """A hint for argparse's --key value (rest: the arguments after --key), or a bool's bare --flag."""
    value = rest[0] if rest else None
    if value is not None and not value.startswith("-") and not (files and os.path.isfile(value)):  # not a config file
        return f" (did you mean {arg}={value}?)"
    return f" (did you mean {arg}=true?)" if isinstance(default, bool) else ""


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
        if isinstance(value, float) and value.is_integer():  # --max_iters=1e3 means 1000; 1.5 is refused
            return int(value)
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


def _training_config(script, path, scope, key, default_out_dir):
    """The error for a training config given to a script that reads a trained run (sample.py config/tiny.py)."""
    out_dir, init_from = scope.get("out_dir"), scope.get("init_from")
    if isinstance(init_from, str) and init_from not in ("scratch", "resume"):  # config/eval_gpt2.py: weights from outside
        how = f"--init_from={init_from}, the model {path} starts from"
    elif isinstance(out_dir, str):
        how = f"--out_dir={out_dir}, the folder {path} trains into"
    else:
        how = f"--out_dir={default_out_dir}, train.py's default folder, as {path} sets no out_dir"
    return ConfigError(f"{os.path.basename(script)} reads a trained run, not a training config ({path} sets {key}): "
                       f"pass {how}")


def training_into(out_dir):
    """The command that trains into out_dir, for the hint when a script that reads a run finds none there:
    the project's config/*.py whose out_dir it is (config/tiny_gpt2.py for out-tiny-gpt2), else the main job's."""
    root = os.path.dirname(os.path.abspath(__file__))
    for path in sorted(glob.glob(os.path.join(root, "config", "*.py"))):
        with open(path, encoding="utf-8") as f:
            found = re.search(r"^out_dir\s*=\s*[\"']([^\"']+)[\"']", f.read(), re.M)
        if found and os.path.abspath(found.group(1)) == os.path.abspath(out_dir):
            return f"python train.py {os.path.relpath(path, root)}"
    return f"python train.py config/tiny.py --out_dir={out_dir}"


def training_keys():
    """train.py's config keys, read from its source (importing it would start torch)."""
    return set(key_comments(os.path.join(os.path.dirname(os.path.abspath(__file__)), "train.py")))


def configure(defaults, argv=None, strict_files=True, nullable=(), sources=None, given=None, files=True,
              reads_run=False):
    """
    Return defaults updated by argv: config file paths and --key=value, applied left to right.
    strict_files=False lets a file set keys this script does not use (sizing.py reading a train config);
    reads_run=True (sample.py, lens.py, export.py: they read a run's out_dir) says, for a file that sets
    train.py's keys, to pass the out_dir it trains into instead;
    files=False takes no config files at all (a data/*/prepare.py: its bare argument is an error, not run).
    nullable names keys that may be set to None although their default is not (sample.py's top_k).
    -h or --help prints the calling script's usage and keys (see help_text) and exits 0; sources are
    the files whose comments explain the keys (default: the calling script).
    given, a dict, receives each key that was set and where ("in config/tiny.py", "on the command
    line"): a key set to its default value was still asked for (train.py checks them against a checkpoint).
    """
    argv = sys.argv[1:] if argv is None else argv
    script = sys._getframe(1).f_globals.get("__file__", sys.argv[0])  # the calling script
    if any(arg in HELP for arg in argv):
        sources = sources or [script]
        print(help_text(sources[0], [("config keys", defaults)], sources, files))
        sys.exit(0)
    given = {} if given is None else given
    config = dict(defaults)
    typed, undone = {}, []  # --key=value typed so far; those a config file after them set again
    for i, arg in enumerate(argv):
        if not arg.startswith("--") and not files:
            hint = " (did you mean --help?)" if means_help(arg) else _meant(arg, defaults)
            if "input" in defaults and os.path.isfile(arg):  # prepare.py notes.txt: the text to prepare
                hint = f" (did you mean --input={arg}?)"
            raise ConfigError(f"expected --key=value, got '{arg}'{hint}")
        if not arg.startswith("--"):
            try:
                with open(arg, encoding="utf-8") as f:
                    source = f.read()
            except OSError as e:
                hint = _meant(arg, defaults)
                if means_help(arg) and not os.path.exists(arg):  # help, /?
                    hint = " (did you mean --help?)"
                if os.path.isdir(arg) and "out_dir" in defaults:  # a run's folder, where --out_dir= was meant
                    hint = f" (a folder, not a config file: did you mean --out_dir={arg}?)"
                beside = os.path.join(os.path.dirname(os.path.abspath(script)), arg)
                if not hint and not os.path.isabs(arg) and os.path.isfile(beside):  # run from another folder
                    hint = f" (did you mean {beside}? relative paths are taken from the current folder)"
                meant = [m for m in (arg + ".py", os.path.join("config", arg), os.path.join("config", arg + ".py"))
                         if os.path.isfile(m)]  # config/tiny, tiny.py, tiny
                if reads_run and not hint and not meant and not arg.endswith(".py") and not os.path.exists(arg):
                    hint = f" (did you mean --out_dir={arg}? there is no such folder yet: {training_into(arg)} trains one)"
                if not hint and not meant and not os.path.exists(arg):  # config/tny.py, tny.py: a near name
                    folder = os.path.dirname(arg) or "config"  # not ".", where the near names are the tools
                    name = os.path.basename(arg) if arg.endswith(".py") else os.path.basename(arg) + ".py"
                    near = (difflib.get_close_matches(name, [n for n in os.listdir(folder) if n.endswith(".py")], n=1)
                            if os.path.isdir(folder) else [])
                    meant = [os.path.join(folder, n) for n in near]
                if not hint and meant and not os.path.exists(arg):
                    hint = f" (did you mean {meant[0]}?)"
                raise ConfigError(f"cannot read config file {arg}: {e.strerror}{hint}") from None
            except UnicodeDecodeError:  # a checkpoint, say, where --out_dir=<its folder> was meant
                hint = (f" (did you mean --out_dir={os.path.dirname(arg) or '.'}?)"
                        if arg.endswith(".pt") and "out_dir" in defaults else "")
                raise ConfigError(f"cannot read config file {arg}: not text, so not a config file{hint}") from None
            scope = {"__file__": arg}  # a config file may build on another beside it
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
                    if reads_run and key in training_keys():
                        raise _training_config(script, arg, scope, key, defaults["out_dir"])
                    raise _unknown(key, defaults, f"in {arg}", in_file=True)
                config[key] = _coerce(key, value, defaults[key], f"in {arg}", nullable)
                given[key] = f"in {arg}"
                flag, was = typed.pop(key, (None, None))
                if flag is not None and was != config[key]:
                    undone.append(f"{flag} comes before {arg}, which sets {key}={config[key]!r}")
        else:
            key, eq, text = arg[2:].partition("=")
            if key not in defaults:  # first: --quik says which key was meant, not that it lacks =value
                raise _unknown(key, defaults, "on the command line")
            if not eq:
                hint = _spaced(arg, argv[i + 1:], defaults[key], files)
                raise ConfigError(f"expected --key=value, got '{arg}'{hint}")
            # a str default keeps the text as typed: --out_dir=123 is the folder "123"
            value = text if isinstance(defaults[key], str) else _parse(text)
            config[key] = _coerce(key, value, defaults[key], "on the command line", nullable)
            given[key] = "on the command line"
            typed[key] = (arg, config[key])
    if undone:  # left to right is nanoGPT's rule, but nobody types a flag to have a file undo it: said, not run
        raise ConfigError(f"{'; '.join(undone)}: put --key=value after the config files")
    return config


HELP = ("-h", "--help")


def spaced_values(argv, defaults, keys=None):
    """
    argv with argparse's spellings written as --key=value: a bare `--flag` for each bool key of defaults
    (`--quick` is --quick=true), and `--key value` for each of keys, default: every other key of defaults
    (`--input notes.txt`; not where the next argument is an --option itself, which argparse refused too).
    """
    flags = {k for k, v in defaults.items() if isinstance(v, bool)}
    keys = set(defaults) - flags if keys is None else set(keys)
    out, i = [], 0
    while i < len(argv):
        arg = argv[i]
        if arg.startswith("--") and arg[2:] in flags:
            arg = f"{arg}=true"
        elif arg.startswith("--") and arg[2:] in keys and i + 1 < len(argv) and not argv[i + 1].startswith("--"):
            arg, i = f"{arg}={argv[i + 1]}", i + 1
        out.append(arg)
        i += 1
    return out


def key_comments(path):
    """
    {key: meaning} from a script's source: the comment on the line that sets the key, in a
    module-level `key = value  # meaning`, a dataclass field `key: int = 1  # meaning`, or a
    `dict(key=value,  # meaning)` entry. The first commented definition of a name wins.
    """
    with open(path, encoding="utf-8") as f:
        source = f.read()
    comments = {tok.start[0]: tok.string.lstrip("#").strip()
                for tok in tokenize.generate_tokens(io.StringIO(source).readline) if tok.type == tokenize.COMMENT}
    tree = ast.parse(source)
    found = []
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            found += [(n.lineno, n.target.id) for n in node.body
                      if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name)]
        elif isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            found.append((node.lineno, node.targets[0].id))
        if isinstance(node, (ast.Assign, ast.Expr)):  # dict(key=value, ...) anywhere in the statement
            found += [(k.lineno, k.arg) for call in ast.walk(node) if isinstance(call, ast.Call)
                      and isinstance(call.func, ast.Name) and call.func.id == "dict" for k in call.keywords if k.arg]
    meanings = {}
    for line, name in sorted(found):
        if line in comments and name not in meanings:
            meanings[name] = comments[line]
    return meanings


def help_text(script, sections, sources, files=True):
    """A script's --help: its docstring (the usage), then each section's keys as --key=default and meaning."""
    with open(script, encoding="utf-8") as f:
        doc = ast.get_docstring(ast.parse(f.read())) or ""
    meanings = {}
    for path in reversed(sources):  # the first source has the last word
        meanings.update(key_comments(path))
    how = "config files (plain Python: key = value) and --key=value, applied left to right" if files else "--key=value"
    out = [doc.strip(), "", f"Keys are set by {how};",
           "an int, float or bool key takes a value of that type, a str key the text as typed."]
    for title, defaults in sections:
        shown = {k: f"--{k}={v if isinstance(v, str) and v.isprintable() and v else repr(v)}"
                 for k, v in defaults.items()}
        width = min(max(map(len, shown.values()), default=0), 34)
        out += ["", f"{title}:"]
        out += [f"  {shown[k]:<{width}}  {meanings.get(k, '')}".rstrip() for k in defaults]
    return "\n".join(out)


LIBRARY = ("checkpoint", "configurator", "model", "muon", "tokenizer")  # modules the commands import, never run


def commands_using(module):
    """The commands (the scripts beside this file, and data/*/prepare.py) that import module, directly or
    through other modules, read from their source. A file that does not parse (a user's half-written script
    beside them) is passed over: it is no command yet."""
    root = os.path.dirname(os.path.abspath(__file__))
    paths = glob.glob(os.path.join(root, "*.py")) + glob.glob(os.path.join(root, "data", "*", "prepare.py"))
    imports = {}  # dotted module name -> the names it imports
    for path in paths:
        try:
            with open(path, encoding="utf-8") as f:
                nodes = list(ast.walk(ast.parse(f.read())))
        except (OSError, UnicodeDecodeError, SyntaxError, ValueError):  # ValueError: a NUL byte in it
            continue
        name = os.path.splitext(os.path.relpath(path, root))[0].replace(os.sep, ".")
        imports[name] = {a.name for n in nodes if isinstance(n, ast.Import) for a in n.names} | \
                        {n.module for n in nodes if isinstance(n, ast.ImportFrom)}
    users, todo = set(), [module]
    while todo:
        used = todo.pop()
        for name, names in imports.items():
            if used in names and name not in users:
                users.add(name)
                todo.append(name)
    return sorted(name.replace(".", "/") + ".py" for name in users if name not in LIBRARY)


def library_help(path):
    """
    A library module run as a script (python model.py, or with --help): one paragraph saying what it is (its
    docstring's first paragraph), that it is imported, not run, and which commands use it; exit 0. Any other
    argument is a one-line error, exit 2.
    """
    name = os.path.basename(path)
    if any(arg not in HELP for arg in sys.argv[1:]):
        print(f"error: {name} is imported, not run: it takes no arguments (python {name} --help says what it is)",
              file=sys.stderr)
        sys.exit(2)
    with open(path, encoding="utf-8") as f:
        doc = ast.get_docstring(ast.parse(f.read())) or ""
    what = " ".join(doc.split("\n\n")[0].split()).rstrip(":.")
    users = commands_using(os.path.splitext(name)[0])
    print(textwrap.fill(f"{name}: {what + '. ' if what else ''}A library module: imported, not run. "
                        f"The commands that use it: {', '.join(users)} (each answers --help).", 100,
                        break_on_hyphens=False, break_long_words=False))
    sys.exit(0)


def config_keys(namespace):
    """The configurable names of a script's globals: public ints, floats, bools, strs and Nones, not
    CONSTANTS (export.py's EOT, imported from tokenizer.py, is no key)."""
    return {k: v for k, v in namespace.items()
            if not k.startswith("_") and not k.isupper() and isinstance(v, (int, float, bool, str, type(None)))}


SPIN_WHEN_IDLE = "1000"  # GOMP_SPINCOUNT: spins before a waiting thread sleeps (~10 us at libgomp's ~100 a us)


def let_idle_threads_sleep():
    """
    Ask OpenMP to let idle threads sleep rather than spin (OMP_WAIT_POLICY=PASSIVE), unless the user chose.
    With other work on the cores spinning threads made training steps up to 15x and sampling 8-23x slower.
    But sleeping at once costs ~10% on a quiet machine: every op must wake its threads again. So where the
    cores are idle as the script starts, threads spin a moment first (libgomp's GOMP_SPINCOUNT), enough
    to bridge the gap between two ops and too short to starve other work much (docs/cpu.md). OpenMP
    reads both once, as torch loads: so a script calls this before it imports torch (this file imports
    torch only inside functions).
    """
    if "OMP_WAIT_POLICY" in os.environ:
        return
    os.environ["OMP_WAIT_POLICY"] = "PASSIVE"
    if "GOMP_SPINCOUNT" in os.environ:  # the user's spin count: no need to look at the cores
        return
    busy = busy_cores()
    if busy is not None and busy < 0.5:
        os.environ["GOMP_SPINCOUNT"] = SPIN_WHEN_IDLE


def busy_cores(seconds=0.05):
    """How many cores were busy over a short look at /proc/stat (this process sleeps meanwhile, so it is
    other work); None where there is no /proc/stat to read."""
    import time

    def ticks():  # (all, idle + iowait) since boot, summed over the cores
        with open("/proc/stat") as f:
            n = [int(v) for v in f.readline().split()[1:9]]
        return sum(n), n[3] + n[4]

    try:
        total0, idle0 = ticks()
        time.sleep(seconds)
        total1, idle1 = ticks()
    except (OSError, ValueError, IndexError):
        return None
    total = total1 - total0
    return (total - (idle1 - idle0)) / total * (os.cpu_count() or 1) if total > 0 else 0.0


def quit_quietly_on_early_ctrl_c():
    """
    Make a Ctrl-C while a script still starts (import torch takes a second or two) one line and exit 130, as
    run() makes it once main() runs, not a KeyboardInterrupt traceback from deep in an import (or, raised
    inside torch's C++, an abort). A script calls this before its slow imports; run() then takes over.
    The handler leaves at once, raising nothing: nothing has begun that could want saving or cleaning up.
    """
    def stop(signum, frame):
        if os.environ.get("RANK", "0") == "0":  # under torchrun or --nproc only rank 0 speaks, as in run()
            os.write(sys.stderr.fileno(), b"interrupted\n")
        os._exit(130)
    signal.signal(signal.SIGINT, stop)


DTYPES = ("float32", "bfloat16", "float16")


def cpu_has_native_bf16():
    """
    True where this CPU computes in bfloat16 natively (x86 AVX-512 BF16 or AMX). Elsewhere bf16 autocast
    is emulated and slower than float32, so dtype "auto" keeps float32 there (docs/cpu.md).
    """
    import torch
    checks = [getattr(torch.cpu, name, None) for name in ("_is_avx512_bf16_supported", "_is_amx_tile_supported")]
    if all(callable(check) for check in checks):  # torch's own probe (private, so checked for)
        return any(check() for check in checks)
    try:
        with open("/proc/cpuinfo") as f:
            flags = set(next((line for line in f if line.startswith("flags")), "").split())
    except OSError:
        return False
    return bool(flags & {"avx512_bf16", "amx_bf16"})


def new_parents(path):
    """The folders above path that do not exist yet, innermost first (what os.makedirs will make for it)."""
    parents, parent = [], os.path.dirname(os.path.abspath(path))
    while not os.path.exists(parent):
        parents.append(parent)
        parent = os.path.dirname(parent)
    return parents


def remove_empty(folders):
    """Remove folders a command made (innermost first) while they are empty: rmdir takes only an empty one,
    and the first one kept stops the climb."""
    with suppress(OSError):
        for folder in folders:
            os.rmdir(folder)


def unwritable(folder):
    """Why files cannot be written in folder (made first, with its parents, where missing); None if they can."""
    there = folder
    while there and not os.path.exists(there):
        there = os.path.dirname(there)
    there = there or "."  # a relative folder, none of it made yet: the current one
    if not os.path.isdir(there):
        return f"{there} is not a folder"
    if not os.access(there, os.W_OK | os.X_OK):
        return f"{there} is not writable"
    try:  # a real file, gone at once: access() passes root where the folder takes none (/proc, a read-only mount)
        with tempfile.TemporaryFile(dir=there):
            return None
    except OSError as e:
        return f"{there} takes no files (making one there failed: {e.strerror or e})"


WORK = (("ckpt.pt", "a training run"), ("best.pt", "a training run"), ("log.jsonl", "a training run"),
        ("config.json", "a Hugging Face model"), ("train.bin", "a dataset"), ("val.bin", "a dataset"))


def held_work(folder, kinds=("a training run", "a Hugging Face model", "a dataset")):
    """What another command's work in folder is, as "a training run (ckpt.pt)": the first of kinds found by
    the files that mark it (a run's checkpoints or log, a model's config.json, a dataset's bins); else None."""
    return next((f"{kind} ({name})" for name, kind in WORK if kind in kinds and os.path.exists(os.path.join(folder, name))),
                None)


def code_in(folder, besides=()):
    """Code in folder, as "source code (train.py)": a Python file not named in besides (a checkout, config/, a
    dataset's folder before its prepare.py has run), or a dataset's prepare.py a level down (data/); else None."""
    if not os.path.isdir(folder):  # not made yet: nothing in it
        return None
    entries = sorted(os.scandir(folder), key=lambda e: e.name)
    found = next((e.name for e in entries if e.name.endswith(".py") and e.name not in besides and e.is_file()), None) or next(
        (os.path.join(e.name, "prepare.py") for e in entries if e.is_dir() and os.path.isfile(os.path.join(e.path, "prepare.py"))),
        None)
    return found and f"source code ({found})"


def json_mark(mark):
    """The regex not_ours takes for a JSON file whose first key is "written_by": mark."""
    return rb'\{\s*"written_by": ' + re.escape(json.dumps(mark)).encode()


def png_mark(mark):
    """The regex not_ours takes for a PNG saved with metadata={"Software": mark}: matplotlib puts that text
    chunk first after the signature and the header chunk (25 bytes)."""
    return rb"\x89PNG\r\n\x1a\n.{29}tEXtSoftware\x00" + re.escape(mark).encode()


def not_ours(path, mark, tool):
    """Why a command must not write over path: a folder, or a file that tool did not write (mark, a bytes
    regex, does not match at its start, where tool puts it in every file it writes: a user's own file of
    that name). None where path is new or tool's own earlier output, which a run of the same command replaces."""
    if os.path.isdir(path):
        return "it is a folder"
    try:
        with open(path, "rb") as f:
            if re.match(mark, f.read(4096), re.DOTALL):
                return None
    except FileNotFoundError:
        return None
    except OSError as e:
        return e.strerror or str(e)
    return f"{path} exists and {tool} did not write it: remove it or choose another name"


@contextmanager
def replacing(path):
    """Yields a temporary name beside path to write to; when the block ends it is renamed over path, whole or
    not at all: an error or a stop mid-write leaves path as it was, and the temporary goes."""
    tmp = f"{path}.tmp.{os.getpid()}"
    try:
        yield tmp
        os.replace(tmp, path)
    finally:
        with suppress(FileNotFoundError):
            os.remove(tmp)


@contextmanager
def uninterrupted():
    """Ctrl-C and SIGTERM wait until the block ends, then arrive as ever: for a few renames that must all
    happen or none. (Caught and raised again, not masked: a mask holds only this thread's, and torch's
    threads would take the signal.) Off the main thread, where no handler can be set, the block runs as is."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    caught = []
    before = {s: signal.signal(s, lambda signum, frame: caught.append(signum)) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for s, handler in before.items():
            signal.signal(s, signal.SIG_DFL if handler is None else handler)
        if caught:
            signal.raise_signal(caught[0])


@contextmanager
def writing(path):
    """Where files are written to path: an OSError (a read-only or full disk, no permission, a folder that
    cannot hold files) is bad input, one line naming path and the reason, not a traceback."""
    try:
        yield
    except OSError as e:
        raise ConfigError(f"cannot write {path}: {e.strerror or e}") from None


CPU_BF16_WIDTH = 64  # bf16 autocast pays on a CPU for training models at least this wide (docs/cpu.md)
CPU_BF16_SAMPLING_WIDTH = 512  # ... and for sampling (one token a step) only from this wide


def resolve_device(device="auto", dtype="auto", n_embd=None, sampling=False):
    """
    (device, device type, dtype name) for this machine: device "auto" is cuda, then mps, then cpu;
    dtype "auto" is bfloat16 on GPUs that have it, float16 on other GPUs, bfloat16 on CPUs with native
    bf16 (cpu_has_native_bf16) for a model at least CPU_BF16_WIDTH wide (CPU_BF16_SAMPLING_WIDTH to
    sample from), float32 elsewhere (and where n_embd, the model's width, is not given).
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
        if kind == "cuda":
            dtype = "bfloat16" if torch.cuda.is_bf16_supported() else "float16"
        else:
            # narrower, the casts cost what the bf16 matmuls save: training 1.07x at width 64, 1.3-1.7x from 96
            # up; sampling, a token's small matmuls at a time, 0.43x at 128, 1.02x at 512, 1.29x at 768
            wide = n_embd is not None and n_embd >= (CPU_BF16_SAMPLING_WIDTH if sampling else CPU_BF16_WIDTH)
            dtype = "bfloat16" if kind == "cpu" and wide and cpu_has_native_bf16() else "float32"
    if dtype not in DTYPES:
        raise ConfigError(f"dtype must be auto or one of {', '.join(DTYPES)}, got {dtype!r}")
    if kind == "cpu" and dtype == "float16":  # CPUs have no fast float16 matmuls: autocast makes it crawl
        raise ConfigError("dtype=float16 on a CPU is ~10x slower than float32 (no fast float16 matmuls): use "
                          "--dtype=float32, or bfloat16 on a CPU that has it natively (AVX512-BF16, AMX)")
    if kind == "cpu" and dtype == "bfloat16" and not cpu_has_native_bf16():  # allowed: the numerics may be wanted
        print("warning: dtype=bfloat16 on a CPU without native bf16 (AVX512-BF16 or AMX) is emulated and far slower "
              "than float32 (10-17x in a run on this project's AVX2 machine); --dtype=auto picks float32 here",
              file=sys.stderr)
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


class Terminated(KeyboardInterrupt):
    """SIGTERM (timeout's, kill's), raised where Ctrl-C raises KeyboardInterrupt: the same clean stop."""


def _terminate(signum, frame):
    raise Terminated


def silence_stdout():
    """Point stdout (the fd, so print, tqdm and exit's flush alike) at os.devnull after its reader has gone
    (| head): what is still written has nowhere to fail."""
    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


def tell_stderr(message):
    """One line on stderr after stdout's reader has gone. Under 2>&1 | head stderr is that same closed pipe:
    then it goes to os.devnull too, and the script goes on to its own exit code instead of ending in the write."""
    try:
        print(message, file=sys.stderr, flush=True)
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stderr.fileno())


def run(main):
    """
    Run a script's main(): a ConfigError (bad input) becomes one line on stderr and exit code 2, and
    a Ctrl-C or SIGTERM the script did not handle itself one line and 130 or 143, as the shell reports
    them (a SIGTERM would otherwise end the process on the spot, mid-line and without a word).
    Under torchrun every process meets the same bad input: only rank 0 says so, and the others leave a
    moment later (torchrun ends the rest when the first process exits, and rank 0 could go unheard).
    """
    speak = os.environ.get("RANK", "0") == "0"
    as_script = sys._getframe(1).f_globals.get("__name__") == "__main__"  # not a test calling it in-process
    before = signal.signal(signal.SIGTERM, _terminate)
    # Ctrl-C as Python's own, also where the process started with SIGINT ignored (a script's `cmd &`
    # job, whose shell ignores it): there Python installs no handler, and kill -INT would do nothing
    before_int = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        try:
            main()
        finally:  # inside the handlers below: a Ctrl-C as main returns (freeing a big dataset) lands here
            if as_script:  # main's outcome is decided: a late signal (timeout's second SIGTERM, a Ctrl-C as the
                # interpreter tears down, where Python has put the default handlers back) must not kill the
                # process or print a traceback. Ignored: the exit code is main's
                signal.signal(signal.SIGTERM, signal.SIG_IGN)
                signal.signal(signal.SIGINT, signal.SIG_IGN)
            else:
                signal.signal(signal.SIGTERM, before)
                signal.signal(signal.SIGINT, before_int)
    except ConfigError as e:
        if speak:
            print(f"error: {e}", file=sys.stderr)
        else:
            time.sleep(2)
        sys.exit(2)
    except KeyboardInterrupt as e:
        if speak:
            print("terminated" if isinstance(e, Terminated) else "interrupted", file=sys.stderr)
        sys.exit(143 if isinstance(e, Terminated) else 130)
    except BrokenPipeError:  # stdout piped into a reader that stopped (| head): done, not an error
        silence_stdout()
        sys.exit(0)


if __name__ == "__main__":  # imported, not run: say what this module is and which commands use it
    library_help(__file__)
