"""
Which device and dtype a command computes on: "auto" is CUDA, then Apple's MPS, then the CPU, and
the fastest dtype that device does well. train.py, sample.py, lens.py and bench.py all choose here.
"""

import contextlib
import functools
import math
import os
import sys
import time

# OpenMP's idle threads sleep after a short spin rather than spin on: beside another busy process a
# spinning thread takes the cores that process needs (docs/cpu.md#threads-and-processes). OpenMP
# reads these as torch loads, so the commands import this file before torch.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
os.environ.setdefault("GOMP_SPINCOUNT", "1000")
import torch  # noqa: E402

from configurator import ConfigError

DTYPES = ("float32", "bfloat16", "float16")
# Dense 16-bit tensor-core peaks, FLOP/s, as NVIDIA's datasheets give them, without sparsity
# (GeForce cards with float32 accumulation). The first name that torch.cuda.get_device_name()
# contains is used. float32 matmuls run as TF32, at half the peak.
GPU_PEAKS = {
    "H100 PCIe": 756e12, "H100 NVL": 835e12, "H200 NVL": 835e12, "H100": 989e12, "H200": 989e12,
    "B200": 2250e12, "A100": 312e12, "L40S": 362e12, "L40": 181e12, "L4": 121e12, "A6000": 155e12,
    "RTX 4090": 165e12, "RTX 3090": 71e12, "V100": 125e12, "T4": 65e12,
}
# GPUs before Ampere have no TF32: float32 runs on the CUDA cores, at their own peak.
FLOAT32_PEAKS = {"V100": 15.7e12, "T4": 8.1e12}


def native_bf16(device_type):
    """True where bfloat16 matmuls run natively: a GPU from Ampere on, or a CPU with AVX-512 BF16 or
    AMX. torch.cuda.is_bf16_supported() alone also counts the emulation of V100 and T4, slower than
    float16. Other CPUs emulate bfloat16, and float32 is faster there (docs/cpu.md)."""
    if device_type == "cuda":
        return torch.cuda.is_bf16_supported(including_emulation=False)
    names = ("_is_avx512_bf16_supported", "_is_amx_tile_supported")
    probes = [getattr(torch.cpu, name, None) for name in names]
    return device_type == "cpu" and any(probe() for probe in probes if callable(probe))


def resolve_device(device="auto", dtype="auto"):
    """(device, device type, dtype name) for this machine, or a one-line ConfigError. A GPU becomes
    the current device (under torchrun "cuda" is this process's own, LOCAL_RANK), so nothing touches
    another."""
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
        if device == "cpu" and torch.backends.mps.is_available():
            device = "mps"
    try:
        kind, index = torch.device(device).type, torch.device(device).index
    except RuntimeError:
        raise ConfigError(f"device={device!r} is not a torch device (try cpu, cuda, cuda:1, mps)") \
            from None
    available = {"cpu": True, "cuda": torch.cuda.is_available(),
                 "mps": torch.backends.mps.is_available()}
    missing = kind == "cuda" and (index or 0) >= torch.cuda.device_count()
    if not available.get(kind, False) or missing:
        raise ConfigError(f"device={device!r} is not available here")
    if kind == "cuda" and index is not None and int(os.environ.get("LOCAL_WORLD_SIZE", 1)) > 1:
        raise ConfigError(f"device={device!r} would put every torchrun process on that one GPU: "
                          "use --device=cuda (each process its own, LOCAL_RANK; "
                          "CUDA_VISIBLE_DEVICES chooses which)")
    if kind == "cuda":
        if index is None:
            device = f"cuda:{os.environ.get('LOCAL_RANK', 0)}"
        torch.cuda.set_device(device)
        # TF32 matmuls are much faster than float32's and accurate enough for training
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    if dtype == "auto":  # float16 (with a gradient scaler) on GPUs before Ampere
        dtype = "float16" if kind == "cuda" else "float32"
        if native_bf16(kind):
            dtype = "bfloat16"
    if dtype not in DTYPES:
        raise ConfigError(f"dtype must be auto or one of {', '.join(DTYPES)}, got {dtype!r}")
    if kind == "cpu" and dtype == "float16":  # CPUs have no fast float16 matmuls
        raise ConfigError("dtype=float16 on a CPU is many times slower than float32: "
                          "use --dtype=float32 "
                          "(or bfloat16 on a CPU that has it natively)")
    return device, kind, dtype


def memory_available(device_type):
    """The bytes a run may take: a GPU's total memory, or what Linux has available now; else
    None."""
    if device_type == "cuda":
        return torch.cuda.mem_get_info()[1]
    if device_type == "cpu" and os.path.isfile("/proc/meminfo"):
        with open("/proc/meminfo") as f:
            kib = [line.split()[1] for line in f if line.startswith("MemAvailable:")]
        return int(kib[0]) * 1024 if kib else None


