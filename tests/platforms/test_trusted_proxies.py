"""``platforms.api_server.trusted_proxies``: whose forwarding headers are believed, and how far along the chain
(the HTTP round trip, cookies and the throttle included, is in :mod:`tests.platforms.test_console`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import pytest
from hypothesis import given
from hypothesis import strategies as st
from multidict import CIMultiDict

from hermes_actors.errors import ConfigError
from platforms.api_server.config import ApiServerConfig, ConsoleConfig
from platforms.api_server.proxies import Seen, TrustedProxies, address_of

PROXIES = TrustedProxies(["127.0.0.1", "10.0.0.0/8", "fd00::/8"])


def _seen(
    peer: str | None,
    headers: Mapping[str, str] | Sequence[tuple[str, str]] = (),
    forwarded: Sequence[dict[str, str]] = (),
) -> Seen:
    return PROXIES.seen(peer, CIMultiDict(headers), forwarded)


def test_a_peer_that_is_not_a_trusted_proxy_is_seen_as_it_is() -> None:
    spoof = {"X-Forwarded-For": "10.0.0.1", "X-Forwarded-Proto": "https", "X-Forwarded-Host": "evil.example"}
    assert _seen("203.0.113.7", spoof) == Seen()
    assert _seen(None, spoof) == Seen()
    assert TrustedProxies([]).seen("127.0.0.1", CIMultiDict(spoof), ()) == Seen()


def test_the_chain_is_believed_from_the_right_only_while_its_writer_is_trusted() -> None:
    # a client's own X-Forwarded-For, to which the proxy appended the address it saw
    assert _seen("127.0.0.1", {"X-Forwarded-For": "10.0.0.1, 203.0.113.7"}).remote == "203.0.113.7"
    # two proxies: the outer one's record of the client is believed because the inner one is trusted
    assert _seen("10.0.0.5", {"X-Forwarded-For": "198.51.100.2, 10.0.0.9"}).remote == "198.51.100.2"
    # every hop a proxy: the leftmost is the client
    assert _seen("127.0.0.1", {"X-Forwarded-For": "10.0.0.3, 10.0.0.9"}).remote == "10.0.0.3"
    # several header lines are one list; a mapped IPv4 peer is its IPv4 address
    two_lines = [("X-Forwarded-For", "10.0.0.1"), ("X-Forwarded-For", "198.51.100.2")]
    assert _seen("::ffff:127.0.0.1", two_lines).remote == "198.51.100.2"
    assert _seen("127.0.0.1", {"X-Forwarded-For": "[2001:db8::1]:4711"}).remote == "2001:db8::1"
    assert _seen("127.0.0.1", {"X-Forwarded-For": "unknown"}).remote == "unknown"


def test_the_proto_and_host_are_those_the_believed_hop_recorded() -> None:
    one = {"X-Forwarded-For": "203.0.113.7", "X-Forwarded-Proto": "https", "X-Forwarded-Host": "chat.example.org"}
    assert _seen("127.0.0.1", one) == Seen(remote="203.0.113.7", scheme="https", host="chat.example.org")
    # the client wrote "https", the proxy appended what it saw: the proxy's word counts
    assert _seen("127.0.0.1", {"X-Forwarded-For": "203.0.113.7", "X-Forwarded-Proto": "https, http"}).scheme == "http"
    # each of two proxies appended: the outer one's is the client's connection
    aligned = {"X-Forwarded-For": "203.0.113.7, 10.0.0.9", "X-Forwarded-Proto": "https, http"}
    assert _seen("10.0.0.5", aligned).scheme == "https"
    # one value for the whole chain (the outer proxy set it, the inner one kept it)
    assert _seen("10.0.0.5", {"X-Forwarded-For": "203.0.113.7, 10.0.0.9", "X-Forwarded-Proto": "https"}).scheme == (
        "https"
    )
    assert _seen("127.0.0.1", {"X-Forwarded-Proto": "HTTPS"}) == Seen(scheme="https")  # no address: the peer's
    nonsense = {"X-Forwarded-Proto": "javascript", "X-Forwarded-Host": "evil.example/path"}
    assert _seen("127.0.0.1", nonsense) == Seen()


def test_forwarded_is_read_when_no_x_forwarded_header_is_there() -> None:
    elements = [{"for": "198.51.100.9"}, {"for": "[2001:db8::7]:4711", "proto": "https", "host": "chat.example.org"}]
    assert _seen("127.0.0.1", forwarded=elements) == Seen(remote="2001:db8::7", scheme="https", host="chat.example.org")
    through_two = [{"for": "198.51.100.9", "proto": "https"}, {"for": "10.0.0.9", "proto": "http"}]
    assert _seen("127.0.0.1", forwarded=through_two) == Seen(remote="198.51.100.9", scheme="https")
    assert _seen("127.0.0.1", {"X-Forwarded-For": "203.0.113.7"}, elements).remote == "203.0.113.7"


@given(
    spoofed=st.lists(st.text(max_size=30) | st.sampled_from(["10.0.0.1", "127.0.0.1", "fd00::1", "[::1]:80"])),
    client=st.ip_addresses(v=4).filter(lambda ip: not PROXIES.trusts(str(ip))).map(str),
    proxies=st.lists(st.sampled_from(["10.0.0.2", "10.9.9.9", "fd00::5"]), max_size=3),
    proto=st.text(max_size=10),
)
def test_whatever_a_client_writes_the_address_is_the_one_the_first_trusted_proxy_saw(
    spoofed: list[str], client: str, proxies: list[str], proto: str
) -> None:
    chain = ", ".join([*(s.replace(",", " ") for s in spoofed), client, *proxies])
    headers = {"X-Forwarded-For": chain, "X-Forwarded-Proto": f"{proto.replace(',', ' ')}, http"}
    seen = _seen("127.0.0.1", headers, [{"for": "10.0.0.1", "proto": "https"}])
    assert seen.remote == client
    assert seen.scheme in (None, "http", "https")
    assert address_of(client) == client


def test_a_trusted_proxy_that_is_not_an_address_or_network_is_refused_naming_the_setting() -> None:
    with pytest.raises(ConfigError, match=r"trusted_proxies\[1\].*CIDR"):
        ApiServerConfig(trusted_proxies=("127.0.0.1", "proxy.internal"))
    assert ApiServerConfig(trusted_proxies=("10.0.0.0/8", "::1")).trusted_proxies == ("10.0.0.0/8", "::1")
    assert ApiServerConfig().console == ConsoleConfig(secure_cookie="auto")
