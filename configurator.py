"""
Config files plus --key=value overrides, as nanoGPT, but checked:

    python train.py config/tiny.py --batch_size=32 --compile=false

A config file is plain Python whose top-level names override the defaults. Every key must be one the
script defines and every value must fit the default's type; otherwise a one-line error names it.
--help prints the script's docstring and its keys, each with its value (after the config files and
--key=value given beside --help) and the comment beside its default.
"""

import ast
import difflib
import errno
import io
import os
import re
import signal
import sys
import time
import tokenize
import types

TRUE, FALSE = ("true", "yes", "on", "1"), ("false", "no", "off", "0")
HELP = ("-h", "--help")


class ConfigError(ValueError):
    """Bad input: run() prints it as one line and exits 2."""


def did_you_mean(word, choices):
    """' (did you mean CHOICE?)' for the choice nearest a mistyped word, or '' if none is near."""
    close = difflib.get_close_matches(word, choices, n=1)
    return f" (did you mean {close[0]}?)" if close else ""


def _unknown(key, defaults, where):
    return ConfigError(f"unknown config key '{key}' {where}{did_you_mean(key.lower(), defaults)}")


def _coerce(key, value, default, where, nullable=()):
    """value (parsed Python, or the text typed) as the type of default."""
    if default is None or (value is None and key in nullable):  # e.g. --top_k=None turns it off
        return value
    kind = type(default)
    if kind is bool:
        if isinstance(value, str) and value.lower() in TRUE + FALSE:
            return value.lower() in TRUE
        if isinstance(value, bool) or (type(value) is int and value in (0, 1)):
            return bool(value)
    elif kind is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        if isinstance(value, float) and value.is_integer():  # --max_iters=1e3 means 1000
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
    """A command-line value: a Python literal if it is one (3, 1e-3, None, True), else the text
    itself."""
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text


def configure(defaults, argv=None, strict_files=True, nullable=(), given=None, sections=None,
              sources=()):
    """
    defaults updated by argv, left to right: config files (Python) and --key=value.
    strict_files=False lets a file set keys this script does not use (sizing.py reading a train
    config). nullable names keys that may be None although their default is not. given (a dict)
    receives each key that was set, and where. -h/--help prints the calling script's usage and keys
    with the values the rest of argv gives them (sections: [(title, keys)]; sources: other files
    whose comments explain keys) and exits 0.
    """
    argv = sys.argv[1:] if argv is None else argv
    helping = any(arg in HELP for arg in argv)
    argv = [arg for arg in argv if arg not in HELP]
    given = {} if given is None else given
    config = dict(defaults)
    typed = set()  # --key=value so far: a config file after it must not undo it in silence
    for arg in argv:
        if arg.startswith("--"):
            key, eq, text = arg[2:].partition("=")
            if key not in defaults:
                raise _unknown(key, defaults, "on the command line")
            if not eq and not isinstance(defaults[key], bool):
                raise ConfigError(f"expected --key=value, got '{arg}'")
            value = True  # a bare --flag
            if eq:  # --out_dir=123 is a folder name, not a number
                value = text if isinstance(defaults[key], str) else _parse(text)
            config[key] = _coerce(key, value, defaults[key], "on the command line", nullable)
            given[key] = "on the command line"
            typed.add(key)
            continue
        try:
            with open(arg, encoding="utf-8") as f:
                source = f.read()
        except (OSError, UnicodeDecodeError) as e:
            why = getattr(e, "strerror", None) or "not a text file"
            raise ConfigError(f"cannot read config file {arg}: {why} "
                              "(options are written --key=value)") from None
        scope = {"__file__": arg}
        try:
            # Config files are the user's own Python, as nanoGPT's are.
            exec(compile(source, arg, "exec"), scope)
        except Exception as e:
            raise ConfigError(f"config file {arg} failed: {type(e).__name__}: {e}") from None
        for key, value in scope.items():
            if key.startswith("_") or callable(value) or isinstance(value, types.ModuleType):
                continue
            if key not in defaults:
                if strict_files:
                    raise _unknown(key, defaults, f"in {arg}")
                continue
            if key in typed:
                raise ConfigError(f"--{key} comes before {arg}, which sets {key} again: "
                                  "put --key=value after the config files")
            config[key] = _coerce(key, value, defaults[key], f"in {arg}", nullable)
            given[key] = f"in {arg}"
    if helping:  # each key as the config files and --key=value beside --help set it
        script = sys._getframe(1).f_globals.get("__file__", sys.argv[0])
        sections = sections or [("config keys", config)]
        shown = [(t, {k: config.get(k, v) for k, v in ks.items()}) for t, ks in sections]
        print(help_text(script, shown, sources))
        sys.exit(0)
    return config


