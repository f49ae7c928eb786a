"""
device.py on GPUs this machine does not have: torch.cuda's answers are faked, the choices are device.py's own.
A V100 or T4 trains in float16 (bfloat16 there is emulated), an A100 in bfloat16; --device=cuda:1 and torchrun's
LOCAL_RANK make that GPU the current one, so the memory check, the model and the random state all use it.
"""

import math

import pytest
import torch

import device
from configurator import ConfigError


@pytest.fixture
def gpus(monkeypatch):
    """Two fake GPUs of a given compute capability; returns the list of devices made current."""
    current = []

    def fake(capability):
        monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
        monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
        monkeypatch.setattr(torch.cuda, "set_device", current.append)
        # torch's own test, minus the device query: native from compute capability 8.0 (Ampere) on
        monkeypatch.setattr(torch.cuda, "is_bf16_supported",
                            lambda including_emulation=True: capability >= 8 or including_emulation)
        return current
    yield fake


@pytest.mark.parametrize("capability, dtype", [(7, "float16"), (8, "bfloat16")])
def test_dtype_auto_is_bfloat16_only_where_the_gpu_computes_it_natively(gpus, capability, dtype, monkeypatch):
    gpus(capability)
    monkeypatch.delenv("LOCAL_RANK", raising=False)
    assert device.resolve_device("cuda", "auto") == ("cuda:0", "cuda", dtype)
    assert device.native_bf16("cuda") is (capability >= 8)


def test_the_gpu_named_or_torchruns_becomes_the_current_device(gpus, monkeypatch):
    current = gpus(8)
    monkeypatch.delenv("LOCAL_RANK", raising=False)
    assert device.resolve_device("cuda:1")[0] == "cuda:1"
    monkeypatch.setenv("LOCAL_RANK", "1")  # under torchrun, "cuda" is this process's own GPU
    assert device.resolve_device("cuda")[0] == "cuda:1"
    assert current == ["cuda:1", "cuda:1"]
    with pytest.raises(ConfigError):
        device.resolve_device("cuda:2")  # two GPUs: 0 and 1
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    with pytest.raises(ConfigError):  # every process on GPU 1: NCCL's error at the first collective, not one line
        device.resolve_device("cuda:1")


def test_peak_flops(monkeypatch):
    """What holds on any machine, busy or idle: a CPU's measured peak is a finite positive rate and leaves
    torch's threads as found (how steady it is, is bench.py's to time); a GPU's is its datasheet's."""
    threads = torch.get_num_threads()
    cpu = device.peak_flops.__wrapped__("cpu", "float32")
    assert math.isfinite(cpu) and cpu > 0 and torch.get_num_threads() == threads
    assert device.peak_flops("mps", "float32") is None  # no peak known: no MFU rather than a wrong one
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a: "NVIDIA A100-SXM4-80GB")
    assert device.peak_flops.__wrapped__("cuda", "bfloat16") == 312e12
    assert device.peak_flops.__wrapped__("cuda", "float32") == 156e12  # TF32
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a: "NVIDIA H100 PCIe")
    assert device.peak_flops.__wrapped__("cuda", "bfloat16") == 756e12
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a: "Tesla V100-SXM2-16GB")  # no TF32: float32's own
    assert (device.peak_flops.__wrapped__("cuda", "float16"), device.peak_flops.__wrapped__("cuda", "float32")) == \
        (125e12, 15.7e12)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a: "Tesla T4")
    assert device.peak_flops.__wrapped__("cuda", "float32") == 8.1e12
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a: "Some Future GPU")
    assert device.peak_flops.__wrapped__("cuda", "bfloat16") is None  # no MFU rather than a wrong one


def test_on_a_gpu_only_what_surely_cannot_fit_is_refused(monkeypatch, capsys):
    """The estimate was checked against real peaks on CPUs only: on a GPU the training state (and CUDA's own) must
    fit, or the run is refused; activations that may not fit are one line of warning."""
    cost = {"train_state": 6 * 2**30, "training_bytes": 12 * 2**30}
    monkeypatch.setattr(device, "memory_available", lambda kind: 16 * 2**30)
    device.check_fits(cost, "cuda")
    assert capsys.readouterr().err == ""
    monkeypatch.setattr(device, "memory_available", lambda kind: 8 * 2**30)
    device.check_fits(cost, "cuda")
    assert len(capsys.readouterr().err.strip().splitlines()) == 1
    with pytest.raises(ConfigError):
        device.check_fits(cost, "cpu")  # where the estimate holds: the whole of it
    monkeypatch.setattr(device, "memory_available", lambda kind: 4 * 2**30)
    with pytest.raises(ConfigError):
        device.check_fits(cost, "cuda")


def test_cpu_bf16_attention_runs_in_float32_with_the_same_logits(monkeypatch):
    """Under CPU bf16 autocast, cpu_attention_in_float32 hands attention float32 q, k and v; the logits stay
    those of bf16 attention within bf16's precision. On other devices or dtypes nothing changes."""
    from model import GPT, GPTConfig, CausalSelfAttention
    torch.manual_seed(0)
    model = GPT(GPTConfig(block_size=16, vocab_size=50, n_layer=2, n_head=2, n_embd=32))
    idx = torch.randint(0, 50, (2, 16))
    seen, attend = [], CausalSelfAttention.attend
    monkeypatch.setattr(CausalSelfAttention, "attend",
                        lambda self, q, k, v, mask=None: seen.append(q.dtype) or attend(self, q, k, v, mask))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        before = model(idx, idx)[0].float()
        device.cpu_attention_in_float32(model, "cuda", "bfloat16")
        device.cpu_attention_in_float32(model, "cpu", "float32")
        unchanged = model(idx, idx)[0].float()
        assert seen == [torch.bfloat16] * 4 and unchanged.equal(before)
        seen.clear()
        device.cpu_attention_in_float32(model, "cpu", "bfloat16")
        after = model(idx, idx)[0].float()
    assert seen == [torch.float32] * 2
    torch.testing.assert_close(after, before, atol=0.05, rtol=0.05)
    after.sum().backward()  # training goes through it too
    assert model.lm_head.weight.grad is not None
    torch._dynamo.reset()
    with torch.autocast("cpu", dtype=torch.bfloat16):  # and train.py --compile=true still gets one graph
        explained = torch._dynamo.explain(model)(idx, idx)
    assert explained.graph_count == 1 and explained.graph_break_count == 0, explained.break_reasons
