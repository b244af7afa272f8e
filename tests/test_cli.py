import numpy as np
import pytest

import eqx_qd as q
from eqx_qd.cli import main


SMALL = [
    "run", "map-elites", "--task", "sphere", "--genotype-dim", "4", "--grid", "--cells", "5",
    "--batch-size", "16", "--iterations", "20", "--log-period", "5", "--no-progress",
]  # fmt: skip


def test_cli_writes_a_run_folder(tmp_path, capsys):
    out = tmp_path / "run"
    assert main(SMALL + ["--out", str(out)]) == 0
    names = sorted(p.name for p in out.iterdir())
    assert names == [
        "centroids.npy", "config.toml", "progress.csv", "progress.png", "repertoire.eqx",
        "repertoire.png",
    ]  # fmt: skip
    config, rep, progress = q.load_map_elites_run(out)
    assert config.task == "sphere" and config.cells == 5 and config.grid
    assert list(progress["iteration"]) == [0, 5, 10, 15, 20]
    assert list(progress["evaluations"]) == [16 * (i + 1) for i in (0, 5, 10, 15, 20)]
    assert progress["num_filled"][-1] == int(rep.num_filled)
    np.testing.assert_allclose(
        progress["qd_score"][-1], float(q.qd_metrics(rep, 100.0).qd_score), rtol=1e-6
    )
    assert np.all(np.diff(progress["qd_score"]) >= 0)
    assert "run folder" in capsys.readouterr().out


def test_cli_config_file_and_overrides(tmp_path):
    cfg = tmp_path / "c.toml"
    cfg.write_text(
        '[map-elites]\ntask = "arm"\ngenotype_dim = 3\niterations = 2\ncells = 16\n'
        "cvt_samples = 500\nbatch_size = 8\nlog_period = 1\n"
    )
    out = tmp_path / "run"
    assert main(["run", "map-elites", "--config", str(cfg), "--seed", "3", "--no-plots",
                 "--no-progress", "--out", str(out)]) == 0  # fmt: skip
    config, rep, progress = q.load_map_elites_run(out)
    assert (config.task, config.seed, config.cells) == ("arm", 3, 16)
    assert isinstance(rep.tessellation, q.CVTTessellation) and rep.num_cells == 16
    assert len(progress["iteration"]) == 3


@pytest.mark.parametrize(
    "args, message",
    [
        (["--task", "nope"], "unknown task"),
        (["--cells", "-3"], "positive integer"),
        (["--config", "/nonexistent/c.toml"], "cannot read config"),
        (["--iso-sigma", "abc"], "expected a number"),
        (["--centroids", "/nonexistent/c.npy"], "does not exist"),
    ],
)
def test_cli_bad_input_is_one_line_exit_2(tmp_path, capsys, args, message):
    with pytest.raises(SystemExit) as exc:
        main(["run", "map-elites", "--out", str(tmp_path / "r")] + args)
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and message in err and err.startswith("eqx-qd: error:")


def test_cli_rejects_unknown_config_keys(tmp_path, capsys):
    cfg = tmp_path / "c.toml"
    cfg.write_text("bogus = 1\n")
    with pytest.raises(SystemExit) as exc:
        main(["run", "map-elites", "--config", str(cfg)])
    assert exc.value.code == 2 and "bogus" in capsys.readouterr().err
    cfg.write_text("this is not toml")
    with pytest.raises(SystemExit):
        main(["run", "map-elites", "--config", str(cfg)])
    assert "not valid TOML" in capsys.readouterr().err
