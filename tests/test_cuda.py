"""
The GPU path, checked where there is one: every test here skips, with its reason, on a machine without CUDA.
On a GPU machine, from the repo root (a few minutes; torchrun runs 2 processes where there are 2 GPUs):

    python -m pytest tests/test_cuda.py -v -s

Training in bf16 compiled and eager, exact resume (float16's loss scale too), waits on the GPU per iteration (AdamW,
and Muon in float16), sample.py compiled and eager, torchrun with NCCL (DDP and FSDP, equal to one process; FSDP in
bf16 compiled, as a user runs it, learning and resuming), an FSDP resume's GPU memory, and GPT-2 124M's step time
and MFU on random tokens.
"""

import json
import subprocess
import sys
import warnings

import pytest
import torch
import torch.distributed as dist

import parallel
from checkpoint import load_checkpoint
from conftest import run_script
from test_train import ROOT, TINY, evals, steps

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
GPUS = torch.cuda.device_count() if torch.cuda.is_available() else 0
ON_GPU = [a for a in TINY if not a.startswith(("--device", "--dtype", "--compile", "--num_threads"))] + ["--device=cuda"]


def train(data, out, *args):
    return run_script("train.py", f"--data_dir={data}", f"--out_dir={out}", *ON_GPU, *args)


@pytest.mark.parametrize("compile", ["true", "false"])
def test_training_on_the_gpu_in_its_dtype_learns(compile, tmp_path, data_dir):
    out = tmp_path / "out"
    result = train(data_dir, out, f"--compile={compile}", "--max_iters=60", "--eval_interval=30", "--max_seconds=0")
    assert result.returncode == 0, result.stderr
    dtype = "bfloat16" if torch.cuda.get_device_capability()[0] >= 8 else "float16"
    assert f"cuda:0 {dtype}" in result.stdout and ("compiled in" in result.stdout) == (compile == "true")
    assert evals(out)[-1][1] < evals(out)[0][1] - 0.5
    print(result.stdout.splitlines()[-3])


def test_resume_on_the_gpu_is_as_exact_as_a_second_run(tmp_path, data_dir):
    """Some CUDA kernels are not bit-exact run to run: a resume must differ from the straight run no more than a
    second straight run does (float16 included: the GradScaler's state is in ckpt.pt)."""
    args = ["--max_seconds=0", "--eval_interval=10", "--dropout=0.1", "--compile=false", "--dtype=float16"]
    a, b, split = tmp_path / "a", tmp_path / "b", tmp_path / "split"
    for out in (a, b):
        assert train(data_dir, out, "--max_iters=20", *args).returncode == 0
    assert train(data_dir, split, "--max_iters=10", *args).returncode == 0
    assert train(data_dir, split, "--max_iters=20", "--init_from=resume", *args).returncode == 0
    noise = max(abs(x - y) for (_, x), (_, y) in zip(steps(a), steps(b)))
    assert [i for i, _ in steps(split)] == [i for i, _ in steps(a)]
    assert max(abs(x - y) for (_, x), (_, y) in zip(steps(a), steps(split))) <= noise + 1e-3
    # a tiny model rarely overflows, so its losses barely show a lost scaler: its state (scale, clean steps since the
    # last overflow) must be the straight run's, not a fresh scaler's that counted only the resumed 10 steps
    scalers = [load_checkpoint(out / "ckpt.pt")["scaler"] for out in (a, b, split)]
    assert scalers[2]["scale"] > 0 and scalers[2] in scalers[:2], scalers


@pytest.mark.parametrize("how", [[], ["--optimizer=muon", "--dtype=float16"]])
def test_the_loop_waits_on_the_gpu_once_per_log_interval(how, tmp_path, data_dir):
    """torch's sync debug mode warns at each wait (.item(), a pageable copy, a truth test): 20 iterations more with
    log_interval=10 add 2 waits, the logs'. Muon in float16 too: the GradScaler hands it found_inf on the GPU."""
    counts = []
    for n in (10, 30):
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            torch.cuda.set_sync_debug_mode("warn")
            try:
                result = train(data_dir, tmp_path / str(n), f"--max_iters={n}", "--log_interval=10",
                               "--eval_interval=1000", "--compile=false", *how)
            finally:
                torch.cuda.set_sync_debug_mode(0)
        assert result.returncode == 0, result.stderr
        counts.append(sum("synchroniz" in str(w.message) for w in seen))
    assert counts[1] - counts[0] <= 2, counts


@pytest.mark.parametrize("compile", ["false", "true"])
def test_sample_on_the_gpu(compile, tmp_path, data_dir):
    out = tmp_path / "out"
    assert train(data_dir, out, "--max_iters=20", "--compile=false").returncode == 0
    result = run_script("sample.py", f"--out_dir={out}", "--device=cuda", f"--compile={compile}", "--temperature=0",
                        "--max_new_tokens=100", f"--start={chr(0x100)}")  # the synthetic vocabulary's first char
    assert result.returncode == 0 and "cuda" in result.stderr and "failed" not in result.stderr, result.stderr
    print(result.stderr.splitlines()[-1])


def torchrun(n, data, out, *args):
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={n}", "train.py",
           f"--data_dir={data}", f"--out_dir={out}", *ON_GPU, *args]
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600)


