"""
nanoGPT's runs, as nanoGPT's train.py and data/shakespeare_char/prepare.py write them (a ckpt.pt with
model, optimizer, model_args, iter_num, best_val_loss, config; "_orig_mod." keys when compiled; a
meta.pkl pickle beside the data): sample.py and train.py --init_from=resume take them as they are, with
the erf GELU nanoGPT's nn.GELU computes. A meta.pkl that would run code is refused without running it.
"""

import os
import pickle
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import sample
import tokenizer
from checkpoint import is_nanogpt, load_checkpoint, model_from_checkpoint
from configurator import ConfigError
from conftest import run_script
from model import GPT, GPTConfig

ROOT = Path(__file__).resolve().parent.parent
CHARS = "\n !',.:;?ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"


def nanogpt_checkout(root, compiled=False, bias=False, iter_num=40):
    """
    root laid out as a nanoGPT checkout after prepare.py and a run: data/shakespeare_char/{train,val}.bin
    and meta.pkl, out-shakespeare-char/ckpt.pt. Returns the model (erf GELU, as nanoGPT's) it saved.
    """
    data = root / "data" / "shakespeare_char"
    data.mkdir(parents=True)
    rng = np.random.default_rng(0)
    rng.integers(0, len(CHARS), 3000).astype(np.uint16).tofile(data / "train.bin")
    rng.integers(0, len(CHARS), 600).astype(np.uint16).tofile(data / "val.bin")
    with open(data / "meta.pkl", "wb") as f:  # nanoGPT: itos and stoi are dicts
        pickle.dump({"vocab_size": len(CHARS), "itos": dict(enumerate(CHARS)),
                     "stoi": {c: i for i, c in enumerate(CHARS)}}, f)
    model_args = dict(n_layer=2, n_head=2, n_embd=32, block_size=32, bias=bias, vocab_size=len(CHARS), dropout=0.0)
    torch.manual_seed(1)
    model = GPT(GPTConfig(**model_args, activation="gelu"))
    # nanoGPT's configure_optimizers: matrices decay, biases and gains not, in named_parameters order
    params = [p for p in model.parameters()]
    optimizer = torch.optim.AdamW([{"params": [p for p in params if p.dim() >= 2], "weight_decay": 0.1},
                                   {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}], lr=1e-3)
    x = torch.randint(0, len(CHARS), (2, 32))
    model(x, x)[1].backward()
    optimizer.step()
    prefix = "_orig_mod." if compiled else ""
    out = root / "out-shakespeare-char"
    out.mkdir()
    torch.save({  # plain torch.save, as nanoGPT
        "model": {prefix + k: v for k, v in model.state_dict().items()},
        "optimizer": optimizer.state_dict(),
        "model_args": model_args,
        "iter_num": iter_num,
        "best_val_loss": torch.tensor(2.5),  # nanoGPT's estimate_loss returns tensors
        "config": {"out_dir": "out-shakespeare-char", "dataset": "shakespeare_char", "batch_size": 4,
                   "block_size": 32, "gradient_accumulation_steps": 1, "learning_rate": 1e-3, "compile": compiled,
                   "device": "cpu", "dtype": "float32", "bias": bias, "wandb_log": False},
    }, out / "ckpt.pt")
    return model.eval()


@pytest.mark.parametrize("compiled", [False, True])
def test_nanogpt_checkpoint_loads_with_erf_gelu(tmp_path, compiled):
    saved = nanogpt_checkout(tmp_path, compiled=compiled, bias=compiled)
    ckpt = load_checkpoint(tmp_path / "out-shakespeare-char" / "ckpt.pt")  # weights_only=True inside
    assert is_nanogpt(ckpt)
    model = model_from_checkpoint(ckpt).eval()
    assert model.config.activation == "gelu" and model.config.position == "learned" and model.config.norm == "layernorm"
    x = torch.randint(0, len(CHARS), (2, 32))
    assert torch.equal(model(x, x)[0], saved(x, x)[0])
    mlp = model.transformer.h[0].mlp  # nanoGPT's nn.GELU() is the exact erf curve, not GPT-2's tanh one
    h = 30 * torch.randn(4, 32)  # big enough that the two curves differ
    assert torch.equal(mlp(h), mlp.c_proj(F.gelu(mlp.c_fc(h))))
    assert not torch.allclose(mlp(h), mlp.c_proj(F.gelu(mlp.c_fc(h), approximate="tanh")), atol=1e-5)


