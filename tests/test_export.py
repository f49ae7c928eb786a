"""
export.py: a glassgpt run as a Hugging Face folder that transformers loads offline (model, tokenizer,
pipeline) with the same logits (float32, max abs diff < 1e-4), the same tokenizer ids and the same
greedy continuation; the GPT-2 switches it can't express are one-line errors; and the folder comes
back into glassgpt (--init_from=<folder>) with the same logits.
"""

import dataclasses
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

transformers = pytest.importorskip("transformers", reason="export needs transformers (requirements-dev.txt)")
safetensors_torch = pytest.importorskip("safetensors.torch")

import export  # noqa: E402
import sample  # noqa: E402
import checkpoint  # noqa: E402
import tokenizer  # noqa: E402
import train  # noqa: E402
from checkpoint import model_from_pretrained, save_checkpoint  # noqa: E402
from configurator import ConfigError  # noqa: E402
from conftest import run_script  # noqa: E402
from model import GPT, GPTConfig  # noqa: E402
from sizing import param_counts  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
TIKTOKEN = ROOT.parent / "shared" / "data" / "tiktoken"
CHARS = "\n !$&',-.3:;?ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"  # tiny Shakespeare's 65
TEXT = "ROMEO:\nWhat,  ho! a b\n\n  c'd? x "  # newlines, runs of spaces: nothing may be dropped or added


def write_run(out, meta, seed=0, **config):
    """out_dir of a finished run: ckpt.pt (random weights) and meta.json. Returns the model."""
    torch.manual_seed(seed)
    config = GPTConfig(**{"block_size": 48, "n_layer": 2, "n_head": 2, "n_embd": 32, "vocab_size": meta["vocab_size"],
                          **config})
    model = GPT(config)
    with torch.no_grad():  # biases and gains away from 0 and 1, so a lost one would show in the logits
        for name, p in model.named_parameters():
            if p.dim() == 1:
                p.add_(0.1 * torch.randn_like(p))
    os.makedirs(out, exist_ok=True)
    save_checkpoint({"model": model.state_dict(), "model_args": dataclasses.asdict(config), "iter_num": 250,
                     "best_val_loss": 1.75, "config": {"dataset": "shakespeare_char", "batch_size": 32,
                                                       "block_size": 48, "gradient_accumulation_steps": 1}},
                    os.path.join(out, "ckpt.pt"))
    tokenizer.write_meta(out, meta)
    return model.eval()


def our_logits(model, ids):
    """glassgpt's logits at every position (its forward without targets returns only the last)."""
    x = torch.tensor([ids])
    with torch.no_grad():
        return model(x, x)[0][0]


def check_folder(folder, model, meta, text=TEXT):
    """The transformers side: same ids, logits, greedy continuation; decode gives the text back."""
    from transformers import AutoModelForCausalLM, AutoTokenizer
    hf = AutoModelForCausalLM.from_pretrained(folder).eval()
    tok = AutoTokenizer.from_pretrained(folder)
    encode, decode = tokenizer.load_tokenizer(meta)
    ids = encode(text)
    assert tok(text)["input_ids"] == ids
    assert tok.decode(ids) == text
    with torch.no_grad():
        theirs = hf(torch.tensor([ids])).logits[0]
    assert (theirs - our_logits(model, ids)).abs().max().item() < 1e-4
    ours = model.generate(torch.tensor([ids]), 8, temperature=0)[0].tolist()
    assert hf.generate(torch.tensor([ids]), max_new_tokens=8, do_sample=False)[0].tolist() == ours
    return hf, tok, decode(ours)


@pytest.fixture(autouse=True)
def offline(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # everything must come from the folder
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "1")


def test_char_model_exports_and_runs_in_transformers(tmp_path, capsys):
    meta = tokenizer.char_meta(CHARS)
    model = write_run(tmp_path / "run", meta, bias=False)  # no bias: exported as zero biases
    export.main([f"--out_dir={tmp_path / 'run'}"])
    folder = tmp_path / "run" / "hf"
    assert "wrote" in capsys.readouterr().out
    _, tok, greedy = check_folder(folder, model, meta)
    every = CHARS + CHARS[::-1]  # every character glassgpt knows maps to glassgpt's id
    assert tok(every)["input_ids"] == [CHARS.index(c) for c in every]
    pipe = transformers.pipeline("text-generation", model=str(folder))
    assert pipe(TEXT, max_new_tokens=8, do_sample=False)[0]["generated_text"] == greedy
    stored = safetensors_torch.load_file(folder / "model.safetensors")
    assert "lm_head.weight" not in stored and "transformer.wte.weight" in stored  # the tied head once
    assert torch.equal(stored["transformer.h.0.mlp.c_fc.bias"], torch.zeros(4 * 32))
    card = (folder / "README.md").read_text()
    assert f"{param_counts(model.config)['total']:,}" in card and "250 iterations x 1,536 tokens" in card
    assert "1.7500" in card and "hf upload" in card  # huggingface_hub 2.4 has no huggingface-cli
    # the card's code runs as written: it once asked for 100 new tokens, past the context (48), and crashed
    code = re.search(r"```python\n(.*?)```", card, re.S).group(1).replace("path/to/this/folder", str(folder))
    assert "max_new_tokens=40)" in code
    exec(code, {})
    assert capsys.readouterr().out.startswith("ROMEO:")


