"""Signed webhooks: ``POST /webhooks/<route>`` turns a JSON payload into a user message; replies go to a callback.

Requests are authenticated with the Standard Webhooks scheme (HMAC-SHA256 over ``<id>.<timestamp>.<body>`` in the
``webhook-id``, ``webhook-timestamp`` and ``webhook-signature`` headers, five minutes of clock tolerance), so any
sender with a Standard Webhooks library can post here and nothing unsigned gets in. Every route has its own
secret. The ``webhook-id`` is the inbound message id, so the gateway's durable inbox recognises a redelivery and
runs no second turn. The answer is 202 once the message is committed; the reply leaves later through the outbox,
POSTed to the route's ``callback_url`` (signed when the route has a ``callback_secret``) under a ``webhook-id``
that stays the same on every retry, so the receiver can drop repeats.

A request the adapter cannot use gets a small JSON ``{"error": ...}`` saying why: 404 unknown route, 413 too
large, 401 unsigned, badly signed or outside the tolerance, 400 malformed; 503 if the message could not be stored.
"""

from __future__ import annotations

from platforms.support.standard_webhooks import TOLERANCE_S, new_webhook_secret
from platforms.webhook.adapter import WebhookAdapter
from platforms.webhook.config import WebhookConfig, WebhookRoute
from platforms.webhook.sender import WebhookReply

__all__ = ["TOLERANCE_S", "WebhookAdapter", "WebhookConfig", "WebhookReply", "WebhookRoute", "new_webhook_secret"]
