"""The DCRL-ME job: the DCRL repository's config files read as its main reads them, files
that do not fit refused by name, QDax's names and the batch split."""

import pytest

from eqx_qd import jobs
from eqx_qd.cli import main


TOP = """\
hydra:
  run:
    dir: ./output
defaults:
  - _self_
  - env: ant_omni
  - algo: dcrl_me
seed: 42
num_iterations: 100
batch_size: 256
num_init_cvt_samples: 50000
num_centroids: 1024
policy_hidden_layer_sizes: [128, 128]
"""


ALGO = """\
name: {name}
ga_batch_size: {ga}
qpg_batch_size: {pg}
ai_batch_size: {ai}
actor_batch_size: {actor}
lengthscale: 0.1
dc_actor: True
iso_sigma: 0.005
line_sigma: 0.05
critic_hidden_layer_size: [256, 256]
num_critic_training_steps: 3000
num_pg_training_steps: 150
batch_size: 100
replay_buffer_size: 1_000_000
discount: 0.99
reward_scaling: 1.0
critic_learning_rate: 3e-4
actor_learning_rate: 3e-4
policy_learning_rate: 5e-3
noise_clip: 0.5
policy_noise: 0.2
soft_tau_update: 0.005
policy_delay: 2
"""


ENV_FILE = """\
name: ant_omni
version: v1
backend: spring
episode_length: 250
min_bd: -30.
max_bd: 30.
"""


def _repository(tmp_path, **algo):
    fields = dict(name="dcrl_me", ga=128, pg=64, ai=64, actor=0) | algo
    (tmp_path / "algo").mkdir(exist_ok=True)
    (tmp_path / "env").mkdir(exist_ok=True)
    (tmp_path / "algo" / "dcrl_me.yaml").write_text(ALGO.format(**fields))
    (tmp_path / "env" / "ant_omni.yaml").write_text(ENV_FILE)
    (tmp_path / "dcrl_me.yaml").write_text(TOP)
    return tmp_path / "dcrl_me.yaml"


def test_the_repository_config_files_read_as_its_main_reads_them(tmp_path):
    read_repository_config = jobs.JOBS["dcrl-me"].translator
    values, notes = read_repository_config(_repository(tmp_path))
    config = jobs.DCRLMEConfig.from_mapping(values)
    # Over the paper's setting: the file differs in its seed and its 100 iterations.
    assert config == jobs.DCRLMEConfig.preset("paper", seed=42, evaluations=256 + 100 * 256)
    assert (config.ga_batch_size, config.pg_batch_size, config.ai_batch_size) == (128, 64, 64)
    assert (config.minibatch_size, config.pg_lr, config.episode_length) == (100, 5e-3, 250)
    assert any("min_bd=-30.0" in n for n in notes)
    # DCG-ME's algo file read alone.
    (tmp_path / "dcg.yaml").write_text(ALGO.format(name="dcg_me", ga=128, pg=128, ai=0, actor=64))
    values, _ = read_repository_config(tmp_path / "dcg.yaml")
    dcg = jobs.DCRLMEConfig.from_mapping(values)
    assert dcg == jobs.DCRLMEConfig.preset("dcg-me-paper")


@pytest.mark.parametrize(
    "algo, match",
    [
        (dict(name="pga_me"), "algorithm 'pga_me'.*eqx-qd run pgame"),
        (dict(ga=100), "ga_batch_size 100 is not the rest of batch_size 256"),
    ],
)
def test_repository_files_that_do_not_fit_are_refused_by_name(tmp_path, algo, match):
    read_repository_config = jobs.JOBS["dcrl-me"].translator
    with pytest.raises(ValueError, match=match):
        read_repository_config(_repository(tmp_path, **algo))
    path = _repository(tmp_path)
    algo_file = tmp_path / "algo" / "dcrl_me.yaml"
    text = algo_file.read_text()
    algo_file.write_text(text.replace("dc_actor: True", "dc_actor: False"))
    with pytest.raises(ValueError, match="dc_actor false"):
        read_repository_config(path)
    algo_file.write_text(text + "warp: 3\n")
    with pytest.raises(ValueError, match="unknown algo key 'warp'"):
        read_repository_config(path)


@pytest.mark.e2e
def test_the_config_takes_qdax_names_from_files_and_checks_the_split(tmp_path, capsys):
    path = tmp_path / "c.toml"
    path.write_text("[dcrl-me]\ndcrl_batch_size = 32\nsoft_tau_update = 0.01\n")
    config = jobs.DCRLMEConfig.from_toml(path)
    assert (config.pg_batch_size, config.tau, config.ga_batch_size) == (32, 0.01, 16)
    with pytest.raises(ValueError, match="dcrl_batch_size is pg_batch_size"):
        jobs.DCRLMEConfig.from_mapping({"dcrl_batch_size": 32})
    with pytest.raises(ValueError, match=r"exceed batch_size \(64\)"):
        jobs.DCRLMEConfig(pg_batch_size=50, ai_batch_size=30)
    with pytest.raises(ValueError, match="folds the target descriptor"):
        jobs.DCRLMEConfig(normalise=True, affine=True)
    local = jobs.DCRLMEConfig()  # the laptop's size by default, the paper's as a preset
    assert (local.ga_batch_size, local.pg_batch_size, local.ai_batch_size) == (32, 16, 16)
    paper = jobs.DCRLMEConfig.preset("paper")
    assert (paper.ga_batch_size, paper.pg_batch_size, paper.ai_batch_size) == (128, 64, 64)
    assert (paper.env, paper.evaluations, paper.episode_length) == ("ant_omni", 1_024_256, 250)
    dcg = jobs.DCRLMEConfig.preset("dcg-me")
    assert (dcg.ga_batch_size, dcg.pg_batch_size, dcg.ai_batch_size, dcg.actor_evals) == (
        32, 32, 0, 16,
    )  # fmt: skip
    with pytest.raises(SystemExit) as e:
        main(["run", "dcrl-me", "--pg-batch-size", "300", "--out", str(tmp_path / "r")])
    assert e.value.code == 2 and "exceed batch_size" in capsys.readouterr().err
    assert not (tmp_path / "r").exists()