def test_model_card_of_a_checkpoint_from_before_the_first_eval(tmp_path):
    """train.py's best val loss starts at inf: a checkpoint saved before the first eval has none to state."""
    write_run(tmp_path / "run", tokenizer.char_meta(CHARS))
    ckpt = checkpoint.load_checkpoint(tmp_path / "run" / "ckpt.pt")
    card = export.model_card("x", {**ckpt, "best_val_loss": float("inf")}, GPTConfig(**ckpt["model_args"]),
                             tokenizer.char_meta(CHARS), "ckpt.pt")
    assert "Validation loss: none yet (saved before the run's first eval)" in card and "inf" not in card
    # rope and a tied head: the two counts agree, and the card says why rather than one number twice
    config = GPTConfig(**{**ckpt["model_args"], "position": "rope", "norm": "rmsnorm"})
    card = export.model_card("x", ckpt, config, tokenizer.char_meta(CHARS), "ckpt.pt")
    total = f"{param_counts(config)['total']:,}"
    assert (f"{total} (the same non-embedding, as nanoGPT counts: it subtracts only a learned position table, and "
            "rope positions have none)" in card and f"({total} non-embedding)" not in card), card
    # untied: wte is left out as well, which nanoGPT (always tied) never does; the card says so as train.py does
    config = GPTConfig(**{**ckpt["model_args"], "tie_weights": False})
    card = export.model_card("x", ckpt, config, tokenizer.char_meta(CHARS), "ckpt.pt")
    counts = param_counts(config)
    assert (f"{counts['total']:,} ({counts['non_embedding']:,} non-embedding: without the untied wte and wpe "
            "(nanoGPT, always tied, leaves out wpe alone))" in card), card


@pytest.mark.parametrize("switches", [
    dict(bias=True, activation="gelu"),  # a nanoGPT model: the erf GELU, exported as "gelu"
    dict(bias=True, tie_weights=False),
    dict(bias=False, position="sinusoidal", attention="manual"),  # the fixed table stored as wpe
])
def test_every_gpt2_switch_exports_with_equal_logits(tmp_path, switches):
    meta = tokenizer.char_meta(CHARS)
    model = write_run(tmp_path / "run", meta, **switches)
    export.main([f"--out_dir={tmp_path / 'run'}", f"--folder={tmp_path / 'hf'}"])
    check_folder(tmp_path / "hf", model, meta)
    config = (tmp_path / "hf" / "config.json").read_text()
    assert ('"activation_function": "gelu"' if switches.get("activation") == "gelu" else '"gelu_new"') in config


@pytest.mark.parametrize("switches", [dict(bias=False), dict(bias=True, activation="gelu", tie_weights=False)])
def test_rope_rmsnorm_model_exports_as_arcee(tmp_path, switches):
    """config/tiny.py's switches (rotary positions, RMSNorm, no bias) are transformers' Arcee, exactly."""
    pytest.importorskip("transformers.models.arcee", reason="Arcee needs transformers >= 4.53")
    meta = tokenizer.char_meta(CHARS)
    model = write_run(tmp_path / "run", meta, position="rope", norm="rmsnorm", **switches)
    export.main([f"--out_dir={tmp_path / 'run'}"])
    hf, _, greedy = check_folder(tmp_path / "run" / "hf", model, meta)
    assert type(hf).__name__ == "ArceeForCausalLM"
    pipe = transformers.pipeline("text-generation", model=str(tmp_path / "run" / "hf"))
    assert pipe(TEXT, max_new_tokens=8, do_sample=False)[0]["generated_text"] == greedy


@pytest.mark.parametrize("switches", [dict(), dict(position="rope", norm="rmsnorm", bias=False)])
def test_a_weight_the_architecture_has_no_place_for_is_refused(tmp_path, switches):
    """A fork's model.py with a new weight (a per-head gain on q, say): the Arcee export dropped it and wrote a
    folder whose logits differed by 2.2 (exit 0); GPT-2's was refused. Both are one line now, nothing written."""
    if switches:
        pytest.importorskip("transformers.models.arcee", reason="Arcee needs transformers >= 4.53")
    meta = tokenizer.char_meta(CHARS)
    model = write_run(tmp_path / "run", meta, **switches)
    model.transformer.h[1].attn.register_parameter("q_gain", torch.nn.Parameter(torch.full((16,), 2.0)))
    with pytest.raises(ConfigError, match=r"weights do not match \w+'s layout .*transformer\.h\.1\.attn\.q_gain") as e:
        export.export_hf(model, meta, {}, str(tmp_path / "hf"), "ckpt.pt", "x")
    assert "[]" not in str(e.value)  # only what is missing or unexpected is named, never an empty list
    assert not (tmp_path / "hf").exists()


@pytest.mark.parametrize("switches", [dict(), dict(position="rope", norm="rmsnorm", bias=False)])
def test_a_forks_mlp_width_exports_as_it_is(tmp_path, switches):
    """A fork whose model.py makes the MLP 2x wide: export wrote a 4x-wide config and died in a traceback
    (size mismatch). The width now comes from the model built, and transformers computes the same logits."""
    if switches:
        pytest.importorskip("transformers.models.arcee", reason="Arcee needs transformers >= 4.53")
    meta = tokenizer.char_meta(CHARS)
    model = write_run(tmp_path / "run", meta, **switches)
    torch.manual_seed(1)
    for block in model.transformer.h:  # as a fork's MLP.__init__ with 2 * n_embd would build it
        bias = block.mlp.c_fc.bias is not None
        block.mlp.c_fc, block.mlp.c_proj = torch.nn.Linear(32, 64, bias=bias), torch.nn.Linear(64, 32, bias=bias)
    ckpt = checkpoint.load_checkpoint(str(tmp_path / "run" / "ckpt.pt"))
    export.export_hf(model, meta, ckpt, str(tmp_path / "hf"), "ckpt.pt", "x")
    check_folder(tmp_path / "hf", model, meta)
    n, arithmetic = sum(p.numel() for p in model.parameters()), param_counts(model.config)["total"]
    assert n < arithmetic and (f"- Parameters: {n:,}, counted from the weights (sizing.py's arithmetic, for "
                               f"glassgpt's own model.py, gives {arithmetic:,})") in (tmp_path / "hf" / "README.md").read_text()


