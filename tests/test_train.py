"""
train.py, run as a user runs it (a subprocess) on tiny synthetic datasets with a tiny model: its errors,
its outputs, exact resume, crash-safe checkpoints, signals, divergence, and DDP on the CPU.
"""

import hashlib
import json
import os
import pickle
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import torch

import train
from checkpoint import load_checkpoint, model_from_checkpoint, save_checkpoint
from configurator import ConfigError, config_keys, configure
from conftest import processes_naming, run_script
from model import GPTConfig

ROOT = Path(__file__).resolve().parent.parent
VOCAB = 16
# a 1-layer, 16-wide model on 16-token windows: each run is a second or two of startup and a blink of training
TINY = ["--n_layer=1", "--n_head=2", "--n_embd=16", "--block_size=16", "--batch_size=4",
        "--gradient_accumulation_steps=2", "--eval_iters=2", "--log_interval=1", "--warmup_iters=2",
        "--lr_decay_iters=8", "--learning_rate=1e-2", "--min_lr=1e-3", "--device=cpu", "--dtype=float32",
        "--compile=false", "--num_threads=1"]  # 1 thread: the CPU is shared, and spinning threads crawl


def make_dataset(folder, n_train=5600, n_val=800, dtype="uint16", offset=0, seed=0):
    """A learnable token stream (0, 1, ..., 15 repeated, 10% noise) as train.bin, val.bin and meta.json."""
    rng = np.random.default_rng(seed)
    n = n_train + n_val
    tokens = np.where(rng.random(n) < 0.1, rng.integers(0, VOCAB, n), np.arange(n) % VOCAB) + offset
    os.makedirs(folder, exist_ok=True)
    tokens[:n_train].astype(dtype).tofile(os.path.join(folder, "train.bin"))
    tokens[n_train:].astype(dtype).tofile(os.path.join(folder, "val.bin"))
    meta = {"tokenizer": "char", "vocab_size": VOCAB + offset, "dtype": dtype,
            "itos": [chr(0x100 + i) for i in range(VOCAB + offset)]}
    with open(os.path.join(folder, "meta.json"), "w") as f:
        json.dump(meta, f)
    return tokens


@pytest.fixture
def data_dir(tmp_path):
    make_dataset(tmp_path / "data")
    return tmp_path / "data"


def run_train(*args, data=None, out=None):
    """python train.py with TINY and args, run in this process; what needs a real one runs train_cmd."""
    where = [f"--data_dir={data}"] if data else []
    where += [f"--out_dir={out}"] if out else []
    return run_script("train.py", *where, *TINY, *args)


def records(out):
    with open(Path(out) / "log.jsonl") as f:
        return [json.loads(line) for line in f]


def losses(out):
    """(iter, loss) of each logged iteration and (iter, train_loss, val_loss) of each eval."""
    recs = records(out)
    return ([(r["iter"], r["loss"]) for r in recs if "loss" in r],
            [(r["iter"], r["train_loss"], r["val_loss"]) for r in recs if "val_loss" in r])


def assert_one_line_error(result, code, *words):
    assert result.returncode == code, result.stderr
    assert "Traceback" not in result.stderr, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    for word in words:
        assert word in lines[0], lines[0]


def digest(path):
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


# ----------------------------------------------------------------------------- configuration and data errors

@pytest.mark.parametrize("args, words", [
    (["--n_layr=2"], ["n_layr", "command line", "n_layer"]),
    (["--batch_size=many"], ["batch_size", "int"]),
    (["--compile=maybe"], ["compile"]),
    (["--device=tpu"], ["device", "tpu"]),
    (["--init_from=nonsense"], ["init_from", "nonsense"]),
    (["--init_from=gpt2-xxl"], ["init_from", "gpt2-xl", "gpt2-xxl"]),  # not a GPT-2 size: no download tried
    (["--dtype=float16"], ["float16", "float32"]),  # on a CPU: ~10x slower, so refused
    (["--eval_only=true"], ["eval_only", "init_from=resume"]),  # a random model's loss is not what was meant
    (["--max_seconds=-1"], ["max_seconds", "negative"]),
    # these reached the optimizers, whose ValueError was a traceback
    (["--learning_rate=-1"], ["learning_rate", "negative"]),
    (["--nproc=2", "--gradient_accumulation_steps=3"], ["divisible by the number of processes (2)",
                                                        "e.g. --gradient_accumulation_steps=4"]),
    (["--optimizer=muon", "--muon_lr=-1"], ["muon_lr", "negative"]),
    (["--beta2=1.5"], ["beta2", "[0, 1)", "1.5"]),
    (["--warmup_iters=-1"], ["warmup_iters", "negative"]),  # was taken in silence
    # a typo or nccl on a CPU: 42 lines of two processes' tracebacks under --nproc=2, in silence with one
    (["--backend=foo"], ["backend must be auto, gloo or nccl", "'foo'"]),
    (["--backend=nccl", "--nproc=2"], ["nccl on CUDA only", "on cpu"]),
    (["config/tiny.py", "n_layer=3"], ["config file n_layer=3", "(did you mean --n_layer=3?)"]),
])
def test_bad_config_is_one_line_exit_2(args, words, tmp_path):
    assert_one_line_error(run_train(*args, out=tmp_path / "out"), 2, *words)


def test_unknown_key_in_config_file(tmp_path):
    cfg = tmp_path / "mine.py"
    cfg.write_text("batch_size = 4\nbatch_sise = 8\n")
    result = subprocess.run([sys.executable, "train.py", str(cfg)], cwd=ROOT, capture_output=True, text=True)
    assert_one_line_error(result, 2, "batch_sise", "mine.py", "batch_size")


def test_data_errors(tmp_path):
    # too little data for one window of block_size + 1 tokens
    make_dataset(tmp_path / "small", n_train=10, n_val=800)
    assert_one_line_error(run_train(data=tmp_path / "small", out=tmp_path / "o"), 2, "train.bin", "block_size=16",
                          "(needs at least 17): a smaller --block_size")
    make_dataset(tmp_path / "small_val", n_train=800, n_val=10)  # and what to change for a val split that short
    assert_one_line_error(run_train(data=tmp_path / "small_val", out=tmp_path / "o"), 2, "val.bin has 10 tokens",
                          "a smaller --block_size or a larger --val_fraction preparing it (data/text/prepare.py)")
    # a folder without meta.json (and no prepare.py to make one)
    (tmp_path / "empty").mkdir()
    assert_one_line_error(run_train(data=tmp_path / "empty", out=tmp_path / "o"), 2, "meta.json")


def test_missing_bins_run_prepare_py(tmp_path):
    """No bins but a prepare.py: train.py runs it first (python train.py config/tiny.py is one command)."""
    folder = tmp_path / "ds"
    folder.mkdir()
    (folder / "prepare.py").write_text(  # writes into the current directory: train.py runs it in its folder
        "import json, numpy as np\n"
        "t = np.arange(3000) % 16\n"
        "t[:2700].astype('uint16').tofile('train.bin'); t[2700:].astype('uint16').tofile('val.bin')\n"
        "json.dump({'tokenizer': 'char', 'vocab_size': 16, 'itos': [chr(256 + i) for i in range(16)]},"
        " open('meta.json', 'w'))\n")
    result = run_train("--max_iters=1", data=folder, out=tmp_path / "out")
    assert result.returncode == 0, result.stderr
    assert (folder / "train.bin").exists() and "prepare.py" in result.stdout
    # a prepare.py that fails is a one-line error
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "prepare.py").write_text("raise SystemExit(3)\n")
    assert_one_line_error(run_train(data=bad, out=tmp_path / "o2"), 2, "prepare.py", "exit code 3")


def test_resume_errors(tmp_path, data_dir):
    out = tmp_path / "out"
    assert_one_line_error(run_train("--init_from=resume", data=data_dir, out=out), 2, "no checkpoint")
    out.mkdir()
    (out / "ckpt.pt").write_bytes(b"not a checkpoint")
    assert_one_line_error(run_train("--init_from=resume", data=data_dir, out=out), 2, "cannot read checkpoint")
    # a checkpoint whose model has another context length than the config asks for
    torch.save({"model": {}, "model_args": {"block_size": 32}, "optimizer": {}, "iter_num": 1, "best_val_loss": 9.0,
                "rng": {}, "sampler": {}}, out / "ckpt.pt")
    assert_one_line_error(run_train("--init_from=resume", data=data_dir, out=out), 2, "block_size=16", "32")
    (out / "ckpt.pt").write_bytes(b"")  # a zero-byte file: torch's error has no message at all
    assert_one_line_error(run_train("--init_from=resume", data=data_dir, out=out), 2, "cannot read checkpoint")
    (out / "best.pt").write_bytes(b"")  # the run's other checkpoint is named, should it serve instead
    assert_one_line_error(run_train("--init_from=resume", data=data_dir, out=out), 2, "cannot read checkpoint",
                          f"; {out / 'best.pt'} is there")
    (out / "ckpt.pt").unlink()
    assert_one_line_error(run_train("--init_from=resume", data=data_dir, out=out), 2,
                          f"no checkpoint at {out / 'ckpt.pt'}; {out / 'best.pt'} is there")


def test_resume_refuses_another_tokenizer(tmp_path, data_dir):
    """Resuming on a dataset whose ids mean other characters would silently train on garbage."""
    out = tmp_path / "out"
    assert run_train("--max_iters=2", "--eval_interval=2", data=data_dir, out=out).returncode == 0
    meta = json.loads((data_dir / "meta.json").read_text())
    meta["itos"] = meta["itos"][::-1]  # same size, other characters
    (data_dir / "meta.json").write_text(json.dumps(meta))
    before = (out / "meta.json").read_text()
    assert_one_line_error(run_train("--init_from=resume", "--max_iters=4", data=data_dir, out=out), 2,
                          f"resume: {data_dir / 'meta.json'} (char", "not the tokenizer this model was trained with")
    assert (out / "meta.json").read_text() == before  # the model's own tokenizer is left alone
    (data_dir / "meta.json").unlink()  # nanoGPT's dataset: the error named a meta.json that was not there
    with open(data_dir / "meta.pkl", "wb") as f:
        pickle.dump({"vocab_size": len(meta["itos"]), "itos": dict(enumerate(meta["itos"])),
                     "stoi": {c: i for i, c in enumerate(meta["itos"])}}, f)
    assert_one_line_error(run_train("--init_from=resume", "--max_iters=4", data=data_dir, out=out), 2,
                          f"resume: {data_dir / 'meta.pkl'} (char", "not the tokenizer this model was trained with")


def test_resume_model_keys_come_from_the_checkpoint(tmp_path, data_dir):
    """--init_from=resume trains the checkpoint's model: a model key set to another value is an error naming
    it and both values; keys left out take the checkpoint's values; dropout may change."""
    out = tmp_path / "out"
    assert run_train("--max_iters=2", "--eval_interval=2", data=data_dir, out=out).returncode == 0
    before = digest(out / "ckpt.pt")
    assert_one_line_error(run_train("--init_from=resume", "--max_iters=4", "--n_layer=2", "--position=rope",
                                    data=data_dir, out=out), 2,
                          "n_layer=2 (on the command line)", "has n_layer=1", "position=rope", "position=learned")
    assert digest(out / "ckpt.pt") == before
    # no model keys at all (nor block_size: the default 1024 would not fit this checkpoint): the checkpoint's
    result = run_script("train.py", f"--data_dir={data_dir}", f"--out_dir={out}", "--init_from=resume",
                        "--max_iters=4", "--eval_interval=2", "--eval_iters=2", "--batch_size=4", "--dropout=0.1",
                        "--gradient_accumulation_steps=2", "--device=cpu", "--compile=false", "--num_threads=1")
    assert result.returncode == 0, result.stderr
    ckpt = load_checkpoint(out / "ckpt.pt")
    assert ckpt["iter_num"] == 4 and ckpt["model_args"]["n_layer"] == 1 and ckpt["model_args"]["block_size"] == 16
    assert ckpt["model_args"]["dropout"] == 0.1 and ckpt["config"]["n_embd"] == 16


def test_a_max_iters_before_the_lr_decays_is_noted(tmp_path, data_dir):
    """config/tiny.py --max_iters=200 trained at nearly its peak lr to the end, in silence: its decay runs over
    lr_decay_iters=5000 or 180 s (a fresh user's pass). The first line now says what the last lr will be and
    the key that decays it within the run; a run whose decay ends by max_iters says nothing of the sort."""
    import train
    config = {**train.config_keys(vars(train)), "max_iters": 200, "lr_decay_iters": 5000, "warmup_iters": 50,
              "learning_rate": 3e-3, "min_lr": 3e-4, "max_seconds": 180.0}
    assert train.undecayed(config) == (
        f"note: max_iters=200 ends the run before lr_decay_iters=5000: its last lr is "
        f"{train.get_lr(199, 3e-3, 50, 5000, 3e-4):.2e}, not min_lr 3.00e-04 (unless its max_seconds=180 budget "
        "runs out first); --lr_decay_iters=200 decays it within the run")
    for fine in ({"lr_decay_iters": 200}, {"decay_lr": False}, {"max_iters": 4990}):  # decayed, no decay, nearly
        assert train.undecayed({**config, **fine}) is None, fine
    assert train.undecayed(config, trained=180.0) is None  # a resumed run whose budget is spent: at min_lr already
    out = tmp_path / "out"
    short = run_train("--max_iters=2", "--eval_interval=2", data=data_dir, out=out)
    assert short.returncode == 0 and short.stderr.startswith("note: max_iters=2 ends the run before "
                                                             "lr_decay_iters=8: its last lr is "), short.stderr
    assert "(unless" not in short.stderr  # no time budget: the lr is certain
    whole = run_train("--max_iters=8", "--eval_interval=8", data=data_dir, out=tmp_path / "whole")
    assert whole.returncode == 0 and "note:" not in whole.stderr, whole.stderr


def test_the_activation_switch_trains_and_resumes(tmp_path, data_dir):
    """activation is a model key as norm is: README names the exact GELU nanoGPT's models use (activation="gelu"),
    sizing.py took --activation, but train.py said `unknown config key 'activation' (did you mean attention?)`
    (a fresh user's pass). The run trains the erf GELU, saves the switch, and a resume keeps it or refuses another."""
    out = tmp_path / "out"
    assert run_train("--max_iters=2", "--eval_interval=2", "--activation=gelu", data=data_dir, out=out).returncode == 0
    ckpt = load_checkpoint(out / "ckpt.pt")
    assert ckpt["model_args"]["activation"] == "gelu" and ckpt["config"]["activation"] == "gelu"
    assert model_from_checkpoint(ckpt).transformer.h[0].mlp.exact
    before = digest(out / "ckpt.pt")
    assert_one_line_error(run_train("--init_from=resume", "--max_iters=4", "--activation=gelu_tanh", data=data_dir,
                                    out=out), 2, "activation=gelu_tanh (on the command line)", "has activation=gelu")
    assert digest(out / "ckpt.pt") == before
    assert run_train("--init_from=resume", "--max_iters=4", data=data_dir, out=out).returncode == 0
    assert load_checkpoint(out / "ckpt.pt")["model_args"]["activation"] == "gelu"
    assert_one_line_error(run_train("--activation=relu", data=data_dir, out=tmp_path / "relu"), 2,
                          "activation='relu': must be one of gelu_tanh, gelu")


