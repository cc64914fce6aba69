"""Which Ray node a block ran on: what the start's record names (``resources["host"]``)."""

from __future__ import annotations

import socket
from dataclasses import asdict, dataclass
from typing import Any

import ray


@dataclass(frozen=True)
class Host:
    node_id: str
    node: str  # the node's name (``ray start --node-name``; Ray's default is its address)
    hostname: str
    address: str

    def as_dict(self) -> dict[str, str]:
        return asdict(self)

    @property
    def label(self) -> str:
        return self.node if self.node == self.hostname or not self.hostname else f"{self.node} ({self.hostname})"


def this_host() -> Host:
    """The node this Ray worker runs on, read from the cluster's node table."""
    node_id = ray.get_runtime_context().get_node_id()
    info: dict[str, Any] = next((n for n in ray.nodes() if n.get("NodeID") == node_id), {})
    address = str(info.get("NodeManagerAddress") or "")
    return Host(
        node_id=node_id,
        node=str(info.get("NodeName") or address or node_id[:12]),
        hostname=socket.gethostname(),
        address=address,
    )
