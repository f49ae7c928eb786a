"""
Many processes on the CPU (torchrun, gloo): FSDP trains as one process does, its ckpt.pt is any run's ckpt.pt (a
run moves between 1 process, DDP and FSDP by --init_from=resume), and each FSDP process holds half of what a DDP
process holds. Each torchrun starts processes that import torch: slow. What one FSDP process does with a checkpoint
is checked in this process, as one rank of two whose collectives go nowhere (torch's fake process group).
"""

import json
import os
import signal
import socket
import subprocess
import sys
import time

import pytest
import torch
import torch.distributed as dist

import parallel
from checkpoint import load_checkpoint
from model import GPT, GPTConfig
from sizing import memory_bytes
from test_train import ROOT, TINY, evals, run_train, steps, torchrun

ARGS = ["--gradient_accumulation_steps=4", "--eval_interval=3", "--eval_iters=4", "--optimizer=adamw", "--max_seconds=0",
        "--dtype=float32"]


@pytest.mark.slow
def test_fsdp_equals_one_process_and_a_run_moves_between_1_process_ddp_and_fsdp(tmp_path, data_dir):
    """12 iterations in one process, against: 3 under FSDP, 3 more in one process, 3 under DDP, 3 under FSDP again,
    each resuming the last one's ckpt.pt: the same losses within 1e-5 (float32, AdamW, the same global batch)."""
    straight, moved = tmp_path / "straight", tmp_path / "moved"
    assert run_train("--max_iters=12", *ARGS, data=data_dir, out=straight).returncode == 0
    fsdp = torchrun(data_dir, moved, "--max_iters=3", "--fsdp=True", *ARGS)
    assert fsdp.returncode == 0, fsdp.stderr[-3000:]
    ckpt = load_checkpoint(moved / "ckpt.pt")  # one file, whole tensors, read as any run's
    assert all(type(v).__name__ == "Tensor" for v in ckpt["model"].values()) and ckpt["iter_num"] == 3
    wte = ckpt["model"]["transformer.wte.weight"]  # tied: one tensor, written once, as by one process
    assert ckpt["model"]["lm_head.weight"].data_ptr() == wte.data_ptr()
    size = [(out / "ckpt.pt").stat().st_size for out in (straight, moved)]
    assert abs(size[0] - size[1]) < wte.numel() * wte.element_size() / 2, size
    one = run_train("--max_iters=6", "--init_from=resume", *ARGS, data=data_dir, out=moved)
    assert one.returncode == 0, one.stderr
    for n, how in ((9, []), (12, ["--fsdp=True"])):
        result = torchrun(data_dir, moved, f"--max_iters={n}", "--init_from=resume", *how, *ARGS)
        assert result.returncode == 0, result.stderr[-3000:]
    assert [i for i, _ in steps(moved)] == list(range(12))
    for (_, a), (_, b) in zip(steps(straight) + evals(straight), steps(moved) + evals(moved), strict=True):
        assert abs(a - b) <= 1e-5, (a, b)


@pytest.mark.slow
@pytest.mark.parametrize("how", [[], ["--fsdp=True"]])
def test_a_time_budget_ends_every_process_at_the_same_iteration(how, tmp_path, data_dir):
    """Each process counts its own seconds; they agree on the most (a collective on the host), so all decay the lr
    alike and leave the loop together: a process that ended first left the other waiting in a collective forever."""
    for resume in ([], ["--init_from=resume"]):
        result = torchrun(data_dir, tmp_path / "out", f"--max_seconds={3 + 3 * bool(resume)}", "--max_iters=100000",
                          "--lr_decay_iters=100000", "--eval_interval=100000", *resume, *how, *ARGS[:1])
        assert result.returncode == 0, result.stderr[-3000:]


def rank_bytes(tmp_path, *args):
    out = tmp_path / f"bytes{len(args)}.json"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", "tests/rank_bytes.py",
           str(out), *args]
    result = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(out.read_text())


@pytest.mark.slow
def test_an_fsdp_process_holds_half_of_what_a_ddp_process_holds(tmp_path):
    """Parameters, gradients and AdamW's moments, measured in each process after a step, against sizing.py's
    arithmetic: DDP's process holds them all, each of 2 FSDP processes half (up to a row of padding each)."""
    from model import GPTConfig
    ddp, fsdp = rank_bytes(tmp_path), rank_bytes(tmp_path, "--fsdp")
    m = memory_bytes(GPTConfig(block_size=32, vocab_size=64, n_layer=4, n_head=4, n_embd=64))
    assert (ddp["params"], ddp["grads"], ddp["optimizer"]) == (m["params"], m["grads"], m["adamw"])
    for key in ("params", "grads", "optimizer"):
        assert ddp[key] / 2 <= fsdp[key] <= ddp[key] / 2 * 1.02, key
    assert memory_bytes(GPTConfig(block_size=32, vocab_size=64, n_layer=4, n_head=4, n_embd=64), shards=2)[
        "train_state"] == m["train_state"] // 2
    assert ddp["ddp_buffers_broadcast"] is False and ddp["ddp_bucket_views"] is True  # tuned as nanoGPT's users would


