"""`actors: auto` follows the CPUs Ray reports; no CPU count is inflated."""

from __future__ import annotations

from pathlib import Path

import pytest

from rltrain.config import ConfigError, load_config
from rltrain.rl.algos.dqn import ReplayConfig
from rltrain.rl.algos.impala import ImpalaConfig
from rltrain.rl.config import AlgoConfig, StopConfig, TrainConfig
from rltrain.rl.run.plans import RolloutCap, rollout_cap
from rltrain.rl.run.sizing import describe_sizes, gpu_learners, sized
from rltrain.runtime import ray as runtime
from rltrain.runtime.config import RuntimeConfig


def cfg(algo: str, **kw: object) -> TrainConfig:
    return TrainConfig(algo=AlgoConfig(name=algo), stop=StopConfig(max_env_steps=1), **kw)  # type: ignore[arg-type]


def test_yaml_auto_reads_as_zero_and_other_words_are_refused(tmp_path) -> None:  # noqa: ANN001
    path = tmp_path / "c.yaml"
    path.write_text("actors: auto\nstop: {max_env_steps: 1}\n")
    assert load_config(TrainConfig, path, []).actors == 0
    assert load_config(TrainConfig, path, ["actors=3"]).actors == 3
    with pytest.raises(ConfigError, match="actors"):
        load_config(TrainConfig, path, ["actors=many"])
    assert TrainConfig(stop=StopConfig(max_env_steps=1)).actors == 0  # the default is auto


@pytest.mark.parametrize(
    ("algo", "cpus", "gpu", "actors"),
    [
        ("appo", 2, False, 1),  # the learner takes a CPU
        ("impala", 16, True, 15),  # a GPU learner takes half of one
        ("dqn", 8, False, 7),
        ("a3c", 2, False, 2),  # workers act and learn: one per CPU
        ("ppo", 1, False, 1),
        ("appo", 1, False, 1),  # at least one actor
    ],
)
def test_auto_sizes_to_the_cpus(algo: str, cpus: int, gpu: bool, actors: int) -> None:
    assert sized(cfg(algo), cpus, gpu).actors == actors


def test_an_explicit_count_is_kept_and_described() -> None:
    c = sized(cfg("appo", actors=5), 2)
    assert c.actors == 5
    assert describe_sizes(c) == "5 actors, 1 learner, 1 server shard"
    assert describe_sizes(sized(cfg("a3c"), 3)) == "3 workers, 1 server shard"
    # dqn: its replay shards too (explore95), one per actor at most: a shard no actor fills
    # held its 1.8 GB zero-filled for 20 s (explore103)
    dqn = sized(cfg("dqn", actors=1, replay=ReplayConfig(shards=2)), 2)
    assert dqn.replay.shards == 1
    assert describe_sizes(dqn, asked_replay=2) == (
        "1 actor, 1 learner, 1 server shard, 1 replay shard (replay.shards=2: one per actor at "
        "most, as actor i fills shard i mod shards)"
    )
    two = sized(cfg("dqn", actors=2, replay=ReplayConfig(shards=2)), 2)
    assert describe_sizes(two, asked_replay=2).endswith("2 replay shards")
    assert sized(cfg("dqn", replay=ReplayConfig(shards=4)), 3).replay.shards == 2  # auto
    small = cfg("dqn", actors=1, replay=ReplayConfig(shards=2, capacity=3000))
    with pytest.raises(ConfigError, match=r"^actors=1, so replay.shards=2 builds 1 shard \("):
        sized(small, 2)  # (dqn.learning_starts 5000: more than one shard of 3000 holds)


