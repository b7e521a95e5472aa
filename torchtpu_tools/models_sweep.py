"""python -m torchtpu.coverage models: Hugging Face architectures on tpu vs CPU.

Every model type transformers registers (its AUTO mappings) gets one class:
a head where the type has one (causal LM, masked LM, seq2seq LM, image
classification, sequence classification, CTC, audio classification, in that
order of preference), else its base model. The class is built from its
config class's defaults shrunk to a small size (hidden size 32, 2 layers,
4 heads, vocabulary 99, the same names in every sub-config), in float32, in
eval mode (no dropout), with the inputs its main input name asks for;
weight matrices the model initializes to zero (MoE routers) get small random
values, so that routing does not hang on how topk orders equal scores. Each
architecture runs in its own process under a time limit:

  cpu       the forward on the CPU (the reference): an architecture that
            fails here (a config our shrinking breaks, a missing optional
            package) is out of the denominator, with its reason
  eager     the forward on tpu, every floating output compared with the CPU's
            (rtol/atol 1e-4), then one backward of mean(out**2) summed over
            those outputs: every parameter gradient within 1e-3 of the
            largest element of the CPU's gradient of that parameter (plus
            1e-6 of the model's largest gradient element, float32's noise
            floor for gradients that are zero in exact arithmetic); what
            differs more is arbitrated by the model run in float64 on the
            CPU (tpu's RMSE against it at most twice the CPU's passes)
  compiled  the same through torch.compile(backend="tpu")

A mode's status: pass, mismatch (ran, numbers differ), error (an exception
on tpu that the CPU did not raise), timeout or crash; fallbacks (ops run on
the CPU) are counted beside it. Results go to a state file as they come (the
sweep resumes) and docs/MODELS.md is written from it.

    python -m torchtpu.coverage models --limit 40            # a sample
    python -m torchtpu.coverage models --only bert,gpt2,vit  # named types
    python -m torchtpu.coverage models                       # all of them
"""
import argparse
import inspect
import json
import multiprocessing as mp
import os
import sys
import time
import traceback

MODES = ("eager", "compiled")
HEADS = ("MODEL_FOR_CAUSAL_LM_MAPPING_NAMES", "MODEL_FOR_MASKED_LM_MAPPING_NAMES",
         "MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES", "MODEL_FOR_IMAGE_CLASSIFICATION_MAPPING_NAMES",
         "MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING_NAMES", "MODEL_FOR_CTC_MAPPING_NAMES",
         "MODEL_FOR_AUDIO_CLASSIFICATION_MAPPING_NAMES", "MODEL_MAPPING_NAMES")
# Config attributes set where a config has them (every sub-config too).
SMALL = {"hidden_size": 32, "d_model": 32, "n_embd": 32, "embed_dim": 32, "dim": 32, "n_embed": 32,
         "num_hidden_layers": 2, "num_layers": 2, "n_layer": 2, "n_layers": 2, "encoder_layers": 2,
         "decoder_layers": 2, "num_decoder_layers": 2, "num_encoder_layers": 2,
         "num_attention_heads": 4, "n_head": 4, "n_heads": 4, "encoder_attention_heads": 4,
         "decoder_attention_heads": 4, "num_heads": 4, "num_key_value_heads": 2,
         "intermediate_size": 64, "ffn_dim": 64, "encoder_ffn_dim": 64, "decoder_ffn_dim": 64, "n_inner": 64,
         "d_ff": 64, "hidden_dim": 64, "vocab_size": 99, "max_position_embeddings": 64, "head_dim": 8,
         "num_experts": 4, "num_local_experts": 4, "n_routed_experts": 4, "moe_intermediate_size": 32,
         "num_experts_per_tok": 2, "n_group": 1, "topk_group": 1,
         "image_size": 32, "patch_size": 8, "num_labels": 3, "use_cache": False,
         # Sampling noise in an eval forward (VITS's durations and prior): the
         # comparison would test the random stream, and tpu's is not the CPU's.
         "noise_scale": 0.0, "noise_scale_duration": 0.0}
