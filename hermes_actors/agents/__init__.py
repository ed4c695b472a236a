"""Agents: the protocol a turn calls, the built-in echo agent, the OpenAI-compatible agent and the tools."""
