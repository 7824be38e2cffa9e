"""Test and benchmark harness: stand-ins for outside services, throw-away servers, fault injection."""