@pytest.mark.slow  # starts Ray
def test_auto_resolves_from_rays_cpu_count_and_cpus_are_not_inflated() -> None:
    runtime.start(RuntimeConfig(num_cpus=3))
    try:
        cpus = runtime.cluster_cpus()
        assert cpus == 3  # what was asked, not raised to what processes want
        assert sized(cfg("appo"), cpus).actors == 2
        # 8 workers asked for on 3 CPUs: each reserves a share, Ray is not told of 8 CPUs
        fitted = runtime.fit_cpus(RuntimeConfig(), 8, 1)
        assert fitted.worker_cpus == pytest.approx(3 / 8)
        assert runtime.fit_cpus(RuntimeConfig(), 2, 1).worker_cpus == 1.0
        assert runtime.cluster_cpus() == 3
    finally:
        runtime.shutdown()


def test_a_fault_event_beyond_the_sized_actors_is_a_one_line_error() -> None:
    from rltrain.faults import FaultEvent, FaultsConfig

    c = cfg("appo", faults=FaultsConfig(events=(FaultEvent("kill", "actor", 3, 1.0),)))
    assert c.actors == 0  # auto: not checkable before Ray reports its CPUs
    with pytest.raises(ConfigError, match=r"actors=auto gave 1 on 2 CPUs: .*actor index 3"):
        sized(c, 2)
    assert sized(c, 8).actors == 7


def test_processes_are_fitted_node_by_node() -> None:
    """Ray places a process whole on one node: three 1-CPU workers on two 1-CPU nodes take
    0.5 CPU each (a share of the total, 2/3, fits one per node and leaves the third waiting
    for a node forever)."""
    from rltrain.runtime.ray.startup import packs

    assert packs([0.5, 0.5, 0.5], [1.0, 1.0]) and not packs([0.67] * 3, [1.0, 1.0])
    fit = runtime.fit_cpus
    assert fit(RuntimeConfig(), 3, 1, nodes=[1.0, 1.0]).worker_cpus == pytest.approx(0.5, 1e-6)
    assert fit(RuntimeConfig(), 4, 1, nodes=[2.0, 1.0]).worker_cpus == 0.6666
    # Ray keeps 4 decimals, rounding half up: shares round down so that they still fit
    assert fit(RuntimeConfig(), 3, 0, nodes=[2.0]).worker_cpus * 3 <= 2.0
    assert fit(RuntimeConfig(), 3, 1, nodes=[4.0]).worker_cpus == 1.0
    # shards that reserve CPUs pack beside the workers
    c = fit(RuntimeConfig(server_cpus=1.0), 2, 2, nodes=[2.0, 2.0])
    assert (c.worker_cpus, c.server_cpus) == (1.0, 1.0)
    c = fit(RuntimeConfig(server_cpus=1.0), 2, 2, nodes=[1.0, 1.0])
    assert c.worker_cpus == pytest.approx(0.5, 1e-6)


@pytest.mark.parametrize(
    ("algo", "learners", "learner_gpus", "cluster_gpus", "want"),
    [
        ("appo", 1, 1.0, 0.0, False),  # no GPU: the learner runs on a CPU
        ("appo", 1, 0.0, 1.0, False),  # learner_gpus 0: on a CPU, by choice
        ("a3c", 1, 1.0, 1.0, False),  # workers act and learn on CPUs
        ("impala", 1, 1.0, 1.0, True),
        ("impala", 2, 0.5, 1.0, True),  # two learners share one GPU
    ],
)
def test_learners_take_gpus_only_when_asked_and_there(
    algo: str, learners: int, learner_gpus: float, cluster_gpus: float, want: bool
) -> None:
    c = cfg(algo, learners=learners, learner_gpus=learner_gpus)
    assert gpu_learners(c, cluster_gpus) is want


