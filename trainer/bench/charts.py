"""A benchmark's outputs: JSON (the figures), a Markdown report and PNG bar charts.

Every benchmark returns a result dict and describes its charts as `Chart`s; this module
alone knows about files and matplotlib.
"""
from __future__ import annotations

import datetime
import json
import os
import platform
from dataclasses import dataclass, field


@dataclass
class Chart:
    """One bar chart: a bar per label."""

    name: str  # file name without .png
    title: str
    ylabel: str
    labels: list[str]
    values: list[float]
    note: str = ""  # printed under the chart in the report
    highlight: list[str] = field(default_factory=list)  # labels drawn in the accent colour


def machine() -> dict:
    import tensorflow as tf

    return {"cpus": os.cpu_count(), "platform": platform.platform(), "python": platform.python_version(),
            "tensorflow": tf.__version__, "date": datetime.date.today().isoformat()}


def draw(chart: Chart, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")  # files only, no display
    import matplotlib.pyplot as plt

    # Wide enough for the bars' labels and for the title (about a tenth of an inch a character).
    width = max(5.0, 1.1 * len(chart.labels) + 2, 0.1 * len(chart.title))
    figure, axes = plt.subplots(figsize=(width, 3.6), dpi=110)
    colours = ["#d95f02" if label in chart.highlight else "#1b9e77" for label in chart.labels]
    bars = axes.bar(range(len(chart.values)), chart.values, color=colours)
    axes.set_xticks(range(len(chart.labels)), chart.labels, rotation=20 if len(chart.labels) > 4 else 0,
                    ha="right" if len(chart.labels) > 4 else "center", fontsize=8)
    axes.bar_label(bars, labels=[f"{v:,.0f}" if abs(v) >= 100 else f"{v:.3g}" for v in chart.values], fontsize=7)
    axes.set_title(chart.title, fontsize=10)
    axes.set_ylabel(chart.ylabel, fontsize=9)
    axes.margins(y=0.15)
    axes.spines[["top", "right"]].set_visible(False)
    figure.tight_layout()
    figure.savefig(path)
    plt.close(figure)


def write(out_dir: str, name: str, description: str, result: dict, table: str, charts: list[Chart]) -> list[str]:
    """Write <name>.json, <name>.md and one PNG per chart into `out_dir`; the paths."""
    os.makedirs(out_dir, exist_ok=True)
    result = {**result, "machine": result.get("machine") or machine()}
    paths = [os.path.join(out_dir, f"{name}.json"), os.path.join(out_dir, f"{name}.md")]
    with open(paths[0], "w") as f:
        json.dump(result, f, indent=2)
    lines = [f"# trainer bench {name}", "", description.strip(), "", table, ""]
    for chart in charts:
        png = os.path.join(out_dir, f"{chart.name}.png")
        draw(chart, png)
        paths.append(png)
        lines += [f"![{chart.title}]({chart.name}.png)", ""]
        if chart.note:
            lines += [chart.note, ""]
    info = result["machine"]
    lines.append(f"Measured on {info['date']}: {info['cpus']} CPUs, {info['platform']}, Python {info['python']}, "
                 f"TensorFlow {info['tensorflow']}.")
    with open(paths[1], "w") as f:
        f.write("\n".join(lines) + "\n")
    return paths
