"""Benchmark of the dashboard (tinyllm/dashboard/): how long a big history takes to render.

    python bench/bench_dashboard.py                    # 200 releases x 12 entries, best of 3
    python bench/bench_dashboard.py --weights          # + page weight of the plotting candidates
    python bench/bench_dashboard.py --screenshots docs # + docs/dashboard-{overview,trends}.png

A synthetic store is written through the store API (reports, one run each, a second run of one
entry every 10th release, compare.json rows in the schema, an error row now and then, a drift
with a regression every 25 releases). The time is ``build_site`` (reading the whole store,
every plot, every page) plus ``write_site`` into a local folder. The table goes into
docs/benchmarks.md between the dashboard markers.

``--weights`` needs the candidates that are not dependencies (``pip install altair
vl-convert-python plotly``); without them their rows say "not installed".
"""

from __future__ import annotations

import argparse
import io
import math
import os
import platform
import re
import shutil
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from docsection import write_section  # noqa: E402

from tinyllm import dashboard  # noqa: E402
from tinyllm.compare import SCHEMA_VERSION  # noqa: E402
from tinyllm.metrics import DIRECTION  # noqa: E402
from tinyllm.store import open_store  # noqa: E402

BEGIN = "<!-- dashboard: written by bench/bench_dashboard.py -->"
END = "<!-- /dashboard -->"
SHA = "ef" * 32
KINDS = [
    ("bigram", "bigram", "lm", "bpb"),
    ("kn3", "ngram", "lm", "bpb"),
    ("nplm", "nplm", "lm", "bpb"),
    ("rnnlm", "rnnlm", "lm", "bpb"),
    ("gpt", "gpt", "lm", "bpb"),
    ("seq2seq", "seq2seq", "seq2seq", "exact_match"),
    ("transformer", "transformer", "seq2seq", "exact_match"),
    ("bert", "bert", "mlm", "acc"),
    ("electra", "electra", "rtd", "acc"),
    ("clf-bow", "classifier", "classifier", "acc"),
    ("clf-gpt", "classifier", "classifier", "acc"),
    ("word2vec", "word2vec", "embeddings", "spearman"),
]


def _row(name, family, kind, metric, value, n, error=None):
    row = {
        "name": name,
        "family": family,
        "kind": kind,
        "metric": metric,
        "value": None,
        "lo": None,
        "hi": None,
        "interval": None,
        "n": None,
        "status": "ok",
        "error": None,
        "reason": None,
        "checkpoint_sha256": SHA,
        "data_sha256": SHA,
        "seconds": 1.0,
        "items": None,
        "checkpoint": name,
        "data": "data",
        "options": {},
        "details": None,
    }
    if error:
        row.update(status="error", error={"type": "RuntimeError", "message": error})
        return row
    half = (0.02 if metric == "bpb" else 0.04) * (1 + 0.2 * math.sin(value))
    interval = {"bpb": "student_t", "spearman": "fisher_z"}.get(metric, "wilson")
    row.update(value=value, lo=value - half, hi=value + half, interval=interval, n=n)
    return row


def _cmp_row(name, metric, prev, cur, regressed, error):
    base = {
        "name": name,
        "metric": metric,
        "direction": DIRECTION[metric],
        "previous_value": None if prev is None else prev["value"],
        "current_value": None if cur is None else cur["value"],
        "delta": None,
        "lo": None,
        "hi": None,
        "p": None,
        "n": None,
    }
    if metric == "spearman":
        return {**base, "verdict": "not comparable", "reason": "no per-item scores (items is null)"}
    if error or prev is None or prev["status"] != "ok":
        return {**base, "verdict": "not comparable", "reason": "a status is not ok (error)"}
    delta = cur["value"] - prev["value"]
    better = delta < 0 if DIRECTION[metric] == "lower" else delta > 0
    verdict = ("improved" if better else "regressed") if regressed else "unchanged"
    return {
        **base,
        "verdict": verdict,
        "reason": None,
        "delta": delta,
        "lo": delta - 0.01,
        "hi": delta + 0.01,
        "p": 1e-4 if regressed else 0.4,
        "n": cur["n"],
    }


