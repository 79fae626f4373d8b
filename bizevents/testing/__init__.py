"""Test support: a pytest plugin that runs the embedded stack for a test session."""
