"""The agent's answer to "are you there?" (`mf.alive.<node>`, core NATS request-reply).

Only this agent's connection subscribes its node's subject (its NATS user may subscribe no other's),
so while it is connected the gateway's question is answered, and once the connection is gone (the
process killed, the machine down) NATS itself answers "no responders": the gateway's proof that the
node is lost, which it need not wait two telemetry intervals for (gateway/serving/liveness.py). The
answer is empty: being answered is all it says.
"""

from __future__ import annotations

from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription
from nats.errors import Error as NatsError

from streams import subjects


async def answer_liveness(client: Client, node_id: str) -> Subscription:
    """Answer the node's liveness subject from now on (the subscription ends with the connection)."""

    async def answer(msg: Msg) -> None:
        if msg.reply:
            try:
                await client.publish(msg.reply, b"")
            except NatsError:
                return  # the connection is closing: the asker hears no responders, as it should

    subscription = await client.subscribe(subjects.alive_subject(node_id), cb=answer)
    await client.flush()  # answering before the generation's first telemetry says the node is live
    return subscription
