"""The one base class of user-facing errors: the CLI prints their message as one line and
exits with code 2, without a traceback."""


class RLTrainError(Exception):
    """A problem with what the user asked for or gave us (config, data, env id, checkpoint)."""


class ConfigError(RLTrainError, ValueError):
    """A config key, type or value that is not allowed; the message is one line."""
