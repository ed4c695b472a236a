"""Platform adapters: each turns one platform's wire format into inbound messages and sends replies."""
