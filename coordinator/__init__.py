"""Coordinator: the service that drives federated rounds and clusters the agents.

The MQTT runtime is not part of this release yet; see the README's roadmap.
"""
