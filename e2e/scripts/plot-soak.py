#!/usr/bin/env python3
"""plot-soak.py SAMPLES.csv OUT.png [TITLE]

Plots a soak/chaos run's samples (the CSV the chaos driver writes): agent RSS and live works
over time, and the agent's size gauges (watches, index objects, discovery cache entries, work
states, trigger queue depth) when the samples have them. Needs matplotlib (`pip install
matplotlib`); the driver's own SVG needs nothing.
"""
import csv
import sys

try:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
except ImportError:
    sys.exit("plot-soak.py: matplotlib is not installed (pip install matplotlib); skipping the PNG")

GAUGES = [
    "work_agent_watches",
    "work_agent_index_objects",
    "work_agent_resolver_cache_entries",
    "work_agent_work_states",
    "work_agent_trigger_queue_depth",
]


def number(text):
    try:
        return float(text)
    except (TypeError, ValueError):
        return None


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    path, out = sys.argv[1], sys.argv[2]
    title = sys.argv[3] if len(sys.argv) > 3 else "agent soak"
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    if not rows:
        sys.exit(f"plot-soak.py: {path} has no samples")
    minutes = [number(r["seconds"]) / 60 for r in rows]
    rss = [number(r["rss_kib"]) / 1024 if number(r["rss_kib"]) else None for r in rows]
    live = [number(r["live_works"]) for r in rows]
    gauges = {g: [number(r.get(g)) for r in rows] for g in GAUGES}
    gauges = {g: v for g, v in gauges.items() if any(x is not None for x in v)}

    fig, (top, bottom) = plt.subplots(2, 1, figsize=(10, 7), sharex=True)
    top.plot(minutes, rss, color="tab:red", label="agent RSS (MiB)")
    top.set_ylabel("RSS (MiB)")
    top.set_ylim(bottom=0)
    works = top.twinx()
    works.plot(minutes, live, color="tab:blue", alpha=0.6, label="live works")
    works.set_ylabel("live works")
    works.set_ylim(bottom=0)
    top.set_title(title)
    lines = top.get_legend_handles_labels()[0] + works.get_legend_handles_labels()[0]
    labels = top.get_legend_handles_labels()[1] + works.get_legend_handles_labels()[1]
    top.legend(lines, labels, loc="upper left")
    for name, values in gauges.items():
        bottom.plot(minutes, values, label=name.removeprefix("work_agent_"))
    bottom.set_ylabel("size gauges")
    bottom.set_xlabel("minutes")
    bottom.set_yscale("symlog")
    if gauges:
        bottom.legend(loc="upper left", fontsize="small")
    fig.tight_layout()
    fig.savefig(out, dpi=90)
    print(f"plot-soak.py: wrote {out}")


if __name__ == "__main__":
    main()
