"""The domain: vocabulary, errors, settings, lifecycle and liveness rules, the filter language.

Imports nothing else of Baton; everything else may import it.
"""
