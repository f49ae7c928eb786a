# nanoGPT's "baby GPT" on character-level tiny Shakespeare: 6 layers, 6 heads, 384 wide, 256
# characters of context. About 10M parameters; minutes on a GPU, too slow for a CPU (use
# config/tiny.py there).
#   python train.py config/train_shakespeare_char.py
#   python sample.py --out_dir=out-shakespeare-char

out_dir = "out-shakespeare-char"
eval_interval = 250  # it overfits, so keep an eye on val loss
eval_iters = 200
log_interval = 10
always_save_checkpoint = False  # ckpt.pt only when val improves, as nanoGPT

wandb_log = False
wandb_project = "shakespeare-char"
wandb_run_name = "mini-gpt"

dataset = "shakespeare_char"
gradient_accumulation_steps = 1
batch_size = 64
block_size = 256

n_layer = 6
n_head = 6
n_embd = 384
dropout = 0.2

learning_rate = 1e-3  # a small network can take a higher learning rate
max_iters = 5000
lr_decay_iters = 5000  # usually equal to max_iters
min_lr = 1e-4  # learning_rate / 10
beta2 = 0.99  # larger than GPT-2's 0.95: few tokens per iteration
warmup_iters = 100
