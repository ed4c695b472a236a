"""The first-start ``config.yaml``: every setting at its default, commented out, with one webhook route.

``hermesd`` writes it when the home has no configuration; ``tests/daemon/test_settings.py`` checks that every
commented value in it is a valid setting and that every platform of the registry has its section.
"""

from __future__ import annotations

import os
from pathlib import Path

from platforms.registry import new_webhook_secret

__all__ = ["default_config_text", "write_default_config"]


def write_default_config(path: Path) -> bool:
    """Create ``path`` with the commented defaults (and a fresh webhook secret) unless it exists; return whether."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)  # it holds a secret
    except FileExistsError:
        return False
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(default_config_text(new_webhook_secret()))
    return True


def default_config_text(webhook_secret: str) -> str:
    """The first-start ``config.yaml``: every setting at its default, commented out, and one webhook route."""
    return f"""\
# hermes-actors configuration. Every setting is optional; the commented values are the defaults.
# Check this file with: hermesctl config check        Reload a running daemon with: kill -HUP $(cat hermesd.pid)

agent:
  # An OpenAI-compatible chat-completions endpoint. Without base_url the built-in echo agent answers.
  # base_url: http://127.0.0.1:8000/v1
  # model: my-model
  # api_key_env: OPENAI_API_KEY      # the environment variable holding the key
  # timeout_s: 120
  # max_retries: 2
  # context_window: 128000
  # vision: false                    # true: the model takes images (they are sent with the turn they came in)
  # system_prompt: null              # text first in every session's system message (or system_prompt_file:
  #                                  # prompt.md, relative to this directory; not both). Frozen per session.
  # factory: null                    # your own agent instead: package.module:callable, or the name of an entry
  #                                  # point of the hermes_actors.agents group (not with base_url)
  # options: {{}}                    # the factory's own settings, passed through as they are
  # mcp_servers: {{}}                # MCP servers whose tools every session offers: name: {{command: [argv...]}}
  #                                  # or {{url: ..., headers_env: {{Header: ENV_VAR}}}} (README: MCP tools); a
  #                                  # server's require_approval: true (or [tool patterns]) holds its calls
  # approvals:                       # calls that wait for the user's /approve ID or /deny ID (README: Approvals)
  #   tools: []                      # tool names or patterns as the model calls them: session_search, files__rm*
  #   timeout_s: 600                 # no answer within this many seconds is a denial
  # probe:                           # health checks ask the endpoint for its models (no model call) at most
  #   interval_s: 30                 # once per interval_s and report the agent ok or degraded with the error
  #   timeout_s: 5
  #   fail_readiness: false          # true: /health/ready answers 503 while the agent is degraded

# Several agents behind one gateway. The agent: section above is the agent named "default"; each entry of agents
# takes the same keys. The bindings choose the agent of a new session by platform, account, chat_type (dm, group,
# channel or thread) and chat_id; the most specific entry wins, and what no entry matches gets "default". A session
# keeps its agent for its life, so a change here reaches new sessions only. An API request's model may name an
# agent; GET /v1/models lists them.
# agents:
#   support:
#     base_url: http://127.0.0.1:8000/v1
#     model: my-model
#     system_prompt: You answer questions about orders.
# bindings:
#   - {{agent: support, platform: webhook, account: default}}   # the webhook route named default

