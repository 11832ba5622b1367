"""The shipping engine: queue and counters, flusher, spool, process life, event model.

    shipper.py    Shipper (the facade)   flusher.py   its Flusher (the thread and its parts)
    ledger/       the queue, its bounds and the counters, seen through three faces
                  (intake.py, flushing.py, control.py) over one state (state.py)
    stats.py      Stats, Count, Fate
    worker.py     the flusher's loop     posting.py   one request's tries
    spilling.py   what cannot be delivered: the spool or a count; take-over at exit
    batches.py    the one batch rule     bisector.py  splitting what the service refuses
    policy.py     what each answer means (a table)   transport.py  the seam to the service
    reporter.py   stderr lines, on_error, the exit summary
    spool.py      the spool's directory  spoolfiles.py  its files' format, names and owners
    spoolreplay.py  the spool's replay, round by round
    lifecycle.py  exit, fork, SIGTERM    guard.py     loghandler's own sending threads
    platforms.py  where the process runs: the identity fields (Kubernetes, clouds, FaaS)
    model.py      the event model's tables (a leaf)
    events.py, shaping.py, hold.py, sampling.py, context.py: the event and what ships
    compiled.py   whether the C code (_speedups.c, _gzip.c) stands in for its Python twins
    fastpath.py   the callers' fast-path contract with the C code (named types)
"""
