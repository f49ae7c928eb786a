"""
export.py: a glassgpt run as a Hugging Face folder (GPT-2's architecture for learned or sinusoidal positions
with LayerNorm, Arcee's for rope with RMSNorm) that transformers loads offline with the same ids and logits
(float32, max abs diff < 1e-4), and that glassgpt reads back (checkpoint.model_from_pretrained) with the same
logits; an existing folder is kept unless --overwrite=true; refusals are one line and exit 2.
"""

import dataclasses
import json
import os
import re
import resource
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import checkpoint
import export
import tokenizer
from configurator import ConfigError, run
from conftest import TIKTOKEN_DIR
import model
from model import GPT, GPTConfig

transformers = pytest.importorskip("transformers", reason="export needs transformers (requirements-dev.txt)")

ROOT = Path(__file__).resolve().parent.parent
TIKTOKEN = TIKTOKEN_DIR
CHARS = "\n !$&',-.3:;?ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"  # tiny Shakespeare's 65
TEXT = "ROMEO:\nWhat,  ho! a b\n\n  c'd? x "  # newlines, runs of spaces: nothing may be dropped or added
ROPE = dict(position="rope", norm="rmsnorm")  # config/tiny.py's switches: the folder is Arcee's


def write_run(out, meta, seed=0, **config):
    """out_dir of a finished run, through the model API: ckpt.pt (random weights) and meta.json. Returns the model."""
    torch.manual_seed(seed)
    config = GPTConfig(**{"block_size": 48, "n_layer": 2, "n_head": 2, "n_embd": 32, "vocab_size": meta["vocab_size"],
                          **config})
    model = GPT(config)
    with torch.no_grad():  # biases and gains away from 0 and 1, so a lost one would show in the logits
        for p in model.parameters():
            if p.dim() == 1:
                p.add_(0.1 * torch.randn_like(p))
    os.makedirs(out, exist_ok=True)
    checkpoint.save_checkpoint({"model": model.state_dict(), "model_args": dataclasses.asdict(config),
                                "config": {"dataset": "shakespeare_char"}, "iter_num": 250, "best_val_loss": 1.75},
                               os.path.join(out, "ckpt.pt"))
    tokenizer.write_meta(out, meta)
    return model.eval()


def logits(model, ids):
    """Every position's logits (glassgpt's forward without targets returns only the last)."""
    x = torch.tensor([ids])
    with torch.no_grad():
        return model(x, x)[0][0]


def check_folder(folder, model, meta, text=TEXT):
    """transformers reads the folder as our model (same ids, logits, greedy continuation) and glassgpt reads it
    back with the same logits and tokenizer. Returns transformers' model."""
    from transformers import AutoModelForCausalLM, AutoTokenizer
    assert {"config.json", "model.safetensors", "tokenizer.json", "meta.json", "README.md"} <= set(os.listdir(folder))
    hf = AutoModelForCausalLM.from_pretrained(folder).eval()
    tok = AutoTokenizer.from_pretrained(folder)
    ids = tokenizer.load_tokenizer(meta)[0](text)
    assert tok(text)["input_ids"] == ids and tok.decode(ids) == text
    with torch.no_grad():
        theirs = hf(torch.tensor([ids])).logits[0]
    assert (theirs - logits(model, ids)).abs().max().item() < 1e-4
    ours = model.generate(torch.tensor([ids]), 8, temperature=0)[0].tolist()
    assert hf.generate(torch.tensor([ids]), max_new_tokens=8, do_sample=False)[0].tolist() == ours
    back = checkpoint.model_from_pretrained(str(folder)).eval()
    same = dict(position=model.config.position, attention=model.config.attention)  # sinusoidal: a learned table
    assert dataclasses.replace(back.config, **same) == model.config  # zero biases come back as none
    assert (logits(back, ids) - logits(model, ids)).abs().max().item() < 1e-5
    assert tokenizer.same_tokenizer(tokenizer.read_meta(folder), meta)  # --init_from=<folder> keeps its vocabulary
    return hf


def one_line_error(capsys, args):
    """export.py run as a command (configurator.run): exit 2 and one error line. Returns the line."""
    capsys.readouterr()
    with pytest.raises(SystemExit) as e:
        run(lambda: export.main(args))
    out, err = capsys.readouterr()
    assert e.value.code == 2 and out == "" and len(err.splitlines()) == 1 and err.startswith("error: "), err
    return err


@pytest.fixture(autouse=True)
def offline(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # everything must come from the folder
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "1")


