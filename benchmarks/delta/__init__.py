"""The delta-rs comparison of ``bench_delta.py``: its engines and goals
(``sides``), workload and cached histories (``history``), the DML and scan
parts (``dml``, ``scans``), the markdown (``report``) and ``--profile``
(``profile``)."""
