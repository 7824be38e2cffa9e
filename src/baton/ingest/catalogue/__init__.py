"""The plugin catalogue on the ingest side: which plugins a planner may use (`lookups`), Baton's own
catalogue file (`plugins_file`: the built-in `plugins.yml`, BATON_PLUGINS_FILE) and what Baton keeps
of KATalogus' listing (`katalogus_listing`). Its pure rules are core/catalogue.py's; reading the
listing each poll is planners/catalogue_sync.py's."""
