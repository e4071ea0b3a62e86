"""rltrain: distributed RL and supervised training through a sharded parameter server."""

__version__ = "0.1.0"
