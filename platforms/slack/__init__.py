"""Slack: the Events API over HTTP in, ``chat.postMessage`` out, for several apps and workspaces at once.

Each configured app (the account) has its own Request URL, ``POST /slack/events/<app>``, and its own signing
secret: a request counts only if ``X-Slack-Signature`` is ``v0=`` plus the hex HMAC-SHA256 of
``v0:<X-Slack-Request-Timestamp>:<raw body>`` and the timestamp is within five minutes of our clock (an old
request replayed later is refused). The ``url_verification`` challenge is answered; an event is answered 200 only
after ``inbox.accept`` has committed it (a few milliseconds, well inside Slack's 3 s, plus the time to fetch its
files when it has some), so an acknowledged event is never lost, and an event that could not be stored gets a 503
that Slack retries.

Slack redelivers an event it thinks was missed (``X-Slack-Retry-Num``, same ``event_id``) and delivers one user
message twice when the app subscribes to both ``message.*`` and ``app_mention`` (two ``event_id``s, one channel
and ``ts``). The inbound message id is ``<team>:<channel>:<ts>``, the same for all of these, so the durable
inbox drops every copy but the first and one message runs one turn.

The workspace (``team_id``) is the key's scope and the app its account: ``agent:main:slack.T1~app:dm:D1``. A DM
(``channel_type`` ``im``) is ``dm``; public and private channels and group DMs are ``group``, which a message
event and an ``app_mention`` for the same message (which has no ``channel_type``) agree on. ``thread_ts`` is the
thread; with ``reply_in_thread`` a top-level channel message is answered in a thread under it and that thread is
its session. Bots' messages (ours included) and subtypes that are not new user text (edits, deletions, joins)
are logged and skipped. Files keep a stand-in such as ``[image: plot.png]`` in the text and are downloaded with
the app's bot token into the media store before the event is accepted (:mod:`platforms.slack.files`), so the
stored message carries their attachment records; a file over ``media.max_bytes`` (Slack says its size) is refused
without being fetched. A copy of an event that arrives while the first copy's files are still downloading (Slack's
retry after 3 s, or the ``app_mention`` twin) waits for it rather than fetching them again.

Replies go through ``chat.postMessage`` with the app's bot token, into the thread, split at
``max_message_chars`` counted after escaping ``&``, ``<`` and ``>`` (Slack renders the agent's text literally,
not as mention or link markup). The default 3,900 stays under the about 4,000 characters Slack recommends for
one readable message (it truncates at 40,000). A reply whose later parts fail resumes after the parts already
posted. HTTP 429 and ``{"ok": false, "error": "ratelimited"}`` carry ``Retry-After``, which the outbox honours;
sends are paced per channel. A handoff opens a thread by posting an anchor message and using its ``ts``.

Socket Mode is not built: it needs an app-level token and a websocket session, and this transport covers the
same events.
"""

from __future__ import annotations

from platforms.slack.adapter import SlackAdapter
from platforms.slack.config import MAX_TEXT_CHARS, SlackApp, SlackConfig
from platforms.slack.events import REPLAY_WINDOW_S
from platforms.slack.sender import SlackSender

__all__ = ["MAX_TEXT_CHARS", "REPLAY_WINDOW_S", "SlackAdapter", "SlackApp", "SlackConfig", "SlackSender"]
