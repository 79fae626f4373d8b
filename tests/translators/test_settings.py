"""The translator worker's settings refuse what the broker's group protocol cannot keep."""

from __future__ import annotations

import pytest

from bizevents.translators.settings import TranslateSettings


def test_settings_refuse_a_heartbeat_too_close_to_the_session() -> None:
    with pytest.raises(ValueError, match="heartbeat_interval_s"):
        TranslateSettings(session_timeout_s=6, heartbeat_interval_s=3)
