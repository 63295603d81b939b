"""The benchmark report: JSON (everything), Markdown (the table) and a PNG chart."""

from __future__ import annotations

import json
from pathlib import Path

from pipeline.bench.cpu_share import ROLES
from pipeline.bench.env_report import WATCHED_ENV
from pipeline.bench.options import ALL_CONTENDERS

# (name, key path, target, "ge"/"le", burst or None for every burst)
TARGETS = [
    ("pipeline / standalone-routed, median", ("ratios", "pipeline/standalone-routed", "median"), 1.00, "ge", None),
    (
        "pipeline / standalone-routed, worst pair",
        ("ratios", "pipeline/standalone-routed", "worst_pair"),
        0.97,
        "ge",
        None,
    ),
    ("pipeline / standalone-rr, median", ("ratios", "pipeline/standalone-rr", "median"), 1.5, "ge", "reuse"),
    ("pipeline / standalone-arrival, median", ("ratios", "pipeline/standalone-arrival", "median"), 2.4, "ge", "bigjob"),
    ("pipeline / standalone-sorted, median", ("ratios", "pipeline/standalone-sorted", "median"), 1.0, "ge", "bigjob"),
    ("pipeline prefill computed / token ideal", ("contenders", "pipeline", "prefill_over_ideal"), 1.05, "le", "reuse"),
    (
        "pipeline prefill computed / block ideal",
        ("contenders", "pipeline", "prefill_over_block_ideal"),
        1.05,
        "le",
        "reuse",
    ),
    ("pipeline max GC pause per worker, wall (ms)", ("contenders", "pipeline", "gc_max_ms"), 2.0, "le", None),
    ("pipeline max GC pause per worker, CPU (ms)", ("contenders", "pipeline", "gc_max_cpu_ms"), 2.0, "le", None),
]


def _get(d: dict, path: tuple):
    for k in path:
        if not isinstance(d, dict) or k not in d:
            return None
        d = d[k]
    return d


def target_rows(report: dict) -> list[dict]:
    rows = []
    for name, path, target, kind, only in TARGETS:
        for burst, s in report["summary"].items():
            if only and burst != only:
                continue
            value = _get(s, path)
            if value is None:
                continue
            ok = value >= target if kind == "ge" else value <= target
            miss = 0.0 if ok else (value / target - 1 if target else value)
            rows.append(
                {
                    "target": name,
                    "burst": burst,
                    "value": value,
                    "goal": f"{'≥' if kind == 'ge' else '≤'} {target:g}",
                    "met": ok,
                    "miss_by": miss,
                }
            )
    p = report.get("plumbing")
    if p:
        ok = p["questions_per_s"] >= 10_000
        rows.append(
            {
                "target": "fake-engine plumbing (questions/s)",
                "burst": "-",
                "value": p["questions_per_s"],
                "goal": "≥ 10000",
                "met": ok,
                "miss_by": 0.0 if ok else p["questions_per_s"] / 10_000 - 1,
            }
        )
    return rows


