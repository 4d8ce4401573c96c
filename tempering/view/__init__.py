"""`tempering view RUN_DIR`: a web dashboard of one run directory, live or finished.

data.py reads the run directory (metrics, sandbox log, lineage store) into JSON-able dicts;
server.py serves them as a JSON API with the page in static/ (vanilla JS, plotly.js charts).
Nothing here writes to the run directory or takes part in training.
"""
