"""
configurator.py: config files and --key=value overrides, checked against the script's keys and types.
"""

import ast
import os
import platform
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from configurator import ConfigError, config_keys, configure, resolve_device, run, training_into
from conftest import run_script

ROOT = Path(__file__).resolve().parent.parent
DEFAULTS = {
    "out_dir": "out",
    "batch_size": 12,
    "learning_rate": 6e-4,
    "compile": True,
    "top_k": 200,
    "top_p": None,
    "start": "\n",
}


def write(tmp_path, text, name="cfg.py"):
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def test_no_arguments_gives_the_defaults_and_leaves_them_alone():
    before = dict(DEFAULTS)
    config = configure(DEFAULTS, [])
    assert config == DEFAULTS and config is not DEFAULTS
    configure(DEFAULTS, ["--batch_size=3"])
    assert DEFAULTS == before


def test_command_line_values_take_the_defaults_types():
    config = configure(DEFAULTS, ["--batch_size=32", "--learning_rate=1e-3", "--compile=false", "--out_dir=run1"])
    assert config["batch_size"] == 32 and type(config["batch_size"]) is int
    assert config["learning_rate"] == 1e-3
    assert config["compile"] is False
    assert config["out_dir"] == "run1"
    assert type(configure(DEFAULTS, ["--learning_rate=1"])["learning_rate"]) is float  # an int is a fine float


@pytest.mark.parametrize("text,value", [
    ("false", False), ("False", False), ("no", False), ("off", False), ("0", False),
    ("true", True), ("True", True), ("yes", True), ("on", True), ("1", True), ("TRUE", True),
])
def test_bool_spellings(text, value):
    assert configure(DEFAULTS, [f"--compile={text}"])["compile"] is value


def test_none_turns_a_value_off_and_a_none_default_takes_a_value():
    assert configure(DEFAULTS, ["--top_k=None"], nullable=("top_k",))["top_k"] is None
    assert configure(DEFAULTS, ["--top_p=0.9"])["top_p"] == 0.9
    assert configure(DEFAULTS, ["--top_p=None"])["top_p"] is None


def test_str_values_are_kept_verbatim():
    """A str default keeps the text as typed: no literal parsing, quotes and all."""
    for text in ("123", "1e3", "None", "True", "'quoted'", "a b", "", "FILE:prompt.txt", "[1, 2]"):
        assert configure(DEFAULTS, [f"--out_dir={text}"])["out_dir"] == text


def test_values_may_contain_equals_signs():
    assert configure(DEFAULTS, ["--start=a=b"])["start"] == "a=b"
    assert configure(DEFAULTS, ["--out_dir=x=1,y=2"])["out_dir"] == "x=1,y=2"
    with pytest.raises(ConfigError, match="batch_size"):
        configure(DEFAULTS, ["--batch_size=1=2"])


@pytest.mark.parametrize("arg,key", [
    ("--batch_size=abc", "batch_size"),
    ("--batch_size=1.5", "batch_size"),
    ("--batch_size=true", "batch_size"),
    ("--learning_rate=fast", "learning_rate"),
    ("--learning_rate=True", "learning_rate"),
    ("--compile=maybe", "compile"),
    ("--compile=2", "compile"),
    ("--top_k=1.5", "top_k"),
])
def test_wrong_type_on_the_command_line(arg, key):
    with pytest.raises(ConfigError, match=f"'{key}'.*expects"):
        configure(DEFAULTS, [arg])


def test_unknown_command_line_key_is_named_with_a_hint():
    with pytest.raises(ConfigError, match="unknown config key 'bogus' on the command line"):
        configure(DEFAULTS, ["--bogus=1"])
    with pytest.raises(ConfigError, match="'batch_sise'.*did you mean batch_size"):
        configure(DEFAULTS, ["--batch_sise=3"])


def test_other_projects_names_for_a_key_are_hinted():
    """--lr=1e-3 (most training scripts' name): spelling alone finds no key near 'lr', so it said nothing."""
    with pytest.raises(ConfigError, match=r"^unknown config key 'lr' on the command line \(did you mean learning_rate\?\)$"):
        configure(DEFAULTS, ["--lr=1e-3"])


def test_a_config_file_beside_the_script_is_hinted_from_another_folder(tmp_path, monkeypatch):
    """cd elsewhere && python /path/to/train.py config/tiny.py: the file is the script's own, the path relative."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError) as caught:
        configure(DEFAULTS, ["test_configurator.py"])  # beside this file, the caller of configure
    assert str(caught.value) == (f"cannot read config file test_configurator.py: No such file or directory (did you "
                                 f"mean {os.path.abspath(__file__)}? relative paths are taken from the current folder)")


@pytest.mark.parametrize("arg, meant", [(arg, "config/tiny.py") for arg in
                                         ("config/tiny", "tiny.py", "tiny", "config/tny.py", "tny.py", "config/tinyy")] +
                         [(arg, "--help") for arg in ("help", "HELP", "/?")])
def test_a_config_file_named_short_is_hinted(arg, meant, tmp_path, monkeypatch):
    """python train.py tiny.py (or config/tiny): the file it means is config/tiny.py. python train.py help
    was hinted at config/eval_gpt2.py, a near name: it means --help."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "config").mkdir()
    for name in ("tiny.py", "eval_gpt2.py"):
        (tmp_path / "config" / name).write_text("batch_size = 4\n")
    with pytest.raises(ConfigError) as caught:
        configure(DEFAULTS, [arg])
    assert str(caught.value) == f"cannot read config file {arg}: No such file or directory (did you mean {meant}?)"


