"""
See inside a model: where each attention head looks, what each layer would predict (the logit
lens), and how surprised the model is by each token. It prints them, and writes lens.html, one page
that needs no network (hover a token), and lens.png, every head's attention; both go in a run's
out_dir. With --eval it scores a whole file, in bits per byte too.

    python lens.py --out_dir=out-tiny --start="ROMEO:" --html=romeo.html --png=romeo.png
    python lens.py --init_from=gpt2 --start=FILE:prompt.txt  # GPT-2's weights (transformers)
    python lens.py --out_dir=out-tiny --eval=data/shakespeare_char/val.bin   # or a text file
"""

import contextlib
import html as html_lib
import json
import math
import os
import sys
import tempfile

from device import autocast, resolve_device  # before torch: OpenMP's setting
import torch
from torch.nn import functional as F
from tqdm import tqdm

from checkpoint import load_model
from configurator import ConfigError, config_keys, configure, run
from tokenizer import find_meta, gpt2_encoding, load_tokenizer, read_bin, read_text, replace_file
from tokenizer import same_tokenizer, stream_decode

# -----------------------------------------------------------------------------
init_from = "resume"  # "resume" (out_dir's checkpoint) | "gpt2" | ... | a Hugging Face folder
out_dir = "out"
ckpt = ""  # "" = best.pt if there is one, else ckpt.pt
meta = ""  # the tokenizer: a meta.json or nanoGPT meta.pkl; "" = as sample.py finds it
start = "ROMEO:\nBut soft, what light through yonder window breaks?"  # the text, or "FILE:path"
eval = ""  # a text file or a train.bin/val.bin to score whole, in windows, instead of --start
stride = 0  # --eval: tokens between window starts, each token scored once; 0 = block_size // 2
batch_size = 8  # --eval: windows per forward pass
heads = False  # --eval: each head's statistics too, as for --start, averaged over all windows
top = 3  # the logit lens's top tokens per position and layer (in the page)
html = "lens.html"  # the page to write; unless named, in out_dir when reading a run; "" = none
png = "lens.png"  # the attention grid to write; unless named, beside the page; "" = none
color = "auto"  # surprise as ANSI colour: "auto" (when stdout is a terminal) | "always" | "never"
device = "auto"
dtype = "float32"  # "float32" | "bfloat16" | "float16" | "auto"
# -----------------------------------------------------------------------------
DEFAULTS = config_keys(globals())
# A loss below each limit in nats gets the xterm-256 background colour beside it.
SURPRISE_BINS = ((0.5, 46), (1.0, 148), (2.0, 220), (4.0, 208), (math.inf, 196))


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
    One forward pass of ids (at most block_size). It records att (L, H, T, T), the attention
    probabilities; resid (L + 1, T, C), the residual stream after the embedding and each block;
    logits (T, V); losses (T - 1,) in nats; and the logit lens: lens_logits (L + 1, T, V), each
    resid read out as the last is, and its loss lens_loss (L + 1,).
    """
    idx = torch.tensor([ids], dtype=torch.long, device=next(model.parameters()).device)
    resid = []
    blocks = model.transformer.h
    hooks = [blocks[0].register_forward_pre_hook(lambda m, args: resid.append(args[0][0]))]
    hooks += [b.register_forward_hook(lambda m, args, out: resid.append(out[0])) for b in blocks]
    try:
        with capture_attention(model) as attns:
            logits, _ = model(idx, idx)  # with targets the model returns every position's logits
            att = torch.stack([a.att[0] for a in attns])
    finally:
        for h in hooks:
            h.remove()
    resid = torch.stack(resid)
    # The last row: the model's own logits.
    lens_logits = model.lm_head(model.transformer.ln_f(resid)).float()
    targets = idx[:, 1:].expand(len(resid), -1)
    nll = F.cross_entropy(lens_logits[:, :-1].transpose(1, 2), targets, reduction="none")
    return {"att": att.float().cpu(), "resid": resid, "logits": logits[0].float(),
            "lens_logits": lens_logits.cpu(), "losses": nll[-1].cpu(),
            "lens_loss": nll.mean(-1).cpu()}


def head_stats(att):
    """
    Per head, from att (..., T, T), over rows 1..T-1. diagonal, previous and first are the shares of
    rows whose largest weight is on that token (ties count); distance is the mean of
    sum_j p_ij (i - j), how far back the head looks; entropy is each row's, in nats (0: all on one
    token).
    """
    T = att.size(-1)
    rows = att[..., 1:, :]  # (..., T-1, T)
    k = torch.arange(T - 1)  # row k is query k + 1
    top = rows.max(dim=-1).values

    def on(j):
        # The share of rows k whose largest weight is on token j[k] (or j).
        return (rows[..., k, j] >= top).float().mean(-1)
    # dist is (T-1, T); the masked weights are 0, so no mask is needed.
    dist = (k[:, None] + 1 - torch.arange(T)).clamp(min=0).to(att.dtype)
    # The entropy as p log(1/p), which never reads -0.0.
    return {"diagonal": on(k + 1), "previous": on(k), "first": on(0),
            "distance": (rows * dist).sum(-1).mean(-1),
            "entropy": (rows * (1 / rows.clamp(min=1e-30)).log()).sum(-1).mean(-1)}


def token_bytes(meta, ids):
    """The UTF-8 bytes each token stands for: 1-4 for a character, the BPE token's byte string for
    GPT-2."""
    if meta["tokenizer"] == "char":
        return [len(meta["itos"][i].encode()) for i in ids]
    return [len(gpt2_encoding().decode_single_token_bytes(i)) for i in ids]


def windows(n, block_size, stride):
    """
    (begin, first) pairs covering targets 1..n-1 of n tokens. Each window's inputs are
    ids[begin:begin + block_size], the last window ending at the last token, and it scores the
    targets from first on, so each target once, in the first window holding it.
    """
    begins = list(range(0, n - 1 - block_size, stride)) + [max(0, n - 1 - block_size)]
    return [(b, 1 if k == 0 else begins[k - 1] + block_size + 1) for k, b in enumerate(begins)]


@torch.no_grad()
def evaluate(model, ids, nbytes, stride=0, batch_size=8, progress=False, heads=False):
    """
    The model's loss on ids (any length) over tokens 1..n-1: per token, as perplexity, and in bits
    per UTF-8 byte (nbytes holds each token's), which compares tokenizers. heads adds head_stats,
    averaged over the windows.
    """
    B = model.config.block_size
    dev = next(model.parameters()).device
    stride = stride or max(1, B // 2)
    data = torch.tensor(ids, dtype=torch.long)
    plan = windows(len(ids), B, stride)
    T = min(B, len(ids) - 1)
    total = 0.0
    parts = []
    batches = range(0, len(plan), batch_size)
    for k in tqdm(batches, unit="batch", disable=not progress, file=sys.stderr):
        chunk = plan[k:k + batch_size]
        xy = torch.stack([data[b:b + T + 1] for b, _ in chunk])
        x, y = xy[:, :-1], xy[:, 1:].clone()
        # Targets an earlier window already scored are ignored.
        for row, (b, first) in enumerate(chunk):
            y[row, :max(0, first - b - 1)] = -1
        with capture_attention(model) if heads else contextlib.nullcontext() as attns:
            logits, _ = model(x.to(dev), y.to(dev))
            if heads:  # (windows, L, H) per statistic
                parts.append(head_stats(torch.stack([a.att for a in attns], dim=1).float().cpu()))
        total += F.cross_entropy(logits.float().flatten(0, 1), y.to(dev).flatten(), ignore_index=-1,
                                 reduction="sum").item()
    n_tokens = len(ids) - 1
    n_bytes = sum(nbytes[1:])
    head_means = {k: torch.cat([s[k] for s in parts]).mean(0) for k in parts[0]} if heads else None
    return {"tokens": n_tokens, "bytes": n_bytes, "windows": len(plan), "stride": stride,
            "window_tokens": T, "nats_per_token": total / n_tokens,
            "perplexity": math.exp(total / n_tokens),
            "bits_per_byte": total / math.log(2) / n_bytes, "heads": head_means}


def show(token):
    """A token as one visible cell: newlines and tabs as symbols."""
    return token.replace("\n", "\u23ce").replace("\t", "\u21e5") or "\u00b7"


def ansi_surprise(tokens, losses):
    """The text with each token's background coloured by its loss, the first token (unscored)
    plain."""
    out = [tokens[0]]
    for tok, loss in zip(tokens[1:], losses):
        colour = next(c for limit, c in SURPRISE_BINS if loss < limit)
        # Colour each line's piece; a coloured newline smears across the terminal.
        lines = tok.split("\n")
        pieces = (f"\x1b[48;5;{colour}m\x1b[30m{piece}\x1b[0m" if piece else "" for piece in lines)
        out.append("\n".join(pieces))
    legend = " ".join(f"\x1b[48;5;{c}m\x1b[30m<{limit:g}\x1b[0m" for limit, c in SURPRISE_BINS[:-1])
    return "".join(out) + f"\n(nats: {legend} \x1b[48;5;196m\x1b[30m>=4\x1b[0m)"


def lens_rows(tokens, lens_top1, width=100):
    """The logit lens as text: under the input, each layer's top prediction at each position, in
    columns."""
    names = ["input", "emb", *map(str, range(len(lens_top1) - 1))]
    grid = [[show(t) for t in row] for row in [tokens, *lens_top1]]
    widths = [min(10, max(len(row[j]) for row in grid)) for j in range(len(tokens))]
    lines = []
    j = 0
    while j < len(tokens):
        # Columns j..k-1 fill one band of lines, at least one column however wide.
        k = j
        used = 0
        while k < len(tokens) and (k == j or used + widths[k] + 1 <= width):
            used += widths[k] + 1
            k += 1
        lines += [f"{name:>5} " + " ".join(row[c][:widths[c]].ljust(widths[c]) for c in range(j, k))
                  for name, row in zip(names, grid)] + [""]
        j = k
    return "\n".join(lines)


def stats_table(stats, T):
    """Each head's statistics, and a reference line: the shares if each row's maximum fell on a
    random visible token, and the distance and entropy of a head that averages the past evenly."""
    L, H = stats["diagonal"].shape
    i = torch.arange(1, T, dtype=torch.float64)
    chance = (1 / (i + 1)).mean().item()
    reference = {"diagonal": chance, "previous": chance, "first": chance,
                 "distance": (i / 2).mean().item(), "entropy": torch.log(i + 1).mean().item()}
    row = "{:>10}  {diagonal:8.2f}  {previous:8.2f}  {first:5.2f}  {distance:8.2f}  {entropy:7.2f}"
    lines = ["layer head  diagonal  previous  first  distance  entropy"]
    for layer in range(L):
        for head in range(H):
            values = {k: v[layer, head].item() for k, v in stats.items()}
            lines.append(row.format(f"{layer:5d} {head:4d}", **values))
    lines.append(row.format("reference", **reference) + "   (shares: row maximum at random; "
                 "distance, entropy: an even average of the past)")
    return "\n".join(lines)


def plot_attention(att, tokens, path):
    """A grid of heatmaps, layers down and heads across, queries on y, keys on x. False without
    matplotlib."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    L, H, T, _ = att.shape
    labels = [show(t) for t in tokens]
    step = max(1, math.ceil(T / 40))  # at most about 40 labels an axis
    fig, axes = plt.subplots(L, H, figsize=(2.6 * H + 0.8, 2.6 * L + 0.6), squeeze=False,
                             layout="constrained")
    for layer in range(L):
        for head in range(H):
            ax = axes[layer, head]
            image = ax.imshow(att[layer, head].numpy(), cmap="viridis", vmin=0, vmax=1,
                              interpolation="nearest")
            # Only the bottom row names the keys, and only the left column the queries.
            ax.set_xticks(range(0, T, step), labels[::step] if layer == L - 1 else [], fontsize=5,
                          rotation=90)
            ax.set_yticks(range(0, T, step), labels[::step] if head == 0 else [], fontsize=5)
            ax.tick_params(length=0)
            ax.set_title(f"layer {layer} head {head}", fontsize=7)
            ax.set_xlabel("key (attended to)" if layer == L - 1 else "", fontsize=6)
            ax.set_ylabel("query (attending)" if head == 0 else "", fontsize=6)
    fig.colorbar(image, ax=axes, shrink=0.6, label="attention weight")
    replace_file(path, lambda f: fig.savefig(f, dpi=110, format="png"))
    plt.close(fig)
    return True


PAGE = """<!doctype html>
<html><head><meta charset="utf-8"><title>lens: %(title)s</title>
<style>
body { font: 14px/1.4 sans-serif; margin: 1.2em; }
#text { font: 15px/2.1 monospace; max-width: 70em; }
.tok { white-space: pre; border: 1px solid #ddd; margin: 0 1px; }
.tok.q { outline: 2px solid #000; }
td, th { border: 1px solid #ccc; padding: 2px 6px; text-align: right; }
table { border-collapse: collapse; }
tr.sel td { background: #ffe9a8; }
#stats tr:hover td { background: #eef; }
.mono { font-family: monospace; }
</style></head><body><h3>lens: %(title)s</h3>
<p>Layer <select id="layer"></select> head <select id="head"></select>
&nbsp; Hover a token: the tokens it attends to light up (orange, darker = more weight; row maximum
= full colour). Else each token's colour is its loss in nats (green low, red high); mean
<b id="mean">%(mean).3f</b>.</p>
<div id="text"></div>
<div style="display: flex; gap: 2em; align-items: flex-start; flex-wrap: wrap">
<div><h4>At the hovered token</h4><div id="info">hover a token</div></div>
<div><h4>Logit lens: loss per layer</h4><table id="lensloss"></table></div></div>
<h4>Heads (rows 1..T-1): share of rows whose maximum is on the diagonal, the previous token, the
first token; mean distance looked back; mean entropy (nats). Click a row to show that head.</h4>
<table id="stats"></table>
<script>
const D = %(data)s, $ = id => document.getElementById(id);
const names = ["diagonal", "previous", "first", "distance", "entropy"];
const after = l => l ? "block " + (l - 1) : "emb";
const row = (tag, xs) => `<tr>${xs.map(x => `<${tag}>${x}</${tag}>`).join("")}</tr>`;
const show = s => s.replace(/\\n/g, "\\u23ce").replace(/\\t/g, "\\u21e5") || "\\u00b7";
const safe = s => show(s).replace(/&/g, "&amp;").replace(/</g, "&lt;");
const mono = s => `<span class="mono">${safe(s)}</span>`;
let layer = 0, head = 0, hovered = -1;
const spans = D.tokens.map((t, i) => {
  const s = $("text").appendChild(document.createElement("span"));
  s.className = "tok";
  s.textContent = show(t);
  s.onmouseenter = () => { hovered = i; paint(); };
  if (t.includes("\\n")) $("text").appendChild(document.createElement("br"));
  return s;
});
$("text").addEventListener("mouseleave", () => { hovered = -1; paint(); });
function paint() {
  $("stats").querySelectorAll("tr[data-l]").forEach(tr =>
    tr.classList.toggle("sel", +tr.dataset.l === layer && +tr.dataset.h === head));
  const att = hovered < 0 ? null : D.att[layer][head][hovered];
  const top = att && Math.max(...att);
  // Hovering, each token shows the hovered row's weight on it; else its surprise, from 0 nats
  // green to 4 or more red.
  spans.forEach((s, j) => {
    const x = D.surprise[j];
    const w = att && (j < att.length ? att[j] : 0);
    s.classList.toggle("q", j === hovered);
    if (att) {
      s.dataset.w = w;
      s.style.background = w > 0 ? `rgba(255, 128, 0, ${(w / top).toFixed(3)})` : "#fff";
      s.title = `weight ${w}`;
    } else if (x === null) {
      delete s.dataset.w;
      s.style.background = "#eee";
      s.title = "first token: nothing to predict it from";
    } else {
      delete s.dataset.w;
      s.style.background = `hsl(${120 * (1 - Math.min(x, 4) / 4)}, 80%%, 75%%)`;
      s.title = `loss ${x} nats`;
    }
  });
  if (!att) {
    $("info").textContent = "hover a token";
    return;
  }
  const order = att.map((w, j) => [w, j]).sort((a, b) => b[0] - a[0]).slice(0, 5);
  const x = D.surprise[hovered];
  const looks = order.map(([w, j]) => `${mono(D.tokens[j])}@${j} ${w}`).join(", ");
  const lens = D.lens.map((byPos, l) =>
    row("td", [after(l), byPos[hovered].map(([t, p]) => `${mono(t)} ${p}`).join(", ")]));
  $("info").innerHTML = `<p>token ${hovered} ${mono(D.tokens[hovered])}, ` +
    (x === null ? "unscored" : `loss ${x} nats`) +
    `<br>layer ${layer} head ${head} looks most at: ${looks}</p><table>` +
    row("th", ["layer", "predicts next (logit lens)"]) + lens.join("") + "</table>";
}
function choose(l, h) {
  layer = l;
  head = h;
  $("layer").value = l;
  $("head").value = h;
  paint();
}
for (const [id, n] of [["layer", D.att.length], ["head", D.att[0].length]]) {
  for (let i = 0; i < n; i++) $(id).add(new Option(i, i));
  $(id).onchange = () => choose(+$("layer").value, +$("head").value);
}
const statRows = D.att.map((heads, l) => heads.map((_, h) =>
  row("td", [l, h, ...names.map(k => D.stats[k][l][h])])
    .replace("<tr>", `<tr data-l="${l}" data-h="${h}">`)).join(""));
$("stats").innerHTML = row("th", ["layer", "head", ...names]) + statRows.join("");
$("stats").querySelectorAll("tr[data-l]").forEach(tr =>
  tr.onclick = () => choose(+tr.dataset.l, +tr.dataset.h));
$("lensloss").innerHTML = row("th", ["after", "loss (nats)"]) +
  D.lens_loss.map((x, l) => row("td", [after(l), x])).join("");
paint();
</script></body></html>
"""


def write_page(path, inside, tokens, stats, decode_one, top, title):
    """One self-contained HTML file: what the page shows as JSON in its own script, rounded to keep
    it small."""
    # p and i are (L + 1, T, top): each depth's top tokens at each position.
    p, i = inside["lens_logits"].softmax(-1).topk(top, dim=-1)

    def r(t, n=3):
        return [round(x, n) for x in t.tolist()]
    # Each query's row of weights up to itself, as the later ones are masked to 0.
    att = [[[r(q[:k + 1]) for k, q in enumerate(head)] for head in layer]
           for layer in inside["att"]]
    # At each depth and position, the top tokens and their probabilities.
    lens = [[[[decode_one(j), round(x, 3)] for x, j in zip(pt, it)] for pt, it in zip(pl, il)]
            for pl, il in zip(p.tolist(), i.tolist())]
    data = {"tokens": tokens, "surprise": [None] + r(inside["losses"]),
            "lens_loss": r(inside["lens_loss"], 4), "att": att, "lens": lens,
            "stats": {k: [r(row) for row in v] for k, v in stats.items()}}
    # No "</script>" inside the script.
    blob = json.dumps(data, ensure_ascii=False).replace("</", "<\\/")
    mean = inside["losses"].mean().item()
    page = PAGE % {"title": html_lib.escape(title), "data": blob, "mean": mean}
    replace_file(path, lambda f: f.write(page.encode()))


def split_ids(path, meta):
    """The ids of a prepare script's train.bin or val.bin, if the tokenizer beside it is the
    model's."""
    found = find_meta(os.path.dirname(path) or ".")
    # Another tokenizer's ids would mean other characters or tokens.
    if not found or not same_tokenizer(found[0], meta):
        raise ConfigError(f"cannot read {path} as this model's tokens: no meta.json beside it, or "
                          "another tokenizer's")
    ids = read_bin(path, found[0])
    if len(ids) and int(ids.max()) >= meta["vocab_size"]:
        raise ConfigError(f"{path} holds id {int(ids.max())}, outside the vocabulary of "
                          f"{meta['vocab_size']}")
    return ids.tolist()


def run_eval(cfg, model, meta, loaded):
    path = cfg["eval"]
    if cfg["stride"] > model.config.block_size:
        raise ConfigError(f"stride {cfg['stride']} is longer than block_size "
                          f"{model.config.block_size}")
    if path.lower().endswith(".bin"):
        ids = split_ids(path, meta)
    else:
        ids = load_tokenizer(meta)[0](read_text(path))
    if len(ids) < 2:
        raise ConfigError(f"{path} has {len(ids)} token(s): at least two are needed to score one")
    print(loaded, file=sys.stderr)
    r = evaluate(model, ids, token_bytes(meta, ids), cfg["stride"], cfg["batch_size"],
                 sys.stderr.isatty(), cfg["heads"])
    n = r["windows"]
    T = r["window_tokens"]
    print(f"{path}: {r['tokens']:,} tokens scored ({meta['tokenizer']}), {r['bytes']:,} UTF-8 "
          f"bytes, {n:,} window{'s' * (n != 1)} of {T} (stride {r['stride']})")
    print(f"nats/token {r['nats_per_token']:.4f}  perplexity {r['perplexity']:.3f}  "
          f"bits/byte {r['bits_per_byte']:.4f}")
    if r["heads"]:
        print(f"\nheads, averaged over {f'the {n:,} windows' if n != 1 else 'the one window'} "
              f"({n * (T - 1):,} rows of attention):\n{stats_table(r['heads'], T)}")
    return r


def report(cfg, inside, ids, meta, decode, text):
    """Print the text coloured by surprise, the heads' statistics and the logit lens; write the PNG
    and the page."""
    # Each token's text; the final flush is empty.
    tokens = list(stream_decode(meta, ids))[:len(ids)]
    losses = inside["losses"].tolist()
    stats = head_stats(inside["att"])
    colour = cfg["color"] == "always" or (cfg["color"] == "auto" and sys.stdout.isatty())
    worst = sorted(range(len(losses)), key=lambda i: -losses[i])[:5]
    print(ansi_surprise(tokens, losses) if colour else text)
    most = ", ".join(f"{show(tokens[i + 1])!r} {losses[i]:.2f}" for i in worst)
    print(f"surprise: mean {sum(losses) / len(losses):.4f} nats over {len(losses)} tokens (the "
          f"first has nothing to be predicted from); most surprising: {most}")
    print(f"\n{stats_table(stats, len(ids))}\n")
    depths = enumerate(inside["lens_loss"].tolist())
    print("logit lens: the loss on the text read out after the embedding (emb) and after each "
          "block, and under each\ntoken the top prediction for the next one at that depth\nloss  "
          + "  ".join(f"{d - 1 if d else 'emb'}: {x:.3f}" for d, x in depths))
    top1 = [[decode([i]) for i in row] for row in inside["lens_logits"].argmax(-1).tolist()]
    print(lens_rows(tokens, top1))
    model_name = cfg["out_dir"] if cfg["init_from"] == "resume" else cfg["init_from"]
    title = f"{model_name}: {len(ids)} tokens"
    drawn = cfg["png"] and plot_attention(inside["att"], tokens, cfg["png"])
    if cfg["html"]:
        write_page(cfg["html"], inside, tokens, stats, lambda i: decode([i]), cfg["top"], title)
    for key, wrote in (("png", drawn), ("html", True)):
        if cfg[key]:
            print(f"wrote {cfg[key]}" if wrote else "no attention PNG: pip install matplotlib",
                  file=sys.stderr)
    return {"ids": ids, "tokens": tokens, **inside, "stats": stats}


def main(argv=None):
    given = {}
    cfg = configure(DEFAULTS, argv, given=given)
    counts_ok = cfg["stride"] >= 0 and cfg["batch_size"] >= 1 and cfg["top"] >= 1
    if cfg["color"] not in ("auto", "always", "never") or not counts_ok:
        raise ConfigError("color must be auto, always or never; stride >= 0; batch_size and top "
                          ">= 1")
    # A page never writes over README.md or another file of the user's.
    for key, ends in (("html", (".html", ".htm")), ("png", (".png",))):
        if cfg[key] and not cfg[key].lower().endswith(ends):
            raise ConfigError(f"--{key} names the file to write: end it in {ends[0]}, got "
                              f"{cfg[key]!r}")
    # Unless named, the page goes beside the run, where one looks, and the PNG beside the page.
    run_dir = cfg["out_dir"] if cfg["init_from"] == "resume" else ""
    if "html" not in given:
        cfg["html"] = cfg["html"] and os.path.join(run_dir, cfg["html"])
    if "png" not in given:
        page_dir = os.path.dirname(cfg["html"]) if cfg["html"] else run_dir
        cfg["png"] = cfg["png"] and os.path.join(page_dir, cfg["png"])
    # A page that cannot be written is found now, not after the whole analysis.
    for path in filter(None, (cfg["png"], cfg["html"])):
        folder = os.path.dirname(path) or "."
        try:
            os.makedirs(folder, exist_ok=True)
            tempfile.TemporaryFile(dir=folder).close()
        except OSError as e:
            raise ConfigError(f"cannot write {path}: {e.strerror or e}") from None
    if cfg["start"].startswith("FILE:"):
        text = read_text(cfg["start"][5:])
    else:
        text = cfg["start"].replace("\\n", "\n")
    dev, device_type, dtype = resolve_device(cfg["device"], cfg["dtype"])
    model, meta, loaded = load_model(cfg["init_from"], cfg["out_dir"], cfg["ckpt"], cfg["meta"])
    model.to(dev)
    with autocast(device_type, dtype):
        if cfg["eval"]:
            return run_eval(cfg, model, meta, loaded)
        encode, decode = load_tokenizer(meta)
        ids = encode(text)
        if not 2 <= len(ids) <= model.config.block_size:
            raise ConfigError(f"the text is {len(ids)} token(s): give at least two and at most the "
                              f"model's block_size {model.config.block_size} (--eval=FILE scores a "
                              "long text in windows)")
        print(loaded, file=sys.stderr)
        inside = look_inside(model, ids)
    return report(cfg, inside, ids, meta, decode, text)


if __name__ == "__main__":
    run(main)
