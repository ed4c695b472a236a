"""A request's own busy policy: what its message does when its session is already answering another one.

The ``X-Hermes-Busy`` header (``queue``, ``collect``, ``interrupt``, ``reject`` or ``steer``), else the body's
``hermes_busy`` field, else ``metadata.hermes_busy`` (for a client whose SDK sends only known fields), overrides the
configured policy (``busy:`` in ``config.yaml``) for that message; without any, the configured one applies. A
message refused as busy is answered 409 ``session_busy`` with ``Retry-After`` (``busy.retry_after_s``): nothing of
it was run, so sending it again is safe.
"""

from __future__ import annotations

from collections.abc import Mapping

import msgspec

from hermes_actors.messages import BusyPolicy
from platforms.api_server.wire import ApiError

__all__ = ["BUSY_FIELD", "BUSY_HEADER", "requested_busy"]

BUSY_HEADER = "X-Hermes-Busy"
BUSY_FIELD = "hermes_busy"
_CHOICES = ", ".join(policy.value for policy in BusyPolicy)


def requested_busy(
    headers: Mapping[str, str], field: str | None = None, metadata: Mapping[str, object] | None = None
) -> BusyPolicy | msgspec.UnsetType:
    """The policy a request asks for (see the module docstring), ``UNSET`` when it asks for none; a 400 naming
    the header or field for a value that is not a policy."""
    given = (
        (BUSY_HEADER, headers.get(BUSY_HEADER)),
        (BUSY_FIELD, field),
        (f"metadata.{BUSY_FIELD}", (metadata or {}).get(BUSY_FIELD)),
    )
    for where, value in given:
        if value is None or (isinstance(value, str) and not value.strip()):
            continue
        try:
            return BusyPolicy(value.strip().lower() if isinstance(value, str) else repr(value))
        except ValueError:
            raise ApiError(
                400,
                f"{where} must be one of {_CHOICES} (what the message does while its session is busy); got {value!r}",
                code="invalid_value",
                param=where,
            ) from None
    return msgspec.UNSET
