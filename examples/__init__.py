"""Examples the README shows (and tests run)."""
