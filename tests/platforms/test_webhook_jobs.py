"""A scheduled turn whose chat is a webhook route's: the job's prompt is a message of that chat, and its reply is
POSTed to the route's callback URL, signed, like the reply to any message of the chat (issue 36: "the reply goes to
that chat (or a webhook)"). Real gateway, real adapter, loopback callback receiver."""

from __future__ import annotations

from hermes_actors.job_port import JobSpec
from tests.platforms.test_webhook import (
    CALLBACK_SECRET,
    Receiver,
    StartWebhook,
    receiver,
    signature_is_valid,
    start_webhook,
    with_callback,
)

__all__ = ["receiver", "start_webhook"]  # the fixtures, shared with test_webhook


def test_a_jobs_run_in_a_webhook_chat_posts_its_reply_to_the_routes_callback(
    receiver: Receiver, start_webhook: StartWebhook
) -> None:
    webhook = start_webhook(with_callback(receiver))
    status, answer = webhook.post({"text": "hello", "chat_id": "c1", "user_id": "u1"}, webhook_id="msg_1")
    assert status == 202
    assert webhook.gateway.wait_idle()
    assert receiver.take().json()["text"] == "echo: hello"
    job = webhook.gateway.jobs.add(JobSpec(prompt="time to stretch", every="1h", chat="webhook:c1"))
    ran = webhook.gateway.jobs.run(job.id)
    assert webhook.gateway.wait_idle()
    callback = receiver.take()
    assert signature_is_valid(CALLBACK_SECRET, callback.headers, callback.body)
    body = callback.json()
    assert (body["route"], body["chat_id"], body["text"]) == ("default", "c1", "echo: time to stretch")
    assert body["session_id"] == webhook.session_of(answer["routing_key"])  # the chat's current session
    assert ran.runs == 1
    assert receiver.received.empty()
