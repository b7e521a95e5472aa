"""docs/MODELS.md from the Hugging Face sweep's state (models_sweep.py):
the CPU denominator (which recipe built each architecture, why the others
failed), then per mode on tpu: ran, matched, fallbacks, wall time, and every
failure's class. Only what the state holds is reported: a mode that ran on
a slice is reported for that slice, with the commits it ran at."""
import os

from .models_modes import BF16_TOL, FWD_TOL, GRAD_TOL, MODES


def _classify(reason):
    """A failure class: the exception type and the gist of its message."""
    if not reason:
        return "?"
    if reason.startswith("scaled: ") or reason.startswith("small: "):
        reason = reason.split(": ", 1)[1].split("; scaled: ")[0]
    head = reason.split(":", 1)
    kind = head[0]
    text = head[1].strip() if len(head) > 1 else ""
    for word in ("forward", "gradient", "outputs", "parameter", "eager tokens", "compiled tokens"):
        if kind.startswith(word):
            return "mismatch: " + word
    words = " ".join(text.split()[:6])
    return f"{kind}: {words}"


def _cell(text):
    return str(text).replace("|", "/").replace("\n", " ")


def _mode_table(ran_cpu):
    lines = ["| mode | architectures run | ran on tpu | matched the CPU | with CPU fallbacks | wall time (s) |",
             "|---|---|---|---|---|---|"]
    for mode in MODES:
        results = [e["results"][mode] for e in ran_cpu if mode in e["results"]]
        if not results:
            continue
        n = len(results)
        ran = sum(r["status"] in ("pass", "mismatch") for r in results)
        ok = sum(r["status"] == "pass" for r in results)
        fb = sum(bool(r.get("fallbacks")) for r in results)
        secs = sum(r.get("seconds", 0) or 0 for r in results)
        lines.append(f"| {mode} | {n} | {ran}/{n} ({100 * ran / n:.1f}%) | {ok}/{n} ({100 * ok / n:.1f}%) | {fb} | "
                     f"{secs:.0f} |")
    return lines


