"""What a workflow declares, checked as it is declared: the registry, flow control, cron, payloads, retries, retention.

Nothing here touches the database or imports the engine, the store or the
client: a declaration is plain data, checked at import time. The
``@workflow`` decorator (:mod:`.registry`) is re-exported by the package's
top level.
"""
