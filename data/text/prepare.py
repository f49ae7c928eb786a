"""
Your own text as a dataset:

    python data/text/prepare.py --input=notes.txt --tokenizer=char
    python data/text/prepare.py --input=my_books/ --tokenizer=gpt2 --out_dir=data/books

A file is read as UTF-8 text: a byte-order mark at its start is dropped, and Windows line ends (CR LF)
become LF, so neither becomes a token. A folder means all its *.txt files, in sorted order, joined by
blank lines. The last val_fraction of the text is the validation split. Then train with
--dataset=<the out_dir's folder name>, e.g. python train.py config/tiny.py --dataset=text (train.py reads
data/<dataset>/).
--key value, with a space, works too (--input notes.txt).
"""

import glob
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))  # the repo root
if __name__ == "__main__":  # before numpy loads: a Ctrl-C meanwhile is one line, not a traceback
    from configurator import quit_quietly_on_early_ctrl_c
    quit_quietly_on_early_ctrl_c()
from configurator import ConfigError, configure, run, spaced_values  # noqa: E402
from tokenizer import check_dataset_folder, check_prepare, not_utf8, prepare_text  # noqa: E402

DEFAULTS = dict(
    input="",  # a text file, or a folder of *.txt files (required)
    tokenizer="char",  # char: one token per character; gpt2: GPT-2's BPE
    out_dir=os.path.dirname(os.path.abspath(__file__)),  # where train.bin, val.bin and meta.json go
    val_fraction=0.1,  # the last fraction of the text, held out as val.bin
)


def read_text(path):
    """The text of a file, or of a folder's *.txt files; missing, empty or non-UTF-8 input is a ConfigError."""
    if os.path.isdir(path):
        files = sorted(glob.glob(os.path.join(path, "*.txt")))
        if not files:
            raise ConfigError(f"no *.txt files in {path}")
    elif os.path.isfile(path):
        files = [path]
    else:
        raise ConfigError(f"no such file or folder: {path}")
    parts = []
    for name in files:
        try:
            with open(name, encoding="utf-8-sig") as f:  # -sig: a byte-order mark is not text
                parts.append(f.read())
        except UnicodeDecodeError as e:
            raise not_utf8(name, e) from None
        except OSError as e:
            raise ConfigError(f"cannot read {name}: {e.strerror}") from None
    # one file as it is; several joined by a blank line, so one file's end does not run into the next
    text = parts[0] if len(parts) == 1 else "\n\n".join(p.strip("\n") for p in parts if p.strip()) + "\n"
    if not text.strip():
        raise ConfigError(f"{path} holds no text")
    return text, files


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    cfg = configure(DEFAULTS, spaced_values(argv, DEFAULTS), files=False)  # --input notes.txt: argparse's style
    if not cfg["input"]:
        # named from the repo root, as the README runs it: train.py --dataset=text runs this without arguments
        script = os.path.join("data", os.path.basename(os.path.dirname(os.path.abspath(__file__))), "prepare.py")
        raise ConfigError(f"--input=PATH is required: a text file, or a folder of *.txt files "
                          f"(python {script} --input=notes.txt)")
    check_prepare(cfg["tokenizer"], cfg["val_fraction"])
    check_dataset_folder(cfg["out_dir"])  # before the reading, too
    text, files = read_text(cfg["input"])
    source = cfg["input"] if len(files) == 1 else f"{len(files)} .txt files in {cfg['input']}"
    print(f"source: {source} ({len(text):,} characters)")
    try:
        prepare_text(text, cfg["tokenizer"], cfg["out_dir"], cfg["val_fraction"], source=source)
    except OSError as e:
        raise ConfigError(f"cannot write to {cfg['out_dir']}: {e.strerror}") from None


if __name__ == "__main__":
    run(main)