@pytest.mark.slow
def test_fsdp_in_bf16_keeps_no_bf16_copy_of_the_weights_for_the_backward_pass(tmp_path):
    """Under bfloat16 FSDP gathers each block's weights in bf16 and frees them after its forward; autocast alone made
    a bf16 copy of every weight, which autograd kept until the backward pass: 2 bytes a parameter of the whole model
    in every process, as a DDP process keeps them."""
    ddp, fsdp = rank_bytes(tmp_path, "--bf16"), rank_bytes(tmp_path, "--fsdp", "--bf16")
    assert ddp["kept"] - fsdp["kept"] >= 2 * 12 * 4 * 64 ** 2  # the blocks' matrices: 4 layers of 12 x 64 x 64


@pytest.mark.slow
@pytest.mark.parametrize("how, within", [
    (["--dtype=bfloat16"], 2e-3),  # blocks gathered in bf16, reduced in float32; one process autocasts: bf16's noise
    (["--fsdp_sync_once=True"], 1e-5),  # one reduce-scatter an iteration
    (["--compile=true"], 1e-4)])  # each block compiled before it is sharded, and the loss on its own
def test_fsdp_as_a_tuned_trainer_runs_it_equals_one_process(how, within, tmp_path, data_dir):
    args = [a for a in ARGS if not (a.startswith("--dtype") and "bfloat16" in how[0])] + ["--max_iters=6", *how]
    one, fsdp = tmp_path / "one", tmp_path / "fsdp"
    assert run_train(*[a for a in args if a not in ("--fsdp_sync_once=True", "--compile=true")], data=data_dir,
                     out=one).returncode == 0
    result = torchrun(data_dir, fsdp, "--fsdp=True", *args)
    assert result.returncode == 0, result.stderr[-3000:]
    assert [i for i, _ in steps(fsdp)] == list(range(6))
    for (_, a), (_, b) in zip(steps(one) + evals(one), steps(fsdp) + evals(fsdp), strict=True):
        assert abs(a - b) <= within, (a, b)


def fsdp_rank(rank, device="cpu"):
    """(one process's FSDP model, its AdamW, and ckpt.pt's optimizer state: one process's after a step, whole),
    this process being rank `rank` of two whose collectives do nothing. Call dist.destroy_process_group() after."""
    from torch.testing._internal.distributed.fake_pg import FakeStore
    config = GPTConfig(block_size=32, vocab_size=4096 if device == "cuda" else 64, n_layer=4, n_head=4,
                       n_embd=512 if device == "cuda" else 48)
    torch.manual_seed(0)
    one = GPT(config)
    opt = one.configure_optimizers(0.1, 1e-3, (0.9, 0.95), "cpu")
    for p in one.parameters():
        p.grad = torch.randn_like(p)
    opt.step()
    dist.init_process_group("fake", store=FakeStore(), rank=rank, world_size=2)
    model = GPT(config)
    parallel.wrap(model, device, fsdp=True)
    return model, model.configure_optimizers(0.1, 1e-3, (0.9, 0.95), device), opt.state_dict()


def shard(whole, p):
    """The part of whole, a tensor of p's shape, that this process holds of p."""
    part = p.__create_chunk_list__()[0]
    return whole[tuple(slice(o, o + n) for o, n in zip(part.offsets, part.sizes))]


@pytest.mark.parametrize("rank", [0, 1])
def test_an_fsdp_resume_hands_each_process_only_its_shard_of_the_optimizer_state(rank):
    """ckpt.pt's optimizer state is whole; load_state_dict moves what it is given to each parameter's device, so
    what reaches it must be this process's shards, not the whole moments (on a GPU each process then held the whole
    model's optimizer state at once: tests/test_cuda.py measures that). What it loads is that part of the whole."""
    model, opt, saved = fsdp_rank(rank)
    try:
        given, held = [], lambda t: (t.to_local() if hasattr(t, "to_local") else t).numel()
        load = opt.load_state_dict
        opt.load_state_dict = lambda state: given.append(state) or load(state)
        parallel.load_optimizer(opt, saved)
        params = [p for g in opt.param_groups for p in g["params"]]
        for i, p in enumerate(params):  # saved ids count parameters in group order, from 0
            for key in ("exp_avg", "exp_avg_sq"):
                handed, loaded = given[0]["state"][i][key], opt.state[p][key]
                assert held(handed) == held(loaded) == held(p) < p.numel()
                assert torch.equal(loaded.to_local(), shard(saved["state"][i][key], p))
            assert torch.equal(opt.state[p]["step"], saved["state"][i]["step"])
    finally:
        dist.destroy_process_group()


def test_an_fsdp_checkpoint_holds_the_tied_embedding_and_head_once():
    """gathered, as train.py saves: lm_head's weight is wte's, one tensor, as in one process's ckpt.pt (torch.save
    writes a storage once): gathered per key, FSDP's ckpt.pt held it twice (+154 MB at 124M)."""
    model, _, _ = fsdp_rank(0)
    try:
        state = parallel.gathered(model.state_dict(), keep=True)
        assert state["lm_head.weight"].data_ptr() == state["transformer.wte.weight"].data_ptr()
        assert len({t.data_ptr() for t in state.values()}) == len(state) - 1  # the rest: each its own
    finally:
        dist.destroy_process_group()


