"""Cluster metadata in etcd (docs/CLUSTERING.md, "etcd"): consensus is etcd's, never ours.

``bootstrap`` derives an etcd member's name, ports and start mode from the cluster settings (pure
functions); ``etcdmember`` runs that member as a child process; ``client`` is the thin asyncio
wrapper over ``aetcd`` the server reads and writes its cluster state through.
"""
