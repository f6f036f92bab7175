"""Charts of a bench report (``forkagent bench --plot DIR``), drawn with matplotlib as SVG.

One economics chart per shared-prefix size (billed input-token equivalents
against the number of children, one line per strategy, the lower bound
dashed) and one chart of the overhead figures against their targets. Only
the object-oriented API is used (``Figure``, no ``pyplot``), so drawing sets
no global backend in the caller's process.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

LABELS = {
    "fresh": "fresh sub-agents",
    "forks_all_at_once": "forks, all at once",
    "forks_with_warmup": "forks, warm-up",
    "forks_with_prewarm": "forks, pre-warm",
    "auto": "forks, defaults (auto)",
    "forks_auto": "forks, auto",
    "lower_bound": "lower bound",
}


def write_charts(report: dict[str, Any], directory: Path) -> list[Path]:
    """Draw every chart of ``report`` (``bench.run.collect``) into ``directory``; their paths."""
    from matplotlib.figure import Figure

    directory.mkdir(parents=True, exist_ok=True)
    by_prefix: dict[int, dict[str, list[tuple[int, float]]]] = defaultdict(
        lambda: defaultdict(list)
    )
    for row in report["economics"]:
        by_prefix[row["prefix_tokens"]][row["strategy"]].append((row["children"], row["billed"]))
    written: list[Path] = []
    for prefix, strategies in sorted(by_prefix.items()):
        figure = Figure(figsize=(7, 4.5))
        axes = figure.add_subplot()
        for strategy, points in strategies.items():
            points.sort()
            bound = strategy == "lower_bound"
            axes.plot(
                [n for n, _ in points],
                [billed for _, billed in points],
                marker="" if bound else "o",
                linestyle="--" if bound else "-",
                color="black" if bound else None,
                linewidth=2 if bound else 1.5,
                label=LABELS.get(strategy, strategy),
            )
        sizes = sorted({n for points in strategies.values() for n, _ in points})
        axes.set_xscale("log", base=2)
        axes.set_xticks(sizes, [str(n) for n in sizes])
        axes.minorticks_off()
        axes.set_xlabel("children in the family")
        axes.set_ylabel("billed input-token equivalents")
        axes.set_title(f"{report['model']}: a {prefix:,}-token shared prefix")
        axes.grid(alpha=0.3)
        axes.legend()
        written.append(_save(figure, directory / f"economics_{prefix}.svg"))
    written.append(_overhead_chart(report, directory / "overhead.svg"))
    return written


def _overhead_chart(report: dict[str, Any], path: Path) -> Path:
    """Each targeted figure as a multiple of its target; green where the check passed."""
    from matplotlib.figure import Figure

    names = [name for name in report["targets"] if name in report["overhead"]]
    values = [report["overhead"][name] / report["targets"][name] for name in names]
    colours = ["tab:green" if report["checks"].get(name) else "tab:red" for name in names]
    figure = Figure(figsize=(7, 0.6 * len(names) + 1.5))
    axes = figure.add_subplot()
    axes.barh(names, values, color=colours)
    axes.axvline(1.0, color="black", linestyle="--", label="target")
    for position, (name, value) in enumerate(zip(names, values, strict=True)):
        axes.annotate(
            f"{report['overhead'][name]:,.3g}",
            (value, position),
            xytext=(4, 0),
            textcoords="offset points",
            va="center",
        )
    axes.set_xlabel("measured / target (green: the check passed)")
    axes.set_title("runtime overhead against its targets")
    axes.legend(loc="lower right")
    return _save(figure, path)


def _save(figure: Any, path: Path) -> Path:
    figure.tight_layout()
    figure.savefig(path, format="svg")
    return path
