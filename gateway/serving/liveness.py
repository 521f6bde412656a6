"""Asking late nodes whether their agent is still connected (`mf.alive.<node>`, core NATS).

Only a node's own agent connection subscribes its liveness subject (nodeagent/agent/liveness.py),
so NATS's "no responders" answer means that connection is gone: the node is lost, found about one
telemetry interval after it died instead of two. The decisions are `node_loss`'s; this asks.
"""

from __future__ import annotations

import asyncio
import logging

from nats.errors import Error as NatsError
from nats.errors import NoRespondersError

from gateway.serving import node_loss
from gateway.serving.context import ServingContext
from gateway.serving.node_loss import Liveness, LostNode
from streams import subjects

log = logging.getLogger("modelforge.gateway.upkeep")
# How long a connected agent has to answer: a starved one that takes longer is judged by the
# two-interval rule, so this only bounds how long an upkeep round waits on the question.
ASK_TIMEOUT_S = 1.0


async def ask(ctx: ServingContext, node_id: str) -> Liveness:
    try:
        await ctx.client.request(subjects.alive_subject(node_id), b"", timeout=ASK_TIMEOUT_S)
    except NoRespondersError:
        return Liveness.NO_RESPONDERS
    except (NatsError, TimeoutError) as error:
        log.info("node %s did not answer whether it is connected (%r)", node_id, error)
        return Liveness.NO_ANSWER
    return Liveness.ANSWERED


async def gone_nodes(ctx: ServingContext, now: float) -> list[LostNode]:
    """Ask each node whose sample is late (at most once an interval, all at once); those whose
    connection is gone, to be declared lost."""
    live = ctx.live
    late = node_loss.nodes_to_ask(
        live.catalog, live.accelerators, live.telemetry.values(), now, live.feed, ctx.liveness_asked
    )
    for node in late:
        ctx.liveness_asked[node.node_id] = now
    answers = await asyncio.gather(*(ask(ctx, node.node_id) for node in late))
    return node_loss.proven_gone(late, answers)
