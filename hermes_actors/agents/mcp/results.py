"""An MCP tool's result as the text of a tool message.

Text blocks are kept as they are, one after another; a block the model cannot read as text (an image, audio, a
binary resource) is named with its type and size; a result with no blocks gives its structured content as JSON.
The whole is cut at :data:`MAX_RESULT_CHARS`, saying how much was left out.
"""

from __future__ import annotations

import msgspec
from mcp import types

__all__ = ["MAX_RESULT_CHARS", "call_problem", "result_text"]

MAX_RESULT_CHARS = 100_000  # of one result: more would crowd the model's context and the transcript


def result_text(result: types.CallToolResult) -> tuple[str, bool]:
    """The text of ``result`` and whether the tool reported a failure (``isError``)."""
    parts = [_block_text(block) for block in result.content]
    if not parts and result.structuredContent is not None:
        parts.append(msgspec.json.encode(result.structuredContent).decode())
    text = "\n".join(parts) if parts else "(the tool returned nothing)"
    if len(text) > MAX_RESULT_CHARS:
        left_out = len(text) - MAX_RESULT_CHARS
        text = f"{text[:MAX_RESULT_CHARS]}\n[cut: {left_out} more characters left out]"
    return text, bool(result.isError)


def call_problem(name: str, problem: str) -> str:
    """What the model is told of a failed call of tool ``name``."""
    return f"{name} failed: {problem.strip() or 'no detail given'}"


def _block_text(block: types.ContentBlock) -> str:
    if isinstance(block, types.TextContent):
        return block.text
    if isinstance(block, types.ImageContent | types.AudioContent):
        kind = "image" if isinstance(block, types.ImageContent) else "audio"
        return f"[{kind} {block.mimeType}, {len(block.data) * 3 // 4} bytes, not shown]"
    if isinstance(block, types.ResourceLink):
        return f"[resource {block.name}: {block.uri}]"
    resource = block.resource
    if isinstance(resource, types.TextResourceContents):
        return resource.text
    return (
        f"[resource {resource.uri} ({resource.mimeType or 'binary'}), {len(resource.blob) * 3 // 4} bytes, not shown]"
    )
