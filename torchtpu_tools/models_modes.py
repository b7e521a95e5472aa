"""The modes of the Hugging Face sweep (models_sweep.py): one architecture,
built on the CPU (models_build.py), run on tpu and compared with the CPU.

  eager     the forward on tpu, every floating output compared with the CPU's
            (rtol/atol 1e-4), then one backward of mean(out**2) summed over
            those outputs: every parameter gradient within 1e-3 of the
            largest element of the CPU's gradient of that parameter (plus
            1e-6 of the model's largest gradient element, float32's noise
            floor for gradients that are zero in exact arithmetic); what
            differs more is arbitrated by the model run in float64 on the
            CPU (tpu's RMSE against it at most twice the CPU's passes)
  compiled  the same through torch.compile(backend="tpu")
  bf16      the forward under torch.autocast("tpu", torch.bfloat16) against
            the CPU's forward under torch.autocast("cpu", torch.bfloat16):
            each floating output within BF16_TOL (relative to its largest
            CPU element), or, where not, tpu's RMSE against the float32 CPU
            forward at most twice the CPU bf16 forward's
  generate  causal and seq2seq LMs: 8 greedy tokens with the KV cache
            (generate(max_new_tokens=8, do_sample=False)), eagerly and with
            the forward compiled (static cache), token-identical to the CPU
            with the same cache
  train     one AdamW step (lr 1e-3) on the tpu gradients: every parameter
            after it within 1e-5 absolute + 1e-4 relative of the CPU's after
            the same step, except elements whose CPU gradient is under the
            noise floor above (Adam's first step is lr x the sign of the
            gradient, and the sign of rounding noise is noise)
"""
import copy
import time
import traceback

MODES = ("eager", "compiled", "bf16", "generate", "train")
FWD_TOL = 1e-4
GRAD_TOL = 1e-3
GRAD_FLOOR = 1e-6  # of the model's largest gradient element
BF16_TOL = 2e-2    # of the largest element of the output
NEW_TOKENS = 8
LR = 1e-3


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




def _fwd_bwd_mode(mode, pristine, inputs, want, state):
    import torch
    import torchtpu
    result = {}
    on_tpu = copy.deepcopy(pristine).to("tpu")
    run = torch.compile(on_tpu, backend="tpu") if mode == "compiled" else on_tpu
    got = _forward_backward(run, on_tpu, {k: v.to("tpu") for k, v in inputs.items()})
    torchtpu.synchronize()
    reason = _compare(got, want)
    if reason is not None:  # float64 arbitrates
        if state.get("ref") is None:
            state["ref"] = _float64_run(pristine, inputs) or ({}, {})
        reason = _compare(got, want, state["ref"])
    if reason is not None and mode == "compiled":
        # Some models take another path under torch.compile (code that
        # asks is_torchdynamo_compiling()): then the CPU's own compiled
        # run is the reference.
        alt = _cpu_compiled_run(pristine, inputs)
        if alt is not None and _compare(alt, want) is not None and _compare(got, alt) is None:
            result["reference"] = "the CPU's compiled run (its eager run differs: " + reason[:120] + ")"
            reason = None
    return reason, result


def _bf16_forward(model, inputs, device):
    import torch
    with torch.no_grad(), torch.autocast(device, torch.bfloat16):
        return [(p, o.detach().float().cpu()) for p, o in _floats(model(**inputs))]


def _bf16_mode(pristine, inputs, want, state):
    from .referee import rmse
    import torch
    cpu = _bf16_forward(copy.deepcopy(pristine), inputs, "cpu")
    got = _bf16_forward(copy.deepcopy(pristine).to("tpu"), {k: v.to("tpu") for k, v in inputs.items()}, "tpu")
    fp32 = dict(want[0])
    if [p for p, _ in got] != [p for p, _ in cpu]:
        return f"outputs {[p for p, _ in got]} vs CPU {[p for p, _ in cpu]}", {}
    for (path, g), (_, w) in zip(got, cpu):
        if g.shape != w.shape:
            return f"forward {path}: shape {list(g.shape)} vs CPU's {list(w.shape)}", {}
        if not w.numel():
            continue
        scale = w.abs().nan_to_num(0, 0, 0).max().item()
        err = (g - w).abs().max().item()
        if err <= BF16_TOL * scale + 1e-6:
            continue
        r = fp32.get(path)
        if r is not None and r.shape == g.shape and torch.equal(g.isnan(), w.isnan()) \
                and rmse(g, r) <= 2 * rmse(w, r) + 1e-6 * scale:
            continue
        return (f"forward {path}: max error {err:.3g} vs largest element {scale:.3g}"
                + (f" (float32 reference: tpu RMSE {rmse(g, r):.3g}, CPU {rmse(w, r):.3g})" if r is not None
                   and r.shape == g.shape else "")), {}
    return None, {}