def check_fits(cost, device_type, processes=1):
    """Refuse, before anything is allocated, a run that cannot fit (cost: sizing.built_costs). On a
    CPU the whole estimate must fit, times the processes sharing the machine: it was checked against
    the peaks real runs reach (docs/training.md). On a GPU, where it was not, only what surely must
    fit is refused (the training state and CUDA's own 0.5 GiB); where the activations may not fit,
    one line warns."""
    have = memory_available(device_type)
    gpu = device_type == "cuda"
    need = sure = cost["training_bytes"] * processes
    if gpu:
        need = cost["training_bytes"] + 2**29
        sure = cost["train_state"] + 2**29
    if have is not None and sure > have:
        parts = "weights, gradients, optimizer state" + ("" if gpu else " and a micro-batch")
        raise ConfigError(f"this run needs {'at least ' * gpu}{sure / 2**30:.1f} GiB "
                          f"({parts}; sizing.py) but {device_type} has {have / 2**30:.1f} GiB: "
                          "a smaller model, batch_size or block_size")
    if have is not None and need > have and os.environ.get("RANK", "0") == "0":
        print(f"warning: this run may need {need / 2**30:.1f} GiB, sizing.py's estimate, "
              "and the GPU has "
              f"{have / 2**30:.1f}: if it runs out of memory, lower batch_size "
              "(gradient_accumulation_steps keeps the batch)", file=sys.stderr)


@functools.lru_cache(maxsize=None)
def peak_flops(device_type, dtype):
    """The matmul peak, FLOP/s, that MFU is reported against, or None where unknown. A GPU's is its
    datasheet's (GPU_PEAKS). A CPU's is measured now: the best one-thread 512 x 512 matmul over 1 s,
    times the threads. One thread's best holds on shared cores, where timing all of them at once
    does not (docs/cpu.md has the figures)."""
    if device_type == "cuda":
        name = torch.cuda.get_device_name()
        peak = next((flops for key, flops in GPU_PEAKS.items() if key in name), None)
        if dtype == "float32" and peak:  # TF32 at half the peak, or float32's own before Ampere
            return next((flops for key, flops in FLOAT32_PEAKS.items() if key in name), peak / 2)
        return peak
    if device_type != "cpu":
        return None
    a = torch.full((512, 512), 0.5, dtype=getattr(torch, dtype))  # no random state used
    best = math.inf
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    end = time.perf_counter() + 1.0  # a shorter window reads low at times on a shared host
    while (t := time.perf_counter()) < end:
        a @ a
        best = min(best, time.perf_counter() - t)
    torch.set_num_threads(threads)
    return threads * 2 * 512 ** 3 / best


@contextlib.contextmanager
def compiling():
    """Around torch.compile's first calls, where it compiles. A stop there (Ctrl-C reaches the C++
    compiler too) or a failure takes away what the compile wrote to inductor's cache: a 0-byte .so
    left there broke every later compiled run. A failure is then one line that says what to do."""
    from torch._inductor.runtime.cache_dir_utils import cache_dir
    start = time.time() - 1  # a file's time comes from a coarser clock than time.time()
    try:
        yield
    except BaseException as e:
        for folder, _, files in os.walk(cache_dir()):
            for path in (os.path.join(folder, name) for name in files):
                with contextlib.suppress(OSError):
                    if os.path.getmtime(path) >= start:
                        os.remove(path)
        if isinstance(e, Exception) and not isinstance(e, ConfigError):
            raise ConfigError(f"torch.compile failed ({type(e).__name__}: "
                              f"{(str(e).strip().splitlines() or [''])[0][:200]}); its cache is "
                              f"{cache_dir()}: try again, or run with --compile=false") from None
        raise


def cpu_attention_in_float32(model, device_type, dtype):
    """Under bfloat16 autocast on a CPU, each layer's attention runs in float32: there torch's
    attention kernels run slower in bfloat16 than in float32 (docs/cpu.md#which-dtype).
    Elsewhere nothing changes."""
    if device_type != "cpu" or dtype != "bfloat16":
        return
    for block in model.transformer.h:
        block.attn.attend = attend_in_float32(block.attn.attend)


def attend_in_float32(attend):
    def in_float32(q, k, v, mask=None):
        with torch.autocast("cpu", enabled=False):
            return attend(q.float(), k.float(), v.float(), mask)
    return in_float32


def autocast(device_type, dtype):
    """Matmuls in the low-precision dtype, softmax and norms kept in float32; nothing to do in
    float32."""
    if dtype == "float32":
        return contextlib.nullcontext()
    return torch.autocast(device_type, dtype=getattr(torch, dtype))
