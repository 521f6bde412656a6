"""Random bits for ids (events, requests, leases, traces) from a generator of this package's own.

Ids identify, they do not authorise, so a seeded Mersenne Twister serves and spares a system call
per id on the hot path (keys use `secrets`). It is not the `random` module's shared generator:
anything in the process may seed that one (a library fixing its randomness, hypothesis before each
example), and ids drawn after the same seed repeat, which JetStream's deduplication by
`Nats-Msg-Id` then takes for a resend of the earlier event: the new one is never stored.

Pure module: no I/O beyond the seed (from `os.urandom`), drawn again in a forked child.
"""

from __future__ import annotations

import os
import random

_generator = random.Random()
os.register_at_fork(after_in_child=_generator.seed)

random_bits = _generator.getrandbits
