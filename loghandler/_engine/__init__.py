"""The shipping engine: queue and counters, flusher, spool, process life, event model."""
