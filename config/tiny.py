# The main job: a small character-level GPT on tiny Shakespeare, a few minutes on a 2-core CPU.
#   python train.py config/tiny.py && python sample.py --out_dir=out-tiny
# data/shakespeare_char/prepare.py runs by itself the first time.
# Found by experiment (docs/cpu.md), and raced against nanoGPT's CPU recipe (4x128, learned positions,
# LayerNorm, AdamW at 1e-3, 2000 iterations) on the same machine: python bench.py --mode=race.

out_dir = "out-tiny"
dataset = "shakespeare_char"
eval_interval = 250  # a checkpoint (and a val loss) every 250 iterations
eval_iters = 20
log_interval = 25

gradient_accumulation_steps = 1
batch_size = 32
block_size = 64  # characters of context: short windows train as well here, and attention costs less

n_layer = 3  # in 3 minutes 3 layers fit 4/3 the iterations of 4, and end lower (docs/cpu.md)
n_head = 4
n_embd = 128
dropout = 0.0  # too few iterations to overfit
# the model switches that earned their place: with rotary positions, RMSNorm and no biases the val
# loss is 0.05-0.15 lower at every step (docs/cpu.md has the measurements)
position = "rope"
norm = "rmsnorm"
bias = False

optimizer = "muon"  # Muon for the blocks' matrices: far lower loss per iteration for ~1.2-1.3x the step
muon_lr = 0.02
learning_rate = 3e-3  # AdamW's, for the embedding (also the head) and the norm gains; small models take it high
max_seconds = 180  # 3 minutes of training steps on any machine, the lr decaying over them (evals come on top):
# a schedule that ends when the time does reads 0.05 lower at iteration 700 than one still mid-way (docs/cpu.md)
max_iters = 5000  # a cap for fast machines (a GPU runs these in well under 3 minutes), the lr decaying over them too
min_lr = 3e-4  # learning_rate / 10
beta2 = 0.99  # few tokens per iteration: a shorter memory for the second moment
warmup_iters = 5  # Muon needs almost none: 5 reached val 1.88 by iteration 200, 50 did not (docs/cpu.md)
