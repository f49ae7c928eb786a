"""
train.py as a user runs it, on a tiny synthetic dataset with a tiny model: its errors, its outputs, exact
resume, crash-safe checkpoints, signals, and DDP on the CPU. In-process (run_script) where no real process
is needed; signals, kill -9 and torchrun run for real.
"""

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from checkpoint import load_checkpoint, save_checkpoint
from conftest import TIKTOKEN_DIR, run_script
from rundir import read_log

ROOT = Path(__file__).resolve().parent.parent
VOCAB = 16
TINY = ["--n_layer=1", "--n_head=2", "--n_embd=16", "--block_size=16", "--batch_size=4",
        "--gradient_accumulation_steps=2", "--eval_iters=2", "--log_interval=1", "--warmup_iters=2",
        "--lr_decay_iters=8", "--learning_rate=1e-2", "--min_lr=1e-3", "--device=cpu", "--dtype=float32",
        "--compile=false", "--num_threads=1"]


def make_dataset(folder, n_train=5600, n_val=800):
    """A learnable token stream (0, 1, ..., 15 repeated, 10% noise) as train.bin, val.bin and meta.json."""
    rng = np.random.default_rng(0)
    n = n_train + n_val
    tokens = np.where(rng.random(n) < 0.1, rng.integers(0, VOCAB, n), np.arange(n) % VOCAB)
    os.makedirs(folder, exist_ok=True)
    tokens[:n_train].astype("uint16").tofile(os.path.join(folder, "train.bin"))
    tokens[n_train:].astype("uint16").tofile(os.path.join(folder, "val.bin"))
    meta = {"tokenizer": "char", "vocab_size": VOCAB, "dtype": "uint16", "itos": [chr(0x100 + i) for i in range(VOCAB)]}
    with open(os.path.join(folder, "meta.json"), "w") as f:
        json.dump(meta, f)


def run_train(*args, data=None, out=None):
    where = ([f"--data_dir={data}"] if data else []) + ([f"--out_dir={out}"] if out else [])
    return run_script("train.py", *where, *TINY, *args)


def train_cmd(data, out, *args):
    return [sys.executable, "train.py", f"--data_dir={data}", f"--out_dir={out}", *TINY, *args]


def steps(out):
    return [(r["iter"], r["loss"]) for r in read_log(Path(out) / "log.jsonl") if "loss" in r]


def evals(out):
    return [(r["iter"], r["val_loss"]) for r in read_log(Path(out) / "log.jsonl") if "val_loss" in r]


def assert_one_line_error(result, code=2):
    assert result.returncode == code, result.stderr
    assert "Traceback" not in result.stderr, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    return lines[0]


# ----------------------------------------------------------------------------- bad input: one line, exit 2

@pytest.mark.parametrize("args, word", [
    (["--n_layr=2"], "n_layer"),  # did you mean
    (["--batch_size=many"], "batch_size"),
    (["--compile=maybe"], "compile"),
    (["--device=tpu"], "tpu"),
    (["--dtype=float16"], "float16"),  # on a CPU
    (["--optimizer=sgd"], "optimizer"),
    (["--n_embd=30", "--n_head=4"], "n_embd"),  # not divisible
    (["--eval_only=true"], "eval_only"),  # from scratch
    (["--init_from=no/such/folder"], "no/such/folder"),
    (["--init_from=resme"], "resume"),  # did you mean
    (["--fsdp=true", "--optimizer=muon"], "muon"),  # Muon needs whole matrices
    (["--dropout=1.5"], "dropout"),  # ranges torch would refuse with a traceback, or train on to nan
    (["--beta2=1"], "beta2"),
    (["--optimizer=muon", "--muon_momentum=2"], "muon_momentum"),
])
def test_bad_config_is_one_line_exit_2(args, word, tmp_path, data_dir):
    line = assert_one_line_error(run_train(*args, data=data_dir, out=tmp_path / "out"))
    assert word in line
    assert not (tmp_path / "out").exists()


def test_an_out_dir_that_cannot_be_made_is_one_line_before_any_work(tmp_path, data_dir):
    (tmp_path / "file").write_text("not a folder")
    for out in ("/proc/glassgpt", tmp_path / "file" / "out"):
        assert "out_dir" in assert_one_line_error(run_train(data=data_dir, out=out))
    assert run_train("--max_iters=0", data=data_dir, out=tmp_path / "a" / "b").returncode == 0
    assert not (tmp_path / "a").exists()  # made to check it, taken away: nothing trained, nothing left


