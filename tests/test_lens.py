"""
lens.py on tiny random-weight models: the captured attention (probabilities @ V reproduce each layer's
output, for every position scheme, norm and attention path), the logit lens, the head statistics on
hand-made attention, the loss on a file against a hand computation, the printed report, and one-line
errors. The page in a real browser is tests/test_lens_page.py.
"""

import dataclasses
import json
import math
import os
import re
import subprocess
import sys

import numpy as np
import pytest
import torch
from torch.nn import functional as F

import lens
import tokenizer
from checkpoint import save_checkpoint
from configurator import run
from conftest import TIKTOKEN_DIR
from model import GPT, GPTConfig

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHARED_TIKTOKEN = str(TIKTOKEN_DIR)
VOCAB = "\n ,.:;!?'-ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyzé"  # é: two UTF-8 bytes
TEXT = "ROMEO:\nBut soft, what light through yonder window breaks?"


def tiny_gpt(seed=0, **kw):
    torch.manual_seed(seed)
    cfg = dict(block_size=64, vocab_size=len(VOCAB), n_layer=2, n_head=2, n_embd=32)
    cfg.update(kw)
    model = GPT(GPTConfig(**cfg)).eval()
    with torch.no_grad():  # larger weights than GPT-2's init: sharper, less uniform attention to test on
        for block in model.transformer.h:
            block.attn.c_attn.weight[:2 * model.config.n_embd].mul_(20)  # q and k: scores x 400
    return model


def write_out_dir(folder, **kw):
    model = tiny_gpt(**kw)
    save_checkpoint({"model": model.state_dict(), "model_args": dataclasses.asdict(model.config), "config": {},
                     "iter_num": 3, "best_val_loss": 4.0}, str(folder / "ckpt.pt"))
    tokenizer.write_meta(folder, dict(tokenizer.char_meta(VOCAB), dtype="uint16"))
    return model


@pytest.fixture
def out_dir(tmp_path):
    write_out_dir(tmp_path)
    return tmp_path


def char_ids(text):
    encode, _ = tokenizer.load_tokenizer(tokenizer.char_meta(VOCAB))
    return encode(text)


# ----------------------------------------------------------------------------- the captured attention

@pytest.mark.parametrize("attention", ["sdpa", "manual"])
@pytest.mark.parametrize("position, norm", [("learned", "layernorm"), ("sinusoidal", "rmsnorm"),
                                            ("rope", "rmsnorm"), ("rope", "layernorm")])
def test_captured_probabilities_times_v_reproduce_each_layer(attention, position, norm):
    model = tiny_gpt(position=position, norm=norm, attention=attention)
    idx = torch.tensor([char_ids(TEXT)])
    T = idx.size(1)
    seen = {}  # layer -> (input of attn, output of attn), from an ordinary forward (capture off)
    hooks = [block.attn.register_forward_hook(lambda m, a, out, layer=layer: seen.__setitem__(layer, (a[0], out)))
             for layer, block in enumerate(model.transformer.h)]
    with torch.no_grad():
        plain, _ = model(idx, idx)
    for h in hooks:
        h.remove()
    inside = lens.look_inside(model, idx[0].tolist())
    att = inside["att"]
    assert att.shape == (2, 2, T, T)
    # capture changes nothing the model computes: the same logits as the ordinary forward
    assert torch.equal(inside["logits"], plain[0])
    assert all(block.attn.att is None and not block.attn.capture for block in model.transformer.h)
    for layer, block in enumerate(model.transformer.h):
        x, out = seen[layer]
        a = block.attn
        v = a.c_attn(x).split(a.n_embd, dim=2)[2].view(1, T, a.n_head, -1).transpose(1, 2)
        y = (att[layer][None] @ v).transpose(1, 2).reshape(1, T, a.n_embd)
        torch.testing.assert_close(a.c_proj(y), out, atol=2e-5, rtol=1e-4)
    torch.testing.assert_close(att.sum(-1), torch.ones(2, 2, T))  # every row is a distribution
    future = torch.ones(T, T, dtype=torch.bool).triu(diagonal=1)
    assert (att[..., future] == 0).all()  # exactly zero on the future
    assert (att[..., ~future] > 0).all()
    uniform = (~future).float() / (~future).sum(-1, keepdim=True)
    assert (att - uniform).abs().amax() > 0.3  # far from an even average: a wrong capture could not pass