def test_learner_gpus_ray_cannot_place_are_refused_in_one_line() -> None:
    """A learner would wait forever for a GPU that never frees up. Ray fits a share below 1
    inside one GPU: 3 learners x 0.6 do not fit 2 GPUs although 1.8 < 2."""
    cases = [
        ("appo", 2, 1.0, 1.0, "0.5"),
        ("impala", 3, 0.6, 2.0, "0.5"),
        ("dqn", 6, 0.2, 1.0, "0.1666"),
    ]
    for algo, learners, share, gpus, fair in cases:
        c = cfg(algo, learners=learners, learner_gpus=share)
        with pytest.raises(ConfigError, match=rf"Ray cannot place .* \(learner_gpus={fair}\)"):
            gpu_learners(c, gpus)
        assert gpu_learners(c, gpus, reserved=False)  # the local backend reserves nothing
        fitted = cfg(algo, learners=learners, learner_gpus=float(fair))
        assert gpu_learners(fitted, gpus)  # the share it suggests fits
    assert gpu_learners(cfg("appo", learners=4, learner_gpus=1.0), 4.0)
    for many in (1.5, 2.0):  # a learner computes on one GPU: a second would sit idle
        with pytest.raises(ValueError, match=f"learner_gpus={many:g}: a learner computes on one"):
            cfg("appo", learner_gpus=many)


def test_the_rollout_cap_grows_while_learners_starve_and_shrinks_while_rollouts_queue() -> None:
    """Few cores (one actor): the cap stays at two batches. Many actors and a fast (GPU)
    learner: it grows to every actor acting; a slow learner brings it back down."""
    few = RolloutCap.of(learners=1, learner_batch=1, actors=1)  # pong_appo on 2 cores
    assert (few.low, few.high) == (2, 2) and few.update(starving=True, queued=0) == 2
    assert RolloutCap.of(1, 2, 2).high == 4  # cartpole_appo: unchanged, every actor acts
    cap = RolloutCap.of(learners=1, learner_batch=1, actors=15)  # pong_appo on 16 cores + GPU
    assert (cap.low, cap.high) == (2, 16)
    assert [cap.update(starving=True, queued=0) for _ in range(20)][-1] == 16
    assert cap.update(starving=False, queued=1) == 16  # one batch waiting: as it should be
    assert [cap.update(starving=False, queued=5) for _ in range(20)][-1] == 2
    two = RolloutCap.of(learners=2, learner_batch=2, actors=8)
    assert two.low == 8
    gone = [two.update(starving=False, queued=3, batches=2) for _ in range(10)]  # one learner
    assert gone[-1] == 4  # gone for good: down to two batches of the one left


@pytest.mark.parametrize(
    ("batch", "held", "value", "note"),
    [(1, 16, 16, ""), (1, 40, 16, "holds 16 rollouts in flight, the most it can"), (1, 5, 5, "")]
    + [(1, 1, 1, ""), (2, 1, 2, "holds 2 rollouts in flight, the fewest it can"), (2, 17, 17, "")],
)
def test_impala_in_flight_holds_the_rollout_cap_within_a_batch_and_every_actor(
    batch: int, held: int, value: int, note: str
) -> None:
    """impala.in_flight: 15 actors on 2 cores get the lag of a box whose learner keeps up
    with all of them (16 rollouts in flight), whether the learner starves or not; outside
    what the run can hold, the nearest it can, said (review 85)."""
    from rltrain.rl.config.notes import in_flight_notes

    cap = RolloutCap.of(learners=1, learner_batch=batch, actors=15, held=held)
    assert cap.value == value
    assert {cap.update(starving=s, queued=q) for s, q in [(True, 0), (False, 9)] * 5} == {value}
    cfg = TrainConfig(
        algo=AlgoConfig(name="appo"),
        actors=15,
        impala=ImpalaConfig(learner_batch=batch, in_flight=held),
        stop=StopConfig(max_env_steps=10),
    )
    assert rollout_cap(cfg, 15).value == value
    said = in_flight_notes(cfg)
    assert said == ([f"impala.in_flight={held}: {note} ({said[0].split('(')[-1]}"] if note else [])