def test_missing_dataset_and_missing_or_corrupt_checkpoint(tmp_path, data_dir):
    assert_one_line_error(run_train(data=tmp_path / "nowhere", out=tmp_path / "out"))
    assert_one_line_error(run_train("--init_from=resume", data=data_dir, out=tmp_path / "out"))
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "ckpt.pt").write_bytes(b"not a checkpoint")
    assert_one_line_error(run_train("--init_from=resume", data=data_dir, out=tmp_path / "bad"))


def test_plain_train_py_is_one_line_not_a_55_gb_download(tmp_path):
    """Bare train.py means GPT-2 on OpenWebText: it runs that dataset's prepare.py, which refuses the download."""
    if (ROOT / "data" / "openwebtext" / "train.bin").exists():
        pytest.skip("OpenWebText is prepared in this checkout: train.py would train GPT-2 on it")
    result = run_script("train.py", cwd=tmp_path)
    assert_one_line_error(result)
    assert result.stdout == "" and list(tmp_path.iterdir()) == []


def test_a_model_that_cannot_fit_is_refused_before_allocating(tmp_path, data_dir):
    t = time.time()
    line = assert_one_line_error(run_train("--n_layer=96", "--n_embd=12288", "--n_head=96", data=data_dir,
                                           out=tmp_path / "out"))
    assert "GiB" in line and time.time() - t < 20


def test_a_fork_that_cannot_fit_is_refused_before_allocating(tmp_path, data_dir, monkeypatch):
    """The memory check counts the parameters model.py builds: a fork's 40x MLP that a machine cannot hold is
    refused (one line, nothing written), though sizing.py's 4x formula says it would fit; the model as shipped
    trains there."""
    import device
    from sizing import training_bytes
    from test_sizing import mlp_of_width
    from model import GPTConfig
    shape = ["--n_layer=4", "--n_embd=256", "--n_head=4", "--block_size=16", "--batch_size=4"]
    config = GPTConfig(block_size=16, vocab_size=VOCAB, n_layer=4, n_head=4, n_embd=256)
    room = 2 * training_bytes(config, 4)  # twice what the model as shipped needs
    monkeypatch.setattr(device, "memory_available", lambda kind: room)
    assert run_train("--max_iters=1", *shape, data=data_dir, out=tmp_path / "as_shipped").returncode == 0
    mlp_of_width(monkeypatch, 40)
    assert "GiB" in assert_one_line_error(run_train("--max_iters=1", *shape, data=data_dir, out=tmp_path / "fork"))
    assert not (tmp_path / "fork").exists()


def test_every_config_file_is_valid():
    from configurator import configure
    import train
    defaults = {k: v for k, v in vars(train).items() if k in train.config_keys(vars(train))}
    for path in sorted((ROOT / "config").glob("*.py")):
        configure(defaults, [str(path)])  # raises on an unknown key or a wrong type


def test_help():
    result = run_script("train.py", "--help")
    assert result.returncode == 0 and "--out_dir=" in result.stdout and "--max_seconds=" in result.stdout


# ----------------------------------------------------------------------------- a run and what it leaves

def test_run_writes_checkpoints_log_meta_and_plot(tmp_path, data_dir):
    out = tmp_path / "out"
    result = run_train("--max_iters=8", "--eval_interval=4", data=data_dir, out=out)
    assert result.returncode == 0, result.stderr
    assert "step 8: train loss" in result.stdout  # nanoGPT's eval line
    for name in ("ckpt.pt", "best.pt", "log.jsonl", "meta.json"):
        assert (out / name).is_file(), name
    ckpt = torch.load(out / "ckpt.pt", weights_only=True)  # tensors and plain values only
    assert ckpt["iter_num"] == 8 and ckpt["model_args"]["n_layer"] == 1
    assert [i for i, _ in steps(out)] == list(range(8)) and [i for i, _ in evals(out)] == [0, 4, 8]
    assert evals(out)[-1][1] < evals(out)[0][1]  # it learns
    pytest.importorskip("matplotlib")
    assert (out / "loss.png").stat().st_size > 1000


