"""A user's module that fails on import (what the imports error must name)."""

raise ImportError("no module named 'mujoco_thing'")
