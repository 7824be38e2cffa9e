"""Stand-in for KATalogus' plugin service, which the runner's client asks while it hydrates a boefje job."""

from types import SimpleNamespace
from typing import Any


class PluginService:
    def __enter__(self) -> "PluginService":
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def by_plugin_id(self, plugin_id: str, organisation: str) -> Any:
        return SimpleNamespace(
            id=plugin_id,
            oci_image=f"ghcr.io/minvws/openkat/{plugin_id}:latest",
            oci_arguments=[],
            runnable_hash="0" * 64,
            boefje_schema=None,
        )