def test_the_loop_waits_on_the_device_once_per_log_interval(tmp_path, data_dir, monkeypatch):
    """On a GPU, .item(), .tolist() and a tensor's truth value each make the host wait. 20 iterations more, with
    log_interval=10, cost 2 such waits more: the loss and gradient norm at each log, nothing at other iterations."""
    calls = []
    for name in ("item", "tolist", "__bool__", "__float__", "__int__"):
        def counted(self, *args, _orig=getattr(torch.Tensor, name), **kwargs):
            calls.append(1)
            return _orig(self, *args, **kwargs)
        monkeypatch.setattr(torch.Tensor, name, counted)
    waits = []
    for n in (10, 30):
        calls.clear()
        result = run_train(f"--max_iters={n}", "--log_interval=10", "--eval_interval=1000", data=data_dir,
                           out=tmp_path / str(n))
        assert result.returncode == 0, result.stderr
        waits.append(len(calls))
    assert waits[1] - waits[0] <= 2, waits


TIKTOKEN = TIKTOKEN_DIR


@pytest.mark.skipif(not TIKTOKEN.is_dir(), reason=f"no offline tiktoken files at {TIKTOKEN}")
def test_a_gpt2_bpe_model_from_scratch_has_a_padded_vocabulary_no_tool_samples(tmp_path, monkeypatch):
    """50304 ids, as nanoGPT (fast GPU kernels for the head); loaded by any tool, the model has the tokenizer's 50257
    again, with the same logits for them, so a padded id can be neither sampled nor decoded."""
    import tokenizer
    from checkpoint import load_model, model_from_checkpoint
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(TIKTOKEN))
    tokenizer.gpt2_encoding.cache_clear()
    tokenizer.prepare_text("To be, or not to be, that is the question. " * 300, "gpt2", tmp_path / "data")
    out = tmp_path / "out"
    assert run_train("--max_iters=2", data=tmp_path / "data", out=out).returncode == 0
    padded = model_from_checkpoint(load_checkpoint(out / "ckpt.pt")).eval()
    model, meta, _ = load_model(out_dir=str(out))
    assert (padded.config.vocab_size, model.config.vocab_size, model.lm_head.out_features) == (50304, 50257, 50257)
    idx = torch.tensor([tokenizer.load_tokenizer(meta)[0]("To be")])
    with torch.no_grad():
        assert torch.equal(model(idx)[0], padded(idx)[0][..., :50257])
    result = run_script("sample.py", f"--out_dir={out}", "--num_samples=2", "--max_new_tokens=20", "--top_k=None")
    assert result.returncode == 0, result.stderr
    tokenizer.gpt2_encoding.cache_clear()


def test_a_cpu_run_logs_no_mfu(tmp_path, data_dir):
    """MFU needs a peak that means the same in every run: a GPU's datasheet has one, a CPU's shared cores do not
    (bench.py measures it on purpose), so a CPU run prints and logs none."""
    result = run_train("--max_iters=3", data=data_dir, out=tmp_path / "out")
    assert result.returncode == 0 and "iter 2:" in result.stdout and ", mfu " not in result.stdout
    assert all(r.get("mfu") is None for r in read_log(tmp_path / "out" / "log.jsonl"))


def test_bench_race_reads_train_pys_lines(tmp_path, data_dir):
    """bench.py --mode=race times a run from its printed lines: a fork that changes them learns it here, at once."""
    import bench
    result = run_train("--max_iters=4", "--eval_interval=2", data=data_dir, out=tmp_path / "out")
    lines = result.stdout.splitlines()
    assert [int(m[1]) for m in map(bench.EVAL_LINE.match, lines) if m] == [0, 2, 4]
    assert [int(m[1]) for m in map(bench.ITER_LINE.match, lines) if m] == [0, 1, 2, 3]
    assert sum(bool(bench.TOKENS.search(line)) for line in lines) == 1


def test_eval_only_writes_nothing(tmp_path, data_dir):
    out = tmp_path / "out"
    assert run_train("--max_iters=2", data=data_dir, out=out).returncode == 0
    before = {p.name: p.stat().st_mtime_ns for p in out.iterdir()}
    result = run_train("--init_from=resume", "--eval_only=true", data=data_dir, out=out)
    assert result.returncode == 0 and "val loss" in result.stdout
    assert {p.name: p.stat().st_mtime_ns for p in out.iterdir()} == before