def test_help_misspelt_or_without_dashes_is_hinted_at_help():
    """--hlep was 'unknown config key' with no hint; help to a script that takes no config files (prepare.py),
    'expected --key=value'. Both mean --help; a key spelt near a real one is still hinted at that key."""
    for args, files, message in ((["--hlep"], True, "unknown config key 'hlep' on the command line (did you mean --help?)"),
                                 (["help"], False, "expected --key=value, got 'help' (did you mean --help?)"),
                                 (["--batch_sise=2"], True, "unknown config key 'batch_sise' on the command line (did you mean batch_size?)")):
        with pytest.raises(ConfigError) as caught:
            configure(DEFAULTS, args, files=files)
        assert str(caught.value) == message


def test_a_misspelt_config_file_is_not_hinted_at_a_tool(tmp_path, monkeypatch):
    """tny.py: the near names in the current folder are the tools (train.py), never the config meant."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.py").write_text("")
    with pytest.raises(ConfigError) as caught:
        configure(DEFAULTS, ["tny.py"])
    assert str(caught.value) == "cannot read config file tny.py: No such file or directory"


def test_a_key_in_other_case_is_hinted():
    with pytest.raises(ConfigError, match=r"'LR' on the command line \(did you mean learning_rate\?\)$"):
        configure(DEFAULTS, ["--LR=1"])
    with pytest.raises(ConfigError, match=r"'Batch_Size' on the command line \(did you mean batch_size\?\)$"):
        configure(DEFAULTS, ["--Batch_Size=3"])


def test_malformed_arguments():
    with pytest.raises(ConfigError, match="expected --key=value, got '--compile' .did you mean --compile=true..$"):
        configure(DEFAULTS, ["--compile"])
    # argparse's spaced form: the value is the next argument (not an option, not a config file)
    with pytest.raises(ConfigError, match="^expected --key=value, got '--batch_size' .did you mean --batch_size=4..$"):
        configure(DEFAULTS, ["--batch_size", "4"])
    with pytest.raises(ConfigError, match="^expected --key=value, got '--batch_size'$"):
        configure(DEFAULTS, ["--batch_size", "--compile=true"])
    with pytest.raises(ConfigError, match="^expected --key=value, got '--batch_size'$"):
        configure(DEFAULTS, ["--batch_size", __file__])
    with pytest.raises(ConfigError, match="unknown config key 'compil' on the command line .did you mean compile..$"):
        configure(DEFAULTS, ["--compil"])  # a misspelt key is named as that, with or without its =value
    with pytest.raises(ConfigError, match="cannot read config file no/such/file.py: No such file or directory$"):
        configure(DEFAULTS, ["no/such/file.py"])


def test_spaced_values_take_argparses_spellings():
    from configurator import spaced_values
    argv = ["--input", "a b.txt", "--quick", "--quick=false", "--out_dir=o", "--val", "-0.5", "--input"]
    defaults = {"input": "", "val": 0.0, "quick": False, "out_dir": ""}
    assert spaced_values(argv, defaults, keys=["input", "val"]) == [
        "--input=a b.txt", "--quick=true", "--quick=false", "--out_dir=o", "--val=-0.5", "--input"]
    # an --option after a key is not its value (argparse refused it too): the key alone is the error
    assert spaced_values(["--input", "--quick"], defaults) == ["--input", "--quick=true"]
    with pytest.raises(ConfigError, match="expected --key=value, got '--input'"):
        configure({"input": "", "quick": False}, spaced_values(["--input", "--quick"], {"input": "", "quick": False}))


@pytest.mark.parametrize("arg, hint", [
    ("batch_size=3", " (did you mean --batch_size=3?)"),
    ("batch_sise=3", " (did you mean --batch_size=3?)"),  # and the key's spelling too
    ("out_dir=a=b", " (did you mean --out_dir=a=b?)"),
    ("nothing_like_a_key=3", ""),
    ("-batch_size=3", " (did you mean --batch_size=3?)"),  # one dash short
    ("dir/x=3", ""),  # a path with = in it: no key was meant
])
def test_key_value_without_dashes_is_hinted(arg, hint):
    """key=value without its -- reads as a config file's name: the one-line error says what was meant."""
    with pytest.raises(ConfigError) as error:
        configure(DEFAULTS, [arg])
    assert str(error.value) == f"cannot read config file {arg}: No such file or directory{hint}"


