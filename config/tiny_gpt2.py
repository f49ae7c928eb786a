# config/tiny.py's recipe with the two switches GPT-2 can express: learned positions and LayerNorm
# (tiny.py's rotary positions and RMSNorm have no Hugging Face GPT-2 equivalent). Train this one to
# share the model: no bias is fine, the export writes zero biases and glassgpt reads them back as none.
#   python train.py config/tiny_gpt2.py && python export.py --out_dir=out-tiny-gpt2
#   python train.py config/tiny_gpt2.py --init_from=out-tiny-gpt2/hf --out_dir=out-tuned   # fine-tune it
# The price, measured at equal iterations (1500, Muon, the schedule tiny.py had then): val +0.020 at the
# end; in equal time (180 s each, one pair side by side) +0.015.
import os

with open(os.path.join(os.path.dirname(__file__), "tiny.py")) as _f:  # whatever tiny.py's recipe is today
    exec(_f.read())

out_dir = "out-tiny-gpt2"
position = "learned"
norm = "layernorm"
