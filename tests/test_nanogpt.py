"""
nanoGPT's runs, as its train.py and data/shakespeare_char/prepare.py write them (a ckpt.pt whose model_args
have no norm, "_orig_mod." keys when compiled, a meta.pkl beside the data): glassgpt computes nanoGPT's
logits from them, and sample.py takes them as they are. A meta.pkl or ckpt.pt that would run code is
refused without running it.
"""

import importlib.util
import math
import os
import pickle
import zipfile
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

import tokenizer
from checkpoint import is_nanogpt, load_checkpoint, model_from_checkpoint
from configurator import ConfigError
from conftest import run_script
from model import GPT, GPTConfig

NANOGPT = Path(__file__).resolve().parents[2] / "nanoGPT"  # a checkout beside this repo, if there is one
CHARS = "\n !',.:;?ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
ARGS = dict(n_layer=2, n_head=2, n_embd=32, block_size=32, vocab_size=len(CHARS), dropout=0.0)


def nanogpt_weights(bias):
    """Random weights under nanoGPT's names, large enough that the erf and tanh GELUs give other logits."""
    torch.manual_seed(0)
    names = GPT(GPTConfig(**ARGS, bias=bias)).state_dict()  # nanoGPT's names are GPT-2's, as glassgpt's
    sd = {k: 0.3 * torch.randn(v.shape) for k, v in names.items()}
    sd["lm_head.weight"] = sd["transformer.wte.weight"]  # tied
    return sd


