"""The dashboard's routers: the REST API under ``/api/v1`` and the HTML pages."""