def render_markdown(report: dict, command: str) -> str:
    m = report["machine"]
    lines = [
        "# Benchmarks",
        "",
        f"Command: `{command}`  ",
        f"Machine: {m.get('cpu')} ({m.get('cores')} cores, {m.get('memory_gib')} GiB), {m.get('platform')}; "
        f"vllm {m.get('vllm')}, torch {m.get('torch')}, dask {m.get('dask')}.  ",
        f"Options: {report['options']}.  ",
        f"Engine start (s): pipeline workers {_fmt_map(report['engine_start_s']['pipeline'])}; "
        f"standalone processes {_fmt_map(report['engine_start_s']['standalone'])}. "
        f"Total run: {report['total_s']:.0f} s.",
        "",
        "Throughput is the median over pairs; each run starts from an empty prefix cache.",
        "",
        "| burst | contender | req/s | out tok/s | prompt tok/req | prefill / ideal (block ideal) | cached share | "
        "accuracy | engine page faults/req | GC max / p99 ms (max CPU ms) | finish spread s | rows per shard |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for burst, s in report["summary"].items():
        for c in ALL_CONTENDERS:
            v = s["contenders"].get(c)
            if v is None:
                continue
            lines.append(
                f"| {burst} | {c} | {v['requests_per_s']:.2f} | {v['output_tokens_per_s']:.1f} | "
                f"{v.get('prompt_tokens_per_request', 0):.0f} | "
                f"{v['prefill_over_ideal']:.3f} ({v['prefill_over_block_ideal']:.3f}) | {v['cached_share']:.3f} | "
                f"{v['accuracy']:.1%} | "
                f"{_num(v.get('engine_faults_per_request'))} | "
                f"{v['gc_max_ms']:.2f} / {v['gc_p99_ms']:.2f} ({v.get('gc_max_cpu_ms', 0.0):.2f}) | "
                f"{_spread(v['finish_spread_s'])} | "
                f"{_fmt_map(v['per_shard'])} |"
            )
    roles = ROLES
    if any(v.get("cores") for s in report["summary"].values() for v in s["contenders"].values()):
        lines += [
            "",
            "Where the CPU went during each burst (cores, median over pairs; `engine`: vLLM's engine-core "
            "and model-runner processes, `other`: Dask workers and nannies or the standalone driver "
            "processes, `driver`: the benchmark's own process with the client and embedded scheduler). "
            "Pipeline engine idle: how long, per burst, the engine of the shard that finished last had no "
            "request (the pipeline's own start and round-trip cost; the other shard's extra idle is the "
            "finish spread).",
            "",
            "| burst | contender | " + " | ".join(roles) + " | pipeline engine idle s (last shard) |",
            "|---|---|" + "---|" * (len(roles) + 1),
        ]
        for burst, s in report["summary"].items():
            for c in ALL_CONTENDERS:
                v = s["contenders"].get(c)
                if v is None or not v.get("cores"):
                    continue
                idle = v.get("engine_idle_s")
                lines.append(
                    f"| {burst} | {c} | "
                    + " | ".join(f"{v['cores'].get(r, 0.0):.3f}" for r in roles)
                    + f" | {'-' if idle is None else f'{idle:.2f}'} |"
                )
    lines += engine_env_lines(report)
    lines += engine_settings_lines(report)
    lines += ["", "| burst | ratio | median | worst pair |", "|---|---|---|---|"]
    for burst, s in report["summary"].items():
        for name, r in s["ratios"].items():
            lines.append(f"| {burst} | {name} | {r['median']:.3f} | {r['worst_pair']:.3f} |")
    lines += bigjob_lines(report)
    p = report.get("plumbing")
    if p:
        lines += [
            "",
            f"Fake-engine plumbing: {p['questions']} questions in {p['wall_s']:.2f} s = "
            f"**{p['questions_per_s']:,.0f} questions/s**.",
        ]
    lines += ["", "| target | burst | value | goal | met | missed by |", "|---|---|---|---|---|---|"]
    for t in target_rows(report):
        missed = "" if t["met"] else f"{t['miss_by']:+.1%}"
        lines.append(
            f"| {t['target']} | {t['burst']} | {t['value']:.4g} | {t['goal']} | "
            f"{'yes' if t['met'] else 'no'} | {missed} |"
        )
    return "\n".join(lines) + "\n"


def engine_settings_lines(report: dict) -> list[str]:
    """Each shard's engine settings that vLLM fills in by itself (pipeline/worker/vllm_engine.py,
    ``SETTINGS``), pipeline / plain vLLM side by side; a difference is marked."""
    both = report.get("engine_settings")
    if not both:
        return []
    lines = [
        "",
        "Engine settings as each engine runs them (pipeline / plain vLLM; **bold**: they differ):",
        "",
        "| shard | setting | pipeline | plain vLLM |",
        "|---|---|---|---|",
    ]
    for shard in sorted(set(both["pipeline"]) | set(both["standalone"])):
        ours, theirs = both["pipeline"].get(shard, {}), both["standalone"].get(shard, {})
        for name in sorted(set(ours) | set(theirs)):
            a, b = ours.get(name), theirs.get(name)
            mark = "**" if a != b else ""
            lines.append(f"| {shard} | {mark}{name}{mark} | {a} | {b} |")
    return lines


def bigjob_lines(report: dict) -> list[str]:
    """The bigjob burst side by side: the pipeline (a file job on the cluster path) over plain vLLM
    with the same placement, in arrival order and sorted by document, and each one's cached share."""
    s = report["summary"].get("bigjob")
    if not s:
        return []
    per, ratios = s["contenders"], s["ratios"]
    refs = [r for r in ("standalone-arrival", "standalone-sorted") if f"pipeline/{r}" in ratios]
    shown = [c for c in ALL_CONTENDERS if c in per]
    o = report.get("options", {})
    lines = [
        "",
        f"Big job (`bigjob`: {o.get('bigjob_docs')} documents × {o.get('bigjob_questions')} questions, "
        "shuffled; the pipeline runs it as a file job on the cluster path; medians over pairs):",
        "",
        "| " + " | ".join([f"pipeline / {r}" for r in refs] + [f"cached share {c}" for c in shown]) + " |",
        "|" + "---|" * (len(refs) + len(shown)),
    ]
    lines.append(
        "| "
        + " | ".join(
            [f"{ratios[f'pipeline/{r}']['median']:.3f}" for r in refs]
            + [f"{per[c]['cached_share']:.3f}" for c in shown]
        )
        + " |"
    )
    return lines


def engine_env_lines(report: dict) -> list[str]:
    """The two contenders' engine environments, read from /proc/<pid>/environ: differences
    (PIPELINE_* left out; none expected) and the variables that change how an engine runs."""
    envs = report.get("engine_env")
    if not envs:
        return []
    watched = WATCHED_ENV
    lines = [
        "",
        "Engine environments, read from `/proc/<pid>/environ` of each vLLM process (pipeline / "
        "plain vLLM; `PIPELINE_*` left out of the differences):",
        "",
        "| shard | process | differences | " + " | ".join(f"`{k}`" for k in watched) + " |",
        "|---|---|---|" + "---|" * len(watched),
    ]
    for shard, procs in envs.items():
        for name, p in procs.items():
            diffs = [f"only pipeline: {k}={v}" for k, v in p["only_pipeline"].items()]
            diffs += [f"only plain: {k}={v}" for k, v in p["only_standalone"].items()]
            diffs += [f"{k}: {a} / {b}" for k, (a, b) in p["differ"].items()]
            if p["pipeline_pid"] is None or p["standalone_pid"] is None:
                diffs.insert(0, "process missing on one side")
            cells = [_pair(*p["watched"][k]) for k in watched]
            lines.append(f"| {shard} | {name} | {'; '.join(diffs) or 'none'} | " + " | ".join(cells) + " |")
    return lines


def _spread(x) -> str:
    return "-" if x is None else f"{x:.2f}"


def _num(x) -> str:
    return "-" if x is None else f"{x:,.0f}"


def _pair(a, b) -> str:
    a, b = ("-" if v is None else (v if len(v) <= 24 else "…" + v[-20:]) for v in (a, b))
    return a if a == b else f"{a} / {b}"


def _fmt_map(d: dict) -> str:
    return ", ".join(f"{k}: {v:.1f}" if isinstance(v, float) else f"{k}: {v}" for k, v in sorted(d.items()))


def render_chart(report: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    bursts = list(report["summary"])
    fig, ax = plt.subplots(figsize=(8, 4.5))
    shown = [c for c in ALL_CONTENDERS if any(c in s["contenders"] for s in report["summary"].values())]
    width = 0.8 / max(1, len(shown))
    for i, c in enumerate(shown):
        vals = [report["summary"][b]["contenders"].get(c, {}).get("requests_per_s", 0.0) for b in bursts]
        xs = [x + (i - (len(shown) - 1) / 2) * width for x in range(len(bursts))]
        bars = ax.bar(xs, vals, width, label=c)
        ax.bar_label(bars, fmt="%.1f", fontsize=8)
    ax.set_xticks(range(len(bursts)), bursts)
    ax.set_ylabel("requests / s (median over pairs)")
    m = report["machine"]
    ax.set_title(f"Completion throughput, {m.get('cores')} cores, vllm {m.get('vllm')}")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write_report(report: dict, out_dir: Path, command: str) -> dict[str, Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = {"json": out_dir / "bench.json", "markdown": out_dir / "BENCHMARKS.md", "chart": out_dir / "bench.png"}
    paths["json"].write_text(json.dumps(report, indent=2, default=str))
    paths["markdown"].write_text(render_markdown(report, command) + "\n![throughput](bench.png)\n")
    render_chart(report, paths["chart"])
    return paths


BEGIN = "<!-- the last bench run: written by `python -m pipeline bench --write-docs` -->"
END = "<!-- end of the last bench run -->"


def write_docs_section(markdown: str, docs_file: Path) -> None:
    """The run's report (``render_markdown``) put into ``docs_file`` between ``BEGIN`` and ``END``,
    a level below the page's own title; the rest of the page is kept as it is (appended at its end
    the first time)."""
    body = markdown.replace("# Benchmarks\n", "## The last bench run\n", 1).strip()
    section = f"{BEGIN}\n{body}\n{END}"
    page = docs_file.read_text() if docs_file.exists() else "# Benchmarks\n"
    if BEGIN in page and END in page:
        head, _, rest = page.partition(BEGIN)
        _, _, tail = rest.partition(END)
        page = head + section + tail
    else:
        page = page.rstrip() + "\n\n" + section + "\n"
    docs_file.write_text(page)
