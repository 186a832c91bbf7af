"""The HTTP edge: routers that translate requests into service calls. No business logic here."""
