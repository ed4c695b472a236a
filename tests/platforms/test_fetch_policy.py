"""The outbound-fetch policy against a canary on 127.0.0.1: what a payload-named URL may reach, redirects and
DNS answers included; and DingTalk's downloads, whose test module another change owns."""

from __future__ import annotations

import asyncio
import ipaddress
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from hermes_actors.errors import ConfigError
from hermes_actors.media import MediaConfig, MediaStore
from hermes_actors.testing import FakeClock
from platforms.dingtalk import DingtalkAdapter, DingtalkConfig, DingtalkRobot
from platforms.support.downloads import download
from platforms.support.fetch_policy import FetchPolicy, FetchRefused, FetchSettings, is_public
from platforms.support.http_client import open_session
from tests.platforms.dingtalk_fake import FakeDingtalk, deliver
from tests.platforms.fetch_canary import CANARY_BODY, Canary, running_canary, use_hosts
from tests.platforms.support import StartGateway, inbound_messages


@pytest.fixture
def canary() -> Iterator[Canary]:
    with running_canary() as server:
        yield server


@pytest.fixture
def hosts(monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    return use_hosts(monkeypatch)


def policy(
    *hosts: str, allow_private: tuple[str, ...] = (), extra: tuple[str, ...] = (), any_host: bool = False
) -> FetchPolicy:
    settings = FetchSettings(hosts=list(extra), allow_private=list(allow_private))
    return FetchPolicy(settings, platform="Example", hosts=None if any_host else hosts, setting="platforms.x.fetch")


def get(rules: FetchPolicy, url: str) -> bytes:
    async def main() -> bytes:
        async with open_session(rules) as session, session.get(url) as response:
            return await response.read()

    return asyncio.run(main())


def refused(rules: FetchPolicy, url: str) -> FetchRefused:
    with pytest.raises(FetchRefused) as raised:
        get(rules, url)
    return raised.value


# -- addresses ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "address",
    [
        "127.0.0.1",  # loopback
        "127.255.0.9",
        "10.1.2.3",  # private
        "172.16.0.1",
        "192.168.1.1",
        "169.254.169.254",  # link-local: the cloud metadata service
        "100.64.0.1",  # shared address space (CGNAT)
        "0.0.0.0",  # unspecified
        "224.0.0.1",  # multicast
        "239.255.255.250",
        "240.0.0.1",  # reserved
        "255.255.255.255",
        "192.0.0.8",  # IETF protocol assignments
        "198.18.0.1",  # benchmarking
        "::1",
        "::",
        "fe80::1",
        "fc00::1",  # unique local
        "fec0::1",  # site-local
        "ff0e::1",  # global-scope multicast
        "::ffff:127.0.0.1",  # IPv4-mapped
        "::ffff:10.0.0.1",
        "::ffff:169.254.169.254",
        "::127.0.0.1",  # IPv4-compatible (deprecated)
        "64:ff9b::7f00:1",  # NAT64 of 127.0.0.1
        "64:ff9b::a9fe:a9fe",  # NAT64 of 169.254.169.254
        "64:ff9b:1::1",  # local-use NAT64
        "2002:7f00:1::1",  # 6to4 of 127.0.0.1
        "2001:db8::1",  # documentation
    ],
)
def test_addresses_inside_a_network_are_not_public(address: str) -> None:
    assert not is_public(ipaddress.ip_address(address))


@pytest.mark.parametrize(
    "address", ["8.8.8.8", "20.190.128.1", "2606:4700::1111", "::ffff:8.8.8.8", "64:ff9b::808:808", "2002:808:808::1"]
)
def test_public_addresses_and_their_ipv6_forms_are_public(address: str) -> None:
    assert is_public(ipaddress.ip_address(address))


def test_a_platform_host_may_be_reached_at_a_public_address_and_not_at_a_private_one() -> None:
    rules = policy("smba.trafficmanager.net", "*.sharepoint.com")
    assert rules.allows_host("smba.trafficmanager.net")
    assert rules.allows_host("contoso-my.SharePoint.com.")
    assert not rules.allows_host("sharepoint.com")  # *.name is its subdomains only
    assert not rules.allows_host("evil.example")
    assert not rules.allows_host("smba.trafficmanager.net.evil.example")
    assert rules.allows_address("smba.trafficmanager.net", ipaddress.ip_address("52.112.1.1"))
    assert not rules.allows_address("smba.trafficmanager.net", ipaddress.ip_address("10.0.0.5"))