def test_learned_positions_and_layernorm_export_as_gpt2(tmp_path, capsys):
    meta = tokenizer.char_meta(CHARS)
    model = write_run(tmp_path / "run", meta, bias=False)  # no bias: exported as zero biases
    export.main([f"--out_dir={tmp_path / 'run'}"])
    assert capsys.readouterr().out.startswith(f"wrote {tmp_path / 'run' / 'hf'}")
    hf = check_folder(tmp_path / "run" / "hf", model, meta)
    assert type(hf).__name__ == "GPT2LMHeadModel"
    every = CHARS + CHARS[::-1]  # every character glassgpt knows maps to glassgpt's id
    tok = transformers.AutoTokenizer.from_pretrained(tmp_path / "run" / "hf")
    assert tok(every)["input_ids"] == [CHARS.index(c) for c in every]


def test_rope_and_rmsnorm_export_as_arcee(tmp_path):
    pytest.importorskip("transformers.models.arcee", reason="Arcee needs transformers >= 4.53")
    meta = tokenizer.char_meta(CHARS)
    model = write_run(tmp_path / "run", meta, bias=False, **ROPE)
    export.main([f"--out_dir={tmp_path / 'run'}", f"--folder={tmp_path / 'arcee'}"])
    assert type(check_folder(tmp_path / "arcee", model, meta)).__name__ == "ArceeForCausalLM"


@pytest.mark.slow
@pytest.mark.parametrize("switches", [
    dict(bias=True, activation="gelu"),  # a nanoGPT model: the erf GELU, exported as "gelu"
    dict(bias=True, tie_weights=False),
    dict(bias=False, position="sinusoidal", attention="manual"),  # the fixed table stored as wpe
    dict(bias=True, activation="gelu", tie_weights=False, **ROPE),
])
def test_every_switch_exports_with_equal_logits(tmp_path, switches):
    if "position" in switches and switches["position"] == "rope":
        pytest.importorskip("transformers.models.arcee", reason="Arcee needs transformers >= 4.53")
    meta = tokenizer.char_meta(CHARS)
    model = write_run(tmp_path / "run", meta, **switches)
    export.main([f"--out_dir={tmp_path / 'run'}", f"--folder={tmp_path / 'hf'}"])
    check_folder(tmp_path / "hf", model, meta)
    pipe = transformers.pipeline("text-generation", model=str(tmp_path / "hf"))
    greedy = model.generate(torch.tensor([tokenizer.load_tokenizer(meta)[0](TEXT)]), 8, temperature=0)[0].tolist()
    assert pipe(TEXT, max_new_tokens=8, do_sample=False)[0]["generated_text"] == "".join(CHARS[i] for i in greedy)


@pytest.mark.slow
def test_the_model_cards_code_runs(tmp_path, capsys):
    write_run(tmp_path / "run", tokenizer.char_meta(CHARS))
    export.main([f"--out_dir={tmp_path / 'run'}"])
    card = (tmp_path / "run" / "hf" / "README.md").read_text()
    code = re.search(r"```python\n(.*?)```", card, re.S).group(1).replace("path/to/this/folder",
                                                                         str(tmp_path / "run" / "hf"))
    capsys.readouterr()
    exec(code, {})  # the prompt and its new tokens fit the context of 48
    assert capsys.readouterr().out.startswith("ROMEO:")


@pytest.mark.slow
@pytest.mark.skipif(not TIKTOKEN.is_dir(), reason=f"no offline tiktoken files at {TIKTOKEN}")
def test_bpe_model_exports_gpt2_tokenizer(tmp_path, monkeypatch):
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(TIKTOKEN))
    tokenizer.gpt2_encoding.cache_clear()
    meta = tokenizer.gpt2_meta()
    model = write_run(tmp_path / "run", meta, vocab_size=50304, n_embd=16, n_layer=1)  # padded, as train.py does
    export.main([f"--out_dir={tmp_path / 'run'}"])
    model.crop_vocab_size(50257)  # as every tool reads it: the tokenizer's ids alone, their logits unchanged
    text = "Hello world!\n\n  It's 2026: naïve café, 日本語 😀<|endoftext|>The end   "
    check_folder(tmp_path / "run" / "hf", model, meta, text)
    tok = transformers.AutoTokenizer.from_pretrained(tmp_path / "run" / "hf")
    assert tok.eos_token_id == 50256 and len(tok) == 50257
    slow = transformers.GPT2Tokenizer(str(tmp_path / "run" / "hf" / "vocab.json"),
                                      str(tmp_path / "run" / "hf" / "merges.txt"))
    assert slow(text)["input_ids"] == tokenizer.load_tokenizer(meta)[0](text)  # vocab.json and merges.txt agree