def test_resume_clash_from_a_config_file_gives_a_hint_that_can_be_followed(tmp_path, data_dir):
    """A model key set in a config file cannot be "left out" without editing the file: the one-line error says
    which --key=value to add (the command line overrides the file), what to drop, or to use another out_dir;
    doing what it says resumes."""
    out = tmp_path / "out"
    assert run_train("--max_iters=2", "--eval_interval=2", data=data_dir, out=out).returncode == 0
    config = tmp_path / "six.py"
    config.write_text("n_layer = 6\nn_embd = 16\n")
    base = [str(config), f"--data_dir={data_dir}", f"--out_dir={out}", "--init_from=resume", "--max_iters=4",
            "--eval_interval=2", "--eval_iters=2", "--batch_size=4", "--device=cpu", "--compile=false", "--num_threads=1"]
    result = run_script("train.py", *base, "--n_head=4")
    assert_one_line_error(result, 2, f"n_layer=6 (in {config}) but {out}/ckpt.pt has n_layer=1",
                          "n_head=4 (on the command line)",
                          "(to use the model's, add --n_layer=1 to the command line (it overrides the file) and drop "
                          "--n_head from it, or train this config from scratch into another --out_dir)")
    followed = run_script("train.py", *base, "--n_layer=1")
    assert followed.returncode == 0, followed.stderr
    assert load_checkpoint(out / "ckpt.pt")["iter_num"] == 4
    only_line = run_train("--init_from=resume", "--n_layer=2", data=data_dir, out=out)
    assert_one_line_error(only_line, 2, "(leave the key out to use the model's value, or train this config from "
                          "scratch into another --out_dir)")


def test_a_truncated_checkpoint_moved_aside_is_called_what_it_is(tmp_path, data_dir):
    """A run into an out_dir whose only ckpt.pt is cut short moves it aside byte for byte, as ever, but said
    "no checkpoint" and offered nothing true; now it names the unreadable file and offers no sample.py."""
    out = tmp_path / "out"
    out.mkdir()
    (out / "ckpt.pt").write_bytes(b"PK\x03\x04" + bytes(996))  # a zip's first bytes, then nothing
    result = run_train("--max_iters=2", "--eval_interval=2", data=data_dir, out=out)
    assert result.returncode == 0, result.stderr
    kept = list((out / "previous").iterdir())
    assert len(kept) == 1 and (kept[0] / "ckpt.pt").read_bytes()[:4] == b"PK\x03\x04"
    line = next(line for line in result.stdout.splitlines() if "held an earlier run" in line)
    assert line == f"{out} held an earlier run (ckpt.pt that cannot be read): moved to {kept[0]}", line


def test_a_new_run_keeps_the_previous_one(tmp_path, data_dir):
    """A scratch run into an out_dir holding a trained run moves that run to out_dir/previous/<...>-iter<N>/
    (checkpoints, log, plot, tokenizer, byte for byte) and says so; sample.py reads it from there."""
    out = tmp_path / "out"
    assert run_train("--max_iters=4", "--eval_interval=2", data=data_dir, out=out).returncode == 0
    first = {p.name: digest(p) for p in out.iterdir()}
    assert {"ckpt.pt", "best.pt", "log.jsonl", "meta.json"} <= set(first)
    best = load_checkpoint(out / "best.pt")["best_val_loss"]
    again = run_train("--max_iters=2", "--eval_interval=2", data=data_dir, out=out)  # e.g. the README line, again
    assert again.returncode == 0, again.stderr
    kept = list((out / "previous").iterdir())
    assert len(kept) == 1 and kept[0].name.endswith("-iter4")
    assert {p.name: digest(p) for p in kept[0].iterdir()} == first
    assert f"held an earlier run (iter 4, best val loss {best:.4f}): moved to {kept[0]}" in again.stdout
    assert f"python sample.py --out_dir={kept[0]}" in again.stdout
    assert load_checkpoint(out / "ckpt.pt")["iter_num"] == 2  # the new run has out_dir to itself
    import sample
    model, meta, loaded = sample.load_model({"init_from": "resume", "out_dir": str(kept[0]), "ckpt": "", "meta": ""})
    assert "iter 4" in loaded and meta["vocab_size"] == VOCAB
    # a third run keeps the second beside the first
    assert run_train("--max_iters=2", "--eval_interval=2", data=data_dir, out=out).returncode == 0
    assert len(list((out / "previous").iterdir())) == 2


def test_the_run_moved_aside_is_named_for_when_it_last_saved(tmp_path, data_dir):
    """A resume that trained nothing rewrites the log and meta.json, not the checkpoints: the folder the next
    run moves the run to carries the checkpoints' time, not that resume's."""
    out = tmp_path / "out"
    assert run_train("--max_iters=2", "--eval_interval=2", data=data_dir, out=out).returncode == 0
    saved = time.mktime((2020, 1, 2, 3, 4, 5, 0, 0, -1))
    for name in ("ckpt.pt", "best.pt"):
        os.utime(out / name, (saved, saved))
    assert "nothing to train" in run_train("--init_from=resume", "--max_iters=2", data=data_dir, out=out).stdout
    assert os.path.getmtime(out / "log.jsonl") > saved + 86400  # rewritten just now
    assert run_train("--max_iters=2", "--eval_interval=2", data=data_dir, out=out).returncode == 0
    assert [p.name for p in (out / "previous").iterdir()] == ["20200102-030405-iter2"]


def test_no_checkpoint_points_to_the_run_moved_aside(tmp_path, data_dir):
    """The main job run again and stopped before its first checkpoint leaves out_dir with no ckpt.pt: the
    trained run is in previous/, and sample.py and a resume say where rather than just "no checkpoint"."""
    out = tmp_path / "out"
    assert run_train("--max_iters=2", "--eval_interval=2", data=data_dir, out=out).returncode == 0
    train.keep_previous_run(str(out))  # what a new run does first
    kept = str(next((out / "previous").iterdir()))
    assert_one_line_error(run_train("--init_from=resume", data=data_dir, out=out), 2,
                          f"no checkpoint at {out}/ckpt.pt", f"moved aside to {kept}: pass --out_dir={kept}")
    sampled = run_script("sample.py", f"--out_dir={out}")
    assert_one_line_error(sampled, 2, f"--out_dir={kept}")
    assert run_train("--max_iters=2", "--eval_interval=2", data=data_dir, out=out).returncode == 0
    with pytest.raises(train.ConfigError) as error:  # a run is there again: a missing file is only that
        load_checkpoint(out / "other.pt")
    assert str(error.value) == f"no checkpoint at {out / 'other.pt'}"


def test_eval_only_writes_nothing(tmp_path, data_dir):
    """--eval_only=true evaluates the checkpoint: the log, the plot and the checkpoints stay as they were."""
    out = tmp_path / "out"
    assert run_train("--max_iters=4", "--eval_interval=2", data=data_dir, out=out).returncode == 0
    before = {p.name: digest(p) for p in out.iterdir()}
    result = run_train("--eval_only=true", "--init_from=resume", data=data_dir, out=out)
    assert result.returncode == 0, result.stderr
    assert "step 4: train loss" in result.stdout
    assert {p.name: digest(p) for p in out.iterdir()} == before


def test_resume_with_another_process_count_warns_only_where_dropout_draws(tmp_path, data_dir):
    """A 2-process checkpoint holds each process's random state, and one process cannot continue both: that
    changes dropout's masks alone (the data order has its own generator), so the warning comes only where
    dropout draws, not for eval_only or with dropout 0 (it used to come for both)."""
    out = tmp_path / "out"
    assert run_train("--max_iters=2", "--eval_interval=2", data=data_dir, out=out).returncode == 0
    ckpt = load_checkpoint(out / "ckpt.pt")
    ckpt["rng"]["torch"] *= 2  # as train.py --nproc=2 saves it: one state per process
    warning = ("warning: the checkpoint holds the random state of 2 process(es), this run has 1: dropout draws "
               "new random numbers")
    for args, warned in ((["--eval_only=true"], False), (["--max_iters=3"], False),
                         (["--max_iters=3", "--dropout=0.1"], True)):
        torch.save(ckpt, out / "ckpt.pt")  # again: a resume that trains saves its own, of one process
        result = run_train("--init_from=resume", *args, data=data_dir, out=out)
        assert result.returncode == 0, result.stderr
        assert (warning in result.stderr) == warned, (args, result.stderr)


def test_unusable_out_dir_is_one_line(tmp_path, data_dir):
    """Also under DDP: found by rank 0 after the processes connected, it came with rank 1's ~30 lines of
    gloo's 'Connection closed by peer'; now the launcher finds it before starting them."""
    a_file = tmp_path / "file"
    a_file.write_text("x")
    assert_one_line_error(run_train("--max_iters=1", data=data_dir, out=a_file), 2, "cannot use out_dir", "not a folder")
    assert_one_line_error(run_train("--max_iters=1", data=data_dir, out=a_file / "run"), 2, "not a folder")
    assert_one_line_error(run_train("--max_iters=1", "--out_dir=", data=data_dir), 2, "cannot use out_dir")
    result = run_script("train.py", f"--data_dir={data_dir}", f"--out_dir={a_file}", *TINY, "--nproc=2")
    assert_one_line_error(result, 2, "cannot use out_dir", "not a folder")


# ----------------------------------------------------------------------------- pieces, in process

def test_lr_schedule():
    lr = train.get_lr
    assert lr(0, 1.0, 10, 100, 0.1) == pytest.approx(1 / 11)  # warmup never starts at 0
    warm = [lr(i, 1.0, 10, 100, 0.1) for i in range(11)]
    assert warm == sorted(warm) and warm[10] == 1.0  # rises linearly to the peak at warmup_iters
    decay = [lr(i, 1.0, 10, 100, 0.1) for i in range(10, 101)]
    assert all(a >= b for a, b in zip(decay, decay[1:]))  # then only falls
    assert lr(55, 1.0, 10, 100, 0.1) == pytest.approx(0.55)  # cosine midpoint: halfway between peak and floor
    assert lr(100, 1.0, 10, 100, 0.1) == lr(10**6, 1.0, 10, 100, 0.1) == 0.1
    # warmup as long as (or longer than) the decay: no decay phase, no division by zero
    assert [lr(i, 1.0, 5, 5, 0.1) for i in (4, 5, 6)] == [pytest.approx(5 / 6), 0.1, 0.1]
    assert lr(7, 1.0, 9, 5, 0.1) == pytest.approx(0.8)
    # min_lr above learning_rate is clamped: the schedule never climbs past the peak
    assert max(lr(i, 1e-3, 2, 10, 1e-2) for i in range(20)) <= 1e-3
    assert lr(15, 1e-3, 2, 10, 1e-2) == 1e-3
    # a time budget moves the decay on where it is further along than the iterations, never back
    assert lr(20, 1.0, 10, 100, 0.1, time_spent=0.5) == pytest.approx(0.55)
    assert lr(55, 1.0, 10, 100, 0.1, time_spent=0.1) == pytest.approx(0.55)
    assert lr(20, 1.0, 10, 100, 0.1, time_spent=1.0) == lr(20, 1.0, 10, 100, 0.1, time_spent=3.0) == 0.1
    assert lr(4, 1.0, 10, 100, 0.1, time_spent=0.9) == lr(4, 1.0, 10, 100, 0.1)  # warmup is by iterations


def test_load_data_uint32_and_windows(tmp_path):
    """uint32 bins read as uint32 (ids above 65535 survive), and windows are x and x shifted by one."""
    tokens = make_dataset(tmp_path, dtype="uint32", offset=70000)
    train_data, val_data, meta = train.load_data(str(tmp_path), 16)
    assert meta["vocab_size"] == 70016 and train_data.dtype == np.uint32
    assert np.array_equal(np.concatenate([train_data, val_data]), tokens)
    starts = np.array([0, 5, len(train_data) - 17])
    x, y = train.get_windows(train_data, starts, 16)
    assert x.shape == y.shape == (3, 16) and x.dtype == torch.int64
    for row, s in enumerate(starts):
        assert x[row].tolist() == tokens[s:s + 16].tolist() and y[row].tolist() == tokens[s + 1:s + 17].tolist()
    # eval windows: fixed, spread over the whole split, all in range
    ev = train.eval_starts(len(val_data), 16, 50)
    assert ev[0] == 0 and ev[-1] == len(val_data) - 17 and np.array_equal(ev, train.eval_starts(len(val_data), 16, 50))


def test_every_config_file_is_valid():
    defaults = config_keys(vars(train))
    names = {p.name for p in (ROOT / "config").glob("*.py")}
    assert {"tiny.py", "shakespeare_cpu.py", "train_shakespeare_char.py", "finetune_shakespeare.py", "train_gpt2.py", "eval_gpt2.py",
            "eval_gpt2_medium.py", "eval_gpt2_large.py", "eval_gpt2_xl.py"} <= names
    for name in sorted(names):
        cfg = train.resolve(configure(defaults, [str(ROOT / "config" / name)]))
        assert cfg["device"] in ("cpu", "cuda", "mps"), name


# ----------------------------------------------------------------------------- a run and what it leaves

def test_run_writes_log_checkpoints_meta_and_plot(tmp_path, data_dir):
    out = tmp_path / "out"
    result = run_train("--max_iters=6", "--eval_interval=3", data=data_dir, out=out)
    assert result.returncode == 0, result.stderr
    recs = records(out)
    steps = [r for r in recs if "loss" in r]
    evals = [r for r in recs if "val_loss" in r]
    assert [r["iter"] for r in steps] == list(range(6)) and [r["iter"] for r in evals] == [0, 3, 6]
    for r in steps:
        assert set(r) == {"iter", "loss", "lr", "tokens_per_sec", "elapsed", "grad_norm"}
        assert r["grad_norm"] > 0
        assert r["lr"] == pytest.approx(train.get_lr(r["iter"], 1e-2, 2, 8, 1e-3))
        assert 0 < r["loss"] < 10 and r["tokens_per_sec"] > 0
    for r in evals:
        assert set(r) == {"iter", "train_loss", "val_loss", "lr", "elapsed"}
    elapsed = [r["elapsed"] for r in recs]
    assert elapsed == sorted(elapsed)
    assert evals[-1]["val_loss"] < evals[0]["val_loss"]  # it learns

    ckpt = load_checkpoint(out / "ckpt.pt")
    assert {"model", "optimizer", "scaler", "model_args", "config", "iter_num", "best_val_loss", "rng",
            "sampler"} <= set(ckpt)
    assert ckpt["iter_num"] == 6 and ckpt["scaler"] is None
    assert ckpt["model_args"]["vocab_size"] == VOCAB and ckpt["model_args"]["n_embd"] == 16
    assert ckpt["config"]["batch_size"] == 4 and ckpt["config"]["device"] == "cpu"
    assert not any(k.startswith("_orig_mod.") for k in ckpt["model"])
    assert ckpt["rng"]["torch"][0].dtype == torch.uint8 and ckpt["sampler"]["generator"].dtype == torch.uint8
    best = load_checkpoint(out / "best.pt")
    low = min(evals[1:], key=lambda r: r["val_loss"])  # iter 0 (untrained) is never saved
    assert best["iter_num"] == low["iter"] and best["best_val_loss"] == pytest.approx(low["val_loss"])
    assert ckpt["best_val_loss"] == best["best_val_loss"]
    model_from_checkpoint(ckpt)  # what sample.py does
    assert json.loads((out / "meta.json").read_text()) == json.loads((data_dir / "meta.json").read_text())
    try:
        import matplotlib  # noqa: F401
        assert (out / "loss.png").stat().st_size > 1000
    except ImportError:
        pass