@pytest.mark.parametrize(
    ("env_id", "actors", "cpus", "groups"),
    [
        ("ALE/Pong-v5", 0, 2, 2),  # appo: 1 actor on 2 cores overlaps emulation and inference
        ("ALE/Pong-v5", 2, 2, 1),  # every core holds an actor: nothing to overlap
        ("ALE/Pong-v5", 4, 16, 2),
        ("ALE/Pong-v5", 0, 16, 1),  # 15 actors on 16 cores
        ("CartPole-v1", 0, 16, 1),  # Gymnasium vectors step in the actor's thread
    ],
)
def test_auto_groups_overlap_only_where_an_actor_has_two_cores(
    env_id: str, actors: int, cpus: int, groups: int
) -> None:
    from rltrain.envs import EnvConfig

    c = cfg("appo", actors=actors, env=EnvConfig(id=env_id, num_envs=8))
    assert sized(c, cpus).env.groups == groups
    explicit = cfg("appo", actors=actors, env=EnvConfig(id=env_id, num_envs=8, groups=3))
    assert sized(explicit, cpus).env.groups == 3  # a number given is kept


def test_env_groups_and_threads_take_auto_as_the_docs_write_it() -> None:
    pong = Path(__file__).resolve().parents[1] / "configs" / "pong_appo.yaml"
    c = load_config(TrainConfig, pong, ["env.groups=auto", "env.num_threads=auto"])
    assert (c.env.groups, c.env.num_threads) == (0, 0)


def test_actors_whose_policy_acts_elsewhere_overlap_atari_on_any_core_count() -> None:
    """runtime.inference: an actor waits for the batched policy, not on its CPU: its other
    group's games run meanwhile (15 actors on 16 cores, each with one core)."""
    from rltrain.envs import EnvConfig

    pong = cfg("appo", env=EnvConfig(id="ALE/Pong-v5", num_envs=16))
    assert sized(pong, 16, gpu=True, batched=True).env.groups == 2
    assert sized(pong, 16, gpu=True).env.groups == 1
    cartpole = cfg("appo", env=EnvConfig(id="CartPole-v1", num_envs=16))
    assert sized(cartpole, 16, gpu=True, batched=True).env.groups == 1


def test_the_policy_worker_takes_a_core_before_the_actors() -> None:
    """Half a core beside a GPU, as a GPU learner; a whole one when it acts on the CPU."""
    assert sized(cfg("appo"), 16, gpu=True, batched=True).actors == 15  # 16 - 0.5 - 0.5
    assert sized(cfg("appo"), 16, gpu=True).actors == 15  # int(15.5)
    assert sized(cfg("appo"), 4, batched=True).actors == 2  # 4 - 1 learner - 1 policy
    assert sized(cfg("appo"), 2, batched=True).actors == 1  # at least one


def test_the_process_runtime_counts_the_cores_this_process_may_use() -> None:
    import os

    from rltrain.runtime import process

    assert process.cluster_cpus() == len(os.sched_getaffinity(0))


def test_runtime_num_cpus_caps_the_cores_of_the_process_and_local_runtimes() -> None:
    """runtime.num_cpus on one machine without Ray: the cores ``actors: auto`` sizes to
    (it was read by a local Ray only, and accepted unread by the process runtime)."""
    import os

    from rltrain.runtime import local, process

    cores = len(os.sched_getaffinity(0))
    for backend, asked, cpus in [(process, 1, 1), (process, cores + 8, cores), (local, 0, cores)]:
        backend.start(RuntimeConfig(num_cpus=asked))  # (never more than there are)
        try:
            assert backend.cluster_cpus() == cpus
        finally:
            backend.shutdown()


