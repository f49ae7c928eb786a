# The longer CPU recipe: character-level tiny Shakespeare in at most 15 minutes on a 2-core CPU, aiming at
# the val loss nanoGPT's train_shakespeare_char.py (10.7M parameters) reports from a GPU: 1.4697.
#   python train.py config/shakespeare_cpu.py && python sample.py --out_dir=out-shakespeare-cpu
# tiny.py's recipe (Muon, rotary positions, RMSNorm, no biases) on a model 1.5x wider and deeper with twice
# the context: 2.7M parameters, 4,096 characters an iteration. Status (docs/cpu.md): written from tiny.py's
# measurements and the model's FLOPs; its time and final loss are not yet measured on a quiet machine.

out_dir = "out-shakespeare-cpu"
dataset = "shakespeare_char"
eval_interval = 250
eval_iters = 20
log_interval = 50

gradient_accumulation_steps = 1
batch_size = 32
block_size = 128

n_layer = 6
n_head = 6
n_embd = 192
dropout = 0.1  # ~6 passes over the 1M training characters: enough to start memorising
position = "rope"
norm = "rmsnorm"
bias = False

optimizer = "muon"  # the blocks' matrices; AdamW at learning_rate for the embedding and the norm gains
muon_lr = 0.02
learning_rate = 3e-3
max_iters = 1500
lr_decay_iters = 1500
min_lr = 3e-4
beta2 = 0.99
warmup_iters = 50
