def run(cfg): raise SystemExit(0)
def summary_lines(r): return []
