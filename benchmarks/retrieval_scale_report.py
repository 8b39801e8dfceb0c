"""Extrapolation and Markdown report for ``benchmarks/retrieval_scale.py`` (kept apart to keep both files short)."""

from __future__ import annotations


def extrapolate(runs: list[dict], n: int = 21_000_000) -> dict:
    """RAM and disk at ``n`` passages from the largest run (the latest index type and serving code).

    Serving RSS: that run's RSS plus, for each further passage, what grows with N in RAM: its compressed codes and
    ids (``index.faiss`` bytes per passage; fast-scan lists are held in RAM, memory-mapped lists at most) and its
    8-byte passage offset. The fp16 vectors and passage text are read from disk per query and not counted.
    Runs of smaller N may be of another index type or serving code, so no line is fitted through them.
    """
    last = max(runs, key=lambda r: r["passages"])
    grow_mb = (last["disk_mb"]["index.faiss"] / last["passages"] + 8 / 2**20) * (n - last["passages"])
    out = {
        key.replace("_mb", "_gb"): round((last[key] + grow_mb) / 1024, 2)
        for key in ("serve_rss_mb", "serve_peak_rss_mb")
    }
    out["from_run_passages"] = last["passages"]
    per = {k: v / last["passages"] for k, v in last["disk_mb"].items()}
    out["disk_gb"] = {k: round(v * n / 1024, 1) for k, v in per.items()} | {
        "total": round(sum(per.values()) * n / 1024, 1)
    }
    # The compressed index alone (what must stay in RAM for fast search): codes + ids in the inverted lists.
    out["index_faiss_gb"] = out["disk_gb"].get("index.faiss")
    # Upper bound for a steady state where all of index.faiss and the passage offsets are resident: the last run's
    # anonymous memory (interpreter, encoder, buffers; independent of N) plus those two files at 21M.
    anon_gb = last["serve_rss_detail_mb"]["RssAnon"] / 1024
    offsets_gb = 8 * n / 2**30
    out["all_of_index_resident_gb"] = round(anon_gb + out["index_faiss_gb"] + offsets_gb, 2)
    return out


def _refined(run: dict) -> str:
    """`` (x10 scanned)`` where the index has a refining stage: the scan returned candidates x refine_factor."""
    return f" (x{run['refine_factor']} scanned)" if run.get("refine_factor") else ""


