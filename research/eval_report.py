"""Issue 42's goals judged from measured numbers: alpha overall and per category with bootstrap
intervals (research.eval_set.alpha_by_category), the median greedy speed-up per gamma, and each
goal shown as met, not met, or not settled.

A goal on alpha is "met" when the whole 95% interval lies at or above it, "not met" when the
whole interval lies below it, and "not settled" when the interval straddles it: the point
estimate alone would call a category of 16 prompts either way on noise. The speed-up goal is on
the median over prompts of each prompt's paired speed-up (research.evaluate.speeds), so it is
met or not met by that median, at the gamma with the highest one.

    summary(rows)  -> {"alpha": alpha_by_category's table, "speedup": {...}, "goals": [...]}
    report(rows)   -> the same as a markdown table (what RESULTS.md and the model card quote)
    markdown(s)    -> that table from a summary already made (as research.eval_full --write keeps it)

rows: research.eval_full's JSON lines, or research.eval_set.measure's rows (no speed-ups).
"""
from __future__ import annotations

import json
import re
import statistics
from pathlib import Path

from research.bootstrap import BOOTSTRAP_DRAWS
from research.eval_set import alpha_by_category

GOAL_ALPHA_OVERALL = 0.55       # issue 42: alpha >= 0.55 on the realistic set at T = 0.7
GOAL_ALPHA_CATEGORY = 0.40      # ... and >= 0.40 in every category
GOAL_SPEEDUP = 1.3              # ... and a median speed-up >= 1.3x over plain decoding


def read_rows(path: Path | str) -> list[dict]:
    """The rows of a JSON-lines file (blank lines skipped)."""
    return [json.loads(line) for line in Path(path).read_text(encoding="utf-8").splitlines() if line.strip()]


def verdict(ci95: list, goal: float, prompts: int = 2) -> str:
    """"met" / "not met" / "not settled" for an interval [low, high] against a lower bound;
    "too few prompts" under 2 (one prompt's bootstrap interval is its own point)."""
    low, high = ci95
    if low is None:
        return "not measured"
    if prompts < 2:
        return "too few prompts"
    return "met" if low >= goal else "not met" if high < goal else "not settled"


def median_ci(values: list[float], level: float = 0.95, draws: int = BOOTSTRAP_DRAWS, seed: int = 0) -> list[float]:
    """A percentile bootstrap interval for the median of per-prompt values (speed-ups),
    resampling prompts with replacement: is "the median prompt is at least 1.3x faster" settled
    by these prompts, or would other prompts of the same kind move it across? -> [low, high]."""
    import numpy as np
    x = np.asarray(values, dtype=float)
    picks = np.random.default_rng(seed).integers(0, len(x), size=(draws, len(x)))   # [draws, n]
    low, high = np.percentile(np.median(x[picks], axis=1), [50 * (1 - level), 50 * (1 + level)])
    return [round(float(low), 4), round(float(high), 4)]


def speedups(rows: list[dict]) -> dict:
    """Per gamma: the median, lowest and highest per-prompt greedy speed-up, the prompts timed
    and whether every greedy output matched plain decoding's: {"gamma=g": {...}}."""
    out: dict[str, dict] = {}
    for key in sorted({k for r in rows for k in r.get("greedy", {})}, key=lambda k: int(k.split("=")[1])):
        runs = [r["greedy"][key] for r in rows if key in r.get("greedy", {})]
        ratios = [x["speedup"] for x in runs]
        out[key] = {"median": round(statistics.median(ratios), 3), "range": [min(ratios), max(ratios)],
                    "prompts": len(runs), "identical": all(x["identical"] for x in runs)}
    return out


def agreement(rows: list[dict]) -> dict:
    """Token-weighted greedy agreement (argmax q = argmax p over the reply positions) per
    category and overall, from rows that carry "greedy_agreement" and "positions"; {} if none do."""
    rows = [r for r in rows if r.get("greedy_agreement") is not None and r.get("positions")]
    out: dict[str, list[float]] = {}
    for r in rows:
        for name in (r["category"], "overall"):
            acc = out.setdefault(name, [0.0, 0])
            acc[0] += r["greedy_agreement"] * r["positions"]
            acc[1] += r["positions"]
    return {k: round(v[0] / v[1], 4) for k, v in sorted(out.items(), key=lambda kv: kv[0] == "overall")}