def make_store(root: Path, n_releases: int, n_entries: int = 12, seed: int = 0):
    """A store of ``n_releases`` releases of ``n_entries`` entries, written through the API."""
    rng = np.random.default_rng(seed)
    st = open_store(root)
    entries = KINDS[:n_entries]
    base = {
        e[0]: (2.2 + 0.3 * i if e[3] == "bpb" else 0.3 + 0.02 * i) for i, e in enumerate(entries)
    }
    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    prev_rows: dict[str, dict] | None = None
    prev_name = prev_created = None
    for r in range(n_releases):
        name = f"v{r + 1:03d}"
        created = t0 + timedelta(hours=6 * r)
        rows, cmp_rows = [], []
        for i, (ename, family, kind, metric) in enumerate(entries):
            step = (-0.003 if metric == "bpb" else 0.001) * r
            jump = (r % 25 == 24) and i % 3 == 0  # a planted change every 25 releases
            value = base[ename] + step + rng.normal(0, 0.004) + (0.05 if jump else 0.0)
            error = "CUDA out of memory (synthetic)" if (r * 7 + i) % 53 == 0 else None
            row = _row(ename, family, kind, metric, float(value), 2000 + 10 * i, error)
            rows.append(row)
            if prev_rows is not None:
                prev = prev_rows.get(ename)
                cmp_rows.append(_cmp_row(ename, metric, prev, row, jump, error))
        created_s = created.strftime("%Y-%m-%dT%H:%M:%SZ")
        report = {
            "schema_version": 1,
            "suite": "zoo",
            "release": name,
            "created_at": created_s,
            "seed": 0,
            "tinyllm_version": "0.1.0",
            "manifest_sha256": SHA,
            "rows": rows,
        }
        st.write_run(name, f"{created:%Y%m%dT%H%M%SZ}-{r:06x}", report)
        if r % 10 == 9:  # a rerun of one entry
            rerun = {**report, "rows": [rows[0]]}
            st.write_run(name, f"{created + timedelta(hours=1):%Y%m%dT%H%M%SZ}-{r:06x}", rerun)
        st.write_report(name, report)
        if prev_name is not None:
            summary = {v: 0 for v in ("improved", "regressed", "unchanged")}
            summary.update({"not comparable": 0, "added": 0, "removed": 0})
            for c in cmp_rows:
                summary[c["verdict"]] += 1
            st.write_compare(
                name,
                {
                    "schema_version": SCHEMA_VERSION,
                    "previous": prev_name,
                    "current": name,
                    "previous_created_at": prev_created,
                    "current_created_at": created_s,
                    "test": "paired_sign_flip_permutation",
                    "interval": "student_t_paired",
                    "confidence": 0.95,
                    "alpha": 0.05,
                    "n_perm": 10000,
                    "seed": 0,
                    "rows": cmp_rows,
                    "summary": summary,
                },
            )
        prev_rows = {r_["name"]: r_ for r_ in rows}
        prev_name, prev_created = name, created_s
    return st


def time_render(st, out: Path, repeats: int) -> dict:
    best = None
    for _ in range(repeats):
        shutil.rmtree(out, ignore_errors=True)
        t0 = time.perf_counter()
        history = dashboard.load_history(st)
        t1 = time.perf_counter()
        files = dashboard.build_site(st, history=history)
        t2 = time.perf_counter()
        dashboard.write_site(files, out)
        t3 = time.perf_counter()
        run = {"read": t1 - t0, "render": t2 - t1, "write": t3 - t2, "total": t3 - t0}
        if best is None or run["total"] < best["total"]:
            best = run
    best["pages"] = len(files)
    best["bytes"] = sum(len(b) for b in files.values())
    best["trends"] = len(files["trends.html"])
    best["index"] = len(files["index.html"])
    best["entry"] = max(len(b) for p, b in files.items() if p.startswith("entry/"))
    return best


