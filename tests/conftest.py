import os
import signal
import socket
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parent.parent
# GPT-2's BPE files offline: the tiktoken cache a user names, else the one in ../shared.
TIKTOKEN_DIR = Path(os.environ.get("TIKTOKEN_CACHE_DIR") or REPO.parent / "shared" / "data" / "tiktoken")


@pytest.fixture(autouse=True, scope="session")
def one_thread():
    """The tests' models are tiny: one thread is as fast as two, and far faster when other jobs share
    the cores (two OpenMP threads then spin-wait on each other). Subprocesses choose their own."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(autouse=True, scope="session")
def ctrl_c_reaches_scripts():
    """pytest started in the background by a script inherits SIGINT ignored, and so would every script a test
    interrupts (sample.py's Ctrl-C is Python's own): give them a terminal's Ctrl-C."""
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.fixture
def data_dir(tmp_path):
    """A tiny random-token dataset (train.bin, val.bin, meta.pkl) in tmp_path/data, for train.py's tests."""
    from test_train import make_dataset
    make_dataset(tmp_path / "data")
    return tmp_path / "data"


@pytest.fixture
def offline_hf(tmp_path):
    """env(how) for a subprocess with no network for Hugging Face: an empty cache, and the hub either
    unreachable (a loopback port nothing listens on: refused at once) or HF_HUB_OFFLINE set."""
    def env(how):
        e = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "TRANSFORMERS_"))}
        e["HF_HOME"] = str(tmp_path / "hf_home")
        if how == "unreachable":
            with socket.socket() as s:
                s.bind(("127.0.0.1", 0))
                e["HF_ENDPOINT"] = f"http://127.0.0.1:{s.getsockname()[1]}"
        else:
            e["HF_HUB_OFFLINE"] = "1"
        return e
    return env


def run_script(script, *args, cwd=None):
    """
    python <script> <args> (script relative to the repo), run in this process: no new interpreter importing
    torch again, 3 s and more a run on this project's 2 shared cores. The script's own code from the top, as
    __main__, its folder first on sys.path, its stdout and stderr caught at the file descriptors (train.py
    writes its stop lines with os.write). Returns a CompletedProcess. What only a real process shows
    (signals, a closed pipe, import-time noise, DDP) the tests run for real.
    """
    import runpy
    import signal
    import subprocess
    import sys
    import tempfile
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    argv, here, code = [script, *map(str, args)], os.getcwd(), 0
    path = os.path.join(root, script)
    handlers = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    environ = dict(os.environ)  # device.py sets OMP_WAIT_POLICY for the scripts, not for what runs next
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        sys.stdout.flush()
        sys.stderr.flush()
        saved = os.dup(1), os.dup(2), sys.stdout, sys.stderr, sys.argv
        os.dup2(out.fileno(), 1)
        os.dup2(err.fileno(), 2)
        sys.stdout, sys.stderr = open(1, "w", closefd=False), open(2, "w", closefd=False, buffering=1)
        sys.argv = argv
        sys.path.insert(0, os.path.dirname(path))
        os.chdir(root if cwd is None else cwd)
        try:
            runpy.run_path(path, run_name="__main__")
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else 0 if e.code is None else 1
        finally:
            sys.stdout.close()  # flushed; the descriptors stay open
            sys.stderr.close()
            os.chdir(here)
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            os.close(saved[0])
            os.close(saved[1])
            sys.stdout, sys.stderr, sys.argv = saved[2:]
            sys.path.remove(os.path.dirname(path))
            os.environ.clear()
            os.environ.update(environ)
            signal.set_wakeup_fd(-1)  # train.py's stop watcher's: its thread waits on, harmless
            for s, handler in handlers.items():
                signal.signal(s, handler)
        out.seek(0)
        err.seek(0)
        return subprocess.CompletedProcess(argv, code, out.read(), err.read())

