"""Planners: what each type of scheduler makes of its events and due schedules, one module each
(boefje, normalizer, report; scheduled.py fires the due schedules the boefje and report ones share).
The home of new planning rules, such as periodic rescans."""
