"""Who may POST activities: the Bot Connector's JWT, checked against its published signing keys.

Every request carries ``Authorization: Bearer <JWT>``. The token counts only if it is RS256-signed by a key of the
Bot Connector's JWKS (found through the OpenID metadata's ``jwks_uri``), its ``iss`` is
``https://api.botframework.com``, its ``aud`` is the bot's app id, ``exp`` and ``nbf`` hold within
``clock_skew_s``, the key endorses the activity's ``channelId`` (when it lists endorsements) and its
``serviceUrl`` claim is the activity's ``serviceUrl`` (a token lifted from one request cannot send replies of
another somewhere else). Keys are cached; a token naming a key id not in the cache fetches them again, at most
once per ``keys_min_refresh_s``, and they are fetched again anyway after ``keys_max_age_s``.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

import jwt
import msgspec

from platforms.support import downloads
from platforms.support.downloads import DownloadFailed
from platforms.support.http_client import open_session, shown

__all__ = [
    "ISSUER",
    "Bound",
    "KeysUnavailable",
    "SigningKeys",
    "TokenRefused",
    "bearer",
    "check_claims",
    "verify_token",
]

_log = logging.getLogger(__name__)

ISSUER = "https://api.botframework.com"
_METADATA_BYTES = 256 * 1024


class TokenRefused(Exception):
    """The request's token does not prove it comes from the Bot Connector for this bot; ``reason`` says why.

    ``status`` is 401, or 403 for a valid token whose key does not endorse the activity's channel (as Microsoft's
    authentication guide asks).
    """

    def __init__(self, reason: str, *, status: int = 401) -> None:
        super().__init__(reason)
        self.reason = reason
        self.status = status


class KeysUnavailable(Exception):
    """The signing keys could not be fetched, so no token can be checked now (the request may be retried)."""


class _Metadata(msgspec.Struct, frozen=True, kw_only=True):
    jwks_uri: str


class _Jwk(msgspec.Struct, frozen=True, kw_only=True):
    kid: str
    kty: str
    endorsements: list[str] | None = None


class _Jwks(msgspec.Struct, frozen=True, kw_only=True):
    keys: list[msgspec.Raw]


class _Key(msgspec.Struct, frozen=True, kw_only=True):
    key: Any  # jwt.PyJWK
    endorsements: frozenset[str] | None


class SigningKeys:
    """The Bot Connector's signing keys by key id, fetched from ``metadata_url`` and cached (on one event loop)."""

    def __init__(
        self,
        metadata_url: str,
        *,
        min_refresh_s: float,
        max_age_s: float,
        timeout_s: float,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._metadata_url = metadata_url
        self._min_refresh_s = min_refresh_s
        self._max_age_s = max_age_s
        self._timeout_s = timeout_s
        self._monotonic = monotonic
        self._keys: dict[str, _Key] = {}
        self._fetched_at: float | None = None
        self._lock: asyncio.Lock | None = None
        self.fetches = 0  # how many times the keys were fetched (for the banner and tests)

    async def key(self, kid: str) -> _Key | None:
        """The key ``kid``, fetching the keys when it is unknown (rate-limited) or the cache is old."""
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:
            now = self._monotonic()
            stale = self._fetched_at is None or now - self._fetched_at >= self._max_age_s
            may_refresh = self._fetched_at is None or now - self._fetched_at >= self._min_refresh_s
            if stale or (kid not in self._keys and may_refresh):
                await self._fetch()
            return self._keys.get(kid)

    async def _fetch(self) -> None:
        async with open_session() as session:
            try:
                fetched = await downloads.fetch(
                    session, self._metadata_url, limit=_METADATA_BYTES, timeout_s=self._timeout_s
                )
                metadata = msgspec.json.decode(fetched.data, type=_Metadata)
                fetched = await downloads.fetch(
                    session, metadata.jwks_uri, limit=_METADATA_BYTES, timeout_s=self._timeout_s
                )
                jwks = msgspec.json.decode(fetched.data, type=_Jwks)
            except DownloadFailed as exc:
                raise KeysUnavailable(f"the signing keys could not be fetched: {exc.detail}") from None
            except (msgspec.DecodeError, msgspec.ValidationError) as exc:
                raise KeysUnavailable(
                    f"the OpenID metadata or the keys at {shown(self._metadata_url)} could not be read ({exc})"
                ) from None
        keys: dict[str, _Key] = {}
        for raw in jwks.keys:
            try:
                jwk = msgspec.json.decode(raw, type=_Jwk)
                key = jwt.PyJWK(msgspec.json.decode(raw), algorithm="RS256")
            except (msgspec.DecodeError, msgspec.ValidationError, jwt.PyJWKError) as exc:
                _log.warning("teams: skipped a signing key that cannot be used (%s)", exc)
                continue
            endorsements = frozenset(jwk.endorsements) if jwk.endorsements is not None else None
            keys[jwk.kid] = _Key(key=key, endorsements=endorsements)
        self._keys = keys
        self._fetched_at = self._monotonic()
        self.fetches += 1
        _log.info("teams: fetched %d signing keys from %s", len(keys), shown(self._metadata_url))


class Bound(msgspec.Struct, frozen=True, kw_only=True):
    """What of an activity its token must vouch for."""

    service_url: str
    channel_id: str


def bearer(headers: Mapping[str, str]) -> str:
    """The token of ``Authorization: Bearer <token>``, or :class:`TokenRefused`."""
    authorization = headers.get("Authorization")
    if authorization is None:
        raise TokenRefused("the Authorization header is missing; the Bot Connector sends a Bearer token")
    scheme, _, token = authorization.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise TokenRefused("the Authorization header is not 'Bearer <token>'")
    return token.strip()


async def verify_token(
    token: str,
    keys: SigningKeys,
    *,
    app_id: str,
    leeway_s: float,
) -> tuple[dict[str, Any], frozenset[str] | None]:
    """The claims of ``token`` once its signature, issuer, audience and lifetime are good, with the endorsements
    of the key that signed it; :class:`TokenRefused` otherwise, :class:`KeysUnavailable` if the keys cannot be
    fetched."""
    try:
        header = jwt.get_unverified_header(token)
    except jwt.PyJWTError:
        raise TokenRefused("the Bearer token is not a JWT") from None
    kid, alg = header.get("kid"), header.get("alg")
    if alg != "RS256":
        raise TokenRefused(f"the token is signed with {str(alg)[:20]!r}; the Bot Connector signs with RS256")
    if not isinstance(kid, str) or not kid:
        raise TokenRefused("the token names no signing key (kid)")
    key = await keys.key(kid)
    if key is None:
        raise TokenRefused(f"the token is signed with key {kid[:60]!r}, which is not one of the Bot Connector's keys")
    try:
        claims = jwt.decode(
            token,
            key.key,
            algorithms=["RS256"],
            audience=app_id,
            issuer=ISSUER,
            leeway=leeway_s,
            options={"require": ["exp", "iss", "aud"]},
        )
    except jwt.ExpiredSignatureError:
        raise TokenRefused("the token has expired") from None
    except jwt.ImmatureSignatureError:
        raise TokenRefused("the token is not valid yet (nbf)") from None
    except jwt.InvalidAudienceError:
        raise TokenRefused("the token is for another bot (aud is not this bot's app id)") from None
    except jwt.InvalidIssuerError:
        raise TokenRefused(f"the token's issuer is not {ISSUER}") from None
    except jwt.InvalidSignatureError:
        raise TokenRefused("the token's signature does not verify") from None
    except jwt.PyJWTError as exc:
        raise TokenRefused(f"the token is not valid ({str(exc)[:120]})") from None
    return claims, key.endorsements


def check_claims(claims: Mapping[str, Any], endorsements: frozenset[str] | None, activity_fields: Bound) -> None:
    """The token binds the activity: its ``serviceUrl`` claim and the key's endorsements of the ``channelId``."""
    claimed = claims.get("serviceUrl") if "serviceUrl" in claims else claims.get("serviceurl")
    if claimed != activity_fields.service_url:
        raise TokenRefused("the token's serviceUrl claim is not the activity's serviceUrl")
    if endorsements is not None and activity_fields.channel_id not in endorsements:
        raise TokenRefused(f"the signing key does not endorse channel {activity_fields.channel_id[:40]!r}", status=403)
