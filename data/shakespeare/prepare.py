"""
Tiny Shakespeare in GPT-2's BPE (301,966 train / 36,059 val tokens), e.g. to fine-tune GPT-2:

    python data/shakespeare/prepare.py [--input=PATH] [--out_dir=DIR]

The text comes as for data/shakespeare_char: one input.txt, downloaded once for both.
"""

import os
import sys

# The repo root, so that its modules import from here.
REPO = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
sys.path.insert(0, REPO)
from configurator import configure, run  # noqa: E402
from data.shakespeare_char.prepare import prepare  # noqa: E402

DEFAULTS = dict(
    input="",  # a text file to prepare instead; "" = a kept input.txt, else the download
    out_dir=os.path.dirname(os.path.abspath(__file__)),  # where train.bin, val.bin and meta.json go
)

if __name__ == "__main__":
    run(lambda: prepare(configure(DEFAULTS), "gpt2"))