def test_plot_shows_where_the_curves_settle_names_the_run_and_marks_best(tmp_path, monkeypatch):
    plt = pytest.importorskip("matplotlib.pyplot")
    figures = []
    monkeypatch.setattr(plt, "close", figures.append)  # keep the figure to look at
    recs = [{"iter": 0, "train_loss": 4.4, "val_loss": 4.41}]
    recs += [{"iter": i, "loss": 4.4 - 2.8 * min(i, 100) / 100 + 0.01 * (i % 3)} for i in range(0, 400, 10)]
    recs += [{"iter": 100, "train_loss": 1.9, "val_loss": 2.0}, {"iter": 200, "train_loss": 1.6, "val_loss": 1.7},
             {"iter": 300, "train_loss": 1.5, "val_loss": 1.72}, {"iter": 400, "train_loss": 1.45, "val_loss": 1.75}]
    assert train.plot_losses(recs, tmp_path / "loss.png", title="out-tiny")
    assert (tmp_path / "loss.png").stat().st_size > 1000
    ax = figures[0].axes[0]
    assert ax.get_title() == "out-tiny"
    low, high = ax.get_ylim()
    assert 1.3 < low < 1.45 and 2.0 < high < 2.2  # the curves from the second eval on, not 4.4 down
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert "best.pt: iter 200, val 1.7000" in labels
    assert "iter 0: val 4.41, above the plot" in labels  # in the legend: a note in a corner ended up under it


def test_plot_of_a_run_with_evals_only_at_its_ends_shows_most_of_its_curve(tmp_path, monkeypatch):
    """A 10 s run evals at iteration 0 and at its end: cropping from the second eval showed its last point
    alone. The crop starts a quarter of the way in instead."""
    plt = pytest.importorskip("matplotlib.pyplot")
    figures = []
    monkeypatch.setattr(plt, "close", figures.append)
    recs = [{"iter": 0, "train_loss": 4.2, "val_loss": 4.19}]
    recs += [{"iter": i, "loss": 4.2 - 2.3 * (i / 150) ** 0.5} for i in range(0, 151, 25)]
    recs += [{"iter": 151, "train_loss": 1.92, "val_loss": 2.01}]
    assert train.plot_losses(recs, tmp_path / "loss.png")
    low, high = figures[0].axes[0].get_ylim()
    assert high > 4.2 - 2.3 * (50 / 150) ** 0.5  # the batch loss at iteration 50 is in view
    assert high < 4.0  # and the first iterations' are not


