# The main job: a small character-level GPT on tiny Shakespeare, about 3 minutes on a 2-core CPU.
#   python train.py config/tiny.py && python sample.py --out_dir=out-tiny
# data/shakespeare_char/prepare.py runs by itself the first time.
# Found by experiment (docs/cpu.md): val loss ~1.62 in under 3 minutes, where nanoGPT's CPU recipe
# (4x128, learned positions, LayerNorm, lr 1e-3, 2000 iterations) reaches ~1.88.

out_dir = "out-tiny"
dataset = "shakespeare_char"
eval_interval = 250  # a checkpoint (and a val loss) every 250 iterations
eval_iters = 20
log_interval = 25

gradient_accumulation_steps = 1
batch_size = 32
block_size = 64  # characters of context: short windows train as well here, and attention costs less

n_layer = 4
n_head = 4
n_embd = 128
dropout = 0.0  # too few iterations to overfit
# the model switches that earned their place: with rotary positions, RMSNorm and no biases the val
# loss is 0.05-0.15 lower at every step (docs/cpu.md has the measurements)
position = "rope"
norm = "rmsnorm"
bias = False

learning_rate = 3e-3  # small models take a high learning rate
max_iters = 1700
lr_decay_iters = 1700  # decay over the whole run
min_lr = 3e-4  # learning_rate / 10
beta2 = 0.99  # few tokens per iteration: a shorter memory for the second moment
warmup_iters = 50
