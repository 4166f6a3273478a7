"""Headwater: a JetStream-compatible persistence engine for NATS and its control plane."""

__version__ = "0.1.0"
