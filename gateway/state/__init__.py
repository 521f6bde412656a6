"""What the gateway knows, folded from events: pure folds here, the live view in `live.py`."""
