"""Agents: what runs a turn.

``base`` (the :class:`~hermes_actors.agents.base.Agent` protocol and its capability protocols), ``turn`` (what a
turn gives an agent and gets back), ``echo`` (the built-in deterministic agent), ``openai_chat`` with
``openai_endpoint`` and ``openai_transcript`` (any OpenAI-compatible endpoint), ``tools`` (what an agent may call,
``session_search``) and ``history`` (what of a transcript is sent to the model).
"""