@pytest.mark.parametrize("switches", [dict(), ROPE])
def test_a_weight_the_architecture_has_no_place_for_is_refused(tmp_path, switches):
    """A fork's model.py with a new weight: dropping it would leave transformers computing another model."""
    meta = tokenizer.char_meta(CHARS)
    model = write_run(tmp_path / "run", meta, **switches)
    model.transformer.h[1].attn.register_parameter("q_gain", torch.nn.Parameter(torch.full((16,), 2.0)))
    with pytest.raises(ConfigError, match=r"q_gain"):
        export.export_hf(model, meta, str(tmp_path / "hf"), "x")
    model = write_run(tmp_path / "run", meta, **switches)
    model.transformer.h[1].attn.c_proj.weight = torch.nn.Parameter(torch.zeros(32, 16))  # another shape
    with pytest.raises(ConfigError, match=r"[co]_proj"):
        export.export_hf(model, meta, str(tmp_path / "hf"), "x")
    assert not (tmp_path / "hf").exists()


def test_a_mix_no_architecture_computes_is_one_line(tmp_path, capsys):
    write_run(tmp_path / "run", tokenizer.char_meta(CHARS), position="rope", norm="layernorm")
    assert "rope" in one_line_error(capsys, [f"--out_dir={tmp_path / 'run'}"])
    assert sorted(os.listdir(tmp_path)) == ["run"] and "hf" not in os.listdir(tmp_path / "run")


@pytest.mark.parametrize("fork", ["activation", "mlp"])
def test_a_fork_transformers_would_compute_otherwise_is_refused(tmp_path, capsys, monkeypatch, fork):
    """A fork's own activation (a new choice), or its MLP edited in place: transformers' model would give other
    logits, so the export is refused, in one line, and nothing is written."""
    write_run(tmp_path / "run", tokenizer.char_meta(CHARS))
    if fork == "activation":
        monkeypatch.setattr("model.ACTIVATIONS", (*model.ACTIVATIONS, "relu2"))
        ckpt = torch.load(tmp_path / "run" / "ckpt.pt", weights_only=True)
        ckpt["model_args"]["activation"] = "relu2"
        torch.save(ckpt, tmp_path / "run" / "ckpt.pt")
    monkeypatch.setattr(model.MLP, "forward", lambda self, x: self.c_proj(torch.relu(self.c_fc(x)) ** 2))
    assert "logits" in one_line_error(capsys, [f"--out_dir={tmp_path / 'run'}"])
    assert sorted(os.listdir(tmp_path)) == ["run"] and "hf" not in os.listdir(tmp_path / "run")


@pytest.mark.parametrize("switches", [dict(), ROPE])
def test_a_forks_mlp_of_another_width_is_refused_as_one_line(tmp_path, capsys, monkeypatch, switches):
    """A SwiGLU-like MLP whose c_fc is twice c_proj's input: export cannot write it, nothing is written."""
    def swiglu_init(self, config):
        torch.nn.Module.__init__(self)
        self.c_fc = torch.nn.Linear(config.n_embd, 2 * 43, bias=config.bias)
        self.c_proj = torch.nn.Linear(43, config.n_embd, bias=config.bias)
    monkeypatch.setattr(model.MLP, "__init__", swiglu_init)
    monkeypatch.setattr(model.MLP, "forward", lambda self, x: self.c_proj(
        torch.nn.functional.silu(self.c_fc(x).chunk(2, -1)[0]) * self.c_fc(x).chunk(2, -1)[1]))
    write_run(tmp_path / "run", tokenizer.char_meta(CHARS), **switches)
    assert "cannot write" in one_line_error(capsys, [f"--out_dir={tmp_path / 'run'}"])
    assert sorted(os.listdir(tmp_path)) == ["run"] and "hf" not in os.listdir(tmp_path / "run")


