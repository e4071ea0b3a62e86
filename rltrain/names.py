"""Names shared by the configs, the records and the runtime.

Free of torch on purpose: the command line reads and checks a config, and starts Ray, while
torch and the emulators load beside it (:func:`rltrain.launch.prepare_train`).
"""

from __future__ import annotations

from typing import Literal

PushStatus = Literal["applied", "accumulated", "dropped", "rejected"]
LoggedStatus = Literal["applied", "accumulated", "dropped", "rejected", "left"]
"""A push's status in a recording shard's log (``server.record``), or ``left``: a worker the
barriers stopped waiting for (its share done, or its process lost), logged so that
``rltrain reapply`` follows the rounds that averaged fewer workers after it."""
Role = Literal["actor", "learner", "worker", "shard", "policy", "evaluator"]
"""What a process is: an RL actor (acts only), a learner, a worker (a3c/a2c/ppo: acts and
learns; or a supervised worker), a parameter-server shard, the policy worker or the evaluator
(which plays a run's checkpoints). All but the evaluator are fault-event targets."""
Verdict = Literal["work", "wait", "gone"]
"""What the driver does with a process after a failure or a revival: give it work now, wait
while Ray restarts it, or go on without it."""
