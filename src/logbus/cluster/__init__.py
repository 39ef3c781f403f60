"""Control plane: metadata stores (local SQLite, ZooKeeper), controller, replica placement, elections."""