platforms:
  api_server:
    # enabled: true
    # host: 127.0.0.1                # a non-loopback host requires a key
    # port: 8642
    # key: null                      # bearer key; or set the variable named by key_env
    # key_env: HERMES_API_KEY
    # model_name: hermes-agent
    # request_timeout_s: 300
    # max_body_bytes: 4194304
    # keepalive_s: 30                # a streamed turn silent this long sends an SSE keep-alive comment
    # max_concurrent_runs: 64        # requests running turns at once; beyond it 429 (0: no cap)
    # cors_origins: []               # browser origins whose pages may call the API (https://chat.example.org;
    #                                # '*': any); a request from another Origin gets 403
    # trusted_proxies: []            # reverse proxies (127.0.0.1, 10.0.0.0/8) whose X-Forwarded-* / Forwarded
    #                                # headers are believed (client address, https, host)
    # console:
    #   secure_cookie: auto          # auto: Secure over HTTPS (or a trusted proxy's word); always: every time
  webhook:
    # enabled: true
    # host: 127.0.0.1
    # port: 8644
    routes:
      default:
        # Standard Webhooks secret: sign requests to POST /webhooks/default with it.
        secret: {webhook_secret}
        # text: text                 # where the message text is in the JSON body (dotted path)
        # chat_id: chat_id
        # user_id: user_id
        # callback_url: http://127.0.0.1:9000/replies   # where replies are POSTed; else only stored
  # A platform runs when it has a section here. Each account's name is part of its session keys.
  # telegram:
  #   bots:
  #     main:
  #       token_env: TELEGRAM_BOT_TOKEN  # long-polls getUpdates; or mode: webhook with secret_token_env
  # slack:
  #   apps:
  #     main:
  #       signing_secret_env: SLACK_SIGNING_SECRET
  #       bot_token_env: SLACK_BOT_TOKEN  # Request URL: https://<public host>/slack/events/main
  # feishu:
  #   apps:
  #     main:
  #       app_id: cli_example
  #       app_secret_env: FEISHU_APP_SECRET
  #       verification_token_env: FEISHU_VERIFICATION_TOKEN
  #       encrypt_key_env: FEISHU_ENCRYPT_KEY  # needs: pip install 'hermes-actors[feishu]'
  # wechat:
  #   accounts:
  #     main:
  #       token_env: WECHAT_ILINK_TOKEN
  # discord:
  #   bots:
  #     main:
  #       token_env: DISCORD_BOT_TOKEN   # enable "Message Content Intent" on the bot's page
  # whatsapp:
  #   numbers:
  #     "106540352242922":             # the phone_number_id (WhatsApp > API Setup), not the phone number
  #       app_secret_env: WHATSAPP_APP_SECRET
  #       verify_token_env: WHATSAPP_VERIFY_TOKEN
  #       access_token_env: WHATSAPP_ACCESS_TOKEN  # callback URL: https://<public host>/whatsapp/webhook
  # matrix:
  #   accounts:
  #     main:
  #       homeserver: https://matrix.example.org
  #       access_token_env: MATRIX_ACCESS_TOKEN
  # signal:
  #   url: http://127.0.0.1:8080       # signal-cli daemon --http 127.0.0.1:8080 --receive-mode=on-connection
  #   accounts: ["+15550001"]
  # mattermost:
  #   url: https://chat.example.com    # the server as users open it; the websocket is /api/v4/websocket
  #   bots:
  #     main:
  #       token_env: MATTERMOST_BOT_TOKEN  # a bot account's access token (Integrations > Bot Accounts)
  # sms:                               # Twilio: "A message comes in" webhook, HTTP POST
  #   port: 8655                       # serves POST /sms/twilio
  #   public_url: https://<public host>/sms/twilio  # the webhook URL as entered on the number (it is signed)
  #   account_sid: AC0123456789abcdef0123456789abcdef  # Account SID from the Twilio Console
  #   auth_token_env: TWILIO_AUTH_TOKEN
  #   numbers: ["+15550001111"]
  # teams:                           # needs: pip install 'hermes-actors[teams]'
  #   port: 3978                       # messaging endpoint: https://<public host>/teams/messages/main
  #   bots:
  #     main:
  #       app_id: 00000000-0000-0000-0000-000000000000  # the Azure Bot's Microsoft App ID
  #       app_password_env: TEAMS_APP_PASSWORD
  # email:
  #   accounts:
  #     main:
  #       address: agent@example.org     # the From of replies; IMAP/SMTP log in as it (or username:)
  #       imap_host: imap.example.org    # port 993, imap_security: tls (or starttls / none)
  #       smtp_host: smtp.example.org    # port 587, smtp_security: starttls (or tls / none)
  #       password_env: EMAIL_PASSWORD
  #       allowed_senders: ["alice@example.com", "@example.com"]  # only their mail starts turns
  #       sessions: sender               # or thread: one session per mail thread
  #       trusted_authserv_id: mx.example.org  # only mail this server marks dmarc=pass (From is easy to forge)
  # qqbot:                            # QQ Bot open platform; needs: pip install 'hermes-actors[qqbot]'
  #   port: 8662                       # callback URL: https://<public host>/qqbot/<bot> (Ed25519-signed by QQ)
  #   bots:
  #     main:
  #       app_id: "102000000"          # the bot's AppID (the account in session keys)
  #       secret_env: QQBOT_SECRET     # its AppSecret: fetches access tokens and derives the signing key
  #       mode: callback               # or websocket: connect to QQ's gateway instead of serving a callback
  # bluebubbles:                      # iMessage through a BlueBubbles server (its webhook in, its REST API out)
  #   port: 8663                       # webhook URL: https://<public host>/bluebubbles/<webhook token>
  #   server_url: http://mac.local:1234  # the BlueBubbles server's REST API
  #   server_name: imessage            # the account in session keys
  #   password_env: BLUEBUBBLES_PASSWORD  # the server password
  #   webhook_token_env: BLUEBUBBLES_WEBHOOK_TOKEN  # 24+ random characters; BlueBubbles signs nothing
  # dingtalk:
  #   mode: callback                   # or stream: each robot connects out over a WebSocket (no public URL)
  #   port: 8657                       # callback mode's URL: https://<public host>/dingtalk/robot/main
  #   robots:
  #     main:
  #       app_key: dingxxxxxxxxxxxx      # the app's Client ID (AppKey), also its robot code
  #       app_secret_env: DINGTALK_APP_SECRET  # the Client Secret: checks callbacks, fetches access tokens
  # wecom:                            # WeCom self-built apps; needs: pip install 'hermes-actors[feishu]' (cryptography)
  #   port: 8658                       # receive-messages URL: https://<public host>/wecom/callback/main
  #   apps:
  #     main:
  #       corp_id: ww0123456789abcdef    # My Company > Company Information
  #       agent_id: 1000002              # the app's AgentId
  #       secret_env: WECOM_SECRET       # the app's Secret (for gettoken)
  #       token_env: WECOM_TOKEN         # "Receive messages": Token and EncodingAESKey
  #       encoding_aes_key_env: WECOM_ENCODING_AES_KEY

