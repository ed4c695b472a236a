"""Email: IMAP in (IDLE where the server has it, polling otherwise), SMTP out, threaded the way mail clients thread.

Each configured account (a mailbox; its name is the account in session keys) is read on its own thread
(:mod:`platforms.email.poller`). Its position is ``UIDVALIDITY:UID``, committed in the same transaction as the inbox
rows it covers; the dedupe key is the ``Message-ID``. Only mail from ``allowed_senders`` starts turns (an open
mailbox must not become an open agent); other mail, automatic replies and bounces are skipped with a log line.
The sender is the one mailbox of the one From header, read strictly; with ``trusted_authserv_id``, the receiving
server's topmost ``Authentication-Results`` must report ``dmarc=pass`` for its domain
(:mod:`platforms.email.authres`).
The turn's text is what the sender wrote this time: quoted history and the signature are cut
(:mod:`platforms.email.mail`), and the whole message is kept in the media store beside the attached files.

Sessions are one per correspondent (``agent:main:email~<account>:dm:<address>``) or, with ``sessions: thread``,
one per mail thread (``…:dm:<address>:<root Message-ID>``). Replies (:mod:`platforms.email.sender`) carry
``In-Reply-To``, ``References`` and ``Subject: Re: …`` from the mail they answer (:mod:`platforms.email.threads`
keeps them across restarts); SMTP 4xx answers are retried, 5xx give the reply up. The standard library does the
protocols (:mod:`imaplib`, :mod:`smtplib`, :mod:`email`): no extra is needed.
"""

from __future__ import annotations

from platforms.email.adapter import EmailAdapter
from platforms.email.config import EmailAccount, EmailConfig, cluster_parts
from platforms.email.mail import parse_mail, strip_history
from platforms.email.sender import EmailSender

__all__ = ["EmailAccount", "EmailAdapter", "EmailConfig", "EmailSender", "cluster_parts", "parse_mail", "strip_history"]
