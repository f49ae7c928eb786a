"""
Your own text as a dataset:

    python data/text/prepare.py --input=notes.txt --tokenizer=char
    python data/text/prepare.py --input=my_books/ --tokenizer=gpt2 --out_dir=data/books

A folder means its *.txt files, sorted, joined by blank lines; the last val_fraction of the text validates.
Then train on it: python train.py config/tiny.py --dataset=text (train.py reads data/<dataset>/).
"""

import glob
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))  # the repo root
from configurator import ConfigError, configure, run  # noqa: E402
from tokenizer import prepare_text, read_text  # noqa: E402

DEFAULTS = dict(
    input="",  # a UTF-8 text file, or a folder of *.txt files (required)
    tokenizer="char",  # char: one token per character; gpt2: GPT-2's BPE
    out_dir=os.path.dirname(os.path.abspath(__file__)),  # where train.bin, val.bin and meta.json go
    val_fraction=0.1,  # the last fraction of the text, held out as val.bin
)


def main():
    cfg = configure(DEFAULTS)
    path = cfg["input"]
    if not path:
        raise ConfigError("--input=PATH is required: a text file, or a folder of *.txt files")
    files = sorted(glob.glob(os.path.join(glob.escape(path), "*.txt"))) if os.path.isdir(path) else [path]
    texts = [read_text(f) for f in files]
    text = texts[0] if len(texts) == 1 else "\n\n".join(t.strip("\n") for t in texts if t.strip()) + "\n"
    if not text.strip():
        raise ConfigError(f"{path} holds no text")
    prepare_text(text, cfg["tokenizer"], cfg["out_dir"], cfg["val_fraction"], source=path)


if __name__ == "__main__":
    run(main)
