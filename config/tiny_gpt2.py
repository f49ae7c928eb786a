# config/tiny.py's recipe with the two switches GPT-2 can express: learned positions and LayerNorm
# (tiny.py's rotary positions and RMSNorm have no Hugging Face GPT-2 equivalent). Train this one to
# share the model. No bias is fine, as the export writes zero biases and glassgpt reads them back as
# none.
#   python train.py config/tiny_gpt2.py && python export.py --out_dir=out-tiny-gpt2
# To fine-tune the exported model:
#   python train.py config/tiny_gpt2.py --init_from=out-tiny-gpt2/hf --out_dir=out-tuned
# The price is a slightly higher val loss; docs/cpu.md#why-configtinypy-is-what-it-is measures
# these switches.
import os

# Start from whatever tiny.py's recipe is now.
with open(os.path.join(os.path.dirname(__file__), "tiny.py")) as _f:
    exec(_f.read())

out_dir = "out-tiny-gpt2"
position = "learned"
norm = "layernorm"
