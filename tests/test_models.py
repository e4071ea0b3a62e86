"""The RL networks: precision, memory layout and flat parameter vectors."""

from __future__ import annotations

import pytest
import torch

from rltrain.envs import ActionSpace, EnvConfig
from rltrain.rl.algos.models import build_policy, flat_params, load_flat, parameters_to_come
from rltrain.rl.algos.torsos import (
    ImpalaCNNTorso,
    NatureCNNTorso,
    resolve_precision,
    to_device,
    train_layout,
)
from rltrain.rl.config import StopConfig, TrainConfig
from rltrain.rl.learner import clipped_flat_grad


def test_auto_precision_is_fp32_for_vectors() -> None:
    assert resolve_precision("auto", "auto", (4,)) == "fp32"
    assert resolve_precision("fp32", "auto", (4, 84, 84)) == "fp32"
    assert resolve_precision("bf16", "auto", (4, 84, 84)) == "bf16"


def test_auto_precision_is_resolved_on_the_device_the_model_moves_to(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A model is built on the CPU; a GPU learner's precision must not depend on the host CPU:
    auto is fp32 on CUDA (bf16 measured slower there), bf16 on a CPU that has it natively."""
    model = build_policy("nature_cnn", (4, 84, 84), 6, 512, precision="auto")
    torso = model.torso
    assert isinstance(torso, NatureCNNTorso)
    monkeypatch.setattr(torch.backends.mkldnn, "is_available", lambda: True)
    monkeypatch.setattr(torch.ops.mkldnn, "_is_mkldnn_bf16_supported", lambda: True)
    monkeypatch.setattr(torch.nn.Module, "to", lambda self, *a, **k: self)  # (no GPU here)
    assert to_device(model, torch.device("cuda"), "auto") is model and not torso.bf16
    to_device(model, torch.device("cpu"), "auto")
    assert torso.bf16
    to_device(model, torch.device("cuda"), "bf16")  # asked for: whatever the device
    assert torso.bf16


def _pair() -> tuple[torch.nn.Module, torch.nn.Module]:
    """The same bf16 Nature CNN twice; the second in the learners' channels-last layout."""
    torch.manual_seed(0)
    a = build_policy("nature_cnn", (4, 84, 84), 6, 512, precision="bf16")
    torch.manual_seed(0)
    b = build_policy("nature_cnn", (4, 84, 84), 6, 512, precision="bf16")
    train_layout(b)
    return a, b


def test_channels_last_keeps_the_flat_vector_and_the_outputs() -> None:
    a, b = _pair()
    conv = b.torso.net[0][0].weight
    assert conv.is_contiguous(memory_format=torch.channels_last) and not conv.is_contiguous()
    assert torch.equal(flat_params(a), flat_params(b))  # logical order, whatever the layout
    obs = torch.randint(0, 255, (4, 4, 84, 84), dtype=torch.uint8)
    (la, va), (lb, vb) = a(obs), b(obs)
    assert torch.allclose(la, lb, atol=1e-2) and torch.allclose(va, vb, atol=1e-2)
    # gradients come out flat in the same logical order
    (la.sum() + va.sum()).backward()
    (lb.sum() + vb.sum()).backward()
    ga, gb = clipped_flat_grad(a, 0)[0], clipped_flat_grad(b, 0)[0]
    assert torch.nn.functional.cosine_similarity(ga, gb, dim=0) > 0.99


def test_load_flat_copies_in_place_and_keeps_the_layout() -> None:
    _, b = _pair()
    values = torch.randn(flat_params(b).numel())
    weight = b.torso.net[0][0].weight
    load_flat(b, values)
    assert b.torso.net[0][0].weight is weight  # the same tensor, not a swapped-in view
    assert weight.is_contiguous(memory_format=torch.channels_last)
    assert torch.equal(flat_params(b), values)
    values.zero_()  # the model does not alias the vector it was given
    assert flat_params(b).abs().sum() > 0


def test_fp32_nature_cnn_learns_channels_last_on_a_cpu_and_acts_contiguous() -> None:
    """On a CPU without bf16 (``precision: auto`` is fp32 on AVX2) the learner's forward +
    backward ran 1.2-1.6x faster NHWC; acting on a few frames did not, so it stays NCHW."""
    net = build_policy("nature_cnn", (4, 84, 84), 6, 512, precision="fp32")
    torso = net.torso
    assert isinstance(torso, NatureCNNTorso) and not torso.channels_last
    assert torso.net[0][0].weight.is_contiguous()
    train_layout(net)
    assert torso.channels_last
    assert torso.net[0][0].weight.is_contiguous(memory_format=torch.channels_last)


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_flat_round_trip(precision: str) -> None:
    net = build_policy("nature_cnn", (4, 84, 84), 6, 512, precision=precision)
    train_layout(net)
    values = flat_params(net) + 1.0
    load_flat(net, values)
    assert torch.equal(flat_params(net), values)


def test_auto_picks_the_cnn_for_images_it_fits_and_the_mlp_otherwise() -> None:
    """Any image side from 36 pixels (CarRacing's 96x96, non-square ones) takes the Nature
    CNN; MiniGrid-sized 7x7 views and vectors take the MLP; forcing the CNN on them is a
    one-line error."""
    for shape in [(4, 84, 84), (3, 96, 96), (3, 40, 48)]:
        net = build_policy("auto", shape, 5, 64)
        assert isinstance(net.torso, NatureCNNTorso)
        assert net(torch.zeros(2, *shape, dtype=torch.uint8))[0].shape == (2, 5)
    small = build_policy("auto", (3, 7, 7), 5, 64)
    assert not isinstance(small.torso, NatureCNNTorso)
    assert small(torch.zeros(2, 3, 7, 7, dtype=torch.uint8))[0].shape == (2, 5)
    with pytest.raises(ValueError, match="at least 36 pixels a side, got \\(3, 7, 7\\)"):
        build_policy("nature_cnn", (3, 7, 7), 5, 64)


def test_the_cnn_scales_uint8_frames_only() -> None:
    """uint8 pixels are divided by 255; float images are taken as they are."""
    torso = NatureCNNTorso(3, (36, 36))
    pixels = torch.full((1, 3, 36, 36), 255, dtype=torch.uint8)
    torch.testing.assert_close(torso(pixels), torso(torch.ones(1, 3, 36, 36)))


def test_policies_built_for_parameters_to_come_skip_only_the_orthogonal_init() -> None:
    """Actors, the policy worker and learners load their parameters before they use them:
    built inside ``parameters_to_come`` they skip the QR decompositions, and loading the
    run's initial parameters makes them the model the trainer built."""
    torch.manual_seed(0)
    reference = build_policy("nature_cnn", (4, 84, 84), 6, 512)
    w = reference.policy.weight  # [6, 512] orthogonal rows, gain 0.01
    assert torch.allclose(w @ w.T, 1e-4 * torch.eye(6), atol=1e-6)
    with parameters_to_come():
        later = build_policy("nature_cnn", (4, 84, 84), 6, 512)
    w = later.policy.weight
    assert not torch.allclose(w @ w.T, 1e-4 * torch.eye(6), atol=1e-6)  # torch's default
    load_flat(later, flat_params(reference))
    assert torch.equal(flat_params(later), flat_params(reference))
    again = build_policy("nature_cnn", (4, 84, 84), 6, 512)  # the context ended: initialised again
    w = again.policy.weight
    assert torch.allclose(w @ w.T, 1e-4 * torch.eye(6), atol=1e-6)


def test_impala_cnn_takes_any_image_and_keeps_default_conv_init() -> None:
    """IMPALA's deep CNN (Espeholt et al. 2018): 256 features for Atari stacks and other
    image sizes; its convolutions keep torch's default initialisation (as CleanRL's), its
    last layer the torso's orthogonal one; a vector is a one-line error."""
    torch.manual_seed(0)
    net = build_policy("impala_cnn", (4, 84, 84), 6, 64, precision="fp32")
    torso = net.torso
    assert isinstance(torso, ImpalaCNNTorso) and torso.out_dim == 256
    for shape in [(4, 84, 84), (3, 64, 64), (3, 7, 7)]:
        small = build_policy("impala_cnn", shape, 5, 64, precision="fp32")
        logits, values = small(torch.zeros(2, *shape, dtype=torch.uint8))
        assert logits.shape == (2, 5) and values.shape == (2,)
    fc = torso.net[1]  # [256, 32 * 11 * 11]
    assert torch.allclose(fc.weight @ fc.weight.T, 2 * torch.eye(256), atol=1e-4)
    first = torso.net[0][0].weight  # [16, 4, 3, 3]: torch's kaiming-uniform bound 1/sqrt(36)
    assert first.abs().max() <= 1 / 6 and first.flatten(1).norm(dim=1).std() > 0
    with pytest.raises(ValueError, match="impala_cnn needs image observations"):
        build_policy("impala_cnn", (8,), 5, 64)


@pytest.mark.parametrize("kind", ["impala_cnn", "nature_cnn"])
def test_a_cnn_refuses_images_that_look_channels_last(kind: str) -> None:
    """explore84: a float [64, 64, 3] image reached impala_cnn as 64 channels of 64x3, and
    nature_cnn said it needs 36 pixels a side. Only uint8 images are moved channels first."""
    from rltrain.rl.algos.torsos import check_image_layout
    from rltrain.rl.env_spec import EnvSpec, start_notes

    with pytest.raises(ValueError, match=f"{kind} reads observations as .C, H, W.*uint8"):
        check_image_layout(kind, (64, 64, 3))  # at train's start (a run trained so plays)
    check_image_layout(kind, (3, 64, 64))  # [C, H, W] as before
    cfg = TrainConfig(env=EnvConfig(id="my/Float-v0"), stop=StopConfig(max_seconds=1))  # auto
    (note,) = start_notes(cfg, EnvSpec((64, 64, 3), "float32", ActionSpace(2), 1, {}))
    assert "(64, 64, 3) of float32 look like images" in note and "12,288 inputs" in note
    assert start_notes(cfg, EnvSpec((3, 64, 64), "float32", ActionSpace(2), 1, {})) == []


def test_images_too_small_for_the_cnn_are_said_to_go_to_the_mlp() -> None:
    """explore115: env.image_size=32 on atari_appo.yaml trained an MLP on raw 0-255 pixels
    (normalize.obs: never, for the CNN), its tanh saturated, without a word."""
    import dataclasses

    from rltrain.rl.config.sections import NormalizeConfig
    from rltrain.rl.env_spec import EnvSpec, image_notes

    cfg = TrainConfig(env=EnvConfig(id="ALE/Breakout-v5"), stop=StopConfig(max_seconds=1))
    small = EnvSpec((4, 32, 32), "uint8", ActionSpace(4), 1, {})
    raw = dataclasses.replace(cfg, normalize=NormalizeConfig(obs="never"))
    (note,) = image_notes(raw, small)
    assert "images (4, 32, 32) under 36 pixels a side" in note and "raw 0-255 pixels" in note
    assert note.endswith("env.image_size=36 or more for the CNN, or normalize.obs=always")
    (note,) = image_notes(cfg, small)  # normalised (auto): the MLP alone is said
    assert "raw" not in note and note.endswith("env.image_size=36 or more for the CNN")
    assert image_notes(cfg, EnvSpec((4, 84, 84), "uint8", ActionSpace(4), 1, {})) == []
    mlp = dataclasses.replace(cfg, model=dataclasses.replace(cfg.model, kind="mlp"))
    assert image_notes(mlp, small) == []  # asked for


def test_impala_cnn_on_a_cpu_acts_and_learns_channels_last() -> None:
    """oneDNN's 3x3 convolutions ran faster NHWC: on a CPU the IMPALA CNN runs channels-last
    for acting as well as learning, in bf16 and fp32 (the Nature CNN only for learning),
    with the same flat parameters and outputs as an NCHW twin."""
    torch.manual_seed(0)
    a = build_policy("impala_cnn", (4, 84, 84), 6, 64, precision="bf16")
    assert isinstance(a.torso, ImpalaCNNTorso) and a.torso.channels_last
    torch.manual_seed(0)
    b = build_policy("impala_cnn", (4, 84, 84), 6, 64, precision="fp32")
    assert isinstance(b.torso, ImpalaCNNTorso) and b.torso.channels_last
    b.torso.to(memory_format=torch.contiguous_format)  # type: ignore[call-overload]
    b.torso.channels_last = False  # the NCHW twin
    assert b.torso.net[0][0].weight.is_contiguous()
    assert torch.equal(flat_params(a), flat_params(b))
    nature = build_policy("nature_cnn", (4, 84, 84), 6, 64, precision="bf16")
    assert not nature.torso.channels_last
    train_layout(nature)
    assert nature.torso.channels_last
    obs = torch.randint(0, 255, (3, 4, 84, 84), dtype=torch.uint8)
    b.torso.bf16 = True  # the same arithmetic in NCHW
    torch.testing.assert_close(a(obs)[0], b(obs)[0], atol=2e-3, rtol=0)
    load_flat(a, flat_params(a) * 0.5)
    assert torch.equal(flat_params(a), flat_params(b) * 0.5)


def test_a_parameter_the_loss_does_not_reach_gets_a_zero_gradient() -> None:
    """explore108: a policy-only loss (REINFORCE without a baseline) left the critic's grads
    None, and the flat gradient crashed as "an internal error (a bug)"."""
    used, unused = torch.nn.Linear(3, 2), torch.nn.Linear(3, 1)
    net = torch.nn.ModuleList([used, unused])
    used(torch.ones(1, 3)).sum().backward()
    flat, norm = clipped_flat_grad(net, 0)
    assert flat.shape == (8 + 4,) and (flat[8:] == 0).all() and norm > 0


def test_a_users_own_images_get_advice_their_env_takes() -> None:
    """explore118: the small-image note advised env.image_size to a Gymnasium env, which then
    refused it (Atari's only); a user's FrameStackObservation stacked again by rltrain (3 gray
    frames read as RGB, 12 channels), or over RGB images (4 axes: a 6.3M-weight MLP), unsaid."""
    import dataclasses

    from rltrain.rl.env_spec import EnvSpec, image_notes

    cfg = TrainConfig(env=EnvConfig(id="pixenv:Pix-v0"), stop=StopConfig(max_seconds=1))
    (note,) = image_notes(cfg, EnvSpec((12, 8, 8), "uint8", ActionSpace(2), 1, {}, stacked=4))
    assert note.endswith(
        "a resize in env.wrappers (gymnasium.wrappers:ResizeObservation(shape=(36, 36))) or "
        "model.kind=impala_cnn for the CNN"
    )
    (note,) = image_notes(cfg, EnvSpec((4, 64, 64, 3), "uint8", ActionSpace(2), 1, {}))
    assert "(4, 64, 64, 3) of 4 axes: the MLP takes them flattened (49,152 inputs)" in note
    stack = "gymnasium.wrappers:FrameStackObservation(stack_size=3)"
    own = dataclasses.replace(cfg, env=dataclasses.replace(cfg.env, wrappers=(stack,)))
    (note,) = image_notes(own, EnvSpec((12, 64, 64), "uint8", ActionSpace(2), 1, {}, stacked=4))
    assert note == (
        f"env.wrappers stacks frames ({stack}) and rltrain stacked its images again "
        "(env.frame_stack=4): set env.frame_stack=1 for the wrapper's alone"
    )
    assert image_notes(own, EnvSpec((3, 64, 64), "uint8", ActionSpace(2), 1, {})) == []


def test_large_images_and_images_in_a_dict_are_said() -> None:
    """explore118: a rendered CartPole (400x600 RGB, stacked) trained at 4 frames/s with
    409 MB checkpoints, and a Dict {image, vector} went to a 12,290-input MLP, both unsaid."""
    import gymnasium

    from rltrain.rl.env_spec import EnvSpec, dict_image_notes, image_notes

    cfg = TrainConfig(env=EnvConfig(id="CartPole-v1"), stop=StopConfig(max_seconds=1))
    (note,) = image_notes(cfg, EnvSpec((12, 400, 600), "uint8", ActionSpace(2), 1, {}))
    assert note.startswith("env CartPole-v1: images (12, 400, 600), 400x600 pixels: a CNN's")
    assert note.endswith("(gymnasium.wrappers:ResizeObservation(shape=(84, 84)))")
    assert image_notes(cfg, EnvSpec((4, 84, 84), "uint8", ActionSpace(2), 1, {})) == []
    box = gymnasium.spaces.Box
    own = gymnasium.spaces.Dict(
        {"image": box(0, 255, (64, 64, 3), "uint8"), "vector": box(-1, 1, (2,))}
    )
    (note,) = dict_image_notes(cfg, EnvSpec((12_290,), "float32", ActionSpace(2), 1, {}, own))
    assert "with images under image, are flattened into 12,290 values for the MLP" in note
    assert note.endswith(
        "a wrapper of your own in env.wrappers that returns the image (obs['image'])"
    )
    vectors = gymnasium.spaces.Dict({"a": box(-1, 1, (2,)), "b": box(-1, 1, (3,))})
    assert dict_image_notes(cfg, EnvSpec((5,), "float32", ActionSpace(2), 1, {}, vectors)) == []
