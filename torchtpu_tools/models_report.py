"""docs/MODELS.md from the Hugging Face sweep's state (models_sweep.py)."""
import os

from .models_modes import MODES


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


