"""Plumbing shared by the platform adapters: HTTP client and host, downloads, rate limits, text splitting."""
