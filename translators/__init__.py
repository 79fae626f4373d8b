"""translators package."""
