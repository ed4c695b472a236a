from __future__ import annotations

import hermes_actors
import hermes_actors.agents
import hermes_actors.agents.contract
import hermes_actors.agents.factory
import hermes_actors.routing
import hermes_actors.store
import hermes_actors.testing


def test_the_package_exports_are_pinned() -> None:
    assert hermes_actors.__all__ == [
        "AmbiguousSessionError",
        "ConfigError",
        "EndReason",
        "HermesError",
        "KeyPolicy",
        "NewMessage",
        "PlatformError",
        "Role",
        "RoutingError",
        "SchemaVersionError",
        "SessionClosedError",
        "SessionKey",
        "SessionKind",
        "SessionNotFoundError",
        "SessionSource",
        "Store",
        "StoreError",
        "TitleError",
        "TitleInUseError",
        "build_session_key",
        "new_session_id",
        "parse_session_key",
    ]


def test_the_agent_plugin_api_is_pinned() -> None:
    # What an agent of one's own is written against (README "Your own agent"); a change here is a user's change.
    assert hermes_actors.agents.__all__ == [
        "ENTRY_POINT_GROUP",
        "Agent",
        "AgentContext",
        "AgentError",
        "AgentFactory",
        "AgentMessage",
        "AgentReply",
        "ApprovalDecision",
        "ApprovalGate",
        "BackgroundEndReportingAgent",
        "BackgroundInterruptingAgent",
        "BackgroundReportingAgent",
        "BudgetedSummaryAgent",
        "ClientTool",
        "ContextWindowAgent",
        "InlineAgent",
        "Memory",
        "MessageRecord",
        "ModelNamingAgent",
        "PromptedAgent",
        "Role",
        "SessionReleasingAgent",
        "SteerableAgent",
        "Steering",
        "TitlingAgent",
        "Tool",
        "ToolResult",
        "ToolStatus",
        "TurnEvents",
        "TurnInput",
        "error_json",
        "request_approval",
        "tool_call",
    ]
    assert hermes_actors.agents.ENTRY_POINT_GROUP == "hermes_actors.agents"


def test_the_testing_kit_is_pinned() -> None:
    assert hermes_actors.testing.__all__ == [
        "AgentContract",
        "EventRecorder",
        "FakeClock",
        "FakePlatform",
        "FakeThreadedPlatform",
        "GatedAgent",
        "SeeingAgent",
        "check_agent",
        "open_fake_gateway",
        "poll_until",
    ]
    assert hermes_actors.agents.contract.__all__ == [
        "AgentContract",
        "check_agent",
        "check_capabilities",
        "check_concurrent_turns",
        "check_memories",
        "check_methods",
        "check_reply",
        "check_streaming",
        "check_summary",
        "check_timeouts",
        "check_turns",
    ]


def test_the_public_agent_classes_and_functions_are_documented() -> None:
    for module in (hermes_actors.agents, hermes_actors.agents.contract, hermes_actors.agents.factory):
        for name in module.__all__:
            value = getattr(module, name)
            if callable(value):
                assert (value.__doc__ or "").strip(), f"{module.__name__}.{name} has no docstring"


def _isort_order(name: str) -> tuple[int, str]:
    # Constants, then classes, then functions: the order ruff's RUF022 keeps.
    kind = 0 if name.isupper() else 1 if name[0].isupper() else 2
    return kind, name


def test_every_exported_name_exists_and_lists_are_sorted() -> None:
    modules = (
        hermes_actors,
        hermes_actors.agents,
        hermes_actors.agents.contract,
        hermes_actors.agents.factory,
        hermes_actors.routing,
        hermes_actors.store,
        hermes_actors.testing,
    )
    for module in modules:
        assert module.__all__ == sorted(module.__all__, key=_isort_order)
        for name in module.__all__:
            assert hasattr(module, name), f"{module.__name__}.{name}"
