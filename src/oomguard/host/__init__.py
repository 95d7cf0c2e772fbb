"""Host memory: the engine-neutral ledger of one node's RAM, and the limits a container runs under."""
