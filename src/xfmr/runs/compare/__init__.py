"""Comparing runs from the files they leave behind, so runs copied from any machine compare.

    runs.py     run directories found under the given paths and read into `Run` records
    points.py   where each run's metric is read: at its end, or at an equal step, number of
                training tokens, FLOPs or seconds, interpolated between its validations
    table.py    the rows: one per run, or one per setting with mean, std and interval over its
                runs, and each setting's difference to a baseline
    stats.py    the 95% t interval of a mean, Welch's difference and test, Holm's correction (scipy)
    scaling.py  loss against training compute: a power law fitted in log-log with the intervals
                of its exponent, and the difference of two laws' exponents (scipy)
    laws.py     L = E + A * C^(-b) with an irreducible loss E, by nonlinear least squares (scipy)
    replicates.py  laws fitted to per-setting means, the lack-of-fit F test, exponents refused
                where the law does not fit
    multiplicity.py  a page's p-values corrected together (Bonferroni, Holm, Benjamini-Hochberg)
                and the level of simultaneous intervals
    verdicts.py "different", "equivalent within ±margin" or "inconclusive (neither)" by TOST
    importance.py  which swept parameters mattered: fANOVA and PED-ANOVA (Optuna's evaluators)
    formats.py  a table printed as rich, csv, json or markdown
    figures.py  the metric's curves, a colour per setting (mean, band, runs faint), as data and
                as a PNG (matplotlib)
    page.py     one self-contained HTML page: tables, curves, parallel coordinates, importance
                (plotly)

Nothing here imports torch; scipy loads for grouped rows, Optuna for importance, matplotlib and
plotly only when a figure is asked for.
"""
