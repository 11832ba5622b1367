"""The shipping engine: queue and counters, flusher, spool, process life, event model.

    shipper.py    Shipper (the facade) and its Flusher (the thread and its parts)
    ledger.py     the queue, its bounds and the counters          stats.py   Stats, Count, Fate
    worker.py     the flusher's loop     posting.py   one request's tries
    spilling.py   what cannot be delivered: the spool or a count; replay; take-over at exit
    batches.py    the one batch rule     bisector.py  splitting what the service refuses
    policy.py     what each answer means (a table)   transport.py  the seam to the service
    reporter.py   stderr lines, on_error, the exit summary         spool.py   the files on disk
    lifecycle.py  exit, fork, SIGTERM    guard.py     loghandler's own sending threads
    events.py, shaping.py, hold.py, context.py: the event model and what ships
"""
