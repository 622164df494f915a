"""Evaluation: quality statistics, equivalence tests, run comparison, plots, reports, W&B.

Everything here reads run directories (summary.json, chains.jsonl, trees.jsonl) or the
records the runner passes to a logger; nothing here changes how a chain is sampled.
Plotting and W&B imports stay inside the functions that need them.
"""