@pytest.mark.parametrize("optimizer", ["adamw", "muon"])
def test_resume_continues_exactly(optimizer, tmp_path, data_dir):
    """--max_seconds=0: 4 iterations then a resume to 8 give the losses of 8 straight, to the last bit."""
    args = ["--max_seconds=0", "--eval_interval=4", f"--optimizer={optimizer}", "--dropout=0.1"]
    straight, split = tmp_path / "straight", tmp_path / "split"
    assert run_train("--max_iters=8", *args, data=data_dir, out=straight).returncode == 0
    assert run_train("--max_iters=4", *args, data=data_dir, out=split).returncode == 0
    resumed = run_train("--max_iters=8", "--init_from=resume", *args, data=data_dir, out=split)
    assert resumed.returncode == 0, resumed.stderr
    assert steps(split) == steps(straight) and evals(split) == evals(straight)


def test_a_resume_from_the_run_alone_continues_it_as_configured(tmp_path, data_dir):
    """--init_from=resume --out_dir=DIR and nothing else: every key comes from the run's ckpt.pt (its data, batch,
    schedule, optimizer, machine keys), so 4 iterations, then 4 more by raising max_iters alone, log the losses of 8
    straight; the raised key is named once with both values."""
    args = ["--max_seconds=0", "--eval_interval=4", "--optimizer=muon", "--batch_size=3", "--learning_rate=2e-2",
            "--dropout=0.1", "--warmup_iters=1"]
    straight, split = tmp_path / "straight", tmp_path / "split"
    assert run_train("--max_iters=8", *args, data=data_dir, out=straight).returncode == 0
    assert run_train("--max_iters=4", *args, data=data_dir, out=split).returncode == 0
    resumed = run_script("train.py", "--init_from=resume", f"--out_dir={split}", "--max_iters=8")
    assert resumed.returncode == 0, resumed.stderr
    assert steps(split) == steps(straight) and evals(split) == evals(straight)
    named = [line for line in resumed.stdout.splitlines() if "max_iters" in line]
    assert len(named) == 1 and "8" in named[0] and "4" in named[0], resumed.stdout
    assert load_checkpoint(split / "ckpt.pt")["config"]["batch_size"] == 3  # and so the next resume


@pytest.mark.parametrize("limit", ["--max_iters=4", "--max_seconds=0.5"])
def test_nothing_to_train_names_the_limit_reached_and_its_flag_trains_on(limit, tmp_path, data_dir):
    """A finished run resumed with --init_from=resume --out_dir alone has nothing to train: the line names the one
    limit the run reached, and the flag it suggests, typed after the same two, trains on."""
    out, key = tmp_path / "out", limit.split("=")[0]
    time_budget = ["--max_iters=100000", "--lr_decay_iters=100000"] if "seconds" in key else ["--max_seconds=0"]
    assert run_train(limit, *time_budget, "--eval_interval=1000", data=data_dir, out=out).returncode == 0
    before = load_checkpoint(out / "ckpt.pt")["iter_num"]
    again = run_script("train.py", "--init_from=resume", f"--out_dir={out}")
    [line] = [line for line in again.stdout.splitlines() if "nothing to train" in line]
    other = "--max_seconds" if key == "--max_iters" else "--max_iters"
    assert again.returncode == 0 and limit[2:] in line and other[2:] not in line, line
    flag = re.search(key + r"=[\d.]+", line).group()
    assert run_script("train.py", "--init_from=resume", f"--out_dir={out}", flag).returncode == 0
    assert load_checkpoint(out / "ckpt.pt")["iter_num"] > before


def test_resume_takes_the_checkpoints_model_and_refuses_another(tmp_path, data_dir):
    out = tmp_path / "out"
    assert run_train("--max_iters=2", "--n_layer=2", data=data_dir, out=out).returncode == 0
    line = assert_one_line_error(run_train("--init_from=resume", "--n_layer=3", "--max_iters=4", data=data_dir, out=out))
    assert "n_layer" in line
    # model keys left unset come from the checkpoint (TINY sets n_layer=1: left out here)
    args = [a for a in TINY if not a.startswith("--n_layer")]
    result = run_script("train.py", f"--data_dir={data_dir}", f"--out_dir={out}", *args, "--init_from=resume",
                        "--max_iters=4")
    assert result.returncode == 0, result.stderr
    assert load_checkpoint(out / "ckpt.pt")["model_args"]["n_layer"] == 2


def test_a_new_run_moves_the_earlier_one_aside(tmp_path, data_dir):
    out = tmp_path / "out"
    assert run_train("--max_iters=2", data=data_dir, out=out).returncode == 0
    earlier = {name: (out / name).read_bytes() for name in ("ckpt.pt", "best.pt", "log.jsonl")}
    result = run_train("--max_iters=2", data=data_dir, out=out)
    assert result.returncode == 0 and "previous" in result.stdout
    [moved] = (out / "previous").iterdir()
    assert {name: (moved / name).read_bytes() for name in earlier} == earlier  # nothing lost
    assert load_checkpoint(out / "ckpt.pt")["iter_num"] == 2


