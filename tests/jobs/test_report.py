"""Multi-seed reports (`jobs.report`, ``eqx-qd report``) over small MAP-Elites runs, with the
statistics checked against NumPy and scipy computed here."""

import csv
import os

import numpy as np
import pytest
from scipy.stats import mannwhitneyu

from eqx_qd import jobs
from eqx_qd.cli import main


TINY = dict(genotype_dim=3, grid=True, cells=4, batch_size=8, iterations=6, log_every=2)


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    """Three seeds on sphere and two on rastrigin (two groups), without plots."""
    root = tmp_path_factory.mktemp("report")
    out = {}
    for task, seeds in (("sphere", (0, 1, 2)), ("rastrigin", (0, 1))):
        for seed in seeds:
            folder = root / f"{task}-{seed}"
            config = jobs.MAPElitesConfig(task=task, seed=seed, **TINY)
            jobs.run(config, folder, progress=False, plots=False)
            out.setdefault(task, []).append(str(folder))
    return out


@pytest.mark.e2e
def test_report_groups_runs_and_takes_medians_over_seeds(folders, tmp_path):
    result = jobs.report(folders["sphere"] + folders["rastrigin"], tmp_path / "r")
    assert [g.name for g in result.groups] == ["MAP-Elites on sphere", "MAP-Elites on rastrigin"]
    sphere = result.groups[0]
    assert len(sphere.runs) == 3
    runs = [jobs.load_run(f) for f in folders["sphere"]]
    qd = np.stack([r.progress["qd_score"] for r in runs])
    np.testing.assert_allclose(sphere.x, runs[0].progress["evaluations"])
    np.testing.assert_allclose(sphere.median["qd_score"], np.median(qd, axis=0))
    np.testing.assert_allclose(sphere.q1["qd_score"], np.percentile(qd, 25, axis=0))
    np.testing.assert_allclose(sphere.q3["qd_score"], np.percentile(qd, 75, axis=0))
    np.testing.assert_allclose(sphere.finals["coverage"], [r.last["coverage"] for r in runs])
    np.testing.assert_allclose(
        sphere.runs[0].fitnesses, np.asarray(runs[0].repertoire.fitnesses, np.float64)
    )
    other = result.groups[1]
    expected = mannwhitneyu(sphere.finals["max_fitness"], other.finals["max_fitness"],
                            alternative="two-sided").pvalue  # fmt: skip
    pair = ("MAP-Elites on sphere", "MAP-Elites on rastrigin")
    assert result.p_values["max_fitness"][pair] == pytest.approx(expected)
    assert result.p_values["max_fitness"][pair[::-1]] == pytest.approx(expected)
    written = set(os.listdir(tmp_path / "r"))
    assert {
        "report.md",
        "finals.csv",
        "p_values.csv",
        "curves.png",
        "fitness_density.png",
    } <= written
    text = (tmp_path / "r" / "report.md").read_text()
    assert "| MAP-Elites on sphere | 3 |" in text and "#### max_fitness" in text
    with open(tmp_path / "r" / "finals.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 5 and float(rows[0]["qd_score"]) == pytest.approx(runs[0].last["qd_score"])


@pytest.fixture(scope="module")
def unequal(tmp_path_factory):
    """Three sphere seeds of 7, 10 and 15 logged rows (a lengthened resume, an early stop)."""
    root = tmp_path_factory.mktemp("unequal")
    out = []
    for seed, iterations in ((7, 12), (8, 18), (9, 28)):
        config = {**TINY, "iterations": iterations}
        jobs.run(jobs.MAPElitesConfig(task="sphere", seed=seed, **config), root / f"s{seed}",
                 progress=False, plots=False)  # fmt: skip
        out.append(str(root / f"s{seed}"))
    return out


@pytest.mark.e2e
def test_runs_of_unequal_length_are_each_read_to_their_own_end(unequal, tmp_path, capsys):
    runs = [jobs.load_run(f).progress for f in unequal]
    assert [len(r["evaluations"]) for r in runs] == [7, 10, 15]
    result = jobs.report(unequal, tmp_path / "r")
    (group,) = result.groups
    # Final values: each run's last row, and their median (not the values at the shortest end).
    finals = [r["qd_score"][-1] for r in runs]
    np.testing.assert_array_equal(group.finals["qd_score"], finals)
    # Curves: over the union of the evaluation counts, each value's statistics over the runs
    # that reach it (NumPy, here, on the runs' own rows: they log at the same counts).
    grid = np.unique(np.concatenate([r["evaluations"] for r in runs]))
    np.testing.assert_array_equal(group.x, grid)
    for j, at in enumerate(grid):
        values = [r["qd_score"][r["evaluations"] == at][0] for r in runs if at in r["evaluations"]]
        assert group.count[j] == len(values)
        assert group.median["qd_score"][j] == pytest.approx(np.median(values))
        assert group.q1["qd_score"][j] == pytest.approx(np.percentile(values, 25))
    # The report says so, naming each run and where it ends; finals.csv has the true finals.
    assert len(result.notes) == 1 and all(f in result.notes[0] for f in unequal)
    text = (tmp_path / "r" / "report.md").read_text()
    assert "Note: MAP-Elites on sphere: runs of unequal length" in text
    median = np.median(finals)
    assert f"| MAP-Elites on sphere | 3 | {median:.4g} " in text
    with open(tmp_path / "r" / "finals.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert [float(r["qd_score"]) for r in rows] == pytest.approx(finals)
    # Equal budget on request: every run cut at the shortest run's end.
    cut = jobs.report(unequal, None, truncate=True).groups[0]
    np.testing.assert_array_equal(cut.x, runs[0]["evaluations"])
    end = runs[0]["evaluations"][-1]
    np.testing.assert_array_equal(
        cut.finals["qd_score"], [r["qd_score"][r["evaluations"] == end][0] for r in runs]
    )
    # The command warns on stderr.
    assert main(["report", *unequal, "--out", str(tmp_path / "cli"), "--no-plots"]) == 0
    err = capsys.readouterr().err
    assert "eqx-qd: warning: MAP-Elites on sphere: runs of unequal length" in err
    assert "final values are each run's own last row" in err


@pytest.mark.e2e
def test_one_group_has_no_p_values(folders, tmp_path):
    result = jobs.report(folders["sphere"][:2], tmp_path / "one")
    assert len(result.groups) == 1 and result.notes == []
    text = (tmp_path / "one" / "report.md").read_text()
    assert "2 runs in 1 group." in text and "One group: no p-values" in text
    assert "####" not in text and not (tmp_path / "one" / "p_values.csv").exists()


def test_the_paper_s_p_values_are_the_asymptotic_test():
    # 20 seeds against 20, every value of one above every value of the other: the paper's
    # tables print 6.30185e-08, the asymptotic test without continuity correction.
    a, b = np.arange(20.0), np.arange(20.0) + 100
    assert jobs.mann_whitney(a, b, "asymptotic") == pytest.approx(6.30185e-08, rel=1e-5)
    assert jobs.mann_whitney(a, b, "exact") == pytest.approx(2 / 137846528820, rel=1e-6)
    assert np.isnan(jobs.mann_whitney(np.array([np.nan]), b))


def test_fitness_loss_is_the_paper_s_percentage():
    run = jobs._report.RunCurves(
        "g", "f", np.array([1.0, 2.0]),
        {"max_fitness": np.array([5.0, 10.0]), "averaged_max_fitness": np.array([5.0, 9.0])},
        np.zeros(3),
    )  # fmt: skip
    assert run.fitness_loss == pytest.approx(10.0)
    run.curves.pop("averaged_max_fitness")
    assert np.isnan(run.fitness_loss)


@pytest.mark.e2e
def test_report_refuses_what_it_cannot_compare(folders, tmp_path, capsys):
    with pytest.raises(ValueError, match="at least one run folder"):
        jobs.report([])
    with pytest.raises(ValueError, match="p_method"):
        jobs.report(folders["sphere"], p_method="bootstrap")
    with pytest.raises(ValueError, match="x must be one of"):
        jobs.report(folders["sphere"], x="iterations")
    with pytest.raises(SystemExit) as e:  # MAP-Elites on a pure-JAX task counts no env steps
        main(["report", *folders["sphere"], "--x", "env_steps", "--no-plots"])
    assert e.value.code == 2 and "logs no environment steps" in capsys.readouterr().err
    unfinished = tmp_path / "unfinished"
    jobs.run(jobs.MAPElitesConfig(task="sphere", **TINY), unfinished, progress=False, plots=False)
    jobs._status.write_status(jobs.RunFolder(unfinished), "failed", error="boom")
    with pytest.raises(ValueError, match="is failed, not finished"):
        jobs.report([str(unfinished)])
    code = main(["report", *folders["rastrigin"], "--out", str(tmp_path / "cli"), "--no-plots"])
    assert code == 0 and "MAP-Elites on rastrigin" in capsys.readouterr().out
    assert os.path.isfile(tmp_path / "cli" / "report.md")
    with pytest.raises(SystemExit) as e:
        main(["report", str(tmp_path / "nowhere")])
    assert e.value.code == 2 and "does not exist" in capsys.readouterr().err


def test_groups_name_the_emitter_and_the_repertoire():
    from eqx_qd.jobs._report import group_of

    cases = {
        (): "MAP-Elites on rastrigin",
        (("emitter", "gaussian"),): "MAP-Elites (gaussian) on rastrigin",
        (("repertoire", "dns"),): "DNS on rastrigin",
        (("repertoire", "unstructured"),): "MAP-Elites (novelty archive) on rastrigin",
        (("emitter", "cma_me"), ("repertoire", "dns")): "CMA-ME (DNS) on rastrigin",
        (("emitter", "cma_mae"),): "CMA-MAE on rastrigin",
    }
    for options, name in cases.items():
        config = jobs.MAPElitesConfig(**dict(options))
        assert group_of(jobs.RunResult(config, None, {}, None, None)) == name


@pytest.mark.e2e
def test_half_written_folders_are_refused_naming_the_file(folders, tmp_path, capsys):
    import shutil

    def copy(name):
        shutil.copytree(folders["sphere"][0], tmp_path / name)
        return tmp_path / name

    header_only = copy("header")
    text = (header_only / "progress.csv").read_text()
    (header_only / "progress.csv").write_text(text.splitlines()[0] + "\n")
    cut_row = copy("cut")
    (cut_row / "progress.csv").write_text(text[: text.rindex("\n", 0, len(text) - 1) + 8])
    truncated = copy("truncated")
    data = (truncated / "repertoire.eqx").read_bytes()
    (truncated / "repertoire.eqx").write_bytes(data[: len(data) // 2])
    garbage = copy("garbage")
    (garbage / "config.toml").write_text("this is [not toml\n")
    status = copy("status")
    (status / "status.json").write_text('{"status": "run')
    centroids = copy("centroids")
    (centroids / "centroids.npy").write_bytes((centroids / "centroids.npy").read_bytes()[:40])
    record = copy("record")
    newest = jobs.list_checkpoints(record)[-1].step
    (record / "checkpoints" / f"{newest:010d}.json").write_text("")
    cases = [
        (header_only, "progress.csv has no complete row"),
        (truncated, "repertoire.eqx' is truncated or corrupt"),
        (garbage, "config.toml' is not valid TOML"),
        (status, "status.json' is truncated or corrupt (not JSON"),
    ]
    for folder, message in cases:
        with pytest.raises(SystemExit) as e:
            main(["report", str(folder), "--out", str(tmp_path / "r"), "--no-plots"])
        assert e.value.code == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and message in err[0] and str(folder) in err[0], err
    with pytest.raises(ValueError, match="centroids.npy' is truncated or corrupt"):
        jobs.RunFolder(centroids).read_npy("centroids.npy")
    # Resume reads the checkpoints' records and status.json: the same one line.
    for folder, name in ((record, f"{newest:010d}.json"), (status, "status.json")):
        with pytest.raises(SystemExit) as e:
            main(["run", "map-elites", "--resume", str(folder), "--no-progress", "--no-plots"])
        err = capsys.readouterr().err.strip().splitlines()
        assert e.value.code == 2 and f"{name}' is truncated or corrupt" in err[-1], err
    # A last row cut by a kill is dropped, as resume drops it: the rows before it are read.
    result = jobs.report([str(cut_row)], None)
    rows = len(jobs.load_run(folders["sphere"][0]).progress["evaluations"])
    assert len(result.groups[0].x) == rows - 1


def _peer_folder(folder, about, progress, fitnesses):
    import json

    os.makedirs(folder, exist_ok=True)
    (folder / "peer.json").write_text(json.dumps(about))
    with open(folder / "progress.csv", "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(list(progress))
        writer.writerows(zip(*progress.values()))
    np.save(folder / "fitnesses.npy", fitnesses)


@pytest.mark.e2e
def test_peer_runs_are_their_own_group_beside_the_jobs_runs(folders, tmp_path, capsys):
    # Another library's runs of the same algorithm on the same task: the sphere runs' curves,
    # QD-scores halved, written as peer run folders; a group of their own, tested against ours.
    about = {"library": "otherlib 1.0", "algorithm": "MAP-Elites", "task": "sphere"}
    peers = []
    for i, folder in enumerate(folders["sphere"]):
        run = jobs.load_run(folder)
        progress = {k: run.progress[k] for k in ("evaluations", "qd_score", "coverage")}
        progress["qd_score"] = progress["qd_score"] / 2
        fitnesses = np.asarray(run.repertoire.fitnesses, np.float64)
        _peer_folder(tmp_path / f"peer-{i}", about, progress, np.where(
            np.isfinite(fitnesses), fitnesses, np.nan))  # fmt: skip
        peers.append(str(tmp_path / f"peer-{i}"))
    result = jobs.report(folders["sphere"] + peers, tmp_path / "r")
    ours, theirs = result.groups
    assert theirs.name == "MAP-Elites on sphere (otherlib 1.0)" and len(theirs.runs) == 3
    np.testing.assert_allclose(theirs.finals["qd_score"], ours.finals["qd_score"] / 2)
    assert "max_fitness" not in theirs.finals  # not logged: not compared
    expected = mannwhitneyu(ours.finals["qd_score"], theirs.finals["qd_score"],
                            alternative="two-sided").pvalue  # fmt: skip
    assert result.p_values["qd_score"][(ours.name, theirs.name)] == pytest.approx(expected)
    assert np.all(theirs.runs[0].fitnesses[~np.isfinite(ours.runs[0].fitnesses)] == -np.inf)
    assert main(["report", *peers, "--out", str(tmp_path / "cli"), "--no-plots"]) == 0
    # Bad peer folders: one line naming the folder and what is missing.
    os.remove(tmp_path / "peer-2" / "fitnesses.npy")
    with pytest.raises(ValueError, match="peer-2' has no fitnesses.npy"):
        jobs.read_curves(peers[2])
    (tmp_path / "peer-1" / "peer.json").write_text('{"library": "otherlib 1.0"}')
    with pytest.raises(ValueError, match=r"peer.json lacks \['algorithm', 'task'\]"):
        jobs.read_curves(peers[1])
    _peer_folder(tmp_path / "peer-0", about, {"evaluations": [1.0], "other": [2.0]}, np.zeros(4))
    with pytest.raises(ValueError, match="progress.csv has none of"):
        jobs.read_curves(peers[0])
    with pytest.raises(ValueError, match="has no peer.json"):  # reading makes no folder
        jobs.read_peer_curves(tmp_path / "no-such-run")
    assert not os.path.exists(tmp_path / "no-such-run")