def test_a_weight_of_another_shape_is_refused_in_one_line(tmp_path):
    """A weight the architecture has a place for, but of another shape (a fork's attention projection, say):
    transformers raised a RuntimeError, a traceback; now one line naming it, nothing written."""
    meta = tokenizer.char_meta(CHARS)
    model = write_run(tmp_path / "run", meta)
    model.transformer.h[1].attn.c_proj = torch.nn.Linear(32, 32, bias=False)
    model.transformer.h[1].attn.c_proj.weight = torch.nn.Parameter(torch.zeros(32, 16))
    with pytest.raises(ConfigError, match=r"^export: weights do not match GPT2LMHeadModel's layout \(size mismatch for "
                                          r"transformer\.h\.1\.attn\.c_proj\.weight: .*\)$"):
        export.export_hf(model, meta, {}, str(tmp_path / "hf"), "ckpt.pt", "x")
    assert not (tmp_path / "hf").exists()


@pytest.mark.skipif(not TIKTOKEN.is_dir(), reason=f"no offline tiktoken files at {TIKTOKEN}")
def test_bpe_model_exports_gpt2_tokenizer(tmp_path, monkeypatch):
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(TIKTOKEN))
    tokenizer.gpt2_encoding.cache_clear()
    meta = tokenizer.gpt2_meta()
    model = write_run(tmp_path / "run", meta, vocab_size=50304, n_embd=16, n_layer=1)  # padded, as nanoGPT
    export.main([f"--out_dir={tmp_path / 'run'}"])
    text = "Hello world!\n\n  It's 2026: naïve café, 日本語 😀<|endoftext|>The end   "
    _, tok, _ = check_folder(tmp_path / "run" / "hf", model, meta, text)
    assert tok.eos_token_id == 50256 and len(tok) == 50257


@pytest.mark.parametrize("switch, word", [("position=rope", "position=rope"), ("norm=rmsnorm", "norm=rmsnorm")])
def test_switch_gpt2_cannot_express_is_one_line(tmp_path, switch, word):
    key, value = switch.split("=")
    write_run(tmp_path / "run", tokenizer.char_meta(CHARS), **{key: value})
    args = [str(ROOT / "export.py"), f"--out_dir={tmp_path / 'run'}"]
    result = (subprocess.run([sys.executable, *args], capture_output=True, text=True, cwd=ROOT)
              if switch == "position=rope" else run_script(*args))  # one as a user runs it, one in this process
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert result.stderr.count("\n") == 1 and word in result.stderr and "config/tiny_gpt2.py" in result.stderr
    assert not (tmp_path / "run" / "hf").exists()


def test_existing_folder_is_kept_unless_overwrite(tmp_path):
    """--overwrite replaces an earlier export (or an empty folder), never a training run, the run being exported
    or the user's own folder: rmtree would have taken their files (a fresh user's copy of a run lost ckpt.pt)."""
    meta = tokenizer.char_meta(CHARS)
    write_run(tmp_path / "run", meta)
    run_args = [f"--out_dir={tmp_path / 'run'}"]
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("keep me")
    with pytest.raises(ConfigError, match="exists"):
        export.main([*run_args, f"--folder={tmp_path / 'mine'}"])
    with pytest.raises(ConfigError, match="not a folder export.py wrote"):
        export.main([*run_args, f"--folder={tmp_path / 'mine'}", "--overwrite=true"])
    assert (tmp_path / "mine" / "notes.txt").read_text() == "keep me"
    # the run itself, and a folder holding it (which was said to hold "a training run (the one being exported)")
    for folder, held in ((tmp_path / "run", "a training run (the one being exported)"),
                         (tmp_path, f"the training run being exported, in {tmp_path / 'run'}")):
        with pytest.raises(ConfigError) as caught:
            export.main([*run_args, f"--folder={folder}", "--overwrite=true"])
        assert str(caught.value).startswith(f"{folder} holds {held}: --overwrite replaces only a folder export.py wrote")
    write_run(tmp_path / "other", meta)
    with pytest.raises(ConfigError, match=r"holds a training run \(ckpt.pt\)"):
        export.main([*run_args, f"--folder={tmp_path / 'other'}", "--overwrite=true"])
    assert (tmp_path / "run" / "ckpt.pt").is_file() and (tmp_path / "other" / "ckpt.pt").is_file()
    with pytest.raises(ConfigError) as caught:  # --overwrite is not offered where it would be refused
        export.main([*run_args, f"--folder={tmp_path / 'mine' / 'notes.txt'}"])
    assert str(caught.value) == f"{tmp_path / 'mine' / 'notes.txt'} exists: choose another --folder"
    export.main([*run_args, f"--folder={tmp_path / 'out'}"])
    with pytest.raises(ConfigError, match="exists: choose another --folder, or --overwrite=true to replace it$"):
        export.main([*run_args, f"--folder={tmp_path / 'out'}"])
    (tmp_path / "out" / "config.json").write_text("{}")  # the export is replaced whole
    export.main([*run_args, f"--folder={tmp_path / 'out'}", "--overwrite=true"])
    assert (tmp_path / "out" / "config.json").read_text() != "{}"
    (tmp_path / "out" / "my_notes.txt").write_text("keep me")  # a file of the user's, put in since: kept
    with pytest.raises(ConfigError, match="holds my_notes.txt, which export.py did not write: --overwrite would "
                                          "delete it; move it away first"):
        export.main([*run_args, f"--folder={tmp_path / 'out'}", "--overwrite=true"])
    assert (tmp_path / "out" / "my_notes.txt").read_text() == "keep me"
    assert [p.name for p in tmp_path.iterdir() if ".tmp." in p.name] == []
    # an empty folder, made for the export: "exists: ... or --overwrite=true to replace it", with nothing in it
    # to replace (a fresh user's pass); it takes the export as it is
    (tmp_path / "empty").mkdir()
    export.main([*run_args, f"--folder={tmp_path / 'empty'}"])
    assert (tmp_path / "empty" / "config.json").is_file()


