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
