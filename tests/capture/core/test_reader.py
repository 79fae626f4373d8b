"""What both stream readers share (``core.reader.StreamReader``): the chunks' connection
is closed when the loop ends, however it ends."""

from __future__ import annotations

import pytest

from bizevents.capture.core.reader import StreamReader


class _Chunks:
    def __init__(self, fails: bool = False) -> None:
        self.closed, self.fails = 0, fails

    def close(self) -> None:
        self.closed += 1
        if self.fails:
            raise OSError("the server went away first")


class _Reader(StreamReader):
    def __init__(self, chunks: _Chunks | None, error: Exception | None = None) -> None:
        self.chunks, self.error, self.looped = chunks, error, 0

    def loop(self) -> None:
        self.looped += 1
        if self.error is not None:
            raise self.error


def test_the_chunks_connection_closes_when_the_loop_ends() -> None:
    reader = _Reader(_Chunks())
    reader.run()
    assert reader.looped == 1 and reader.chunks.closed == 1


def test_the_chunks_connection_closes_when_the_loop_fails_and_the_failure_stays() -> None:
    """The loop's error is the one raised, not the close's."""
    reader = _Reader(_Chunks(fails=True), ConnectionError("slot lost"))
    with pytest.raises(ConnectionError, match="slot lost"):
        reader.run()
    assert reader.chunks.closed == 1


def test_a_reader_without_snapshots_has_nothing_to_close() -> None:
    _Reader(None).run()