@pytest.mark.parametrize("at", [1, 2])
def test_an_overwrite_stopped_midway_leaves_one_export_whole(tmp_path, monkeypatch, at):
    """--overwrite deleted the old export, then moved the new one in: a Ctrl-C during the delete left an
    empty folder and neither model. The old one now moves aside whole and goes only once the new one is
    in; a stop at either rename leaves the old export as it was."""
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
    assert {p.name: p.read_bytes() for p in (tmp_path / "hf").iterdir()} == before and len(calls) >= at
    assert sorted(p.name for p in tmp_path.iterdir()) == ["hf", "run"]  # no temporary, no old copy left


def test_an_edited_model_card_is_not_overwritten(tmp_path):
    """The card is the file people edit before uploading: --overwrite replaced it without a word. Now an edited
    README.md refuses the overwrite, as a file of the user's own does; an unedited one is replaced."""
    write_run(tmp_path / "run", tokenizer.char_meta(CHARS))
    args = [f"--out_dir={tmp_path / 'run'}", f"--folder={tmp_path / 'hf'}"]
    export.main(args)
    export.main(args + ["--overwrite=true"])  # unedited: replaced
    card = tmp_path / "hf" / "README.md"
    card.write_text(card.read_text() + "\nMy notes on this model.\n")
    with pytest.raises(ConfigError) as caught:
        export.main(args + ["--overwrite=true"])
    assert str(caught.value) == (f"{tmp_path / 'hf'}/README.md was edited since export.py wrote it: --overwrite "
                                 "would replace it with a new model card; move it away first (the new card can "
                                 "then take your edits)")
    assert card.read_text().endswith("My notes on this model.\n")
    card.unlink()  # moved away: the overwrite goes ahead, with a new card
    export.main(args + ["--overwrite=true"])
    assert card.is_file() and "My notes" not in card.read_text()


def test_a_folder_that_takes_no_files_is_one_line_before_any_work(tmp_path, monkeypatch):
    """As root, /proc passes access(W_OK) but takes no files: transformers' save_pretrained raised
    FileNotFoundError, a traceback. Now the folder is tried first; and a disk that fails mid-write is one line too."""
    write_run(tmp_path / "run", tokenizer.char_meta(CHARS))
    if os.path.isdir("/proc/self"):
        with pytest.raises(ConfigError, match=r"^cannot write /proc/glassgpt-x: /proc takes no files"):
            export.main([f"--out_dir={tmp_path / 'run'}", "--folder=/proc/glassgpt-x"])

    def full_disk(*args, **kwargs):
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(export, "write_meta", full_disk)
    with pytest.raises(ConfigError) as caught:
        export.main([f"--out_dir={tmp_path / 'run'}", f"--folder={tmp_path / 'hf'}"])
    assert str(caught.value) == f"cannot write {tmp_path / 'hf'}: No space left on device"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]  # the half-written folder went


def test_a_char_tokenizer_with_fewer_characters_than_the_model_is_warned_of(tmp_path, capsys):
    """--meta naming another run's characters, fewer than the model's ids: sample.py warned, export.py wrote the
    folder without a word, though its tokenizer cannot decode the rest."""
    write_run(tmp_path / "run", tokenizer.char_meta(CHARS))
    tokenizer.write_meta(tmp_path / "fewer", tokenizer.char_meta(CHARS[:40]))
    export.main([f"--out_dir={tmp_path / 'run'}", f"--meta={tmp_path / 'fewer'}"])
    assert capsys.readouterr().err == (f"warning: the tokenizer's 40 characters are fewer than the model's "
                                       f"{len(CHARS)} ids: the folder's tokenizer cannot decode the rest (is this "
                                       "model's meta.json another?)\n")


def test_another_datasets_tokenizer_is_refused_as_sample_py_refuses_it(tmp_path):
    """A nanoGPT run (65 characters) whose meta.pkl is not beside it took this repo's data/<dataset>/meta.json,
    76 characters offline: the export wrote that tokenizer and a model card saying so, and transformers then
    read ids past the model's table. Now it is one line, as sample.py says it, and nothing is written."""
    write_run(tmp_path / "run", tokenizer.char_meta(CHARS))
    tokenizer.write_meta(tmp_path / "other", tokenizer.char_meta(CHARS + "012456789@"))  # none in CHARS
    with pytest.raises(ConfigError) as caught:
        export.main([f"--out_dir={tmp_path / 'run'}", f"--meta={tmp_path / 'other' / 'meta.json'}"])
    assert str(caught.value) == (f"the tokenizer from {tmp_path / 'other' / 'meta.json'} has {len(CHARS) + 10} "
                                 f"tokens but the model only {len(CHARS)}: not this model's; name its meta.json "
                                 "(or nanoGPT's meta.pkl) with --meta=PATH")
    assert not (tmp_path / "run" / "hf").exists()
    with pytest.raises(ConfigError, match="^ckpt must be ckpt.pt, best.pt or another .pt file in out_dir, got "
                                          "'meta.json'$"):  # as sample.py says it (export.py tried to read it)
        export.main([f"--out_dir={tmp_path / 'run'}", "--ckpt=meta.json"])


def test_a_folder_it_cannot_write_is_one_line_before_the_work(tmp_path):
    """A read-only out_dir ended in transformers' PermissionError traceback (a user's trial); a file where
    the folder should be, the same way. Both are found before the model is read."""
    write_run(tmp_path / "run", tokenizer.char_meta(CHARS))
    (tmp_path / "file").write_text("x")
    with pytest.raises(ConfigError, match=f"cannot write {tmp_path / 'file' / 'hf'}: {tmp_path / 'file'} is not "
                                          "a folder; choose another --folder"):
        export.main([f"--out_dir={tmp_path / 'run'}", f"--folder={tmp_path / 'file' / 'hf'}"])


