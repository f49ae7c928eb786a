import os
import socket

import pytest
import torch


@pytest.fixture(autouse=True, scope="session")
def one_thread():
    """The tests' models are tiny: one thread is as fast as two, and far faster when other jobs share
    the cores (two OpenMP threads then spin-wait on each other). Subprocesses choose their own."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


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
