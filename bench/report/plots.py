"""The figures: benchmarks.png and benchmarks-fairness.png (matplotlib, imported only to plot)."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_overview(scenarios: dict[str, Any], path: Path) -> None:
    plt = _pyplot()
    figure, (left, middle, right) = plt.subplots(1, 3, figsize=(16, 5))
    series: dict[str, list[tuple[int, float]]] = {}
    for name, label in (("hot_path", "{}"), ("batched", "{} (batched scenario)")):
        for row in scenarios.get(name, {}).get("series", []):
            series.setdefault(label.format(row["series"]), []).append((row["clients"], row["per_second"]))
    for name, points in sorted(series.items()):
        points.sort()
        style = "--" if "batched" in name else "-"
        left.plot([c for c, _ in points], [r for _, r in points], style, marker="o", label=name)
    left.set_yscale("log")
    left.set_xscale("log", base=2)
    left.set_xticks([1, 8], ["1", "8"])
    left.set_xlabel("concurrent clients")
    left.set_ylabel("tasks popped per second (log)")
    left.set_title("Pop throughput")
    if series:
        left.legend(fontsize=7)
    depth = scenarios.get("depth", {}).get("rows", [])
    if depth:
        sizes = [row["queued"] for row in depth]
        for key, label in (
            ("pop_p50_ms", "HTTP pop p50"),
            ("pop_p99_ms", "HTTP pop p99"),
            ("queues_p50_ms", "GET /queues p50"),
            ("queues_p99_ms", "GET /queues p99"),
            ("sql_pop_p50_ms", "SQL pop p50"),
            ("sql_pop_p99_ms", "SQL pop p99"),
        ):
            middle.plot(sizes, [row[key] for row in depth], marker="o", label=label)
        middle.set_xscale("log")
        middle.set_yscale("log")
        middle.set_xlabel("queued tasks (log)")
        middle.set_ylabel("latency ms (log), one client")
        middle.set_title("Latency against queue depth")
        middle.legend(fontsize=7)
    bars: list[tuple[str, float]] = []
    for row in scenarios.get("push", {}).get("series", []):
        bars.append((f"{row['series']}, {row['clients']} cl.", row["per_second"]))
    if "ingest" in scenarios:
        bars.append(("RabbitMQ ingest, 1 scheduler", scenarios["ingest"]["events_per_second"]))
        bars.append(("raw INSERT, 1 client", scenarios["ingest"]["raw_insert_1_client_per_second"]))
    for row in scenarios.get("sqlite", {}).get("series", []):
        bars.append((f"SQLite {row['series']}, {row['clients']} cl.", row["per_second"]))
    if bars:
        right.barh([label for label, _ in bars], [value for _, value in bars])
        right.set_xscale("log")
        right.set_xlabel("per second (log)")
        right.set_title("Push, ingest, SQLite pop")
        right.tick_params(axis="y", labelsize=7)
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)


def plot_fairness(result: dict[str, Any], path: Path) -> None:
    plt = _pyplot()
    runs = result["runs"]
    titles = {"off": "BATON_FAIRNESS=false", "on": "BATON_FAIRNESS=true", "no_noisy": "no noisy organisation"}
    figure, axes = plt.subplots(1, len(runs), figsize=(16, 4.8), sharey=True)
    organisations = sorted({point[0] for run in runs.values() for point in run["points"]})
    colours = {org: plt.cm.tab10(index % 10) for index, org in enumerate(organisations)}
    for axis, (key, run) in zip(axes, runs.items(), strict=True):
        for org in organisations:
            served = [(p[1], p[2]) for p in run["points"] if p[0] == org and p[3]]
            waiting = [(p[1], p[2]) for p in run["points"] if p[0] == org and not p[3]]
            if served:
                axis.scatter(*zip(*served, strict=True), s=6, color=colours[org], label=org)
            if waiting:
                axis.scatter(*zip(*waiting, strict=True), s=10, facecolors="none", edgecolors=colours[org])
        axis.set_yscale("log")
        axis.set_xlabel("push time, s from the start of its segment")
        axis.set_title(f"{titles[key]} ({run['pops_per_second']:,.0f} pops/s)")
    axes[0].set_ylabel("dwell s (push → hand-out; hollow: not handed out by the end)")
    axes[-1].legend(fontsize=7, markerscale=2, loc="upper left")
    figure.suptitle("Quiet organisations' dwell time while one organisation has a backlog")
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)
