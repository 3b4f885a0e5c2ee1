"""``run.py``'s report: the figures against their goals (``figures``), the
prose of what limits the misses (``text``) and the plots (``plots``)."""