def test_without_matplotlib_the_run_says_once_how_to_get_the_plot(tmp_path, data_dir, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib now raises ImportError
    out = tmp_path / "out"
    result = run_train("--max_iters=4", "--eval_interval=2", data=data_dir, out=out)
    assert result.returncode == 0, result.stderr
    said = [line for line in (result.stdout + result.stderr).splitlines() if "pip install" in line]
    assert said == [f"no {out}/loss.png: drawing it needs matplotlib (pip install matplotlib)"]
    assert not (out / "loss.png").exists() and (out / "ckpt.pt").exists()


def test_max_iters_zero_says_what_happened_and_leaves_out_dir_as_found(tmp_path, data_dir):
    """A run that trains nothing writes no checkpoint, and leaves nothing the next run would move aside as
    an earlier run. Into an out_dir holding a run, it put that run in previous/ and left a log of iter 0
    behind (a fresh user's trial); now the run comes back, and a resume of an ended run leaves its log."""
    out = tmp_path / "out"
    result = run_train("--max_iters=0", data=data_dir, out=out)
    assert result.returncode == 0, result.stderr
    last = result.stdout.strip().splitlines()[-1]
    assert last == "done: nothing to train (max_iters=0): evaluated at iter 0, no checkpoint written"
    assert not out.exists()  # the folder it made goes with its meta.json and empty log
    out.mkdir()  # a folder of the user's: what it held, and only that, stays
    (out / "notes.txt").write_text("mine")
    assert run_train("--max_iters=0", data=data_dir, out=out).returncode == 0
    assert [p.name for p in out.iterdir()] == ["notes.txt"]
    assert run_train("--max_iters=2", "--eval_interval=2", data=data_dir, out=out).returncode == 0
    before = {p.name: digest(p) for p in out.iterdir()}
    result = run_train("--max_iters=0", data=data_dir, out=out)
    assert result.stdout.strip().splitlines()[-1].endswith(f"no checkpoint written; the earlier run is back in {out}")
    assert {p.name: digest(p) for p in out.iterdir()} == before  # no previous/ either
    result = run_train("--init_from=resume", "--max_iters=2", data=data_dir, out=out)
    assert "done: nothing to train" in result.stdout, result.stdout
    assert {p.name: digest(p) for p in out.iterdir()} == before


def test_done_line_says_when_ckpt_pt_is_behind(tmp_path, data_dir):
    """always_save_checkpoint=False (nanoGPT's shakespeare config) writes ckpt.pt only when val improves:
    a resume whose evals never beat the best ended with "checkpoints in out" and ckpt.pt at the start."""
    out = tmp_path / "out"
    assert run_train("--max_iters=4", "--eval_interval=2", data=data_dir, out=out).returncode == 0
    result = run_train("--init_from=resume", "--max_iters=8", "--eval_interval=2", "--always_save_checkpoint=False",
                       "--learning_rate=0", "--min_lr=0", data=data_dir, out=out)  # no step changes the model
    assert result.stdout.strip().splitlines()[-1].endswith(
        f"checkpoints in {out}; ckpt.pt is at iter 4, the last eval that improved val "
        "(always_save_checkpoint=False saves only then)"), result.stdout
    assert load_checkpoint(out / "ckpt.pt")["iter_num"] == 4
    result = run_train("--init_from=resume", "--max_iters=10", "--eval_interval=2", data=data_dir, out=out)
    assert result.stdout.strip().splitlines()[-1].endswith(f"checkpoints in {out}"), result.stdout


def test_parameter_line_says_why_the_counts_agree_where_they_do(tmp_path, data_dir):
    """nanoGPT's non-embedding count leaves out the learned position table (and an untied wte): with rope and
    a tied head there is nothing to leave out, and the line says why rather than printing one number twice."""
    lines = {}
    for position in ("learned", "rope", "untied"):
        switch = "--tie_weights=false" if position == "untied" else f"--position={position}"
        result = run_train("--max_iters=0", switch, data=data_dir, out=tmp_path / position)
        assert result.returncode == 0, result.stderr
        lines[position] = next(line for line in result.stdout.splitlines() if " parameters (" in line)
    learned = re.match(r"([\d,]+) parameters \(([\d,]+) non-embedding, as nanoGPT counts\) \|", lines["learned"])
    assert learned, lines
    total, non_embedding = (int(n.replace(",", "")) for n in learned.groups())
    assert total - non_embedding == 16 * 16  # wpe: block_size x n_embd
    # it read "all non-embedding", of a total with wte in it (a fresh user's pass)
    assert lines["rope"].startswith(f"{non_embedding:,} parameters (the same non-embedding, as nanoGPT counts: it "
                                    "subtracts only a learned position table, and rope positions have none) |"), lines
    # untied, wte is left out too, which nanoGPT (always tied) never does: not "as nanoGPT counts"
    untied_total = total + VOCAB * 16  # the head's own weight
    assert lines["untied"].startswith(f"{untied_total:,} parameters ({non_embedding:,} non-embedding: without the "
                                      "untied wte and wpe (nanoGPT, always tied, leaves out wpe alone)) |"), lines


def test_resume_without_its_data_names_the_data_it_trained_on(tmp_path, data_dir):
    """--init_from=resume alone read train.py's default dataset, OpenWebText, and asked for its 55 GB download
    (a user's trial): the checkpoint says what it trained on, so the line names that instead."""
    out = tmp_path / "out"
    assert run_train("--max_iters=2", "--eval_interval=2", data=data_dir, out=out).returncode == 0
    result = run_script("train.py", f"--out_dir={out}", "--init_from=resume", *TINY)
    assert_one_line_error(result, 2, f"{out}/ckpt.pt trained on data_dir={data_dir}, and this run would read "
                                     f"dataset=openwebtext (the default): pass the config file it trained with "
                                     "(resume takes only the model keys from ckpt.pt; the data, batch and schedule "
                                     "come from the config)")
    assert run_train("--init_from=resume", "--max_iters=3", data=data_dir, out=out).returncode == 0


def test_min_lr_above_the_peak_is_said(tmp_path, data_dir):
    """--min_lr=1 (a typo for 1e-4, say) would hold the lr flat at the peak: the run says so once."""
    result = run_train("--max_iters=2", "--learning_rate=3e-3", "--min_lr=1", data=data_dir, out=tmp_path / "out")
    assert result.returncode == 0, result.stderr
    assert result.stderr.count("warning: min_lr=1 is above learning_rate=0.003: the lr stays at 0.003 after "
                               "warmup, with no decay\n") == 1
    quiet = run_train("--max_iters=2", "--learning_rate=3e-3", "--min_lr=3e-3", data=data_dir, out=tmp_path / "o2")
    assert "warning" not in quiet.stderr  # a flat schedule asked for in so many words


def test_startup_line_counts_processes_and_threads_in_words(tmp_path, data_dir):
    result = run_train("--max_iters=0", data=data_dir, out=tmp_path / "out")  # TINY: one thread
    assert result.returncode == 0, result.stderr
    assert "| cpu float32 | 1 process x 1 thread | 128 tokens per iteration" in result.stdout, result.stdout


def test_dtype_auto_follows_the_models_width(tmp_path, data_dir, monkeypatch):
    """On a CPU with native bf16, autocast ran a 64-wide step 1.07x and wider ones 1.3-1.7x faster than float32
    (docs/cpu.md): auto is bfloat16 from 64 wide. A resume follows the checkpoint's width, not the config's
    (the default n_embd, 768, would have picked bfloat16 for a 16-wide model)."""
    import configurator
    monkeypatch.setattr(configurator, "cpu_has_native_bf16", lambda: True)  # what this test asks of the CPU
    auto = [a for a in TINY if not a.startswith("--dtype=")]
    where = [f"--data_dir={data_dir}", f"--out_dir={tmp_path / 'narrow'}"]
    narrow = run_script("train.py", *where, *auto, "--max_iters=2")
    assert narrow.returncode == 0 and "| cpu float32 |" in narrow.stdout, narrow.stdout + narrow.stderr
    resumed = run_script("train.py", *where, *[a for a in auto if not a.startswith("--n_")], "--max_iters=4",
                         "--init_from=resume")
    assert resumed.returncode == 0 and "| cpu float32 |" in resumed.stdout, resumed.stdout + resumed.stderr
    wide = run_script("train.py", f"--data_dir={data_dir}", f"--out_dir={tmp_path / 'wide'}", *auto, "--n_embd=192",
                      "--max_iters=1")
    assert wide.returncode == 0 and "| cpu bfloat16 |" in wide.stdout, wide.stdout + wide.stderr


def test_time_budget_ends_the_run_with_the_lr_decayed(tmp_path, data_dir):
    """--max_seconds: the run stops after that many seconds of training steps, far short of max_iters, with
    the lr decayed over the time (to within 10% of min_lr at the last step), a last eval and checkpoint,
    and the seconds saved in it; a resume with a longer budget continues the time and the decay, and a
    resume of a finished budget trains nothing more."""
    out, budget = tmp_path / "out", 2.0
    args = ["--max_iters=1000000", "--lr_decay_iters=1000000", "--eval_interval=100000"]
    result = run_train(*args, f"--max_seconds={budget}", data=data_dir, out=out)
    assert result.returncode == 0, result.stderr
    steps = [r for r in records(out) if "loss" in r]
    evals = [r["iter"] for r in records(out) if "val_loss" in r]
    n = len(steps)
    assert 10 < n < 1000000 and evals == [0, n]  # a last eval where the time ran out
    assert f"done: iter {n} (2 s of training steps)" in result.stdout
    lrs = [r["lr"] for r in steps[2:]]  # after the 2-iteration warmup
    assert all(a >= b for a, b in zip(lrs, lrs[1:])) and lrs[0] > 0.9e-2
    assert lrs[-1] <= 1e-3 + 0.1 * (1e-2 - 1e-3)  # iterations alone would still be at the peak
    ckpt = load_checkpoint(out / "ckpt.pt")
    assert ckpt["iter_num"] == n and budget <= ckpt["trained_seconds"] < budget + 2

    longer = run_train(*args, "--max_seconds=3", "--init_from=resume", data=data_dir, out=out)
    assert longer.returncode == 0, longer.stderr
    more = [r for r in records(out) if "loss" in r and r["iter"] >= n]
    assert more and more[0]["iter"] == n
    assert more[0]["lr"] < 0.5 * (1e-2 + 1e-3)  # 2 s of 3 spent: past the cosine's midpoint already
    ckpt = load_checkpoint(out / "ckpt.pt")
    assert 3.0 <= ckpt["trained_seconds"] < 5.0 and ckpt["iter_num"] == n + len(more)

    again = run_train(*args, "--max_seconds=3", "--init_from=resume", data=data_dir, out=out)
    assert again.returncode == 0, again.stderr
    assert not [r for r in records(out) if "loss" in r and r["iter"] >= ckpt["iter_num"]]
    assert load_checkpoint(out / "ckpt.pt")["iter_num"] == ckpt["iter_num"]
    held = f"iter {ckpt['iter_num']}, best val loss {ckpt['best_val_loss']:.4f}"
    assert (f"done: nothing to train: the run in {out} ended at {held}: it had already used "
            "its max_seconds=3 budget") in again.stdout and "raise --max_seconds to train on" in again.stdout
    capped = run_train("--max_iters=4", "--eval_interval=2", "--init_from=resume", data=data_dir, out=out)
    assert capped.returncode == 0, capped.stderr  # the budget off (max_seconds=0) and max_iters passed long ago
    assert (f"ended at {held}: it had already reached max_iters=4; raise --max_iters to train on"
            in capped.stdout), capped.stdout


def test_nothing_to_train_from_a_run_saved_before_its_first_eval_says_it_has_no_val_loss(tmp_path, data_dir):
    """A run stopped between its first iteration and its second eval saved best_val_loss inf (the eval at its
    first iteration is never saved): a resume with nothing to train says so, not "best val loss inf"."""
    out = tmp_path / "out"
    assert run_train("--max_iters=2", "--eval_interval=2", data=data_dir, out=out).returncode == 0
    ckpt = load_checkpoint(out / "ckpt.pt")
    # as a stop in its eval at iter 2 saves it
    save_checkpoint({**ckpt, "best_val_loss": float("inf")}, str(out / "ckpt.pt"))
    result = run_train("--max_iters=2", "--init_from=resume", data=data_dir, out=out)
    assert result.returncode == 0, result.stderr
    assert (f"done: nothing to train: the run in {out} ended at iter 2, no val loss for these weights yet: it had "
            "already reached max_iters=2; raise --max_iters to train on") in result.stdout.splitlines(), result.stdout


def test_grad_norm_is_logged_before_clipping(tmp_path, data_dir):
    """The logged norm is the gradient's before clipping: at iteration 0 (same weights, same batch) it is the
    same whether the run clips to 1e-4 or not at all, and far above the 1e-4 it is clipped to."""
    first = {}
    for clip in ("0", "1e-4"):
        out = tmp_path / f"clip{clip}"
        result = run_train("--max_iters=3", "--eval_interval=3", f"--grad_clip={clip}", data=data_dir, out=out)
        assert result.returncode == 0, result.stderr
        steps = [r for r in records(out) if "loss" in r]
        assert len(steps) == 3 and all(r["grad_norm"] > 0 for r in steps)
        first[clip] = steps[0]["grad_norm"]
    assert first["0"] == pytest.approx(first["1e-4"], rel=1e-6)
    assert first["1e-4"] > 1e-2


@pytest.mark.parametrize("optimizer", ["adamw", "muon"])
def test_resume_continues_exactly(optimizer, tmp_path, data_dir):
    """8 iterations in one run == 5 iterations, then resumed for 3: the same losses, bit for bit, and the
    same final weights. Dropout is on, so the RNG state must come back too, and the data sampler's, and
    (muon) both optimizers' state."""
    common = ["--dropout=0.2", "--eval_interval=3", "--lr_decay_iters=8", f"--optimizer={optimizer}"]
    whole, parts = tmp_path / "whole", tmp_path / "parts"
    assert run_train(*common, "--max_iters=8", data=data_dir, out=whole).returncode == 0
    first = run_train(*common, "--max_iters=5", data=data_dir, out=parts)
    assert first.returncode == 0, first.stderr
    assert load_checkpoint(parts / "ckpt.pt")["iter_num"] == 5
    second = run_train(*common, "--max_iters=8", "--init_from=resume", data=data_dir, out=parts)
    assert second.returncode == 0, second.stderr
    assert "resume at iter 5" in second.stdout
    steps, evals = losses(whole)
    assert [i for i, _ in steps] == list(range(8))
    # exact: the resumed log is the uninterrupted one, and the first run's last eval, at iteration 5, stays
    parts_steps, parts_evals = losses(parts)
    assert parts_steps == steps
    assert [e for e in parts_evals if e[0] != 5] == evals and [e[0] for e in parts_evals].count(5) == 1
    a, b = load_checkpoint(whole / "ckpt.pt"), load_checkpoint(parts / "ckpt.pt")
    assert all(torch.equal(a["model"][k], b["model"][k]) for k in a["model"])
    if optimizer == "muon":  # Muon's momentum buffers were saved, and came back
        assert set(b["optimizer"]) == {"muon", "adamw"} and len(b["optimizer"]["muon"]["state"]) == 4


def test_training_on_keeps_the_last_eval_of_the_run_it_resumes(tmp_path, data_dir):
    """A finished run trained on (--init_from=resume, a higher max_iters) kept its log only up to its last
    iteration, so the eval there, whose weights best.pt often holds, went, and loss.png marked an earlier
    eval as best.pt's. That eval stays, once: a resume on an eval iteration evaluates again without logging
    it twice."""
    for first_iters in (5, 6):  # the run ends off the eval interval (3), and on it
        out = tmp_path / f"out{first_iters}"
        assert run_train(f"--max_iters={first_iters}", "--eval_interval=3", data=data_dir, out=out).returncode == 0
        last = losses(out)[1][-1]
        assert last[0] == first_iters
        more = run_train("--max_iters=9", "--eval_interval=3", "--init_from=resume", data=data_dir, out=out)
        assert more.returncode == 0, more.stderr
        evals = losses(out)[1]
        assert [e[0] for e in evals] == sorted({0, 3, first_iters, 6, 9})
        assert last in evals  # the earlier run's record, as it was


def test_resume_says_where_its_schedule_differs_from_the_runs(tmp_path, data_dir):
    """Resume takes the schedule from the command, as nanoGPT's does: a resume without the run's own
    --max_iters/--lr_decay_iters (a README command stopped, then resumed with config/tiny.py alone) changed
    its schedule without a word. Now the line names each difference; the same command again has none, nor one
    that only raises max_iters (how a run trains on)."""
    out = tmp_path / "out"
    assert run_train("--max_iters=2", "--eval_interval=2", data=data_dir, out=out).returncode == 0
    same = run_train("--max_iters=4", "--eval_interval=2", "--init_from=resume", data=data_dir, out=out)
    assert same.returncode == 0 and "schedule differs" not in same.stdout, same.stdout
    other = run_train("--max_iters=6", "--eval_interval=2", "--learning_rate=0.005", "--init_from=resume",
                      data=data_dir, out=out)
    assert other.returncode == 0, other.stderr
    now, own = train.get_lr(4, 0.005, 2, 8, 1e-3), train.get_lr(4, 0.01, 2, 8, 1e-3)  # TINY's schedule
    assert ("resume: this command's schedule differs from the run's: learning_rate=0.005 (was 0.01), so the lr at "
            f"iter 4 is {now:.2e}, where the run's own schedule has {own:.2e}; to continue the run's own, pass its "
            "values") in other.stdout.splitlines()


def test_resume_says_where_the_lr_lands_when_its_schedule_moves_it(tmp_path, data_dir):
    """A run trained to its min_lr, continued with a schedule that has barely begun (a time-budgeted run
    resumed with --max_seconds=0 and a higher max_iters follows lr_decay_iters, from the top): the lr jumped
    back up unannounced. The resume line says where it lands; a change that leaves it (the batch) does not."""
    out = tmp_path / "out"
    assert run_train("--max_iters=8", "--eval_interval=4", data=data_dir, out=out).returncode == 0  # ends at min_lr
    more = run_train("--max_iters=10", "--lr_decay_iters=100", "--eval_interval=4", "--init_from=resume",
                     data=data_dir, out=out)
    assert more.returncode == 0, more.stderr
    assert (f"lr_decay_iters=100 (was 8), so the lr at iter 8 is {train.get_lr(8, 1e-2, 2, 100, 1e-3):.2e}, where "
            "the run's own schedule has 1.00e-03;") in more.stdout, more.stdout
    batch = run_train("--max_iters=12", "--lr_decay_iters=100", "--batch_size=2", "--eval_interval=4",
                      "--init_from=resume", data=data_dir, out=out)
    assert batch.returncode == 0, batch.stderr
    assert "batch_size=2 (was 4); to continue" in batch.stdout and "so the lr" not in batch.stdout, batch.stdout


def test_resume_with_the_other_optimizer_is_one_line(tmp_path, data_dir):
    out = tmp_path / "out"
    assert run_train("--max_iters=2", "--eval_interval=2", "--optimizer=muon", data=data_dir, out=out).returncode == 0
    before = digest(out / "ckpt.pt")
    result = run_train("--max_iters=4", "--init_from=resume", "--optimizer=adamw", data=data_dir, out=out)
    assert_one_line_error(result, 2, "optimizer=muon")
    assert digest(out / "ckpt.pt") == before
    assert_one_line_error(run_train("--optimizer=sgd", data=data_dir, out=out), 2, "optimizer", "adamw, muon")


def test_muon_on_a_torch_without_it_is_one_line_and_adamw_still_trains(tmp_path, data_dir, monkeypatch):
    """torch < 2.9 has no torch.optim.Muon: optimizer=muon says so in one line, before anything is built,
    and model.py (which imports muon.py only for Muon) still builds and trains with AdamW."""
    monkeypatch.delattr(torch.optim, "Muon")
    cfg = configure(config_keys(vars(train)), [f"--data_dir={data_dir}", "--optimizer=muon"])
    with pytest.raises(train.ConfigError, match=r"optimizer=muon needs torch >= 2.9 .*--optimizer=adamw"):
        train.resolve(cfg)
    import model
    gpt = model.GPT(model.GPTConfig(n_layer=1, n_head=2, n_embd=16, block_size=8, vocab_size=8))
    assert isinstance(gpt.configure_optimizers(0.1, 1e-3, (0.9, 0.99), "cpu"), torch.optim.AdamW)


def test_muon_lr_follows_the_schedule_at_its_own_peak(tmp_path, data_dir):
    """The logged lr is AdamW's; Muon's group runs the same schedule scaled to muon_lr: checked through
    the update size of one step at two peaks (Muon's update has a fixed size, lr times a unit-ish matrix)."""
    out = tmp_path / "out"
    args = ["--optimizer=muon", "--muon_lr=0.05", "--max_iters=3", "--eval_interval=3"]
    assert run_train(*args, data=data_dir, out=out).returncode == 0
    ckpt = load_checkpoint(out / "ckpt.pt")
    muon_group = ckpt["optimizer"]["muon"]["param_groups"][0]
    adamw_group = ckpt["optimizer"]["adamw"]["param_groups"][0]
    # the last step's lr: iteration 2 of warmup 2 -> the peak; Muon's is muon_lr at that point
    assert adamw_group["lr"] == pytest.approx(train.get_lr(2, 1e-2, 2, 8, 1e-3))
    assert muon_group["lr"] == pytest.approx(adamw_group["lr"] * 0.05 / 1e-2)


class CutShort:
    """A file that takes `room` bytes, then raises what `then` gives: a full disk, or a stop's exit."""

    def __init__(self, path, mode, room, then):
        self.f, self.room, self.then = open(path, mode), room, then

    def write(self, b):
        if self.room < len(b):
            raise self.then()
        self.room -= len(b)
        return self.f.write(b)

    def __getattr__(self, name):
        return getattr(self.f, name)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.f.close()


@pytest.mark.parametrize("then", [lambda: OSError(28, "No space left on device"), lambda: SystemExit(130)])
def test_a_save_cut_short_says_why_and_keeps_the_old_file(tmp_path, monkeypatch, then):
    """torch's zip writer, cut short, raises its own RuntimeError over the cause: a full disk is one
    line naming it (not a traceback), and a second Ctrl-C's exit stays an exit; the old file stays whole."""
    import checkpoint
    path = tmp_path / "ckpt.pt"
    save_checkpoint({"w": torch.arange(10.0)}, str(path))
    before = digest(path)
    monkeypatch.setattr(checkpoint, "open", lambda p, mode: CutShort(p, mode, 4096, then), raising=False)
    expected = SystemExit if isinstance(then(), SystemExit) else ConfigError
    with pytest.raises(expected) as caught:
        save_checkpoint({"w": torch.randn(100_000)}, str(path))
    if expected is SystemExit:
        assert caught.value.code == 130
    else:
        assert str(caught.value) == f"cannot save {path}: No space left on device (the one there before is intact)"
    assert digest(path) == before and sorted(p.name for p in tmp_path.iterdir()) == ["ckpt.pt"]


@pytest.mark.skipif(os.name != "posix", reason="out_dir's lock is an flock: POSIX only")
def test_a_second_run_into_an_out_dir_in_use_is_refused(tmp_path, data_dir):
    """While a run trains into out_dir, a second run there (new or resumed) is one line, and touches
    nothing: the live run's files stay, and it goes on to save. Once it has ended, out_dir is free."""
    out = tmp_path / "out"
    cmd = train_cmd(out, data_dir, "--max_iters=1000000", "--eval_interval=2", "--lr_decay_iters=1000000")
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.time() + 120
        while not (out / "best.pt").exists():  # saved at iteration 2, after ckpt.pt: all its files are there
            assert proc.poll() is None and time.time() < deadline, proc.communicate()
            time.sleep(0.1)
        files = lambda: sorted(p.name for p in out.iterdir() if ".tmp." not in p.name)  # the live run saves on
        names = files()
        for extra in ([], ["--init_from=resume"], ["--nproc=2"]):  # --nproc: its peer's traceback came too
            second = run_train("--max_iters=3", "--eval_interval=3", *extra, data=data_dir, out=out)
            assert_one_line_error(second, 2, f"another train.py is writing to out_dir={out} now")
            assert second.stdout == ""  # refused first, before any work or line
            assert files() == names  # nothing moved aside to previous/, nothing new written
        proc.send_signal(signal.SIGINT)
        stdout, stderr = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130 and "saving" in stderr, stderr
    kept = load_checkpoint(out / "ckpt.pt")["iter_num"]
    assert kept >= 2
    after = run_train("--max_iters=3", "--eval_interval=3", data=data_dir, out=out)  # the lock went with it
    assert after.returncode == 0, after.stderr
    assert [load_checkpoint(p / "ckpt.pt")["iter_num"] for p in (out / "previous").iterdir()] == [kept]


@pytest.mark.skipif(os.name != "posix", reason="out_dir's lock is an flock: POSIX only")
def test_two_runs_started_together_into_a_new_out_dir(tmp_path, data_dir):
    """Two runs launched at once into an out_dir that does not exist yet: the folder is made and locked as
    train() begins, so the loser is refused before any line, and the winner trains on undisturbed."""
    out = tmp_path / "new" / "out"
    cmd = train_cmd(out, data_dir, "--max_iters=6", "--eval_interval=3")
    procs = [subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(2)]
    results = [(p.wait(timeout=300), *p.communicate()) for p in procs]
    refused = [r for r in results if r[0] == 2]
    assert len(refused) == 1, results
    code, stdout, stderr = refused[0]
    assert stderr.strip() == f"error: another train.py is writing to out_dir={out} now: let it end (or stop " \
                             "it), or pass another --out_dir" and stdout == "", (stdout, stderr)
    assert [r[0] for r in results if r is not refused[0]] == [0]
    assert load_checkpoint(out / "ckpt.pt")["iter_num"] == 6 and not (out / "previous").exists()


def test_a_failed_run_removes_the_empty_out_dir_it_made(tmp_path, data_dir):
    """out_dir is made as train() begins; a run that fails before writing anything there (here: a model
    that cannot be built: a folder with a config but no weights) takes the empty folder away again, and
    leaves one that was there before alone. New folders above it, made for it, go too."""
    weightless = tmp_path / "weightless"
    weightless.mkdir()
    (weightless / "config.json").write_text('{"model_type": "gpt2", "n_layer": 1}')
    out = tmp_path / "new"
    result = run_train(f"--init_from={weightless}", data=data_dir, out=out)
    assert_one_line_error(result, 2)  # "cannot build the model", or that transformers is missing
    assert not out.exists()
    assert run_train(f"--init_from={weightless}", data=data_dir, out=out / "a" / "b").returncode == 2
    assert not out.exists()
    out.mkdir()
    assert run_train(f"--init_from={weightless}", data=data_dir, out=out).returncode == 2 and out.is_dir()


@pytest.mark.skipif(os.name != "posix", reason="out_dir's lock is an flock: POSIX only")
def test_a_resume_into_a_run_that_has_yet_to_save_says_it_is_in_use(tmp_path, data_dir):
    """A resume into an out_dir whose live run has saved nothing yet said "no checkpoint at .../ckpt.pt", as if
    no run were there. The lock (held here as a live run holds it) is what it now names."""
    import fcntl
    out = tmp_path / "out"
    out.mkdir()
    fd = os.open(out, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        result = run_train("--init_from=resume", data=data_dir, out=out)
        sampled = run_script("sample.py", f"--out_dir={out}")  # and sample.py, lens.py, export.py (load_checkpoint)
    finally:
        os.close(fd)
    assert_one_line_error(result, 2, f"another train.py is writing to out_dir={out} now (it has saved no ckpt.pt "
                                     "yet): let it end (or stop it), or pass another --out_dir")
    assert_one_line_error(sampled, 2, f"no checkpoint at {out / 'ckpt.pt'} yet: a train.py run is training there "
                                      "now and has not saved yet (it saves at each eval_interval)")
    assert "no checkpoint" in run_train("--init_from=resume", data=data_dir, out=out).stderr  # once let go


def test_killed_mid_save_leaves_previous_checkpoint(tmp_path, data_dir):
    """A process that dies halfway through writing ckpt.pt leaves the previous ckpt.pt whole."""
    out = tmp_path / "out"
    assert run_train("--max_iters=3", "--eval_interval=3", data=data_dir, out=out).returncode == 0
    before = digest(out / "ckpt.pt")
    # train.py, resumed to iter 6, with torch.save writing half the checkpoint and then the process dying
    dying = (
        "import io, os, runpy, sys, torch\n"
        "real_save = torch.save\n"
        "def half_then_die(obj, f, *args, **kwargs):\n"
        "    buf = io.BytesIO(); real_save(obj, buf)\n"
        "    f.write(buf.getvalue()[:len(buf.getvalue()) // 2]); f.flush(); os._exit(17)\n"
        "torch.save = half_then_die\n"
        "sys.argv = sys.argv[1:]\n"
        "runpy.run_path(sys.argv[0], run_name='__main__')\n")
    args = [f"--data_dir={data_dir}", f"--out_dir={out}", *TINY, "--max_iters=6", "--eval_interval=3",
            "--init_from=resume"]
    result = subprocess.run([sys.executable, "-c", dying, "train.py", *args], cwd=ROOT, capture_output=True,
                            text=True, timeout=300)
    assert result.returncode == 17, result.stderr
    assert "step 6" in result.stdout  # it did reach the save at iter 6
    leftovers = list(out.glob("ckpt.pt.tmp.*"))
    assert len(leftovers) == 1 and 0 < leftovers[0].stat().st_size < (out / "ckpt.pt").stat().st_size
    assert digest(out / "ckpt.pt") == before
    assert load_checkpoint(out / "ckpt.pt")["iter_num"] == 3
    # the next save clears the dead process's half file, and only that: a live writer's stays
    live = out / f"ckpt.pt.tmp.{os.getppid()}"  # not this pid: run_train saves from this process
    live.write_bytes(b"in progress")
    resumed = run_train("--max_iters=6", "--eval_interval=3", "--init_from=resume", data=data_dir, out=out)
    assert resumed.returncode == 0, resumed.stderr
    assert sorted(out.glob("ckpt.pt.tmp.*")) == [live]
    assert load_checkpoint(out / "ckpt.pt")["iter_num"] == 6


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP])  # SIGHUP: a closed terminal
def test_signal_saves_checkpoint_and_exits_as_interrupted(signum, tmp_path, data_dir):
    out = tmp_path / "out"
    cmd = [sys.executable, str(ROOT / "train.py"), f"--data_dir={data_dir}", f"--out_dir={out}", *TINY,
           "--max_iters=1000000", "--eval_interval=100000", "--lr_decay_iters=1000000"]
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.time() + 120
        while len(train.read_log(out / "log.jsonl")) < 4:  # the eval at 0, then 3 iterations
            assert proc.poll() is None and time.time() < deadline, proc.communicate()
            time.sleep(0.1)
        proc.send_signal(signum)
        stdout, stderr = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode == 128 + signum, stderr  # as an interrupted command: a script can tell
    assert "Traceback" not in stderr and "saved" in stdout
    again = "Ctrl-C" if signum == signal.SIGINT else signum.name  # a SIGTERM (kill's, timeout's) came from no keyboard
    assert f"{signum.name}: stopping; saving {out}/ckpt.pt as it was after the last complete iteration ({again} again " \
           "quits without saving)" in stderr.splitlines(), stderr
    # a long run says up front how long, from its first iterations
    assert re.search(r"estimate: 999,99\d iterations x [\d.]+ s \+ \d+ evals x .*: about .* to go on cpu", stdout), stdout
    ckpt = load_checkpoint(out / "ckpt.pt")
    steps, _ = losses(out)
    assert ckpt["iter_num"] == len(steps) == steps[-1][0] + 1  # saved right after the last finished iteration


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="prctl and /proc: Linux only")
def nproc_training(out, data_dir, output):
    """A --nproc=2 run that trains on until stopped, once it has logged a few iterations: (its launcher, a
    function listing its ranks' pids). output (DEVNULL or PIPE) takes its stdout and stderr."""
    env = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}
    proc = subprocess.Popen(train_cmd(out, data_dir, "--nproc=2", "--max_iters=1000000", "--eval_interval=100000",
                                      "--lr_decay_iters=1000000"), cwd=ROOT, env=env, text=True,
                            stdout=output, stderr=output)
    ranks = lambda: processes_naming(str(out), but=proc.pid)
    deadline = time.time() + 120
    while len(train.read_log(out / "log.jsonl")) < 4:
        if proc.poll() is not None or time.time() > deadline:
            proc.kill()
            raise AssertionError(f"the --nproc=2 run ended or logged nothing in 120 s ({proc.poll()})")
        time.sleep(0.1)
    return proc, ranks


