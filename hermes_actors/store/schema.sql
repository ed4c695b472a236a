-- hermes-actors state database, schema version 14.
--
-- This file is the single source of truth for the schema. hermes_actors/store/schema.sql is a copy shipped in
-- the wheel (tests/store/test_schema.py proves they are equal). A fresh database gets this file in one
-- transaction and PRAGMA user_version = 14; older databases are upgraded by the steps in
-- hermes_actors/store/migrations.py, which must end in exactly this schema.
--
-- Full-text search stores message text once: both FTS5 tables are external-content tables over `messages`,
-- kept in sync by the triggers below.
--   messages_fts      tokenizer hermes_words: SQLite's unicode61 (diacritics folded) with every Chinese,
--                     Japanese or Korean character emitted as its own token, so one- and two-character CJK
--                     queries are indexed lookups (a phrase of unigrams), not LIKE scans.
--   messages_fts_cjk  the built-in trigram tokenizer, detail=none, over messages that contain CJK text only;
--                     serves CJK substring queries of three or more characters with LIKE.
-- The hermes_words tokenizer is registered by hermes_actors.store.connection on every connection; a plain
-- sqlite3 shell can read every table but cannot write messages (the triggers need the tokenizer).

CREATE TABLE sessions (
    ref               INTEGER PRIMARY KEY,        -- compact key for messages (version 2); ids are 24 bytes
    id                TEXT NOT NULL UNIQUE,
    source            TEXT NOT NULL,              -- platform name: cli, telegram, slack, api_server, ...
    user_id           TEXT,
    user_name         TEXT,
    chat_id           TEXT,
    chat_type         TEXT,
    chat_name         TEXT,
    thread_id         TEXT,
    scope_id          TEXT,                       -- workspace / tenant / guild
    account_id        TEXT,                       -- which of our bot accounts received it
    routing_key       TEXT,                       -- the key that created it (routes may move later)
    model             TEXT,
    title             TEXT,
    system_prompt     TEXT,                       -- the system message as sent, frozen when the session started
    parent_session_id TEXT REFERENCES sessions (id) ON DELETE SET NULL,
    started_at        REAL NOT NULL,              -- unix seconds
    ended_at          REAL,
    end_reason        TEXT,
    message_count     INTEGER NOT NULL DEFAULT 0,
    tool_call_count   INTEGER NOT NULL DEFAULT 0,
    input_tokens      INTEGER NOT NULL DEFAULT 0,
    output_tokens     INTEGER NOT NULL DEFAULT 0,
    last_active_at    REAL NOT NULL,
    -- What goes before the conversation, frozen when the session starts (version 6): system_prompt above is the
    -- exact system message sent, tools the JSON array of chat-completions tool entries offered (NULL: a session
    -- from before version 6, frozen by its next turn). Both change only with a new session or a compression child.
    tools             TEXT,
    tokens_estimated  INTEGER NOT NULL DEFAULT 0,  -- 1: a turn's token counts were estimated (no usage reported)
    -- The named agent (config.yaml's agents.<name>) chosen when the session started, kept for its life and by its
    -- compression children (version 8); NULL: the default agent (the agent: section), as before version 8.
    agent             TEXT,
    CHECK ((ended_at IS NULL) = (end_reason IS NULL))
);
CREATE UNIQUE INDEX sessions_title ON sessions (title) WHERE title IS NOT NULL;
CREATE INDEX sessions_last_active ON sessions (last_active_at);
-- Titled sessions in activity order, the title with them (version 14): discovery's title pass walks only these and
-- tests its LIKE on the index entry, whatever the number of untitled sessions.
CREATE INDEX sessions_titled ON sessions (last_active_at, id, title) WHERE title IS NOT NULL;
CREATE INDEX sessions_source ON sessions (source, last_active_at);
CREATE INDEX sessions_parent ON sessions (parent_session_id) WHERE parent_session_id IS NOT NULL;

-- Order within a session is by id, never by created_at. A message names its session by sessions.ref (an integer)
-- rather than its 24-byte id: that is most of a message's row and index overhead.
CREATE TABLE messages (
    id                  INTEGER PRIMARY KEY AUTOINCREMENT,
    session_ref         INTEGER NOT NULL REFERENCES sessions (ref) ON DELETE CASCADE,
    role                TEXT NOT NULL CHECK (role IN ('system', 'user', 'assistant', 'tool')),
    content             TEXT,
    tool_calls          TEXT,                     -- JSON array, as the agent produced it
    tool_name           TEXT,
    tool_call_id        TEXT,
    token_count         INTEGER,
    created_at          REAL NOT NULL,
    platform_message_id TEXT
);
CREATE INDEX messages_session ON messages (session_ref, id);

CREATE VIRTUAL TABLE messages_fts USING fts5 (
    content, content = 'messages', content_rowid = 'id', tokenize = 'hermes_words'
);
-- Plain trigram (no remove_diacritics, which would stop FTS5 from answering LIKE from the index).
CREATE VIRTUAL TABLE messages_fts_cjk USING fts5 (
    content, content = 'messages', content_rowid = 'id', tokenize = 'trigram', detail = none
);

-- Every message is a document, a NULL content (a tool call) an empty one: the index then matches the table row
-- for row, which is what FTS5's integrity-check (hermesctl db check) compares (version 4).
CREATE TRIGGER messages_fts_insert AFTER INSERT ON messages BEGIN
    INSERT INTO messages_fts (rowid, content) VALUES (new.id, new.content);
END;
CREATE TRIGGER messages_fts_delete AFTER DELETE ON messages BEGIN
    INSERT INTO messages_fts (messages_fts, rowid, content) VALUES ('delete', old.id, old.content);
END;
CREATE TRIGGER messages_fts_update AFTER UPDATE OF content ON messages BEGIN
    INSERT INTO messages_fts (messages_fts, rowid, content) VALUES ('delete', old.id, old.content);
    INSERT INTO messages_fts (rowid, content) VALUES (new.id, new.content);
END;
-- The character class lists the CJK blocks hermes_words splits (kana, CJK ideographs, Hangul, compatibility
-- ideographs, half-width kana, supplementary ideographs); GLOB compares code points.
CREATE TRIGGER messages_fts_cjk_insert AFTER INSERT ON messages
    WHEN new.content GLOB '*[ᄀ-ᇿ぀-ヿㄱ-ㆎ㐀-䶿一-鿿가-힯豈-﫿ｦ-ﾟ𠀀-𱍊]*' BEGIN
    INSERT INTO messages_fts_cjk (rowid, content) VALUES (new.id, new.content);
END;
CREATE TRIGGER messages_fts_cjk_delete AFTER DELETE ON messages
    WHEN old.content GLOB '*[ᄀ-ᇿ぀-ヿㄱ-ㆎ㐀-䶿一-鿿가-힯豈-﫿ｦ-ﾟ𠀀-𱍊]*' BEGIN
    INSERT INTO messages_fts_cjk (messages_fts_cjk, rowid, content) VALUES ('delete', old.id, old.content);
END;
CREATE TRIGGER messages_fts_cjk_update AFTER UPDATE OF content ON messages BEGIN
    INSERT INTO messages_fts_cjk (messages_fts_cjk, rowid, content)
        SELECT 'delete', old.id, old.content
        WHERE old.content GLOB '*[ᄀ-ᇿ぀-ヿㄱ-ㆎ㐀-䶿一-鿿가-힯豈-﫿ｦ-ﾟ𠀀-𱍊]*';
    INSERT INTO messages_fts_cjk (rowid, content)
        SELECT new.id, new.content
        WHERE new.content GLOB '*[ᄀ-ᇿ぀-ヿㄱ-ㆎ㐀-䶿一-鿿가-힯豈-﫿ｦ-ﾟ𠀀-𱍊]*';
END;

-- Files that came with user messages (version 4). The bytes are never in the database: they live once under the
-- media directory beside the database file ($HERMES_HOME/media), named by their sha256; a row only describes them.
-- Rows go with their message; a file goes when the last row naming it is deleted (hermes_actors.store.attachments).
CREATE TABLE attachments (
    id          INTEGER PRIMARY KEY,
    message_id  INTEGER NOT NULL REFERENCES messages (id) ON DELETE CASCADE,
    kind        TEXT NOT NULL,                    -- image, audio, video, document
    mime_type   TEXT,
    size        INTEGER,                          -- bytes, when known
    path        TEXT,                             -- relative to the media directory; NULL when nothing was saved
    sha256      TEXT,                             -- hex digest of the saved bytes
    source_url  TEXT,                             -- where the platform offered it, if anywhere
    name        TEXT,                             -- the file name the sender gave
    error       TEXT,                             -- why it was not read (too large, kind not allowed, download failed)
    created_at  REAL NOT NULL
);
CREATE INDEX attachments_message ON attachments (message_id);
CREATE INDEX attachments_path ON attachments (path) WHERE path IS NOT NULL;

-- The routing directory: which session a routing key (hermes_actors.routing.build_session_key) reaches now.
-- /resume, handoff and compression only re-point rows here.
CREATE TABLE routes (
    routing_key TEXT PRIMARY KEY,
    session_id  TEXT NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
    updated_at  REAL NOT NULL
) WITHOUT ROWID;
CREATE INDEX routes_session ON routes (session_id);

-- Durable inbound queue and dedupe: a row is committed before the platform is acknowledged, and its turn
-- marks it done in the same transaction that writes the transcript. The unique key drops redeliveries.
CREATE TABLE inbox (
    id                  INTEGER PRIMARY KEY AUTOINCREMENT,
    platform            TEXT NOT NULL,
    account_id          TEXT NOT NULL DEFAULT '',
    platform_message_id TEXT NOT NULL,
    routing_key         TEXT NOT NULL,
    session_id          TEXT,                     -- set when a turn picks it up
    payload             BLOB NOT NULL,            -- msgspec-encoded inbound message
    received_at         REAL NOT NULL,
    state               TEXT NOT NULL DEFAULT 'pending' CHECK (state IN ('pending', 'done', 'rejected')),
    completed_at        REAL,
    owner               TEXT,                     -- version 5: the lease owner whose process runs the turn
    -- version 9: a platform's message, or a cluster's control row (a reset, an operator's change; platform '')
    kind                TEXT NOT NULL DEFAULT 'message' CHECK (kind IN ('message', 'timer', 'admin')),
    UNIQUE (platform, account_id, platform_message_id)
);
CREATE INDEX inbox_pending ON inbox (id) WHERE state = 'pending';
CREATE INDEX inbox_completed ON inbox (completed_at) WHERE completed_at IS NOT NULL;

-- Replies committed with their turn and not yet confirmed delivered.
CREATE TABLE outbox (
    id                  INTEGER PRIMARY KEY AUTOINCREMENT,
    session_id          TEXT REFERENCES sessions (id) ON DELETE SET NULL,
    platform            TEXT NOT NULL,
    account_id          TEXT NOT NULL DEFAULT '',
    chat_id             TEXT,
    thread_id           TEXT,
    payload             BLOB NOT NULL,            -- msgspec-encoded outbound message
    created_at          REAL NOT NULL,
    attempts            INTEGER NOT NULL DEFAULT 0,
    next_attempt_at     REAL NOT NULL DEFAULT 0,
    sent_at             REAL,
    platform_message_id TEXT,
    last_error          TEXT,
    abandoned_at        REAL                      -- added in version 2: a reply given up (a failed handoff)
);
CREATE INDEX outbox_unsent ON outbox (platform, next_attempt_at, id) WHERE sent_at IS NULL AND abandoned_at IS NULL;

-- Poll positions (Telegram getUpdates offset, iLink get_updates_buf), written in the transaction that
-- commits the inbox rows they cover.
CREATE TABLE poll_cursors (
    platform   TEXT NOT NULL,
    account_id TEXT NOT NULL DEFAULT '',
    cursor     TEXT NOT NULL,
    updated_at REAL NOT NULL,
    PRIMARY KEY (platform, account_id)
) WITHOUT ROWID;

-- /sethome: where handoff and notifications go on each platform account.
CREATE TABLE home_channels (
    platform   TEXT NOT NULL,
    account_id TEXT NOT NULL DEFAULT '',
    chat_id    TEXT NOT NULL,
    thread_id  TEXT,
    set_by     TEXT,
    set_at     REAL NOT NULL,
    chat_type  TEXT,                              -- added in version 2: handoff builds the home chat's key
    scope_id   TEXT,                              -- added in version 3: the workspace/tenant part of that key
    PRIMARY KEY (platform, account_id)
) WITHOUT ROWID;

-- What the agent chose to remember about a user (save-memory turns); later sessions of that user get them.
CREATE TABLE memories (
    id                INTEGER PRIMARY KEY,
    user_key          TEXT NOT NULL,              -- the principal: '<platform>[.<scope>][~<account>]:<participant>'
    content           TEXT NOT NULL,
    source_session_id TEXT REFERENCES sessions (id) ON DELETE SET NULL,
    created_at        REAL NOT NULL
);
CREATE INDEX memories_user ON memories (user_key, id);

-- Cross-process ownership of a session's turns (a terminal chat without the daemon). The epoch comes from
-- meta 'lease_epoch', a counter that only grows, so no two tenures of a session share one.
CREATE TABLE leases (
    session_id  TEXT PRIMARY KEY REFERENCES sessions (id) ON DELETE CASCADE,
    owner       TEXT NOT NULL,                    -- '<hostname>:<pid>:<random>'
    acquired_at REAL NOT NULL,
    expires_at  REAL NOT NULL,
    epoch       INTEGER NOT NULL DEFAULT 0        -- version 5: grows on every take-over; turn commits check it
) WITHOUT ROWID;
CREATE INDEX leases_owner ON leases (owner);      -- added in version 2: heartbeats renew one owner's leases

-- Durable deadlines for the supervisor's timer service (idle/daily resets, auto-prune).
CREATE TABLE timers (
    name       TEXT PRIMARY KEY,                  -- '<kind>:<subject>', e.g. 'reset:<session id>'
    due_at     REAL NOT NULL,
    payload    BLOB
) WITHOUT ROWID;
CREATE INDEX timers_due ON timers (due_at);

-- Responses of the API's /v1/responses (version 7): the response object as the client got it, tied to the session
-- its turn ran in, so deleting or pruning the session takes its responses with it. A chain continues the session
-- of its previous response; a conversation name follows its newest response.
CREATE TABLE api_responses (
    id           TEXT PRIMARY KEY,                -- 'resp_<hex>'
    session_id   TEXT NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
    scope        TEXT NOT NULL DEFAULT '',        -- the API key's fingerprint ('' without a key)
    conversation TEXT,                            -- the client's conversation name, if it gave one
    previous_id  TEXT,                            -- previous_response_id of the request
    instructions TEXT,                            -- the instructions in force (a chain inherits them)
    status       TEXT NOT NULL,                   -- completed, failed, incomplete
    body         BLOB NOT NULL,                   -- the response object, JSON
    created_at   REAL NOT NULL
);
CREATE INDEX api_responses_conversation ON api_responses (scope, conversation, created_at)
    WHERE conversation IS NOT NULL;
CREATE INDEX api_responses_session ON api_responses (session_id);

-- Conversations of the API's /v1/conversations (version 10): the metadata and the API key's scope of a conversation,
-- tied to the session it began in (its items are that session's lineage's messages), so deleting the session takes
-- the conversation with it.
CREATE TABLE api_conversations (
    id          TEXT PRIMARY KEY,                 -- 'conv_<hex>', the chat id of its sessions
    session_id  TEXT NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
    scope       TEXT NOT NULL DEFAULT '',         -- the API key's fingerprint ('' without a key)
    metadata    TEXT NOT NULL DEFAULT '{}',       -- the client's key-value pairs, a JSON object
    created_at  REAL NOT NULL
);
CREATE INDEX api_conversations_session ON api_conversations (session_id);

-- What could not be done (version 11): a message whose turn failed (inbox_id alone), a reply given up with the
-- message it answered (both), an event delivery given up (outbox_id alone), with the reason. A replay is asked for
-- by hermesctl (replay_requested_at) and done by the runtime running the turns (replayed_at): hermes_actors.store.
-- dead_letters. Rows go with their inbox or outbox row.
CREATE TABLE dead_letters (
    id                  INTEGER PRIMARY KEY AUTOINCREMENT,
    inbox_id            INTEGER REFERENCES inbox (id) ON DELETE CASCADE,
    outbox_id           INTEGER REFERENCES outbox (id) ON DELETE CASCADE,
    platform            TEXT NOT NULL,
    session_id          TEXT REFERENCES sessions (id) ON DELETE SET NULL,
    reason              TEXT NOT NULL,
    created_at          REAL NOT NULL,
    replay_requested_at REAL,
    replayed_at         REAL,
    CHECK (inbox_id IS NOT NULL OR outbox_id IS NOT NULL)
);
CREATE INDEX dead_letters_inbox ON dead_letters (inbox_id) WHERE inbox_id IS NOT NULL;
CREATE INDEX dead_letters_outbox ON dead_letters (outbox_id) WHERE outbox_id IS NOT NULL;
CREATE INDEX dead_letters_open ON dead_letters (id) WHERE replayed_at IS NULL;

-- Tool calls waiting for a person's decision (version 13): a turn paused until the session's user (or the operator)
-- approves or denies them, or nobody answers in time (a denial): hermes_actors.store.approvals. A row is decided
-- once (the commit that approves it claims its calls, which then run at most once) and resumed by the commit of the
-- turn that continued with the decision. Rows go with their session.
CREATE TABLE approvals (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    session_id  TEXT NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
    message_id  TEXT NOT NULL,                    -- the platform message whose turn paused (an API run's id)
    source      BLOB NOT NULL,                    -- the chat and person asked (msgpack SessionSource)
    calls       TEXT NOT NULL,                    -- the tool calls waiting, a JSON array in OpenAI's shape
    state       TEXT NOT NULL DEFAULT 'pending',  -- pending, approved, denied
    created_at  REAL NOT NULL,
    expires_at  REAL NOT NULL,                    -- no answer by then is a denial
    decided_at  REAL,
    decided_by  TEXT,
    reason      TEXT,
    results     TEXT,                             -- JSON object: call id -> result, once the approved calls ran
    resumed_at  REAL                              -- the turn continued with the decision
);
CREATE INDEX approvals_open ON approvals (session_id, id) WHERE resumed_at IS NULL;
CREATE INDEX approvals_pending ON approvals (id) WHERE state = 'pending';
CREATE INDEX approvals_message ON approvals (message_id);

-- Scheduled turns (version 12): a prompt sent as a message of a chat at times (hermes_actors.store.jobs). next_due_at
-- is the job's durable deadline: a run's inbox row commits in the transaction that moves it on, guarded by its old
-- value, so a due time fires once whichever process (or cluster host) gets there first.
CREATE TABLE jobs (
    id            TEXT PRIMARY KEY,                 -- 'job_<hex>'
    owner         TEXT NOT NULL,                    -- 'operator', or the key of the principal that asked (its tool)
    prompt        TEXT NOT NULL,                    -- the text each run sends
    schedule      TEXT NOT NULL CHECK (schedule IN ('at', 'every', 'cron')),
    spec          TEXT NOT NULL,                    -- unix seconds (at), seconds (every) or the cron expression
    tz            TEXT,                             -- the cron expression's zone; NULL: the gateway's
    target        TEXT NOT NULL CHECK (target IN ('chat', 'session', 'fresh')),
    session_id    TEXT,                             -- a 'session' target's session
    chat          TEXT NOT NULL,                    -- where runs come from and replies go: a SessionSource as JSON
    missed        TEXT NOT NULL DEFAULT 'run' CHECK (missed IN ('run', 'skip')),
    state         TEXT NOT NULL DEFAULT 'active' CHECK (state IN ('active', 'paused', 'done')),
    next_due_at   REAL,                             -- NULL unless active
    runs          INTEGER NOT NULL DEFAULT 0,
    skipped       INTEGER NOT NULL DEFAULT 0,       -- due times missed and skipped (missed = 'skip')
    last_run_at   REAL,
    last_inbox_id INTEGER,                          -- the inbox row of the latest run
    created_at    REAL NOT NULL,
    created_by    TEXT NOT NULL                     -- 'cli', 'api' or 'agent'
);
CREATE INDEX jobs_due ON jobs (next_due_at) WHERE state = 'active';
CREATE INDEX jobs_owner ON jobs (owner, created_at);

CREATE TABLE meta (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
) WITHOUT ROWID;
