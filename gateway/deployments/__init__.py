"""The deployment aggregate, pure: its state and fold, the decisions on it, and the names a client
reaches one by. Below serving and the live view, which fold it; promotion creates deployments."""
