"""What a soak run does and when: the estate, the rates, the time mapping and the fault timetable.

A run of `seconds` is one simulated day of OpenKAT: every daily rhythm of OpenKAT is compressed by
`factor` = 86,400 / seconds (24 for an hour: a simulated hour is 2.5 minutes). Baton's settings that
measure a day (the grace period, the rescan jitter, the task timeout, the retention horizon) are
divided by the factor; the loops that run every minute in OpenKAT (KATalogus polls, rescan rounds)
too, but never below a second. The estate starts as after a day of OpenKAT: every object already
has its boefje schedules, due over the coming simulated day, so the rescans of a whole day come due
during the run.

The run has a warm-up (the first sixth), a first and a last window of a sixth each (ten minutes of
an hour) to compare, and the faults between those windows, one after another.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

DAY = 86_400.0
# OpenKAT's own rhythms, in seconds (mula and Baton's defaults).
GRACE_PERIOD = DAY
RESCAN_JITTER = 5 * 3600.0
KATALOGUS_POLL = 60.0
RESCAN_INTERVAL = 60.0
TASK_TIMEOUT = 1800.0
SMALLEST_LOOP = 1.0  # no polling loop faster than this, whatever the factor
SMALLEST_TIMEOUT = 30.0  # a runner on a loaded machine must be able to report within it
RETENTION_SHARE = 1 / 6  # the retention horizon, as a share of the run: it works during the run
RETENTION_FLOOR = 45.0  # seconds: longer than a broker restart takes to redeliver (retention_horizon)

FAULTS = ("outside_service_down", "worker_sigkill", "api_restart", "rabbitmq_restart", "postgres_restart")


@dataclass(frozen=True)
class Boefje:
    id: str
    consumes: str  # the object type
    normalizer: str  # reads the raw files it makes ("boefje/<id>")
    enabled: bool  # for every organisation from the start (else: enabled now and then: backfill)


BOEFJES = (
    Boefje("dns-records", "Hostname", "kat_dns_normalize", enabled=True),
    Boefje("dns-sec", "Hostname", "kat_dnssec_normalize", enabled=True),
    Boefje("shodan", "IPAddressV4", "kat_shodan_normalize", enabled=False),
)
TWIN_BOEFJE = "dns-records"  # organisations of a twin pair share its settings: a task gets a twin
BACKFILL_BOEFJE = "shodan"
OBJECT_LEVEL = 2  # every object's scan level: each boefje (level 1) may scan it


@dataclass(frozen=True)
class Fault:
    kind: str
    at: float  # seconds from the start of the run
    length: float  # how long the service stays down (outside service); 0: a moment


@dataclass(frozen=True)
class Plan:
    seconds: float
    organisations: int
    hostnames: int  # per organisation, each with a schedule per Hostname boefje, due during the run
    addresses: int  # per organisation, for the backfill boefje
    twin_organisations: int  # the first N organisations, in pairs
    mutations_per_second: float  # Octopoes: new objects, each a scan-profile message
    manual_runs_per_second: float  # rocky: "run now"
    reads_per_second: float  # rocky: task and schedule lists
    boefje_runners: int
    normalizer_runners: int
    backfills: int  # boefjes enabled for one more organisation during the run
    long_poll_seconds: float
    quick: bool
    faults: tuple[Fault, ...] = field(default=())

    @property
    def factor(self) -> float:
        return DAY / self.seconds

    @property
    def warm_up(self) -> float:
        return self.seconds / 6

    @property
    def window(self) -> float:
        """The first and the last window compared (ten minutes of an hour)."""
        return self.seconds / 6

    @property
    def first_window(self) -> tuple[float, float]:
        return (self.warm_up, self.warm_up + self.window)

    @property
    def last_window(self) -> tuple[float, float]:
        return (self.seconds - self.window, self.seconds)

    @property
    def sample_every(self) -> float:
        """A sample a simulated 24 minutes: every minute of an hour's run, 60 samples whatever its length."""
        return self.seconds / 60

    @property
    def retention_horizon(self) -> float:
        """A sixth of the run, and at least RETENTION_FLOOR: an event RabbitMQ delivers again after a
        restart (its ack lost) finds its task still there and makes no second one; a task retention
        removed already cannot tell it (in production the horizon is days, a redelivery seconds)."""
        return max(RETENTION_FLOOR, self.seconds * RETENTION_SHARE)

    def scaled(self, seconds: float, floor: float = 0.0) -> float:
        return max(floor, seconds / self.factor)

    def simulated_hour(self, at: float) -> float:
        """The simulated hour of the day `at` seconds into the run falls in."""
        return at * self.factor / 3600

    def settings(self, retention: dict[str, str]) -> dict[str, str]:
        """Baton's time-scale settings for the run (retention as `retention_setting` chose it)."""
        return {
            "BATON_GRACE_PERIOD_SECONDS": f"{self.grace_period:g}",
            "BATON_RESCAN_JITTER_SECONDS": f"{self.scaled(RESCAN_JITTER):g}",
            "BATON_RESCAN_INTERVAL_SECONDS": f"{self.rescan_interval:g}",
            "BATON_KATALOGUS_POLL_SECONDS": f"{self.scaled(KATALOGUS_POLL, SMALLEST_LOOP):g}",
            "BATON_TASK_TIMEOUT_SECONDS": f"{self.scaled(TASK_TIMEOUT, SMALLEST_TIMEOUT):g}",
            **retention,
        }

    @property
    def grace_period(self) -> float:
        return self.scaled(GRACE_PERIOD)

    @property
    def rescan_interval(self) -> float:
        return self.scaled(RESCAN_INTERVAL, SMALLEST_LOOP)

    def mapping(self) -> list[dict[str, Any]]:
        """Which simulated hours are which minutes of the run (every third hour)."""
        return [
            {"hour": hour, "from_s": hour * 3600 / self.factor, "to_s": (hour + 3) * 3600 / self.factor}
            for hour in range(0, 24, 3)
        ]

    def describe(self) -> dict[str, Any]:
        return {
            "seconds": self.seconds,
            "factor": self.factor,
            "organisations": self.organisations,
            "hostnames_per_organisation": self.hostnames,
            "addresses_per_organisation": self.addresses,
            "schedules": self.schedules,
            "twin_organisations": self.twin_organisations,
            "mutations_per_second": self.mutations_per_second,
            "manual_runs_per_second": self.manual_runs_per_second,
            "reads_per_second": self.reads_per_second,
            "boefje_runners": self.boefje_runners,
            "normalizer_runners": self.normalizer_runners,
            "backfills": self.backfills,
            "long_poll_seconds": self.long_poll_seconds,
            "warm_up_s": self.warm_up,
            "first_window_s": list(self.first_window),
            "last_window_s": list(self.last_window),
            "sample_every_s": self.sample_every,
            "retention_horizon_s": self.retention_horizon,
            "faults": [{"kind": f.kind, "at_s": f.at, "length_s": f.length} for f in self.faults],
            "mapping": self.mapping(),
            "quick": self.quick,
        }

    @property
    def schedules(self) -> int:
        hostname_boefjes = sum(1 for boefje in BOEFJES if boefje.enabled and boefje.consumes == "Hostname")
        return self.organisations * self.hostnames * hostname_boefjes


