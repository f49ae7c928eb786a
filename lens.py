"""
See inside a model: what each attention head looks at, what each layer would predict (the logit
lens), how surprised the model is by each token, and its loss on a whole file in bits per byte.

    python lens.py --out_dir=out-tiny                        # the default line of Romeo and Juliet
    python lens.py --out_dir=out-tiny --start="ROMEO:" --html=romeo.html --png=romeo.png
    python lens.py --init_from=gpt2 --start=FILE:prompt.txt  # GPT-2's weights (transformers)
    python lens.py --out_dir=out-tiny --eval=val.txt         # nats/token, perplexity, bits per byte
    python lens.py --out_dir=out-tiny --eval=data/shakespeare_char/val.bin   # the val split train.py scores

For a text (at most block_size tokens) it prints the text coloured by surprise, a table of each
head's attention statistics and the logit lens, and writes lens.html (one page, no network: pick a
layer and head, hover a token to see where it looks and what each layer predicts there) and lens.png
(every layer's and head's attention, if matplotlib is installed); a file of either name that lens.py
did not write is left alone (one line). Everything comes from one forward pass of model.py's GPT,
with its attention modules asked to keep their probabilities (capture).
"""

import contextlib
import html as html_lib
import json
import math
import os
import re
import sys

if __name__ == "__main__":  # before torch loads: a Ctrl-C meanwhile is one line; OpenMP's idle threads sleep
    from configurator import let_idle_threads_sleep, quit_quietly_on_early_ctrl_c
    quit_quietly_on_early_ctrl_c()
    let_idle_threads_sleep()
import torch
from torch.nn import functional as F
from tqdm import tqdm

from checkpoint import check_init_from
from configurator import (ConfigError, autocast, config_keys, configure, not_ours, png_mark, resolve_device, run,
                          unwritable, writing)
from sample import encode_prompt, load_model, read_prompt
from tokenizer import find_meta, gpt2_encoding, load_tokenizer, read_bin, same_tokenizer, stream_decode, tokenizer_label

# -----------------------------------------------------------------------------
init_from = "resume"  # "resume" (a checkpoint in out_dir) | "gpt2" | ... | a Hugging Face model folder, as sample.py
out_dir = "out"
ckpt = ""  # "" = best.pt if there is one, else ckpt.pt
meta = ""  # the tokenizer: a meta.json or nanoGPT meta.pkl; "" = as sample.py finds it
start = "ROMEO:\nBut soft, what light through yonder window breaks?"  # the text, or "FILE:path"
eval = ""  # a text file, or a dataset's train.bin/val.bin: score all of it (in block_size windows), not --start
stride = 0  # --eval: windows start this many tokens apart; each token is scored once; 0 = block_size // 2
batch_size = 8  # --eval: windows per forward pass
heads = False  # --eval: also each head's statistics (as the table for --start), averaged over all windows
top = 3  # the logit lens's top tokens per position and layer (in the page)
html = "lens.html"  # the page to write; "" = none
png = "lens.png"  # the attention grid to write; "" = none
color = "auto"  # surprise as ANSI colour: "auto" (when stdout is a terminal) | "always" | "never"
device = "auto"
dtype = "float32"  # "float32" | "bfloat16" | "float16" | "auto"
# -----------------------------------------------------------------------------
DEFAULTS = config_keys(globals())
LN2 = math.log(2)
MARK = "glassgpt lens.py"  # in each page and PNG it writes: a later run replaces those, and no other file
OURS = {  # where MARK is in each, at the file's start: a file that merely mentions it is not lens.py's
    "html": rb'<!doctype html>\s*<html><head><meta charset="utf-8"><meta name="generator" content="'
            + re.escape(MARK).encode() + rb'">',
    "png": png_mark(MARK),
}


def log(*args):
    print(*args, file=sys.stderr, flush=True)


# ----------------------------------------------------------------------------- one forward pass, seen from inside