def test_existing_folder_is_kept_unless_overwrite(tmp_path, capsys):
    meta = tokenizer.char_meta(CHARS)
    write_run(tmp_path / "run", meta)
    run_args = [f"--out_dir={tmp_path / 'run'}"]
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("keep me")
    assert "overwrite" in one_line_error(capsys, [*run_args, f"--folder={tmp_path / 'mine'}"])
    # --overwrite replaces only an earlier export: never the user's folder, nor a training run
    for folder in (tmp_path / "mine", tmp_path / "run", tmp_path):
        one_line_error(capsys, [*run_args, f"--folder={folder}", "--overwrite=true"])
    assert (tmp_path / "mine" / "notes.txt").read_text() == "keep me" and (tmp_path / "run" / "ckpt.pt").is_file()
    export.main([*run_args, f"--folder={tmp_path / 'out'}"])
    assert "overwrite" in one_line_error(capsys, [*run_args, f"--folder={tmp_path / 'out'}"])
    (tmp_path / "out" / "config.json").write_text("{}")
    write_run(tmp_path / "run", meta, seed=1)  # the run trained on: its new weights replace the export, whole
    export.main([*run_args, f"--folder={tmp_path / 'out'}", "--overwrite=true"])
    assert json.loads((tmp_path / "out" / "config.json").read_text())["model_type"] == "gpt2"
    assert sorted(os.listdir(tmp_path)) == ["mine", "out", "run"]  # no temporary or old copy left
    (tmp_path / "empty").mkdir()  # an empty folder, made for it, takes the export as it is
    export.main([*run_args, f"--folder={tmp_path / 'empty'}"])
    assert checkpoint.is_export(tmp_path / "empty")


@pytest.mark.parametrize("at", [1, 2])
def test_an_overwrite_stopped_midway_leaves_the_old_export_whole(tmp_path, monkeypatch, at):
    """The old export moves aside whole and goes only once the new one is in: a stop at either rename
    leaves the old export as it was, and no temporary."""
    write_run(tmp_path / "run", tokenizer.char_meta(CHARS))
    args = [f"--out_dir={tmp_path / 'run'}", f"--folder={tmp_path / 'hf'}", "--overwrite=true"]
    export.main(args)
    before = {p.name: p.read_bytes() for p in (tmp_path / "hf").iterdir()}
    calls, replace = [], os.replace

    def stopped(src, dst):  # the n-th rename of a whole folder (the old one aside, the new one in) is cut short
        if os.path.dirname(os.fspath(dst)) == str(tmp_path):
            calls.append(dst)
            if len(calls) == at:
                raise KeyboardInterrupt
        return replace(src, dst)
    monkeypatch.setattr(export.os, "replace", stopped)
    with pytest.raises(KeyboardInterrupt):
        export.main(args)
    assert {p.name: p.read_bytes() for p in (tmp_path / "hf").iterdir()} == before
    assert sorted(os.listdir(tmp_path)) == ["hf", "run"]


def test_without_transformers_it_is_one_line(tmp_path, capsys, monkeypatch):
    write_run(tmp_path / "run", tokenizer.char_meta(CHARS))
    monkeypatch.setitem(sys.modules, "transformers", None)  # as if not installed: find_spec says None
    assert "pip install transformers" in one_line_error(capsys, [f"--out_dir={tmp_path / 'run'}"])
    assert "hf" not in os.listdir(tmp_path / "run")


def test_help(capsys):
    with pytest.raises(SystemExit) as e:
        export.main(["--help"])
    out = capsys.readouterr().out
    assert e.value.code == 0 and "pip install transformers" in out and "--overwrite=False" in out


@pytest.mark.slow
def test_as_a_user_runs_it(tmp_path):
    """A real process: one line on stdout, nothing on stderr (no transformers bars), files as the umask says;
    then a refusal: one line on stderr, exit 2, no traceback."""
    write_run(tmp_path / "run", tokenizer.char_meta(CHARS))
    cmd = [sys.executable, str(ROOT / "export.py"), f"--out_dir={tmp_path / 'run'}"]
    result = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, umask=0o027)
    assert result.returncode == 0 and result.stderr == "" and result.stdout.count("\n") == 1, result.stderr
    modes = {p.name: oct(p.stat().st_mode & 0o777) for p in (tmp_path / "run" / "hf").iterdir()}
    assert "model.safetensors" in modes and set(modes.values()) == {oct(0o640)}, modes
    result = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    assert result.returncode == 2 and result.stdout == "" and "Traceback" not in result.stderr
    assert result.stderr.count("\n") == 1 and "overwrite" in result.stderr
    # A full disk (here a file-size limit) while overwriting: one line, the earlier export whole.
    before = {p.name: p.read_bytes() for p in (tmp_path / "run" / "hf").iterdir()}
    limit = len(before["model.safetensors"]) // 2

    def limited():  # Python ignores SIGXFSZ, so a write past the limit fails with EFBIG
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
    result = subprocess.run([*cmd, "--overwrite=true"], capture_output=True, text=True, cwd=ROOT,
                            preexec_fn=limited)
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
    assert result.stderr.count("\n") == 1, result.stderr
    assert {p.name: p.read_bytes() for p in (tmp_path / "run" / "hf").iterdir()} == before
    assert sorted(os.listdir(tmp_path / "run")) == ["ckpt.pt", "hf", "meta.json"]
