# The main job: a small character-level GPT on tiny Shakespeare, a few minutes on a 2-core CPU.
#   python train.py config/tiny.py && python sample.py --out_dir=out-tiny
# data/shakespeare_char/prepare.py runs by itself the first time.
# Found by experiment, and raced against nanoGPT's CPU recipe (4x128, learned positions, LayerNorm,
# AdamW at 1e-3, 2000 iterations) on the same machine with `python bench.py --mode=race`. The
# measurements behind each choice are in docs/cpu.md#why-configtinypy-is-what-it-is.

out_dir = "out-tiny"
dataset = "shakespeare_char"
eval_interval = 250  # a checkpoint and a val loss every 250 iterations
eval_iters = 20
log_interval = 25

gradient_accumulation_steps = 1
batch_size = 32
# Characters of context. Short windows train as well here, and attention costs less.
block_size = 64

n_layer = 3  # in 3 minutes 3 layers fit more iterations than 4, and end lower
n_head = 4
n_embd = 128
dropout = 0.0  # too few iterations to overfit
# The model switches that earned their place: with rotary positions, RMSNorm and no biases the val
# loss is lower at every step.
position = "rope"
norm = "rmsnorm"
bias = False

# Muon for the blocks' matrices: a far lower loss per iteration for a somewhat slower step.
optimizer = "muon"
muon_lr = 0.02
# AdamW's, for the embedding (also the head) and the norm gains. Small models take it high.
learning_rate = 3e-3
# 3 minutes of training steps on any machine, the lr decaying over them; evals come on top. A
# schedule that ends when the time does reads lower than one still mid-way at the same iteration.
max_seconds = 180
# A cap for fast machines; a GPU runs these in well under 3 minutes. The lr decays over them too.
max_iters = 5000
min_lr = 3e-4  # learning_rate / 10
beta2 = 0.99  # few tokens per iteration, so a shorter memory for the second moment
warmup_iters = 5  # Muon needs almost none; 5 ended lower than 50
