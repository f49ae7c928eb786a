# Evaluate OpenAI's gpt2-xl (1558M) on OpenWebText; nanoGPT's README lists the losses it measured.
#   python train.py config/eval_gpt2_xl.py
# Needs `transformers` (the weights download once) and data/openwebtext/prepare.py's bins.
batch_size = 8
eval_iters = 500  # 500 batches of 8 x 1024 tokens per split
eval_only = True
wandb_log = False
init_from = "gpt2-xl"