# ----------------------------------------------------------------------------- a run that survives

def torchrun_cmd(data, out, *args, launcher=("--standalone", "--nproc_per_node=2")):
    return [sys.executable, "-m", "torch.distributed.run", *launcher, "train.py", f"--data_dir={data}",
            f"--out_dir={out}", *TINY, *args]


def kill_a_worker_after_the_first_checkpoint(proc, out):
    """Once ckpt.pt appears: both workers paused, one killed (-9), the other let go on to meet its absence."""
    while not (out / "ckpt.pt").exists():
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.01)
    workers = subprocess.run(["pgrep", "-P", str(proc.pid)], capture_output=True, text=True).stdout.split()
    assert len(workers) == 2, workers
    for pid in workers:
        os.kill(int(pid), signal.SIGSTOP)
    os.kill(int(workers[1]), signal.SIGKILL)
    os.kill(int(workers[0]), signal.SIGCONT)
    return time.time()


@pytest.mark.slow
@pytest.mark.parametrize("how", [[], ["--fsdp=True"]])
def test_torchrun_restarts_a_killed_worker_and_the_run_goes_on(how, tmp_path, data_dir):
    """--max-restarts=1 and a worker killed after the first checkpoint: the restarted processes resume this run's
    ckpt.pt (not start over), and the run logs each iteration once, with the losses of one uninterrupted process."""
    args = [*ARGS, "--max_iters=150", "--eval_interval=20", "--lr_decay_iters=150", *how]
    straight, out = tmp_path / "straight", tmp_path / "out"
    assert run_train(*[a for a in args if a != "--fsdp=True"], data=data_dir, out=straight).returncode == 0
    proc = subprocess.Popen(torchrun_cmd(data_dir, out, *args, launcher=("--standalone", "--nproc_per_node=2",
                            "--max-restarts=1")), cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=dict(os.environ, OMP_NUM_THREADS="1"))
    kill_a_worker_after_the_first_checkpoint(proc, out)
    stdout, stderr = proc.communicate(timeout=300)
    assert proc.returncode == 0, stderr[-3000:]
    headers = [line for line in stdout.splitlines() if "parameters |" in line]
    assert len(headers) == 2 and "resume at iter 0" not in headers[1] and "resume at iter" in headers[1], headers
    assert [i for i, _ in steps(out)] == list(range(150))
    for (_, a), (_, b) in zip(steps(straight) + evals(straight), steps(out) + evals(out), strict=True):
        assert abs(a - b) <= 1e-5, (a, b)


@pytest.mark.slow
def test_a_workers_death_ends_the_others_in_one_line_each_and_keeps_the_checkpoint(tmp_path, data_dir):
    out = tmp_path / "out"
    proc = subprocess.Popen(torchrun_cmd(data_dir, out, *ARGS, "--max_iters=100000", "--eval_interval=20",
                                         "--lr_decay_iters=100000"), cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=dict(os.environ, OMP_NUM_THREADS="1"))
    killed = kill_a_worker_after_the_first_checkpoint(proc, out)
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode != 0 and time.time() - killed < 20
    assert not [line for line in stderr.splitlines() if line.startswith("[rank") or "train.py\", line" in line], stderr
    assert len([line for line in stderr.splitlines() if line.startswith("error: ")]) <= 1, stderr
    assert load_checkpoint(out / "ckpt.pt")["iter_num"] % 20 == 0  # a whole checkpoint, from an eval


@pytest.mark.slow
def test_two_machines_train_as_one_process_and_the_run_resumes_on_one(tmp_path, data_dir):
    """Two torchrun agents on 127.0.0.1 (--nnodes=2, c10d rendezvous), one process each, as two machines: the losses
    of one process with the same global batch; then the run resumes in one process and goes on as the straight run."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    straight, out = tmp_path / "straight", tmp_path / "out"
    assert run_train("--max_iters=9", *ARGS, data=data_dir, out=straight).returncode == 0
    nodes = [subprocess.Popen(torchrun_cmd(data_dir, out, "--max_iters=6", *ARGS, launcher=(
        "--nnodes=2", "--nproc_per_node=1", f"--node_rank={rank}", "--rdzv-backend=c10d", "--rdzv-id=two-machines",
        f"--rdzv-endpoint=127.0.0.1:{port}")), cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env=dict(os.environ, OMP_NUM_THREADS="1")) for rank in (0, 1)]
    for node in nodes:
        _, stderr = node.communicate(timeout=300)
        assert node.returncode == 0, stderr[-3000:]
    one = run_train("--max_iters=9", "--init_from=resume", *ARGS, data=data_dir, out=out)
    assert one.returncode == 0, one.stderr
    assert [i for i, _ in steps(out)] == list(range(9))
    for (_, a), (_, b) in zip(steps(straight) + evals(straight), steps(out) + evals(out), strict=True):
        assert abs(a - b) <= 1e-5, (a, b)
