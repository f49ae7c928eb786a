# GPT-2 (124M) on OpenWebText on one node of 8 GPUs:
#   torchrun --standalone --nproc_per_node=8 train.py config/train_gpt2.py
# 12 sequences x 1024 tokens x 40 accumulation steps (5 per GPU) = 491,520 tokens per iteration;
# 600,000 iterations = 295B tokens. nanoGPT's README gives the val loss it reached on 8 A100s.

wandb_log = False
wandb_project = "owt"
wandb_run_name = "gpt2-124M"

dataset = "openwebtext"
batch_size = 12
block_size = 1024
gradient_accumulation_steps = 5 * 8  # all processes together: 5 per GPU on 8 GPUs

max_iters = 600000
lr_decay_iters = 600000

eval_interval = 1000
eval_iters = 200
log_interval = 10

weight_decay = 1e-1
