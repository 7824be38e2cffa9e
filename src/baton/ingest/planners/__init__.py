"""Planners: what each type of scheduler makes of its events and due schedules, one module each
(boefje, normalizer, report; scheduled.py fires due report schedules, rescans.py the boefje schedules
that every boefje task gets). The home of new planning rules."""
