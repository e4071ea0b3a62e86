"""The one base class of user-facing errors: the CLI prints their message as one line and
exits with code 2, without a traceback."""


def shown(value: object) -> str:
    """A refused config value as YAML writes it (null, true), else as Python does."""
    if value is None or isinstance(value, bool):
        return {None: "null", True: "true", False: "false"}[value]
    return repr(value)


class RLTrainError(Exception):
    """A problem with what the user asked for or gave us (config, data, env id, checkpoint)."""


class UserError(RLTrainError):
    """A problem with what the user asked for: printed as one line, exit code 2."""


class ConfigError(RLTrainError, ValueError):
    """A config key, type or value that is not allowed; the message is one line."""


class UnknownKey(ConfigError):
    """A config key its section does not have (``key``: its last part); loading a whole
    config adds where keys of that name do live (``--set algo.lr``: optimizer.lr)."""

    def __init__(self, message: str, key: str) -> None:
        super().__init__(message)
        self.key = key
