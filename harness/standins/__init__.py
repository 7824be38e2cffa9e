"""Stand-ins for OpenKAT's KATalogus, Octopoes and Bytes: small FastAPI apps speaking each service's wire
format for the calls Baton makes, with state a test drives, injected faults and call counters.

    katalogus = KatalogusStandin()
    with StandinServer(katalogus.app) as server:   # a free loopback port, in a thread
        katalogus.add_organisation("acme")
        ... server.url ...
        katalogus.faults.status = 500               # every call answers 500
        server.down()                               # connections refused, until server.up()
        katalogus.holds.hold("GET /v1/configs")     # its calls wait, until katalogus.holds.release()
"""

from harness.standins.bytes import BytesStandin
from harness.standins.common import Calls, Faults, Holds, Standin, StandinServer
from harness.standins.katalogus import KatalogusStandin
from harness.standins.octopoes import OctopoesStandin

__all__ = [
    "BytesStandin",
    "Calls",
    "Faults",
    "Holds",
    "KatalogusStandin",
    "OctopoesStandin",
    "Standin",
    "StandinServer",
]
