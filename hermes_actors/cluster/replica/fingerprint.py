"""The part of a replica's config the replicas of one cluster must agree on, and its fingerprint.

A reply may leave from another replica than the one its message reached, so a webhook route, a bot or a platform
section known to one replica only goes wrong far from its cause. Each replica records :func:`cluster_config`'s
text and fingerprint with its heartbeat (``cluster_replicas``); at start it compares them with the live replicas'
(:func:`differences`) and warns naming what differs, and ``hermesctl cluster status`` names replicas that run on
different configs. Secrets never leave the process: a value under a key that names a secret (``secret``,
``token``, ``password``, ``key``, but not the ``*_env`` names of environment variables) is replaced by a digest of
it, so two different secrets still make two fingerprints.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

import msgspec

from hermes_actors.cluster.settings import ClusterSettings

__all__ = ["cluster_config", "differences"]

_SECRET_WORDS = ("secret", "token", "password", "passwd", "key")


def _secret(name: str) -> bool:
    lowered = name.lower()
    return not lowered.endswith("_env") and any(word in lowered for word in _SECRET_WORDS)


def _masked(value: Any, *, secret: bool = False) -> Any:
    if isinstance(value, dict):
        return {str(k): _masked(v, secret=_secret(str(k))) for k, v in sorted(value.items(), key=lambda kv: str(kv[0]))}
    if isinstance(value, list):
        return [_masked(item, secret=secret) for item in value]
    if secret and value not in (None, ""):
        return "sha256:" + hashlib.sha256(str(value).encode()).hexdigest()[:12]
    return value


def cluster_config(
    cluster: ClusterSettings, platforms: Mapping[str, msgspec.Struct], *, admin_key: str | None = None
) -> tuple[str, str]:
    """The replica's cluster-relevant config as JSON text (secrets masked) and its fingerprint (12 hex digits).
    ``admin_key``, when given, counts as ``operator.admin_key``: a replica whose home generated a key of its own
    would refuse the operator's key of every other replica."""
    shape: dict[str, Any] = {
        "cluster": {
            "shards": cluster.shards,
            "hosts": list(cluster.hosts),
            "lease_ttl_s": cluster.lease_ttl_s,
            "grace_s": cluster.grace_s,
            "namespace": cluster.namespace,
        },
        "platforms": {name: msgspec.to_builtins(section) for name, section in sorted(platforms.items())},
    }
    if admin_key is not None:
        shape["operator"] = {"admin_key": admin_key}
    text = json.dumps(_masked(shape), sort_keys=True, separators=(",", ":"), default=str)
    return text, hashlib.sha256(text.encode()).hexdigest()[:12]


def differences(mine: str, theirs: str, *, limit: int = 10) -> list[str]:
    """The settings (dotted paths) whose values differ between two :func:`cluster_config` texts, at most
    ``limit``; a path present in one only counts."""
    found: list[str] = []

    def walk(a: Any, b: Any, path: str) -> None:
        if len(found) >= limit:
            return
        if isinstance(a, dict) and isinstance(b, dict):
            for key in sorted(set(a) | set(b)):
                walk(a.get(key, _MISSING), b.get(key, _MISSING), f"{path}.{key}" if path else key)
        elif a != b:
            found.append(path or "(all)")

    try:
        walk(json.loads(mine), json.loads(theirs), "")
    except ValueError:
        return ["(unreadable)"]
    return found


_MISSING = object()
