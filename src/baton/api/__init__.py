"""The HTTP API: a stateless FastAPI app; any replica serves any queue. Depends on service,
ingest, storage and core."""

from baton.api.app import create_app

__all__ = ["create_app"]
