"""The actor runtime: edge, supervisor, session actors and turns, outbox, timers, leases."""
