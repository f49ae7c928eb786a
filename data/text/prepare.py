"""
Your own text as a dataset:

    python data/text/prepare.py notes.txt    # or --input=notes.txt; --tokenizer=char
    python data/text/prepare.py --input=my_books/ --tokenizer=gpt2 --out_dir=data/books

A folder means its *.txt files, sorted, joined by blank lines; the last val_fraction of the text
validates. Then train on it in a run folder of its own (not config/tiny.py's out-tiny, the
Shakespeare run's), with --data_dir=DIR in place of --dataset=text for an --out_dir elsewhere:

    python train.py config/tiny.py --dataset=text --out_dir=out-text --muon_weight_decay=0.1
"""

import glob
import os
import sys

# The repo root, so that its modules import from here.
REPO = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
sys.path.insert(0, REPO)
from configurator import ConfigError, configure, run  # noqa: E402
from tokenizer import prepare_text, read_text  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULTS = dict(
    input="",  # a UTF-8 text file, or a folder of *.txt files (required)
    tokenizer="char",  # char: one token per character; gpt2: GPT-2's BPE
    out_dir=HERE,  # where train.bin, val.bin and meta.json go
    val_fraction=0.1,  # the last fraction of the text, held out as val.bin
)


def main():
    # A path given to this script is the text to read, never a config file to run.
    argv = [arg if arg.startswith("-") else f"--input={arg}" for arg in sys.argv[1:]]
    cfg = configure(DEFAULTS, argv)
    path = cfg["input"]
    if not path:
        raise ConfigError("--input=PATH is required: a text file, or a folder of *.txt files")
    files = [path]
    if os.path.isdir(path):
        files = sorted(glob.glob(os.path.join(glob.escape(path), "*.txt")))
    texts = [read_text(f) for f in files]
    text = "\n\n".join(t.strip("\n") for t in texts if t.strip()) + "\n"
    if len(texts) == 1:
        text = texts[0]
    if not text.strip():
        raise ConfigError(f"{path} holds no text")
    prepare_text(text, cfg["tokenizer"], cfg["out_dir"], cfg["val_fraction"], source=path)
    data = f"--data_dir={cfg['out_dir']}"
    if os.path.abspath(cfg["out_dir"]) == HERE:
        data = "--dataset=text"
    print(f"next: python train.py config/tiny.py {data} --out_dir=out-text --muon_weight_decay=0.1")


if __name__ == "__main__":
    run(main)
