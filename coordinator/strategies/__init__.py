"""Federated strategies, one per module, all implementing :class:`base.Strategy`.

The registry of names lives in :mod:`coordinator.strategies.registry`.
"""