@contextlib.contextmanager
def capture_attention(model):
    """Inside: every attention module also computes its probabilities and keeps them in .att."""
    attns = [block.attn for block in model.transformer.h]
    for a in attns:
        a.capture = True
    try:
        yield attns
    finally:
        for a in attns:
            a.capture, a.att = False, None


@torch.no_grad()
def look_inside(model, ids):
    """
    One forward pass of ids (a list of at most block_size token ids) through the model, recording on
    the way: att (n_layer, n_head, T, T) attention probabilities, resid (n_layer + 1, T, n_embd) the
    residual stream after the embedding and after each block, logits (T, V) the model's own, and
    losses (T - 1,) each next token's cross-entropy in nats.
    """
    dev = next(model.parameters()).device
    idx = torch.tensor([ids], dtype=torch.long, device=dev)
    resid = []
    blocks = model.transformer.h
    hooks = [blocks[0].register_forward_pre_hook(lambda m, args: resid.append(args[0][0]))]
    hooks += [b.register_forward_hook(lambda m, args, out: resid.append(out[0])) for b in blocks]
    targets = torch.cat((idx[:, 1:], torch.full_like(idx[:, :1], -1)), dim=1)  # the last has no next token
    try:
        with capture_attention(model) as attns:
            logits, _ = model(idx, targets)  # with targets the model returns every position's logits
            att = torch.stack([a.att[0] for a in attns])
    finally:
        for h in hooks:
            h.remove()
    logits = logits[0].float()
    losses = F.cross_entropy(logits[:-1], idx[0, 1:], reduction="none")
    return {"att": att.float().cpu(), "resid": torch.stack(resid), "logits": logits, "losses": losses.cpu()}


@torch.no_grad()
def logit_lens(model, resid):
    """Each layer's residual stream read out as the last layer's is: through ln_f and lm_head. (L + 1, T, V)."""
    return model.lm_head(model.transformer.ln_f(resid)).float()


def lens_losses(lens_logits, ids):
    """The loss on the text (targets ids[1:]) of each layer's lens: (L + 1,), nats per token."""
    n_rows, T, V = lens_logits.shape
    targets = torch.tensor(ids[1:], device=lens_logits.device).repeat(n_rows)
    return F.cross_entropy(lens_logits[:, :-1].reshape(-1, V), targets, reduction="none").view(n_rows, T - 1).mean(-1)


def layer_name(row):
    """Row 0 of the lens is the embedding, row k the residual stream after block k - 1."""
    return "emb" if row == 0 else str(row - 1)


def head_stats(att):
    """
    The seeds' claims per head, from att (..., T, T), e.g. (L, H, T, T) -> (L, H) each, over the rows that have a choice (1..T-1; row 0
    sees only itself): diagonal, the share of rows whose largest weight is on the diagonal (ties count);
    previous and first, the same for the token just before and for the first token; distance, the mean
    of sum_j p_ij (i - j), how far back a head looks; entropy, of each row in nats (0: all on one token).
    """
    T = att.size(-1)
    rows = att[..., 1:, :]  # (..., T-1, T)
    i = torch.arange(1, T, dtype=att.dtype)
    top = rows.max(dim=-1).values
    at = lambda j: rows.gather(-1, j.expand(*rows.shape[:-1]).unsqueeze(-1)).squeeze(-1)  # noqa: E731
    dist = (i[:, None] - torch.arange(T, dtype=att.dtype)).clamp(min=0)  # (T-1, T); masked weights are 0
    entropy = -(rows * rows.clamp(min=1e-30).log()).sum(-1)
    return {
        "diagonal": (at(torch.arange(1, T)) >= top).float().mean(-1),
        "previous": (at(torch.arange(0, T - 1)) >= top).float().mean(-1),
        "first": (at(torch.zeros(T - 1, dtype=torch.long)) >= top).float().mean(-1),
        "distance": (rows * dist).sum(-1).mean(-1),
        "entropy": entropy.mean(-1),
    }