@pytest.mark.parametrize("how", [[], ["--fsdp=True", "--optimizer=adamw"]])
def test_torchrun_with_nccl_equals_one_process(how, tmp_path, data_dir):
    """DDP and FSDP over NCCL, on two GPUs where there are two (one process each), else in one process alone."""
    args = ["--gradient_accumulation_steps=4", "--max_iters=6", "--eval_interval=3", "--eval_iters=4",
            "--max_seconds=0", "--dtype=float32", "--compile=false", *how]
    one, two = tmp_path / "one", tmp_path / "two"
    assert train(data_dir, one, *args).returncode == 0
    result = torchrun(min(GPUS, 2), data_dir, two, *args)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "nccl" not in result.stderr.lower() or "error" not in result.stderr.lower()
    for (_, a), (_, b) in zip(steps(one) + evals(one), steps(two) + evals(two), strict=True):
        assert abs(a - b) < 1e-3
    assert load_checkpoint(two / "ckpt.pt")["iter_num"] == 6


def test_fsdp_with_nccl_in_bf16_compiled_learns_and_resumes(tmp_path, data_dir):
    """What a GPU user runs: torchrun train.py --fsdp=True --compile=true, dtype auto (bfloat16 from Ampere on), on two
    GPUs where there are two. It learns; a resume under FSDP at iter 30 continues as the straight run goes on, no
    further from it than the two were apart before it (the same run twice: the GPU's noise) and a little."""
    args = ["--fsdp=True", "--optimizer=adamw", "--compile=true", "--max_seconds=0", "--eval_interval=30"]
    straight, split = tmp_path / "straight", tmp_path / "split"
    result = torchrun(min(GPUS, 2), data_dir, straight, "--max_iters=60", *args)
    assert result.returncode == 0, result.stderr[-3000:]
    dtype = "bfloat16" if torch.cuda.get_device_capability()[0] >= 8 else "float16"
    assert f"cuda:0 {dtype} compiled" in result.stdout, result.stdout
    assert evals(straight)[-1][1] < evals(straight)[0][1] - 0.5
    for n, resume in ((30, []), (60, ["--init_from=resume"])):
        result = torchrun(min(GPUS, 2), data_dir, split, f"--max_iters={n}", *resume, *args)
        assert result.returncode == 0, result.stderr[-3000:]
    assert [i for i, _ in steps(split)] == list(range(60)) and load_checkpoint(split / "ckpt.pt")["iter_num"] == 60
    apart = [abs(a - b) for (_, a), (_, b) in zip(steps(straight), steps(split), strict=True)]
    print(f"FSDP bf16 compiled: the split run from the straight one, before the resume {max(apart[:30]):.4f}, after "
          f"{max(apart[30:]):.4f}")
    assert max(apart[30:]) <= 2 * max(apart[:30]) + 0.02
    assert abs(evals(straight)[-1][1] - evals(split)[-1][1]) <= 2 * max(apart[:30]) + 0.02


def test_an_fsdp_resume_brings_each_gpu_only_its_shard_of_the_optimizer_state():
    """parallel.load_optimizer as one of two FSDP processes (torch's fake process group: this GPU alone, collectives
    going nowhere): the GPU's memory peaks at the shard of AdamW's moments it keeps, not at the whole moments of the
    model (8 bytes a parameter: ~12.5 GB on every GPU at GPT-2 XL), and what it keeps is its part of the whole."""
    from test_parallel import fsdp_rank, shard
    model, opt, saved = fsdp_rank(0, "cuda")
    try:
        params = [p for g in opt.param_groups for p in g["params"]]
        kept = sum(2 * 4 * p.to_local().numel() for p in params)  # exp_avg and exp_avg_sq, float32
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        before = torch.cuda.memory_allocated()
        parallel.load_optimizer(opt, saved)
        peak = torch.cuda.max_memory_allocated() - before
        print(f"an FSDP resume's AdamW state: the GPU's peak {peak / 2**20:.1f} MiB, its shard {kept / 2**20:.1f} MiB, "
              f"the whole {2 * kept / 2**20:.1f} MiB")
        assert peak <= kept * 1.05 + 2**20, (peak, kept)
        for i, p in enumerate(params):
            for key in ("exp_avg", "exp_avg_sq"):
                assert torch.equal(opt.state[p][key].to_local().cpu(), shard(saved["state"][i][key], p))
    finally:
        dist.destroy_process_group()


def test_gpt2_124m_step_and_mfu(tmp_path):
    """GPT-2 small's shape, batch 12 x 1024, bf16, compiled, on random tokens: its step time and MFU, printed."""
    out = tmp_path / "bench.json"
    cmd = [sys.executable, "bench.py", "--mode=train", "--device=cuda", "--n_layer=12", "--n_head=12", "--n_embd=768",
           "--block_size=1024", "--batch_size=12", "--vocab_size=50304", "--bias=True", "--dtype=auto",
           "--compile=True", "--repeats=10", f"--json={out}"]
    result = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stderr[-3000:]
    r = json.loads(out.read_text())
    print(f"GPT-2 124M on {torch.cuda.get_device_name()}: {r['step_ms']:.1f} ms a step, {r['tokens_per_s']:,.0f} "
          f"tokens/s, MFU {r['mfu']:.1%} of the measured peak")
    assert r["mfu"] > 0.2