def _series(st):
    history = dashboard.load_history(st)
    return [dashboard.entry_series(e, history) for e in dashboard.entry_names(history)]


def weight_altair(series) -> int | str:
    try:
        import altair as alt
        import vl_convert  # noqa: F401 - altair's inline=True needs it
    except ImportError:
        return "not installed"
    charts = []
    for s in series:
        data = [
            {"release": r, "i": i, "value": v, "lo": lo, "hi": hi}
            for i, (r, v, lo, hi) in enumerate(zip(s.releases, s.value, s.lo, s.hi, strict=True))
            if v is not None
        ]
        base = alt.Chart(alt.Data(values=data)).encode(x=alt.X("i:Q", title="release"))
        band = base.mark_area(opacity=0.25).encode(y="lo:Q", y2="hi:Q")
        line = base.mark_line(point=True).encode(y=alt.Y("value:Q", scale=alt.Scale(zero=False)))
        charts.append((band + line).properties(title=s.entry, width=300, height=150))
    buf = io.StringIO()
    alt.concat(*charts, columns=3).save(buf, format="html", inline=True)
    return len(buf.getvalue().encode())


def weight_plotly(series) -> int | str:
    try:
        import plotly.graph_objects as go
    except ImportError:
        return "not installed"
    parts = []
    for k, s in enumerate(series):
        x = [r for r, v in zip(s.releases, s.value, strict=True) if v is not None]
        y = [v for v in s.value if v is not None]
        lo = [v for v in s.lo if v is not None]
        hi = [v for v in s.hi if v is not None]
        fig = go.Figure(
            [
                go.Scatter(x=x, y=hi, line={"width": 0}, showlegend=False),
                go.Scatter(x=x, y=lo, fill="tonexty", line={"width": 0}, showlegend=False),
                go.Scatter(x=x, y=y, mode="lines+markers", showlegend=False),
            ]
        )
        fig.update_layout(title=s.entry, width=400, height=230)
        parts.append(fig.to_html(full_html=False, include_plotlyjs=(k == 0)))
    return len(("<html><body>" + "".join(parts) + "</body></html>").encode())


def weights(tmp: Path) -> list[tuple[int, int, int | str, int | str]]:
    rows = []
    for n in (3, 200):
        st = make_store(tmp / f"w{n}", n)
        files = dashboard.build_site(st)
        series = _series(st)
        rows.append((n, len(files["trends.html"]), weight_altair(series), weight_plotly(series)))
    return rows


def screenshots(folder: Path, tmp: Path) -> list[Path]:
    from playwright.sync_api import sync_playwright

    cwd = os.getcwd()
    os.chdir(tmp)  # so that the pages name the store ./evalstore, as in `make demo`
    try:
        st = make_store(Path("./evalstore"), 30)
        st.uri = "./evalstore"
        site = tmp / "shots-site"
        dashboard.write_site(dashboard.build_site(st), site)
    finally:
        os.chdir(cwd)
    args = ["--no-sandbox", "--headless", "--disable-gpu", "--no-first-run"]
    out = []
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path="/usr/bin/chromium", args=args)
        page = b.new_page(viewport={"width": 1366, "height": 900})
        for name in ("overview", "trends"):
            page.goto((site / ("index.html" if name == "overview" else "trends.html")).as_uri())
            path = folder / f"dashboard-{name}.png"
            page.screenshot(path=str(path), full_page=name == "overview")
            out.append(path)
        b.close()
    return out


def _versions() -> str:
    from importlib.metadata import PackageNotFoundError, version

    out = []
    for name in ("altair", "vl-convert-python", "plotly"):
        try:
            out.append(f"{name} {version(name)}")
        except PackageNotFoundError:
            out.append(f"{name} not installed")
    return ", ".join(out)


