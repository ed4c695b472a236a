"""SMS through Twilio: the incoming-message webhook in (form-encoded, ``X-Twilio-Signature``), the Messages API out.

``config`` is the ``platforms.sms`` section (one Twilio account and the numbers it answers; the receiving number
is the account in session keys), ``signature`` how Twilio signs a request, ``events`` the form turned into an
inbound message deduplicated on ``MessageSid``, ``files`` MMS media downloaded into the media store, ``sender`` the
replies (split at ``max_message_chars``, paced per number), and ``adapter`` the webhook server.
"""

from __future__ import annotations

from platforms.sms.adapter import EMPTY_TWIML, WEBHOOK_PATH, SmsAdapter
from platforms.sms.config import DEFAULT_API_BASE_URL, MAX_BODY_CHARS, SmsConfig
from platforms.sms.events import PLATFORM, Incoming, MediaRef, inbound_of, parse_form
from platforms.sms.sender import SmsSender
from platforms.sms.signature import SIGNATURE_HEADER, signature_of, signed

__all__ = [
    "DEFAULT_API_BASE_URL",
    "EMPTY_TWIML",
    "MAX_BODY_CHARS",
    "PLATFORM",
    "SIGNATURE_HEADER",
    "WEBHOOK_PATH",
    "Incoming",
    "MediaRef",
    "SmsAdapter",
    "SmsConfig",
    "SmsSender",
    "inbound_of",
    "parse_form",
    "signature_of",
    "signed",
]