def config_keys(namespace):
    """A script's configurable globals: public ints, floats, bools, strs and Nones, not
    CONSTANTS."""
    return {k: v for k, v in namespace.items()
            if not k.startswith("_") and not k.isupper()
            and isinstance(v, (int, float, bool, str, type(None)))}


def key_comments(path):
    """{key: the comment on the line that sets it}, from a script's module-level lines
    `key = value  # meaning`, dataclass fields and `dict(key=value,  # meaning)` entries (not from
    inside functions). A line that sets several keys explains none: its comment cannot say which."""
    with open(path, encoding="utf-8") as f:
        source = f.read()
    tokens = tokenize.generate_tokens(io.StringIO(source).readline)
    comments = {t.start[0]: t.string.lstrip("#").strip() for t in tokens
                if t.type == tokenize.COMMENT}
    found = []
    for stmt in ast.parse(source).body:
        if isinstance(stmt, ast.FunctionDef):
            continue
        for node in ast.walk(stmt):
            one = isinstance(node, ast.Assign) and len(node.targets) == 1
            if one and isinstance(node.targets[0], ast.Name):
                found.append((node.lineno, node.targets[0].id))
            elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                found.append((node.lineno, node.target.id))
            elif isinstance(node, ast.keyword) and node.arg:
                found.append((node.lineno, node.arg))
    meanings = {}
    lines = [line for line, _ in found]
    for line, name in sorted(found):
        if line in comments and lines.count(line) == 1:
            meanings.setdefault(name, comments[line])
    return meanings


def help_text(script, sections, sources=()):
    """A script's --help: its docstring, then each section's keys as --key=value and the comment
    beside it (in the script, else in sources: model.py for GPTConfig's keys)."""
    with open(script, encoding="utf-8") as f:
        doc = ast.get_docstring(ast.parse(f.read())) or ""
    meanings = {}
    for path in [*sources, script]:  # the script has the last word
        meanings.update(key_comments(path))
    out = [doc.strip(), "",
           "Keys are set by config files (Python: key = value) and --key=value, left to right."]
    for title, keys in sections:
        # a value with a tab or newline in it is shown quoted
        shown = {k: f"--{k}={v!r}" if isinstance(v, str) and not v.isprintable() else f"--{k}={v}"
                 for k, v in keys.items()}
        width = min(max(map(len, shown.values()), default=0), 34)
        out += ["", f"{title}:"]
        out += [f"  {shown[k]:<{width}}  {meanings.get(k, '')}".rstrip() for k in keys]
    return "\n".join(out)


def speak(message):
    """print(message), flushed; where stdout's reader has gone (| head), nothing more is printed and
    work goes on."""
    try:
        print(message, flush=True)
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


def run(main):
    """
    Run a command's main() so that bad input (a ConfigError) is one line on stderr and exit 2, never
    a traceback, and an unhandled Ctrl-C or SIGTERM is one line and 130 or 143, as a shell reports
    them (141 and nothing more where stdout's reader went away). Under torchrun every rank meets the
    same bad input: only rank 0 says so, while the others wait.
    """
    def terminate(signum, frame):
        raise KeyboardInterrupt("terminated")
    signal.signal(signal.SIGTERM, terminate)
    speak = os.environ.get("RANK", "0") == "0"
    try:
        main()
    except ConfigError as e:
        if speak:
            print(f"error: {e}", file=sys.stderr)
        else:  # quietly: torchrun ends every process once one exits, rank 0 before it had spoken
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            time.sleep(3)
        sys.exit(2)
    except KeyboardInterrupt as e:
        term = str(e) == "terminated"
        if speak:
            print("terminated" if term else "interrupted", file=sys.stderr)
        sys.exit(143 if term else 130)
    except BrokenPipeError:  # stdout's reader has gone (| head): done, as a shell's commands are
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(141)
    except OSError as e:  # a write the disk or a file-size limit refused (replace_file says which)
        if e.errno not in (errno.ENOSPC, errno.EFBIG, errno.EDQUOT):
            raise
        print(f"error: {e}", file=sys.stderr)
        sys.exit(1)
    except RuntimeError as e:
        # Under torchrun, a collective that another process left: it died, and torchrun says which.
        lost = re.search(r"gloo|NCCL|[Cc]onnection|[Ss]ocket|peer", str(e))
        if os.environ.get("WORLD_SIZE", "1") == "1" or not lost:
            raise
        # the first sentence of the error, without gloo's [file:line]
        why = re.sub(r"^\[[^\]]*\]\s*", "", str(e).strip()).split(". ")[0].splitlines()[0][:120]
        print(f"error: rank {os.environ.get('RANK')}: lost the other processes ({why}); "
              "the checkpoint last saved stands", file=sys.stderr)
        sys.exit(1)