def is_generator(class_name):
    from transformers.models.auto import modeling_auto as m
    heads = (m.MODEL_FOR_CAUSAL_LM_MAPPING_NAMES, m.MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES)
    return any(class_name in (v if isinstance(v, (list, tuple)) else [v]) for h in heads for v in h.values())


def _generate(model, inputs, **kw):
    import torch
    keep = {k: v for k, v in inputs.items() if k in ("input_ids", "attention_mask")}
    pad = model.config.get_text_config().pad_token_id or 0
    if model.config.is_encoder_decoder and getattr(model.config, "decoder_start_token_id", None) is None:
        kw["decoder_start_token_id"] = pad  # T5's convention: the decoder starts at the pad token
    with torch.no_grad():
        out = model.generate(**keep, max_new_tokens=NEW_TOKENS, min_new_tokens=NEW_TOKENS, do_sample=False,
                             use_cache=True, pad_token_id=pad, **kw)
    return out.cpu()


def _generate_mode(pristine, inputs, want, state):
    import torch
    if "input_ids" not in inputs:
        return "no input_ids to generate from", {}
    cpu = _generate(copy.deepcopy(pristine), inputs)
    if cpu.shape[-1] < NEW_TOKENS:
        return f"the CPU made {cpu.shape[-1]} tokens", {}
    dev = {k: v.to("tpu") for k, v in inputs.items()}
    eager = _generate(copy.deepcopy(pristine).to("tpu"), dev)
    if not torch.equal(eager, cpu):
        return f"eager tokens {eager[0].tolist()} vs CPU's {cpu[0].tolist()}", {}
    torch._dynamo.reset()
    m = copy.deepcopy(pristine).to("tpu")
    m.forward = torch.compile(m.forward, backend="tpu")
    compiled = _generate(m, dev, cache_implementation="static")
    # Against the CPU with the same (static) cache: some models' tokens
    # depend on the cache kind on the CPU too (RoBERTa's position ids).
    cpu = _generate(copy.deepcopy(pristine), inputs, cache_implementation="static")
    if not torch.equal(compiled, cpu):
        return f"compiled tokens {compiled[0].tolist()} vs CPU's {cpu[0].tolist()}", {}
    return None, {"tokens": cpu.shape[-1]}


def _adamw_step(model, inputs):
    import torch
    model.zero_grad(set_to_none=True)
    _forward_backward(model, model, inputs)
    grads = {n: p.grad.detach().cpu() for n, p in model.named_parameters() if p.grad is not None}
    torch.optim.AdamW(model.parameters(), lr=LR).step()
    return {n: p.detach().cpu() for n, p in model.named_parameters()}, grads


def _compare_params(got, cpu, grads):
    """None, or the first parameter after the AdamW step out of tolerance."""
    floor = GRAD_FLOOR * max((g.abs().max().item() for g in grads.values() if g.numel()), default=0.0)
    for n, w in cpu.items():
        g = got[n]
        if g.shape != w.shape:
            return f"parameter {n}: shape {list(g.shape)} vs CPU's {list(w.shape)}"
        err = (g - w).abs() - (1e-5 + 1e-4 * w.abs())
        if n in grads:
            err = err[grads[n].abs() > floor]
        if err.numel() and not err.max().item() <= 0:  # NaN fails too
            return f"parameter {n} after AdamW: max excess {err.max().item():.3g}"
    return None


def _train_mode(pristine, inputs, want, state):
    cpu, grads = _adamw_step(copy.deepcopy(pristine), inputs)
    got, _ = _adamw_step(copy.deepcopy(pristine).to("tpu"), {k: v.to("tpu") for k, v in inputs.items()})
    return _compare_params(got, cpu, grads), {}


def run_modes(pristine, inputs, want, modes, class_name, send):
    """In the worker: each mode on tpu against the CPU's |want|; sends a
    result per mode."""
    import torch
    import torchtpu
    state = {}
    for mode in modes:
        start = time.time()
        result = {}
        if mode == "generate" and not is_generator(class_name):
            continue
        try:
            torch._dynamo.reset()
            torchtpu.reset_stats()
            if mode in ("eager", "compiled"):
                reason, result = _fwd_bwd_mode(mode, pristine, inputs, want, state)
            else:
                reason, result = {"bf16": _bf16_mode, "generate": _generate_mode,
                                  "train": _train_mode}[mode](pristine, inputs, want, state)
            result["status"] = "pass" if reason is None else "mismatch"
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
