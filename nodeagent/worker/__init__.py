"""One deployment's runtime in a process of its own (`python -m nodeagent.worker`), under the agent.

The agent verifies the artifact set, then hands the worker the verified folder; the worker loads
the runtime, warms it up and serves the capability (its server and dynamic batcher) over one unix
socket (`protocol.py`). Killing the worker is the unload: the kernel takes back all it held.
"""
