"""Vibration signal pipeline: simulator, readers, windowing, federations."""
