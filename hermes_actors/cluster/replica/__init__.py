"""What runs in a ``hermesd --cluster`` replica: the ingress and the inbox port its adapters see, where each
platform's adapter runs, the outbox dispatch under role leases, the API's replies relayed back to the waiting
request, the operator's routes, the replica's health and metrics, and the process's entry point."""
