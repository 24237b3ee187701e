#!/usr/bin/env python3
"""Assembles the benchmark report: the tables that bench/run.sh, rest.sh, terminal.sh, image.sh,
ssh.sh, controller.sh and router.sh leave in their run directories, as one table (area, measure, ours, reference,
floor, ratio, target, result, how to reproduce), and each run's header below it.

    bench/report.py --out report.md AREA=RUNDIR [AREA=RUNDIR ...]

AREA names the benchmark: exec (run.sh), rest (rest.sh), terminal (terminal.sh), image
(image.sh), ssh (ssh.sh), controller (controller.sh), router (router.sh); RUNDIR is the directory holding its table.md. A table of a shape
this script does not know is kept as it is, under its area."""

import argparse
import re
import sys
from pathlib import Path

COMMANDS = {
    "exec": "bench/run.sh",
    "rest": "bench/rest.sh",
    "terminal": "bench/terminal.sh",
    "image": "bench/image.sh",
    "ssh": "bench/ssh.sh",
    "controller": "bench/controller.sh",
    "router": "bench/router.sh",
    "soak": "bench/soak.py",
}
COLUMNS = ["area", "measure", "ours", "reference", "floor", "ratio", "target", "result"]


def cells(line):
    return [c.strip() for c in line.strip().strip("|").split("|")]


def tables(text):
    """(heading, header cells, rows of cells) for each markdown table, with the nearest heading
    above it."""
    heading, out, cur = "", [], None
    for line in text.splitlines():
        if line.startswith("#"):
            heading = line.lstrip("#").strip()
        if line.startswith("|"):
            c = cells(line)
            if cur is None:
                cur = (heading, c, [])
                out.append(cur)
            elif not all(re.fullmatch(r":?-+:?", x) for x in c):
                cur[2].append(c)
        else:
            cur = None
    return out


def header_lines(text):
    """The lines above the first table or heading of a section: date, machine, commit, load."""
    out = []
    for line in text.splitlines()[:12]:
        if line.startswith("|"):
            break
        if line.strip():
            out.append(line.lstrip("# ").strip())
    return out


def trailer_lines(text, limit=8):
    """The lines under the last table: run time, load average at the end, notes."""
    lines = text.splitlines()
    last = max((i for i, ln in enumerate(lines) if ln.startswith("|")), default=len(lines))
    return [ln.strip() for ln in lines[last + 1:] if ln.strip()][:limit]


def rows_standard(area, head, rows):
    """run.sh, rest.sh and terminal.sh: measure | ours | reference | floor / pipe | ratio | target |
    result. A column more (router.sh's port-forward, between reference and floor) goes into
    the measure's text, as "(port-forward: figure)", when it holds a figure."""
    if len(head) == 7:
        return [{"area": area, "measure": r[0], "ours": r[1], "reference": r[2], "floor": r[3],
                 "ratio": r[4], "target": r[5], "result": r[6]} for r in rows if len(r) >= 7]
    extra = [i for i in range(3, len(head) - 4)]  # past reference, before floor
    out = []
    for r in rows:
        if len(r) < len(head):
            continue
        more = "; ".join(f"{head[i]}: {r[i]}" for i in extra if r[i] not in ("", "—"))
        out.append({"area": area, "measure": f"{r[0]} ({more})" if more else r[0], "ours": r[1],
                    "reference": r[2], "floor": r[-4], "ratio": r[-3], "target": r[-2],
                    "result": r[-1]})
    return out


def rows_ssh(area, head, rows):
    """ssh.sh: figure | ours (Execute) | ssh | local spawn | ours vs ssh."""
    return [{"area": area, "measure": f"{r[0]} (the reference column: ssh on a shared connection)",
             "ours": r[1], "reference": r[2], "floor": r[3], "ratio": r[4], "target": "—",
             "result": "info"} for r in rows if len(r) >= 5]


def _num(s):
    m = re.search(r"[\d.]+", s)
    return float(m.group()) if m else None


def _ratio(a, b):
    x, y = _num(a), _num(b)
    return f"{x / y:.2f}×" if x is not None and y else ""


