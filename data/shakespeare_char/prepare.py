"""
Tiny Shakespeare, one token per character, as nanoGPT's
(vocab 65, 1,003,854 train / 111,540 val tokens):

    python data/shakespeare_char/prepare.py [--input=PATH] [--out_dir=DIR]

The text: --input, else the input.txt kept here (or in data/shakespeare), else Karpathy's char-rnn
copy, downloaded, checked against its sha256 and kept here as input.txt.
"""

import hashlib
import os
import sys
import urllib.request

# The repo root, so that its modules import from here.
REPO = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
sys.path.insert(0, REPO)
from configurator import ConfigError, configure, run  # noqa: E402
from tokenizer import prepare_text, read_text, replace_file  # noqa: E402

URL = "https://raw.githubusercontent.com/karpathy/char-rnn/master/data/tinyshakespeare/input.txt"
SHA256 = "86c4e6aa9db7c042ec79f339dcb96d42b0075e16b8fc2e86bf0ca57e2dc565ed"  # 1,115,394 bytes
HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULTS = dict(
    input="",  # a text file to prepare instead; "" = a kept input.txt, else the download
    out_dir=HERE,  # where train.bin, val.bin and meta.json go
)


def shakespeare_text(path=""):
    """(text, where it came from): path, else an input.txt either Shakespeare folder keeps, else the
    download."""
    folders = ("shakespeare_char", "shakespeare")
    kept = [os.path.join(os.path.dirname(HERE), name, "input.txt") for name in folders]
    path = path or next((p for p in kept if os.path.isfile(p)), "")
    if path:
        return read_text(path), path
    print(f"downloading tiny Shakespeare from {URL}")
    try:
        with urllib.request.urlopen(URL, timeout=30) as response:
            data = response.read()
    except OSError as e:
        why = getattr(e, "reason", None) or e
        kept_at = os.path.relpath(kept[0])
        here = os.path.relpath(os.path.join(HERE, "prepare.py"))
        raise ConfigError(f"cannot download {URL} ({why}); save it as {kept_at}, "
                          f"or run python {here} --input=PATH") from None
    if hashlib.sha256(data).hexdigest() != SHA256:
        raise ConfigError(f"{URL} sent {len(data):,} bytes that are not tiny Shakespeare "
                          "(a proxy's page?)")
    replace_file(kept[0], lambda f: f.write(data))
    return data.decode("utf-8"), URL


def prepare(cfg, tokenizer):
    text, source = shakespeare_text(cfg["input"])
    prepare_text(text, tokenizer, cfg["out_dir"], val_fraction=0.1, source=source)


if __name__ == "__main__":
    run(lambda: prepare(configure(DEFAULTS), "char"))