def summary(rows: list[dict], n_boot: int = BOOTSTRAP_DRAWS, seed: int = 0, speed_rows: list[dict] | None = None) -> dict:
    """The alpha table, the greedy agreement, the speed-ups (from speed_rows where given, else
    from rows) and the goals, each {"goal", "value", "verdict"}."""
    table = alpha_by_category(rows, n_boot=n_boot, seed=seed)
    speed = speedups(rows if speed_rows is None else speed_rows)
    goals = [{"goal": f"alpha >= {GOAL_ALPHA_OVERALL} overall", "value": table["overall"]["alpha"],
              "ci95": table["overall"]["ci95"], "verdict": verdict(table["overall"]["ci95"], GOAL_ALPHA_OVERALL, table["overall"]["prompts"])}]
    for name, row in table.items():
        if name != "overall":
            goals.append({"goal": f"alpha >= {GOAL_ALPHA_CATEGORY} in {name}", "category": name, "value": row["alpha"],
                          "ci95": row["ci95"], "verdict": verdict(row["ci95"], GOAL_ALPHA_CATEGORY, row["prompts"])})
    if speed:
        key = max(speed, key=lambda k: speed[k]["median"])
        goals.append({"goal": f"median speed-up >= {GOAL_SPEEDUP}x", "value": speed[key]["median"], "at": key,
                      "verdict": "met" if speed[key]["median"] >= GOAL_SPEEDUP else "not met"})
    return {"alpha": table, "greedy_agreement": agreement(rows), "speedup": speed, "goals": goals}


def _ci(ci95: list) -> str:
    return "–" if ci95[0] is None else f"{ci95[0]:.3f}–{ci95[1]:.3f}"


def report(rows: list[dict], speed_rows: list[dict] | None = None) -> str:
    """summary(rows, speed_rows=speed_rows) as markdown (markdown)."""
    return markdown(summary(rows, speed_rows=speed_rows))


def markdown(s: dict) -> str:
    """A summary() as markdown: alpha per category with its interval and verdict, then the
    speed-ups, then the overall goals."""
    verdicts = {g["goal"]: g["verdict"] for g in s["goals"]}
    agree = s.get("greedy_agreement") or {}
    lines = [f"| category | prompts | positions | α | 95% interval | α ≥ {GOAL_ALPHA_CATEGORY} | greedy agreement |",
             "|---|---|---|---|---|---|---|"]
    for name, row in s["alpha"].items():
        goal = (f"alpha >= {GOAL_ALPHA_OVERALL} overall" if name == "overall"
                else f"alpha >= {GOAL_ALPHA_CATEGORY} in {name}")
        label = f"**overall** (goal ≥ {GOAL_ALPHA_OVERALL})" if name == "overall" else name
        alpha = "–" if row["alpha"] is None else f"{row['alpha']:.3f}"
        agreed = f"{agree[name]:.3f}" if name in agree else "–"
        lines.append(f"| {label} | {row['prompts']} | {row['tokens']} | {alpha} | {_ci(row['ci95'])} | {verdicts[goal]} "
                     f"| {agreed} |")
    if s["speedup"]:
        lines += ["", "| greedy, γ | prompts | median speed-up | lowest–highest | output identical |", "|---|---|---|---|---|"]
        for key, v in s["speedup"].items():
            lines.append(f"| {key.split('=')[1]} | {v['prompts']} | {v['median']:.3f}× | "
                         f"{v['range'][0]:.3f}–{v['range'][1]:.3f}× | {'yes' if v['identical'] else 'NO'} |")
    below = [g["category"] for g in s["goals"] if "category" in g and g["verdict"] != "met"]
    overall = [f"{g['goal']}: {g['verdict']}" for g in s["goals"] if "category" not in g]
    overall.append(f"alpha >= {GOAL_ALPHA_CATEGORY} in every category: " +
                   ("met" if not below else "not met or not settled in " + ", ".join(below)))
    text = "; ".join(overall).replace("alpha >= ", "α ≥ ").replace("speed-up >= ", "speed-up ≥ ")
    lines += ["", "Goals: " + re.sub(r"(\d)x:", r"\1×:", text) + "."]
    return "\n".join(lines)
