"""What the user's env did wrong during a run, in one line: an :class:`EnvFailed` that names
the env and the call (``reset()``, ``step()``), with the env's traceback as its ``detail``.

Nothing here runs on the happy path but :func:`check_finite`, one vectorised test of the
batch the policy acts on next (floating observations only; a negligible share of an actor's
step). A wrong shape is found after the fact: gymnasium's vector fails to
concatenate it, and :func:`diagnose` then looks at what each sub-env returned.
"""

from __future__ import annotations

import os
import sysconfig
import traceback
import warnings
from collections.abc import Sequence
from typing import Any

import gymnasium
import numpy as np

from rltrain.envs.adapt import CALLING, raw_mismatch, raw_of
from rltrain.faults import EnvFailed


def first_line(e: BaseException) -> str:
    """``Type: the first line of the message`` (the type alone when there is no message)."""
    text = str(e).strip()
    return f"{type(e).__name__}: {text.splitlines()[0]}" if text else type(e).__name__


def describe_space(shape: Sequence[int]) -> str:
    return f"Box{tuple(shape)}"


def diagnose(
    env_id: str,
    call: str,
    e: BaseException | None,
    returned: Any,
    shape: Sequence[int],
    envs: Sequence[gymnasium.Env] = (),
) -> EnvFailed:
    """The error of a ``call`` of env ``env_id`` that raised ``e``: a wrong observation as one
    of ``envs`` returned it, before rltrain's adapters (:class:`RawObservation`: its shape, or
    its Dict's key, in the env's own terms), or a wrong shape when one of ``returned`` (what
    each sub-env gave, where the vector keeps it) does not fit ``shape``, else what it
    raised. Call it inside the ``except`` (it keeps the traceback)."""
    detail = traceback.format_exc() if e is not None else ""
    adapted = _misfit(returned, shape)
    # the env's own terms where a shape is to blame: not where the env raised, or gymnasium's
    # vector refused its reward (an observation that only looks off had taken the blame)
    raws = [r for r in map(raw_of, envs) if r is not None]
    returned_all = all(r.last is not CALLING for r in raws)  # (an env's own call raised)
    for raw in raws if returned_all and (e is None or adapted or _in_adapters(e)) else ():
        found = None if raw.last is None else raw_mismatch(raw.observation_space, raw.last)
        if found:
            return EnvFailed(f"env {env_id!r}: {call} returned an {found}", detail)
    if adapted:
        return EnvFailed(f"env {env_id!r}: {call} returned an {adapted}", detail)
    hint = "" if e is None else returns_hint(call, e)
    if e is None:
        what = "returned a malformed observation"
    elif hint:  # gymnasium's vector could not take what it returned: no line of the env's
        what = f"returned what gymnasium's vector could not take ({first_line(e)}){hint}"
    else:
        what = f"raised {first_line(e)}{where(e)}"
        names = [f.name for f in own_frames(e)]  # (explore96: "step() raised ..., in reset")
        if call == "step()" and "reset" in names and "step" not in names:
            call = "reset() (the autoreset inside step())"
    return EnvFailed(f"env {env_id!r}: {call} {what}", detail)


def _misfit(returned: Any, shape: Sequence[int]) -> str:
    """``observation of shape (7,); its observation_space is Box(5,)`` for the first of
    ``returned`` (each sub-env's, where the vector keeps them) that does not fit, else ""."""
    for obs in returned if isinstance(returned, list | tuple) else ():
        try:
            got = None if obs is None else tuple(np.shape(obs))  # None: not returned yet
        except ValueError:  # a ragged list: no shape at all
            continue
        if got is not None and got != tuple(shape):
            return f"observation of shape {got}; its observation_space is {describe_space(shape)}"
    return ""


GYMNASIUM = os.path.dirname(os.path.abspath(gymnasium.__file__)) + os.sep
ADAPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "adapt.py")


def _in_adapters(e: BaseException) -> bool:
    """Whether ``e`` was raised inside the wrappers between the env and the policy (rltrain's
    adapters, gymnasium's frame stack), where a wrong observation fails in their terms: not
    in the env's own code, nor where gymnasium's vector stores what the env returned (an
    array reward's error kept its own words: review88)."""
    for f in traceback.extract_tb(e.__traceback__):  # (RawObservation's calls: the env's own)
        if f.filename.startswith(GYMNASIUM + "wrappers") or (
            f.filename == ADAPT and f.name not in ("step", "reset")
        ):
            return True
    return False


RETURNS = {
    "step()": "(obs, reward: a number, terminated: bool, truncated: bool, info: dict)",
    "reset()": "(obs, info: dict)",
}


def returns_hint(call: str, e: BaseException) -> str:
    """What ``step()`` or ``reset()`` must return, when ``e`` came from gymnasium taking what
    it returned (its vector storing an array reward: "setting an array element with a
    sequence"; unpacking four values, or a reset's observation alone: "not enough values" or
    "too many values to unpack"), not from the env."""
    frames = traceback.extract_tb(e.__traceback__)
    last = frames[-1].filename if frames else ""
    # gymnasium's machinery, not one of its envs (Pendulum's own step() raising with a bad
    # env.kwargs was blamed on what it returned)
    gym = last.startswith(GYMNASIUM) and not last.startswith(f"{GYMNASIUM}envs{os.sep}")
    if call in RETURNS and gym and isinstance(e, ValueError | TypeError):
        return f"; {call} must return {RETURNS[call]}"
    return ""