def test_export_says_one_line_and_writes_files_as_the_umask_says(tmp_path):
    """The command prints only its own line (no transformers shard bar), and every file gets the mode a
    plain open() would give under the user's umask (safetensors' temp file was 0600)."""
    write_run(tmp_path / "run", tokenizer.char_meta(CHARS))
    result = subprocess.run([sys.executable, str(ROOT / "export.py"), f"--out_dir={tmp_path / 'run'}"],
                            capture_output=True, text=True, cwd=ROOT, umask=0o027)
    assert result.returncode == 0 and result.stderr == "", result.stderr
    assert result.stdout.count("\n") == 1 and result.stdout.startswith("wrote "), result.stdout
    modes = {p.name: oct(p.stat().st_mode & 0o777) for p in (tmp_path / "run" / "hf").iterdir()}
    assert "model.safetensors" in modes and set(modes.values()) == {oct(0o640)}, modes


def test_a_new_run_moves_the_earlier_runs_exports_with_it(tmp_path):
    """out_dir/hf (and a folder exported under another name inside out_dir) belong to the run they came
    from: a new run there moves them to previous/ with it, so --init_from=out_dir/hf cannot load the old
    model and export.py writes the new one's hf/ without --overwrite. A user's own folder stays."""
    meta = tokenizer.char_meta(CHARS)
    out = tmp_path / "run"
    write_run(out, meta)
    export.main([f"--out_dir={out}"])
    export.main([f"--out_dir={out}", f"--folder={out / 'my-gpt'}"])
    (out / "notes").mkdir()  # not an export: a config.json alone
    (out / "notes" / "config.json").write_text("{}")
    exported = {p.name: p.read_bytes() for p in (out / "hf").iterdir()}
    moved, _ = train.keep_previous_run(str(out))  # what a new run does first
    kept = next((out / "previous").iterdir())
    assert not (out / "hf").exists() and not (out / "my-gpt").exists()
    assert {p.name: p.read_bytes() for p in (kept / "hf").iterdir()} == exported
    assert checkpoint.is_export(kept / "my-gpt") and (out / "notes" / "config.json").is_file()
    assert "exported as hf/, my-gpt/" in moved and str(kept) in moved
    with pytest.raises(ConfigError, match=re.escape(f"moved aside to {kept / 'hf'}: pass --init_from={kept / 'hf'}")):
        checkpoint.check_init_from(str(out / "hf"), ("resume",))  # sample.py's, lens.py's, train.py's first check
    write_run(out, meta, seed=1)  # the new run's model
    export.main([f"--out_dir={out}"])  # no "exists": hf/ is free for it
    assert (out / "hf" / "model.safetensors").read_bytes() != exported["model.safetensors"]


ROPE = dict(position="rope", norm="rmsnorm")  # config/tiny.py's switches: the folder is Arcee's


@pytest.mark.parametrize("switches", [dict(bias=False), dict(activation="gelu", tie_weights=False),
                                      dict(bias=False, **ROPE), dict(activation="gelu", tie_weights=False, **ROPE)])
def test_round_trip_back_into_glassgpt(tmp_path, capsys, switches):
    """A folder, GPT-2's or Arcee's, comes back through the loader train.py, sample.py and lens.py share:
    the same logits, the same greedy text from sample.py (its char vocabulary from the folder's meta.json)."""
    meta = tokenizer.char_meta(CHARS)
    model = write_run(tmp_path / "run", meta, **switches)
    export.main([f"--out_dir={tmp_path / 'run'}"])
    back = model_from_pretrained(str(tmp_path / "run" / "hf")).eval()
    ids = tokenizer.load_tokenizer(meta)[0](TEXT)
    assert (our_logits(back, ids) - our_logits(model, ids)).abs().max().item() < 1e-5
    if "position" in switches:  # Arcee: the very model, every float32 weight bit for bit
        assert back.config == model.config
        assert all(torch.equal(v, back.state_dict()[k]) for k, v in model.state_dict().items())
    else:  # GPT-2: the zero biases export wrote come back as none, the very model again
        assert back.config == model.config
        assert back.get_num_params() == model.get_num_params()
    capsys.readouterr()
    sample.main([f"--init_from={tmp_path / 'run' / 'hf'}", "--start=ROMEO:", "--num_samples=1",
                 "--max_new_tokens=20", "--temperature=0", "--device=cpu"])
    out, err = capsys.readouterr()
    expect = model.generate(torch.tensor([[CHARS.index(c) for c in "ROMEO:"]]), 20, temperature=0)[0].tolist()
    assert out == "".join(CHARS[i] for i in expect) + "\n---------------\n"
    assert "meta.json" in err  # the char vocabulary came with the folder


def test_arcee_folder_reads_without_transformers(tmp_path, monkeypatch):
    """config.json and model.safetensors are all an Arcee folder needs: transformers is never imported."""
    meta = tokenizer.char_meta(CHARS)
    model = write_run(tmp_path / "run", meta, bias=False, **ROPE)
    export.main([f"--out_dir={tmp_path / 'run'}"])
    monkeypatch.setitem(sys.modules, "transformers", None)  # any import of it now raises ImportError
    back = model_from_pretrained(str(tmp_path / "run" / "hf")).eval()
    ids = tokenizer.load_tokenizer(meta)[0](TEXT)
    assert torch.equal(our_logits(back, ids), our_logits(model, ids))


def test_sharded_arcee_folder_reads_back(tmp_path):
    """A large model's folder splits its weights into shards named by model.safetensors.index.json."""
    from transformers import AutoModelForCausalLM
    meta = tokenizer.char_meta(CHARS)
    model = write_run(tmp_path / "run", meta, bias=True, **ROPE)
    export.main([f"--out_dir={tmp_path / 'run'}"])
    AutoModelForCausalLM.from_pretrained(tmp_path / "run" / "hf").save_pretrained(tmp_path / "sharded",
                                                                                  max_shard_size="20KB")
    assert (tmp_path / "sharded" / "model.safetensors.index.json").is_file()
    assert not (tmp_path / "sharded" / "model.safetensors").exists()
    back = model_from_pretrained(str(tmp_path / "sharded")).eval()
    ids = tokenizer.load_tokenizer(meta)[0](TEXT)
    assert torch.equal(our_logits(back, ids), our_logits(model, ids))


