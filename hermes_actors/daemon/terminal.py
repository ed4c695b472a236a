"""Terminal conversations (source ``cli``): one turn per line, answered in place.

Both the daemon (for ``hermesctl chat`` over the control socket) and ``hermesctl chat`` itself (in-process, when no
daemon runs) use :class:`TerminalChannel`, so a terminal session behaves the same either way: the message goes
through the durable inbox, the session's actor runs the turn, and the reply comes back through the outbox to the
waiting terminal.
"""

from __future__ import annotations

import concurrent.futures

from hermes_actors.daemon.control import Bind, BindReply, Chat, ChatReply, ControlError
from hermes_actors.errors import SessionNotFoundError
from hermes_actors.lifecycle.handlers import handed_off_to
from hermes_actors.messages import InboundMessage
from hermes_actors.routing import SessionSource, build_session_key
from hermes_actors.runtime.gateway import Gateway
from hermes_actors.waiters import ReplyWaiters

__all__ = ["PLATFORM", "TerminalChannel"]

PLATFORM = "cli"


class TerminalChannel:
    """Runs terminal turns on a gateway; its :attr:`waiters` must be among the gateway's senders."""

    def __init__(self) -> None:
        self.waiters = ReplyWaiters(PLATFORM)
        self._gateway: Gateway | None = None

    def attach(self, gateway: Gateway) -> None:
        """Use ``gateway`` (built with :attr:`waiters` as a sender)."""
        self._gateway = gateway

    @property
    def gateway(self) -> Gateway:
        if self._gateway is None:
            raise RuntimeError("TerminalChannel.attach(gateway) was not called")
        return self._gateway

    @staticmethod
    def source(chat_id: str, user_id: str, user_name: str | None = None) -> SessionSource:
        """The session source of terminal ``chat_id``."""
        return SessionSource(platform=PLATFORM, chat_type="dm", chat_id=chat_id, user_id=user_id, user_name=user_name)

    def chat(self, request: Chat) -> ChatReply:
        """Run ``request`` as a turn and wait for its reply."""
        source = self.source(request.chat_id, request.user_id, request.user_name)
        inbound = InboundMessage(source=source, text=request.text, message_id=request.message_id)
        future = self.waiters.expect(request.message_id)
        try:
            self.gateway.accept(inbound)
            reply = future.result(timeout=request.timeout_s)
        except concurrent.futures.TimeoutError:
            key = build_session_key(source, self.gateway.config.key_policy)
            raise ControlError(
                f"no reply within {request.timeout_s:.0f} s; the turn goes on and its reply will be stored in the "
                f"session of {key} (see 'hermesctl sessions list --source cli')"
            ) from None
        finally:
            self.waiters.forget(request.message_id)
        handed_off = handed_off_to(request.text, reply.text)
        return ChatReply(session_id=reply.session_id, text=reply.text, handed_off=handed_off)

    def bind(self, request: Bind) -> BindReply:
        """Point terminal ``chat_id`` at an existing session."""
        with self.gateway.read() as store:
            if store.find_session(request.session_id) is None:
                raise SessionNotFoundError(
                    f"no session {request.session_id!r}; list them with 'hermesctl sessions list'"
                )
        key = build_session_key(self.source(request.chat_id, request.user_id), self.gateway.config.key_policy)
        self.gateway.rebind(key, request.session_id)
        return BindReply(routing_key=key)
