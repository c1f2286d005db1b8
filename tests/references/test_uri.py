from __future__ import annotations

import base64
import json
import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cortex_sessions.references import InvalidReference, decode_session_uri, encode_session_uri
from tests.references.strategies import PROPERTY


def uri_of_bytes(raw: bytes) -> str:
    return "cortex-session:" + base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def test_uri_is_unpadded_base64url_of_the_json_string():
    assert encode_session_uri("abc") == "cortex-session:ImFiYyI"
    assert decode_session_uri("cortex-session:ImFiYyI") == "abc"


def test_uri_json_keeps_non_ascii_characters_unescaped():
    uri = encode_session_uri("é😀")
    assert uri == uri_of_bytes('"é😀"'.encode())


@PROPERTY
@given(st.text(min_size=1))
def test_every_session_id_round_trips_through_its_uri(session_id):
    uri = encode_session_uri(session_id)
    assert re.fullmatch(r"cortex-session:[A-Za-z0-9_-]+", uri)
    assert decode_session_uri(uri) == session_id


@PROPERTY
@given(st.text())
def test_decoding_arbitrary_text_either_refuses_or_is_canonical(text):
    for candidate in (text, "cortex-session:" + text):
        try:
            session_id = decode_session_uri(candidate)
        except InvalidReference:
            continue
        assert encode_session_uri(session_id) == candidate


def test_session_id_with_a_lone_surrogate_is_invalid_reference():
    with pytest.raises(InvalidReference):
        encode_session_uri("a\ud800b")


def test_uri_whose_json_escapes_a_lone_surrogate_is_invalid_reference():
    with pytest.raises(InvalidReference):
        decode_session_uri(uri_of_bytes(b'"\\ud800"'))


@pytest.mark.parametrize("session_id", ["", None, 7])
def test_encoding_an_empty_or_non_string_id_is_invalid_reference(session_id):
    with pytest.raises(InvalidReference):
        encode_session_uri(session_id)


def test_uri_with_padding_is_invalid_reference():
    uri = encode_session_uri("ab")  # 4 JSON bytes -> 6 characters + "=="
    with pytest.raises(InvalidReference):
        decode_session_uri(uri + "==")


def test_uri_in_standard_base64_alphabet_is_invalid_reference():
    raw = json.dumps("\u00ff\u00fe\u00fb", ensure_ascii=False).encode()
    standard = "cortex-session:" + base64.b64encode(raw).rstrip(b"=").decode()
    assert "+" in standard or "/" in standard
    with pytest.raises(InvalidReference):
        decode_session_uri(standard)


def test_uri_with_non_zero_trailing_bits_is_invalid_reference():
    uri = encode_session_uri("ab")
    sloppy = uri[:-1] + chr(ord(uri[-1]) + 1)  # same bytes, different unused bits
    assert base64.urlsafe_b64decode(sloppy.split(":")[1] + "==") == b'"ab"'
    with pytest.raises(InvalidReference):
        decode_session_uri(sloppy)


@pytest.mark.parametrize(
    "raw",
    [
        b'"\\u0061"',  # an escape where the character itself is canonical
        b' "a"',  # whitespace
        b'"a" ',
        b"42",
        b"null",
        b'["a"]',
        b'""',  # an empty id
        b'"\xff"',  # not UTF-8
        b"not json",
    ],
)
def test_uri_that_is_not_a_canonical_json_string_is_invalid_reference(raw):
    with pytest.raises(InvalidReference):
        decode_session_uri(uri_of_bytes(raw))


@pytest.mark.parametrize(
    "uri",
    [
        "",
        "cortex-session:",
        "cortex-session:ImFiYyI=",
        "cortex-session:Im FiYyI",
        "cortex-session:ImFiY",  # a length no base64 can have (5 mod 4 == 1)
        "CORTEX-SESSION:ImFiYyI",
        "cortex-sessions:ImFiYyI",
        "ImFiYyI",
    ],
)
def test_malformed_uri_is_invalid_reference(uri):
    with pytest.raises(InvalidReference):
        decode_session_uri(uri)