TOKEN_IDS = ("pad_token_id", "bos_token_id", "eos_token_id", "decoder_start_token_id", "sep_token_id",
             "cls_token_id", "mask_token_id", "unk_token_id")
BATCH, SEQ = 2, 12
FWD_TOL = 1e-4
GRAD_TOL = 1e-3
GRAD_FLOOR = 1e-6  # of the model's largest gradient element


def architectures():
    """[(model type, class name)] for every model type with a model class."""
    from transformers.models.auto import modeling_auto
    types = sorted(modeling_auto.MODEL_MAPPING_NAMES)
    out = []
    for t in types:
        for head in HEADS:
            name = getattr(modeling_auto, head, {}).get(t)
            if isinstance(name, (list, tuple)):
                name = name[0]
            if name:
                out.append((t, name))
                break
    return out


def _shrink(config, seen=None):
    seen = set() if seen is None else seen
    if id(config) in seen:
        return
    seen.add(id(config))
    for key, value in SMALL.items():
        if hasattr(config, key) and isinstance(getattr(config, key), (int, bool)) == isinstance(value, (int, bool)):
            try:
                setattr(config, key, value)
            except Exception:  # noqa: BLE001 - a read-only property: its default stands
                pass
    vocab = getattr(config, "vocab_size", None)
    if isinstance(vocab, int):  # special tokens inside the smaller vocabulary
        for key in TOKEN_IDS:
            value = getattr(config, key, None)
            if isinstance(value, int) and value >= vocab:
                try:
                    setattr(config, key, min(value, 2))
                except Exception:  # noqa: BLE001
                    pass
    for key in list(vars(config)):
        value = getattr(config, key, None)
        if hasattr(value, "to_dict") and hasattr(value, "model_type"):
            _shrink(value, seen)


def build(model_type, class_name):
    """(model, inputs) on the CPU, float32, eval mode, seeded."""
    import torch
    import transformers
    config = transformers.AutoConfig.for_model(model_type)
    _shrink(config)
    cls = getattr(transformers, class_name)
    torch.manual_seed(0)
    model = cls(config).eval().float()
    # Weights a model initializes to zero (MoE routers, some output
    # projections) get small random values: a zero router scores every
    # expert alike, and which of equal scores topk picks is unspecified
    # (the CPU's order differs from CUDA's too), so the comparison would
    # test tie-breaking, and zero weights hide the gradients behind them.
    gen = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for p in model.parameters():
            if p.is_floating_point() and p.dim() >= 2 and not p.any():
                p.copy_(torch.randn(p.shape, generator=gen) * 0.02)
    return model, make_inputs(model, config)


