"""A node's silence, read from MF_TELEMETRY itself before the node is declared lost.

The live view's telemetry is what this replica's follower has read so far. When the replica falls
behind rather than the node (its event loop starved on a busy machine, its follower being made
again after missed heartbeats or a NATS server's loss), every node looks silent to it, and a node
declared lost that was not loses its work: its books go cold and its generation is not taken back
until its agent restarts. So the stream's last sample of each of the node's accelerators is read
first and applied; the decision is then made on what the node actually published. A stream that
cannot be read (electing a leader) decides nothing: the next round asks again.
"""

from __future__ import annotations

import logging

import msgspec
from nats.errors import Error as NatsError
from nats.js.errors import NotFoundError

from gateway.serving.context import ServingContext
from gateway.serving.node_loss import LostNode
from streams import subjects
from streams.messages import AcceleratorTelemetry

log = logging.getLogger("modelforge.gateway.upkeep")
_sample_decoder = msgspec.json.Decoder(AcceleratorTelemetry)


async def read_through(ctx: ServingContext, silent: list[LostNode]) -> bool:
    """Apply the stored last sample of every accelerator of the `silent` nodes to the live view;
    False when the stream could not be read (nothing can be decided this round)."""
    js = ctx.client.jetstream()
    for lost in silent:
        node = ctx.live.catalog.nodes.get(lost.node_id)
        for spec in node.accelerators if node is not None else ():
            subject = subjects.telemetry_subject(lost.node_id, spec.accelerator_id)
            try:
                stored = await js.get_last_msg(subjects.TELEMETRY_STREAM, subject)
            except NotFoundError:
                continue  # it never published from this accelerator: silent indeed
            except (NatsError, TimeoutError) as error:
                log.info("node %s looks silent, but MF_TELEMETRY cannot be read (%r)", lost.node_id, error)
                return False
            try:
                sample = _sample_decoder.decode(stored.data or b"")
            except msgspec.DecodeError:
                continue  # (the follower logs a malformed sample)
            ctx.live.apply_sample(subject, stored.seq or 0, sample)
    return True
