"""The SSE parser follows the WHATWG event-stream rules, whatever the chunking."""

from __future__ import annotations

import pytest

from lmsp_jupyter.client import ServerSentEvent, SseParser


def parse(stream: bytes) -> tuple[list[ServerSentEvent], SseParser]:
    parser = SseParser()
    return parser.feed(stream), parser


def parse_in_pieces(stream: bytes, cuts: list[int]) -> list[ServerSentEvent]:
    parser = SseParser()
    events: list[ServerSentEvent] = []
    for start, end in zip([0, *cuts], [*cuts, len(stream)], strict=True):
        events += parser.feed(stream[start:end])
    return events


TRICKY = (
    b"\xef\xbb\xbf: a comment first, after a BOM\r\n"
    b"retry: 2000\r\n"
    b"\r\n"
    b"id: 1\r\n"
    b"event: response.created\r\n"
    b'data: {"a":\r\n'
    b"data:  1}\r\n"
    b"\r\n"
    b"id: 2\revent: x\rdata: caf\xc3\xa9 \xe2\x98\x95\r\r"
    b": keep-alive\n\n"
    b"data\n"
    b"\n"
    b"id: 3\nevent: last\ndata: no blank line after me\n"
)
TRICKY_EVENTS = [
    ServerSentEvent(event="response.created", data='{"a":\n 1}', id="1"),
    ServerSentEvent(event="x", data="café ☕", id="2"),
    ServerSentEvent(event="message", data="", id="2"),
]


def test_tricky_stream_in_one_chunk() -> None:
    events, parser = parse(TRICKY)
    assert events == TRICKY_EVENTS
    assert parser.retry == 2000
    assert parser.last_event_id == "2"


def test_tricky_stream_split_at_every_byte_boundary() -> None:
    for cut in range(1, len(TRICKY)):
        assert parse_in_pieces(TRICKY, [cut]) == TRICKY_EVENTS, cut


def test_tricky_stream_fed_one_byte_at_a_time() -> None:
    assert parse_in_pieces(TRICKY, list(range(1, len(TRICKY)))) == TRICKY_EVENTS


def test_crlf_split_between_cr_and_lf_is_one_line_end() -> None:
    assert parse_in_pieces(b"data: a\r\n\r\ndata: b\r\n\r\n", [8, 10, 19]) == [
        ServerSentEvent("message", "a", ""),
        ServerSentEvent("message", "b", ""),
    ]


def test_cr_cr_is_two_line_ends() -> None:
    assert parse(b"data: a\r\rdata: b\r\r")[0] == [
        ServerSentEvent("message", "a", ""),
        ServerSentEvent("message", "b", ""),
    ]


def test_multi_line_data_is_joined_with_newlines() -> None:
    assert parse(b"data: one\ndata: two\ndata:\ndata: four\n\n")[0] == [
        ServerSentEvent("message", "one\ntwo\n\nfour", "")
    ]


def test_one_space_after_the_colon_is_dropped_and_no_more() -> None:
    assert parse(b"data:  two spaces\ndata:none\n\n")[0] == [
        ServerSentEvent("message", " two spaces\nnone", "")
    ]


def test_only_a_leading_bom_is_stripped() -> None:
    assert parse(b"\xef\xbb\xbfdata: \xef\xbb\xbfx\n\n")[0] == [
        ServerSentEvent("message", "\ufeffx", "")
    ]


def test_an_id_containing_nul_is_ignored() -> None:
    events, parser = parse(b"id: 7\ndata: a\n\nid: 8\x009\ndata: b\n\n")
    assert events == [ServerSentEvent("message", "a", "7"), ServerSentEvent("message", "b", "7")]
    assert parser.last_event_id == "7"


def test_the_id_persists_until_the_stream_sets_another() -> None:
    events, _ = parse(b"id: 5\ndata: a\n\ndata: b\n\nid\ndata: c\n\n")
    assert [event.id for event in events] == ["5", "5", ""]


def test_an_event_without_data_is_not_dispatched_but_sets_the_last_id() -> None:
    events, parser = parse(b"id: 4\nevent: ping\n\n")
    assert events == []
    assert parser.last_event_id == "4"


def test_the_event_type_does_not_carry_over_to_the_next_event() -> None:
    events, _ = parse(b"event: a\ndata: 1\n\ndata: 2\n\n")
    assert [event.event for event in events] == ["a", "message"]


@pytest.mark.parametrize("value", [b"x", b"-1", b"1.5", b"  10", b"\xd9\xa1"])
def test_retry_that_is_not_ascii_digits_is_ignored(value: bytes) -> None:
    _, parser = parse(b"retry: 3000\n\nretry:" + value + b"\n\n")
    assert parser.retry == 3000


def test_unknown_fields_and_comments_are_ignored() -> None:
    assert parse(b": hi\nfoo: bar\nDATA: no\ndata: yes\n\n")[0] == [
        ServerSentEvent("message", "yes", "")
    ]


def test_a_trailing_event_without_its_blank_line_is_not_dispatched() -> None:
    assert parse(b"data: complete\n\ndata: cut")[0] == [ServerSentEvent("message", "complete", "")]
    assert parse(b"data: cut\n")[0] == []


def test_invalid_utf8_becomes_replacement_characters() -> None:
    assert parse(b"data: \xff\xfe!\n\n")[0] == [ServerSentEvent("message", "\ufffd\ufffd!", "")]
