"""Home channels (``/sethome``): where handoffs and notifications go on each platform account."""

from __future__ import annotations

from hermes_actors.store.records import HomeChannel
from hermes_actors.store.sql import SqlTable

__all__ = ["HomeChannels"]


class HomeChannels(SqlTable):
    """The ``/sethome`` table."""

    def set(self, home: HomeChannel) -> None:
        """Make ``home`` the home channel of its platform account."""
        self._db.execute(
            "INSERT INTO home_channels (platform, account_id, chat_id, thread_id, chat_type, scope_id, set_by, "
            "set_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (platform, account_id) DO UPDATE SET "
            "chat_id = excluded.chat_id, thread_id = excluded.thread_id, chat_type = excluded.chat_type, "
            "scope_id = excluded.scope_id, set_by = excluded.set_by, set_at = excluded.set_at",
            (
                home.platform,
                home.account_id,
                home.chat_id,
                home.thread_id,
                home.chat_type,
                home.scope_id,
                home.set_by,
                self._clock(),
            ),
        )

    def get(self, platform: str, account_id: str | None = None) -> HomeChannel | None:
        """Return the home channel of a platform account (any account of the platform when ``None``)."""
        where = "platform = ?" + ("" if account_id is None else " AND account_id = ?")
        params = (platform,) if account_id is None else (platform, account_id)
        rows = self._db.execute(
            "SELECT account_id, chat_id, thread_id, chat_type, scope_id, set_by FROM home_channels "
            f"WHERE {where} ORDER BY set_at DESC LIMIT 1",
            params,
        )
        if not rows:
            return None
        account, chat_id, thread_id, chat_type, scope_id, set_by = rows[0]
        return HomeChannel(
            platform=platform,
            account_id=str(account),
            chat_id=str(chat_id),
            thread_id=thread_id,
            chat_type=chat_type,
            scope_id=scope_id,
            set_by=set_by,
        )
