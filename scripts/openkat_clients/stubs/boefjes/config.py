"""Stand-in for boefjes.config: only the settings scheduler_client.py reads."""

import os
from types import SimpleNamespace

settings = SimpleNamespace(
    outgoing_request_timeout=30,
    katalogus_api=os.environ["KATALOGUS_API"],
    octopoes_api="http://127.0.0.1:9",
)
