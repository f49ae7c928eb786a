"""
Muon for a GPT's hidden matrices, AdamW for the rest, as one optimizer (train.py --optimizer=muon).

Muon (Keller Jordan) takes momentum, then replaces the update by the nearest (semi-)orthogonal
matrix, found by a few Newton-Schulz iterations, so every direction of a weight matrix moves at the
same rate. torch.optim.Muon implements it. BlockMuon below keeps torch's class and changes what
docs/cpu.md#muon measured.
"""

import torch


class BlockMuon(torch.optim.Muon):
    """
    torch's Muon (its groups, state, checks, lr adjustment), with three changes to the step.
    - Newton-Schulz runs in float32 where bfloat16 is not native. torch's Muon orthogonalises in
      bfloat16, which on a CPU without bf16 instructions (AVX2 only) is far slower than float32
      (docs/cpu.md#which-dtype).
    - A group's "split" > 1 orthogonalises each row block of its matrices on its own (c_attn's q, k
      and v), as views of the weight, its gradient and its momentum, updated in place.
    - A float16 GradScaler hands it found_inf on the device. A step with inf or nan gradients
      changes nothing, and no step waits for the GPU to say whether it had any; torch's Muon makes
      the scaler ask, every step.
    """

    def __init__(self, params, ns_dtype=torch.bfloat16, **kwargs):
        super().__init__(params, **kwargs)
        self.ns_dtype = ns_dtype
        # GradScaler sets grad_scale (None once unscaled) and found_inf.
        self._step_supports_amp_scaling = True

    @torch.no_grad()
    def step(self, closure=None):
        scale = getattr(self, "grad_scale", None)
        found = getattr(self, "found_inf", None)
        clean = None if found is None else found == 0
        for group in self.param_groups:
            params, grads, bufs = [], [], []
            self._init_group(group, params, grads, bufs)
            if scale is not None and grads:  # the gradients are still scaled
                torch._foreach_div_(grads, scale)
            lr = group["lr"]
            mu = group["momentum"]
            decay = 1 - lr * group["weight_decay"]
            if clean is not None:
                decay = torch.where(clean, decay, 1.0)
            # Matrices of one shape orthogonalise as one batch: a few large matmuls, not many small.
            by_shape = {}
            for param, grad, momentum in zip(params, grads, bufs):
                # The chunks are views, so the updates below land in the parameters.
                k = group.get("split", 1)
                for p, g, buf in zip(param.chunk(k), grad.chunk(k), momentum.chunk(k)):
                    # A skipped step's gradient is the momentum, which lerps to itself.
                    if clean is not None:
                        g.copy_(torch.where(clean, g, buf))
                    # Nesterov's update below is made in the gradient's memory, not new memory.
                    buf.lerp_(g, 1 - mu)
                    update = g.lerp_(buf, mu) if group["nesterov"] else buf
                    by_shape.setdefault(p.shape, []).append((p, update))
            for shape, same in by_shape.items():
                # At most 64 MB of them at a time, so that no step holds a copy of the model.
                n = max(1, 2 ** 24 // shape.numel())
                step_lr = torch.optim._muon._adjust_lr(lr, group["adjust_lr_fn"], shape)
                for batch in (same[i:i + n] for i in range(0, len(same), n)):
                    updates = torch.stack([u for _, u in batch])
                    ortho = newton_schulz(updates, group["ns_coefficients"], group["ns_steps"],
                                          group["eps"], self.ns_dtype)
                    if clean is not None:
                        ortho *= clean
                    for (p, _), update in zip(batch, ortho):
                        p.mul_(decay)
                        p.add_(update, alpha=-step_lr)


def newton_schulz(g, coefficients, steps, eps, dtype):
    """
    Approximately orthogonal matrices with the singular vectors of g's matrices, where g is one
    matrix or a batch of them. It is Muon's quintic Newton-Schulz iteration, run on the short side,
    in dtype; the singular values it returns lie near 1, not at 1.
    """
    a, b, c = coefficients
    x = g.to(dtype).reshape(-1, *g.shape[-2:])  # a batch, even of one
    tall = x.size(-2) > x.size(-1)
    x = x.mT if tall else x
    # Spectral <= Frobenius norm <= 1: in range.
    x = x / x.norm(dim=(-2, -1), keepdim=True).clamp(min=eps)
    for _ in range(steps):
        gram = x @ x.mT
        x = torch.baddbmm(x, torch.baddbmm(gram, gram, gram, beta=b, alpha=c), x, beta=a)
    return (x.mT if tall else x).to(g.dtype).reshape(g.shape)


class MuonAdamW:
    """
    Muon for the hidden matrices and AdamW for the rest, behaving as one optimizer: one list of
    param groups (train.py sets each group's lr), one step, and one state dict
    {"muon": ..., "adamw": ...}.
    """

    def __init__(self, muon, adamw):
        self.muon, self.adamw = muon, adamw
        # The same dicts: lr writes reach both.
        self.param_groups = muon.param_groups + adamw.param_groups
        self.defaults = adamw.defaults
        # A fused AdamW steps without .item(), so GradScaler may hand it the scale.
        self._step_supports_amp_scaling = getattr(adamw, "_step_supports_amp_scaling", False)

    def step(self):
        # What a float16 GradScaler set on this optimizer, or None.
        for opt in (self.muon, self.adamw):
            opt.grad_scale = getattr(self, "grad_scale", None)
            opt.found_inf = getattr(self, "found_inf", None)
            opt.step()

    def zero_grad(self, set_to_none=True):
        self.muon.zero_grad(set_to_none=set_to_none)
        self.adamw.zero_grad(set_to_none=set_to_none)

    def state_dict(self):
        return {"muon": self.muon.state_dict(), "adamw": self.adamw.state_dict()}

    def load_state_dict(self, state):
        if set(state) != {"muon", "adamw"}:
            raise ValueError("not a Muon + AdamW optimizer state (trained with optimizer=adamw?)")
        self.muon.load_state_dict(state["muon"])
        self.adamw.load_state_dict(state["adamw"])
        # load_state_dict makes new group dicts, so both lists are taken again.
        self.param_groups[:] = self.muon.param_groups + self.adamw.param_groups


def configure_muon(model, weight_decay, learning_rate, betas, device_type, muon_lr=0.02,
                   muon_momentum=0.95, muon_weight_decay=0.0, muon_ns_steps=5, ns_dtype=None):
    """
    Muon for the blocks' matmul weights (c_attn, c_proj, c_fc), the model's AdamW for the rest
    (embeddings, lm_head, norm gains, biases). Each group's "lr_scale" is its peak lr over
    learning_rate, which train.py's lr schedule multiplies in. c_attn's q, k and v are
    orthogonalised each as its own C x C matrix, since at equal iterations the val loss was lower
    than with the fused 3C x C matrix as one (docs/cpu.md#muon). An ns_dtype of None is bfloat16
    where the device computes it natively (device.native_bf16), else float32.
    """
    if ns_dtype is None:
        from device import native_bf16
        ns_dtype = torch.bfloat16 if native_bf16(device_type) else torch.float32
    # A list, not a set, so that the order is the same in every process.
    hidden = [p for p in model.transformer.h.parameters() if p.requires_grad and p.dim() == 2]
    qkv = {id(b.attn.c_attn.weight) for b in model.transformer.h}
    hidden_ids = {id(p) for p in hidden}
    rest = [p for p in model.parameters() if p.requires_grad and id(p) not in hidden_ids]
    matrices = [p for p in rest if p.dim() >= 2]
    vectors = [p for p in rest if p.dim() < 2]
    groups = [{"params": matrices, "weight_decay": weight_decay, "lr_scale": 1.0},
              {"params": vectors, "weight_decay": 0.0, "lr_scale": 1.0}]
    fused = device_type in ("cuda", "cpu")
    adamw = torch.optim.AdamW(groups, lr=learning_rate, betas=betas, fused=fused)
    muon_groups = [{"params": [p for p in hidden if id(p) not in qkv], "split": 1},
                   {"params": [p for p in hidden if id(p) in qkv], "split": 3}]
    # Keller Jordan's lr scaling ("original") steps a tall matrix sqrt(rows / cols) larger, so c_fc
    # moves twice as far as the others.
    muon = BlockMuon([g for g in muon_groups if g["params"]], lr=muon_lr, momentum=muon_momentum,
                     weight_decay=muon_weight_decay, adjust_lr_fn="original",
                     ns_steps=muon_ns_steps, ns_dtype=ns_dtype)
    for g in muon.param_groups:
        g["lr_scale"] = muon_lr / learning_rate if learning_rate else 0.0
    return MuonAdamW(muon, adamw)