def test_nproc_processes_stop_and_save_when_their_launcher_is_killed(tmp_path, data_dir):
    """kill -9 of --nproc's launcher passes nothing on, and its processes, in a session of their own, trained on
    out of Ctrl-C's reach (a user's trial). Now each is sent SIGTERM as the launcher dies: they save and end."""
    out = tmp_path / "out"
    proc, ranks = nproc_training(out, data_dir, subprocess.DEVNULL)
    try:
        assert len(ranks()) == 2
        proc.kill()
        proc.wait()
        deadline = time.time() + 30
        while ranks():
            assert time.time() < deadline, "the processes train on without their launcher"
            time.sleep(0.2)
    finally:
        for pid in ranks():
            os.kill(int(pid), signal.SIGKILL)
    assert load_checkpoint(out / "ckpt.pt")["iter_num"] >= 3


def test_nproc_a_signal_to_one_rank_is_named_where_it_saves(tmp_path, data_dir):
    """SIGTERM to rank 1 alone: all ranks stop and rank 0 saves, as before, but its line said only "a peer's
    signal". The ranks' signals now travel with their random state to rank 0, which names signal and rank."""
    out = tmp_path / "out"
    proc, ranks = nproc_training(out, data_dir, subprocess.PIPE)
    try:
        environ = lambda pid: dict(v.split("=", 1) for v in Path(f"/proc/{pid}/environ").read_text().split("\0") if "=" in v)
        rank = {environ(pid)["RANK"]: pid for pid in ranks()}
        os.kill(int(rank["1"]), signal.SIGTERM)
        stdout, stderr = proc.communicate(timeout=60)
    finally:
        proc.kill()
        for pid in ranks():
            os.kill(int(pid), signal.SIGKILL)
    assert proc.returncode == 128 + signal.SIGTERM, stderr
    ckpt = load_checkpoint(out / "ckpt.pt")
    assert ckpt["stopped_by"] == "SIGTERM to rank 1"
    assert f"SIGTERM to rank 1 at iter {ckpt['iter_num']}: saved {out}/ckpt.pt" in stdout, stdout


def test_nproc_a_stop_in_the_first_iteration_saves_nothing_as_it_says(tmp_path, data_dir):
    """Under DDP an iteration is not cut short between its collectives: a SIGTERM during the first one said
    "nothing trained yet, nothing saved", and then the iteration completed and ckpt.pt was saved at iter 1
    (found by a fresh user's pass). A stop agreed at the iteration's collective now drops it, as a stop inside
    a single process's iteration does: nothing is saved and the new run's folder goes."""
    out = tmp_path / "out"
    env = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}
    big = ("--nproc=2", "--batch_size=8192", "--block_size=64", "--eval_iters=1", "--max_iters=100")  # ~3 s a step
    started = start(train_cmd(out, data_dir, *big), env=env)
    seconds, stderr = stop_after(started, "step 0:", signal.SIGTERM, delay=0.1)
    stdout = "".join(started[1])
    assert started[0].returncode == 128 + signal.SIGTERM, stderr
    assert stderr.strip() == "SIGTERM: stopping; nothing trained yet, nothing saved", stderr
    assert "iter 0:" not in stdout and "saved" not in stdout, stdout
    assert not out.exists()


def test_closed_stdout_stops_saves_and_says_so_on_stderr(tmp_path, data_dir):
    """train.py | head: the reader going away mid-run is a stop, not the end: ckpt.pt is saved, one stderr line
    says so and how to continue, and the exit code is 141 (128 + SIGPIPE), not 0 with the work lost."""
    out = tmp_path / "out"
    cmd = [sys.executable, str(ROOT / "train.py"), f"--data_dir={data_dir}", f"--out_dir={out}", *TINY,
           "--max_iters=1000000", "--eval_interval=100000", "--lr_decay_iters=1000000"]
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        while not proc.stdout.readline().startswith("iter 2:"):  # training has begun: a couple of lines, then go
            assert proc.poll() is None
        proc.stdout.close()
        stderr = proc.stderr.read()
        proc.wait(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode == 141, stderr
    lines = stderr.splitlines()
    assert len(lines) == 1 and re.fullmatch(rf"stdout closed at iter (\d+): stopped and saved {out}/ckpt.pt; "
                                            r"continue with --init_from=resume", lines[0]), stderr
    ckpt = load_checkpoint(out / "ckpt.pt")
    assert ckpt["iter_num"] == int(re.search(r"iter (\d+)", lines[0])[1]) >= 3
    model_from_checkpoint(ckpt)  # loadable
    resumed = run_train("--init_from=resume", f"--max_iters={ckpt['iter_num'] + 1}", "--eval_interval=100000",
                        data=data_dir, out=out)
    assert resumed.returncode == 0, resumed.stderr


def test_closed_stdout_and_stderr_in_one_pipe_stop_save_and_exit_141(tmp_path, data_dir):
    """train.py 2>&1 | head: the stop's line goes to the same closed pipe. Writing it ended the run with exit
    code 0, so train.py && sample.py went on as if training had finished (a fresh user's pass): the
    checkpoint is saved and the exit code is 141, as with stdout alone."""
    out = tmp_path / "out"
    cmd = [sys.executable, str(ROOT / "train.py"), f"--data_dir={data_dir}", f"--out_dir={out}", *TINY,
           "--max_iters=1000000", "--eval_interval=100000", "--lr_decay_iters=1000000"]
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        while not proc.stdout.readline().startswith("iter 2:"):
            assert proc.poll() is None
        proc.stdout.close()
        proc.wait(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode == 141
    ckpt = load_checkpoint(out / "ckpt.pt")
    assert ckpt["iter_num"] >= 3
    model_from_checkpoint(ckpt)  # loadable


def test_a_moved_run_without_checkpoint_suggests_no_sample(tmp_path, data_dir):
    """A run that left only a log (stopped before its first checkpoint) is moved aside without pointing
    sample.py at a folder it cannot sample from."""
    out = tmp_path / "out"
    out.mkdir()
    (out / "log.jsonl").write_text(json.dumps({"iter": 0, "val_loss": 2.5}) + "\n")
    line, dest = train.keep_previous_run(str(out))
    assert "moved to" in line and "sample.py" not in line and dest in line, line


def train_cmd(out, data, *args):
    return [sys.executable, str(ROOT / "train.py"), f"--data_dir={data}", f"--out_dir={out}", *TINY, *args]


def start(cmd, **kwargs):
    """cmd in the background, with a reader thread collecting its stdout lines as they come."""
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kwargs)
    lines = []
    reader = threading.Thread(target=lambda: lines.extend(iter(proc.stdout.readline, "")), daemon=True)
    reader.start()
    return proc, lines, reader


def wait_for(proc, lines, text, seconds=120):
    deadline = time.time() + seconds
    while not any(text in line for line in lines):
        assert proc.poll() is None and time.time() < deadline, (text, lines, proc.poll())
        time.sleep(0.05)


def stop_after(started, text, signum, delay=1.0, limit=60, again_after=None):
    """Once a line of stdout holds text, wait delay and send signum (and again again_after seconds later):
    (seconds until the process exited, its stderr). The stdout lines keep arriving in started's list until
    it ends."""
    proc, lines, reader = started
    try:
        wait_for(proc, lines, text)
        time.sleep(delay)
        sent = time.time()
        proc.send_signal(signum)
        if again_after is not None:
            time.sleep(again_after)
            proc.send_signal(signum)
        try:
            proc.wait(timeout=limit)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"still running {limit} s after {signal.Signals(signum).name}") from None
        seconds = time.time() - sent
    finally:
        proc.kill()
    reader.join(10)
    return seconds, proc.stderr.read()