def test_allow_private_names_hosts_and_networks() -> None:
    rules = policy(any_host=True, allow_private=("files.internal", "*.corp.example", "10.20.0.0/16", "::1"))
    assert rules.allows_address("files.internal", ipaddress.ip_address("10.0.0.5"))
    assert rules.allows_address("a.corp.example", ipaddress.ip_address("192.168.1.1"))
    assert rules.allows_address("anything", ipaddress.ip_address("10.20.3.4"))
    assert rules.allows_address("anything", ipaddress.ip_address("::1"))
    assert not rules.allows_address("anything", ipaddress.ip_address("10.21.0.1"))
    assert not rules.allows_address("anything", ipaddress.ip_address("127.0.0.1"))


# -- every connection is checked ---------------------------------------------------------------------------------


def test_a_loopback_url_is_refused_before_anything_is_sent(canary: Canary) -> None:
    for url in (canary.url(), canary.url(host="[::ffff:127.0.0.1]"), canary.url(host="[::1]")):
        error = refused(policy(any_host=True), url)
        assert error.problem == "its address points into the bot's own network, which the bot does not fetch from"
    assert "platforms.x.fetch.allow_private" in str(error)
    assert canary.hits == []


def test_numeric_forms_of_loopback_are_refused(canary: Canary) -> None:
    for host in ("2130706433", "127.1", "0x7f000001", "017700000001"):
        with pytest.raises(aiohttp.ClientError):
            get(policy(any_host=True), canary.url(host=host))
    assert canary.hits == []


def test_a_host_that_is_not_the_platforms_is_refused_without_a_lookup(canary: Canary, hosts: dict[str, str]) -> None:
    hosts["evil.example"] = "8.8.8.8"  # never connected to: the name is refused first
    error = refused(policy("files.example.com"), "http://evil.example/x")
    assert error.problem == "it is offered from evil.example, which is not a Example file host"
    assert "add it to platforms.x.fetch.hosts" in str(error)


def test_a_platform_host_that_resolves_to_loopback_is_refused(canary: Canary, hosts: dict[str, str]) -> None:
    hosts["files.example.com"] = "127.0.0.1"  # DNS rebinding: the platform's name, the host's own address
    error = refused(policy("files.example.com"), canary.url(host="files.example.com"))
    assert "files.example.com is at 127.0.0.1, not a public address" in str(error)
    assert canary.hits == []


def test_the_system_resolver_is_checked_too(canary: Canary) -> None:
    error = refused(policy("localhost"), canary.url(host="localhost"))  # /etc/hosts: no DNS traffic
    assert "localhost is at " in str(error)
    assert canary.hits == []


def test_a_redirect_from_a_platform_host_into_the_network_is_refused(canary: Canary, hosts: dict[str, str]) -> None:
    hosts["files.example.com"] = hosts["cdn.example.com"] = "127.0.0.1"
    rules = policy("files.example.com", "cdn.example.com", allow_private=("files.example.com",))
    to_address = refused(rules, canary.redirect(canary.url(), host="files.example.com"))
    assert f"http://127.0.0.1:{canary.port}/metrics: 127.0.0.1 is not a public address" in str(to_address)
    elsewhere = refused(rules, canary.redirect("http://evil.example/", host="files.example.com"))
    assert elsewhere.problem == "it is offered from evil.example, which is not a Example file host"
    to_name = refused(rules, canary.redirect(canary.url(host="cdn.example.com"), host="files.example.com"))
    assert "cdn.example.com is at 127.0.0.1" in str(to_name)
    assert len(canary.redirect_hits()) == 3
    assert canary.secret_hits() == []


def test_a_host_allowed_private_is_fetched_and_redirects_to_it_are_followed(
    canary: Canary, hosts: dict[str, str]
) -> None:
    hosts["files.example.com"] = "127.0.0.1"
    rules = policy("files.example.com", allow_private=("files.example.com",))
    assert get(rules, canary.url(host="files.example.com")) == CANARY_BODY
    inner = canary.url("/file", host="files.example.com")
    assert get(rules, canary.redirect(inner, host="files.example.com")) == CANARY_BODY
    assert canary.secret_hits() == ["/metrics", "/file"]
    network = policy("127.0.0.1", allow_private=("127.0.0.0/8",))
    assert get(network, canary.url("/by-network")) == CANARY_BODY