@pytest.mark.parametrize("compiled", [False, True])
def test_sample_a_nanogpt_run_from_its_checkout(tmp_path, monkeypatch, capsys, compiled):
    """Run from nanoGPT's folder as nanoGPT's sample.py is: meta.pkl from data/<config dataset>/."""
    saved = nanogpt_checkout(tmp_path, compiled=compiled)
    monkeypatch.chdir(tmp_path)
    sample.main(["--out_dir=out-shakespeare-char", "--start=ROMEO:", "--num_samples=1",
                 "--max_new_tokens=20", "--temperature=0", "--device=cpu"])
    out, err = capsys.readouterr()
    assert os.path.join("data", "shakespeare_char", "meta.pkl") in err and "iter 40, best val loss 2.5000" in err
    ids = [CHARS.index(c) for c in "ROMEO:"]
    expect = saved.generate(torch.tensor([ids]), 20, temperature=0)[0].tolist()
    assert out == "".join(CHARS[i] for i in expect) + "\n---------------\n"


def test_meta_flag_and_the_folder_beside_out_dir(tmp_path, monkeypatch, capsys):
    nanogpt_checkout(tmp_path)
    monkeypatch.chdir(ROOT)  # not nanoGPT's folder: found beside out_dir, or named with --meta
    for extra in ([], [f"--meta={tmp_path / 'data' / 'shakespeare_char' / 'meta.pkl'}"]):
        sample.main([f"--out_dir={tmp_path / 'out-shakespeare-char'}", "--num_samples=1", "--max_new_tokens=3",
                     "--start=Hi", "--device=cpu"] + extra)
        assert f"tokenizer from {tmp_path / 'data' / 'shakespeare_char' / 'meta.pkl'}" in capsys.readouterr().err


def test_resume_a_nanogpt_run_warns_and_keeps_its_checkpoint(tmp_path):
    nanogpt_checkout(tmp_path, iter_num=40)
    out = tmp_path / "out-shakespeare-char"
    original = (out / "ckpt.pt").read_bytes()
    again = ("train.py", "--init_from=resume", f"--out_dir={out}",
             f"--data_dir={tmp_path / 'data' / 'shakespeare_char'}",
             "--block_size=32", "--batch_size=4", "--gradient_accumulation_steps=1", "--eval_interval=3",
             "--eval_iters=2", "--bias=false", "--device=cpu", "--dtype=float32", "--compile=false", "--num_threads=1",
             "--max_iters=43")
    result = run_script(*again)
    assert result.returncode == 0, result.stderr
    assert "nanoGPT's" in result.stderr and "not exactly" in result.stderr
    assert (out / "ckpt_nanogpt.pt").read_bytes() == original  # nanoGPT can still resume its own file
    ckpt = load_checkpoint(out / "ckpt.pt")
    assert ckpt["iter_num"] == 43 and not is_nanogpt(ckpt) and ckpt["model_args"]["activation"] == "gelu"
    assert tokenizer.read_meta(out)["itos"] == list(CHARS)  # meta.pkl written out as meta.json for sample.py
    # nanoGPT trains on from glassgpt's checkpoint and saves its own; glassgpt resumes it again. The second
    # copy went nowhere: the warning said "kept as ckpt_nanogpt.pt", which still held the first
    nanogpt_checkout(tmp_path / "later", iter_num=50)
    later = (tmp_path / "later" / "out-shakespeare-char" / "ckpt.pt").read_bytes()
    (out / "ckpt.pt").write_bytes(later)
    result = run_script(*again[:-1], "--max_iters=53")
    assert result.returncode == 0, result.stderr
    assert f"kept as {out / 'ckpt_nanogpt.2.pt'}" in result.stderr, result.stderr
    assert (out / "ckpt_nanogpt.pt").read_bytes() == original
    assert (out / "ckpt_nanogpt.2.pt").read_bytes() == later