def reference(T):
    """The table's last line: the shares if each row's maximum fell on a random visible token (1/(i+1)),
    and the distance and entropy of a head that averages the past evenly."""
    i = torch.arange(1, T, dtype=torch.float64)
    chance = (1 / (i + 1)).mean().item()
    return {"diagonal": chance, "previous": chance, "first": chance, "distance": (i / 2).mean().item(),
            "entropy": torch.log(i + 1).mean().item()}


# ----------------------------------------------------------------------------- loss on a whole file

def token_bytes(meta, ids):
    """The UTF-8 bytes each token stands for: 1-4 for a character, the BPE token's byte string for GPT-2."""
    if meta["tokenizer"] == "char":
        return [len(meta["itos"][i].encode()) for i in ids]
    enc = gpt2_encoding()
    return [len(enc.decode_single_token_bytes(i)) for i in ids]


def windows(n, block_size, stride):
    """
    (begin, first) pairs covering targets 1..n-1 of n tokens: inputs ids[begin:begin + block_size] (the
    last window ends at the last token), and only targets from index first on are scored in it, so each
    target is scored once, in the first window that holds it, with as much context as that window gives.
    """
    if n - 1 <= block_size:
        return [(0, 1)]
    begins = list(range(0, n - 1 - block_size, stride)) + [n - 1 - block_size]
    out, scored = [], 1  # targets below `scored` are done
    for b in begins:
        out.append((b, scored))
        scored = b + block_size + 1
    return out