def rows_image(area, heading, head, rows):
    """image.sh: sizes, idle RSS and the gVisor tax."""
    out = []
    if head[0] == "binary":
        by = {r[0]: r for r in rows}
        st, ref = by.get("sandboxd-static"), next((r for k, r in by.items() if k.startswith("reference")), None)
        for r in rows:
            out.append({"area": area, "measure": f"stripped size, {r[0]} (with what it needs at run time: {r[2]})",
                        "ours": r[1] if not r[0].startswith("reference") else "",
                        "reference": ref[1] if ref else "", "floor": "",
                        "ratio": _ratio(r[1], ref[1]) if ref and not r[0].startswith("reference") else "",
                        "target": "", "result": "info"})
        del st
    elif head[0] == "daemon":
        ref = next((r for r in rows if r[0] == "ref"), None)
        for r in rows:
            if r[0] == "ref":
                continue
            out.append({"area": area, "measure": f"idle VmRSS, {r[0]} build (anonymous {r[2]})",
                        "ours": r[1], "reference": ref[1] if ref else "", "floor": "",
                        "ratio": _ratio(r[1], ref[1]) if ref else "", "target": "", "result": "info"})
            out.append({"area": area, "measure": f"start to first answer, {r[0]} build",
                        "ours": r[4], "reference": ref[4] if ref else "", "floor": "",
                        "ratio": _ratio(r[4], ref[4]) if ref else "", "target": "", "result": "info"})
    elif head[0] == "measurement":
        for r in rows:
            out.append({"area": area, "measure": f"under gVisor (runsc): {r[0]}, p50 / p99 (floor: native)",
                        "ours": r[2], "reference": "", "floor": r[1], "ratio": r[5],
                        "target": "", "result": "info"})
    return out


def convert(area, text):
    """Rows for the one table, and the tables kept as they are."""
    rows, kept = [], []
    for heading, head, body in tables(text):
        h = [x.lower() for x in head]
        if h[:1] == ["measure"] and len(h) >= 7 and "ratio" in h:
            rows += rows_standard(area, head, body)
        elif area == "ssh" and h[:1] == ["figure"]:
            rows += rows_ssh(area, head, body)
        elif area == "image" and h[:1] in (["binary"], ["daemon"], ["measurement"]):
            rows += rows_image(area, heading, head, body)
        else:
            kept.append((heading, head, body))
    return rows, kept


def render_table(head, rows):
    out = ["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
    out += ["| " + " | ".join(r) + " |" for r in rows]
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--title", default="sandboxd benchmark report")
    ap.add_argument("--note", action="append", default=[], help="a line for the report's head")
    ap.add_argument("runs", nargs="+", metavar="AREA=RUNDIR")
    a = ap.parse_args()

    all_rows, sections = [], []
    for spec in a.runs:
        area, _, d = spec.partition("=")
        t = Path(d) / "table.md"
        if not t.is_file():
            sections.append((area, [f"(no table: {t} is missing; that benchmark did not finish)"], []))
            continue
        text = t.read_text()
        rows, kept = convert(area, text)
        all_rows += rows
        sections.append((area, header_lines(text) + trailer_lines(text), kept))
    if not all_rows:
        print("report: no table rows found", file=sys.stderr)
        return 1

    out = [f"# {a.title}", ""] + [f"{n}  " for n in a.note] + [""]
    out += render_table(COLUMNS + ["reproduce"],
                        [[r[c] for c in COLUMNS] + [f"`{COMMANDS.get(r['area'], r['area'])}`"]
                         for r in all_rows])
    fails = sum(1 for r in all_rows if r["result"] == "FAIL")
    passes = sum(1 for r in all_rows if r["result"] == "PASS")
    out += ["", f"{passes} targets met, {fails} missed, {len(all_rows) - passes - fails} figures "
            "without a target.", ""]
    for area, head, kept in sections:
        out += [f"## {area}: `{COMMANDS.get(area, area)}`", ""]
        out += [f"    {ln}" for ln in head] + [""]
        for heading, h, body in kept:
            out += [f"**{heading}**", ""] + render_table(h, body) + [""]
    Path(a.out).write_text("\n".join(out) + "\n")
    print("\n".join(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
