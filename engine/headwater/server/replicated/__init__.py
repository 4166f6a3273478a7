"""Replicated streams (R3/R5): the sans-IO replication core, its simulator and its runner.

The design is docs/REPLICATION.md. `core.Replica` is one server's state machine for one
stream's replica group; `record.GroupRecord` is the group's configuration as etcd holds it;
`messages` are what replicas send each other; `simulator` drives N cores, a model of etcd, a
faulty network and faulty disks from one seed and checks the invariants after every step.
`runner.GroupRunner` runs one core for real: `wire` encodes its messages for the routes,
`groupstore` keeps the record in etcd, and `wal.ReplicationLog` is the durable log on disk
(segments of CRC-checked records, group-committed fsyncs). Binding them to streams is a later
part.
"""
