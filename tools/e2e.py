"""End-to-end proof: what oink changes in transformers' Llama-3-8B and Qwen3-8B (their widths, a
few layers, random weights: nothing downloaded), stock vs oink (`patch(model)`) vs Liger:
decode ms per step (torch.compile reduce-overhead, CUDA graphs, StaticCache) at batch 1/8/64;
greedy tokens, stock vs oink (identical in float32? first divergence in bf16); one training step
(forward, backward, AdamW) at sequence 4096: tokens/s and peak memory, eager and compiled.

    python tools/e2e.py --out DIR [--quick] [--device cuda|cpu] [--parts decode,tokens,train]

DIR/e2e.json: one record per cell, written after each; DIR/e2e.md: tables as oink-bench's
report.py. --append merges into DIR/e2e.json: a run split over commands (--parts, --models) gives
one report."""

from __future__ import annotations

import argparse
import contextlib
import gc
import importlib
import inspect
import json
import platform
import statistics
import sys
import time
from importlib import metadata
from pathlib import Path

import torch
from tabulate import tabulate

# name: (family, transformers classes, widths). Both 8B models are untied (own lm_head).
MODELS = {
    "llama3-8b": ("llama", "LlamaConfig", "LlamaForCausalLM", dict(
        hidden_size=4096, intermediate_size=14336, num_attention_heads=32, num_key_value_heads=8,
        vocab_size=128256, rms_norm_eps=1e-5)),
    "qwen3-8b": ("qwen3", "Qwen3Config", "Qwen3ForCausalLM", dict(
        hidden_size=4096, intermediate_size=12288, num_attention_heads=32, num_key_value_heads=8,
        head_dim=128, vocab_size=151936, rms_norm_eps=1e-6)),
}  # fmt: skip
TINY = dict(hidden_size=64, intermediate_size=128, num_attention_heads=4, num_key_value_heads=2,
            vocab_size=256)  # fmt: skip
PROVIDERS = ("stock", "oink", "liger")
KEY = ("kind", "model", "mode", "dtype", "batch", "seq", "provider")  # what --append replaces by


def parse(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True, type=Path)
    p.add_argument("--quick", action="store_true", help="tiny widths, 2 layers: seconds on a CPU")
    p.add_argument("--device", choices=("cuda", "cpu"))
    p.add_argument("--layers", type=int, help="decoder layers (default 4; --quick 2)")
    p.add_argument("--models", default=",".join(MODELS))
    p.add_argument("--parts", default="decode,tokens,train")
    p.add_argument("--providers", default=",".join(PROVIDERS))
    p.add_argument("--batches", default="1,8,64", help="decode batch sizes")
    p.add_argument("--seq", type=int, help="training sequence (default 4096; --quick 32)")
    p.add_argument("--train-batch", type=int, default=1)
    p.add_argument("--greedy-steps", type=int, default=32)
    p.add_argument("--eager", action="store_true", help="no torch.compile cells at all")
    p.add_argument("--append", action="store_true", help="merge into DIR/e2e.json")
    a = p.parse_args(argv)
    a.device = a.device or ("cuda" if torch.cuda.is_available() else "cpu")
    a.layers = a.layers or (2 if a.quick else 4)
    a.seq = a.seq or (32 if a.quick else 4096)
    a.steps, a.reps = (2, 2) if a.quick else (32, 5)  # decode steps per timed run, runs
    a.prompt = 4 if a.quick else 16
    # CUDA graphs need CUDA; inductor on a CPU takes minutes per cell: the CPU runs eager only.
    a.modes = ["eager"] if a.eager or a.device == "cpu" else ["compile"]
    a.train_modes = ["eager"] if a.eager or a.device == "cpu" else ["eager", "compile"]
    for name in ("models", "parts", "providers", "batches"):
        setattr(a, name, [x for x in getattr(a, name).split(",") if x])
    a.batches = [int(b) for b in a.batches]
    return a


def environment(a):
    import transformers

    import oink

    try:  # by the normalised name: Liger 0.8.5's metadata spells it liger_kernel
        liger = metadata.version("liger-kernel")
    except metadata.PackageNotFoundError:
        liger = None
    gpu = torch.cuda.get_device_name() if a.device == "cuda" else platform.processor() or "cpu"
    versions = {"torch": torch.__version__, "transformers": transformers.__version__,
                "oink": oink.__version__, "liger_kernel": liger,
                "cuda": torch.version.cuda, "python": platform.python_version()}  # fmt: skip
    widths = "tiny widths (hidden 64, --quick)" if a.quick else "the models' widths"
    return {"gpu": gpu, "device": a.device, "versions": versions, "widths": widths}


