"""An update rule of your own: docs/extending.md."""

from rltrain.ps.rules import Async, register_rule


class DecayAsync(Async):
    """Async, each update's step scaled by 0.8^staleness."""

    name = "async_decay"

    def lr_scale(self, server, staleness):
        return 0.8**staleness * super().lr_scale(server, staleness)


register_rule(DecayAsync())
