"""The wire: everything that talks HTTP to the service, and nothing else.

    settings.py   the client's arguments and environment variables -> Settings
    answer.py     Answer: one answer of the service; the one rule for the wait it asks
    transport.py  Transport: what carries a request (Client's and the shippers' transport=)
    errors.py     which error an answer means (raised by the client, reported by the engine)
    client.py     Client: one keep-alive pool, send() -> Answer, ingest, query, shared clients
    watchdog.py   ends a request at its deadline (timeout= bounds the whole request)
    imports.py    urllib3 imported with the first request, kept for requests at shutdown
    views.py      View and client.views          datasets.py   client.datasets
    async_client.py   AsyncClient: Client's calls as coroutines, on a small thread pool

It imports only the package's shared modules (``_errors``, ``_output``, ``_status``,
``_encoding``, ``_time``, ``_config``), never the engine, the local service or the command
line. The public names (``loghandler.Client``, ``AsyncClient``, ``View``) are re-exported by
the package; this ``__init__`` imports nothing, so a module here can be imported alone.
"""