def liger_missing(a):
    """Why Liger cannot run here, or None."""
    if a.device != "cuda":
        return "Liger's kernels are Triton (CUDA only)"
    try:
        importlib.import_module("liger_kernel.transformers")
    except Exception as e:  # ImportError, or a Liger too old/new for this transformers
        return f"liger_kernel not importable ({type(e).__name__}: {e})"
    return None


def build(a, name, dtype):
    """The model from its config, random weights (same seed: the same weights every build),
    made directly on the device: an 8B-wide embedding is 0.5-0.6 G parameters."""
    import transformers

    family, config_cls, model_cls, widths = MODELS[name]
    widths = dict(TINY, **({"head_dim": 16} if family == "qwen3" else {})) if a.quick else widths
    config = getattr(transformers, config_cls)(
        **widths, num_hidden_layers=a.layers, tie_word_embeddings=False, attn_implementation="sdpa"
    )
    torch.manual_seed(0)
    with torch.device(a.device):
        model = getattr(transformers, model_cls)(config)
    return model.to(dtype)


@contextlib.contextmanager
def provider_model(a, name, provider, dtype, train=False):
    """The model as `provider` runs it. Liger also rebinds names in transformers' modeling module
    (the RMSNorm and MLP classes, apply_rotary_pos_emb, looked up at call time): they are put
    back on exit, so that the stock and oink cells after it run transformers' own code."""
    family = MODELS[name][0]
    modeling = importlib.import_module(f"transformers.models.{family}.modeling_{family}")
    saved = dict(vars(modeling))
    model = None
    try:
        model = build(a, name, dtype).train(train)
        if provider == "oink":
            from oink.integrations.transformers import patch

            patch(model)  # norms + ForCausalLMLoss
        elif provider == "liger":
            liger = importlib.import_module("liger_kernel.transformers")
            apply = getattr(liger, f"apply_liger_kernel_to_{family}")
            # Liger's own choice for training (fused linear cross-entropy); decode has no loss.
            apply(model=model, fused_linear_cross_entropy=train, cross_entropy=False)
        yield model
    finally:
        for k, v in saved.items():
            if vars(modeling).get(k) is not v:
                setattr(modeling, k, v)
        # Free the weights now, whoever still holds the module (the caller's `as` name, compiled
        # graphs): the next cell's peak memory must not count them.
        for t in [*model.parameters(), *model.buffers()] if model is not None else []:
            t.data = t.new_empty(0)
        torch._dynamo.reset()  # and the CUDA-graph pools
        gc.collect()
        if a.device == "cuda":
            torch.cuda.empty_cache()