runtime:
  # passivate_after_s: 300           # an idle session's actor stops after this long (it restarts on demand)
  # max_live_actors: 5000
  # pending_soft_limit: 4
  # pending_hard_limit: 64
  # max_concurrent_agent_calls: 256
  # agent_timeout_s: 120
  # reset_triggers: [/new, /reset]
  # save_memory_on: [idle, daily, new, reset]  # ends that run a save-memory turn first; [] for none
  # context_window: 128000           # tokens, when the agent does not say; no turn is sent over it
  # summary_max_tokens: 0            # a compression summary's budget; 0: a tenth of the context window
  # auto_titles: true                # title a session after its first exchange
  # model_message_cap_chars: 16000   # per message of history sent to the model; 0: no cap
  # queue_retention_days: 8          # answered inbox rows (the redelivery dedupe) and sent replies are kept this long
  # outbox_retry_base_s: 1.0         # a reply or event delivery that failed is tried again after this, doubling
  # outbox_retry_max_s: 300.0        # up to this (or after the receiver's Retry-After)

sessions:
  # auto_prune: false                # delete ended sessions older than retention_days at start
  # retention_days: 90
  # search_scope: user               # what the agent's session_search sees: user | chat | tenant | all
  # search_scope_platforms: {{}}     # per platform, e.g. {{cli: all}}

session_reset:
  # mode: none                       # none | idle | daily | both
  # idle_minutes: 1440
  # at_hour: 4

# A message that arrives while its session answers another one (double texting; README "Busy sessions"). An API
# request chooses its own with the X-Hermes-Busy header or a hermes_busy field.
busy:
  # mode: queue                      # queue: its own turn, in order | collect: those that arrive during a turn
  #                                  # become one next turn | interrupt: the running turn stops, a new one answers
  #                                  # everything since | reject: "busy" (the API: 409 with Retry-After) | steer:
  #                                  # into the running turn at its next model call (the OpenAI agent), else collect
  # interrupted_output: discard      # discard | partial: an interrupted turn keeps what it streamed, marked partial
  # retry_after_s: 5                 # a rejected request's Retry-After
  # chat_types: {{}}                   # per chat type, e.g. {{group: {{mode: collect}}}}
  # platforms: {{}}                    # per platform (and its chat types), e.g. {{telegram: {{mode: collect}}}}

