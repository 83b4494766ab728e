"""Beyond one host: the fleet's shape (topology), one replica across hosts (multinode), and the
router in front of the replicas (router)."""
