"""``hermesctl sessions rename/end/delete`` while ``hermesd`` runs: the control socket's :class:`SessionAdmin`.

Each request is applied by :class:`~hermes_actors.runtime.session_admin.LiveAdmin`, the path the API server's
operator routes take too: a rename or end runs as a control turn of the session's live actor, a delete ends a live
session first and then deletes it under its lease. A session another live process holds (a terminal chat started
before hermesd) is refused, naming that process.
"""

from __future__ import annotations

from hermes_actors.daemon.control import ADMIN_TIMEOUT_S, SessionAction, SessionAdmin, SessionAdminReply
from hermes_actors.errors import HermesError
from hermes_actors.runtime.gateway import Gateway
from hermes_actors.runtime.session_admin import LiveAdmin
from hermes_actors.store import EndReason

__all__ = ["SessionAdministration"]

_ADMIN_ENDS = (EndReason.OPERATOR, EndReason.USER_EXIT)  # hermesctl sessions end; a terminal chat its user closed


class SessionAdministration:
    """Applies :class:`SessionAdmin` requests on a running gateway."""

    def __init__(self, gateway: Gateway, *, timeout_s: float = ADMIN_TIMEOUT_S) -> None:
        self._admin = LiveAdmin(gateway, timeout_s=timeout_s)

    def handle(self, request: SessionAdmin) -> SessionAdminReply:
        """Apply ``request``; raise :class:`HermesError` saying why nothing changed."""
        record = self._admin.check(request.session_id)
        match request.action:
            case SessionAction.RENAME:
                return SessionAdminReply(session_id=record.id, title=self._admin.rename(record, request.title or ""))
            case SessionAction.END:
                if request.reason not in _ADMIN_ENDS:
                    raise HermesError(
                        f"an end through hermesd takes reason {' or '.join(_ADMIN_ENDS)}, not {request.reason!r}"
                    )
                return SessionAdminReply(session_id=record.id, ended=self._admin.end(record, request.reason))
            case SessionAction.DELETE:
                ended, deleted = self._admin.delete(record)
                return SessionAdminReply(session_id=record.id, ended=ended, deleted=deleted)
