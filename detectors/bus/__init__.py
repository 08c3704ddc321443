"""CallShield's Redis bus: the key layout, the alert publisher with its local outbox,
the embedded Redis supervisor and the webhook dispatcher (DESIGN.md §6).

Pure Python plus redis-py, httpx and pydantic: no numpy, no native code, so the
dashboard, the webhook dispatcher and the media process can all import it. The media
process (``sip_bridge``) composes the publisher; nothing here imports ``sip_bridge``.
"""
