"""Ingest: events in (HTTP inbox, RabbitMQ), schedulers that rank them into tasks, the plugin
catalogue. Depends on baton.storage and baton.core."""