@pytest.mark.parametrize("key, value, word", [
    ("rope_parameters", {"rope_type": "yarn", "factor": 4.0, "rope_theta": 10000.0}, "rope_type='yarn'"),
    ("rope_parameters", {"rope_type": "default", "rope_theta": 500000.0}, "rope_theta=500000.0"),
    ("head_dim", 8, "head_dim=8"),
    ("num_key_value_heads", 1, "num_key_value_heads=1"),
    ("mlp_bias", True, "mlp_bias=True"),
    ("hidden_act", "relu2", "hidden_act='relu2'"),
    ("intermediate_size", 96, "intermediate_size=96"),
    ("rms_norm_eps", 1e-6, "rms_norm_eps=1e-06"),
])
def test_arcee_settings_glassgpt_cannot_compute_are_refused(tmp_path, key, value, word):
    """An Arcee setting glassgpt has no switch for is refused by name, from config.json alone (the folder
    holds no weights, so a reader that went on would fail otherwise): loading it would give other logits."""
    config = GPTConfig(block_size=48, n_layer=2, n_head=2, n_embd=32, vocab_size=65, bias=False, **ROPE)
    arcee = export.arcee_config(config, tokenizer.char_meta(CHARS)).to_dict()
    assert checkpoint.arcee_gpt_config(arcee) == config  # as export.py writes it: exactly our model
    (tmp_path / "config.json").write_text(json.dumps({**arcee, key: value}))
    with pytest.raises(ValueError, match=re.escape(word)):
        model_from_pretrained(str(tmp_path))


def test_arcee_refusal_is_one_line_from_sample_py(tmp_path):
    write_run(tmp_path / "run", tokenizer.char_meta(CHARS), bias=False, **ROPE)
    export.main([f"--out_dir={tmp_path / 'run'}"])
    config = json.loads((tmp_path / "run" / "hf" / "config.json").read_text())
    config["rope_parameters"] = {"rope_type": "yarn", "factor": 4.0, "rope_theta": 10000.0}
    (tmp_path / "run" / "hf" / "config.json").write_text(json.dumps(config))
    result = subprocess.run([sys.executable, str(ROOT / "sample.py"), f"--init_from={tmp_path / 'run' / 'hf'}",
                             "--device=cpu", "--max_new_tokens=4"], capture_output=True, text=True, cwd=ROOT)
    assert result.returncode == 2 and result.stdout == "" and "Traceback" not in result.stderr
    assert result.stderr.count("\n") == 1 and "rope_type='yarn'" in result.stderr, result.stderr


def test_a_malformed_config_json_is_named(tmp_path):
    """A config.json cut short: the JSON error alone ("Expecting property name ...") did not say which file."""
    (tmp_path / "config.json").write_text('{"model_type": "gpt2",')
    with pytest.raises(ValueError, match=re.escape(f"cannot read {tmp_path / 'config.json'}: Expecting property name")):
        model_from_pretrained(str(tmp_path))


def test_other_architectures_are_refused_not_loaded_as_gpt2(tmp_path):
    """A Llama folder (a gated MLP glassgpt has no switch for) is one clear error: GPT-2's loader would
    otherwise read it as GPT-2, its weights left random."""
    from transformers import LlamaConfig, LlamaForCausalLM
    LlamaForCausalLM(LlamaConfig(vocab_size=65, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                                 num_attention_heads=2)).save_pretrained(tmp_path / "llama")
    with pytest.raises(ValueError, match="'llama' model"):
        model_from_pretrained(str(tmp_path / "llama"))
    with pytest.raises(ValueError, match="not GPT-2"):
        GPT.from_pretrained(str(tmp_path / "llama"))


@pytest.mark.parametrize("switches", [dict(bias=False), dict(bias=False, **ROPE)])
def test_train_from_an_exported_folder(tmp_path, switches):
    """train.py --init_from=<folder> starts from the exported weights: its iteration-0 eval is the model's own loss."""
    meta = tokenizer.char_meta(CHARS)
    model = write_run(tmp_path / "run", meta, **switches)
    export.main([f"--out_dir={tmp_path / 'run'}"])
    data = tmp_path / "data"
    tokenizer.write_dataset(data, [i % len(CHARS) for i in range(3000)], [(i * i) % 61 for i in range(500)], meta)
    result = run_script(
        "train.py", f"--init_from={tmp_path / 'run' / 'hf'}", f"--data_dir={data}", f"--out_dir={tmp_path / 'tuned'}",
        "--block_size=32", "--batch_size=4", "--gradient_accumulation_steps=1", "--max_iters=2", "--eval_interval=2",
        "--eval_iters=2", "--device=cpu", "--dtype=float32", "--compile=false", "--num_threads=1")
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "tuned" / "ckpt.pt").is_file()
    first = next(json.loads(line) for line in (tmp_path / "tuned" / "log.jsonl").open() if '"val_loss"' in line)
    val = np.fromfile(data / "val.bin", dtype=np.uint16)
    x, y = train.get_windows(val, train.eval_starts(len(val), 32, 2 * 4), 32)
    with torch.no_grad():  # train.py's eval: the mean of eval_iters batch losses, here two batches of 4
        expect = sum(model(x[k:k + 4], y[k:k + 4])[1].item() for k in (0, 4)) / 2
    assert first["iter"] == 0 and abs(first["val_loss"] - expect) < 1e-5


