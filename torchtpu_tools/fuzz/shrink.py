"""Shrinking a failing fuzz program: instructions removed, with everything
that depends on them, while it still fails the same way."""
import time

def _dependents(instrs, drop):
    """Indices to drop with |drop|: every instruction reading a tensor that a
    dropped one makes."""
    gone_ids = set()
    out = set(drop)
    for n, ins in enumerate(instrs):
        if n in out or any(i in gone_ids for i in ins.get("ins", [])):
            out.add(n)
            gone_ids.update(ins.get("outs", []))
    return out


def shrink(program, fails, budget_s=180.0, log=None):
    """Removes instructions while fails(candidate) still says True: chunks
    first, then single instructions."""
    t0 = time.monotonic()
    best = program
    chunk = max(1, len(best["instrs"]) // 2)
    while chunk >= 1 and time.monotonic() - t0 < budget_s:
        changed = False
        start = len(best["instrs"]) - chunk
        while start >= 0 and time.monotonic() - t0 < budget_s:
            instrs = best["instrs"]
            drop = _dependents(instrs, range(start, min(start + chunk, len(instrs))))
            cand = dict(best, instrs=[ins for n, ins in enumerate(instrs) if n not in drop])
            if cand["instrs"] and fails(cand):
                best = cand
                changed = True
                if log:
                    log(f"shrunk to {len(best['instrs'])} instructions")
            start -= chunk
        if not changed:
            chunk //= 2
    return best
