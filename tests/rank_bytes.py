"""
Run by tests/test_parallel.py under torchrun: the bytes one process holds in parameters, gradients and optimizer
state after a step, with the model wrapped as train.py wraps it (parallel.wrap: DDP, or FSDP with --fsdp), and what
autograd keeps for the backward pass once the forward is done (with --bf16: under bfloat16 autocast).

    torchrun --standalone --nproc_per_node=2 tests/rank_bytes.py OUT.json [--fsdp] [--bf16]
"""

import json
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import parallel  # noqa: E402
from model import GPT, GPTConfig  # noqa: E402


def local_bytes(tensors):
    """What this process holds of each tensor: its shard under FSDP (a DTensor's local part), else all of it."""
    tensors = [t.to_local() if hasattr(t, "to_local") else t for t in tensors]
    return sum(t.numel() * t.element_size() for t in tensors)


if __name__ == "__main__":
    out, fsdp, dtype = sys.argv[1], "--fsdp" in sys.argv, "bfloat16" if "--bf16" in sys.argv else "float32"
    rank, world, _ = parallel.start("cpu", "cpu")
    torch.manual_seed(0)
    raw = GPT(GPTConfig(block_size=32, vocab_size=64, n_layer=4, n_head=4, n_embd=64))
    model = parallel.wrap(raw, "cpu", fsdp, dtype=dtype)
    opt = raw.configure_optimizers(0.1, 1e-3, (0.9, 0.95), "cpu")
    x, kept = torch.randint(0, 64, (4, 32)), {}

    def keep(t):  # each storage autograd saves for the backward pass, once; its bytes read once the forward is done
        kept[t.untyped_storage()._cdata] = t.untyped_storage()
        return t
    with torch.autograd.graph.saved_tensors_hooks(keep, lambda t: t), torch.autocast("cpu", torch.bfloat16,
                                                                                     enabled=dtype != "float32"):
        loss = model(x, x)[1]
    kept_for_backward = sum(s.nbytes() for s in kept.values())  # FSDP's gathered weights are freed by now
    loss.backward()
    opt.step()
    params = list(raw.parameters())
    held = {"params": local_bytes(params), "grads": local_bytes([p.grad for p in params]), "kept": kept_for_backward,
            "optimizer": local_bytes([v for s in opt.state.values() for v in s.values() if v.dim() > 0]),
            "ddp_buffers_broadcast": getattr(model, "broadcast_buffers", None),
            "ddp_bucket_views": getattr(model, "gradient_as_bucket_view", None)}
    if rank == 0:
        with open(out, "w") as f:
            json.dump(held, f)
    parallel.end()