def test_capture_with_a_kv_cache_gives_the_rows_of_the_new_tokens():
    """A chunk after a cached past (the offset mask): its rows equal the same rows of the whole-text capture."""
    from model import KVCache
    model = tiny_gpt(position="rope")
    ids = torch.tensor([char_ids(TEXT)])
    whole = lens.look_inside(model, ids[0].tolist())["att"]
    cache = KVCache(model.config.n_layer, model.config.block_size)
    with torch.no_grad(), lens.capture_attention(model) as attns:
        model(ids[:, :20], kv_cache=cache)
        model(ids[:, 20:30], kv_cache=cache)
        chunk = torch.stack([a.att[0] for a in attns])  # (L, H, 10, block_size): the cache's whole buffer
    torch.testing.assert_close(chunk[..., :30], whole[:, :, 20:30, :30], atol=1e-5, rtol=1e-4)
    assert (chunk[..., 30:] == 0).all()  # no weight on a position not yet stored


# ----------------------------------------------------------------------------- the logit lens

@pytest.mark.parametrize("position", ["learned", "rope"])
def test_the_last_layer_of_the_lens_is_the_models_logits(position):
    model = tiny_gpt(position=position, n_layer=3)
    ids = char_ids(TEXT)
    inside = lens.look_inside(model, ids)
    lens_logits = inside["lens_logits"]
    assert lens_logits.shape == (4, len(ids), len(VOCAB))  # the embedding and 3 blocks
    torch.testing.assert_close(lens_logits[-1], inside["logits"], atol=0, rtol=0)
    # each row is what it says: row 0 the embeddings alone, read out through ln_f and lm_head
    idx = torch.tensor(ids)
    emb = model.transformer.wte(idx) + (model.transformer.wpe(torch.arange(len(ids))) if position == "learned" else 0)
    with torch.no_grad():
        torch.testing.assert_close(lens_logits[0], model.lm_head(model.transformer.ln_f(emb)))
    # the per-layer loss: the last equals the model's own loss on the text
    with torch.no_grad():
        _, loss = model(idx[None, :-1], idx[None, 1:])
    losses = inside["lens_loss"]
    assert losses.shape == (4,) and losses[-1].item() == pytest.approx(loss.item(), rel=1e-6)
    assert len(set(losses.tolist())) == 4
    assert inside["losses"].mean().item() == pytest.approx(loss.item(), rel=1e-6)


# ----------------------------------------------------------------------------- head statistics

def test_head_stats_on_hand_made_attention():
    T = 5
    eye = torch.eye(T)
    prev = torch.zeros(T, T)
    prev[0, 0] = 1
    prev[torch.arange(1, T), torch.arange(0, T - 1)] = 1
    first = torch.zeros(T, T)
    first[:, 0] = 1
    uniform = torch.ones(T, T).tril()
    uniform /= uniform.sum(-1, keepdim=True)
    att = torch.stack([torch.stack([eye, prev]), torch.stack([first, uniform])])  # (2 layers, 2 heads, T, T)
    s = lens.head_stats(att)
    assert s["diagonal"].tolist() == [[1, 0], [0, 1]]  # uniform rows tie, and a tie counts
    assert s["previous"].tolist() == [[0, 1], [0.25, 1]]  # first-token head: row 1's first token is its previous
    assert s["first"].tolist() == [[0, 0.25], [1, 1]]
    # distances: 0, 1, i (mean of 1..4 = 2.5), i/2 (1.25)
    torch.testing.assert_close(s["distance"], torch.tensor([[0.0, 1.0], [2.5, 1.25]]))
    ent_uniform = sum(math.log(i + 1) for i in range(1, T)) / (T - 1)
    torch.testing.assert_close(s["entropy"], torch.tensor([[0.0, 0.0], [0.0, ent_uniform]]))
    table = lens.stats_table(s, T).splitlines()  # a line per head, and the reference: a random maximum, an even average
    assert table[2].split() == ["0", "1", "0.00", "1.00", "0.25", "1.00", "0.00"]
    chance = (1 / 2 + 1 / 3 + 1 / 4 + 1 / 5) / 4
    assert table[-1].split()[:6] == ["reference", f"{chance:.2f}", f"{chance:.2f}", f"{chance:.2f}", "1.25",
                                     f"{ent_uniform:.2f}"]


