"""
Which device and dtype a command computes on: "auto" is CUDA, then Apple's MPS, then the CPU, and the
fastest dtype that device does well. train.py, sample.py, lens.py and bench.py all choose here.
"""

import contextlib
import os

# OpenMP's idle threads sleep after a short spin rather than spinning on: with one other busy process on the
# 2 cores the main job's step took 192 ms, not 340; on idle cores 89 ms, not 84 (2026-11-27, medians of 3 runs
# each). OpenMP reads these as torch loads, so the commands import this file before torch.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
os.environ.setdefault("GOMP_SPINCOUNT", "1000")
import torch  # noqa: E402

from configurator import ConfigError

DTYPES = ("float32", "bfloat16", "float16")


def cpu_has_native_bf16():
    """True where the CPU computes in bfloat16 natively (AVX-512 BF16 or AMX); elsewhere torch emulates bf16,
    and float32 is faster (docs/cpu.md)."""
    probes = [getattr(torch.cpu, name, None) for name in ("_is_avx512_bf16_supported", "_is_amx_tile_supported")]
    return any(probe() for probe in probes if callable(probe))


def resolve_device(device="auto", dtype="auto"):
    """(device, device type, dtype name) for this machine, or a one-line ConfigError."""
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "mps" if torch.backends.mps.is_available() else "cpu"
    try:
        kind = torch.device(device).type
    except RuntimeError:
        raise ConfigError(f"device={device!r} is not a torch device (try cpu, cuda, cuda:1, mps)") from None
    available = {"cpu": True, "cuda": torch.cuda.is_available(), "mps": torch.backends.mps.is_available()}
    if not available.get(kind, False):
        raise ConfigError(f"device={device!r} is not available here")
    if dtype == "auto":
        if kind == "cuda":
            dtype = "bfloat16" if torch.cuda.is_bf16_supported() else "float16"
        else:
            dtype = "bfloat16" if kind == "cpu" and cpu_has_native_bf16() else "float32"
    if dtype not in DTYPES:
        raise ConfigError(f"dtype must be auto or one of {', '.join(DTYPES)}, got {dtype!r}")
    if kind == "cpu" and dtype == "float16":  # CPUs have no fast float16 matmuls
        raise ConfigError("dtype=float16 on a CPU is many times slower than float32: use --dtype=float32 "
                          "(or bfloat16 on a CPU that has it natively)")
    return device, kind, dtype


def check_fits(need, device_type, processes=1):
    """Refuse, before anything is allocated, a run that needs more bytes than the device has (a GPU's total memory,
    or what Linux has available now, which the processes on one machine share)."""
    have = None
    if device_type == "cuda":
        have = torch.cuda.mem_get_info()[1]
    elif device_type == "cpu" and os.path.isfile("/proc/meminfo"):
        with open("/proc/meminfo") as f:
            have = next((int(line.split()[1]) * 1024 for line in f if line.startswith("MemAvailable:")), None)
        need *= processes
    if have is not None and need > have:
        raise ConfigError(f"this run needs at least {need / 2**30:.1f} GiB (weights, gradients, optimizer state and a "
                          f"micro-batch; sizing.py) but {device_type} has {have / 2**30:.1f} GiB: a smaller model, "
                          "batch_size or block_size")


def autocast(device_type, dtype):
    """Matmuls in the low-precision dtype, softmax and norms kept in float32; nothing to do in float32."""
    if dtype == "float32":
        return contextlib.nullcontext()
    return torch.autocast(device_type, dtype=getattr(torch, dtype))
