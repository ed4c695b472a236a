from __future__ import annotations

from datetime import datetime

from hermes_actors.ids import SessionKind, is_session_id, new_session_id


def test_gateway_ids_are_local_time_and_eight_hex_digits() -> None:
    sid = new_session_id(SessionKind.GATEWAY, now=datetime(2025, 3, 5, 9, 15, 23))
    assert sid.startswith("20250305_091523_")
    assert len(sid) == len("20250305_091523_a1b2c3d4")
    assert is_session_id(sid)


def test_cli_ids_have_six_hex_digits() -> None:
    sid = new_session_id(SessionKind.CLI, now=datetime(2025, 3, 5, 9, 15, 23))
    assert len(sid) == len("20250305_091523_a1b2c3")
    assert is_session_id(sid)


def test_ids_are_random_within_one_second() -> None:
    moment = datetime(2026, 11, 30, 12, 0, 0)
    assert len({new_session_id(now=moment) for _ in range(200)}) == 200


def test_shapes_other_than_the_two_are_not_session_ids() -> None:
    for text in ["", "20250305_091523", "20250305_091523_A1B2C3D4", "20250305_091523_a1b2c", "x" * 24]:
        assert not is_session_id(text)