def test_the_same_command_after_a_stop_says_how_to_continue_the_stopped_run(tmp_path, data_dir):
    """Ctrl-C, then the same command again without --init_from=resume: a new run starts and the stopped one
    moves to previous/, which nothing says was stopped short. The stop's ckpt.pt now records what stopped it,
    and the move line says how to continue that run instead; a run that ended (or was resumed to its end)
    gets no such line."""
    out = tmp_path / "out"
    long = ("--max_iters=100000", "--lr_decay_iters=100000", "--eval_interval=100000")
    seconds, stderr = stop_after(start(train_cmd(out, data_dir, *long)), "iter 2:", signal.SIGINT, delay=0)
    stopped = load_checkpoint(out / "ckpt.pt")
    assert stopped["stopped_by"] == "SIGINT", stderr
    again = run_train(*long[1:], "--max_iters=1", data=data_dir, out=out)
    kept = next((out / "previous").iterdir())
    assert again.returncode == 0 and (f"SIGINT stopped it at iter {stopped['iter_num']} of 100,000: to continue that "
                                      "run instead of this new one, stop this one and run the same command with "
                                      f"--init_from=resume --out_dir={kept}") in again.stdout, again.stdout
    resumed = run_train(*long[1:], "--max_iters=6", "--init_from=resume", data=data_dir, out=kept)  # as told
    assert resumed.returncode == 0 and f"resume at iter {stopped['iter_num']}" in resumed.stdout, resumed.stdout
    assert "stopped_by" not in load_checkpoint(out / "ckpt.pt")  # that run ended: the next one is told nothing
    third = run_train(*long[1:], "--max_iters=1", data=data_dir, out=out)
    assert third.returncode == 0 and "held an earlier run" in third.stdout and "stopped it" not in third.stdout
    # a time budget's goal is its seconds (config/tiny.py's max_iters is only a cap)
    budget = {"stopped_by": "SIGTERM", "iter_num": 66, "trained_seconds": 7.4,
              "config": {"max_seconds": 180.0, "max_iters": 5000}}
    assert train.stopped_short(budget) == "SIGTERM stopped it at iter 66, 7 s into its 180 s of training"
    assert train.stopped_short(dict(budget, stopped_by=None)) is None


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_stop_during_a_long_eval_saves_within_seconds(signum, tmp_path, data_dir):
    """A stop mid-eval is acknowledged at once, the eval is dropped (its result is not needed to save), and
    the run saves and exits within seconds. The eval shows its progress meanwhile: it is never silent.
    (Before: the eval of ~10^6 batches, about 10 minutes here, ran to its end first.) The long eval follows
    an iteration (a resume at iter 3, evals every 4), so there is something to save."""
    out = tmp_path / "out"
    assert run_train("--max_iters=3", "--eval_interval=3", data=data_dir, out=out).returncode == 0
    proc, lines, reader = started = start(train_cmd(out, data_dir, "--init_from=resume", "--eval_interval=4",
                                                    "--eval_iters=1000000", "--max_iters=1000000"))
    # SIGINT once the eval has shown its progress (a line every 10 s), SIGTERM a second into the eval
    seconds, stderr = stop_after(started, "eval: " if signum == signal.SIGINT else "iter 3:", signum)
    print(f"{signal.Signals(signum).name} mid-eval: exited {seconds:.1f} s later")
    assert proc.returncode == 128 + signum, stderr
    assert "stopping; saving" in stderr and "Traceback" not in stderr, stderr
    assert seconds < 30  # ~0.5 s when the machine is idle; a loaded one is slower to start and to exit
    assert any("batches in" in line and "left" in line for line in lines) or signum != signal.SIGINT, lines
    assert f"{signum.name} at iter 4: saved {out}/ckpt.pt; continue with --init_from=resume\n" in lines, lines
    ckpt = load_checkpoint(out / "ckpt.pt")
    assert ckpt["iter_num"] == 4
    model_from_checkpoint(ckpt)


@pytest.mark.parametrize("case, signum", [("new", signal.SIGINT), ("resume", signal.SIGTERM),
                                          ("over an earlier run", signal.SIGINT)])
def test_stop_before_the_first_iteration_saves_nothing(case, signum, tmp_path, data_dir):
    """A stop during a new run's first eval, before any optimizer step, saved an untrained iter-0 ckpt.pt,
    which the next run then moved to previous/ as an earlier run. Now the one stop line says nothing is
    saved, the run exits 130 (143) within seconds and leaves no ckpt.pt, nor a log the next run would move
    aside; a resumed run stopped so leaves its checkpoints and log as they were. A new run into an out_dir
    that held a run (the resume forgotten, then Ctrl-C) puts that run back where it was: it had moved it to
    previous/ and left a resume nothing to find. The signal comes once the first eval batch has said how
    long the run would take: inside the eval of ~10^6 batches, for sure."""
    out = tmp_path / "out"
    if case != "new":
        assert run_train("--max_iters=2", "--eval_interval=2", data=data_dir, out=out).returncode == 0
        before = {p.name: digest(p) for p in out.iterdir()}
    args = ["--eval_iters=1000000", "--max_iters=1000000"]
    args += ["--init_from=resume", "--eval_interval=2"] if case == "resume" else []  # the first eval at iter 2
    proc, lines, reader = started = start(train_cmd(out, data_dir, *args))
    seconds, stderr = stop_after(started, "from the first eval batch", signum, delay=0)
    assert proc.returncode == 128 + signum, stderr
    said = {"new": "nothing trained yet, nothing saved",
            "resume": f"nothing trained since {out}/ckpt.pt (iter 2), which stays as it was",
            "over an earlier run": "nothing trained yet, nothing saved; the earlier run goes back from "
                                   f"{out}/previous/"}[case]
    assert len(stderr.splitlines()) == 1 and stderr.startswith(f"{signum.name}: stopping; {said}"), stderr
    assert seconds < 30 and not any("saved" in line for line in lines), lines
    # hours of work ahead are said up front, from the first eval batch, not after the first eval
    assert any(re.match(r"estimate: [\d,]+ iterations x [\d.]+ s \+ [\d,]+ evals x .*: about [\d.]+ (hours|days) to go "
                        r"on cpu, from the first eval batch", line) for line in lines), lines
    if case == "new":  # the folder it made goes: sample.py there said only "no checkpoint", as if a run were
        assert not out.exists()
    else:  # every file as it was, and no previous/ left behind
        assert {p.name: digest(p) for p in out.iterdir()} == before
    if case == "over an earlier run":
        assert run_train("--max_iters=3", "--init_from=resume", data=data_dir, out=out).returncode == 0


# train.py with a SIGINT to itself in the middle of moving an earlier run aside (after its first file), and
# time for Python's handler to run there
MOVE_THEN_STOP = (
    "import os, runpy, signal, sys, time\n"
    "replace = os.replace\n"
    "def replace_then_stop(src, dst):\n"
    "    replace(src, dst)\n"
    "    if os.sep + 'previous' + os.sep in dst and not replace_then_stop.sent:\n"
    "        replace_then_stop.sent = True\n"
    "        os.kill(os.getpid(), signal.SIGINT)\n"
    "        time.sleep(0.5)\n"
    "replace_then_stop.sent = False\n"
    "os.replace = replace_then_stop\n"
    "sys.argv = sys.argv[1:]\n"
    "runpy.run_path(sys.argv[0], run_name='__main__')\n")


def test_stop_while_an_earlier_run_moves_aside_puts_it_back(tmp_path, data_dir):
    """Ctrl-C while a new run moves the earlier run in out_dir to previous/ waits for the move to finish
    and then puts that run back, as a stop before the first iteration does. (Before: Python's handler quit
    mid-move, one file moved and the rest not; between the move and the loop, wandb's init among it, a
    stop quit leaving the earlier run in previous/.)"""
    out = tmp_path / "out"
    assert run_train("--max_iters=2", "--eval_interval=2", data=data_dir, out=out).returncode == 0
    before = {p.name: digest(p) for p in out.iterdir()}
    cmd = [sys.executable, "-c", MOVE_THEN_STOP, *train_cmd(out, data_dir, "--max_iters=4", "--lr_decay_iters=4")[1:]]
    result = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode == 130, result.stderr
    said = result.stderr.splitlines()
    assert len(said) == 1 and said[0].startswith("SIGINT: stopping; nothing trained yet, nothing saved; the earlier "
                                                 f"run goes back from {out}/previous/"), said
    assert {p.name: digest(p) for p in out.iterdir()} == before  # every file as it was, no previous/ left
    assert not any("saved" in line for line in result.stdout.splitlines()), result.stdout


def first_draw(micro_batches):
    """The data sampler's state after a run's first iteration drew its micro_batches windows of 4 (TINY)."""
    sampler = torch.Generator().manual_seed(1337)
    torch.randint(5600 - 16, (micro_batches * 4,), generator=sampler)  # get_batch's draw, make_dataset's 5600
    return sampler.get_state()


def test_stop_mid_iteration_saves_the_last_complete_one(tmp_path, data_dir):
    """Iterations of 4,000 micro-batches (~6 s): a stop between micro-batches of the second drops it and
    saves the state after the first (the data sampler included, so a resume redraws the same batches)."""
    out = tmp_path / "out"
    proc, lines, reader = started = start(train_cmd(out, data_dir, "--gradient_accumulation_steps=4000",
                                                    "--max_iters=10"))
    seconds, stderr = stop_after(started, "iter 0:", signal.SIGINT, delay=0.5)
    assert proc.returncode == 130 and "Traceback" not in stderr, stderr
    assert seconds < 20, seconds
    ckpt = load_checkpoint(out / "ckpt.pt")
    assert ckpt["iter_num"] == 1
    assert torch.equal(ckpt["sampler"]["generator"], first_draw(4000))


# train.py with the first attention call of its second eval or second training step (after one iteration:
# something to save) made one long call into C++ (a 6144^2 matrix to the 16th power, ~1.9 TFLOP on one
# thread: 20 s or more), as a 100,000-token attention is: Python cannot run a signal handler until it returns
ONE_LONG_OP = (
    "import os, runpy, sys, torch\n"
    "import torch.nn.functional as F\n"
    "sdpa, where = F.scaled_dot_product_attention, sys.argv.pop(1)\n"
    "before = {'eval': 4, 'train': 2, 'first': 0}[where]  # TINY's calls in a first eval (2 + 2) or iteration (2)\n"
    "def attention(*args, **kwargs):\n"
    "    if where.replace('first', 'eval') == ('train' if torch.is_grad_enabled() else 'eval'):  # first: iter 0's eval\n"
    "        attention.calls += 1\n"
    "        if attention.calls == before + 1:\n"
    "            a = torch.rand(6144, 6144) / 6144\n"
    "            os.write(2, b'long op\\n')\n"
    "            torch.linalg.matrix_power(a, 16)\n"
    "    return sdpa(*args, **kwargs)\n"
    "attention.calls = 0\n"
    "F.scaled_dot_product_attention = attention\n"
    "sys.argv = sys.argv[1:]\n"
    "runpy.run_path(sys.argv[0], run_name='__main__')\n")


@pytest.mark.parametrize("where", ["eval", "train"])
def test_stop_inside_one_long_operation_is_heard_at_once_and_saves(where, tmp_path, data_dir):
    """A stop while the main thread is inside one long C++ call (where Python's own handler would wait for
    it to return: 100-117 s for --block_size=100000 --batch_size=1, measured) is acknowledged at once, and
    ckpt.pt is saved as it was after the last complete iteration, within seconds."""
    out = tmp_path / "out"
    evals = ["--eval_interval=1"] if where == "eval" else []  # the second eval at iter 1 (iter 0's saves nothing)
    cmd = [sys.executable, "-c", ONE_LONG_OP, where, *train_cmd(out, data_dir, "--max_iters=10", *evals)[1:]]
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    said = []  # (time, line) of stderr
    reader = threading.Thread(target=lambda: said.extend((time.time(), line) for line in iter(proc.stderr.readline, "")),
                              daemon=True)
    reader.start()
    try:
        deadline = time.time() + 120
        while not any(line == "long op\n" for _, line in said):
            assert proc.poll() is None and time.time() < deadline, (said, proc.poll())
            time.sleep(0.05)
        time.sleep(0.5)
        sent = time.time()
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            raise AssertionError("still running 60 s after SIGINT") from None
        seconds = time.time() - sent
        stdout = proc.stdout.read()
    finally:
        proc.kill()
    reader.join(10)
    heard = [t - sent for t, line in said if line.startswith("SIGINT: stopping")]
    assert proc.returncode == 130 and "Traceback" not in "".join(line for _, line in said), said
    assert heard and heard[0] < 3, said  # at once, though Python's handler cannot run yet
    assert seconds < 12, seconds  # the long call alone takes 20 s or more
    assert "SIGINT at iter 1: saved" in stdout, stdout
    ckpt = load_checkpoint(out / "ckpt.pt")
    assert ckpt["iter_num"] == 1  # an interrupted iteration is dropped: its batch is drawn again on resume
    assert torch.equal(ckpt["sampler"]["generator"], first_draw(2))
    model_from_checkpoint(ckpt)


@pytest.mark.parametrize("where", ["between operations", "inside one long operation"])
def test_a_stop_sent_twice_at_once_saves(where, tmp_path, data_dir):
    """GNU timeout sends SIGTERM to the command and then to its process group: two, a moment apart. The
    second was taken for "SIGTERM again" and the run quit without saving (1 run in ~19 under timeout; every
    time with the two 20 ms apart). The same signal within Stopper.ECHO is now the same stop: saved, one line.
    Iterations of 4,000 micro-batches are cut between operations; ONE_LONG_OP holds the eval at iter 1."""
    out = tmp_path / "out"
    cmd = (train_cmd(out, data_dir, "--gradient_accumulation_steps=4000", "--max_iters=10")
           if where == "between operations" else
           [sys.executable, "-c", ONE_LONG_OP, "eval", *train_cmd(out, data_dir, "--max_iters=10",
                                                                  "--eval_interval=1")[1:]])
    proc, lines, reader = started = start(cmd)
    seconds, stderr = stop_after(started, "iter 0:", signal.SIGTERM, delay=0.5, again_after=0.02)
    assert proc.returncode == 143 and seconds < 12, (seconds, stderr)
    assert stderr.replace("long op\n", "") == (f"SIGTERM: stopping; saving {out}/ckpt.pt as it was after the last "
                                               "complete iteration (SIGTERM again quits without saving)\n"), stderr
    assert "SIGTERM at iter 1: saved" in "".join(lines), lines
    assert load_checkpoint(out / "ckpt.pt")["iter_num"] == 1


def test_a_stop_inside_one_long_operation_before_anything_trained_leaves_no_folder(tmp_path, data_dir):
    """A stop while iter 0's eval is held in one long call: the watching thread ends the process (nothing to
    save), and os._exit ran no finally, so the out_dir the run had made stayed, empty, against the README's
    word (a fresh user's pass, with --block_size=100000). It goes now, with the folders made for it."""
    out = tmp_path / "new" / "out"
    cmd = [sys.executable, "-c", ONE_LONG_OP, "first", *train_cmd(out, data_dir, "--max_iters=10")[1:]]
    code, seconds, stderr = ctrl_c_in_long_op(cmd, 0.5)
    assert code == 130 and seconds < 12, (seconds, stderr)
    assert stderr.splitlines()[-1] == "SIGINT: stopping; nothing trained yet, nothing saved", stderr
    assert not (tmp_path / "new").exists()


def ctrl_c_in_long_op(cmd, *waits):
    """Run cmd until it says "long op" on stderr, then wait and send SIGINT for each of waits in turn:
    (exit code, seconds from the first SIGINT to the exit, stderr after "long op")."""
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stderr.readline() == "long op\n"
        sent = None
        for wait in waits:
            time.sleep(wait)
            sent = sent or time.time()  # the first SIGINT's time
            proc.send_signal(signal.SIGINT)
        stderr = proc.communicate(timeout=120)[1]
        return proc.returncode, time.time() - sent, stderr
    finally:
        proc.kill()


def test_second_stop_inside_one_long_operation_quits_without_saving(tmp_path, data_dir):
    """Ctrl-C again, while one long call holds the main thread, quits at once without saving, as said
    (the long call is in the eval at iter 1: the first Ctrl-C would have saved iteration 0)."""
    out = tmp_path / "out"
    cmd = [sys.executable, "-c", ONE_LONG_OP, "eval",
           *train_cmd(out, data_dir, "--max_iters=10", "--eval_interval=1")[1:]]
    code, seconds, stderr = ctrl_c_in_long_op(cmd, 0.5, 0.6)  # a second Ctrl-C, not the first one's echo (ECHO)
    assert code == 130 and seconds < 12, (seconds, stderr)
    assert stderr.splitlines()[-2:] == [f"SIGINT: stopping; saving {out}/ckpt.pt as it was after the last complete "
                                        "iteration (Ctrl-C again quits without saving)",
                                        "SIGINT: quitting without saving"], stderr
    assert not (out / "ckpt.pt").exists()


