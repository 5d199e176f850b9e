"""The shared opaque cursor: round trip, and junk refused with ``invalid_cursor``."""

import pytest

from ucp_gateway.cursors import decode_cursor, encode_cursor
from ucp_gateway.errors import BadRequest


@pytest.mark.parametrize("key", ["a", "payments.refund", "crm_contact_update", "fleurs-été", "x" * 64])
def test_round_trip(key):
    cursor = encode_cursor(key)
    assert "=" not in cursor and decode_cursor(cursor, max_length=64) == key


@pytest.mark.parametrize(
    "junk", ["", "%%%", "AAAA", "A", "7aCA", "YQ==", "YR", "a b", "cGF5bWVudHMucmVmdW5k\n", encode_cursor("y" * 65)]
)
def test_junk_is_invalid_cursor(junk):
    with pytest.raises(BadRequest) as e:
        decode_cursor(junk, max_length=64)
    assert e.value.code == "invalid_cursor" and e.value.http_status == 400
