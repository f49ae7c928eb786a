"""
Many processes under torchrun: each trains on its own slice of every batch and holds either the
whole model (DDP, the default) or one shard of its parameters, gradients and optimizer state (FSDP2,
train.py --fsdp=True), for a model one GPU cannot hold. These are the few places where that differs
from one process; alone, each function does what one process needs (nothing). What they share is
handed to them: no state is kept here.

    torchrun --standalone --nproc_per_node=8 train.py config/train_gpt2.py                 # DDP
    torchrun --standalone --nproc_per_node=8 train.py config/train_gpt2.py --fsdp=True     # FSDP
"""

import gc
import inspect
import os
from contextlib import nullcontext

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils._pytree import tree_map


def start(device, device_type, backend="auto", num_threads=0):
    """(rank, processes, processes on this machine): torchrun's, its process group started, else
    (0, 1, 1)."""
    world, local = int(os.environ.get("WORLD_SIZE", 1)), int(os.environ.get("LOCAL_WORLD_SIZE", 1))
    if "RANK" in os.environ:
        backend = ("nccl" if device_type == "cuda" else "gloo") if backend == "auto" else backend
        # torchrun's store outlives a restart (--max-restarts): keys of this attempt's own, or the
        # processes would read where the last attempt's listened, and gloo's connections be refused
        store, rank, world = next(dist.rendezvous("env://"))
        attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT", 0)
        store = dist.PrefixStore(f"attempt{attempt}/", store)
        dist.init_process_group(backend, store=store, rank=rank, world_size=world,
                                device_id=torch.device(device) if device_type == "cuda" else None)
    # torchrun gives each process 1 thread: on a CPU the processes share out the cores
    if num_threads or (world > 1 and device_type == "cpu"):
        torch.set_num_threads(num_threads or max(1, len(os.sched_getaffinity(0)) // local))
    return int(os.environ.get("RANK", 0)), world, local


def wrap(model, device, fsdp=False, compiled=False, dtype="float32", sync_once=False):
    """The model on device as the processes train it, compiled or not: itself alone; a DDP replica;
    or FSDP shards, block by block, then the rest (fully_shard moves each shard to the device: the
    whole model is never there). sync_once: FSDP reduce-scatters the gradients on an iteration's
    last micro-batch only (no_sync)."""
    if not (fsdp and dist.is_initialized()):  # one process, or DDP: compiled whole
        if compiled:
            model.compile()  # in place: the weights keep their names
        return ddp(model.to(device), device) if dist.is_initialized() else model.to(device)
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
    # as torchtitan: each block gathered in the compute dtype, its gradients reduced in float32;
    # and compiled before it is sharded, with the loss on its own (FSDP's hooks stay out of the
    # graphs). The rest (embedding, head, final norm) stays float32, so the residual stream does,
    # as in one process under autocast
    mesh = init_device_mesh(torch.device(device).type, (dist.get_world_size(),))
    policy = MixedPrecisionPolicy(param_dtype=getattr(torch, dtype), reduce_dtype=torch.float32,
                                  cast_forward_inputs=False)
    model.sync_once = sync_once
    for block in model.transformer.h:
        if compiled:
            block.compile()
        fully_shard(block, mesh=mesh, mp_policy=policy)
    if compiled:
        model.loss = torch.compile(model.loss)
    return fully_shard(model, mesh=mesh)


def ddp(model, device):
    """A DDP replica. The buffers (rope tables, masks) never change: no broadcast each forward
    (torch 2.13 renamed the switch); the gradients live in DDP's buckets, not copied there."""
    no_buffers = "broadcast_buffers"
    if "forward_sync_buffers" in inspect.signature(DDP).parameters:
        no_buffers = "forward_sync_buffers"
    return DDP(model, device_ids=[torch.cuda.current_device()] if "cuda" in device else None,
               gradient_as_bucket_view=True, **{no_buffers: False})


def no_sync(model, sync):
    """DDP averages the gradients across processes on an iteration's last micro-batch only; FSDP
    reduces each micro-batch's into the shards, so that no process ever holds a whole gradient,
    unless wrapped to sync once (train.py --fsdp_sync_once: one reduce-scatter an iteration for 4
    bytes a parameter of whole gradients)."""
    if getattr(model, "sync_once", False):
        model.set_requires_gradient_sync(sync)
    return model.no_sync() if isinstance(model, DDP) and not sync else nullcontext()


def grad_scaler(device_type, dtype, fsdp):
    """float16's loss scaler (a no-op otherwise). Under FSDP each process sees its shards' gradients
    alone: the processes must agree to skip a step that overflowed anywhere, as torch's
    ShardedGradScaler has them."""
    from torch.distributed.fsdp.sharded_grad_scaler import ShardedGradScaler
    scaler = ShardedGradScaler if fsdp and dist.is_initialized() else torch.amp.GradScaler
    return scaler(device_type, enabled=dtype == "float16")


def host_group():
    """A gloo group of the processes, on which they agree (agree) on the host, waiting on no GPU;
    None alone."""
    return dist.new_group(backend="gloo") if dist.is_initialized() else None


def agree(stop, seconds, group):
    """(whether any process was asked to stop, the most training seconds any has counted): the
    processes stop together and decay the lr alike. Alone (group None): as given."""
    if group is None:
        return stop, seconds
    t = torch.tensor([float(stop), seconds], dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX, group=group)
    return t[0].item() > 0, t[1].item()


def my_batches(n):
    """The eval batches, of n, that this process computes, each with its weight in the mean. Every
    process computes as many (FSDP's gathers are collectives): those past n weigh 0. Alone: all n,
    each weighing 1."""
    rank = dist.get_rank() if dist.is_initialized() else 0
    world = dist.get_world_size() if dist.is_initialized() else 1
    return [(k % n, float(k < n)) for k in range(rank, -(-n // world) * world, world)]


def mean(t):
    """t averaged over the processes (the logged loss): a collective on t's device."""
    if dist.is_initialized():
        dist.all_reduce(t)
        t = t / dist.get_world_size()
    return t


def means(stats):
    """{name: a number}: stats, tensors the step made, averaged over the processes. The loop's one
    wait on the GPU."""
    values = mean(torch.stack(list(stats.values()))).tolist()
    return dict(zip(stats, values))


def whole(t):
    """A tensor FSDP computed as a DTensor (the gradient norm), as a plain one."""
    return t.full_tensor() if hasattr(t, "full_tensor") else t


def gathered(state, keep):
    """state (a model's or optimizer's state dict) with each FSDP shard gathered whole, to the CPU
    where keep, else None: ckpt.pt stays one file in one format. Every process must call it: each
    gather is a collective. A tensor under two keys (the tied wte and lm_head) stays one tensor,
    saved once, as in one process."""
    kept = {}  # where each tensor's (local) data lies -> its whole copy on the CPU

    def whole_on_cpu(t):
        local = t.to_local() if hasattr(t, "to_local") else t
        # every process gathers; one keeps what it gathered
        t = t.full_tensor() if hasattr(t, "full_tensor") else t
        where = (local.data_ptr(), local.dtype, t.shape) if local.numel() else object()
        if keep and where not in kept:
            kept[where] = t.cpu()
        return kept.get(where)
    return tree_map(lambda t: whole_on_cpu(t) if torch.is_tensor(t) else t, state)


def load_optimizer(opt, state):
    """opt.load_state_dict(state), its tensors whole (ckpt.pt's). Under FSDP each moment is cut to
    this process's shard on the CPU first: load_state_dict moves what it is given to the GPU, and
    whole, every GPU held all the moments."""
    from torch.distributed.tensor import DTensor
    params = [p for g in opt.param_groups for p in g["params"]]
    if not any(isinstance(p, DTensor) for p in params):  # (Muon + AdamW: never under FSDP)
        return opt.load_state_dict(state)
    moments = dict(state["state"])
    ids = [i for g in state["param_groups"] for i in g["params"]]
    for i, p in zip(ids, params):  # paired as load_state_dict pairs them
        part = p.__create_chunk_list__()[0]  # this process's shard: its offsets, sizes in the whole
        cut = tuple(slice(o, o + n) for o, n in zip(part.offsets, part.sizes))
        mine = {}
        for k, v in moments.get(i, {}).items():
            if torch.is_tensor(v) and v.shape == p.shape:  # exp_avg, exp_avg_sq; not the step count
                v = DTensor.from_local(v[cut].to(p.device, copy=True), p.device_mesh, p.placements,
                                       shape=p.shape, stride=p.stride())
            mine[k] = v
        moments[i] = mine
    opt.load_state_dict({**state, "state": moments})


def end():
    """Leave the process group, once the caller has let go of its model and optimizer: FSDP's
    shards still alive as its group went made 1 process in 6 abort as it exited (gloo, torch 2.13:
    'terminate called without an active exception')."""
    if dist.is_initialized():
        gc.collect()  # FSDP's modules hold themselves in cycles (their hooks)
        dist.barrier()
        dist.destroy_process_group()