def test_train_names_every_clash_with_a_folder_in_one_line(tmp_path):
    """A window longer than the folder's model and a model key it does not have: both in the one error."""
    meta = tokenizer.char_meta(CHARS)
    write_run(tmp_path / "run", meta, bias=False)
    export.main([f"--out_dir={tmp_path / 'run'}"])
    tokenizer.write_dataset(tmp_path / "data", [i % 65 for i in range(3000)], [i % 7 for i in range(500)], meta)
    folder = tmp_path / "run" / "hf"
    result = run_script("train.py", f"--init_from={folder}", f"--data_dir={tmp_path / 'data'}",
                        f"--out_dir={tmp_path / 'tuned'}", "--block_size=96", "--n_head=4", "--max_iters=2",
                        "--device=cpu", "--compile=false")
    assert result.returncode == 2 and "Traceback" not in result.stderr and result.stderr.count("\n") == 1
    assert f"block_size=96 is longer than {folder}'s 48; n_head=4 (on the command line) but {folder} has n_head=2" \
        in result.stderr
    assert not (tmp_path / "tuned").exists()


@pytest.mark.parametrize("script", ["train.py", "sample.py"])
def test_a_folder_whose_weights_would_run_code_is_refused_in_one_line(tmp_path, script):
    """A GPT-2 folder's pytorch_model.bin is a pickle: one that names a function is refused, and said so."""
    from test_nanogpt import hostile_checkpoint
    folder, marker = tmp_path / "evil", tmp_path / "pwned"
    transformers.GPT2Config(n_layer=1, n_head=2, n_embd=16, vocab_size=65, n_positions=32).save_pretrained(folder)
    hostile_checkpoint(folder / "pytorch_model.bin", marker)
    meta = tokenizer.char_meta(CHARS)
    tokenizer.write_dataset(tmp_path / "data", [i % 65 for i in range(3000)], [i % 7 for i in range(500)], meta)
    more = [f"--data_dir={tmp_path / 'data'}", f"--out_dir={tmp_path / 'tuned'}", "--block_size=16",
            "--max_iters=1", "--compile=false"] if script == "train.py" else ["--max_new_tokens=2"]
    result = run_script(script, f"--init_from={folder}", "--device=cpu", *more)
    assert result.returncode == 2 and "Traceback" not in result.stderr and result.stderr.count("\n") == 1
    assert "refused its pytorch_model.bin: it names posix.system" in result.stderr, result.stderr
    assert "weights_only" not in result.stderr and not marker.exists()


@pytest.mark.parametrize("script", ["train.py", "sample.py"])
def test_a_folder_with_corrupt_weights_is_one_line(tmp_path, script):
    """A model.safetensors cut short (a copy that failed): safetensors' own error escaped train.py as a
    traceback (sample.py caught it). model_from_pretrained now turns it into a ValueError for both."""
    folder = tmp_path / "cut"
    transformers.GPT2Config(n_layer=1, n_head=2, n_embd=16, vocab_size=65, n_positions=32).save_pretrained(folder)
    (folder / "model.safetensors").write_bytes(b"\x08")
    tokenizer.write_dataset(tmp_path / "data", [i % 65 for i in range(3000)], [i % 7 for i in range(500)],
                            tokenizer.char_meta(CHARS))
    more = [f"--data_dir={tmp_path / 'data'}", f"--out_dir={tmp_path / 'tuned'}", "--block_size=16",
            "--max_iters=1", "--compile=false"] if script == "train.py" else ["--max_new_tokens=2"]
    result = run_script(script, f"--init_from={folder}", "--device=cpu", *more)
    assert result.returncode == 2 and "Traceback" not in result.stderr and result.stderr.count("\n") == 1, result.stderr
    assert f"{folder}): SafetensorError: " in result.stderr or f"{folder}: SafetensorError: " in result.stderr
    assert not (tmp_path / "tuned").exists()


def test_train_refuses_a_folder_with_another_vocabulary(tmp_path):
    """The folder's meta.json is the model's char vocabulary: a dataset whose ids mean other characters is refused."""
    meta = tokenizer.char_meta(CHARS)
    write_run(tmp_path / "run", meta, bias=False, **ROPE)
    export.main([f"--out_dir={tmp_path / 'run'}"])
    other = tokenizer.char_meta(CHARS.replace("3", "4"))  # as many characters, one of them another
    tokenizer.write_dataset(tmp_path / "data", [i % 65 for i in range(3000)], [i % 7 for i in range(500)], other)
    result = run_script("train.py", f"--init_from={tmp_path / 'run' / 'hf'}", f"--data_dir={tmp_path / 'data'}",
                        f"--out_dir={tmp_path / 'tuned'}", "--block_size=32", "--max_iters=2", "--device=cpu",
                        "--compile=false")
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert result.stderr.count("\n") == 1 and "not the tokenizer this model was trained with" in result.stderr
    assert not (tmp_path / "tuned").exists()


def test_gpt2_folder_biases_all_zero_mean_no_bias_any_nonzero_keeps_them(tmp_path):
    """GPT-2's format always stores biases: all exactly zero (export.py's for bias=False) reads back as
    bias=False; a single non-zero one, as in OpenAI's GPT-2, keeps every bias (and its logits)."""
    from transformers import GPT2LMHeadModel
    meta = tokenizer.char_meta(CHARS)
    write_run(tmp_path / "run", meta, bias=False)
    export.main([f"--out_dir={tmp_path / 'run'}"])
    hf = GPT2LMHeadModel.from_pretrained(tmp_path / "run" / "hf")
    with torch.no_grad():
        hf.transformer.h[1].mlp.c_proj.bias[3] = 0.5
    hf.save_pretrained(tmp_path / "biased")
    back = model_from_pretrained(str(tmp_path / "biased")).eval()
    assert back.config.bias and back.transformer.h[1].mlp.c_proj.bias[3].item() == 0.5
    with torch.no_grad():
        theirs = hf.eval()(torch.tensor([[1, 2, 3]])).logits[0]
    assert (theirs - our_logits(back, [1, 2, 3])).abs().max().item() < 1e-4