# ----------------------------------------------------------------------------- loss on a file

def hand_loss(model, ids, context_start):
    """Sum of -log p(ids[j] | ids[context_start(j):j]) over j = 1..n-1, one forward pass per token."""
    total = 0.0
    with torch.no_grad():
        for j in range(1, len(ids)):
            logits, _ = model(torch.tensor([ids[context_start(j):j]]))
            total -= F.log_softmax(logits[0, -1], dim=-1)[ids[j]].item()
    return total


TEXT_E = "Thé quick brown fox: jumps over thé lazy dog, and é again!"  # 58 characters, 61 bytes


@pytest.mark.parametrize("stride", [1, 8])
def test_eval_matches_a_hand_computation(stride):
    B = 8
    model = tiny_gpt(block_size=B)
    text = TEXT_E[:1 + 6 * B] if stride == B else TEXT_E  # stride B: n - 1 a multiple of B, windows back to back
    ids = char_ids(text)
    meta = tokenizer.char_meta(VOCAB)
    nbytes = lens.token_bytes(meta, ids)
    assert sum(nbytes) == len(text.encode()) > len(text)
    r = lens.evaluate(model, ids, nbytes, stride=stride, batch_size=3)
    if stride == 1:  # each token sees the B tokens before it (fewer at the start)
        total = hand_loss(model, ids, lambda j: max(0, j - B))
    else:  # back-to-back windows: a token sees its window's tokens before it
        total = hand_loss(model, ids, lambda j: (j - 1) // B * B)
    n = len(ids) - 1
    assert r["tokens"] == n and r["bytes"] == len(text[1:].encode())
    assert r["nats_per_token"] == pytest.approx(total / n, rel=1e-5)
    assert r["perplexity"] == pytest.approx(math.exp(total / n), rel=1e-5)
    assert r["bits_per_byte"] == pytest.approx(total / math.log(2) / len(text[1:].encode()), rel=1e-5)


def test_eval_head_statistics_average_the_windows():
    model = tiny_gpt(block_size=16)
    ids = char_ids(TEXT_E)  # 58 tokens: windows at 0, 8, ..., 40 and 41
    r = lens.evaluate(model, ids, [1] * len(ids), stride=8, batch_size=4, heads=True)
    assert r["windows"] == 7 and r["heads"]["entropy"].shape == (2, 2)
    each = [lens.head_stats(lens.look_inside(model, ids[b:b + 16])["att"]) for b, _ in lens.windows(len(ids), 16, 8)]
    for name, value in r["heads"].items():
        torch.testing.assert_close(value, sum(s[name] for s in each) / 7)
    plain = lens.evaluate(model, ids, [1] * len(ids), stride=8, batch_size=4)
    assert plain["heads"] is None and plain["nats_per_token"] == pytest.approx(r["nats_per_token"], rel=1e-6)


def test_windows_score_every_target_once():
    for n, B, stride in [(5, 8, 4), (9, 8, 4), (10, 8, 4), (100, 8, 3), (100, 8, 8), (33, 8, 1)]:
        scored = []
        for begin, first in lens.windows(n, B, stride):
            end = min(begin + B, n - 1)  # targets begin+1 .. end
            scored += [j for j in range(begin + 1, end + 1) if j >= first]
            assert first - 1 - begin <= B
        assert scored == list(range(1, n)), (n, B, stride)


def test_eval_command_prints_the_numbers(out_dir, tmp_path, capsys):
    path = tmp_path / "text.txt"
    path.write_text(TEXT_E * 3, encoding="utf-8")  # 174 characters: windows of 64 at 0, 16, ..., 96 and 109
    r = lens.main([f"--out_dir={out_dir}", f"--eval={path}", "--stride=16", "--heads=true"])
    out = capsys.readouterr().out
    assert "heads, averaged over the 8 windows (504 rows of attention):" in out
    assert out.splitlines()[-1].strip().startswith("reference")
    assert r["tokens"] == 173 and r["windows"] == 8 and r["stride"] == 16
    assert f"nats/token {r['nats_per_token']:.4f}  perplexity {r['perplexity']:.3f}  bits/byte {r['bits_per_byte']:.4f}" in out
    assert "173 tokens scored (char), 182 UTF-8 bytes, 8 windows of 64 (stride 16)" in out
    path.write_text(TEXT_E, encoding="utf-8")  # 58 characters: one window
    lens.main([f"--out_dir={out_dir}", f"--eval={path}", "--heads=true"])
    out = capsys.readouterr().out
    assert "57 tokens scored (char), 60 UTF-8 bytes, 1 window of 57 (stride 32)" in out
    assert "heads, averaged over the one window (56 rows of attention):" in out


def test_eval_of_a_datasets_split_is_the_eval_of_its_text(out_dir, tmp_path, capsys):
    """--eval=.../val.bin scores the split train.py evaluates exactly as its text scores."""
    data = tmp_path / "data"
    data.mkdir()
    np.asarray(char_ids(TEXT_E * 3), dtype=np.uint16).tofile(data / "val.bin")
    tokenizer.write_meta(data, tokenizer.char_meta(VOCAB))
    (tmp_path / "val.txt").write_text(TEXT_E * 3, encoding="utf-8")
    r_bin = lens.main([f"--out_dir={out_dir}", f"--eval={data / 'val.bin'}", "--stride=16"])
    r_txt = lens.main([f"--out_dir={out_dir}", f"--eval={tmp_path / 'val.txt'}", "--stride=16"])
    assert r_bin == r_txt and r_bin["tokens"] == 173 and r_bin["bytes"] == 182
    (data / "val.bin").rename(data / "VAL.BIN")  # the name's case: it was read as a text file
    assert lens.main([f"--out_dir={out_dir}", f"--eval={data / 'VAL.BIN'}", "--stride=16"]) == r_bin
    assert f"{data / 'val.bin'}: 173 tokens scored (char), 182 UTF-8 bytes" in capsys.readouterr().out


def one_line_error(capsys, args):
    """lens.py run as a command (configurator.run): exit 2 and one error line, no traceback. Returns the line."""
    with pytest.raises(SystemExit) as e:
        run(lambda: lens.main(["--html=", "--png=", *args]))
    err = capsys.readouterr().err.strip().splitlines()
    assert e.value.code == 2 and len(err) == 1 and err[0].startswith("error: "), err
    return err[0]


def test_splits_it_must_not_score_are_one_line(out_dir, tmp_path, capsys):
    """A split whose ids would be read as other characters, or cannot be read: one line, exit 2."""
    for name, meta, raw in (("no_meta", None, b"\x01\x00\x02\x00"),
                            ("other_vocabulary", tokenizer.char_meta(VOCAB.replace("é", "è")), b"\x01\x00\x02\x00"),
                            ("half_a_token", tokenizer.char_meta(VOCAB), b"\x01\x00\x02"),
                            ("id_past_the_vocabulary", tokenizer.char_meta(VOCAB), b"\x01\x00\xff\x00")):
        (tmp_path / name).mkdir()
        (tmp_path / name / "val.bin").write_bytes(raw)
        if meta:
            tokenizer.write_meta(tmp_path / name, meta)
        assert str(tmp_path / name / "val.bin") in one_line_error(capsys, [f"--out_dir={out_dir}",
                                                                           f"--eval={tmp_path / name / 'val.bin'}"])
    for missing in ("half_a_token/train.bin", "half_a_token/train.txt", "nope/val.bin"):
        assert missing in one_line_error(capsys, [f"--out_dir={out_dir}", f"--eval={tmp_path / missing}"])


@pytest.mark.skipif(not os.path.isdir(SHARED_TIKTOKEN), reason="no tiktoken cache of GPT-2's BPE (TIKTOKEN_CACHE_DIR or ../shared/data/tiktoken)")
def test_bpe_bytes_and_eval(monkeypatch):
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", os.path.abspath(SHARED_TIKTOKEN))
    meta = tokenizer.gpt2_meta()
    encode, _ = tokenizer.load_tokenizer(meta)
    text = "Thé quick brown fox — 狐狸 — jumps over the lazy dog. " * 4
    ids = encode(text)
    nbytes = lens.token_bytes(meta, ids)
    assert sum(nbytes) == len(text.encode()) and len(ids) < len(text)  # BPE: several bytes a token
    model = tiny_gpt(block_size=16, vocab_size=meta["vocab_size"], n_embd=16)
    r = lens.evaluate(model, ids, nbytes, stride=1)
    total = hand_loss(model, ids, lambda j: max(0, j - 16))
    assert r["bits_per_byte"] == pytest.approx(total / math.log(2) / sum(nbytes[1:]), rel=1e-5)


# ----------------------------------------------------------------------------- the report

def test_report_html_and_png(out_dir, tmp_path, capsys):
    page, png = tmp_path / "p.html", tmp_path / "p.png"
    r = lens.main([f"--out_dir={out_dir}", f"--start={TEXT}", f"--html={page}", f"--png={png}", "--color=never"])
    out, err = capsys.readouterr()
    assert out.startswith(TEXT + "\n") and "\x1b[" not in out
    assert r["tokens"] == list(TEXT)
    mean = r["losses"].mean().item()
    assert f"surprise: mean {mean:.4f} nats over {len(TEXT) - 1} tokens" in out
    table = out[out.index("layer head"):].split("\n\n")[0].splitlines()
    assert len(table) == 1 + 2 * 2 + 1  # header, a line per head, the reference
    s = r["stats"]
    assert table[1].split() == ["0", "0", f"{s['diagonal'][0, 0]:.2f}", f"{s['previous'][0, 0]:.2f}",
                                f"{s['first'][0, 0]:.2f}", f"{s['distance'][0, 0]:.2f}", f"{s['entropy'][0, 0]:.2f}"]
    assert "loss  emb: " in out and f"1: {r['lens_loss'][-1]:.3f}" in out
    itos = tokenizer.char_meta(VOCAB)["itos"]
    top1 = [itos[i] for i in r["lens_logits"][-1].argmax(-1).tolist()]  # the last block's row of the lens grid
    rows = [line[6:] for line in out[out.index("logit lens"):].splitlines() if line.startswith("    1 ")]
    assert "".join(row.replace(" ", "") for row in rows) == "".join(lens.show(t) for t in top1).replace(" ", "")
    assert f"wrote {png}" in err and f"wrote {page}" in err
    pytest.importorskip("matplotlib")
    assert png.read_bytes().startswith(b"\x89PNG") and png.stat().st_size > 5000
    doc = page.read_text(encoding="utf-8")
    assert "http://" not in doc and "https://" not in doc and "<link" not in doc  # nothing fetched from outside
    data = json.loads(re.search(r"const D = (.*?), \$ = ", doc).group(1))
    assert data["tokens"] == list(TEXT) and data["surprise"][1:] == [round(x, 3) for x in r["losses"].tolist()]
    assert data["att"][1][1][5] == [round(w, 3) for w in r["att"][1, 1, 5, :6].tolist()]


def test_unless_named_the_page_and_png_go_in_the_runs_folder_and_say_so(out_dir, tmp_path, monkeypatch, capsys):
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")
    lens.main([f"--out_dir={out_dir}", "--color=never"])
    err = capsys.readouterr().err
    assert os.listdir(".") == [] and (out_dir / "lens.html").is_file() and str(out_dir / "lens.html") in err
    pytest.importorskip("matplotlib")
    assert (out_dir / "lens.png").is_file() and str(out_dir / "lens.png") in err


def test_the_png_goes_beside_a_named_page_unless_named_itself(out_dir, tmp_path, capsys):
    lens.main([f"--out_dir={out_dir}", "--color=never", f"--html={tmp_path / 'pages' / 'romeo.html'}"])
    assert (tmp_path / "pages" / "romeo.html").is_file() and not (out_dir / "lens.html").exists()
    pytest.importorskip("matplotlib")
    assert (tmp_path / "pages" / "lens.png").is_file() and not (out_dir / "lens.png").exists()


def test_the_files_lens_writes_into_the_current_folder_are_left_out_of_git():
    """Reading GPT-2 or a folder, lens.py writes lens.html and lens.png where it runs: git is to ignore them."""
    names = [lens.html, lens.png, "text.html", "text.png"]
    try:
        p = subprocess.run(["git", "check-ignore", "--no-index", *names], cwd=REPO, capture_output=True, text=True)
    except FileNotFoundError:
        pytest.skip("no git here to read .gitignore")
    if p.returncode == 128:  # not a git checkout (e.g. a source archive): no .gitignore applies
        pytest.skip(f"{REPO} is not a git checkout: {p.stderr.strip()}")
    assert sorted(p.stdout.split()) == sorted(names), p.stdout


def test_ansi_colour_only_when_asked(out_dir, capsys):
    lens.main([f"--out_dir={out_dir}", "--start=ROMEO: what light", "--html=", "--png=", "--color=always"])
    out = capsys.readouterr().out
    first = out.splitlines()[0]
    assert first.startswith("R\x1b[48;5;") and first.count("\x1b[0m") == len("ROMEO: what light") - 1
    lens.main([f"--out_dir={out_dir}", "--start=ROMEO: what light", "--html=", "--png="])  # auto: not a terminal
    assert "\x1b[" not in capsys.readouterr().out


@pytest.mark.slow
def test_a_hugging_face_folder(tmp_path, capsys, monkeypatch):
    transformers = pytest.importorskip("transformers")
    if not os.path.isdir(SHARED_TIKTOKEN):
        pytest.skip("no tiktoken cache of GPT-2's BPE (TIKTOKEN_CACHE_DIR or ../shared/data/tiktoken)")
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", os.path.abspath(SHARED_TIKTOKEN))
    torch.manual_seed(0)
    hf = transformers.GPT2LMHeadModel(transformers.GPT2Config(n_positions=32, n_embd=16, n_layer=2, n_head=2))
    hf.save_pretrained(tmp_path / "hf")
    r = lens.main([f"--init_from={tmp_path / 'hf'}", "--start=The meaning of life is", "--html=", "--png="])
    assert r["tokens"] == ["The", " meaning", " of", " life", " is"]
    assert r["att"].shape == (2, 2, 5, 5)
    with torch.no_grad():
        theirs = hf.eval()(torch.tensor([r["ids"]])).logits[0]
    assert (theirs - r["logits"]).abs().max().item() < 1e-4
    assert f"loaded {tmp_path / 'hf'}" in capsys.readouterr().err


def test_bad_inputs_are_one_line(out_dir, capsys):
    (out_dir / "empty.txt").write_text("")
    for args, word in (
            (["--start="], "0 token"),
            (["--start=R"], "1 token"),
            (["--start=" + "a" * 65], "65 token"),
            (["--start=ROMEO: 1+1"], "'1'"),  # a character the vocabulary lacks
            ([f"--eval={out_dir / 'empty.txt'}"], "0 token"),
            ([f"--eval={out_dir / 'nope.txt'}"], "nope.txt"),
            ([f"--eval={out_dir / 'empty.txt'}", "--stride=65"], "stride"),
            (["--color=sometimes"], "color"),
            (["--strat=x"], "start"),  # did you mean
            (["--png=x.jpgg"], "png"),  # matplotlib would choose another format by the name
            (["--html=README.md"], "html"),  # never the user's README written over by a page
            ([f"--init_from={out_dir / 'nope'}"], "nope"),
            ([f"--out_dir={out_dir / 'nope'}"], "nope")):
        assert word in one_line_error(capsys, [f"--out_dir={out_dir}", *args]), args
    for key in ("html", "png"):  # a file where the page's folder should be: one line before the analysis
        with pytest.raises(SystemExit) as e:
            run(lambda: lens.main([f"--out_dir={out_dir}", f"--{key}={out_dir / 'empty.txt' / f'lens.{key}'}"]))
        out, err = capsys.readouterr()
        assert e.value.code == 2 and out == "" and err.startswith("error: cannot write") and len(err.splitlines()) == 1


def test_help(capsys):
    with pytest.raises(SystemExit) as e:
        lens.main(["--help"])
    out = capsys.readouterr().out
    assert e.value.code == 0 and "--eval=" in out and "--stride=" in out and "logit lens" in out


def test_bad_input_as_a_user_sees_it(out_dir):
    """A real process: bad input is one line on stderr and exit 2, nothing on stdout, no traceback."""
    proc = subprocess.run([sys.executable, "lens.py", f"--out_dir={out_dir}", "--start=" + "a" * 65], cwd=REPO,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and proc.stdout == "" and "Traceback" not in proc.stderr
    assert proc.stderr.count("\n") == 1 and "65 token" in proc.stderr, proc.stderr
