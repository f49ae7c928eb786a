"""configurator.py: config files and --key=value, checked; --help from the comments; run()'s one-line errors."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from configurator import ConfigError, config_keys, configure, key_comments
from conftest import run_script

ROOT = Path(__file__).resolve().parent.parent
DEFAULTS = {"n_layer": 12, "learning_rate": 6e-4, "compile": True, "out_dir": "out", "top_k": 200, "init": None}


def test_command_line_values_take_the_defaults_types():
    c = configure(DEFAULTS, ["--n_layer=4", "--learning_rate=1e-3", "--compile=false", "--out_dir=123", "--top_k=1e3"])
    assert c == dict(DEFAULTS, n_layer=4, learning_rate=1e-3, compile=False, out_dir="123", top_k=1000)
    assert configure(DEFAULTS, ["--learning_rate=1"])["learning_rate"] == 1.0
    assert configure(DEFAULTS, ["--compile=1"])["compile"] is True


@pytest.mark.parametrize("argv", [["--n_layer=two"], ["--n_layer=1.5"], ["--compile=maybe"], ["--learning_rate=x"],
                                  ["--top_k=None"], ["--n_layer"], ["--n_layr=2"], ["no_such_file.py"]])
def test_bad_values_are_config_errors(argv):
    with pytest.raises(ConfigError):
        configure(DEFAULTS, argv)


def test_did_you_mean():
    with pytest.raises(ConfigError, match="n_layer"):
        configure(DEFAULTS, ["--n_layr=2"])


def test_nullable_keys_take_none():
    assert configure(DEFAULTS, ["--top_k=None"], nullable=("top_k",))["top_k"] is None
    assert configure(DEFAULTS, ["--init=anything"])["init"] == "anything"  # a None default takes any value


def test_config_files_apply_left_to_right_and_record_where(tmp_path):
    f = tmp_path / "c.py"
    f.write_text("import math\nn_layer = 3\n_private = 5\nlearning_rate = math.sqrt(4e-6)\n")
    given = {}
    c = configure(DEFAULTS, [str(f), "--n_layer=5"], given=given)
    assert c["n_layer"] == 5 and c["learning_rate"] == pytest.approx(2e-3)
    assert given == {"n_layer": "on the command line", "learning_rate": f"in {f}"}
    with pytest.raises(ConfigError, match="n_layer"):  # a file undoing a typed --key=value: not in silence
        configure(DEFAULTS, ["--n_layer=5", str(f)])


def test_unknown_key_in_a_file_is_refused_unless_not_strict(tmp_path):
    f = tmp_path / "c.py"
    f.write_text("n_layers = 3\nn_layer = 2\n")
    with pytest.raises(ConfigError, match="n_layer"):
        configure(DEFAULTS, [str(f)])
    assert configure(DEFAULTS, [str(f)], strict_files=False)["n_layer"] == 2


def test_a_failing_or_binary_config_file_is_one_error(tmp_path):
    (tmp_path / "bad.py").write_text("1 / 0\n")
    (tmp_path / "bin.pt").write_bytes(b"\x80\x02\xff\xfe")
    for name in ("bad.py", "bin.pt"):
        with pytest.raises(ConfigError):
            configure(DEFAULTS, [str(tmp_path / name)])


def test_config_keys_are_the_public_plain_values():
    assert config_keys({"a": 1, "_b": 2, "C": 3, "f": print, "s": "x", "n": None, "l": [1]}) == {"a": 1, "s": "x", "n": None}


def test_key_comments_read_the_comment_beside_each_default(tmp_path):
    f = tmp_path / "s.py"
    f.write_text("a = 1  # the a\nb = 2\nclass C:\n    c: int = 3  # the c\nD = dict(\n    d=4,  # the d\n)\n")
    assert key_comments(f) == {"a": "the a", "c": "the c", "d": "the d"}


COMMANDS = ["train.py", "sample.py", "bench.py", "sizing.py", "scaling.py", "lens.py", "export.py",
            "data/shakespeare_char/prepare.py", "data/text/prepare.py", "data/shakespeare/prepare.py",
            "data/openwebtext/prepare.py"]


@pytest.mark.parametrize("script", COMMANDS)
def test_every_command_answers_help(script):
    result = run_script(script, "--help")
    assert result.returncode == 0 and "--" in result.stdout and result.stderr == "", result.stderr


@pytest.mark.parametrize("script", COMMANDS)
def test_help_gives_each_key_a_line_and_a_meaning_of_its_own(script):
    """A comment shared by two keys describes at least one of them wrongly; a value's line break breaks its line."""
    out = run_script(script, "--help").stdout
    meanings = {}
    for line in out[out.index("Keys are set by"):].splitlines()[1:]:
        if line and not line.endswith(":"):
            key = re.match(r"^  --(\w+)=(.*?)(?:  +(.*))?$", line)
            assert key, f"not a key's line: {line!r}"
            if key[3]:
                meanings.setdefault(key[3], set()).add(key[1])
    shared = {m: keys for m, keys in meanings.items() if len(keys) > 1}
    assert not shared, shared


def test_help_shows_the_values_the_config_files_and_overrides_beside_it_set():
    out = run_script("train.py", "config/tiny.py", "--help", "--n_layer=2").stdout
    lines = set(out.split())
    assert {"--out_dir=out-tiny", "--n_layer=2", "--max_seconds=180.0"} <= lines and "--out_dir=out" not in lines


def test_a_bare_flag_is_true_for_a_boolean_key_only():
    assert configure({"quick": False, "n": 1}, ["--quick"]) == {"quick": True, "n": 1}
    with pytest.raises(ConfigError):
        configure({"quick": False, "n": 1}, ["--n"])


def test_run_makes_bad_input_one_line_and_exit_2(tmp_path):
    script = tmp_path / "s.py"
    script.write_text(f"import sys\nsys.path.insert(0, {str(ROOT)!r})\nfrom configurator import configure, run\n"
                      "run(lambda: configure({'x': 1}, sys.argv[1:]))\n")
    result = subprocess.run([sys.executable, script, "--y=2"], capture_output=True, text=True)
    assert result.returncode == 2 and result.stderr.count("\n") == 1 and "Traceback" not in result.stderr


@pytest.mark.parametrize("signum, code", [(2, 130), (15, 143)])
def test_run_makes_a_signal_one_line_and_its_exit_code(signum, code, tmp_path):
    script = tmp_path / "s.py"
    script.write_text(f"import sys, time\nsys.path.insert(0, {str(ROOT)!r})\nfrom configurator import run\n"
                      "def main():\n    print('ready', flush=True)\n    time.sleep(30)\nrun(main)\n")
    proc = subprocess.Popen([sys.executable, script], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout.readline() == "ready\n"
    os.kill(proc.pid, signum)
    _, err = proc.communicate(timeout=10)
    assert proc.returncode == code and "Traceback" not in err and err.count("\n") == 1
