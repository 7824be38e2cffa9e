"""Stand-in for Octopoes' API: every object exists, except references containing 'gone'."""

from datetime import datetime
from typing import Any

from octopoes.models.exception import ObjectNotFoundException


class StoredObject:
    def __init__(self, reference: str) -> None:
        self.reference = reference

    def serialize(self) -> dict[str, Any]:
        return {"object_type": self.reference.split("|")[0], "primary_key": self.reference}


class OctopoesAPIConnector:
    def __init__(self, base_uri: str, client: str) -> None:
        self.client = client

    def get(self, reference: str, valid_time: datetime | None = None) -> StoredObject:
        if "gone" in reference:
            raise ObjectNotFoundException(reference)
        return StoredObject(reference)