def report(state, out_path, command):
    entries = list(state.values())
    ran_cpu = [e for e in entries if e["results"].get("cpu", {}).get("status") == "pass"]
    recipes = {}
    for e in ran_cpu:
        name = e["results"]["cpu"].get("recipe", "?").rsplit("/", 1)[0]
        recipes[name] = recipes.get(name, 0) + 1
    commits = sorted({e.get("commit", "?") for e in entries})
    cpu_secs = sum(e["results"].get("cpu", {}).get("seconds", 0) or 0 for e in entries)
    lines = ["# Hugging Face architectures on tpu", "",
             "Written by `python -m torchtpu.coverage models` (torchtpu_tools/models_sweep.py). Each model type "
             "transformers registers gets one class (a head where there is one), built on the CPU from a small "
             "config (models_config.py: the first recipe of a ladder whose model runs; `small` sets fixed small "
             "sizes, `scaled/F/G` divides the config class's own default widths by F, head counts by G and "
             "per-head sizes by F/G, keeping their relations, with 2 layers of every kind) and inputs made from "
             "its forward signature (models_inputs.py). The CPU forward + backward is the reference; each "
             "architecture runs in its own process with a time limit. Modes on tpu (models_modes.py):", "",
             f"- **eager**, **compiled** (`torch.compile(backend=\"tpu\")`): forward outputs within rtol/atol "
             f"{FWD_TOL:g}, every parameter gradient of mean(out**2) within {GRAD_TOL:g} of its largest CPU element "
             "(plus 1e-6 of the model's largest, a noise floor); what differs more passes when the model run in "
             "float64 on the CPU shows tpu as close as the CPU (RMSE at most twice the CPU's).",
             f"- **bf16**: the forward under `torch.autocast(\"tpu\", torch.bfloat16)` against the CPU's forward "
             f"under `torch.autocast(\"cpu\", torch.bfloat16)`: each output within {BF16_TOL:g} of its largest "
             "element, or tpu's RMSE against the float32 CPU forward at most twice the CPU bf16 forward's.",
             "- **generate** (causal and seq2seq LMs): 8 greedy tokens with the KV cache, eager and with the "
             "forward compiled (static cache), token-identical to the CPU with the same cache.",
             "- **train**: one AdamW step (lr 1e-3) on the tpu gradients; parameters after it within 1e-5 + 1e-4 "
             "relative of the CPU's, except elements whose CPU gradient is under the noise floor.", "",
             f"Command: `{command}`; commits: {', '.join(commits)}.", "",
             f"Architectures in this state: {len(entries)}; built and ran forward + backward on the CPU: "
             f"**{len(ran_cpu)}** ({', '.join(f'{k}: {v}' for k, v in sorted(recipes.items()))}); CPU build and "
             f"run time, all architectures together: {cpu_secs:.0f} s (process time, not wall time).", ""]
    lines += _mode_table(ran_cpu)
    classes = {}
    for e in ran_cpu:
        for mode in MODES:
            r = e["results"].get(mode)
            if r and r["status"] != "pass":
                cls = r["status"] if r["status"] in ("timeout", "crash") else _classify(r.get("reason"))
                classes.setdefault(cls, []).append(f"{e['model_type']} ({mode})")
    if classes:
        lines += ["", "## Failure classes on tpu", "", "| class | count | architectures |", "|---|---|---|"]
        for cls, items in sorted(classes.items(), key=lambda kv: -len(kv[1])):
            lines.append(f"| {_cell(cls)} | {len(items)} | {', '.join(items)} |")
    other_ref = sorted(e["model_type"] for e in ran_cpu if e["results"].get("compiled", {}).get("reference"))
    if other_ref:
        lines += ["", "Compared with the CPU's own compiled run, which differs from its eager run (the model takes "
                  "another path under torch.compile): " + ", ".join(other_ref) + "."]
    tpu_rows = [e for e in ran_cpu if any(m in e["results"] for m in MODES)]
    if tpu_rows:
        lines += ["", "## Every architecture run on tpu", "",
                  "| model type | class | recipe | " + " | ".join(MODES) + " | reason |",
                  "|---|---|---|" + "---|" * len(MODES) + "---|"]
        for e in sorted(tpu_rows, key=lambda e: e["model_type"]):
            rs = e["results"]
            cells = []
            for mode in MODES:
                r = rs.get(mode)
                cells.append("-" if r is None else r["status"] + (f" (CPU fallbacks: {', '.join(r['fallbacks'])})"
                                                                  if r.get("fallbacks") else ""))
            reason = "; ".join(f"{m}: {rs[m].get('reason', '')}" for m in MODES if m in rs and rs[m]["status"] != "pass")
            lines.append(f"| {e['model_type']} | {e['class_name']} | {rs['cpu'].get('recipe', '')} | "
                         + " | ".join(cells) + f" | {_cell(reason)[:300]} |")
    cpu_only = sorted(e["model_type"] for e in ran_cpu if e not in tpu_rows)
    if cpu_only:
        lines += ["", f"## Built and ran on the CPU, not run on tpu in this state ({len(cpu_only)})", "",
                  ", ".join(cpu_only) + "."]
    skipped = [e for e in entries if e not in ran_cpu]
    if skipped:
        cpu_classes = {}
        for e in skipped:
            r = e["results"].get("cpu", {})
            cls = r.get("status") if r.get("status") in ("timeout", "crash") else _classify(r.get("reason"))
            cpu_classes.setdefault(cls, []).append(e["model_type"])
        lines += ["", f"## Not run: no recipe built and ran on the CPU ({len(skipped)})", "",
                  "| class | count | architectures |", "|---|---|---|"]
        for cls, items in sorted(cpu_classes.items(), key=lambda kv: -len(kv[1])):
            lines.append(f"| {_cell(cls)} | {len(items)} | {', '.join(items)} |")
        lines += ["", "| model type | class | reason |", "|---|---|---|"]
        for e in sorted(skipped, key=lambda e: e["model_type"]):
            r = e["results"].get("cpu", {})
            lines.append(f"| {e['model_type']} | {e['class_name']} | {r.get('status')}: "
                         f"{_cell(r.get('reason', ''))[:300]} |")
    os.makedirs(os.path.dirname(out_path) or ".", exist_ok=True)
    with open(out_path, "w") as f:
        f.write("\n".join(lines) + "\n")
