"""CPU thread settings: decided (settings), measured (measure) and searched (tune)."""
