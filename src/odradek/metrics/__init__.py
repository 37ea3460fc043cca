"""Metrics: hot-path counters (``stats``) and the bounded scrape listener (``http_listener``)."""