LONG_PLOT = (  # train.py with loss.png's drawing slow, and the interpreter's teardown after it too
    "import atexit, os, sys, time, types\n"
    "def use(*args):\n"
    "    os.write(2, b'long op\\n')\n"
    "    time.sleep(60)\n"
    "sys.modules['matplotlib'] = types.SimpleNamespace(use=use)\n"
    "atexit.register(time.sleep, 60)  # as unwinding torch and matplotlib can take seconds on a busy host\n"
    "sys.argv = sys.argv[1:]\n"
    "import runpy\n"
    "runpy.run_path(sys.argv[0], run_name='__main__')\n")


def test_a_stop_once_all_is_saved_quits_at_once(tmp_path, data_dir):
    """Ctrl-C while loss.png is drawn, after the run has saved everything: it said "quitting; everything is
    saved" and then unwound the drawing and the interpreter (4 s on a busy host). Now it ends at once."""
    out = tmp_path / "out"
    cmd = [sys.executable, "-c", LONG_PLOT, *train_cmd(out, data_dir, "--max_iters=2", "--eval_interval=2",
                                                       "--lr_decay_iters=2")[1:]]
    code, seconds, stderr = ctrl_c_in_long_op(cmd, 0)
    assert code == 130 and seconds < 20, (seconds, stderr)
    assert stderr.splitlines() == ["SIGINT: quitting; everything is saved"], stderr
    assert load_checkpoint(out / "ckpt.pt")["iter_num"] == 2


def test_stop_before_training_begins_exits_at_once(tmp_path):
    """SIGTERM while the data is being prepared (a slow prepare.py): one line, exit 143, nothing left running."""
    folder = tmp_path / "ds"
    folder.mkdir()
    (folder / "prepare.py").write_text("import time\ntime.sleep(120)\n")
    proc, lines, reader = started = start(train_cmd(tmp_path / "out", folder))
    seconds, stderr = stop_after(started, "running its prepare.py", signal.SIGTERM)
    assert proc.returncode == 143 and "Traceback" not in stderr, stderr
    assert stderr.strip().splitlines() == ["SIGTERM: stopped before training began"]


def test_block_size_that_cannot_fit_is_refused_before_allocating(tmp_path):
    """--block_size=100000: the memory a micro-batch needs (sizing.py's lower bound) is checked against the
    machine's before anything is allocated. (Before: 16 GB allocated, then no output for 10 minutes.)"""
    make_dataset(tmp_path / "long", n_train=200_000, n_val=110_000)
    result = run_train("--block_size=100000", "--batch_size=64", "--n_layer=8", "--n_embd=1024", "--n_head=8",
                       data=tmp_path / "long", out=tmp_path / "out")
    assert_one_line_error(result, 2, "block_size=100000 x batch_size=64 needs at least", "available",
                          "lower batch_size or block_size")
    assert not (tmp_path / "out").exists()


def test_a_small_models_state_is_stated_in_mib_with_its_optimizer(monkeypatch):
    """The refusal's figures: a small Muon model's state was "0.0 GiB of weights, gradients and AdamW"."""
    config = GPTConfig(n_layer=3, n_head=4, n_embd=128, block_size=64, vocab_size=65, bias=False)
    state = train.memory_bytes(config, optimizer="muon")["train_state"]
    monkeypatch.setattr(train, "available_memory", lambda device_type: state + 2**20)  # the state, and 1 MiB more
    with pytest.raises(train.ConfigError, match=r"MiB of activations \+ [1-9][\d.]* MiB of weights, gradients and "
                                          r"Muon and AdamW; sizing.py\) but cpu has [\d.]+ MiB available: lower "):
        train.check_fits(config, 32, "cpu", optimizer="muon")


def test_a_model_too_big_for_any_batch_is_refused_as_such(monkeypatch):
    """Where the weights, gradients and optimizer state alone exceed the memory, lowering batch_size or
    block_size (which the refusal used to advise) cannot help: it names the model's size instead."""
    config = GPTConfig(n_layer=3, n_head=4, n_embd=128, block_size=64, vocab_size=65, bias=False)
    monkeypatch.setattr(train, "available_memory", lambda device_type: 2**20)  # 1 MiB: not even the weights fit
    with pytest.raises(train.ConfigError, match=r"^the model alone \(n_layer=3, n_embd=128\) needs [\d.]+ MiB for "
                                          r"weights, gradients and AdamW \(sizing.py\) but cpu has 1.0 MiB "
                                          r"available: a smaller model$"):
        train.check_fits(config, 1, "cpu")


def test_time_left_counts_iterations_and_evals():
    # 100 iterations from iter 0, evals at 0, 25, 50, 75, 100
    assert train.time_left(0, 100, 25, 2.0, 10.0)[0] == 100 * 2.0 + 5 * 10.0
    # from iter 3 of 10 with evals every 4: at 4, 8, and the last (10)
    seconds, line = train.time_left(3, 10, 4, 60.0, 600.0)
    assert seconds == 7 * 60 + 3 * 600 and line == "7 iterations x 60.00 s + 3 evals x 10 min: about 37 min to go"
    assert train.time_left(0, 5000, 250, 2.0, 600.0)[1].endswith("about 6.3 hours to go")
    # one iteration is not "1 iterations" (a fresh user's pass, --block_size=100000)
    assert train.time_left(0, 1, 250, 2.0, 600.0)[1] == "1 iteration x 2.00 s + 2 evals x 10 min: about 20 min to go"
    assert train.time_left(1, 2, 250, 2.0, 600.0)[1].startswith("1 iteration x 2.00 s + 1 eval x 10 min")


def test_nonfinite_loss_stops_and_keeps_last_checkpoint(tmp_path, data_dir):
    out = tmp_path / "out"
    assert run_train("--max_iters=3", "--eval_interval=3", data=data_dir, out=out).returncode == 0
    before = digest(out / "ckpt.pt"), digest(out / "best.pt")
    # a learning rate of 1e30 turns the weights to inf within a step: the next losses are nan
    for extra in (["--eval_interval=1"], ["--eval_interval=1000"]):  # caught by the eval, or by the training loss
        result = run_train("--max_iters=20", "--init_from=resume", "--learning_rate=1e30", *extra,
                           data=data_dir, out=out)
        assert_one_line_error(result, 1, "not finite" if extra == ["--eval_interval=1"] else "loss is nan",
                              f"{out}/ckpt.pt (iter 3) is the last good checkpoint")
        assert (digest(out / "ckpt.pt"), digest(out / "best.pt")) == before
    # a new run that goes nan before its first save names no checkpoint: there is none
    fresh = tmp_path / "fresh"
    result = run_train("--max_iters=20", "--learning_rate=1e30", "--eval_interval=1000", data=data_dir, out=fresh)
    assert_one_line_error(result, 1, "loss is nan", f"stopped, nothing saved: no eval had written {fresh}/ckpt.pt yet")
    assert not (fresh / "ckpt.pt").exists()
    # a new run over an earlier one: it had moved that run aside, and puts it back (it was left in previous/,
    # with the failed run's log.jsonl and meta.json in its place, for the next run to move aside as a run)
    earlier = {name: digest(out / name) for name in os.listdir(out)}
    result = run_train("--max_iters=20", "--learning_rate=1e30", "--eval_interval=1000", data=data_dir, out=out)
    assert_one_line_error(result, 1, "loss is nan", f"no eval had written {out}/ckpt.pt yet; the earlier run is "
                                                    f"back in {out}")
    assert {name: digest(out / name) for name in os.listdir(out)} == earlier


# ----------------------------------------------------------------------------- distributed

# adamw under torchrun runs with -m slow only: its DDP code is adamw's under --nproc, its launch muon's here
@pytest.mark.parametrize("optimizer, launcher", [pytest.param("adamw", "torchrun", marks=pytest.mark.slow),
                                                 ("muon", "torchrun"), ("adamw", "nproc")])
def test_two_process_ddp_equals_one_process_accumulation(optimizer, launcher, tmp_path, data_dir):
    """torchrun (or train.py --nproc=2) with 2 CPU processes (gloo), 2 micro-batches each, against 1 process
    with 4: the same global batch, so the same losses, up to float summation order (relative 1e-5; Muon
    orthogonalises in bfloat16, whose rounding can amplify that order's last bits: relative 1e-3)."""
    args = ["--gradient_accumulation_steps=4", "--max_iters=4", "--lr_decay_iters=4", "--eval_interval=2",
            "--eval_iters=3", f"--optimizer={optimizer}"]
    rel = 1e-5 if optimizer == "adamw" else 1e-3
    one, two = tmp_path / "one", tmp_path / "two"
    single = run_train(*args, data=data_dir, out=one)
    assert single.returncode == 0, single.stderr
    env = dict(os.environ, OMP_NUM_THREADS="1")
    if launcher == "torchrun":
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", "train.py"]
    else:  # glassgpt's own launcher, with no OMP_NUM_THREADS set: it sets it, and nothing warns
        cmd, env = [sys.executable, "train.py", "--nproc=2"], {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}
    ddp = subprocess.run(cmd + [f"--data_dir={data_dir}", f"--out_dir={two}", *TINY, *args], cwd=ROOT,
                         capture_output=True, text=True, timeout=300, env=env)
    assert ddp.returncode == 0, ddp.stderr[-3000:]
    if launcher == "nproc":
        assert ddp.stderr == ""
    assert "| 2 processes x 1 thread |" in ddp.stdout
    assert ddp.stdout.count("scratch at iter 0") == 1  # only rank 0 prints
    (s1, e1), (s2, e2) = losses(one), losses(two)
    assert [i for i, _ in s2] == list(range(4)) and [e[0] for e in e2] == [0, 2, 4]  # one writer: no duplicates
    for (i, a), (j, b) in zip(s1, s2):
        assert i == j and b == pytest.approx(a, rel=rel)
    for a, b in zip(e1, e2):  # eval over ranks: 3 batches shared out 2 + 1, averaged
        assert b == pytest.approx(a, rel=rel)
    ckpt = load_checkpoint(two / "ckpt.pt")
    assert len(ckpt["rng"]["torch"]) == 2  # each process's dropout RNG, for an exact resume


def test_two_processes_end_a_time_budget_together(tmp_path, data_dir):
    """Under DDP the processes agree on the seconds spent (the mean, in the step's one collective), so they
    take the same lr and stop at the same iteration: a process that stopped alone would hang the other."""
    out = tmp_path / "out"
    env = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}
    ddp = subprocess.run([sys.executable, "train.py", "--nproc=2", f"--data_dir={data_dir}", f"--out_dir={out}", *TINY,
                          "--max_iters=1000000", "--lr_decay_iters=1000000", "--eval_interval=100000",
                          "--max_seconds=2"], cwd=ROOT, capture_output=True, text=True, timeout=120, env=env)
    assert ddp.returncode == 0, ddp.stderr[-3000:]
    steps = [r for r in records(out) if "loss" in r]
    assert len(steps) > 10 and [r["iter"] for r in records(out) if "val_loss" in r] == [0, len(steps)]
    assert 2.0 <= load_checkpoint(out / "ckpt.pt")["trained_seconds"] < 4.0


def test_config_error_under_torchrun_is_one_line_from_rank_0(tmp_path):
    """Each process meets the same bad key, before the processes connect: one error line, every process
    exits 2. (torchrun itself then reports the failed processes and exits 1: that part is torchrun's.)"""
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", "train.py",
           "--n_layr=2", f"--out_dir={tmp_path / 'out'}"]
    result = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300,
                            env=dict(os.environ, OMP_NUM_THREADS="1"))
    errors = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    assert errors == ["error: unknown config key 'n_layr' on the command line (did you mean n_layer?)"], result.stderr
    assert "exitcode  : 2" in result.stderr  # torchrun's report: the process that failed first exited 2


@pytest.mark.slow
def test_ctrl_c_under_torchrun_mid_eval_saves(tmp_path, data_dir):
    """Ctrl-C reaches torchrun, which passes SIGINT to each process: mid-eval, they agree to stop (a
    collective after every eval batch), save and exit 130. torchrun's own report follows (its exit 1).
    The long eval follows an iteration (a resume at iter 3, evals every 4), so there is something to save."""
    out = tmp_path / "out"
    assert run_train("--max_iters=3", "--eval_interval=3", data=data_dir, out=out).returncode == 0
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", "train.py",
           f"--data_dir={data_dir}", f"--out_dir={out}", *TINY, "--eval_iters=1000000", "--max_iters=10",
           "--init_from=resume", "--eval_interval=4"]
    proc, lines, reader = started = start(cmd, env=dict(os.environ, OMP_NUM_THREADS="1"))
    seconds, stderr = stop_after(started, "iter 3:", signal.SIGINT, delay=2)
    assert stderr.count("SIGINT: stopping; saving") == 1, stderr  # rank 0 speaks for both
    assert seconds < 30
    assert any("SIGINT at iter 4: saved" in line for line in lines), lines
    assert len(load_checkpoint(out / "ckpt.pt")["rng"]["torch"]) == 2


def test_nproc_bad_input_is_one_line_and_exit_2(tmp_path, data_dir):
    """train.py --nproc=2 checks the config once, before starting any process: one line, exit 2. What only
    the processes can find (here a prepare.py that fails, saying why) ends both, still with one line and
    exit 2. (torchrun adds its ChildFailedError report and exits 1.)"""
    result = subprocess.run([sys.executable, "train.py", "--nproc=2", "--n_layr=2", f"--out_dir={tmp_path / 'out'}"],
                            cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert_one_line_error(result, 2, "n_layr")
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "prepare.py").write_text("import sys\nprint('error: no text to prepare', file=sys.stderr)\nsys.exit(2)\n")
    result = subprocess.run(train_cmd(tmp_path / "out", bad, "--nproc=2", "--max_iters=2"), cwd=ROOT,
                            capture_output=True, text=True, timeout=300)
    assert_one_line_error(result, 2, "no text to prepare")


def children(pid):
    """The pids of a process's children (Linux)."""
    found = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            found += [int(c) for c in (task / "children").read_text().split()]
        except OSError:
            pass
    return found