# Scheduled turns (README "Scheduled turns"): 'hermesctl jobs add', /api/jobs, the console's Jobs page, and the
# agent's schedule tool when agent_tool is on.
jobs:
  # agent_tool: false                # offer new sessions the schedule tool: jobs of the asking user, in its own chat
  # agent_tool_max_jobs: 20          # active or paused jobs one user may keep through the tool
  # agent_tool_min_interval_s: 60    # the tool's jobs run at most this often
  # missed_after_s: 120              # a run this late (hermesd was stopped) is missed: run once late, or skipped

media:
  # Files that come with messages are saved once under <home>/media and listed in the transcript.
  # max_bytes: 20971520              # larger files are not read; the reply says so
  # allowed_kinds: [image, audio, video, document]
  # excerpt_bytes: 4096              # a text file's first bytes go into the conversation as its stand-in
  # describe: null                   # module:function(path, attachment) -> a short description

daemon:
  # socket: hermesd.sock             # control socket, relative to the home directory
  # drain_timeout_s: 30              # SIGTERM waits this long for running turns
  # timezone: null                   # for daily resets and jobs' times; default: the machine's zone
  # log_level: info
  # log_format: logfmt               # logfmt | json (one JSON object a line)
  # http_port: 0                     # one port for the API and every webhook (behind a reverse proxy): the API
  # http_host: 127.0.0.1             # at /v1 and /health, /webhooks/..., /slack/..., /feishu/..., /whatsapp/...,
  #                                  # /telegram/...; the entry points' own ports stay closed. 0: off
  # http_header_timeout_s: 10        # every HTTP listener: a new connection's request headers must arrive by then
  # http_idle_timeout_s: 75          # a kept-alive connection waiting for its next request is closed after this
  # http_max_connections: 512        # open connections per listener; past it the longest idle one is closed
  # admin_key: null                  # opens the API's /api/sessions (every session): null uses $HERMES_ADMIN_KEY,
  #                                  # else a key generated into $HERMES_HOME/admin_key ('hermesctl admin-key')
  # cpu_affinity: one                # one: every thread on the CPU hermesd starts on (its threads share one Python
  #                                  # lock: cheaper there); all: every CPU; or a list such as [2, 3]
  # cpu_scheduling: batch            # batch: its threads under SCHED_BATCH (a woken thread does not preempt the
  #                                  # running one: fewer switches per message); normal: the usual policy

# Signed event webhooks (README "Event webhooks"): what happens, POSTed as Standard Webhooks through the outbox, each
# event once by its id (the webhook-id header), retried with backoff (runtime.outbox_retry_base_s doubling up to
# runtime.outbox_retry_max_s) and Retry-After, given up after give_up_after_s as a dead letter ('hermesctl events
# deliveries' lists them, 'hermesctl events replay ID' sends one again).
# events:
#   webhooks:
#     ops:                             # the webhook's name
#       url: https://hooks.example.com/hermes  # only this URL is ever posted to (private addresses allowed)
#       secret_env: HERMES_EVENTS_SECRET  # holds its whsec_ secret (or secret: whsec_...)
#       events: [turn.completed, run.completed, session.ended, job.fired, approval.requested, message.dead_lettered]
#       give_up_after_s: 86400         # a delivery still failing this long after it was queued is a dead letter
#       timeout_s: 10                  # one POST

# Cluster mode (hermesd --cluster; README "Running a cluster"): shard hosts on Ray over PostgreSQL. Every replica
# needs the same cluster: and platforms: sections.
# cluster:
#   postgres_dsn: null               # postgresql://hermes@db.internal/hermes (no password here: $PGPASSWORD)
#   ray_address: auto                # the Ray head: auto (the cluster this machine joined) or host:6379
#   node_ip_address: null            # this machine's address in the Ray cluster (ray start --node-ip-address)
#   namespace: hermes                # the Ray namespace of the shard hosts
#   shards: 256                      # fixed for the life of the cluster
#   hosts: [host-0, host-1, host-2]  # the shard hosts' names: a list
#   placement: spread                # spread the hosts over the Ray nodes, or pack (Ray's default placement)
#   lease_ttl_s: 10                  # a shard term; a host renews every third of it
#   grace_s: 5                       # how long a free shard waits for its home host
#   pull_interval_s: 2
#   health:                          # what /health/cluster and 'hermesctl cluster status' call trouble
#     stuck_after_s: 120             # a message pending longer
#     unheld_after_s: 30             # a shard no host has held for longer
#     host_silent_after_s: 30        # a host without a heartbeat for longer
"""
