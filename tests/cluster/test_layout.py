"""cluster/ split by process: what a replica runs never imports a shard host's modules (only the process entry
point does, to create the hosts), a host imports nothing of a replica; and where a platform runs is the registry's
word, handed to the replica."""

from __future__ import annotations

import ast
import logging
from pathlib import Path

import pytest

from hermes_actors.cluster.replica.entry_points import ClusterReplica
from hermes_actors.cluster.replica.inbox import ClusterInbox
from hermes_actors.cluster.replica.ingress import ClusterIngress
from hermes_actors.media import MediaStore
from hermes_actors.store.pg import PostgresStore
from platforms.registry import PlatformSpec
from platforms.webhook import WebhookAdapter, WebhookConfig

CLUSTER = Path(__file__).resolve().parents[2] / "hermes_actors" / "cluster"


def _imports(folder: Path) -> dict[str, set[str]]:
    """Each module of ``folder`` (not below) and the modules it imports (inside functions too)."""
    found: dict[str, set[str]] = {}
    for path in sorted(folder.glob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        found[path.stem] = {
            node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module is not None
        }
    return found


def test_a_replica_module_imports_the_host_package_only_to_create_the_hosts() -> None:
    reaching = {
        module: sorted(target for target in targets if target.startswith("hermes_actors.cluster.host."))
        for module, targets in _imports(CLUSTER / "replica").items()
    }
    assert {module: targets for module, targets in reaching.items() if targets} == {
        "service": ["hermes_actors.cluster.host.ray_host", "hermes_actors.cluster.host.settings"]
    }
    assert "hermes_actors.cluster.host.runtime" not in _imports(CLUSTER / "replica")["ingress"]


def test_the_host_package_and_the_shared_modules_import_no_replica_module() -> None:
    for folder in (CLUSTER / "host", CLUSTER):
        for module, targets in _imports(folder).items():
            assert not [t for t in targets if t.startswith("hermes_actors.cluster.replica.")], module
    for module, targets in _imports(CLUSTER).items():
        assert not [t for t in targets if t.startswith("hermes_actors.cluster.host.")], module


def test_a_platform_is_leased_exactly_when_its_registry_entry_names_a_parts_function() -> None:
    with pytest.raises(ValueError, match="a leased platform, and only one, names its parts function"):
        PlatformSpec(name="x", placement="leased", module="m", config="C", adapter="A")
    with pytest.raises(ValueError, match="a leased platform, and only one, names its parts function"):
        PlatformSpec(name="x", placement="push", module="m", config="C", adapter="A", parts="cluster_parts")
    assert PlatformSpec(name="x", placement="push", module="m", config="C", adapter="A").placement == "push"


def test_a_replica_runs_a_section_where_the_placement_it_is_handed_puts_it(
    postgres_dsn: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    sections = {"webhook": WebhookConfig(port=0)}
    with PostgresStore.open(postgres_dsn, migrate_schema=False) as pg:
        inbox = ClusterInbox(ClusterIngress(pg, shards=4), MediaStore(tmp_path))
        placed: list[str] = []

        def nowhere(platform: str) -> str:
            placed.append(platform)
            return "not yet"

        replica = ClusterReplica(
            pg,
            inbox,
            sections,
            build=lambda name, config: WebhookAdapter(config),  # type: ignore[arg-type]
            name="replica-a",
            placement=nowhere,
        )
        with caplog.at_level(logging.WARNING, logger="hermes_actors.cluster.replica.entry_points"):
            replica.start()
        try:
            assert placed == ["webhook"]
            assert replica.push == []  # the registry's default would run it on every replica
            assert "platform webhook is not run in cluster mode: the registry does not place it" in caplog.text
        finally:
            replica.stop()
            inbox.close()