def test_pong_on_a_16_core_1_gpu_box_gets_the_documented_layout(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """docs/training.md, "Sizing a run to the box": configs/pong_appo.yaml (actors: auto) on
    16 cores and one GPU (faked: counts as the process runtime reports them) is 15 actors of
    16 games in two groups, the learner and the policy worker on the GPU, and each learn the
    1024 samples the curves in docs/pong.md were measured with."""
    import torch

    from rltrain.rl.run.placement import place
    from rltrain.rl.run.sizing import describe_batch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    pong = load_config(TrainConfig, "configs/pong_appo.yaml", [])
    placed = place(pong, "process", 16, 1)
    assert (placed.gpu, placed.inference, placed.hosted) == (True, "cuda", True)
    assert (placed.cfg.actors, placed.cfg.env.num_envs, placed.cfg.env.groups) == (15, 16, 2)
    assert describe_batch(placed.cfg) == (
        "batch: 15 actors x 16 envs x 64 steps (240 envs); each learn 1024 samples, "
        "4 epochs x 4 minibatches of 256; adam lr 0.00025 (linearly from 2,750,000 steps to 0 "
        "at 5,000,000 steps)"
    )
    two_cores = place(pong, "process", 2, 0)  # this repository's CI box: one actor
    assert (two_cores.gpu, two_cores.inference, two_cores.cfg.actors) == (False, None, 1)
    assert describe_batch(two_cores.cfg).startswith("batch: 1 actor x 16 envs x 64 steps")


def test_the_batch_line_says_when_the_rule_given_is_not_the_rule_run() -> None:
    """ppo and a2c step behind a barrier: an async rule runs as sync, and config.yaml keeps
    the rule as given, so the run's first lines say so."""
    from rltrain.rl.run.sizing import describe_batch

    # (the appo config's early stop needs an asynchronous server: ppo's barrier refuses it)
    sets = ["algo.name=ppo", "ppo.target_kl=0"]
    ppo = load_config(TrainConfig, "configs/cartpole_appo.yaml", sets)
    assert ppo.server.rule == "async"
    assert describe_batch(ppo).endswith("; server.rule=async runs as sync for ppo")
    appo = load_config(TrainConfig, "configs/cartpole_appo.yaml", [])
    assert "runs as" not in describe_batch(appo)


def test_the_batch_line_of_dqn_says_when_its_learners_start() -> None:
    """explore112: the live line said "updates 0" for 170 s of a Pong run, and nothing said
    the learners wait for dqn.learning_starts, nor that a resume fills the memory again."""
    from rltrain.rl.run.sizing import describe_batch

    cfg = load_config(TrainConfig, "configs/pong_gorila.yaml", ["actors=1"])
    line = describe_batch(cfg)
    assert "learners sample minibatches of 32 from the replay once it holds 20,000 " in line
    assert "the memory is not checkpointed: a resume fills it again" in line


def test_what_auto_chose_is_said_and_noted_in_config_yaml(
    tmp_path,
    capsys: pytest.CaptureFixture[str],  # noqa: ANN001
) -> None:
    """The run's first lines and config.yaml's tail say the session's sizes; the keys still
    say auto, so a --resume on another box sizes the run to that one."""
    from rltrain.rl.run.placement import note_sizes, place
    from rltrain.rundir import write_config

    pong = load_config(TrainConfig, "configs/pong_appo.yaml", [])
    write_config(tmp_path, pong)
    note_sizes(tmp_path, place(pong, "process", 4, 0), 4, 0)
    out = capsys.readouterr().out.splitlines()
    assert out.pop(0).startswith("env: ALE/Pong-v5 under the Atari protocol: sticky actions 0.25")
    assert out[0].startswith("batch: 3 actors x 16 envs x 64 steps (48 envs)")
    # the live line's return, the score stop and summary.json: one episode per env at least
    assert out[1] == (
        "return (the live line, stop.mean_return, summary.json): the mean of the last 48 "
        "episodes, as many as the envs; stop.window=20 would see only each round's shortest "
        "games (envs that start together end their short games first)"
    )
    assert out[2] == (  # which stop ends it (explore103: another game's score stop)
        "stop: a mean return of 18 (the last 48 episodes), 5,000,000 env steps or 14,400 s, "
        "whichever comes first"
    )
    text = (tmp_path / "config.yaml").read_text()
    assert "# sized at this session's start (4 CPUs, 0 GPUs" in text
    assert "# actors: 3\n# env.groups: 1\n# batch: 3 actors" in text  # 1.3 cores each
    assert load_config(TrainConfig, tmp_path / "config.yaml", []).actors == 0  # still auto


def test_the_sharing_note_points_at_auto_only_where_the_actors_were_set() -> None:
    """Processes that reserve more CPUs than the cluster has share the cores: the note says
    so, and names ``actors: auto`` as the fix only where the user chose the count."""
    import dataclasses

    from rltrain.rl.run.placement import place

    cartpole = load_config(TrainConfig, "configs/cartpole_appo.yaml", ["actors=8"])
    placed = place(cartpole, "ray", 2, 0)
    asked = placed.cfg.runtime
    fitted = dataclasses.replace(asked, worker_cpus=0.22, server_cpus=0.22)
    assert placed.sharing_note(2, asked, fitted, actors_set=True).endswith(
        "share the cores, each reserving 0.22 CPU (runtime.worker_cpus=1) (actors: auto sizes "
        "the run to the CPUs)"
    )
    assert placed.sharing_note(2, asked, fitted, actors_set=False).endswith(
        "(runtime.worker_cpus=1)"
    )
    # the shards counted where they reserve CPUs (2 processes on 2 CPUs was said where 4 were
    # asked), and an asked worker_cpus named
    sets = ["actors=1", "server.shards=2", "runtime.server_cpus=1", "runtime.worker_cpus=2"]
    two = place(load_config(TrainConfig, "configs/cartpole_appo.yaml", sets), "ray", 2, 0)
    half = dataclasses.replace(two.cfg.runtime, worker_cpus=0.33, server_cpus=0.16)
    assert two.sharing_note(2, two.cfg.runtime, half, actors_set=True) == (
        "2 processes and 2 shard(s) ask 6 CPUs of 2: they share the cores, each reserving "
        "0.33 CPU (runtime.worker_cpus=2), a shard 0.16 (runtime.server_cpus=1)"
    )  # (and no hint at actors: auto for one actor)


def test_the_start_says_where_the_actors_torch_threads_outnumber_the_cpus() -> None:
    """On every runtime (the process runtime reserves no CPUs, so Ray's sharing note never
    comes): actors x threads_per_worker above the CPUs is said; one thread per actor and a
    learner with more (atari_appo.yaml's measured layout) is not."""
    from rltrain.rl.run.placement import place

    many = place(
        cfg("appo", actors=4, runtime=RuntimeConfig(threads_per_worker=2)), "process", 4, 0
    )
    (note,) = many.notes(4, many.cfg.runtime, many.cfg.runtime, True)
    assert note.startswith("4 actors x runtime.threads_per_worker=2 = 8 torch threads on 4 CPUs")
    workers = place(
        cfg("a3c", actors=2, runtime=RuntimeConfig(threads_per_worker=2)), "process", 2, 0
    )
    assert workers.threads_note(2).startswith("2 workers x")
    assert "workers on CPU" in workers.describe()
    learner = place(cfg("appo", runtime=RuntimeConfig(learner_threads=2)), "process", 2, 0)
    assert learner.notes(2, learner.cfg.runtime, learner.cfg.runtime, False) == []


def test_the_batch_line_says_where_the_learning_rate_is_annealed_to() -> None:
    """schedule.lr_end: the start's line gave the starting lr only."""
    from rltrain.rl.run.sizing import describe_lr

    assert describe_lr(cfg("appo")) == "rmsprop lr 0.0007"
    sets = ["schedule.lr_end=0.1", "schedule.steps=300000", "schedule.start=1000"]
    sets += ["algo.name=appo", "stop.max_env_steps=1"]
    annealed = load_config(TrainConfig, "configs/cartpole_appo.yaml", sets)
    want = "adam lr 0.001 (linearly from 1,000 steps to 0.0001 at 300,000 steps)"
    assert describe_lr(annealed) == want