def test_tiny_gpt2_config_fine_tunes_its_own_export(tmp_path):
    """The natural fine-tune, python train.py config/tiny_gpt2.py --init_from=<its export>, starts: the
    config's bias=False is the folder's (its zero biases), not a conflict."""
    meta = tokenizer.char_meta(CHARS)
    out = tmp_path / "out-tiny-gpt2"  # the config's out_dir, under the cwd below
    write_run(out, meta, bias=False, n_layer=3, n_head=4, n_embd=128, block_size=64,
              position="learned", norm="layernorm")  # the shape config/tiny_gpt2.py trains
    export.main([f"--out_dir={out}"])
    data = tmp_path / "data"
    tokenizer.write_dataset(data, [i % len(CHARS) for i in range(3000)], [(i * i) % 61 for i in range(500)], meta)
    result = run_script("train.py", str(ROOT / "config" / "tiny_gpt2.py"), "--init_from=out-tiny-gpt2/hf",
                        f"--data_dir={data}", "--batch_size=4", "--max_iters=1", "--eval_interval=1", "--eval_iters=1",
                        "--device=cpu", "--dtype=float32", "--compile=false", "--num_threads=1", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert checkpoint.load_checkpoint(out / "ckpt.pt")["model_args"]["bias"] is False
    assert [p.name for p in (out / "previous").glob("*/hf")] == ["hf"]  # the export moved aside with its run


def test_loading_a_gpt2_folder_writes_only_our_lines(tmp_path):
    """transformers' "Loading weights" bar and config notices stay off stderr (checkpoint.quiet_transformers):
    sample.py says only what it loaded, and a folder it refuses is one error line and nothing else."""
    write_run(tmp_path / "run", tokenizer.char_meta(CHARS), bias=False)
    export.main([f"--out_dir={tmp_path / 'run'}"])
    folder = tmp_path / "run" / "hf"
    cmd = [sys.executable, str(ROOT / "sample.py"), f"--init_from={folder}", "--device=cpu", "--num_samples=1",
           "--max_new_tokens=4"]
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    result = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, env=env)
    lines = result.stderr.splitlines()
    assert result.returncode == 0 and len(lines) == 2, result.stderr
    # "loaded GPT-2 weights <folder>" read as OpenAI's (a fresh user's pass): the folder is the user's own
    assert lines[0].startswith(f"loaded {folder}, a Hugging Face GPT-2 folder") and lines[1].startswith("4 tokens in"), \
        result.stderr
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "activation_function": "relu"}))
    result = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, env=env)
    assert result.returncode == 2 and result.stdout == "", result.stdout  # refused after the weights loaded
    assert result.stderr.startswith("error: cannot load") and result.stderr.count("\n") == 1, result.stderr


@pytest.mark.parametrize("tool", ["sample.py", "lens.py"])
def test_an_export_given_as_out_dir_says_init_from_reads_it(tmp_path, tool):
    """--out_dir=<an export folder> has no ckpt.pt: the one error line names the key that reads it."""
    write_run(tmp_path / "run", tokenizer.char_meta(CHARS), bias=False)
    export.main([f"--out_dir={tmp_path / 'run'}"])
    folder = tmp_path / "run" / "hf"
    result = run_script(tool, f"--out_dir={folder}", "--device=cpu")
    assert result.returncode == 2 and result.stdout == "" and result.stderr.count("\n") == 1, result.stderr
    assert f"no checkpoint at {folder / 'ckpt.pt'}" in result.stderr and f"--init_from={folder}" in result.stderr


def test_export_names_every_missing_package(tmp_path, monkeypatch):
    """With none of transformers, tokenizers and safetensors installed the one line names all three, not
    only the first found missing; pip install transformers brings them all."""
    write_run(tmp_path / "run", tokenizer.char_meta(CHARS))
    for name in ("transformers", "tokenizers", "safetensors"):
        monkeypatch.setitem(sys.modules, name, None)  # as if not installed: find_spec says None
    with pytest.raises(ConfigError, match=r"\(transformers, tokenizers, safetensors are missing\): "
                                          r"pip install transformers"):
        export.main([f"--out_dir={tmp_path / 'run'}"])
    monkeypatch.setitem(sys.modules, "transformers", transformers)
    with pytest.raises(ConfigError, match=r"\(tokenizers, safetensors are missing\)"):
        export.main([f"--out_dir={tmp_path / 'run'}"])
    assert not (tmp_path / "run" / "hf").exists()


def test_export_help_says_it_needs_transformers_and_both_architectures():
    result = subprocess.run([sys.executable, str(ROOT / "export.py"), "--help"], capture_output=True, text=True,
                            cwd=ROOT)
    assert result.returncode == 0 and "pip install transformers" in result.stdout
    to = next(line for line in result.stdout.splitlines() if line.strip().startswith("--to="))
    assert "GPT-2" in to and "Arcee" in to, to


@pytest.mark.parametrize("bias", [False, True])
def test_model_card_names_the_run_and_has_no_blank_bullet(tmp_path, bias):
    """<out_dir>/hf is named after the run (out-tiny-gpt2, not hf) in the card's title and upload line; a
    --folder by its own name; the bullet list has no whitespace-only line (the bias note or nothing)."""
    write_run(tmp_path / "out-tiny-gpt2", tokenizer.char_meta(CHARS), bias=bias)
    export.main([f"--out_dir={tmp_path / 'out-tiny-gpt2'}"])
    card = (tmp_path / "out-tiny-gpt2" / "hf" / "README.md").read_text()
    assert "\n# out-tiny-gpt2\n" in card and "hf upload <you>/out-tiny-gpt2 " in card and "/hf " not in card
    bullets = card[card.index("\n- "):card.index("## Use")].strip().splitlines()
    assert all(line.strip() for line in bullets), bullets
    assert ("all zero" in card) is (not bias)
    export.main([f"--out_dir={tmp_path / 'out-tiny-gpt2'}", f"--folder={tmp_path / 'my-gpt'}"])
    card = (tmp_path / "my-gpt" / "README.md").read_text()
    assert "\n# my-gpt\n" in card and "hf upload <you>/my-gpt " in card
