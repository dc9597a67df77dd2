"""Comparing runs from the files they leave behind, so runs copied from any machine compare.

    runs.py     run directories found under the given paths and read into `Run` records
    table.py    the rows: one per run, or one per setting with mean and std over its runs
    formats.py  a table printed as rich, csv, json or markdown
    figures.py  the metric's curves as data, and as a PNG (matplotlib)
    page.py     one self-contained HTML page: tables, curves, parallel coordinates (plotly)

Nothing here imports torch; matplotlib and plotly load only when a figure is asked for.
"""
