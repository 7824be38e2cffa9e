"""The soak run (issue #42): a day of OpenKAT in an hour, with every part of Baton working at once.

PostgreSQL (a cluster of the run's own: it is restarted), RabbitMQ, two `baton serve --no-director`
API replicas and two `baton worker`s, and OpenKAT's KATalogus, Octopoes and Bytes as stand-ins in a
process of their own, for an estate of organisations KATalogus lists. A steady mix runs for the
whole run while faults come on a timetable; every minute the run records memory, descriptors,
connections, latencies, lateness, table sizes and log lines; at the end it checks that every task
is accounted for.

- `plan`: sizes, rates, the time mapping (which simulated hour is which minute) and the timetable;
- `standins`: the OpenKAT stand-ins' process (`python -m bench.soak.standins`) and its control;
- `stack`: the Baton processes, PostgreSQL and RabbitMQ, and the faults done to them;
- `load`: what OpenKAT does to Baton: Octopoes' and Bytes' messages, runners, rocky;
- `observe`: the samples taken every minute and the record of every task;
- `checks`: the end-of-run checks;
- `bench/scenarios/soak.py` runs it, `bench/report/soak.py` writes its section and plot.
"""