def make_inputs(model, config):
    import torch
    gen = torch.Generator().manual_seed(0)
    name = getattr(model, "main_input_name", "input_ids")
    text = getattr(config, "get_text_config", lambda **k: config)(decoder=True)
    vocab = getattr(text, "vocab_size", None) or 99
    inputs = {}
    if name == "input_ids":
        inputs["input_ids"] = torch.randint(3, min(vocab, 99), (BATCH, SEQ), generator=gen)
        inputs["attention_mask"] = torch.ones(BATCH, SEQ, dtype=torch.long)
    elif name == "pixel_values":
        vision = getattr(config, "vision_config", None) or config
        size = getattr(vision, "image_size", 32)
        size = size if isinstance(size, int) else size[0] if isinstance(size, (list, tuple)) else 32
        channels = getattr(vision, "num_channels", 3)
        inputs["pixel_values"] = torch.randn(BATCH, channels, size, size, generator=gen)
    elif name == "input_values":
        inputs["input_values"] = torch.randn(BATCH, 1600, generator=gen)
    elif name == "input_features":
        bins = getattr(config, "num_mel_bins", None) or getattr(config, "feature_size", 80)
        frames = 2 * getattr(config, "max_source_positions", 30) if hasattr(config, "max_source_positions") else 64
        inputs["input_features"] = torch.randn(BATCH, bins, frames, generator=gen)
    else:
        raise ValueError(f"no input maker for main input {name!r}")
    if "noise" in inspect.signature(model.forward).parameters and name == "pixel_values":
        # Random masking (ViT-MAE): a fixed noise, since tpu's random stream
        # is not the CPU's.
        patch = getattr(vision, "patch_size", 8)
        patch = patch if isinstance(patch, int) else patch[0]
        inputs["noise"] = torch.rand(BATCH, (size // patch) ** 2, generator=gen)
    if getattr(config, "is_encoder_decoder", False) and name == "input_ids":
        inputs["decoder_input_ids"] = torch.randint(3, min(vocab, 99), (BATCH, SEQ // 2), generator=gen)
    return inputs


def _floats(x, path="out"):
    """[(path, tensor)] of the floating tensors in a model output."""
    import torch
    if isinstance(x, torch.Tensor):
        return [(path, x)] if x.is_floating_point() else []
    if isinstance(x, dict) or hasattr(x, "to_tuple"):
        items = x.items() if isinstance(x, dict) else zip(x.keys(), x.to_tuple())
        return [p for k, v in items for p in _floats(v, f"{path}.{k}")]
    if isinstance(x, (list, tuple)):
        return [p for i, v in enumerate(x) for p in _floats(v, f"{path}[{i}]")]
    return []


def _forward_backward(run, model, inputs):
    outs = _floats(run(**inputs))
    if not outs:
        raise RuntimeError("the model returned no floating tensor")
    loss = sum(o.float().pow(2).mean() for _, o in outs)
    loss.backward()
    return ([(p, o.detach().cpu()) for p, o in outs],
            {n: q.grad.detach().cpu() for n, q in model.named_parameters() if q.grad is not None})


def _referee(g, w, r):
    """"" when the float64 value |r| shows tpu's |g| as close as the CPU's |w|
    (referee.as_close, the OpInfo sweep's rule), else why not."""
    import torch
    from .referee import as_close, rmse
    if r is None:
        return " (no float64 reference)"
    if not torch.equal(torch.isnan(g), torch.isnan(w)):
        return " (NaNs differ)"
    if as_close(g, w, r):
        return ""
    return f" (float64 reference: tpu RMSE {rmse(g, r):.3g}, CPU {rmse(w, r):.3g})"


def _compare(got, want, ref=None):
    """None, or what differs (the first output or gradient out of tolerance
    that the float64 run |ref|, when given, does not arbitrate in tpu's
    favour)."""
    import torch
    (outs, grads), (want_outs, want_grads) = got, want
    ref_outs, ref_grads = ref if ref is not None else ({}, {})
    ref_outs = dict(ref_outs)
    if [p for p, _ in outs] != [p for p, _ in want_outs]:
        return f"outputs {[p for p, _ in outs]} vs CPU {[p for p, _ in want_outs]}"
    for (path, g), (_, w) in zip(outs, want_outs):
        try:
            torch.testing.assert_close(g, w, rtol=FWD_TOL, atol=FWD_TOL)
        except AssertionError as e:
            why = _referee(g, w, ref_outs.get(path))
            if why:
                return f"forward {path}: " + " ".join(str(e).split())[:200] + why
    if grads.keys() != want_grads.keys():
        return f"gradients of {sorted(set(grads) ^ set(want_grads))[:3]} on one side only"
    # float32's noise floor: a gradient that is zero in exact arithmetic (an
    # attention key's bias) is rounding noise on the CPU too, of the order of
    # the largest gradient times a few ulps.
    floor = GRAD_FLOOR * max((w.abs().max().item() for w in want_grads.values() if w.numel()), default=0.0)
    for n, g in grads.items():
        w = want_grads[n]
        if g.shape != w.shape:
            return f"gradient {n}: shape {list(g.shape)} vs CPU's {list(w.shape)}"
        if not w.numel():  # an empty parameter (DINOv3's zero register tokens)
            continue
        scale = w.abs().max().item() + 1e-6
        err = (g - w).abs().max().item()
        if not err <= GRAD_TOL * scale + floor:  # NaN fails too
            why = _referee(g, w, ref_grads.get(n))
            if why:
                return f"gradient {n}: max error {err:.3g} vs largest element {scale:.3g}" + why
    return None


def _cpu_compiled_run(model, inputs):
    """The CPU forward and backward under torch.compile (Dynamo's eager
    backend: PyTorch's own ops on the graph Dynamo traces), or None."""
    import copy
    import torch
    try:
        torch._dynamo.reset()
        m = copy.deepcopy(model)
        m.zero_grad(set_to_none=True)
        return _forward_backward(torch.compile(m, backend="eager"), m, inputs)
    except Exception:  # noqa: BLE001 - only a second reference
        return None
    finally:
        torch._dynamo.reset()


def _float64_run(model, inputs):
    """The CPU forward and backward in float64 (the referee), or None."""
    import copy
    import torch
    inputs = {k: v.double() if v.is_floating_point() else v for k, v in inputs.items()}
    for experts in (None, "eager"):
        try:
            m = copy.deepcopy(model).double()
            if experts is not None:
                # The CPU's grouped_mm refuses float64: MoE experts one by
                # one (the same sums, grouped otherwise).
                m.set_experts_implementation(experts)
            m.zero_grad(set_to_none=True)
            return _forward_backward(m, m, inputs)
        except Exception:  # noqa: BLE001 - float64 is only a referee
            continue
    return None


def run_model(model_type, class_name, modes, send):
    """In the worker: the CPU reference, then each mode; sends a result per mode."""
    import copy
    import warnings
    import torch
    import torchtpu
    warnings.simplefilter("ignore")
    try:
        model, inputs = build(model_type, class_name)
        # Each mode starts from the model as built: a forward may leave
        # state behind (recurrent caches that are not graph leaves and
        # cannot be deep-copied, updated buffers).
        pristine = copy.deepcopy(model)
        want = _forward_backward(model, model, inputs)
    except Exception as e:  # noqa: BLE001
        send(("cpu", {"status": "cpu_error", "reason": f"{type(e).__name__}: {e}"[:300]}))
        return
    send(("cpu", {"status": "pass", "params": sum(p.numel() for p in model.parameters())}))
    model.zero_grad(set_to_none=True)
    ref = None
    for mode in modes:
        start = time.time()
        result = {}
        try:
            torch._dynamo.reset()
            on_tpu = copy.deepcopy(pristine).to("tpu")
            torchtpu.reset_stats()
            run = torch.compile(on_tpu, backend="tpu") if mode == "compiled" else on_tpu
            got = _forward_backward(run, on_tpu, {k: v.to("tpu") for k, v in inputs.items()})
            torchtpu.synchronize()
            reason = _compare(got, want)
            if reason is not None:  # float64 arbitrates
                if ref is None:
                    ref = _float64_run(pristine, inputs) or ({}, {})
                reason = _compare(got, want, ref)
            if reason is not None and mode == "compiled":
                # Some models take another path under torch.compile (code that
                # asks is_torchdynamo_compiling()): then the CPU's own compiled
                # run is the reference.
                alt = _cpu_compiled_run(pristine, inputs)
                if alt is not None and _compare(alt, want) is not None and _compare(got, alt) is None:
                    result["reference"] = "the CPU's compiled run (its eager run differs: " + reason[:120] + ")"
                    reason = None
            result.update(status="pass" if reason is None else "mismatch")
            if reason is not None:
                result["reason"] = reason
            fallbacks = dict(torchtpu.stats()["fallbacks"])  # op -> count
            if fallbacks:
                result["fallbacks"] = fallbacks
        except Exception as e:  # noqa: BLE001
            result = {"status": "error", "reason": f"{type(e).__name__}: {e}"[:300],
                      "trace": traceback.format_exc()[-600:]}
        result["seconds"] = round(time.time() - start, 1)
        send((mode, result))


def _worker(model_type, class_name, modes, conn):
    os.environ.setdefault("TORCHTPU_FALLBACK", "silent")
    run_model(model_type, class_name, modes, conn.send)
    conn.send(("end", None))


def _run_one(model_type, class_name, modes, timeout):
    """{mode: result} (with "cpu"), the model in a process of its own."""
    ctx = mp.get_context("spawn")
    parent, child = ctx.Pipe()
    proc = ctx.Process(target=_worker, args=(model_type, class_name, modes, child), daemon=True)
    proc.start()
    results, deadline = {}, time.time() + timeout
    try:
        while True:
            left = deadline - time.time()
            if left <= 0 or not parent.poll(left):
                reason = f"over {timeout:.0f} s"
                status = "timeout"
                break
            try:
                kind, value = parent.recv()
            except EOFError:
                reason, status = f"the process died (exit code {proc.exitcode})", "crash"
                break
            if kind == "end":
                return results
            results[kind] = value
            if kind == "cpu" and value["status"] != "pass":
                return results
        for mode in ("cpu",) + tuple(modes):
            if mode not in results:
                results[mode] = {"status": status, "reason": reason}
                break  # the modes after it did not run
        return results
    finally:
        if proc.is_alive():
            proc.kill()
        proc.join()


def _load_state(path):
    from .coverage import load_jsonl_state
    return load_jsonl_state(path, "model_type")


def _classify(reason):
    """A failure class: the exception type and the gist of its message."""
    if not reason:
        return "?"
    head = reason.split(":", 1)
    kind = head[0]
    text = head[1].strip() if len(head) > 1 else ""
    if kind.startswith("forward") or kind.startswith("gradient") or kind.startswith("outputs"):
        return "mismatch: " + ("forward" if kind.startswith("forward") else "gradient")
    words = " ".join(text.split()[:8])
    return f"{kind}: {words}"


def report(state, out_path, command):
    entries = [e for e in state.values()]
    ran_cpu = [e for e in entries if e["results"].get("cpu", {}).get("status") == "pass"]
    lines = ["# Hugging Face architectures on tpu", "",
             "Written by `python -m torchtpu.coverage models` (torchtpu_tools/models_sweep.py): each architecture "
             "transformers registers, one class per model type (a head where there is one), built from a small "
             "config, forward and one backward on tpu against the CPU, eager and compiled, each model in its own "
             "process with a time limit. Forward outputs within rtol/atol 1e-4, every parameter gradient within "
             "1e-3 of its largest CPU element (plus 1e-6 of the model's largest, a noise floor); what differs more passes when the model run in float64 on the CPU "
             "shows tpu as close as the CPU (RMSE at most twice the CPU's).", "",
             f"Command: `{command}`", "",
             f"Architectures in this run: {len(entries)}; built and ran on the CPU: {len(ran_cpu)} "
             f"(the denominator below; the others are listed at the end).", "",
             "| mode | ran on tpu | matched the CPU | with CPU fallbacks |", "|---|---|---|---|"]
    for mode in MODES:
        results = [e["results"].get(mode) for e in ran_cpu]
        results = [r for r in results if r is not None]
        if not results:
            continue
        n = len(results)
        ran = sum(r["status"] in ("pass", "mismatch") for r in results)
        ok = sum(r["status"] == "pass" for r in results)
        fb = sum(bool(r.get("fallbacks")) for r in results)
        lines.append(f"| {mode} | {ran}/{n} ({100 * ran / n:.1f}%) | {ok}/{n} ({100 * ok / n:.1f}%) | {fb} |")
    classes = {}
    for e in ran_cpu:
        for mode in MODES:
            r = e["results"].get(mode)
            if r and r["status"] != "pass":
                cls = r["status"] if r["status"] in ("timeout", "crash") else _classify(r.get("reason"))
                classes.setdefault(cls, []).append(f"{e['model_type']} ({mode})")
    if classes:
        lines += ["", "## Failure classes", "", "| class | count | architectures |", "|---|---|---|"]
        for cls, items in sorted(classes.items(), key=lambda kv: -len(kv[1])):
            lines.append(f"| {cls.replace('|', '/')} | {len(items)} | {', '.join(items)} |")
    other_ref = sorted(e["model_type"] for e in ran_cpu if e["results"].get("compiled", {}).get("reference"))
    if other_ref:
        lines += ["", "Compared with the CPU's own compiled run, which differs from its eager run (the model takes "
                  "another path under torch.compile): " + ", ".join(other_ref) + "."]
    lines += ["", "## Every architecture", "", "| model type | class | eager | compiled | reason |",
              "|---|---|---|---|---|"]
    for e in sorted(ran_cpu, key=lambda e: e["model_type"]):
        rs = e["results"]
        cells = []
        for mode in MODES:
            r = rs.get(mode)
            cells.append("-" if r is None else r["status"] + (f" (CPU fallbacks: {', '.join(r['fallbacks'])})"
                                                              if r.get("fallbacks") else ""))
        reason = "; ".join(f"{m}: {rs[m].get('reason', '')}" for m in MODES
                           if m in rs and rs[m]["status"] != "pass")
        lines.append(f"| {e['model_type']} | {e['class_name']} | {cells[0]} | {cells[1]} | "
                     f"{reason.replace('|', '/')[:300]} |")
    skipped = [e for e in entries if e not in ran_cpu]
    if skipped:
        lines += ["", "## Not run: failed on the CPU with the small config", "", "| model type | class | reason |",
                  "|---|---|---|"]
        for e in sorted(skipped, key=lambda e: e["model_type"]):
            r = e["results"].get("cpu", {})
            lines.append(f"| {e['model_type']} | {e['class_name']} | {r.get('status')}: "
                         f"{r.get('reason', '').replace('|', '/')[:200]} |")
    os.makedirs(os.path.dirname(out_path) or ".", exist_ok=True)
    with open(out_path, "w") as f:
        f.write("\n".join(lines) + "\n")


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m torchtpu.coverage models", description=__doc__.split("\n")[0])
    p.add_argument("--only", default="", help="comma-separated model types (default: all)")
    p.add_argument("--limit", type=int, default=0, help="the first N model types (after --only, --skip)")
    p.add_argument("--skip", type=int, default=0, help="skip the first N model types")
    p.add_argument("--every", type=int, default=1, help="every Nth model type (a spread-out sample)")
    p.add_argument("--modes", default=",".join(MODES))
    p.add_argument("--timeout", type=float, default=300.0, help="seconds allowed per architecture")
    p.add_argument("--state", default=".models-state.jsonl", help="results so far (the sweep resumes from it)")
    p.add_argument("--fresh", action="store_true", help="ignore earlier results")
    p.add_argument("--report-only", action="store_true", help="rewrite the report from the state")
    p.add_argument("--out", default=os.path.join("docs", "MODELS.md"))
    args = p.parse_args(argv)
    modes = tuple(m for m in args.modes.split(",") if m)
    state = {} if args.fresh else _load_state(args.state)
    if not args.report_only:
        archs = architectures()
        if args.only:
            wanted = set(args.only.split(","))
            archs = [a for a in archs if a[0] in wanted]
        archs = archs[args.skip::args.every]
        if args.limit:
            archs = archs[:args.limit]
        todo = [a for a in archs if a[0] not in state]
        with open(args.state, "a") as out:
            for i, (t, cls) in enumerate(todo):
                print(f"[{i + 1}/{len(todo)}] {t} ({cls})", file=sys.stderr, flush=True)
                results = _run_one(t, cls, modes, args.timeout)
                entry = {"model_type": t, "class_name": cls, "results": results}
                state[t] = entry
                out.write(json.dumps(entry) + "\n")
                out.flush()
                print("    " + ", ".join(f"{m}: {r['status']}" for m, r in results.items()), file=sys.stderr)
    command = "python -m torchtpu.coverage models " + " ".join(argv if argv is not None else sys.argv[2:])
    report(state, args.out, command.strip())
    print(f"report: {args.out}")
    return 0