def median_ms(a, fn, reps, warmup=1):
    """Median ms of fn() over reps runs after warmup: CUDA events on the GPU."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(reps):
        if a.device == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end))
        else:
            t = time.perf_counter()
            fn()
            times.append((time.perf_counter() - t) * 1e3)
    return statistics.median(times)


def next_token(model, cache):
    """ids -> the greedy next token of each sequence, through `cache`. The StaticCache holds its
    own position (a tensor), so one CUDA graph serves every step. transformers 5.25 names the
    argument `cache`, earlier 5.x (5.17 on the GPU machines) `past_key_values`."""
    params = inspect.signature(type(model).forward).parameters
    kw = "cache" if "cache" in params else "past_key_values"

    def forward(ids):
        return model(input_ids=ids, use_cache=True, **{kw: cache}).logits[:, -1:].argmax(-1)

    return forward


def decode_step(model, cache, compiled):
    forward = next_token(model, cache)
    if not compiled:
        return forward
    graph = torch.compile(forward, mode="reduce-overhead", dynamic=False)

    def step(tok):
        torch.compiler.cudagraph_mark_step_begin()
        return graph(tok).clone()  # the graph's output buffer is overwritten by the next replay

    return step


@torch.no_grad()
def decode_ms(a, model, batch, compiled):
    from transformers import StaticCache

    cache_len = a.prompt + (1 + a.reps) * a.steps
    cache = StaticCache(config=model.config, max_cache_len=cache_len)
    gen = torch.Generator().manual_seed(batch)
    prompt = torch.randint(model.config.vocab_size, (batch, a.prompt), generator=gen)
    state = {"tok": next_token(model, cache)(prompt.to(a.device))}
    step = decode_step(model, cache, compiled)

    def run():
        for _ in range(a.steps):
            state["tok"] = step(state["tok"])

    # The first run (warmup) compiles, records and replays the graph.
    return median_ms(a, run, a.reps) / a.steps, cache_len


@torch.no_grad()
def greedy(a, model, steps):
    from transformers import StaticCache

    cache = StaticCache(config=model.config, max_cache_len=a.prompt + steps)
    gen = torch.Generator().manual_seed(1)
    ids = torch.randint(model.config.vocab_size, (1, a.prompt), generator=gen).to(a.device)
    out, forward = [], next_token(model, cache)
    for _ in range(steps):
        ids = forward(ids)
        out.append(int(ids[0, 0]))
    return out


def train_step_ms(a, model, compiled):
    """(ms of one step, peak MiB): forward with labels (the model's loss), backward, AdamW."""
    opt = torch.optim.AdamW(model.parameters(), lr=1e-5)
    run = torch.compile(model) if compiled else model
    gen = torch.Generator().manual_seed(2)
    ids = torch.randint(model.config.vocab_size, (a.train_batch, a.seq), generator=gen)
    ids = ids.to(a.device)

    def step():
        run(input_ids=ids, labels=ids, use_cache=False).loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    step()  # compiles; creates AdamW's state (part of the peak below)
    if a.device == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    ms = median_ms(a, step, reps=2 if a.quick else 3)
    return ms, torch.cuda.max_memory_allocated() / 2**20 if a.device == "cuda" else None


def _error(e):
    return {"status": "error", "note": f"{type(e).__name__}: {e}"[:300]}


def tokens(a, name, dtype):
    """Greedy tokens of the stock and the oink-patched model (the same weights)."""
    toks = {}
    for p in ("stock", "oink"):
        with provider_model(a, name, p, dtype) as model:
            toks[p] = greedy(a, model, a.greedy_steps)
    diff = [i for i, (x, y) in enumerate(zip(toks["stock"], toks["oink"], strict=True)) if x != y]
    return {"identical": not diff, "first_diff": diff[0] if diff else None,
            "tokens_stock": toks["stock"], "tokens_oink": toks["oink"]}  # fmt: skip


def cells(a, env, missing):
    """Yield one record per measurement; a failing cell is recorded, never fatal."""
    for name in a.models:
        base = dict(model=name, layers=a.layers, gpu=env["gpu"], versions=env["versions"],
                    status="ok", note="")  # fmt: skip
        for dtype in (torch.float32, torch.bfloat16) if "tokens" in a.parts else ():
            rec = dict(base, kind="tokens", mode="eager", dtype=str(dtype)[6:], batch=1,
                       seq=a.greedy_steps, provider="oink")  # fmt: skip
            try:
                rec.update(tokens(a, name, dtype))
            except Exception as e:
                rec.update(_error(e))
            yield rec
        for part, modes in (("decode", a.modes), ("train", a.train_modes)):
            for mode, p in ((m, p) for m in modes for p in a.providers if part in a.parts):
                recs = [dict(base, kind=part, mode=mode, dtype="bfloat16", batch=b,
                             seq=1 if part == "decode" else a.seq, provider=p)
                        for b in (a.batches if part == "decode" else [a.train_batch])]  # fmt: skip
                if p == "liger" and missing:
                    yield from (dict(r, status="skipped", note=missing) for r in recs)
                    continue
                try:
                    with provider_model(a, name, p, torch.bfloat16, part == "train") as model:
                        for r in recs:
                            yield measure(a, model, part, mode, r)
                except Exception as e:  # the build itself failed (out of memory, Liger)
                    yield from (dict(r, **_error(e)) for r in recs)


def measure(a, model, part, mode, rec):
    try:
        if part == "decode":
            ms, cache_len = decode_ms(a, model, rec["batch"], mode == "compile")
            rec.update(ms_per_token=ms, note=f"StaticCache of {cache_len}")
        else:
            ms, peak = train_step_ms(a, model, mode == "compile")
            rec.update(tokens_per_s=a.train_batch * a.seq / ms * 1e3, ms=ms, peak_MiB=peak)
    except Exception as e:
        rec.update(_error(e))
    torch._dynamo.reset()
    return rec


def _by(records, kind):
    """Records of one kind by table row: {(model, layers, mode, batch, seq): {provider: r}}."""
    out = {}
    for r in (r for r in records if r["kind"] == kind):
        out.setdefault(tuple(r[k] for k in ("model", "layers", "mode", "batch", "seq")), {})
        out[tuple(r[k] for k in ("model", "layers", "mode", "batch", "seq"))][r["provider"]] = r
    return out


def _num(r, field, fmt):
    if r is None:
        return ""
    if r["status"] != "ok" or r.get(field) is None:
        return {"error": "error", "skipped": "n/a"}.get(r["status"], "")
    return format(r[field], fmt)


def _ratio(num, den, field):
    ok = num and den and num["status"] == den["status"] == "ok" and num[field] and den[field]
    return f"{num[field] / den[field]:.2f}" if ok else ""


def markdown(doc):
    env, records = doc["env"], doc["records"]
    v = env["versions"]
    lines = [
        "# oink end-to-end: transformers models",
        "",
        f"{env['gpu']} ({env['device']}); torch {v['torch']}, transformers {v['transformers']}, "
        f"oink {v['oink']}, liger-kernel {v['liger_kernel'] or 'not installed'}. Random weights "
        f"at {env['widths']}, a few decoder layers (column L). Command: `{env['command']}`.",
        "",
        "Ratios > 1: oink faster (time over oink's time) or smaller (MiB over oink's MiB). "
        "error: the cell failed (its note says why); n/a: not run here.",
        "",
    ]
    decode = _by(records, "decode")
    if decode:
        rows = [[m, layers, mode, b, *(_num(by.get(p), "ms_per_token", ".3f") for p in PROVIDERS),
                 _ratio(by.get("stock"), by.get("oink"), "ms_per_token"),
                 _ratio(by.get("liger"), by.get("oink"), "ms_per_token")]
                for (m, layers, mode, b, _), by in decode.items()]  # fmt: skip
        heads = ["model", "L", "mode", "batch", *(f"{p} ms" for p in PROVIDERS)]
        heads += ["stock/oink", "liger/oink"]
        lines += ["## Decode: ms per step (one token per sequence), bf16", "",
                  "StaticCache; compile: torch.compile(mode=\"reduce-overhead\"), CUDA graphs.", "",
                  tabulate(rows, heads, tablefmt="github"), ""]  # fmt: skip
    train = _by(records, "train")
    if train:
        rows = []
        for (m, layers, mode, b, s), by in train.items():
            tps = [_num(by.get(p), "tokens_per_s", ".0f") for p in PROVIDERS]
            mib = [_num(by.get(p), "peak_MiB", ".0f") for p in PROVIDERS]
            ratios = [_ratio(by.get(p), by.get("oink"), f) for f in ("ms", "peak_MiB")
                      for p in ("stock", "liger")]  # fmt: skip
            rows.append([m, layers, mode, f"{b}x{s}", *tps, *mib, *ratios])
        heads = ["model", "L", "mode", "batch x seq", *(f"{p} tok/s" for p in PROVIDERS),
                 *(f"{p} peak MiB" for p in PROVIDERS), "stock/oink time", "liger/oink time",
                 "stock/oink MiB", "liger/oink MiB"]  # fmt: skip
        lines += ["## Training: one step (forward, backward, AdamW), bf16 weights", "",
                  tabulate(rows, heads, tablefmt="github"), ""]  # fmt: skip
    tokens = [r for r in records if r["kind"] == "tokens"]
    if tokens:
        lines += ["## Greedy tokens, stock vs oink (batch 1, eager)", ""]
        for r in tokens:
            said = (f"error ({r['note']})" if r["status"] != "ok" else "identical: yes"
                    if r["identical"] else f"identical: no, first divergence at step "
                    f"{r['first_diff']}")  # fmt: skip
            lines.append(f"- {r['model']} ({r['layers']} layers), {r['dtype']}, {r['seq']} "
                         f"steps: {said}")  # fmt: skip
        lines.append("")
    notes = sorted({f"{r['kind']} {r['model']} {r['mode']} {r['provider']}: {r['note']}"
                    for r in records if r["status"] != "ok" and r["note"]})  # fmt: skip
    lines += ["## Notes", "", *(f"- {n}" for n in notes), ""] if notes else []
    return "\n".join(lines)


def write(out, env, old, records):
    """e2e.json (the records of an earlier run that these do not replace, then these) and
    e2e.md."""
    new = {tuple(r[k] for k in KEY) for r in records}
    records = [r for r in old if tuple(r[k] for k in KEY) not in new] + records
    doc = {"schema": "oink-e2e/1", "env": env, "records": records}
    # One record a line, as report.py writes results.json: two runs compare line by line.
    lines = ",\n".join(json.dumps(r) for r in records)
    path = out / "e2e.json"
    path.write_text(json.dumps(doc | {"records": []})[:-3] + "[\n" + lines + "\n]}\n")
    (out / "e2e.md").write_text(markdown(doc))


def main(argv=None):
    a = parse(argv)
    env = dict(environment(a), command=" ".join(["python tools/e2e.py", *(argv or sys.argv[1:])]))
    missing = liger_missing(a) if "liger" in a.providers else None
    a.out.mkdir(parents=True, exist_ok=True)
    path = a.out / "e2e.json"
    old = json.loads(path.read_text())["records"] if a.append and path.exists() else []
    records = []
    for rec in cells(a, env, missing):
        records.append(rec)
        value = rec.get("ms_per_token", rec.get("tokens_per_s", rec.get("first_diff", "")))
        print(f"[e2e] {rec['kind']:6} {rec['model']} {rec['mode']} {rec['dtype']} "
              f"b{rec['batch']} s{rec['seq']} {rec['provider']}: {rec['status']} {value} "
              f"{rec['note']}", flush=True)  # fmt: skip
        write(a.out, env, old, records)  # after each cell: a run cut short keeps what it measured
    print(f"[e2e] wrote {path} and {a.out / 'e2e.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
