"""The HTTP API: a stateless FastAPI app; any replica serves any queue."""

from baton.api.app import create_app

__all__ = ["create_app"]
