# The main job: a small character-level GPT on tiny Shakespeare, about 3 minutes on a laptop CPU.
#   python train.py config/tiny.py && python sample.py --out_dir=out-tiny
# data/shakespeare_char/prepare.py runs by itself the first time.

out_dir = "out-tiny"
dataset = "shakespeare_char"
eval_interval = 250  # a checkpoint (and a val loss) every 250 iterations
eval_iters = 20
log_interval = 25

gradient_accumulation_steps = 1
batch_size = 16
block_size = 128  # characters of context

n_layer = 4
n_head = 4
n_embd = 128
dropout = 0.0  # too few iterations to overfit

learning_rate = 2e-3  # small models take a high learning rate
max_iters = 2000
lr_decay_iters = 2000  # decay over the whole run
min_lr = 2e-4  # learning_rate / 10
beta2 = 0.99  # few tokens per iteration: a shorter memory for the second moment
warmup_iters = 50
