# The longer CPU recipe: character-level tiny Shakespeare in at most 15 minutes on a 2-core CPU, aiming at
# the val loss nanoGPT's train_shakespeare_char.py (10.7M parameters) reports from a GPU: 1.4697.
#   python train.py config/shakespeare_cpu.py && python sample.py --out_dir=out-shakespeare-cpu
# tiny.py's recipe with 4 layers for 4000 iterations, nanoGPT's context of 256 characters and weight decay on
# Muon's matrices. Measured on the project's 2-core machine (docs/cpu.md): 3000 iterations read 1.4598 on its
# AVX2 host (13.5-14.1 minutes in slow hours), but 1.4705 (float32) and 1.4712 (bf16) on its AVX-512 host;
# 4000 read 1.4607 there, in 8.2 minutes in bf16.
# By iteration (docs/cpu.md): block 64 read 1.4957; block 256 (the same 2,048 characters a step) 1.4767 over
# the whole val split; with Muon weight decay 0.025 / 0.05 / 0.1 / 0.2 / 0.4: 1.4705 / 1.4677 / 1.4595 / 1.4751 /
# 1.5230. 1M characters is little data: past ~2500 iterations the model memorises, and the decay curbs it.
# Wider (192), deeper (6 layers), dropout 0.1, batch 48 or block 512 did no better (docs/cpu.md).

out_dir = "out-shakespeare-cpu"
dataset = "shakespeare_char"
eval_interval = 500
eval_iters = 55  # 440 windows of 256: the canonical text's whole val split, so the figure is not one slice of it
log_interval = 25

gradient_accumulation_steps = 1
batch_size = 8
block_size = 256  # nanoGPT's context; 1.4767 against block 128's 1.4922 and 512's 1.4780, same characters

n_layer = 4
n_head = 4
n_embd = 128
dropout = 0.0  # dropout 0.1 over 4000 iterations ended higher (1.5498), in 17 minutes
position = "rope"
norm = "rmsnorm"
bias = False

optimizer = "muon"  # the blocks' matrices; AdamW at learning_rate for the embedding and the norm gains
muon_lr = 0.02
muon_weight_decay = 0.1  # the best of the sweep above; behind until the lr decays, then ahead
learning_rate = 3e-3
max_iters = 4000
lr_decay_iters = 4000
max_seconds = 840  # a cap for slow machines: 14 minutes of steps, the lr decaying over them if they come first
min_lr = 3e-4
beta2 = 0.99
warmup_iters = 50  # as measured (tiny.py now warms up for 5 iterations)
