# Fine-tune OpenAI's GPT-2 XL (1.5B) on tiny Shakespeare in GPT-2 BPE tokens.
# data/shakespeare/prepare.py makes the tokens. It needs `transformers`, a download of the weights
# (about 6 GB) and a large GPU.
#   python train.py config/finetune_shakespeare.py && python sample.py --out_dir=out-shakespeare

out_dir = "out-shakespeare"
eval_interval = 5
eval_iters = 40
always_save_checkpoint = False  # only keep a checkpoint whose val loss improved

wandb_log = False
wandb_project = "shakespeare"
wandb_run_name = "ft-gpt2-xl"

dataset = "shakespeare"
init_from = "gpt2-xl"  # the largest GPT-2; gpt2, gpt2-medium, gpt2-large work too

# 1 sequence x 32 accumulation steps x 1024 tokens = 32,768 tokens per iteration. The data is about
# 301K tokens, so an epoch is about 9 iterations.
batch_size = 1
gradient_accumulation_steps = 32
max_iters = 20

# Fine-tune at a constant, small learning rate.
learning_rate = 3e-5
decay_lr = False