def test_a_second_run_into_a_folder_in_use_is_refused(tmp_path, data_dir):
    """While a run holds out_dir (its lock, taken here as a run would), another run there is one line, exit 2,
    and moves nothing aside; it is refused before it reads any data (here: a dataset that is not there)."""
    import fcntl
    out = tmp_path / "out"
    assert run_train("--max_iters=2", data=data_dir, out=out).returncode == 0
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    fd = os.open(out, os.O_RDONLY)
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    try:
        assert_one_line_error(run_train("--max_iters=2", data=data_dir, out=out))
        assert str(out) in assert_one_line_error(run_train("--max_iters=2", data=tmp_path / "nowhere", out=out))
    finally:
        os.close(fd)
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before


def test_a_resume_after_a_kill_keeps_the_log_up_to_its_checkpoint(tmp_path, data_dir):
    """A kill -9 after the last save leaves log records past ckpt.pt's iteration: the resume, which trains those
    iterations again, drops them, so each iteration is logged once."""
    out = tmp_path / "out"
    assert run_train("--max_iters=4", "--eval_interval=4", "--max_seconds=0", data=data_dir, out=out).returncode == 0
    with open(out / "log.jsonl", "a") as f:  # what a killed run logged after its last checkpoint
        f.write('{"iter": 4, "loss": 9.0}\n{"iter": 5, "loss": 9.0}\n')
    assert run_train("--max_iters=8", "--eval_interval=4", "--max_seconds=0", "--init_from=resume",
                     data=data_dir, out=out).returncode == 0
    assert [i for i, _ in steps(out)] == list(range(8)) and 9.0 not in [v for _, v in steps(out)]
    assert [i for i, _ in evals(out)] == [0, 4, 8]


def test_a_time_budget_ends_the_run_with_the_lr_decayed(tmp_path, data_dir):
    out = tmp_path / "out"
    result = run_train("--max_iters=100000", "--lr_decay_iters=100000", "--eval_interval=100000",
                       "--max_seconds=1.5", data=data_dir, out=out)
    assert result.returncode == 0, result.stderr
    ckpt = load_checkpoint(out / "ckpt.pt")
    assert 1.5 <= ckpt["trained_seconds"] < 3 and ckpt["iter_num"] > 10
    last = [r for r in read_log(out / "log.jsonl") if "loss" in r][-1]
    assert last["lr"] < 2e-3  # near min_lr=1e-3, from the peak 1e-2


@pytest.mark.parametrize("how", ["stop", "failure"])
def test_a_stop_or_failure_while_compiling_leaves_no_half_written_cache(how, tmp_path, data_dir, monkeypatch):
    """Ctrl-C reaches the C++ compiler too: a 0-byte .so it left in inductor's cache broke every later compiled run.
    What the interrupted compile wrote is taken away, what was there before stays; a failure is one line."""
    cache = tmp_path / "inductor"
    (cache / "old").mkdir(parents=True)
    (cache / "old" / "kept.so").write_bytes(b"\x7fELF")
    os.utime(cache / "old" / "kept.so", (time.time() - 60,) * 2)  # written by a compile a minute ago
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(cache))

    def compiled(*args, **kwargs):  # what a compile cut short does: a file half written, then the stop or the error
        (cache / "new").mkdir(exist_ok=True)
        (cache / "new" / "half.so").write_bytes(b"")
        raise SystemExit(130) if how == "stop" else RuntimeError("no C++ compiler")
    monkeypatch.setattr(torch.nn.Module, "compile", lambda self: setattr(self, "_compiled_call_impl", compiled))
    result = run_train("--compile=true", "--max_iters=2", data=data_dir, out=tmp_path / "out")
    if how == "stop":
        assert result.returncode == 130
    else:
        assert "--compile=false" in assert_one_line_error(result)
    assert not (cache / "new" / "half.so").exists() and (cache / "old" / "kept.so").exists()


