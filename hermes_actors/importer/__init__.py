"""Migration from the reference system: ``hermesctl import-hermes PATH/state.db``.

:func:`import_hermes` reads the reference system's ``state.db`` (schema version 22) read-only, as one
snapshot, and imports its sessions, messages and routing table into a :class:`~hermes_actors.store.Store`,
giving keys and sessions the bot account and workspace the live adapters key them by (:mod:`.tenancy`), and
applying the seeds' rules to keys without a workspace. It is idempotent and resumable; the returned
:class:`ImportReport` says what was imported, skipped, refused or stored differently, and why.

- :mod:`.source` reads and checks the other database; :mod:`.content` holds its structured-content encoding
  and how we store it; :mod:`.tenancy` says where a chat continues here (platform, account, workspace);
  :mod:`.keys` translates its routing keys and :mod:`.routes` imports its routing table; :mod:`.target` reads
  and writes our store; :mod:`.run` decides what goes where; :mod:`.report` is the outcome.
"""

from __future__ import annotations

from hermes_actors.importer.report import ImportReport, MessageNote, RouteAction, RouteNote, SessionNote, TitleNote
from hermes_actors.importer.run import COMPACTED_SUFFIX, DEFAULT_BATCH_MESSAGES, Progress, import_hermes
from hermes_actors.importer.source import HERMES_SCHEMA_VERSION, HermesSource, SourceDatabaseError
from hermes_actors.importer.target import LEDGER_PREFIX, RAW_PREFIX, Ledger
from hermes_actors.importer.tenancy import PLATFORM_NAMES, LiveAccounts, LivePlatform, ScopeRule
from hermes_actors.store.content import HERMES_JSON_PREFIX, hermes_content, split_content, store_content

__all__ = [
    "COMPACTED_SUFFIX",
    "DEFAULT_BATCH_MESSAGES",
    "HERMES_JSON_PREFIX",
    "HERMES_SCHEMA_VERSION",
    "LEDGER_PREFIX",
    "PLATFORM_NAMES",
    "RAW_PREFIX",
    "HermesSource",
    "ImportReport",
    "Ledger",
    "LiveAccounts",
    "LivePlatform",
    "MessageNote",
    "Progress",
    "RouteAction",
    "RouteNote",
    "ScopeRule",
    "SessionNote",
    "SourceDatabaseError",
    "TitleNote",
    "hermes_content",
    "import_hermes",
    "split_content",
    "store_content",
]