def hostile_pickle(marker, protocol=pickle.DEFAULT_PROTOCOL):
    """A pickle that runs a shell command when fully unpickled (the way a pickle runs code: __reduce__)."""
    class Payload:
        def __reduce__(self):
            return os.system, (f"touch {marker}",)
    return pickle.dumps({"vocab_size": 1, "itos": {0: "a"}, "stoi": Payload()}, protocol=protocol)


def test_hostile_meta_pkl_is_refused_without_running(tmp_path):
    marker = tmp_path / "pwned"
    bad = tmp_path / "meta.pkl"
    bad.write_bytes(hostile_pickle(marker))
    with pytest.raises(ConfigError, match="refused") as e:
        tokenizer.read_nanogpt_meta(bad)
    assert "system" in str(e.value) and "\n" not in str(e.value)
    assert not marker.exists()
    pickle.loads(bad.read_bytes())  # the control: a full unpickle does run it
    assert marker.exists()


def test_hostile_meta_pkl_through_sample_is_one_line(tmp_path):
    nanogpt_checkout(tmp_path)
    marker = tmp_path / "pwned"
    (tmp_path / "data" / "shakespeare_char" / "meta.pkl").write_bytes(hostile_pickle(marker))
    result = subprocess.run([sys.executable, str(ROOT / "sample.py"), "--out_dir=out-shakespeare-char",
                             "--device=cpu", "--max_new_tokens=2"], cwd=tmp_path, capture_output=True, text=True)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert result.stderr.strip().count("\n") == 0 and result.stderr.startswith("error: refused")
    assert not marker.exists()


def hostile_checkpoint(path, marker):
    """A torch zip file, as torch.save writes it, whose pickle runs a shell command when loaded in full."""
    import zipfile
    torch.save({"model": {"w": torch.zeros(2)}, "model_args": {}}, path)
    with zipfile.ZipFile(path) as z:
        members = {name: z.read(name) for name in z.namelist()}
    data = next(name for name in members if name.endswith("/data.pkl"))
    members[data] = hostile_pickle(marker, protocol=2)  # torch.save's protocol
    with zipfile.ZipFile(path, "w") as z:
        for name, content in members.items():
            z.writestr(name, content)


@pytest.mark.parametrize("command", [["sample.py", "--out_dir=run", "--max_new_tokens=2"],
                                     ["train.py", "--out_dir=run", "--init_from=resume", "--max_iters=1"]])
def test_hostile_ckpt_pt_is_refused_in_one_line_naming_what_it_calls(tmp_path, command):
    nanogpt_checkout(tmp_path)
    marker = tmp_path / "pwned"
    (tmp_path / "run").mkdir()
    hostile_checkpoint(tmp_path / "run" / "ckpt.pt", marker)
    data = [f"--data_dir={tmp_path / 'data' / 'shakespeare_char'}"] if command[0] == "train.py" else []
    result = subprocess.run([sys.executable, str(ROOT / command[0]), *command[1:], *data, "--device=cpu"],
                            cwd=tmp_path, capture_output=True, text=True)
    assert result.returncode == 2 and "Traceback" not in result.stderr and result.stderr.count("\n") == 1
    assert result.stderr.startswith("error: refused checkpoint run/ckpt.pt: it names posix.system"), result.stderr
    assert "weights_only" not in result.stderr  # torch's advice to load it in full is never passed on
    assert not marker.exists()
    with pytest.raises(Exception):  # the control: this is the file torch refuses by default too
        torch.load(tmp_path / "run" / "ckpt.pt")
    assert not marker.exists()
    torch.load(tmp_path / "run" / "ckpt.pt", weights_only=False)  # and a full load runs it
    assert marker.exists()


@pytest.mark.parametrize("content, message", [
    (pickle.dumps({"vocab_size": 2, "itos": {0: "a", 1: "bc"}}), "one character per id"),
    (pickle.dumps({"vocab_size": 1, "itos": {0: "a"}, "stoi": {"b": 0}}), "disagree"),
    (pickle.dumps({1, 2}), "char vocabulary"),
    (b"not a pickle", "refused"),
])
def test_meta_pkl_that_is_not_a_char_vocabulary(tmp_path, content, message):
    (tmp_path / "meta.pkl").write_bytes(content)
    with pytest.raises(ConfigError, match=message):
        tokenizer.read_nanogpt_meta(tmp_path / "meta.pkl")
