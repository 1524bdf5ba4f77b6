"""The ``faultfleet`` command line; :func:`faultfleet_apps.cli.main.main` is the entry point.

Before anything imports torch, the command line asks OpenMP's worker threads to sleep
rather than spin while they wait (``OMP_WAIT_POLICY=PASSIVE``, unless the environment says
otherwise): OpenMP reads the variable once, when torch loads it. With the default
spin-waiting, two torch threads on a 2-core machine that other programs keep busy spin
while their partner is descheduled: one round of 3 clients of the ``compact`` model
(``benchmarks/bench_round_training.py --threads 2 --clients 3 --repeats 1``) did not finish
in 300 s, against 3.0 s (sequential) and 1.1 s (batched) with passive waiting and 5.5 s and
4.5 s with one thread, on the same loaded machine (load average 20). See
:mod:`faultfleet_apps.thread_policy`.
"""

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
