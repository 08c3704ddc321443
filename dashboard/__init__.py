"""The analyst dashboard: CallShield's web process (DESIGN.md §7).

FastAPI with server-rendered pages, a WebSocket live feed and a REST API under
``/api/v1``. From the rest of CallShield it imports only the alert schema
(``detectors.alert_schema``) and the Redis bus (``detectors.bus``). ``create_app`` lives
in ``dashboard.app``; importing this package stays cheap (the CLI root loads
``dashboard.cli`` on every ``callshield`` run).
"""
