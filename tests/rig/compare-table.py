#!/usr/bin/env python3
"""Table and JSON of tests/rig/compare.sh from the guests' result files.

The guests write one "ROUND LABEL KEY VALUE" line per figure (compare-results.txt);
this folds the rounds (lower for the listen storm: host noise only ever adds time;
median for cmtime, whose connects vary more), computes the ratios and the targets of
issue 10, and writes a text table and a JSON document.
"""
import argparse
import json
import statistics
import sys
from pathlib import Path

LABELS = ["none", "floor", "c", "ours"]
NAMES = {"none": "no daemon", "floor": "floor", "c": "C iwpmd", "ours": "ours"}


def read_results(folder):
    """{key: {label: {round: value}}} from FOLDER/compare-results.txt, keeping only the rounds
    that every label of that key completed (a boot cut short must not leave one daemon
    with more chances at a low figure than the others)."""
    out = {}
    path = Path(folder) / "compare-results.txt"
    if not path.exists():
        return out
    for line in path.read_text().splitlines():
        parts = line.split()
        if len(parts) != 4:
            continue
        rnd, label, key, value = parts
        try:
            out.setdefault(key, {}).setdefault(label, {})[int(rnd)] = float(value)
        except ValueError:
            continue
    for key, per in out.items():
        common = set.intersection(*(set(r) for r in per.values()))
        out[key] = {l: {r: v for r, v in rs.items() if r in common} for l, rs in per.items()}
    return out


def rounds(per, label):
    """the values of LABEL in round order"""
    return [v for _, v in sorted(per.get(label, {}).items())]


def paired(per, a, b):
    """median over rounds of A/B within the same round: daemons that ran next to each
    other saw about the same host load, so this ratio is steadier than one of folded
    figures when the load drifts"""
    rs = [per[a][r] / per[b][r] for r in per.get(a, {}) if r in per.get(b, {}) and per[b][r]]
    return round(statistics.median(rs), 2) if rs else None


def fold(values, how):
    if not values:
        return None
    return min(values) if how == "lower" else statistics.median(values)


def ratio(a, b):
    return round(a / b, 2) if a is not None and b not in (None, 0) else None


def fmt(v, digits=1):
    return "-" if v is None else f"{v:.{digits}f}"


