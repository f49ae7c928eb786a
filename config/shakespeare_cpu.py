# The longer CPU recipe: character-level tiny Shakespeare in at most 15 minutes on a 2-core CPU.
# It aims at the val loss that nanoGPT's train_shakespeare_char.py (10.7M parameters) reports from
# a GPU.
#   python train.py config/shakespeare_cpu.py && python sample.py --out_dir=out-shakespeare-cpu
# tiny.py's recipe with 4 layers for 4000 iterations, nanoGPT's context of 256 characters and weight
# decay on Muon's matrices. 1M characters is little data, so past a few thousand iterations the
# model memorises, and the decay curbs it. The measurements behind each choice, and what did no
# better, are in docs/cpu.md#the-longer-recipe-configshakespeare_cpupy.

out_dir = "out-shakespeare-cpu"
dataset = "shakespeare_char"
eval_interval = 500
# 55 batches of 8 windows of 256 cover the canonical text's whole val split, so the val loss is not
# read on one slice of it.
eval_iters = 55
log_interval = 25

gradient_accumulation_steps = 1
batch_size = 8
block_size = 256  # nanoGPT's context; it beat 128 and 512 at the same characters a step

n_layer = 4
n_head = 4
n_embd = 128
dropout = 0.0  # dropout 0.1 ended higher
position = "rope"
norm = "rmsnorm"
bias = False

# Muon for the blocks' matrices; AdamW at learning_rate for the embedding and the norm gains.
optimizer = "muon"
muon_lr = 0.02
muon_weight_decay = 0.1  # the best of the sweep; behind until the lr decays, then ahead
learning_rate = 3e-3
max_iters = 4000
lr_decay_iters = 4000
# A cap for slow machines: 14 minutes of steps. If they come first, the lr decays over them.
max_seconds = 840
min_lr = 3e-4
beta2 = 0.99
warmup_iters = 50  # as measured; tiny.py warms up for 5 iterations
