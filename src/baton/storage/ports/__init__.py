"""What the services need from the database, a class per service: each implements the port (a
Protocol) its service declares, over a `Store`, and answers with core's views (`baton.core.views`),
never an ORM row. `baton/runtime.py` builds them and hands them to the services; above storage
nothing opens a session.
"""
