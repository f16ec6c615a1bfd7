"""A driver as a run's is (`RayExecutor.start` on a two-node local cluster) whose second node is killed; its
stdout and stderr are what a run's log gets from Ray (test_ray_executor.py counts the raylet's dump there).

    python ray_node_lost_log.py
"""

from __future__ import annotations

import asyncio
import time

import ray
from ray.cluster_utils import Cluster

from legorl_jax.config import RayConfig, RolloutConfig
from legorl_jax.rollout.ray_executor import TRIAL_RESOURCE, RayExecutor

SETTLE_S = 12.0
"""How long after the node is marked dead the driver keeps listening (Ray's de-duplication window is 5 s)."""


async def main() -> None:
    resources = {TRIAL_RESOURCE: 1}
    cluster = Cluster(
        initialize_head=True,
        head_node_args={"num_cpus": 1, "resources": resources, "include_dashboard": False},
    )
    try:
        node = cluster.add_node(num_cpus=1, resources=resources)
        cluster.wait_for_nodes()
        config = RolloutConfig(executor="ray", trials_per_node=1, ray=RayConfig(address=cluster.address))
        executor = await RayExecutor.start(config)
        try:
            print("KILLING NODE", flush=True)
            cluster.remove_node(node, allow_graceful=False)
            deadline = time.monotonic() + 120
            while any(n["NodeID"] == node.node_id and n["Alive"] for n in ray.nodes()):
                assert time.monotonic() < deadline, "the killed node was never marked dead"
                await asyncio.sleep(0.5)
            print("NODE MARKED DEAD", flush=True)
            await asyncio.sleep(SETTLE_S)
        finally:
            await executor.close()
    finally:
        cluster.shutdown()
    print("DONE", flush=True)


if __name__ == "__main__":
    asyncio.run(main())
