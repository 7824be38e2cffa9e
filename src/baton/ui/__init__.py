"""The status page at `/ui`: server-rendered templates, a small script of its own, no build step and
no address outside this server. Its data comes from `baton.service.status`."""
