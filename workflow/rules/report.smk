# The tables, figures and report of a run are flagged update(): Snakemake neither deletes them before
# their job runs nor after it fails, but backs them up and restores them when it fails ("Restored
# previous version of ... (updating job failed)"), so a damaged input (refused with one line by
# sgemm_lab.results.io.read_table) never costs the last good report. The steps write every file atomically.
# Snakemake records a restored file as made from the inputs the failed job refused, so that file alone
# would look up to date on the next invocation: each job also has an output that is not flagged (a
# status record), which a failed job leaves missing and a later job needs, so the refusal is repeated
# on every invocation until the input is fixed.


from sgemm_lab.report.run_files import BODY, FIGURES


rule aggregate:
    """Tidy tables over all implementations: bench.csv (one row per measurement), check.csv, build.csv,
    and dispatch.csv (the tables of the dispatch stages, one row per stage and measured shape)."""
    input:
        bench=all_bench(),
        check=all_checks(),
        build=all_builds(),
        profiles=all_profiles(),
        sanitize=all_sanitize(),
        env=ENV_JSON,
    output:
        sanitize=update(f"{REPORTS}/sanitize.csv"),
        bench=update(f"{REPORTS}/bench.csv"),
        ncu=update(f"{REPORTS}/ncu_metrics.csv"),
        check=update(f"{REPORTS}/check.csv"),
        build=update(f"{REPORTS}/build.csv"),
        env=update(f"{REPORTS}/environment.json"),
        dispatch=update(f"{REPORTS}/dispatch.csv"),
        status=f"{RESULTS}/status/aggregate.json",
    log:
        f"{RESULTS}/logs/aggregate.log",
    conda:
        "../../env/conda.yaml"
    script:
        "../scripts/aggregate.py"


rule plot:
    """Figures: TFLOP/s vs size, the ladder at the headline shape, accuracy against speed, roofline, hierarchical
    roofline, warp stalls, bank conflicts and occupancy (the last four from Nsight Compute), and a heatmap of
    every tile sweep; one job, so that matplotlib starts once."""
    input:
        bench=f"{REPORTS}/bench.csv",
        check=f"{REPORTS}/check.csv",
        ncu=f"{REPORTS}/ncu_metrics.csv",
        ceilings=ceilings_input(),
        sweeps=all_sweeps(),
    output:
        size=report(update(f"{REPORTS}/figures/{FIGURES['size']}"), caption="../report/tflops_vs_size.rst",
                    category="Ladder"),
        ladder=report(update(f"{REPORTS}/figures/{FIGURES['ladder']}"), caption="../report/ladder.rst", category="Ladder"),
        accuracy=report(update(f"{REPORTS}/figures/{FIGURES['accuracy']}"), caption="../report/accuracy.rst",
                        category="Ladder"),
        roofline=report(update(f"{REPORTS}/figures/{FIGURES['roofline']}"), caption="../report/roofline.rst",
                        category="Profile"),
        levels=report(update(f"{REPORTS}/figures/{FIGURES['levels']}"), caption="../report/roofline_levels.rst",
                      category="Profile"),
        stalls=report(update(f"{REPORTS}/figures/{FIGURES['stalls']}"), caption="../report/stalls.rst", category="Profile"),
        memory=report(update(f"{REPORTS}/figures/{FIGURES['memory']}"), caption="../report/memory.rst", category="Profile"),
        heatmaps=[
            report(update(f"{REPORTS}/figures/sweep_{k}.png"), caption="../report/sweep.rst",
                   category="Tile sweeps", subcategory=k)
            for k in swept_ids()
        ],
        status=f"{RESULTS}/status/plot.json",
    log:
        f"{RESULTS}/logs/plot.log",
    # the figures are drawn side by side, one process each (the step runs at the end, alone)
    threads: all_cores()
    conda:
        "../../env/conda.yaml"
    script:
        "../scripts/plot.py"


rule report:
    """The markdown report comparing every stage with cuBLAS."""
    input:
        bench=f"{REPORTS}/bench.csv",
        check=f"{REPORTS}/check.csv",
        build=f"{REPORTS}/build.csv",
        env=f"{REPORTS}/environment.json",
        sweeps=all_sweeps(),
        epilogues=all_epilogues(),
        ncu=f"{REPORTS}/ncu_metrics.csv",
        sanitize=f"{REPORTS}/sanitize.csv",
        dispatch=f"{REPORTS}/dispatch.csv",
        ceilings=ceilings_input(),
        figures=[f for f in rules.plot.output if f.endswith(".png")],
        failure_tests=failure_tests(),
        statuses=all_statuses(),
        aggregated=rules.aggregate.output.status,
    output:
        report(update(f"{REPORTS}/report.md"), caption="../report/report.rst", category="Report"),
        body=update(f"{REPORTS}/{BODY}"),  # report.md as HTML, the HTML report's first page (workflow/report/workflow.rst)
        steps=update(f"{REPORTS}/steps.csv"),
        run=update(f"{REPORTS}/run.json"),
        status=f"{RESULTS}/status/report.json",
    log:
        f"{RESULTS}/logs/report.log",
    params:
        start=START_JSON,
    conda:
        "../../env/conda.yaml"
    script:
        "../scripts/report.py"