@torch.no_grad()
def evaluate(model, ids, nbytes, stride=0, batch_size=8, progress=False, heads=False):
    """
    The model's loss on ids (any length): total nats over tokens 1..n-1 (the first token has no
    context to be predicted from), per token, as perplexity, and per UTF-8 byte in bits (nbytes: each
    token's byte count), which compares models with different tokenizers on the same text. With heads,
    also head_stats averaged over the windows (each window's rows 1..T-1).
    """
    B = model.config.block_size
    stride = stride or max(1, B // 2)
    dev = next(model.parameters()).device
    data = torch.tensor(ids, dtype=torch.long)
    plan = windows(len(ids), B, stride)
    T = min(B, len(ids) - 1)
    total, head_sums = 0.0, None
    for k in tqdm(range(0, len(plan), batch_size), unit="batch", disable=not progress, file=sys.stderr):
        chunk = plan[k:k + batch_size]
        x = torch.stack([data[b:b + T] for b, _ in chunk])
        y = torch.stack([data[b + 1:b + T + 1] for b, _ in chunk])
        for row, (b, first) in enumerate(chunk):  # ignore targets an earlier window already scored
            y[row, :max(0, first - b - 1)] = -1
        x, y = x.to(dev), y.to(dev)
        with capture_attention(model) if heads else contextlib.nullcontext() as attns:
            logits, _ = model(x, y)
            if heads:  # (windows, L, H) per statistic, summed over the windows
                stats = head_stats(torch.stack([a.att for a in attns], dim=1).float().cpu())
                head_sums = {name: v.sum(0) + (head_sums[name] if head_sums else 0) for name, v in stats.items()}
        total += F.cross_entropy(logits.float().flatten(0, 1), y.flatten(), ignore_index=-1, reduction="sum").item()
    n_tokens, n_bytes = len(ids) - 1, sum(nbytes[1:])
    nats = total / n_tokens
    return {"tokens": n_tokens, "bytes": n_bytes, "windows": len(plan), "stride": stride, "nats_per_token": nats,
            "perplexity": math.exp(nats), "bits_per_byte": total / LN2 / n_bytes, "window_tokens": T,
            "heads": {k: v / len(plan) for k, v in head_sums.items()} if heads else None}


# ----------------------------------------------------------------------------- showing it

def show(token):
    """A token as one visible cell: newlines and tabs as symbols."""
    return token.replace("\n", "\u23ce").replace("\t", "\u21e5") or "\u00b7"


SURPRISE_BINS = ((0.5, 46), (1.0, 148), (2.0, 220), (4.0, 208), (math.inf, 196))  # nats -> xterm-256 background


def ansi_surprise(tokens, losses):
    """The text with each token's background coloured by its loss (the first token, unscored, plain)."""
    out = [tokens[0]]
    for tok, loss in zip(tokens[1:], losses):
        colour = next(c for limit, c in SURPRISE_BINS if loss < limit)
        lines = tok.split("\n")  # colour each line's piece; a coloured newline smears across the terminal
        out.append("\n".join(f"\x1b[48;5;{colour}m\x1b[30m{piece}\x1b[0m" if piece else "" for piece in lines))
    legend = " ".join(f"\x1b[48;5;{c}m\x1b[30m<{limit:g}\x1b[0m" for limit, c in SURPRISE_BINS[:-1])
    return "".join(out) + f"\n(nats: {legend} \x1b[48;5;196m\x1b[30m>=4\x1b[0m)"


def lens_rows(tokens, lens_top1, width=100):
    """The logit lens as text: under the input, each layer's top prediction at each position, in columns."""
    names = ["input"] + [layer_name(row) for row in range(len(lens_top1))]
    grid = [[show(t) for t in tokens]] + [[show(t) for t in row] for row in lens_top1]
    widths = [min(10, max(len(row[j]) for row in grid)) for j in range(len(tokens))]
    lines, j = [], 0
    while j < len(tokens):
        k, used = j, 0
        while k < len(tokens) and (k == j or used + widths[k] + 1 <= width):
            used, k = used + widths[k] + 1, k + 1
        for name, row in zip(names, grid):
            lines.append(f"{name:>5} " + " ".join(row[c][:widths[c]].ljust(widths[c]) for c in range(j, k)))
        lines.append("")
        j = k
    return "\n".join(lines)


def stats_table(stats, reference):
    L, H = stats["diagonal"].shape
    lines = ["layer head  diagonal  previous  first  distance  entropy"]
    for layer in range(L):
        for head in range(H):
            s = {k: v[layer, head].item() for k, v in stats.items()}
            lines.append(f"{layer:5d} {head:4d}  {s['diagonal']:8.2f}  {s['previous']:8.2f}  {s['first']:5.2f}"
                         f"  {s['distance']:8.2f}  {s['entropy']:7.2f}")
    r = reference
    lines.append(f"{'reference':>10}  {r['diagonal']:8.2f}  {r['previous']:8.2f}  {r['first']:5.2f}"
                 f"  {r['distance']:8.2f}  {r['entropy']:7.2f}   (shares: row maximum at random; "
                 "distance, entropy: an even average of the past)")
    return "\n".join(lines)


def plot_attention(att, tokens, path):
    """A grid of heatmaps, layers down and heads across, query tokens on y, keys on x. False without matplotlib."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    L, H, T, _ = att.shape
    labels = [show(t) for t in tokens]
    step = max(1, math.ceil(T / 40))  # at most ~40 labels an axis
    fig, axes = plt.subplots(L, H, figsize=(2.6 * H + 0.8, 2.6 * L + 0.6), squeeze=False)
    for layer in range(L):
        for head in range(H):
            ax = axes[layer][head]
            ax.imshow(att[layer, head].numpy(), cmap="viridis", vmin=0, vmax=1, interpolation="nearest")
            ax.set_xticks(range(0, T, step))
            ax.set_yticks(range(0, T, step))
            ax.set_xticklabels(labels[::step] if layer == L - 1 else [], fontsize=5, rotation=90)
            ax.set_yticklabels(labels[::step] if head == 0 else [], fontsize=5)
            ax.tick_params(length=0)
            ax.set_title(f"layer {layer} head {head}", fontsize=7)
    fig.tight_layout()
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    fig.savefig(path, dpi=110, metadata={"Software": MARK})  # the mark that lets a later run replace it
    plt.close(fig)
    return True


def page_data(inside, lens_logits, lens_loss, tokens, stats, decode_one, top, title):
    """What the page shows, as plain lists (rounded to keep the file small): the JSON the page's script reads."""
    att, losses = inside["att"], inside["losses"]
    L, H, T, _ = att.shape
    probs = lens_logits.softmax(-1)
    p, i = probs.topk(top, dim=-1)  # (L + 1, T, top)
    return {
        "title": title,
        "tokens": tokens,
        "att": [[[[round(w, 3) for w in att[l, h, q, :q + 1].tolist()] for q in range(T)]  # noqa: E741
                 for h in range(H)] for l in range(L)],
        "surprise": [None] + [round(x, 3) for x in losses.tolist()],
        "lens": [[[[decode_one(int(i[l, t, k])), round(float(p[l, t, k]), 3)] for k in range(top)]  # noqa: E741
                  for t in range(T)] for l in range(L + 1)],
        "lens_loss": [round(x, 4) for x in lens_loss.tolist()],
        "stats": {k: [[round(x, 3) for x in row] for row in v.tolist()] for k, v in stats.items()},
    }


PAGE = """<!doctype html>
<html><head><meta charset="utf-8"><meta name="generator" content="%(mark)s"><title>lens: %(title)s</title>
<style>
body { font: 14px/1.4 system-ui, sans-serif; margin: 1.2em; color: #222; }
#text { font: 15px/2.1 ui-monospace, monospace; border: 1px solid #ccc; padding: .6em; max-width: 70em; }
.tok { white-space: pre; border: 1px solid #ddd; border-radius: 3px; padding: 1px 1px; margin: 0 1px; cursor: default; }
.tok.q { outline: 2px solid #000; }
table { border-collapse: collapse; margin-top: .6em; }
td, th { border: 1px solid #ccc; padding: 2px 6px; text-align: right; font-variant-numeric: tabular-nums; }
tr.sel td { background: #ffe9a8; }
#stats tr:hover td { background: #eef; cursor: pointer; }
.row { display: flex; gap: 2em; align-items: flex-start; flex-wrap: wrap; }
.mono { font-family: ui-monospace, monospace; white-space: pre; }
</style></head><body>
<h3>lens: %(title)s</h3>
<p>Layer <select id="layer"></select> head <select id="head"></select>
&nbsp; Hover a token: the tokens it attends to light up (orange, darker = more weight; row maximum = full colour).
Not hovering: each token coloured by surprise, its loss in nats (green low, red high); mean <b id="mean"></b> nats.</p>
<div id="text"></div>
<div class="row">
<div><h4>At the hovered token</h4><div id="info">hover a token</div></div>
<div><h4>Logit lens: loss per layer</h4><table id="lensloss"></table></div>
</div>
<h4>Heads (rows 1..T-1): share of rows whose maximum is on the diagonal, the previous token, the first token;
mean distance looked back; mean entropy (nats). Click a row to show that head.</h4>
<table id="stats"></table>
<script>
const D = %(data)s;
const T = D.tokens.length, L = D.att.length, H = D.att[0].length;
const $ = id => document.getElementById(id);
let layer = 0, head = 0, hovered = -1;
const spans = [];
function surpriseColour(x) {  // 0 nats green -> 4+ nats red
  const hue = 120 * (1 - Math.min(x, 4) / 4);
  return `hsl(${hue}, 80%%, 75%%)`;
}
function esc(s) { return s.replace(/&/g, "&amp;").replace(/</g, "&lt;"); }
function show(s) { return s.replace(/\\n/g, "\\u23ce").replace(/\\t/g, "\\u21e5") || "\\u00b7"; }
D.tokens.forEach((t, i) => {
  const s = document.createElement("span");
  s.className = "tok"; s.textContent = show(t); s.dataset.i = i;
  s.addEventListener("mouseenter", () => { hovered = i; paint(); });
  $("text").appendChild(s); spans.push(s);
  if (t.includes("\\n")) $("text").appendChild(document.createElement("br"));
});
$("text").addEventListener("mouseleave", () => { hovered = -1; paint(); });
function paint() {
  if (hovered < 0) {
    spans.forEach((s, i) => {
      const x = D.surprise[i];
      s.classList.remove("q"); delete s.dataset.w;
      s.style.background = x === null ? "#eee" : surpriseColour(x);
      s.title = x === null ? "first token: nothing to predict it from" : `loss ${x} nats`;
    });
    $("info").textContent = "hover a token";
    return;
  }
  const row = D.att[layer][head][hovered], top = Math.max(...row);
  spans.forEach((s, j) => {
    const w = j < row.length ? row[j] : 0;
    s.dataset.w = w;
    s.classList.toggle("q", j === hovered);
    s.style.background = w > 0 ? `rgba(255, 128, 0, ${(w / top).toFixed(3)})` : "#fff";
    s.title = `weight ${w}`;
  });
  const order = row.map((w, j) => [w, j]).sort((a, b) => b[0] - a[0]).slice(0, 5);
  let h = `<p>token ${hovered} <span class="mono">${esc(show(D.tokens[hovered]))}</span>, ` +
    (D.surprise[hovered] === null ? "unscored" : `loss ${D.surprise[hovered]} nats`) +
    `<br>layer ${layer} head ${head} looks most at: ` +
    order.map(([w, j]) => `<span class="mono">${esc(show(D.tokens[j]))}</span>@${j} ${w}`).join(", ") +
    `</p><table><tr><th>layer</th><th>predicts next (logit lens)</th></tr>`;
  D.lens.forEach((byPos, l) => {
    h += `<tr><td>${l === 0 ? "emb" : "block " + (l - 1)}</td><td style="text-align:left">` +
      byPos[hovered].map(([t, p]) => `<span class="mono">${esc(show(t))}</span> ${p}`).join(", ") + "</td></tr>";
  });
  $("info").innerHTML = h + "</table>";
}
function fill(sel, n, f) { for (let i = 0; i < n; i++) sel.add(new Option(f(i), i)); }
fill($("layer"), L, i => i); fill($("head"), H, i => i);
$("layer").onchange = () => { layer = +$("layer").value; selectRow(); paint(); };
$("head").onchange = () => { head = +$("head").value; selectRow(); paint(); };
const st = D.stats;
let rows = "<tr><th>layer</th><th>head</th><th>diagonal</th><th>previous</th><th>first</th><th>distance</th><th>entropy</th></tr>";
for (let l = 0; l < L; l++) for (let h = 0; h < H; h++)
  rows += `<tr data-l="${l}" data-h="${h}"><td>${l}</td><td>${h}</td><td>${st.diagonal[l][h]}</td>` +
    `<td>${st.previous[l][h]}</td><td>${st.first[l][h]}</td><td>${st.distance[l][h]}</td><td>${st.entropy[l][h]}</td></tr>`;
$("stats").innerHTML = rows;
$("stats").querySelectorAll("tr[data-l]").forEach(tr => tr.onclick = () => {
  layer = +tr.dataset.l; head = +tr.dataset.h; $("layer").value = layer; $("head").value = head; selectRow(); paint();
});
function selectRow() {
  $("stats").querySelectorAll("tr[data-l]").forEach(tr =>
    tr.classList.toggle("sel", +tr.dataset.l === layer && +tr.dataset.h === head));
}
$("lensloss").innerHTML = "<tr><th>after</th><th>loss (nats)</th></tr>" +
  D.lens_loss.map((x, l) => `<tr><td>${l === 0 ? "embedding" : "block " + (l - 1)}</td><td>${x}</td></tr>`).join("");
const scored = D.surprise.filter(x => x !== null);
$("mean").textContent = (scored.reduce((a, b) => a + b, 0) / scored.length).toFixed(3);
selectRow(); paint();
</script></body></html>
"""


def write_page(data, path):
    """One self-contained HTML file: the data as JSON inside its own script, no external resource."""
    blob = json.dumps(data, ensure_ascii=False).replace("</", "<\\/")  # no "</script>" inside the script
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        f.write(PAGE % {"title": html_lib.escape(data["title"]), "data": blob, "mark": MARK})


# ----------------------------------------------------------------------------- the command

def check(cfg):
    check_init_from(cfg["init_from"], ("resume",))
    if cfg["color"] not in ("auto", "always", "never"):
        raise ConfigError(f"color must be auto, always or never, got {cfg['color']!r}")
    for key in ("stride", "batch_size", "top"):
        if cfg[key] < (0 if key == "stride" else 1):
            raise ConfigError(f"{key} must be {'>= 0' if key == 'stride' else 'at least 1'}, got {cfg[key]}")
    if cfg["png"] and not cfg["png"].lower().endswith(".png"):  # matplotlib would pick a format from the name
        raise ConfigError(f"--png names the PNG file to write: end it in .png, got {cfg['png']!r}")
    if cfg["html"] and not cfg["html"].lower().endswith((".html", ".htm")):
        raise ConfigError(f"--html names the page to write: end it in .html, got {cfg['html']!r}")
    for key in ("html", "png"):  # before the work, not after it; a user's own file of that name is not written over
        why = cfg[key] and not cfg["eval"] and (unwritable(os.path.dirname(cfg[key])) or
                                                not_ours(cfg[key], OURS[key], "lens.py"))
        if why:
            raise ConfigError(f"cannot write --{key}={cfg[key]}: {why}")


def load(cfg):
    """sample.py's model and tokenizer, in eval mode on the chosen device."""
    dev, _, _ = resolve_device(cfg["device"], "float32")  # the device; the dtype once the model's width is known
    model, meta, loaded = load_model(cfg)
    return model.eval().to(dev), meta, loaded


def split_ids(path, meta):
    """The ids of a prepare script's train.bin or val.bin, if the tokenizer beside it (its folder's meta.json,
    or nanoGPT's meta.pkl) is the model's: the same ids must mean the same characters or tokens."""
    folder = os.path.dirname(path) or "."
    try:  # before its meta: a folder that is not there has none either (said in the words a text file's would be)
        open(path, "rb").close()
    except OSError as e:
        raise ConfigError(f"cannot read {path}: {e.strerror or e}") from None
    found = find_meta(folder)
    if not found:
        raise ConfigError(f"no meta.json (or nanoGPT's meta.pkl) in {folder}: without the tokenizer that wrote "
                          f"{os.path.basename(path)}, its ids cannot be read")
    was, source = found
    if not same_tokenizer(was, meta):
        raise ConfigError(f"{path} is in {source}'s tokenizer ({tokenizer_label(was, meta)}), not "
                          f"this model's ({tokenizer_label(meta)}): its ids would mean other characters or tokens")
    ids = read_bin(path, was)
    if len(ids) and int(ids.max()) >= meta["vocab_size"]:
        raise ConfigError(f"{path} holds id {int(ids.max())}, outside the vocabulary of {meta['vocab_size']}")
    return ids.tolist()


def run_eval(cfg):
    path = cfg["eval"]
    split = path.lower().endswith(".bin")
    if not split:
        try:
            with open(path, encoding="utf-8") as f:
                text = f.read()
        except (OSError, UnicodeDecodeError) as e:
            raise ConfigError(f"cannot read {path}: {getattr(e, 'strerror', None) or e}") from None
    model, meta, loaded = load(cfg)
    if cfg["stride"] > model.config.block_size:
        raise ConfigError(f"stride {cfg['stride']} is longer than block_size {model.config.block_size}: "
                          "tokens between windows would go unscored")
    ids = split_ids(path, meta) if split else load_tokenizer(meta)[0](text)
    if len(ids) < 2:
        raise ConfigError(f"{path} has {len(ids)} token(s): at least two are needed to score one")
    log(loaded)
    _, device_type, dtype = resolve_device(cfg["device"], cfg["dtype"], model.config.n_embd)
    with autocast(device_type, dtype):
        r = evaluate(model, ids, token_bytes(meta, ids), cfg["stride"], cfg["batch_size"], sys.stderr.isatty(),
                     cfg["heads"])
    print(f"{path}: {r['tokens']:,} tokens scored ({meta['tokenizer']}), {r['bytes']:,} UTF-8 bytes, "
          f"{r['windows']:,} window{'s' * (r['windows'] != 1)} of {min(model.config.block_size, r['tokens'])} "
          f"(stride {r['stride']})")
    print(f"nats/token {r['nats_per_token']:.4f}  perplexity {r['perplexity']:.3f}  "
          f"bits/byte {r['bits_per_byte']:.4f}")
    if r["heads"]:
        T = r["window_tokens"]
        over = f"the {r['windows']:,} windows" if r["windows"] != 1 else "the one window"
        print(f"\nheads, averaged over {over} ({r['windows'] * (T - 1):,} rows of attention):")
        print(stats_table(r["heads"], reference(T)))
    return r


def main(argv=None):
    cfg = configure(DEFAULTS, argv, reads_run=True)
    check(cfg)
    if cfg["eval"]:
        return run_eval(cfg)
    text = read_prompt(cfg["start"])
    model, meta, loaded = load(cfg)
    ids = encode_prompt(text, meta, default=cfg["start"] == DEFAULTS["start"])
    B = model.config.block_size
    if len(ids) > B:
        raise ConfigError(f"the text is {len(ids)} tokens, longer than the model's block_size {B}: "
                          f"shorten it (--eval=FILE scores a long text in windows)")
    if len(ids) < 2:
        raise ConfigError("the text is one token: give at least two, so one can be predicted")
    log(loaded)
    _, device_type, dtype = resolve_device(cfg["device"], cfg["dtype"], model.config.n_embd)
    with autocast(device_type, dtype):
        inside = look_inside(model, ids)
        lens_logits = logit_lens(model, inside["resid"]).cpu()
    tokens = list(stream_decode(meta, ids))[:len(ids)]  # each token's text (the final flush is empty)
    _, decode = load_tokenizer(meta)
    losses = inside["losses"].tolist()
    stats = head_stats(inside["att"])

    colour = cfg["color"] == "always" or (cfg["color"] == "auto" and sys.stdout.isatty())
    print(ansi_surprise(tokens, losses) if colour else text)
    print(f"surprise: mean {sum(losses) / len(losses):.4f} nats over {len(losses)} tokens "
          f"(the first has nothing to be predicted from); most surprising: " +
          ", ".join(f"{show(tokens[i + 1])!r} {losses[i]:.2f}"
                    for i in sorted(range(len(losses)), key=lambda i: -losses[i])[:5]))
    print()
    print(stats_table(stats, reference(len(ids))))
    print()
    lens_loss = lens_losses(lens_logits, ids)
    print("logit lens: the loss on the text read out after the embedding (emb) and after each block, and under each")
    print("token the top prediction for the next one at that depth")
    print("loss  " + "  ".join(f"{layer_name(r)}: {x:.3f}" for r, x in enumerate(lens_loss.tolist())))
    print(lens_rows(tokens, [[decode([i]) for i in row] for row in lens_logits.argmax(-1).tolist()]))

    title = f"{loaded.split(', tokenizer from')[0]}: {len(ids)} tokens"
    with writing(cfg["png"]):
        drawn = cfg["png"] and plot_attention(inside["att"], tokens, cfg["png"])
    if drawn:
        log(f"wrote {cfg['png']}")
    elif cfg["png"]:
        log("matplotlib is not installed: no attention PNG (pip install matplotlib)")
    if cfg["html"]:
        with writing(cfg["html"]):
            write_page(page_data(inside, lens_logits, lens_loss, tokens, stats, lambda i: decode([i]), cfg["top"], title),
                       cfg["html"])
        log(f"wrote {cfg['html']}")
    return {"ids": ids, "tokens": tokens, **inside, "lens_logits": lens_logits, "lens_loss": lens_loss, "stats": stats}


if __name__ == "__main__":
    run(main)