def test_a_refused_download_is_a_refused_attachment_saying_why_and_a_warning(
    canary: Canary, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    media = MediaStore(tmp_path / "media", MediaConfig())

    async def main() -> Any:
        async with open_session(policy(any_host=True)) as session:
            return await download(media, session, canary.url(), kind="document", name="notes.txt", where="example")

    with caplog.at_level(logging.WARNING):
        record = asyncio.run(main())
    assert (record.path, record.error) == (
        None,
        "its address points into the bot's own network, which the bot does not fetch from",
    )
    assert "example: fetching notes.txt from http://127.0.0.1" in caplog.text
    assert "refused by the fetch policy" in caplog.text
    assert canary.hits == []


@pytest.mark.parametrize(
    ("settings", "path", "words"),
    [
        (FetchSettings(hosts=["https://files.example.com"]), "platforms.x.fetch.hosts[0]", "not a host name"),
        (FetchSettings(hosts=["ok.example", "a b"]), "platforms.x.fetch.hosts[1]", "no scheme, port or path"),
        (FetchSettings(allow_private=["10.0.0.1/8"]), "platforms.x.fetch.allow_private[0]", "host bits set"),
        (FetchSettings(allow_private=["files:8080"]), "platforms.x.fetch.allow_private[0]", "neither a host name"),
    ],
)
def test_settings_errors_name_the_entry(settings: FetchSettings, path: str, words: str) -> None:
    with pytest.raises(ConfigError, match=words) as raised:
        settings.check("platforms.x.fetch")
    assert raised.value.path == path


# -- DingTalk: downloadUrl comes from DingTalk's answer --------------------------------------------------------


@pytest.fixture
def ding() -> Iterator[FakeDingtalk]:
    fake = FakeDingtalk()
    fake.add_app("ding-main", "main-secret")
    fake.start()
    yield fake
    fake.stop()


def start_ding(ding: FakeDingtalk, start_gateway: StartGateway, **options: Any) -> tuple[DingtalkAdapter, Any]:
    clock = FakeClock()
    robots = {"main": DingtalkRobot(app_key="ding-main", app_secret="main-secret")}
    adapter = DingtalkAdapter(
        DingtalkConfig(port=0, api_base_url=ding.base_url, robots=robots, **options), environ={}, clock=clock
    )
    return adapter, start_gateway(adapter, clock=clock)


def ding_picture(ding: FakeDingtalk, adapter: DingtalkAdapter, clock_ms: int, code: str, url: str) -> None:
    ding.files[code] = (b"\x89PNG\r\n\x1a\n", "image/png")
    ding.download_urls[code] = url
    payload = ding.callback("ding-main", None, msg_id=f"m-{code}", content={"downloadCode": code})
    status, answer = deliver(f"{adapter.url}/dingtalk/robot/main", payload, secret="main-secret", timestamp_ms=clock_ms)
    assert (status, answer.get("accepted")) == (200, True), answer


def test_dingtalk_does_not_fetch_a_download_url_inside_the_network(
    ding: FakeDingtalk, start_gateway: StartGateway, canary: Canary, hosts: dict[str, str]
) -> None:
    adapter, gateway = start_ding(ding, start_gateway)
    hosts["down.dingtalk.com"] = "127.0.0.1"
    now = int(FakeClock().now * 1000)  # each callback signed at its own millisecond: a repeated pair is a replay
    ding_picture(ding, adapter, now, "loopback", canary.url())
    ding_picture(ding, adapter, now + 1, "rebound", canary.url(host="down.dingtalk.com"))
    errors = {m.message_id: m.attachments[0].error for m in inbound_messages(gateway, "dingtalk")}
    assert errors == {
        "m-loopback": "its address points into the bot's own network, which the bot does not fetch from",
        "m-rebound": "its address points into the bot's own network, which the bot does not fetch from",
    }
    assert canary.hits == []


def test_dingtalk_follows_no_redirect_into_the_network_and_fetches_what_is_allowed(
    ding: FakeDingtalk, start_gateway: StartGateway, canary: Canary, hosts: dict[str, str]
) -> None:
    hosts["down.dingtalk.com"] = "127.0.0.1"
    adapter, gateway = start_ding(ding, start_gateway, fetch=FetchSettings(allow_private=["down.dingtalk.com"]))
    now = int(FakeClock().now * 1000)
    ding_picture(ding, adapter, now, "moved", canary.redirect(canary.url(), host="down.dingtalk.com"))
    ding_picture(ding, adapter, now + 1, "allowed", canary.url("/file", host="down.dingtalk.com"))
    attachments = {m.message_id: m.attachments[0] for m in inbound_messages(gateway, "dingtalk")}
    assert attachments["m-moved"].error == (
        "its address points into the bot's own network, which the bot does not fetch from"
    )
    assert attachments["m-allowed"].error is None
    assert attachments["m-allowed"].path is not None
    assert Path(attachments["m-allowed"].path).read_bytes() == CANARY_BODY
    assert canary.secret_hits() == ["/file"]


def test_dingtalk_names_no_file_hosts_so_its_fetch_hosts_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="any public host") as raised:
        DingtalkConfig(fetch=FetchSettings(hosts=["down.dingtalk.com"]))
    assert raised.value.path == "platforms.dingtalk.fetch.hosts"