def nanogpt_logits(sd, idx):
    """nanoGPT's forward written out: learned positions, LayerNorm (eps 1e-5), causal attention, nn.GELU (erf)."""
    B, T = idx.shape
    C, nh = ARGS["n_embd"], ARGS["n_head"]
    ln = lambda x, p: F.layer_norm(x, (C,), sd[p + ".weight"], sd.get(p + ".bias"), 1e-5)  # noqa: E731
    linear = lambda x, p: F.linear(x, sd[p + ".weight"], sd.get(p + ".bias"))  # noqa: E731
    x = sd["transformer.wte.weight"][idx] + sd["transformer.wpe.weight"][:T]
    for i in range(ARGS["n_layer"]):
        h = f"transformer.h.{i}."
        qkv = linear(ln(x, h + "ln_1"), h + "attn.c_attn").split(C, 2)
        q, k, v = (t.view(B, T, nh, C // nh).transpose(1, 2) for t in qkv)
        att = (q @ k.transpose(-2, -1) / math.sqrt(C // nh)).masked_fill(~torch.ones(T, T).bool().tril(), -math.inf)
        x = x + linear((att.softmax(-1) @ v).transpose(1, 2).reshape(B, T, C), h + "attn.c_proj")
        x = x + linear(F.gelu(linear(ln(x, h + "ln_2"), h + "mlp.c_fc")), h + "mlp.c_proj")
    return ln(x, "transformer.ln_f") @ sd["lm_head.weight"].T


def nanogpt_checkout(root, bias=False, compiled=False):
    """root as a nanoGPT checkout after prepare.py and a run: data/shakespeare_char/meta.pkl and
    out-shakespeare-char/ckpt.pt, written as nanoGPT writes them (plain torch.save). Returns the weights."""
    (root / "data" / "shakespeare_char").mkdir(parents=True)
    with open(root / "data" / "shakespeare_char" / "meta.pkl", "wb") as f:  # itos and stoi are dicts
        pickle.dump({"vocab_size": len(CHARS), "itos": dict(enumerate(CHARS)),
                     "stoi": {c: i for i, c in enumerate(CHARS)}}, f)
    sd = nanogpt_weights(bias)
    (root / "out-shakespeare-char").mkdir()
    torch.save({"model": {("_orig_mod." if compiled else "") + k: v for k, v in sd.items()},
                "optimizer": torch.optim.AdamW([torch.zeros(2, requires_grad=True)]).state_dict(),
                "model_args": dict(ARGS, bias=bias), "iter_num": 40, "best_val_loss": torch.tensor(2.5),
                "config": {"dataset": "shakespeare_char", "compile": compiled, "bias": bias}},
               root / "out-shakespeare-char" / "ckpt.pt")
    return sd


@pytest.mark.parametrize("bias, compiled", [(False, False), (True, True)])
def test_a_nanogpt_checkpoint_gives_nanogpts_logits(tmp_path, bias, compiled):
    sd = nanogpt_checkout(tmp_path, bias, compiled)
    ckpt = load_checkpoint(tmp_path / "out-shakespeare-char" / "ckpt.pt")  # weights_only=True inside
    assert is_nanogpt(ckpt)
    idx = torch.randint(0, len(CHARS), (2, 32))
    expected = nanogpt_logits({k: v.double() for k, v in sd.items()}, idx)
    with torch.no_grad():
        assert torch.allclose(model_from_checkpoint(ckpt).double()(idx, idx)[0], expected, atol=1e-10)
        # the control: the same weights through GPT-2's tanh GELU are another model
        tanh = model_from_checkpoint(ckpt, activation="gelu_tanh").double()(idx, idx)[0]
    assert (tanh - expected).abs().max() > 1e-4


@pytest.mark.skipif(not (NANOGPT / "model.py").is_file(), reason=f"no nanoGPT checkout at {NANOGPT}")
def test_the_written_out_forward_is_nanogpts_own(tmp_path):
    """The reference above against nanoGPT's model.py itself, imported from its checkout (never copied here)."""
    spec = importlib.util.spec_from_file_location("nanogpt_model", NANOGPT / "model.py")
    nanogpt = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(nanogpt)
    sd = nanogpt_weights(bias=True)
    theirs = nanogpt.GPT(nanogpt.GPTConfig(**ARGS, bias=True)).double().eval()
    theirs.load_state_dict({k: v.double() for k, v in sd.items()})
    idx = torch.randint(0, len(CHARS), (2, 32))
    with torch.no_grad():
        assert torch.allclose(theirs(idx, idx)[0], nanogpt_logits({k: v.double() for k, v in sd.items()}, idx),
                              atol=1e-10)


def test_sample_a_nanogpt_run_from_its_checkout_and_from_elsewhere(tmp_path):
    """From nanoGPT's folder, as its sample.py runs: meta.pkl from data/<the config's dataset>/; from
    elsewhere, the data folder beside out_dir; or named with --meta."""
    nanogpt_checkout(tmp_path / "nanoGPT")
    run = tmp_path / "nanoGPT" / "out-shakespeare-char"
    model = model_from_checkpoint(load_checkpoint(run / "ckpt.pt")).eval()
    ids = model.generate(torch.tensor([[CHARS.index(c) for c in "ROMEO:"]]), 20, temperature=0)[0].tolist()
    args = ["--start=ROMEO:", "--num_samples=1", "--max_new_tokens=20", "--temperature=0", "--device=cpu",
            "--dtype=float32"]
    meta = tmp_path / "nanoGPT" / "data" / "shakespeare_char" / "meta.pkl"
    for cwd, out_dir, extra in ((tmp_path / "nanoGPT", "out-shakespeare-char", []), (tmp_path, run, []),
                                (tmp_path, run, [f"--meta={meta}"])):
        result = run_script("sample.py", f"--out_dir={out_dir}", *args, *extra, cwd=cwd)
        assert result.returncode == 0, result.stderr
        assert result.stdout == "".join(CHARS[i] for i in ids) + "\n---------------\n"
        assert "meta.pkl" in result.stderr and "iter 40" in result.stderr


def hostile_pickle(marker, protocol=pickle.DEFAULT_PROTOCOL):
    """A pickle that runs a shell command when fully unpickled (the way a pickle runs code: __reduce__)."""
    class Payload:
        def __reduce__(self):
            return os.system, (f"touch {marker}",)
    return pickle.dumps({"vocab_size": 1, "itos": {0: "a"}, "stoi": Payload()}, protocol=protocol)


def test_a_hostile_meta_pkl_is_refused_without_running(tmp_path):
    marker = tmp_path / "pwned"
    nanogpt_checkout(tmp_path)
    bad = tmp_path / "data" / "shakespeare_char" / "meta.pkl"
    bad.write_bytes(hostile_pickle(marker))
    with pytest.raises(ConfigError, match="refused"):
        tokenizer.read_nanogpt_meta(bad)
    result = run_script("sample.py", "--out_dir=out-shakespeare-char", "--device=cpu", "--max_new_tokens=2",
                        cwd=tmp_path)
    assert (result.returncode, result.stdout) == (2, "") and result.stderr.startswith("error: ")
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr
    assert not marker.exists()
    pickle.loads(bad.read_bytes())  # the control: a full unpickle does run it
    assert marker.exists()


def test_a_hostile_ckpt_pt_is_refused_without_running(tmp_path):
    """A torch zip file whose pickle runs a shell command when loaded in full: weights_only refuses it."""
    nanogpt_checkout(tmp_path)
    marker, path = tmp_path / "pwned", tmp_path / "out-shakespeare-char" / "ckpt.pt"
    with zipfile.ZipFile(path) as z:
        members = {name: z.read(name) for name in z.namelist()}
    data = next(name for name in members if name.endswith("/data.pkl"))
    members[data] = hostile_pickle(marker, protocol=2)  # torch.save's protocol
    with zipfile.ZipFile(path, "w") as z:
        for name, content in members.items():
            z.writestr(name, content)
    with pytest.raises(ConfigError, match="refused"):
        load_checkpoint(path)
    result = run_script("sample.py", "--out_dir=out-shakespeare-char", "--device=cpu", cwd=tmp_path)
    assert (result.returncode, result.stdout) == (2, "") and result.stderr.startswith("error: ")
    assert result.stderr.count("\n") == 1 and "weights_only" not in result.stderr
    assert not marker.exists()
    torch.load(path, weights_only=False)  # the control: a full load runs it
    assert marker.exists()


@pytest.mark.parametrize("content", [
    pickle.dumps({"vocab_size": 2, "itos": {0: "a", 1: "bc"}}),  # not one character per id
    pickle.dumps({"vocab_size": 3, "itos": {0: "a", 1: "b"}}),
    pickle.dumps({1, 2}),
    b"not a pickle",
])
def test_a_meta_pkl_that_is_not_a_char_vocabulary(tmp_path, content):
    (tmp_path / "meta.pkl").write_bytes(content)
    with pytest.raises(ConfigError):
        tokenizer.read_nanogpt_meta(tmp_path / "meta.pkl")
