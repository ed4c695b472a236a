"""Cluster mode (issue 19, SPEC §11): the same runtime in shard hosts on Ray over the PostgreSQL store.

PostgreSQL decides who may write (:mod:`hermes_actors.store.pg.shards`: shard leases on the database clock, checked
in every turn's transaction); Ray only places and restarts the hosts (:mod:`hermes_actors.cluster.host.ray_host`). Needs
the ``cluster`` extra (psycopg, ray); nothing the single-machine daemon imports by default imports this package.
"""