def _kb(x: int | str) -> str:
    return f"{x / 1024:.0f} kB" if isinstance(x, int) else x


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--releases", type=int, default=200)
    ap.add_argument("--entries", type=int, default=12)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--weights", action="store_true", help="measure the plotting candidates")
    ap.add_argument("--screenshots", type=Path, help="write dashboard-*.png into this folder")
    ap.add_argument("--no-write", action="store_true", help="do not touch docs/benchmarks.md")
    a = ap.parse_args()
    load0 = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        t0 = time.perf_counter()
        st = make_store(tmp / "store", a.releases, a.entries)
        t_make = time.perf_counter() - t0
        res = time_render(st, tmp / "site", a.repeats)
        print(
            f"{a.releases} releases x {a.entries} entries: read {res['read']:.2f} s, render "
            f"{res['render']:.2f} s, write {res['write']:.2f} s, total {res['total']:.2f} s; "
            f"{res['pages']} pages, {res['bytes'] / 1e6:.1f} MB (store written in {t_make:.1f} s)"
        )
        w = weights(tmp) if a.weights else None
        if w:
            for n, mpl, alt_, ply in w:
                print(
                    f"trends page, {n} releases: matplotlib {_kb(mpl)}, altair {_kb(alt_)}, "
                    f"plotly {_kb(ply)}"
                )
        if a.screenshots:
            for p in screenshots(a.screenshots, tmp):
                print("wrote", p)
    load1 = os.getloadavg()[0]
    if a.no_write:
        return
    import matplotlib

    cmd = "python bench/bench_dashboard.py" + (" --weights" if a.weights else "")
    lines = [
        BEGIN,
        "",
        f"`{cmd}` (bench/bench_dashboard.py). {platform.machine()}, {os.cpu_count()} cores, "
        f"Python {platform.python_version()}, matplotlib {matplotlib.__version__}; load average "
        f"{load0:.1f} at the start and {load1:.1f} at the end (the cores were shared). A synthetic "
        f"local store written through the store API; best of {a.repeats} whole builds.",
        "",
        "| releases x entries | read the store s | plots + pages s | write s | total s | pages "
        "| site MB | trends.html kB | index.html kB | largest entry page kB |",
        "|---|---|---|---|---|---|---|---|---|---|",
        f"| {a.releases} x {a.entries} | {res['read']:.2f} | {res['render']:.2f} "
        f"| {res['write']:.2f} | {res['total']:.2f} | {res['pages']} | {res['bytes'] / 1e6:.1f} "
        f"| {res['trends'] / 1024:.0f} | {res['index'] / 1024:.0f} | {res['entry'] / 1024:.0f} |",
        "",
    ]
    if w:
        lines += [
            "Page weight of the trends page (12 entries) for each plotting candidate, everything "
            "inlined (nothing fetched when the page opens). The candidates that are not "
            f"dependencies were installed for this measurement only: {_versions()}.",
            "",
            "| releases | matplotlib SVG (chosen) | Vega-Lite via altair, JS inlined "
            "| plotly, plotly.js inlined |",
            "|---|---|---|---|",
        ]
        lines += [f"| {n} | {_kb(m)} | {_kb(al)} | {_kb(pl)} |" for n, m, al, pl in w]
        lines.append("")
    path = ROOT / "docs" / "benchmarks.md"
    text = path.read_text(encoding="utf-8")
    old = re.search(re.escape(BEGIN) + r".*?" + re.escape(END), text, flags=re.S)
    keep = "Page weight of the trends page"
    if not w and old and keep in old.group(0):  # keep the last --weights measurement
        lines.append(old.group(0)[old.group(0).index(keep) : -len(END)].rstrip("\n") + "\n")
    lines.append(END)
    section = "\n".join(lines)
    write_section(section, BEGIN, end=END, heading="## Dashboard", path=path)
    print("wrote", path)


if __name__ == "__main__":
    main()