def read_meta(path):
    meta = {"load": {}, "secs": {}}
    for line in Path(path).read_text().splitlines():
        k, _, rest = line.partition(" ")
        if k in ("load", "secs"):
            when, _, v = rest.partition(" ")
            meta[k][when] = v
        else:
            meta[k] = rest
    return meta


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--meta", required=True)
    ap.add_argument("--one", required=True)
    ap.add_argument("--two")
    ap.add_argument("--text", required=True)
    ap.add_argument("--json", required=True)
    ap.add_argument("--check", action="store_true")
    a = ap.parse_args()
    meta = read_meta(a.meta)
    storm = int(meta.get("storm", "10000"))
    one = read_results(a.one)
    two = read_results(a.two) if a.two else {}

    rows = []  # (title, how: lower|median, source, key)
    rows.append(("listen µs/op at 1000 live", "lower", one, "listen_1k"))
    if storm != 1000:
        rows.append((f"listen µs/op at {storm} live", "lower", one, "listen_top"))
    rows.append((f"listen µs/op, mean of all {storm}", "lower", one, "listen_us_per_op"))
    rows.append(("destroy µs/op (median of batches)", "lower", one, "destroy_med"))
    for source, where in ((one, "one VM"), (two, "two VMs")):
        rows.append((f"cmtime -c 50 {where}, connect ms", "median", source, "cm_total"))
        rows.append(("  worst single connect, ms", "median", source, "cm_max"))
    rows += [(f"daemon CPU ms, {what}", "median", source, key) for what, source, key in (
        ("storm (user)", one, "cpu_storm_user_ms"),
        ("storm (system)", one, "cpu_storm_sys_ms"),
        ("cmtime one VM (user)", one, "cpu_cm_user_ms"),
        ("cmtime one VM (system)", one, "cpu_cm_sys_ms"),
        ("two VMs client side", two, "cpu_client_ms"),
        ("two VMs server side", two, "cpu_server_ms"),
    )]

    figures = {}
    table = []
    for title, how, src, key in rows:
        per = src.get(key, {})
        if not per:
            continue
        vals = {l: fold(rounds(per, l), how) for l in LABELS}
        pf, pc = paired(per, "ours", "floor"), paired(per, "ours", "c")
        figures[key if src is one else "twovm_" + key] = {
            l: {"rounds": rounds(per, l), how: vals[l]} for l in LABELS if l in per
        }
        figures[key if src is one else "twovm_" + key]["paired_ours_floor"] = pf
        figures[key if src is one else "twovm_" + key]["paired_ours_c"] = pc
        table.append((title, how, vals, ratio(vals["ours"], vals["floor"]), ratio(vals["ours"], vals["c"]), pf, pc))

    def val(src, key, label, how):
        return fold(rounds(src.get(key, {}), label), how)

    # the daemon's share of a connect: total through it minus the total with no daemon
    share = {}
    none1 = val(one, "cm_total", "none", "median")
    for l in ("floor", "c", "ours"):
        v = val(one, "cm_total", l, "median")
        share[l] = None if v is None or none1 is None else round(v - none1, 2)
    figures["cm_daemon_share_ms"] = share

    targets = []

    def target(name, got, limit, text, pair=None):
        ok = got is not None and got <= limit
        targets.append({"target": name, "value": got, "paired": pair, "limit": limit, "met": ok, "what": text})

    lt = val(one, "listen_top", "ours", "lower")
    lf = val(one, "listen_top", "floor", "lower")
    target("listen_vs_floor", ratio(lt, lf), 1.10, f"listen at {storm} live <= 1.10 x floor",
           paired(one.get("listen_top", {}), "ours", "floor"))
    target("destroy_vs_floor", ratio(val(one, "destroy_med", "ours", "lower"), val(one, "destroy_med", "floor", "lower")),
           1.10, "destroy <= 1.10 x floor", paired(one.get("destroy_med", {}), "ours", "floor"))
    target("connect_share_vs_c", ratio(share.get("ours"), share.get("c")), 0.80,
           "daemon share of a one-VM connect (ours - none) <= 0.8 x C's")
    if two:
        target("twovm_vs_c", ratio(val(two, "cm_total", "ours", "median"), val(two, "cm_total", "c", "median")), 1.0,
               "two-VM cmtime <= C", paired(two.get("cm_total", {}), "ours", "c"))

    lines = []
    lines.append("iwpmd rig comparison: Linux 6.1 + siw under QEMU TCG, daemons untraced, a fresh boot per run (one VM), interleaved round by round")
    extra = f" (with {meta['ours-args']})" if meta.get("ours-args") else ""
    lines.append(f"ours: {meta.get('ours', '?')}{extra}")
    lines.append(f"kernel: {meta.get('kernel', '?')}; host {meta.get('host', '?')}; {meta.get('rounds', '?')} rounds; "
                 f"storm {storm} listeners; boots " + ", ".join(f"{k} {v} s" for k, v in meta["secs"].items()))
    lines.append("host load average (1/5/15 min): " + "; ".join(f"{k} {v}" for k, v in meta["load"].items()))
    lines.append("TCG timings move with host load: compare within this run (ratios); final figures from an idle host.")
    lines.append("listen/destroy: the lower of the rounds; cmtime and CPU: the median of the rounds; only rounds")
    lines.append("every daemon completed. paired = median over rounds of the ratio within one round.")
    lines.append("")
    w = 40
    head = (f"{'path':<{w}} {'none':>9} {'floor':>9} {'C':>9} {'ours':>9} {'ours/floor':>11} {'ours/C':>7}"
            f" {'paired o/f':>11} {'o/C':>5}")
    lines.append(head)
    lines.append("-" * len(head))
    for title, how, vals, rf, rc, pf, pc in table:
        lines.append(f"{title:<{w}} " + " ".join(f"{fmt(vals[l]):>9}" for l in LABELS)
                     + f" {fmt(rf, 2):>11} {fmt(rc, 2):>7} {fmt(pf, 2):>11} {fmt(pc, 2):>5}")
    lines.append(f"{'daemon share of one-VM connect (- none)':<{w}} {'':>9} "
                 + " ".join(f"{fmt(share.get(l), 1):>9}" for l in ("floor", "c", "ours"))
                 + f" {fmt(ratio(share.get('ours'), share.get('floor')), 2):>11} {fmt(ratio(share.get('ours'), share.get('c')), 2):>7}")
    lines.append("")
    lines.append("targets (issue 10):")
    for t in targets:
        pair = "" if t["paired"] is None else f", paired {fmt(t['paired'], 2)}"
        lines.append(f"  {'met ' if t['met'] else 'MISS'} {t['what']}: {fmt(t['value'], 2)}{pair} (limit {t['limit']})")
    lines.append("")
    lines.append("per round (round order):")
    for key, per in figures.items():
        if key == "cm_daemon_share_ms":
            continue
        for l, d in per.items():
            if not isinstance(d, dict):
                continue
            lines.append(f"  {key:<28} {NAMES[l]:<10} " + " ".join(fmt(v) for v in d["rounds"]))
    text = "\n".join(lines) + "\n"
    Path(a.text).write_text(text)
    doc = {"meta": meta, "figures": figures, "targets": targets,
           "ratios": {title: {"ours_floor": rf, "ours_c": rc, "paired_ours_floor": pf, "paired_ours_c": pc}
                      for title, _, _, rf, rc, pf, pc in table}}
    Path(a.json).write_text(json.dumps(doc, indent=2, ensure_ascii=False) + "\n")
    sys.stdout.write(text)
    if a.check and not all(t["met"] for t in targets):
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
