"""Operating deployments and nodes: drain, unload, residency, scheduler policy, experiment
activation, node enablement and a node's drain. Above promotion (a node's change can make an
approval stale) and serving (an unload is planned and done as an eviction is)."""