def timetable(seconds: float, warm_up: float, window: float) -> tuple[Fault, ...]:
    """Every fault once, evenly spaced between the first and the last window (none in either); the
    outside service stays down a simulated hour (a minute of an hour's run), at least 5 s."""
    start, end = warm_up + window, seconds - window
    step = (end - start) / (len(FAULTS) + 1)
    outage = max(5.0, seconds / 60)
    return tuple(
        Fault(kind, start + step * (n + 1), outage if kind == "outside_service_down" else 0.0)
        for n, kind in enumerate(FAULTS)
    )


def plan(minutes: float, quick: bool) -> Plan:
    """The full run's estate (200 organisations) or the smoke run's (a small one, cheap in CPU)."""
    seconds = minutes * 60
    sizes: dict[str, Any]
    if quick:
        sizes = {
            "organisations": 8,
            "hostnames": 4,
            "addresses": 3,
            "twin_organisations": 4,
            "mutations_per_second": 0.7,
            "manual_runs_per_second": 0.2,
            "reads_per_second": 0.5,
            "boefje_runners": 2,
            "normalizer_runners": 1,
            "backfills": 2,
            "long_poll_seconds": 2.0,
        }
    else:
        sizes = {
            "organisations": 200,
            "hostnames": 30,
            "addresses": 10,
            "twin_organisations": 40,
            "mutations_per_second": 3.0,
            "manual_runs_per_second": 0.5,
            "reads_per_second": 2.0,
            "boefje_runners": 6,
            "normalizer_runners": 3,
            "backfills": 24,
            "long_poll_seconds": 10.0,
        }
    base = Plan(seconds=seconds, quick=quick, **sizes)
    return Plan(**{**base.__dict__, "faults": timetable(seconds, base.warm_up, base.window)})


def retention_setting(horizon_seconds: float) -> tuple[dict[str, str], float]:
    """The retention settings for a horizon (tasks' and consumed events', in days, a fraction of one
    here) and the horizon they give."""
    days = f"{horizon_seconds / DAY:.6g}"
    return {"BATON_TASK_RETENTION_DAYS": days, "BATON_EVENT_RETENTION_DAYS": days}, float(days) * DAY
