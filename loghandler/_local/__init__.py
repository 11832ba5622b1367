"""The local stand-in of the service: HTTP server and storage, ingest rules, APL, the page."""