def kill_all(pids):
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def test_nproc_ctrl_c_saves_and_exits_130(tmp_path, data_dir):
    """train.py --nproc=2: the processes run in their own session, so a Ctrl-C reaches only the launcher,
    which passes it on once: both processes stop together, rank 0 says so once, ckpt.pt holds both
    processes' random state, and the exit code is theirs, 130 (torchrun's is 1, after a traceback)."""
    out = tmp_path / "out"
    cmd = [sys.executable, "train.py", f"--data_dir={data_dir}", f"--out_dir={out}", *TINY,
           "--max_iters=1000000", "--eval_interval=100000", "--nproc=2"]
    proc, lines, reader = started = start(cmd)
    workers = []
    try:
        wait_for(proc, lines, "iter 3:")
        workers = children(proc.pid)
        assert len(workers) == 2 and all(os.getsid(w) == w for w in workers)  # each its own session
        seconds, stderr = stop_after(started, "iter 3:", signal.SIGINT, delay=0)
    finally:
        kill_all(workers)
    assert proc.returncode == 130, stderr
    assert stderr.count("SIGINT: stopping;") == 1 and "Traceback" not in stderr, stderr
    assert seconds < 30
    assert any("SIGINT at iter" in line and "saved" in line for line in lines), lines
    ckpt = load_checkpoint(out / "ckpt.pt")
    assert ckpt["iter_num"] >= 4 and len(ckpt["rng"]["torch"]) == 2
    assert not any(Path(f"/proc/{w}").exists() for w in workers)


@pytest.mark.slow
def test_nproc_a_failed_process_ends_the_others(tmp_path, data_dir):
    """A process killed mid-run (SIGKILL: it saves nothing) would leave its peer waiting in a collective: the
    peer, rank 0, saves ckpt.pt as it was after the last complete iteration, alone, and says so in one line
    (not gloo's traceback); the launcher ends what is left, says which process was killed and exits non-zero
    within seconds, leaving no process behind. Resumed with dropout 0, the run continues exactly."""
    out, whole = tmp_path / "out", tmp_path / "whole"
    base = [sys.executable, "train.py", f"--data_dir={data_dir}", *TINY, "--lr_decay_iters=40", "--nproc=2"]
    proc, lines, reader = start(base + ["--max_iters=1000000", "--eval_interval=100000", f"--out_dir={out}"])
    workers = []
    try:
        wait_for(proc, lines, "iter 3:")
        workers = children(proc.pid)
        os.kill(workers[1], signal.SIGKILL)
        proc.wait(timeout=60)
    finally:
        proc.kill()
        kill_all(workers)
    assert proc.returncode == 128 + signal.SIGKILL
    peer, launcher = proc.stderr.read().splitlines()  # gloo says "closed" or "reset" by peer, by timing
    n = load_checkpoint(out / "ckpt.pt")["iter_num"]
    assert n >= 4 and re.fullmatch(
        r"rank 0: another process of this run is gone \(gloo: (closed|reset) by peer\), so this one stops too; "
        rf"saved {re.escape(str(out))}/ckpt.pt at iter {n}, its last complete iteration \(continue with "
        r"--init_from=resume\)", peer), peer
    assert launcher == "rank 1 was killed by SIGKILL, so the run ended"
    time.sleep(0.5)
    assert not any(Path(f"/proc/{w}").exists() and "zombie" not in Path(f"/proc/{w}/status").read_text()
                   for w in workers)
    ckpt = load_checkpoint(out / "ckpt.pt")
    assert ckpt["stopped_by"] == "a lost DDP process" and len(ckpt["rng"]["torch"]) == 1
    # the iteration the kill cut short is not in the checkpoint: resumed, it runs again as in an unbroken run
    ends = ["--max_iters=" + str(n + 2), "--eval_interval=" + str(n + 2)]
    resumed = subprocess.run(base + ends + ["--init_from=resume", f"--out_dir={out}"], cwd=ROOT,
                             capture_output=True, text=True, timeout=300)
    assert resumed.returncode == 0, resumed.stderr
    unbroken = subprocess.run(base + ends + [f"--out_dir={whole}"], cwd=ROOT, capture_output=True, text=True,
                              timeout=300)
    assert unbroken.returncode == 0, unbroken.stderr
    assert losses(out)[0][-2:] == losses(whole)[0][-2:] and [i for i, _ in losses(whole)[0][-2:]] == [n, n + 1]


def test_init_from_hugging_face_folder(tmp_path, data_dir):
    """init_from=<a GPT-2 saved by transformers>: imported, its 32-position context cropped to block_size 16."""
    transformers = pytest.importorskip("transformers")
    hf_config = transformers.GPT2Config(vocab_size=VOCAB + 4, n_positions=32, n_embd=16, n_layer=1, n_head=2)
    torch.manual_seed(0)
    transformers.GPT2LMHeadModel(hf_config).save_pretrained(tmp_path / "hf")
    out = tmp_path / "out"
    result = run_train(f"--init_from={tmp_path / 'hf'}", "--max_iters=2", "--eval_interval=2", data=data_dir, out=out)
    assert result.returncode == 0, result.stderr
    ckpt = load_checkpoint(out / "ckpt.pt")
    assert ckpt["model_args"]["block_size"] == 16 and ckpt["model_args"]["vocab_size"] == VOCAB + 4
    assert ckpt["model"]["transformer.wpe.weight"].shape == (16, 16)
    assert "has not improved" not in result.stdout, result.stdout  # from random weights: better at once
    # a fine-tune that ends no better than its start said only its best val loss, which best.pt (the evals
    # after the start) holds (a fresh user's pass); at lr 0 the weights stay, and the val loss with them
    still = run_train(f"--init_from={tmp_path / 'hf'}", "--max_iters=2", "--eval_interval=2", "--learning_rate=0",
                      "--min_lr=0", data=data_dir, out=tmp_path / "still")
    start = re.search(r"step 0: train loss [\d.]+, val loss ([\d.]+)", still.stdout).group(1)
    assert still.returncode == 0 and still.stdout.strip().splitlines()[-1].endswith(
        f"; not below {tmp_path / 'hf'}'s own val loss, {start} at iter 0: this training has not improved on the "
        "model it started from"), still.stdout
    # a model key set to something else than the weights have is an error, not silently ignored
    clash = run_train(f"--init_from={tmp_path / 'hf'}", "--n_embd=32", "--max_iters=2", data=data_dir,
                      out=tmp_path / "out2")
    assert clash.returncode == 2, clash.stderr  # (transformers may print its own notes while loading)
    assert "error: n_embd=32 (on the command line)" in clash.stderr and "has n_embd=16" in clash.stderr


def test_init_from_gpt2_without_network_is_one_line_at_once(tmp_path, data_dir, offline_hf):
    """No network, nothing cached: one line saying how to use a local folder, in no more time than
    rejecting a bad name takes (Hugging Face's client would retry for ~25 s, printing each failure)."""
    pytest.importorskip("transformers")
    env = offline_hf("unreachable")
    cmd = [sys.executable, "train.py", f"--data_dir={data_dir}", f"--out_dir={tmp_path / 'out'}", *TINY]
    t0 = time.perf_counter()
    subprocess.run(cmd + ["--init_from=gpt2-xxl"], cwd=ROOT, env=env, capture_output=True, timeout=300)
    baseline, t0 = time.perf_counter() - t0, time.perf_counter()
    result = subprocess.run(cmd + ["--init_from=gpt2"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    seconds = time.perf_counter() - t0
    assert_one_line_error(result, 2, "gpt2", "not reachable", "--init_from=FOLDER")
    assert seconds < baseline + 10, (seconds, baseline)
    assert not (tmp_path / "out" / "ckpt.pt").exists()


def test_compile_failure_falls_back_without_a_trace(tmp_path, data_dir, monkeypatch):
    """--compile=true where torch.compile breaks mid-trial (after a forward has drawn dropout masks and made
    gradients): a warning, then the same run, loss for loss, as without compile."""
    def broken_compile(model):
        def forward(*args):
            model(*args)[1].backward()
            raise RuntimeError("no C++ compiler here")
        return forward
    monkeypatch.setattr(torch, "compile", broken_compile)
    result = run_train("--dropout=0.2", "--max_iters=3", "--eval_interval=3", "--compile=true", data=data_dir,
                       out=tmp_path / "a")
    assert result.returncode == 0, result.stderr
    assert "warning: torch.compile failed (RuntimeError: no C++ compiler here)" in result.stderr
    assert result.stdout.startswith("compiling the model (torch.compile)")  # not a silent minute
    assert run_train("--dropout=0.2", "--max_iters=3", "--eval_interval=3", data=data_dir,
                     out=tmp_path / "b").returncode == 0
    assert losses(tmp_path / "a") == losses(tmp_path / "b")


def test_closed_stdout_under_eval_only_says_so_and_exits_141(tmp_path, data_dir):
    """train.py --eval_only=true ... | head -1: the reader goes after the first line. eval_only saves nothing, so
    it stops there, and one stderr line says so, with a closed stdout's exit code (141), not a silent 141."""
    from dataclasses import asdict
    from model import GPT, GPTConfig
    out = tmp_path / "out"  # a run to evaluate, as train.py saves it, built here rather than trained
    out.mkdir()
    config = GPTConfig.from_dict({**config_keys(vars(train)), "n_layer": 1, "n_head": 2, "n_embd": 16,
                                  "block_size": 16, "vocab_size": VOCAB})
    model = GPT(config)
    save_checkpoint({"model": model.state_dict(), "model_args": asdict(config), "config": {"optimizer": "adamw"},
                     "optimizer": model.configure_optimizers(0.1, 1e-2, (0.9, 0.99), "cpu").state_dict(),
                     "iter_num": 4, "best_val_loss": 3.0, "trained_seconds": 0.0,
                     "rng": {"torch": [torch.get_rng_state()]}, "sampler": {"generator": torch.Generator().get_state()}},
                    str(out / "ckpt.pt"))
    cmd = [sys.executable, str(ROOT / "train.py"), f"--data_dir={data_dir}", f"--out_dir={out}", *TINY,
           "--eval_only=true", "--init_from=resume", "--eval_iters=300"]  # an eval that outlasts the close
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        first = proc.stdout.readline()
        proc.stdout.close()
        stderr = proc.stderr.read()
        proc.wait(timeout=120)
    finally:
        proc.kill()
    assert "parameters" in first, stderr
    assert proc.returncode == 141 and stderr == "stdout closed: stopped; eval_only has nothing to save\n", stderr
    assert sorted(p.name for p in out.iterdir()) == ["ckpt.pt"]


def test_files_of_no_run_are_moved_aside_as_what_they_are(tmp_path):
    """A folder holding a log.jsonl train.py did not write ({"a": 1}, a JSON list, bytes that are not UTF-8)
    was said to hold a run "(iter 0)", or was a traceback; one holding only a meta.json or loss.png had them
    written over in silence. Each is moved aside (nothing is lost) and said to be what it is."""
    cases = {"log": ({"log.jsonl": b'{"a": 1}\n[1, 2]\n{"iter": true}\nr\xe9sum\xe9\n'},
                     "no checkpoint; log.jsonl with no iteration in it"),
             "meta": ({"meta.json": b'{"mine": 1}', "loss.png": b"\x89PNG mine"}, "no checkpoint; loss.png, meta.json")}
    for name, (files, held) in cases.items():
        out = tmp_path / name
        out.mkdir()
        for f, data in files.items():
            (out / f).write_bytes(data)
        (out / "notes.txt").write_text("mine\n")
        line, dest = train.keep_previous_run(str(out))
        assert line == f"{out} held an earlier run ({held}): moved to {dest}"
        assert "-iter" not in os.path.basename(dest) and sorted(os.listdir(dest)) == sorted(files)
        assert all((Path(dest) / f).read_bytes() == data for f, data in files.items())
        assert (out / "notes.txt").read_text() == "mine\n"


def test_a_run_quit_before_its_first_checkpoint_is_said_to_have_only_a_log(tmp_path):
    """A second Ctrl-C quits without saving: a new run's log.jsonl and meta.json stay, with no ckpt.pt. The next
    run said the folder "held an earlier run (iter 0, best val loss 4.3392)", as if it had one to sample."""
    out = tmp_path / "out"
    out.mkdir()
    (out / "log.jsonl").write_text(json.dumps({"iter": 0, "train_loss": 4.4, "val_loss": 4.3392, "lr": 0.0}) + "\n")
    (out / "meta.json").write_text(json.dumps({"tokenizer": "char", "vocab_size": 2, "itos": ["a", "b"]}))
    line, dest = train.keep_previous_run(str(out))
    assert line == f"{out} held an earlier run (no checkpoint; its log.jsonl reaches iter 0, best val loss 4.3392): moved to {dest}"
    assert sorted(os.listdir(dest)) == ["log.jsonl", "meta.json"]


@pytest.mark.parametrize("make, why", [
    (lambda out: (out / "log.jsonl").mkdir(), "its log.jsonl is not a file, and a run writes its own log.jsonl there"),
    (lambda out: (out / "previous").write_text("x"), "its previous is not a folder, and an earlier run there moves "
                                                     "into previous/"),
    (lambda out: (out / "train.bin").write_bytes(b"\0\0"), "it holds a dataset (train.bin): a run's files "
                                                             "go in a folder of their own"),
    # a fresh user's pass: an export's folder (its meta.json replaced, the model moved into previous/), a checkout,
    # config/, a dataset's folder before its prepare.py ran, data/: all took a run's files among their own
    (lambda out: (out / "config.json").write_text("{}"), "it holds a Hugging Face model (config.json): a run's files "
                                                         "go in a folder of their own"),
    (lambda out: (out / "tiny.py").write_text("n_layer = 3\n"), "it holds source code (tiny.py): a run's files go "
                                                                 "in a folder of their own"),
    (lambda out: ((out / "shakespeare").mkdir(), (out / "shakespeare" / "prepare.py").write_text("")),
     f"it holds source code ({os.path.join('shakespeare', 'prepare.py')}): a run's files go in a folder of their own")])
def test_an_out_dir_the_run_cannot_use_is_one_line_before_any_work(tmp_path, make, why):
    """A folder named log.jsonl in out_dir was a traceback after setup (and left a meta.json); a dataset's
    folder as out_dir had its meta.json replaced by the run's. Refused first, nothing written."""
    out = tmp_path / "out"
    out.mkdir()
    make(out)
    before = sorted(p.name for p in out.iterdir())
    with pytest.raises(ConfigError) as e:
        train.check_out_dir(str(out))
    assert str(e.value) == f"cannot use out_dir={str(out)!r}: {why}"
    assert sorted(p.name for p in out.iterdir()) == before


def test_a_runs_folder_that_keeps_its_config_file_is_still_its_out_dir(tmp_path):
    """The refusal of folders with code must not lock a user out of their own run, kept with its config.py."""
    out = tmp_path / "out"
    out.mkdir()
    (out / "my_config.py").write_text("n_layer = 2\n")
    with pytest.raises(ConfigError, match=r"source code \(my_config.py\)"):  # no run there yet: refused
        train.check_out_dir(str(out))
    (out / "ckpt.pt").write_bytes(b"")
    train.check_out_dir(str(out))  # a run's folder: its config.py is the user's own, beside it


def test_the_checkout_itself_is_no_out_dir(tmp_path):
    """--out_dir=. from the checkout put checkpoints among the code, where git add -A would commit them."""
    before = sorted(os.listdir(ROOT))
    result = run_script("train.py", "--out_dir=.", f"--data_dir={tmp_path}", *TINY, "--max_iters=1", cwd=ROOT)  # no data: nothing trains if the check fails
    assert_one_line_error(result, 2, "cannot use out_dir='.': it holds source code (bench.py)")
    assert sorted(os.listdir(ROOT)) == before