@pytest.mark.slow
def test_compiling_is_not_training(tmp_path, data_dir):
    """--compile=true under a 2-second budget: compiling takes longer than that, yet the budget and the lr schedule
    go to training steps, and the log says how long compiling took. A process of its own and an empty inductor cache:
    in this one, torch would find the graphs an earlier test compiled."""
    out = tmp_path / "out"
    result = subprocess.run(train_cmd(data_dir, out, "--compile=true", "--max_iters=100000", "--lr_decay_iters=100000",
                                      "--eval_interval=100000", "--max_seconds=2"), cwd=ROOT, capture_output=True,
                            text=True, env={**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor")})
    assert result.returncode == 0, result.stderr
    compiled = float(result.stdout.split("compiled in ")[1].split("s")[0])
    ckpt = load_checkpoint(out / "ckpt.pt")
    assert compiled > 2 and 2 <= ckpt["trained_seconds"] < 4 and ckpt["iter_num"] > 20


def test_a_run_that_overfits_says_so_once(tmp_path):
    """Random tokens: 300 to memorise, others to validate on; the val loss turns up early and the run says so, once."""
    rng, data = np.random.default_rng(0), tmp_path / "data"
    make_dataset(data)
    rng.integers(0, VOCAB, 300).astype("uint16").tofile(data / "train.bin")
    rng.integers(0, VOCAB, 800).astype("uint16").tofile(data / "val.bin")
    result = run_train("--max_iters=60", "--eval_interval=4", "--n_embd=32", "--max_seconds=0", data=data,
                       out=tmp_path / "out")
    assert result.returncode == 0 and result.stdout.count("overfitting") == 1, result.stdout


def test_lr_schedule():
    from types import SimpleNamespace
    from train import get_lr, progress
    c = SimpleNamespace(decay_lr=True, learning_rate=1.0, min_lr=0.1, warmup_iters=10, lr_decay_iters=110,
                        max_iters=600000, max_seconds=0.0)
    lrs = [get_lr(i, progress(i, 0.0, c), c) for i in range(200)]
    assert lrs[0] < lrs[9] < 1.0 and lrs[10] == pytest.approx(1.0)
    assert all(a >= b for a, b in zip(lrs[10:], lrs[11:])) and lrs[110] == pytest.approx(0.1) == lrs[199]
    c.max_seconds = 100.0  # half the budget spent: half-way down the cosine at least
    assert get_lr(20, progress(20, 50.0, c), c) == pytest.approx(0.55)
    c.max_seconds, c.lr_decay_iters, c.max_iters = 0.0, 0, 110  # 0: the decay follows max_iters
    assert [get_lr(i, progress(i, 0.0, c), c) for i in range(200)] == lrs


@pytest.mark.parametrize("limit", ["--max_iters", "--max_seconds"])
def test_a_finished_run_trained_on_keeps_its_lr_from_climbing_back(limit, tmp_path, data_dir):
    """Raising the limit of a run whose lr has decayed trains on at min_lr, as nanoGPT past lr_decay_iters: the
    schedule never goes back (it climbed to mid-cosine, and the val loss rose with it)."""
    out = tmp_path / "out"
    args = ["--lr_decay_iters=0", "--eval_interval=1000"] + (
        ["--max_seconds=0", "--max_iters=8"] if limit == "--max_iters" else ["--max_seconds=0.5", "--max_iters=100000"])
    assert run_train(*args, data=data_dir, out=out).returncode == 0
    done = len(steps(out))
    more = run_script("train.py", "--init_from=resume", f"--out_dir={out}",
                      "--max_iters=16" if limit == "--max_iters" else "--max_seconds=1")
    assert more.returncode == 0 and len(steps(out)) > done, more.stderr
    lrs = [r["lr"] for r in read_log(out / "log.jsonl") if "loss" in r]
    assert lrs[done - 1] > 1e-3 and all(lr == pytest.approx(1e-3) for lr in lrs[done:])  # TINY's min_lr, reached


def test_resume_of_a_nanogpt_checkpoint_keeps_its_file(tmp_path, data_dir):
    """nanoGPT's ckpt.pt (no norm, no rng or sampler) trains on here; its file is moved aside, not overwritten."""
    out = tmp_path / "out"
    assert run_train("--max_iters=2", "--bias=false", "--activation=gelu", data=data_dir, out=out).returncode == 0
    ckpt = load_checkpoint(out / "ckpt.pt")
    args = {k: ckpt["model_args"][k] for k in ("n_layer", "n_head", "n_embd", "block_size", "bias", "vocab_size")}
    nanogpt = {"model": {"_orig_mod." + k: v for k, v in ckpt["model"].items()}, "optimizer": ckpt["optimizer"],
               "model_args": dict(args, dropout=0.0), "iter_num": 2, "best_val_loss": ckpt["best_val_loss"],
               "config": {"batch_size": 4}}
    for name in os.listdir(out):
        os.remove(out / name)
    save_checkpoint(nanogpt, out / "ckpt.pt")
    original = (out / "ckpt.pt").read_bytes()
    result = run_train("--init_from=resume", "--max_iters=4", "--activation=gelu", data=data_dir, out=out)
    assert result.returncode == 0, result.stderr
    assert [(p / "ckpt.pt").read_bytes() for p in (out / "previous").iterdir()] == [original]
    assert load_checkpoint(out / "ckpt.pt")["iter_num"] == 4


# ----------------------------------------------------------------------------- stops, kills and crashes

def start(cmd, env=None):
    return subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)


def wait_for(proc, text, timeout=120):
    """Read proc's stdout until a line holds text; returns the lines read."""
    lines, end = [], time.time() + timeout
    while time.time() < end:
        line = proc.stdout.readline()
        if not line:
            break
        lines.append(line)
        if text in line:
            return lines
    raise AssertionError(f"no {text!r} in {lines}")


@pytest.mark.parametrize("signum", [signal.SIGINT, pytest.param(signal.SIGTERM, marks=pytest.mark.slow)])
def test_a_signal_mid_run_saves_the_last_complete_iteration(signum, tmp_path, data_dir):
    """The stop is taken between iterations: ckpt.pt holds the state after the last logged one, and a resume from it
    (dropout on: the random state counts too) logs the losses of a run never stopped."""
    out = tmp_path / "out"
    args = ["--eval_interval=1000000", "--max_seconds=0", "--dropout=0.1"]
    proc = start(train_cmd(data_dir, out, "--max_iters=1000000", *args))
    wait_for(proc, "iter 5:")
    t = time.time()
    proc.send_signal(signum)
    stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 128 + signum, stderr
    assert time.time() - t < 10 and "Traceback" not in stderr
    assert signal.Signals(signum).name in stderr  # acknowledged
    ckpt = load_checkpoint(out / "ckpt.pt")
    logged = [i for i, _ in steps(out)]
    assert ckpt["iter_num"] == logged[-1] + 1  # the state after the last complete (logged) iteration
    if signum == signal.SIGINT:
        n = f"--max_iters={ckpt['iter_num'] + 3}"
        assert run_script("train.py", "--init_from=resume", f"--out_dir={out}", n).returncode == 0
        assert run_train(n, *args, data=data_dir, out=tmp_path / "straight").returncode == 0
        assert steps(out) == steps(tmp_path / "straight")


def test_a_stop_during_a_long_eval_is_honoured_within_seconds(tmp_path, data_dir):
    out = tmp_path / "out"
    assert run_train("--max_iters=2", data=data_dir, out=out).returncode == 0
    proc = start(train_cmd(data_dir, out, "--init_from=resume", "--max_iters=100", "--eval_interval=3",
                           "--eval_iters=1000000"))
    wait_for(proc, "iter 2:")
    time.sleep(1)  # inside the eval at iter 3
    t = time.time()
    proc.send_signal(signal.SIGINT)
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130 and time.time() - t < 10, stderr
    assert load_checkpoint(out / "ckpt.pt")["iter_num"] == 3
    assert [i for i, _ in evals(out)] == [0, 2]  # the eval a stop cut short is not logged


@pytest.mark.slow
def test_ctrl_c_twice_quits_at_once_leaving_the_last_checkpoint(tmp_path, data_dir):
    """A stop waits for the iteration under way to end; the same signal again (after 0.5 s) does not: the run ends
    at once, 130, and ckpt.pt stays as last saved. Here an iteration of 20,000 micro-batches, a minute or so."""
    out = tmp_path / "out"
    assert run_train("--max_iters=2", data=data_dir, out=out).returncode == 0
    saved = (out / "ckpt.pt").read_bytes()
    proc = start(train_cmd(data_dir, out, "--init_from=resume", "--max_iters=100",
                           "--gradient_accumulation_steps=20000"))
    wait_for(proc, "resume at iter 2")
    time.sleep(1)  # in the long iteration
    proc.send_signal(signal.SIGINT)
    time.sleep(1)
    t = time.time()
    proc.send_signal(signal.SIGINT)
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130 and time.time() - t < 10, stderr
    assert (out / "ckpt.pt").read_bytes() == saved


def test_a_stop_before_the_first_iteration_saves_nothing(tmp_path, data_dir):
    out = tmp_path / "out"
    assert run_train("--max_iters=2", data=data_dir, out=out).returncode == 0
    before = {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()}
    proc = start(train_cmd(data_dir, out, "--max_iters=10", "--eval_iters=1000000"))  # a new run, stopped in its first eval
    wait_for(proc, "parameters")
    proc.send_signal(signal.SIGTERM)
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 143 and "Traceback" not in stderr, stderr
    assert {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()} == before  # the earlier run untouched
    assert not (out / "previous").exists()


@pytest.mark.slow
def test_kill_9_at_any_moment_leaves_a_loadable_checkpoint(tmp_path, data_dir):
    out = tmp_path / "out"
    assert run_train("--max_iters=2", data=data_dir, out=out).returncode == 0
    for delay in (0.5, 1.0, 1.5, 2.0, 2.5, 3.0, 3.5, 4.0):
        proc = start(train_cmd(data_dir, out, "--init_from=resume", "--max_iters=1000000", "--eval_interval=1",
                               "--lr_decay_iters=1000000"))
        time.sleep(delay + 2.0)  # start-up, then saving at every iteration
        proc.kill()
        proc.communicate()
        assert load_checkpoint(out / "ckpt.pt")["iter_num"] >= 2


def test_a_closed_stdout_costs_the_run_nothing(tmp_path, data_dir):
    """python train.py ... | head -3: once the reader has gone, the run trains on to its end and saves as ever."""
    out = tmp_path / "out"
    proc = start(train_cmd(data_dir, out, "--max_iters=30", "--eval_interval=10", "--max_seconds=0"))
    wait_for(proc, "iter 1:")
    proc.stdout.close()  # the reader goes
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 0 and "Traceback" not in stderr, stderr
    assert load_checkpoint(out / "ckpt.pt")["iter_num"] == 30 and [i for i, _ in steps(out)] == list(range(30))


def test_a_save_cut_short_keeps_the_old_file(tmp_path, monkeypatch):
    path = tmp_path / "ckpt.pt"
    save_checkpoint({"model": {}, "model_args": {}, "iter_num": 1}, path)

    def broken(obj, f, *a, **k):
        f.write(b"half")
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(torch, "save", broken)
    with pytest.raises(Exception):
        save_checkpoint({"model": {}, "model_args": {}, "iter_num": 2}, path)
    monkeypatch.undo()
    assert load_checkpoint(path)["iter_num"] == 1 and os.listdir(tmp_path) == ["ckpt.pt"]


# ----------------------------------------------------------------------------- many processes (torchrun)

def torchrun(data, out, *args):
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", "train.py",
           f"--data_dir={data}", f"--out_dir={out}", *TINY, *args]
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300,
                          env=dict(os.environ, OMP_NUM_THREADS="1"))


