"""The batch job type's part of ``config.yaml``: ``batch:`` (a leaf: dataclasses only)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from batch import distributions
from hermesd.config import at_least, one_of, section
from hermesd.mcp.config import servers, unknown_toolsets

EXECUTORS = ("local", "ray")
"""Where a batch's items run: children of this daemon, or tasks on a Ray cluster."""


@dataclass(frozen=True)
class Batch:
    """``batch:`` — defaults of the batch job type.  ``executor``: where items run
    (``local`` children, or ``ray``: tasks on the Ray cluster at ``ray_address``,
    else ``RAY_ADDRESS``); ``ray_num_cpus`` and ``ray_memory_mb``: what each item
    reserves on a Ray node (``ray_memory_mb`` None: nothing); ``distributions``: toolset
    distributions of the config's own, name → ``{toolset: probability}``, MCP servers'
    ``mcp:NAME`` among them (:func:`batch.distributions.parse`)."""

    output_dir: str = "data"
    num_workers: int = field(default=4, metadata=at_least(1))
    max_turns: int = field(default=10, metadata=at_least(1))
    executor: str = field(default="local", metadata=one_of(*EXECUTORS))
    ray_address: str | None = None
    ray_num_cpus: float = field(default=1.0, metadata=at_least(0.0))
    ray_memory_mb: int | None = field(default=None, metadata=at_least(1))
    distributions: dict[str, Any] = field(default_factory=dict, metadata={"check": distributions.parse})


@dataclass(frozen=True)
class Ray:
    """``ray:`` — the Ray executor.  ``idle_seconds``: how long a batch's driver and its item
    hosts stay up after the batch ended, warm for the next batch on the same cluster with the
    same reservation (``batch.ray_pool``); 0: each batch's driver ends with it.  The default
    is five minutes, as the Ray cluster launcher's ``idle_timeout_minutes``."""

    idle_seconds: float = field(default=300.0, metadata=at_least(0.0))


@dataclass(frozen=True)
class Sections:
    """The batch plugin's part of ``config.yaml`` (:data:`hermesd.paths.PLUGIN_ROOTS`)."""

    batch: Batch = section(Batch)
    ray: Ray = section(Ray)

    def check(self: Any) -> list[tuple[str, str]]:
        """Every ``mcp:NAME`` of a distribution names an enabled server of ``mcp_servers:``."""
        known = servers(self.mcp_servers)
        return [(f"batch.distributions.{name}", why) for name, probs in self.batch.distributions.items()
                for why in unknown_toolsets(list(probs), known)]