PKG = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # rltrain's own files
STDLIB = tuple({sysconfig.get_paths()[k] for k in ("stdlib", "platstdlib")})  # Python's own


def where(e: BaseException, own_only: bool = False) -> str:
    """`` (at envs.py:12, in step)``: the innermost frame of ``e``'s traceback outside the
    installed packages and rltrain (the user's env), else (unless ``own_only``) the
    innermost: an env that fails in its first reset is refused before the run folder, whose
    failure.log would hold the traceback, exists."""
    f = raised_in(e, own_only)
    return "" if f is None else f" (at {os.path.basename(f.filename)}:{f.lineno}, in {f.name})"


def raised_in(e: BaseException, own_only: bool = False) -> traceback.FrameSummary | None:
    """The frame :func:`where` names (None: none)."""
    own = own_frames(e)
    if own:
        return own[-1]
    frames = traceback.extract_tb(e.__traceback__)
    return None if own_only or not frames else frames[-1]


def own_frames(e: BaseException) -> list[traceback.FrameSummary]:
    """The frames of the user's code in ``e``'s traceback, outermost first: neither rltrain's
    nor an installed package's nor Python's own (``<frozen importlib._bootstrap>``,
    random.py); looked for along ``e``'s causes too (gymnasium raises a constructor's
    TypeError again from its own frames)."""
    chain: list[BaseException] = [e]
    while (nxt := chain[-1].__cause__ or chain[-1].__context__) is not None and len(chain) < 8:
        chain.append(nxt)
    for x in chain:
        own = [f for f in traceback.extract_tb(x.__traceback__) if _is_users(f.filename)]
        if own:
            return own
    return []


def _is_users(filename: str) -> bool:
    if filename.startswith("<") or "-packages" in filename or filename.startswith(PKG):
        return False
    return not filename.startswith(STDLIB)


# 0 x inf in check_finite's dot product: the inf is reported as an EnvFailed, not a warning
warnings.filterwarnings("ignore", "invalid value encountered in dot", RuntimeWarning, __name__)


def check_finite(env_id: str, call: str, obs: np.ndarray, zeros: np.ndarray | None = None) -> None:
    """Raise :class:`EnvFailed` if ``obs`` (floating) holds a NaN or an inf, or (float64) a
    value float32 cannot hold: the policy's logits would be NaN, its updates refused, far
    from the cause.

    One dot product with ``zeros`` (``obs.size`` of them, of its dtype; made here if not
    given): 0 x NaN and 0 x inf are NaN, 0 x any finite value is 0 and never overflows.
    Cheaper than ``np.isfinite(obs).all()``, which writes a mask as large as ``obs``."""
    flat = obs.reshape(-1)
    if zeros is None:
        zeros = np.zeros(flat.size, flat.dtype)
    if flat.dot(zeros) != 0:
        raise non_finite(env_id, call, obs)
    if flat.dtype.itemsize > 4 and flat.size:  # float64: finite, and still finite in float32?
        top = max(float(flat.max()), -float(flat.min()))  # (two reductions, no copy)
        if top > F32_MAX:
            raise EnvFailed(
                f"env {env_id!r}: {call} returned an observation of magnitude {top:.3g}, "
                f"beyond float32's {F32_MAX:.3g}: the policy computes in float32 (inf, then "
                "NaN); scale the observations (a wrapper: env.wrappers)"
            )


F32_MAX = float(np.finfo(np.float32).max)


def float32_rewards(env_id: str, reward: np.ndarray) -> np.ndarray:
    """``reward`` [B] as float32 (what the learners sum), or :class:`EnvFailed` if one is NaN
    or inf, or beyond float32's range (a reward of 1e76 became inf there: every update was
    refused as non-finite and the mean return printed as a 77-digit number)."""
    with np.errstate(over="ignore"):
        r32 = np.asarray(reward).astype(np.float32)
    if np.isfinite(r32).all():
        return r32
    if not np.isfinite(np.asarray(reward, np.float64)).all():
        raise non_finite(env_id, "step()", reward, "reward")
    top = float(np.abs(np.asarray(reward, np.float64)).max())
    raise EnvFailed(
        f"env {env_id!r}: step() returned a reward of magnitude {top:.3g}, beyond float32's "
        f"{F32_MAX:.3g}: the learners sum rewards in float32; scale them (a wrapper: "
        "env.wrappers, e.g. gymnasium.wrappers:TransformReward)"
    )


def non_finite(env_id: str, call: str, values: np.ndarray, what: str = "observation") -> EnvFailed:
    """The error for a batch of ``what`` [B, ...] that holds a NaN or an inf. A reward's
    (:meth:`GymVectorEnv.step` checks them too): every update it reached would be refused as
    non-finite and the run would end as "diverged", as if the learning rate were to blame."""
    bad = np.flatnonzero(~np.isfinite(values.reshape(len(values), -1)).all(axis=1)).tolist()
    cast = values.dtype.kind == "f" and values.dtype.itemsize < 8 and what == "observation"
    beyond = f", or a value beyond {values.dtype}'s range" if cast else ""  # (cast to the space's)
    if what == "reward":  # (gymnasium's vector stores a reward of None as NaN)
        beyond = "; or None, which gymnasium's vector stores as NaN"
    return EnvFailed(
        f"env {env_id!r}: {call} returned a non-finite {what} (NaN or inf{beyond})",
        f"non-finite {what}s from the envs {bad} of the vector (index in the vector)",
    )