@pytest.mark.slow
@pytest.mark.parametrize("optimizer", ["adamw", "muon"])
def test_two_processes_equal_one_with_the_same_global_batch(optimizer, tmp_path, data_dir):
    """torchrun with 2 CPU processes (gloo), 2 micro-batches each, against 1 process with 4: the same losses,
    up to float summation order."""
    args = ["--gradient_accumulation_steps=4", "--max_iters=4", "--eval_interval=2", "--eval_iters=4",
            f"--optimizer={optimizer}"]
    one, two = tmp_path / "one", tmp_path / "two"
    assert run_train(*args, data=data_dir, out=one).returncode == 0
    ddp = torchrun(data_dir, two, *args)
    assert ddp.returncode == 0, ddp.stderr[-3000:]
    assert ddp.stdout.count("parameters") == 1  # only rank 0 prints
    assert [i for i, _ in steps(two)] == [i for i, _ in steps(one)]
    for (_, a), (_, b) in zip(steps(one) + evals(one), steps(two) + evals(two)):
        assert b == pytest.approx(a, rel=1e-4)


@pytest.mark.slow
def test_a_config_error_under_torchrun_is_one_line_every_time(tmp_path):
    """Rank 0 speaks; the others, quiet, must not end first: torchrun would end rank 0 before it had spoken."""
    for _ in range(3):
        result = torchrun(tmp_path, tmp_path / "out", "--n_layr=2")
        errors = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
        assert len(errors) == 1 and "n_layer" in errors[0], result.stderr
        assert not [line for line in result.stderr.splitlines() if "train.py" in line and "File" in line]
