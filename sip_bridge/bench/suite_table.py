"""The ``bench all`` report as a plain-text table or as Markdown (the README's table)."""

from __future__ import annotations

from typing import Any

COLUMNS = ("Bench", "Measured", "p50 / p99 / p99.9", "Baseline", "Ratio", "Goal", "Met", "s")


def _met(value: bool | None) -> str:
    return {True: "met", False: "NOT met", None: "-"}[value]


def rows(report: dict[str, Any]) -> list[list[str]]:
    out = []
    for r in report["results"]:
        if r["status"] == "ok":
            row = r["row"]
            figures = row["figures"] + (f" ({row['note']})" if row.get("note") else "")
            baseline = f"{r['baseline']}: {row['baseline_figures']}"
            cells = [figures, baseline, row["ratio"], r["goal"], _met(row["goal_met"])]
        else:
            err = " ".join(str(r.get("error", "")).split())[-160:]
            cells = [f"{r['status'].upper()}: {err}", r["baseline"], "-", r["goal"], "-"]
        out.append([r["bench"], r["measured"], *cells, f"{r.get('seconds', 0):.0f}"])
    return out


def header_lines(report: dict[str, Any]) -> list[str]:
    m = report["machine"]
    providers = ", ".join(m.get("onnxruntime_providers") or []) or "none"
    before = " ".join(f"{x:.2f}" for x in m["load_avg_before"])
    after = " ".join(f"{x:.2f}" for x in m["load_avg_after"])
    return [
        f"callshield bench all ({report['mode']}), {report['started_utc']}, "
        f"{report['total_seconds']:.0f} s in all",
        f"machine: {m['cpu_model']}, {m['cpus']} CPUs ({m['cpus_usable']} usable), "
        f"Linux {m['kernel']}, Python {m['python']}, "
        f"onnxruntime {m.get('onnxruntime')} (providers available: {providers})",
        f"load average (1/5/15 min): before {before}, after {after}",
    ]


def text_table(report: dict[str, Any]) -> str:
    body = rows(report)
    widths = [min(48, max(len(c[i]) for c in [list(COLUMNS), *body])) for i in range(8)]
    lines = [*header_lines(report), ""]
    for cells in [list(COLUMNS), *body]:
        wrapped = [_wrap(c, w) for c, w in zip(cells, widths, strict=True)]
        for k in range(max(len(w) for w in wrapped)):
            parts = [(w[k] if k < len(w) else "").ljust(widths[i]) for i, w in enumerate(wrapped)]
            lines.append("  ".join(parts).rstrip())
        lines.append("")
    return "\n".join(lines)


def _wrap(text: str, width: int) -> list[str]:
    words, out, cur = text.split(), [], ""
    for word in words:
        if cur and len(cur) + 1 + len(word) > width:
            out.append(cur)
            cur = word
        else:
            cur = f"{cur} {word}" if cur else word
    out.append(cur)
    return out


def markdown(report: dict[str, Any]) -> str:
    def cell(text: str) -> str:
        return text.replace("|", "\\|")

    lines = [f"{line}  " for line in header_lines(report)]
    lines += ["", "| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    for cells in rows(report):
        lines.append("| " + " | ".join(cell(c) for c in cells) + " |")
    return "\n".join(lines)