def report(result: dict) -> str:
    """The results as Markdown: what was measured, per run, then the 21M extrapolation."""
    m = result["machine"]
    lines = [
        f"# Compressed dense retrieval at scale ({result['date']})",
        "",
        f"Machine: {m['cpus']} CPU cores shared with other jobs (load average at the end "
        f"{', '.join(f'{x:.1f}' for x in m['load_average_at_end'])}), fp32 matmul {m['fp32_matmul_gflops']} GFLOP/s "
        f"(numpy, 2048^2, measured at the end), Python {m['python']}, {m['platform']}.",
        "",
        f"Vectors: {result['vectors']} (see the module docstring of `benchmarks/retrieval_scale.py`). Recall is "
        "against exact inner-product search over the same fp16 vectors.",
        "",
        "Build: `build_index(kind='dense', faiss=FACTORY)` streaming the vector file; k-means and PQ trained on a "
        "sample (64 rows per inverted list, at least 20,000), without faiss' polysemous PQ training (unused by "
        "re-ranked search; it kept earlier attempts of this benchmark in `IndexIVF.train` for over 13 minutes). "
        "Build and convert processes ran with OMP_NUM_THREADS="
        f"{', '.join(sorted({str(r.get('build_omp_threads', 1)) for r in result['runs']}))} (faiss' OpenMP threads "
        "spin-wait for each other when other jobs hold the cores); the serving process with the threads shown "
        "per run.",
        "",
        "| passages | factory | nprobe / candidates | recall@3 | recall@10 | build s (peak RSS MB) | first answer s "
        "| serving RSS MB (peak) | 1 client p50 ms | q/s 1 client | q/s 8 clients | re-ranking reads "
        "| serving faiss threads |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in result["runs"]:
        lines.append(
            f"| {r['passages']:,} | `{r['factory']}` | {r['nprobe']} / {r['candidates']}{_refined(r)} | "
            f"{r['recall_at_3_vs_exact']} | {r['recall_at_10_vs_exact']} | {r['build_s']} ({r['build_peak_rss_mb']}) "
            f"| {r['first_answer_s']} | {r['serve_rss_mb']} ({r['serve_peak_rss_mb']}) | {r['p50_1_ms']} | "
            f"{r['qps_1']} | {r['qps_8']} | {r.get('rerank_reads', 'memory map')} | {r.get('serve_omp_threads', 1)} |"
        )
    # what a run's record says about its build (e.g. time the processes were stopped), kept on every re-render
    lines += [line for r in result["runs"] if r.get("build_note") for line in ("", f"{r['passages']:,} passages: "
              f"{r['build_note'].rstrip('.')}.")]  # fmt: skip
    lines += [
        "",
        "Served over HTTP on 127.0.0.1 with query embeddings cached (every question asked once "
        "first); first answer = from starting the server process to the first /retrieve answer (cold "
        "encoder). Serving RSS is VmRSS: RssAnon (the process's own memory) plus RssFile (pages of the "
        "memory-mapped index, fp16 vector file and passage store that searches touched: clean page cache, "
        "shared and reclaimable, re-read from disk under memory pressure); both are in the detail below.",
        "",
    ]
    for r in result["runs"]:
        lines += [
            f"## {r['passages']:,} passages",
            "",
            f"Disk (MB): {r['disk_mb']}. RSS detail (MB): {r['serve_rss_detail_mb']}.",
            "",
            "In-process sweep (one query per call):",
            "",
            "| nprobe | candidates | ms/query | recall@3 | recall@10 |",
            "|---|---|---|---|---|",
        ]
        earlier = r.get("earlier_searches") or ([r["earlier_search"]] if "earlier_search" in r else [])
        # a run kept from an earlier invocation (another N measured now) is not "this invocation"
        measured_now = r["passages"] in result.get("measured_passages", [r["passages"]])
        own = "this invocation" if measured_now else f"its run ({r.get('date', '?')})"
        sweeps = [(w, "") for w in r["sweep_inprocess_1_query_per_call"]]
        sweeps += [
            (w, f"earlier invocation {i + 1}")
            for i, e in enumerate(earlier)
            for w in e["sweep_inprocess_1_query_per_call"]
        ]
        lines[-2:] = ["| nprobe | candidates | ms/query | recall@3 | recall@10 | measured |", "|---" * 6 + "|"]
        for w, when in sorted(sweeps, key=lambda x: (x[0]["nprobe"], x[0]["candidates"], x[1])):
            cells = [w["nprobe"], w["candidates"], w["ms_per_query"], w["recall_at_3"], w["recall_at_10"]]
            lines.append("| " + " | ".join(str(c) for c in cells) + f" | {when or own} |")
        for i, e in enumerate(earlier):
            load = e.get("load_average_at_end")
            note = f" ({e['note']})" if e.get("note") else ""
            lines += [
                "",
                f"Earlier invocation {i + 1} on the same build, nprobe {e['nprobe']} / {e['candidates']} "
                f"candidates{note}: recall@3 "
                f"{e['recall_at_3_vs_exact']}, first answer {e['first_answer_s']} s, RSS {e['serve_rss_mb']} MB "
                f"(detail {e['serve_rss_detail_mb']}), 1 client p50 {e['p50_1_ms']} ms, {e['qps_1']} q/s, "
                f"8 clients {e['qps_8']} q/s, {e.get('serve_omp_threads', 1)} faiss thread(s)"
                + (f"; load average at its end {', '.join(f'{x:.1f}' for x in load)}." if load else "."),
            ]
        for b in r.get("earlier_builds", []):
            lines += [
                "",
                f"Earlier build of these vectors, `{b['factory']}` ({b.get('date', '?')}): built in {b['build_s']} s "
                f"(peak RSS {b['build_peak_rss_mb']} MB); nprobe {b['nprobe']} / {b['candidates']} candidates: "
                f"recall@3 {b['recall_at_3_vs_exact']}, first answer {b['first_answer_s']} s, RSS {b['serve_rss_mb']} "
                f"MB, 1 client p50 {b['p50_1_ms']} ms, {b['qps_1']} q/s, 8 clients {b['qps_8']} q/s, "
                f"{b.get('serve_omp_threads', 1)} faiss thread(s).",
            ]
        if "convert" in r:
            c = r["convert"]
            m = c.get("convert_passages", r["passages"])
            lines += [
                "",
                f"`searchrl index convert` of a {c['flat_file_mb']:,} MB faiss Flat file (IndexFlatIP, "
                f"written by faiss) of the first {m:,} of these vectors, to "
                f"`{c.get('convert_factory', r['factory'])}` (searched with nprobe {c.get('nprobe', '?')} / "
                f"{c.get('candidates', '?')} candidates): {c['convert_s']} s, peak RSS "
                f"{c.get('convert_peak_rss_mb_time_v', c['convert_peak_rss_mb'])} MB (`/usr/bin/time -v`; "
                f"{100 * c['convert_peak_rss_fraction_of_flat']:.1f}% of the file), recall@3 "
                f"{c['convert_recall_at_3_vs_flat']} and recall@10 {c['convert_recall_at_10_vs_flat']} of the "
                "Flat file's own exact answers. `retrieval_convert.md`: the same conversion measured again "
                "(`--convert-only`), searched with other settings.",
            ]
        lines.append("")
    missing = [n for n in (2_000_000, 5_000_000) if n not in {r["passages"] for r in result["runs"]}]
    if missing:
        lines += [
            f"Not measured: {', '.join(f'{n:,}' for n in missing)} passages (no completed run of this "
            "benchmark at that size; the extrapolation below rests on the runs above only).",
            "",
        ]
    e = result["extrapolated_21m"]
    lines += [
        "## Extrapolated to 21M passages",
        "",
        f"Serving RSS {e['serve_rss_gb']} GB (peak {e['serve_peak_rss_gb']} GB): the run of "
        f"{e.get('from_run_passages', 0):,} passages plus, per further passage, its `index.faiss` bytes (codes and "
        "ids) and its 8-byte passage offset; disk "
        f"{e['disk_gb']} GB (proportional to N). Memory-mapped files count in RSS only for "
        "the pages "
        "searches touch, so RSS grows with the traffic's spread over the index, up to the size of "
        f"`index.faiss` ({e['index_faiss_gb']} GB at 21M) plus what the run above held. With all of "
        "`index.faiss` and the passage offsets resident, plus the last run's anonymous memory: "
        f"{e.get('all_of_index_resident_gb', '?')} GB; the fp16 vectors and passage text stay on disk "
        "and are read per query.",
        "",
    ]
    return "\n".join(lines)
