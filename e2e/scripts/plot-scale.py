#!/usr/bin/env python3
"""plot-scale.py [--target=MIB] OUT.svg TITLE LABEL=RSS.csv [LABEL=RSS.csv ...]

Draws the agent's VmRSS over a benchmark run, one line per CSV (the `<label>-rss.csv` that
bench_agent writes: seconds, phase, pid, vm_rss_mib, rss_anon_mib, cpu_seconds), with the start
of each phase marked on the first run's line, and a dashed line at the memory target (--target,
default 64 MiB, the target at 10,000 works; 400 at 100,000; 0 draws none). Plain SVG, no libraries: the same tool on every
machine that runs the benchmark.
"""
import csv
import sys
from xml.sax.saxutils import escape

WIDTH, HEIGHT = 900, 420
LEFT, RIGHT, TOP, BOTTOM = 60, 20, 40, 50
COLOURS = ["#c0392b", "#2471a3", "#229954", "#7d3c98"]


def read(path):
    rows = []
    with open(path, newline="") as f:
        for r in csv.DictReader(f):
            try:
                rows.append((float(r["seconds"]), r["phase"], float(r["vm_rss_mib"])))
            except (KeyError, ValueError):
                continue
    return rows


def main():
    args, target = [], 64
    for arg in sys.argv[1:]:
        if arg.startswith("--target="):
            try:
                target = int(arg.partition("=")[2])
            except ValueError:
                sys.exit(f"plot-scale.py: --target takes a whole number of MiB, not {arg}")
        else:
            args.append(arg)
    if len(args) < 3:
        sys.exit(__doc__)
    out, title, runs = args[0], args[1], []
    for arg in args[2:]:
        label, _, path = arg.partition("=")
        rows = read(path)
        if rows:
            runs.append((label, rows))
    if not runs:
        sys.exit("plot-scale.py: no samples")
    x_max = max(r[-1][0] for _, r in runs) or 1.0
    y_max = max(max(v for _, _, v in r) for _, r in runs)
    y_max = max(y_max, target)
    grid = 20 if y_max <= 200 else 100
    y_max = (int(y_max / grid) + 1) * grid
    sx = lambda x: LEFT + (WIDTH - LEFT - RIGHT) * x / x_max
    sy = lambda y: HEIGHT - BOTTOM - (HEIGHT - TOP - BOTTOM) * y / y_max
    svg = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" '
        f'font-family="sans-serif" font-size="12">',
        f'<rect width="{WIDTH}" height="{HEIGHT}" fill="white"/>',
        f'<text x="{WIDTH / 2}" y="20" text-anchor="middle" font-size="14">{escape(title)}</text>',
    ]
    for y in range(0, y_max + 1, grid):
        svg.append(
            f'<line x1="{LEFT}" x2="{WIDTH - RIGHT}" y1="{sy(y):.1f}" y2="{sy(y):.1f}" stroke="#ddd"/>'
            f'<text x="{LEFT - 6}" y="{sy(y) + 4:.1f}" text-anchor="end">{y}</text>'
        )
    step = max(60, int(x_max / 10 / 60) * 60)
    for x in range(0, int(x_max) + 1, step):
        svg.append(f'<text x="{sx(x):.1f}" y="{HEIGHT - BOTTOM + 16}" text-anchor="middle">{x}</text>')
    svg.append(
        f'<text x="{WIDTH / 2}" y="{HEIGHT - 10}" text-anchor="middle">seconds into the run</text>'
        f'<text x="14" y="{HEIGHT / 2}" transform="rotate(-90 14 {HEIGHT / 2})" '
        f'text-anchor="middle">VmRSS (MiB)</text>'
    )
    if target > 0:
        svg.append(
            f'<line x1="{LEFT}" x2="{WIDTH - RIGHT}" y1="{sy(target):.1f}" y2="{sy(target):.1f}" '
            f'stroke="#888" stroke-dasharray="6 4"/>'
            f'<text x="{WIDTH - RIGHT - 4}" y="{sy(target) - 4:.1f}" text-anchor="end" '
            f'fill="#888">{target} MiB</text>'
        )
    first_phase = None
    for i, (label, rows) in enumerate(runs):
        colour = COLOURS[i % len(COLOURS)]
        points = " ".join(f"{sx(x):.1f},{sy(y):.1f}" for x, _, y in rows)
        svg.append(f'<polyline fill="none" stroke="{colour}" stroke-width="1.5" points="{points}"/>')
        svg.append(
            f'<text x="{LEFT + 10}" y="{TOP + 16 * (i + 1)}" fill="{colour}">{escape(label)}</text>'
        )
        if first_phase is None:
            first_phase = rows
    last = None
    for x, phase, _ in first_phase:
        if phase != last:
            svg.append(
                f'<line x1="{sx(x):.1f}" x2="{sx(x):.1f}" y1="{TOP}" y2="{HEIGHT - BOTTOM}" stroke="#bbb"/>'
                f'<text x="{sx(x) + 3:.1f}" y="{HEIGHT - BOTTOM - 6}" fill="#666" font-size="10" '
                f'transform="rotate(-90 {sx(x) + 3:.1f} {HEIGHT - BOTTOM - 6})">{escape(phase)}</text>'
            )
            last = phase
    svg.append("</svg>")
    with open(out, "w") as f:
        f.write("\n".join(svg) + "\n")


if __name__ == "__main__":
    main()