def test_a_folder_where_a_config_file_goes_hints_out_dir(tmp_path):
    """python sample.py out-tiny: a run's folder given as a config file. Where the script reads out_dir, the
    line says --out_dir= was meant (it said only "Is a directory")."""
    with pytest.raises(ConfigError) as caught:
        configure({**DEFAULTS, "out_dir": "out"}, [str(tmp_path)])
    assert str(caught.value).endswith(f"(a folder, not a config file: did you mean --out_dir={tmp_path}?)")
    with pytest.raises(ConfigError, match="Is a directory$"):  # no out_dir key: no such hint
        configure({k: v for k, v in DEFAULTS.items() if k != "out_dir"}, [str(tmp_path)])
    (tmp_path / "ckpt.pt").write_bytes(b"PK\x03\x04\x80\xff")  # a checkpoint: UnicodeDecodeError's traceback
    with pytest.raises(ConfigError) as caught:
        configure({**DEFAULTS, "out_dir": "out"}, [str(tmp_path / "ckpt.pt")])
    assert str(caught.value) == (f"cannot read config file {tmp_path / 'ckpt.pt'}: not text, so not a config file "
                                 f"(did you mean --out_dir={tmp_path}?)")


def test_a_missing_runs_folder_where_a_config_file_goes_hints_out_dir(tmp_path, monkeypatch):
    """python sample.py out-tiny, before training: it was hinted at config/tiny.py (a near name), which
    sample.py then refuses as a training config. A script that reads a run says --out_dir= and what trains one;
    train.py, which takes config files, keeps the near name, as does sample.py tiny (config/tiny.py exists)."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "config").mkdir()
    (tmp_path / "config" / "tiny.py").write_text("batch_size = 4\n")
    reads = {**DEFAULTS, "out_dir": "out"}
    for arg, train in (("out-tiny", "python train.py " + os.path.join("config", "tiny.py")),
                       ("out-mine", "python train.py config/tiny.py --out_dir=out-mine")):
        with pytest.raises(ConfigError) as caught:
            configure(reads, [arg], reads_run=True)
        assert str(caught.value) == (f"cannot read config file {arg}: No such file or directory (did you mean "
                                     f"--out_dir={arg}? there is no such folder yet: {train} trains one)")
    for arg, reads_run in (("out-tiny", False), ("tiny", True)):
        with pytest.raises(ConfigError) as caught:
            configure(reads, [arg], reads_run=reads_run)
        assert str(caught.value) == (f"cannot read config file {arg}: No such file or directory "
                                     "(did you mean config/tiny.py?)")


def test_config_file_sets_keys(tmp_path):
    path = write(tmp_path, "import math\n"
                           "batch_size = 4 * 8\n"
                           "learning_rate = 1\n"  # an int where a float is expected: fine
                           "compile = False\n"
                           "top_k = None\n"
                           "_private = 'ignored'\n"
                           "def helper():\n    return 1\n")
    config = configure(DEFAULTS, [path], nullable=("top_k",))
    assert config["batch_size"] == 32
    assert config["learning_rate"] == 1.0 and type(config["learning_rate"]) is float
    assert config["compile"] is False and config["top_k"] is None
    assert "math" not in config and "helper" not in config and "_private" not in config


def test_files_and_overrides_apply_left_to_right(tmp_path):
    path = write(tmp_path, "batch_size = 4\nout_dir = 'from-file'\n")
    assert configure(DEFAULTS, [path, "--batch_size=8"])["batch_size"] == 8
    with pytest.raises(ConfigError, match="comes before"):  # a flag the file undoes: refused (below)
        configure(DEFAULTS, ["--batch_size=8", path])
    assert configure(DEFAULTS, [path, "--top_k=5"])["out_dir"] == "from-file"


def test_a_command_line_key_a_later_file_sets_otherwise_is_refused(tmp_path):
    """Left to right, as nanoGPT: --max_iters=5 before config/tiny.py was undone by the file, and a warning
    went by as a 3-minute run started (and moved the last run aside). Nobody types a flag for a file to undo
    it: one line, nothing run. A flag the file sets to the same value, or after the file, is fine."""
    path = write(tmp_path, "batch_size = 4\nout_dir = '123'\n")
    with pytest.raises(ConfigError) as e:
        configure(DEFAULTS, ["--batch_size=8", "--top_k=5", path])
    assert str(e.value) == (f"--batch_size=8 comes before {path}, which sets batch_size=4: put --key=value after "
                            "the config files")
    assert configure(DEFAULTS, ["--batch_size=4", "--out_dir=123", path])["batch_size"] == 4  # the same values
    assert configure(DEFAULTS, [path, "--batch_size=8"])["batch_size"] == 8


def test_unknown_key_in_a_file_is_named(tmp_path):
    path = write(tmp_path, "batch_size = 4\nlearning_rat = 0.1\n")
    with pytest.raises(ConfigError, match=r"unknown config key 'learning_rat' in .*cfg\.py.*did you mean learning_rate"):
        configure(DEFAULTS, [path])
    # strict_files=False (sizing.py reading a train.py config) skips keys it does not use ...
    assert configure(DEFAULTS, [path], strict_files=False)["batch_size"] == 4
    # ... but the command line is always strict
    with pytest.raises(ConfigError, match="bogus"):
        configure(DEFAULTS, [path, "--bogus=1"], strict_files=False)


def test_a_files_own_variable_says_how_to_keep_it(tmp_path):
    """nanoGPT's config files may hold helper variables; here an unknown name is an error (a typo, most often),
    which says how to keep one: a leading underscore, which is then left alone."""
    path = write(tmp_path, "tokens_wanted = 4096\nbatch_size = tokens_wanted // 256\n")
    with pytest.raises(ConfigError, match=r"unknown config key 'tokens_wanted' in .*cfg\.py \(a variable of the "
                                          r"file's own: name it _tokens_wanted, and it is left alone\)$"):
        configure(DEFAULTS, [path])
    path = write(tmp_path, "_tokens_wanted = 4096\nbatch_size = _tokens_wanted // 256\n")
    assert configure(DEFAULTS, [path])["batch_size"] == 16


def test_wrong_type_in_a_file_is_named(tmp_path):
    path = write(tmp_path, "batch_size = 'big'\n")
    with pytest.raises(ConfigError, match=r"'batch_size' in .*cfg\.py expects int, got 'big'"):
        configure(DEFAULTS, [path])


def test_broken_config_file_is_a_config_error(tmp_path):
    for text, what in (("batch_size = = 3\n", "SyntaxError"), ("batch_size = undefined_name\n", "NameError")):
        path = write(tmp_path, text)
        with pytest.raises(ConfigError, match=f"config file .*cfg.py failed: {what}"):
            configure(DEFAULTS, [path])


def test_config_keys_takes_the_public_plain_values():
    namespace = {"batch_size": 4, "lr": 1e-3, "flag": True, "name": "x", "top_k": None,
                 "_hidden": 1, "items": [1, 2], "pytest": pytest, "fn": len, "EOT": "<|endoftext|>"}
    assert config_keys(namespace) == {"batch_size": 4, "lr": 1e-3, "flag": True, "name": "x", "top_k": None}


def test_export_help_lists_no_constant_as_a_key():
    p = subprocess.run([sys.executable, "export.py", "--help"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0 and "--out_dir=out" in p.stdout and "--EOT" not in p.stdout, p.stdout


def test_run_turns_a_config_error_into_one_line_and_exit_2(capsys):
    def main():
        configure(DEFAULTS, ["--bogus=1"])

    with pytest.raises(SystemExit) as exit_info:
        run(main)
    assert exit_info.value.code == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == "error: unknown config key 'bogus' on the command line\n"


def test_run_turns_ctrl_c_into_one_line_and_exit_130(capsys):
    def main():
        raise KeyboardInterrupt

    with pytest.raises(SystemExit) as exit_info:
        run(main)
    assert exit_info.value.code == 130
    assert capsys.readouterr().err == "interrupted\n"


def test_run_a_ctrl_c_as_main_returns_is_one_line_too(capsys, monkeypatch):
    """A Ctrl-C just as a prepare's main returned (freeing its arrays) was raised in run's own cleanup, where
    nothing caught it: a traceback (a fresh user's pass, 5 of 5). Here the first handler put back raises it."""
    import configurator
    real, calls = signal.signal, []

    def signal_that_is_interrupted(signum, handler):
        calls.append(signum)
        if len(calls) == 3:  # run's first two calls install its handlers; the third puts one back
            raise KeyboardInterrupt
        return real(signum, handler)

    monkeypatch.setattr(configurator.signal, "signal", signal_that_is_interrupted)
    try:
        run(lambda: None)
        code = None
    except SystemExit as e:
        code = e.code
    except KeyboardInterrupt:  # escaped run: failed here, not taken by pytest for the user's Ctrl-C
        code = "KeyboardInterrupt"
    monkeypatch.undo()
    assert code == 130 and capsys.readouterr().err == "interrupted\n"
    signal.signal(signal.SIGINT, signal.default_int_handler)  # what the interrupted cleanup left out
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


def test_run_turns_sigterm_into_one_line_and_exit_143(capsys):
    """timeout's SIGTERM stops a script as Ctrl-C does (its cleanups run), says so, exits 143; the
    handler is the caller's again afterwards."""
    before = signal.getsignal(signal.SIGTERM)

    def main():
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(5)  # the handler raises in here
        raise AssertionError("SIGTERM was not handled")

    with pytest.raises(SystemExit) as exit_info:
        run(main)
    assert exit_info.value.code == 143
    assert capsys.readouterr().err == "terminated\n"
    assert signal.getsignal(signal.SIGTERM) is before


LATE_SIGNAL = """
import atexit, sys, time
sys.path.insert(0, sys.argv[1])
from configurator import run

def main():
    atexit.register(lambda: (print("teardown", flush=True), time.sleep(1)))  # a slow interpreter teardown
    sys.exit(int(sys.argv[2]))

if __name__ == "__main__":
    run(main)
"""


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
@pytest.mark.parametrize("code", [0, 143])
def test_a_signal_after_main_ended_keeps_its_exit_code(tmp_path, signum, code):
    """GNU timeout's second SIGTERM, 20 ms after a stop that saved at once, or a Ctrl-C while the interpreter
    tears down, came after run() had put the default handlers back: killed by the signal (-15, where a run
    stopped by the first SIGTERM exits 143), or a KeyboardInterrupt traceback in the teardown (a fresh user's
    pass, 3 of 3 on a fast stop). main's outcome is decided by then: the process ends with it."""
    script = tmp_path / "late.py"
    script.write_text(LATE_SIGNAL)
    proc = subprocess.Popen([sys.executable, str(script), str(ROOT), str(code)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline() == "teardown\n"
        sent = time.time()
        proc.send_signal(signum)
        _, stderr = proc.communicate(timeout=8)
    finally:
        proc.kill()
    assert (proc.returncode, stderr) == (code, "") and time.time() - sent < 5  # the teardown's 1 s, not a hang


def test_given_reports_each_key_set_and_where(tmp_path):
    """A key set to its default value was still asked for: train.py checks such keys against a checkpoint."""
    path = write(tmp_path, "batch_size = 12\nlearning_rate = 1e-3\n")  # 12 is the default
    given = {}
    configure(DEFAULTS, [path, "--learning_rate=2e-3", "--compile=false"], given=given)
    assert given == {"batch_size": f"in {path}", "learning_rate": "on the command line",
                     "compile": "on the command line"}


def test_run_speaks_only_on_rank_0_under_torchrun(capsys, monkeypatch):
    """Every torchrun process meets the same bad input: one line, from rank 0, and exit 2 from all."""
    def main():
        configure(DEFAULTS, ["--bogus=1"])

    for rank, expected in (("1", ""), ("0", "error: unknown config key 'bogus' on the command line\n")):
        monkeypatch.setenv("RANK", rank)
        with pytest.raises(SystemExit) as exit_info:
            run(main)
        assert exit_info.value.code == 2 and capsys.readouterr().err == expected


def test_float16_on_a_cpu_is_refused():
    """float16 autocast on a CPU crawls: every script that resolves a device refuses it with one line."""
    with pytest.raises(ConfigError, match="float16 on a CPU .*--dtype=float32"):
        resolve_device("cpu", "float16")
    assert resolve_device("cpu", "bfloat16") == ("cpu", "cpu", "bfloat16")


def test_run_lets_other_errors_through():
    """A bug is not bad input: it keeps its traceback."""
    def main():
        raise KeyError("bug")

    with pytest.raises(KeyError):
        run(main)


def test_none_is_refused_where_the_script_needs_a_value(tmp_path):
    """--batch_size=None would pass the type check and crash later: refused up front, unless nullable."""
    with pytest.raises(ConfigError, match="'batch_size' on the command line cannot be None"):
        configure(DEFAULTS, ["--batch_size=None"])
    with pytest.raises(ConfigError, match="'top_k' in .* cannot be None"):
        configure(DEFAULTS, [write(tmp_path, "top_k = None\n")])


def test_config_file_may_import_and_define_helpers(tmp_path):
    """Names a config file imports or defines (math's sqrt, a lambda) are not config keys."""
    path = write(tmp_path, "from math import sqrt\nsquare = lambda x: x * x\nbatch_size = int(sqrt(16))\n")
    assert configure(DEFAULTS, [path])["batch_size"] == 4


STEPS_FAULTS = """
import resource, statistics, sys, torch
from configurator import keep_freed_memory
from model import GPT, GPTConfig
torch.set_num_threads(1)
kept = keep_freed_memory() if sys.argv[1] == "keep" else None
model = GPT(GPTConfig(n_layer=4, n_head=4, n_embd=128, block_size=64, vocab_size=65, bias=False))
opt = model.configure_optimizers(0.1, 1e-3, (0.9, 0.99), "cpu")
x = torch.randint(0, 65, (12, 64))
def steps(n):
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(n):
        _, loss = model(x, x)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    return (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) / n
steps(5)
print(kept, statistics.median(steps(2) for _ in range(7)))  # the median window: one-off faults aside
"""


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="the setting is glibc's (Linux)")
def test_keep_freed_memory_stops_the_page_faults_of_each_step():
    p = subprocess.run([sys.executable, "-c", STEPS_FAULTS, "keep"], cwd=ROOT, capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == 0, p.stderr
    kept, faults = p.stdout.split()
    assert kept == "True"
    # nanoGPT's CPU recipe shape; glibc's default on the project's machine (argument "default"): a median
    # of 100s to 1,000s of faults a step, as freed activations go back to the OS; kept: about none
    assert float(faults) < 20, f"{faults} page faults a step with keep_freed_memory"


@pytest.mark.parametrize("preset, busy, expected", [
    ({}, 0.1, ("PASSIVE", "1000")),  # idle cores: sleep, after a short spin that bridges two ops
    ({}, 1.0, ("PASSIVE", None)),  # other work on the cores: sleep at once
    ({}, None, ("PASSIVE", None)),  # no /proc/stat to tell: sleep at once, the safe side
    ({"GOMP_SPINCOUNT": "50"}, 0.0, ("PASSIVE", "50")),  # the user's spin count stays
    ({"OMP_WAIT_POLICY": "ACTIVE"}, 0.0, ("ACTIVE", None)),  # the user's policy: nothing added
])
def test_idle_threads_spin_briefly_only_where_the_cores_are_idle(monkeypatch, preset, busy, expected):
    import configurator
    for key in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT"):
        monkeypatch.delenv(key, raising=False)
    for key, value in preset.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setattr(configurator, "busy_cores", lambda: busy)
    configurator.let_idle_threads_sleep()
    assert (os.environ.get("OMP_WAIT_POLICY"), os.environ.get("GOMP_SPINCOUNT")) == expected


@pytest.mark.skipif(not os.path.isfile("/proc/stat"), reason="busy_cores reads Linux's /proc/stat")
def test_busy_cores_sees_another_process_spinning():
    from configurator import busy_cores
    spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        time.sleep(0.5)  # past its start-up
        busy = busy_cores(0.3)
    finally:
        spinner.kill()
        spinner.wait()
    assert 0.5 < busy <= os.cpu_count(), busy  # one core's worth, whatever else the machine runs


# ----------------------------------------------------------------------------- --help

def test_integral_float_is_an_int_and_a_fraction_is_refused():
    """--max_iters=1e3 is 1000 (an int), as a config file's 5e3 is; 1.5 stays an error."""
    config = configure(DEFAULTS, ["--batch_size=1e3"])
    assert config["batch_size"] == 1000 and type(config["batch_size"]) is int
    with pytest.raises(ConfigError, match="'batch_size'.*expects int, got 1.5"):
        configure(DEFAULTS, ["--batch_size=1.5"])


def test_key_comments_reads_every_way_a_key_is_defined(tmp_path):
    path = write(tmp_path, '"""doc"""\n'
                           'import os\n'
                           'out_dir = "out"  # where it goes\n'
                           'plain = 3\n'
                           'later = 1\n'
                           'later = 2  # the commented one counts\n'
                           'MODE = dict(  # not a key: the dict itself\n'
                           '    depth=4,  # how deep\n'
                           '    **dict(width=8),  # spread\n'
                           ')\n'
                           'class Config:\n'
                           '    size: int = 5  # a dataclass field\n'
                           'def f():\n'
                           '    inner = 1  # not at module level\n')
    from configurator import key_comments
    meanings = key_comments(path)
    assert meanings["out_dir"] == "where it goes" and meanings["later"] == "the commented one counts"
    assert meanings["depth"] == "how deep" and meanings["size"] == "a dataclass field"
    assert "plain" not in meanings and "inner" not in meanings


def script_keys(script):
    """The keys a script's configure() takes, from the script itself."""
    import bench
    import sample
    import scaling
    import sizing
    import train
    import data.text.prepare as text_prepare
    import data.shakespeare_char.prepare as shakespeare_prepare
    import data.openwebtext.prepare as openwebtext_prepare
    return {"train.py": config_keys(vars(train)), "sample.py": sample.DEFAULTS,
            "sizing.py": sizing.keys(),
            "bench.py": dict(bench.COMMON, **{k: v for d in bench.DEFAULTS.values() for k, v in d.items()}),
            "data/text/prepare.py": text_prepare.DEFAULTS,
            "data/shakespeare_char/prepare.py": shakespeare_prepare.DEFAULTS,
            "data/shakespeare/prepare.py": dict(shakespeare_prepare.DEFAULTS,
                                                out_dir=str(ROOT / "data" / "shakespeare")),
            "data/openwebtext/prepare.py": openwebtext_prepare.DEFAULTS, "scaling.py": scaling.SWEEP}[script]


@pytest.mark.parametrize("script", ["train.py", "sample.py", "sizing.py", "bench.py", "data/text/prepare.py",
                                    "data/shakespeare_char/prepare.py", "data/shakespeare/prepare.py",
                                    "data/openwebtext/prepare.py", "scaling.py"])
@pytest.mark.parametrize("flag", ["--help", "-h"])
def test_every_configured_script_answers_help_with_each_key_default_and_meaning(script, flag):
    # after a config file and a key, as a user adds it to a command line: nothing runs, exit 0. --help in a
    # process of its own, as a user runs it (nothing else may print); -h, the same code, in this one
    args = [script, "config/tiny.py", "--max_iters=1", flag]
    p = (subprocess.run([sys.executable, *args], cwd=ROOT, capture_output=True, text=True, timeout=120)
         if flag == "--help" else run_script(*args))
    assert p.returncode == 0 and p.stderr == "", p.stderr
    first = ast.get_docstring(ast.parse((ROOT / script).read_text())).splitlines()[0]
    assert p.stdout.startswith(first)
    lines = p.stdout.splitlines()
    for key, value in script_keys(script).items():
        shown = value if isinstance(value, str) and value.isprintable() and value else repr(value)
        found = [line for line in lines if line.startswith(f"  --{key}={shown} ")]
        assert found, (key, shown)
        assert all(len(line.split(None, 1)) == 2 for line in found), f"{key} has no meaning in {script}"


@pytest.mark.parametrize("torch_probe", [True, False])
@pytest.mark.parametrize("native", [True, False])
def test_dtype_auto_is_bf16_only_on_a_cpu_with_native_bf16(native, torch_probe, monkeypatch, tmp_path, capsys):
    """A CPU with AVX-512 BF16 (or AMX) gets bfloat16 autocast from dtype=auto; one without (AVX2 only, as
    this project's machine) stays float32, where emulated bf16 would be slower. Simulated both ways:
    through torch's probe, and through /proc/cpuinfo's flags where torch has no probe."""
    import builtins
    import torch
    import configurator
    if torch_probe:
        monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: native, raising=False)
        monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: False, raising=False)
    else:
        monkeypatch.delattr(torch.cpu, "_is_avx512_bf16_supported", raising=False)
        cpuinfo = tmp_path / "cpuinfo"
        cpuinfo.write_text("processor\t: 0\nflags\t\t: fpu sse2 avx avx2" + (" avx512f avx512_bf16" if native else "")
                           + " fma\n")
        real_open = builtins.open
        monkeypatch.setattr(builtins, "open", lambda p, *a, **k: real_open(cpuinfo if p == "/proc/cpuinfo" else p,
                                                                           *a, **k))
    assert configurator.cpu_has_native_bf16() is native
    for wide in (64, 128, 192):  # bf16 at least as fast from width 64 up (docs/cpu.md)
        assert configurator.resolve_device("cpu", "auto", wide) == ("cpu", "cpu", "bfloat16" if native else "float32")
    for narrow in (None, 32):  # the width unknown, or narrower than measured
        assert configurator.resolve_device("cpu", "auto", narrow) == ("cpu", "cpu", "float32")
    for width, fast in ((128, False), (384, False), (512, native), (768, native)):  # sampling: bf16 from 512 wide
        assert configurator.resolve_device("cpu", "auto", width, sampling=True)[2] == ("bfloat16" if fast else "float32")
    assert configurator.resolve_device("cpu", "float32")[2] == "float32"  # an explicit choice is kept
    capsys.readouterr()
    assert configurator.resolve_device("cpu", "bfloat16")[2] == "bfloat16"  # kept too, but said where it crawls
    err = capsys.readouterr().err
    assert (err.count("\n") == 1 and err.startswith("warning: dtype=bfloat16 on a CPU without native bf16")
            if not native else err == ""), err


def test_this_machines_bf16_answer_matches_its_cpu_flags():
    flags = ""
    try:
        with open("/proc/cpuinfo") as f:
            flags = next((line for line in f if line.startswith("flags")), "")
    except OSError:
        pytest.skip("no /proc/cpuinfo here")
    import configurator
    assert configurator.cpu_has_native_bf16() == bool({"avx512_bf16", "amx_bf16"} & set(flags.split()))


def test_help_piped_into_head_ends_quietly():
    """`python lens.py --help | head -1`: the reader stops early; the script exits 0 with no traceback."""
    p = subprocess.Popen([sys.executable, "lens.py", "--help"], cwd=ROOT, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    p.stdout.readline()
    p.stdout.close()  # as head does after its line
    err = p.stderr.read()
    assert p.wait(timeout=120) == 0 and "Traceback" not in err and "BrokenPipe" not in err, err


@pytest.mark.parametrize("script", ["sample", "lens", "export"])
def test_a_training_config_given_to_a_run_reader_says_to_pass_its_out_dir(script, tmp_path):
    """sample.py config/tiny.py: the run tiny.py trains is meant, so the error names the out_dir to pass, read
    from the file (or train.py's default where it sets none), not the first key the script lacks."""
    import importlib
    main = importlib.import_module(script).main
    with pytest.raises(ConfigError) as e:
        main(["config/tiny.py"])
    assert str(e.value) == (f"{script}.py reads a trained run, not a training config (config/tiny.py sets dataset): "
                            "pass --out_dir=out-tiny, the folder config/tiny.py trains into")
    bare = write(tmp_path, "max_iters = 4\n")
    with pytest.raises(ConfigError, match=r"sets max_iters\): pass --out_dir=out, train.py's default folder"):
        main([str(bare)])
    with pytest.raises(ConfigError, match=r"sets \w+\): pass --init_from=gpt2, the model config/eval_gpt2.py"):
        main(["config/eval_gpt2.py"])  # GPT-2's weights, not a run folder
    typo = write(tmp_path, "tmperature = 0.5\n", "typo.py")  # a key of neither: still the plain unknown key
    with pytest.raises(ConfigError, match="unknown config key 'tmperature'"):
        main([str(typo)])


def test_ctrl_c_while_a_script_starts_is_one_line_and_exit_130():
    """A Ctrl-C during `import torch` (a script's first second or two) is one line and exit 130, as run() makes
    it later, not a KeyboardInterrupt traceback from inside the import. The signal comes once the handler is in,
    as torch starts loading: deterministic however busy the machine."""
    code = ("import configurator; configurator.quit_quietly_on_early_ctrl_c(); print('ready', flush=True); "
            "import torch, time; time.sleep(60)")
    proc = subprocess.Popen([sys.executable, "-c", code], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    try:
        assert proc.stdout.readline() == "ready\n"
        proc.send_signal(signal.SIGINT)
        _, stderr = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 130 and stderr == "interrupted\n", stderr


SCRIPTS = ["train.py", "sample.py", "lens.py", "export.py", "bench.py", "scaling.py", "sizing.py",
           "data/shakespeare_char/prepare.py", "data/shakespeare/prepare.py", "data/text/prepare.py",
           "data/openwebtext/prepare.py"]


@pytest.mark.parametrize("script", SCRIPTS)
def test_every_script_quiets_an_early_ctrl_c_before_its_slow_imports(script):
    """Run as a script, each installs the handler above before it imports anything beyond the standard library
    (torch, numpy, tqdm and the project's modules that load them), so an early Ctrl-C is one line."""
    installed = False
    for node in ast.parse((ROOT / script).read_text()).body:
        if isinstance(node, ast.If) and "__main__" in ast.unparse(node.test) and \
                "quit_quietly_on_early_ctrl_c()" in ast.unparse(node):
            installed = True
        elif isinstance(node, (ast.Import, ast.ImportFrom)) and not installed:
            names = [node.module] if isinstance(node, ast.ImportFrom) else [a.name for a in node.names]
            assert all(n.split(".")[0] in sys.stdlib_module_names or n == "configurator" for n in names), \
                f"{script} imports {names} before it quiets an early Ctrl-C"
    assert installed, script


@pytest.mark.parametrize("module", ["model", "checkpoint", "configurator", "muon", "tokenizer"])
def test_a_library_module_run_as_a_script_says_what_it_is_and_which_commands_use_it(module):
    """python model.py (or --help) printed nothing and exited 0: now one paragraph, what the module is (its
    docstring's first line), that it is imported, not run, and the commands that import it, directly or through
    another module (muon.py through model.py); any other argument is a one-line error, exit 2."""
    first = ast.get_docstring(ast.parse((ROOT / f"{module}.py").read_text())).splitlines()[0].rstrip(":.")
    for args in ([], ["--help"]):
        p = run_script(f"{module}.py", *args)
        assert p.returncode == 0 and p.stderr == "", p.stderr
        text = " ".join(p.stdout.split())
        assert text.startswith(f"{module}.py: {first}") and "A library module: imported, not run." in text, text
        users = text.split("The commands that use it: ")[1].removesuffix(" (each answers --help).").split(", ")
        assert "train.py" in users and set(users) <= set(SCRIPTS), users
    bad = run_script(f"{module}.py", "--n_layer=2")
    assert bad.returncode == 2 and bad.stdout == "", bad.stdout
    assert bad.stderr == (f"error: {module}.py is imported, not run: it takes no arguments (python {module}.py --help "
                          "says what it is)\n"), bad.stderr


def test_the_config_that_trains_into_an_out_dir(tmp_path, monkeypatch):
    """sample.py, lens.py and export.py, finding no run in out-tiny-gpt2, point at the config that trains
    into it (config/tiny_gpt2.py), not at the main job's, whose run goes to out-tiny."""
    monkeypatch.chdir(tmp_path)  # out_dir is relative to where the script runs, as the configs' are
    assert training_into("out-tiny-gpt2") == "python train.py " + os.path.join("config", "tiny_gpt2.py")
    assert training_into("./out-tiny") == "python train.py " + os.path.join("config", "tiny.py")
    assert training_into("out-mine") == "python train.py config/tiny.py --out_dir=out-mine"


def test_a_file_beside_the_scripts_that_does_not_parse_is_passed_over(tmp_path, monkeypatch):
    """A user's half-written .py beside the scripts (a config file in progress) made every library module's
    --help a SyntaxError traceback: commands_using parsed it. It is passed over, and the commands still found."""
    import configurator
    for name in ("model.py", "train.py", "configurator.py"):
        (tmp_path / name).write_text((ROOT / name).read_text())
    (tmp_path / "myconfig.py").write_text("max_iters = 5 +\n")
    (tmp_path / "binary.py").write_bytes(b"import model\x00\xff\n")
    monkeypatch.setattr(configurator, "__file__", str(tmp_path / "configurator.py"))
    assert configurator.commands_using("model") == ["train.py"]


def test_uninterrupted_holds_a_ctrl_c_until_its_block_ends():
    """prepare.py's and export.py's last renames, cut by a Ctrl-C (a tester's timed SIGINT, 4 tries in 11),
    lost the old dataset or left the old export's copy: the signal now waits for the block, then arrives."""
    from configurator import uninterrupted
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    done = []
    try:
        with pytest.raises(KeyboardInterrupt):
            with uninterrupted():
                os.kill(os.getpid(), signal.SIGINT)
                time.sleep(0.05)  # unheld, the KeyboardInterrupt would have come by now
                done.append("renamed")
    finally:
        signal.signal(signal.SIGINT, before)
    assert done == ["renamed"]
