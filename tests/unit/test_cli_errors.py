"""Up-front failures of `python -m pipeline run`: a clear message, exit code 2, no engine started."""

import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parents[2]


def run_cli(*args):
    return subprocess.run(
        [sys.executable, "-m", "pipeline", *map(str, args)], capture_output=True, text=True, cwd=ROOT, timeout=120
    )


def test_missing_column_names_what_exists(tmp_path):
    src = tmp_path / "in.parquet"
    pq.write_table(pa.table({"document": ["d"], "prompt": ["q"]}), src)
    proc = run_cli("run", src, tmp_path / "out.parquet")
    assert proc.returncode == 2
    assert "lacks required column(s) question" in proc.stderr and "document, prompt" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "out.parquet").exists()


def test_missing_and_corrupt_input(tmp_path):
    proc = run_cli("run", tmp_path / "nope.parquet", tmp_path / "out.parquet")
    assert proc.returncode == 2 and "input not found" in proc.stderr
    bad = tmp_path / "bad.parquet"
    bad.write_bytes(b"not parquet at all")
    proc = run_cli("run", bad, tmp_path / "out.parquet")
    assert proc.returncode == 2 and "cannot read" in proc.stderr and "Traceback" not in proc.stderr


def test_output_folder_must_exist(tmp_path):
    src = tmp_path / "in.parquet"
    pq.write_table(pa.table({"document": ["d"], "question": ["q"]}), src)
    proc = run_cli("run", src, tmp_path / "no" / "such" / "out.parquet")
    assert proc.returncode == 2 and "output folder does not exist" in proc.stderr


def write_rows(path, **columns):
    pq.write_table(pa.table(columns), path)
    return path


def assert_refused(proc, *phrases):
    assert proc.returncode == 2, proc.stderr
    for phrase in phrases:
        assert phrase in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1  # one paragraph


def test_output_path_not_writable(tmp_path):
    src = write_rows(tmp_path / "in.parquet", document=["d"], question=["q"])
    (tmp_path / "a-file").write_text("")
    proc = run_cli("run", src, tmp_path / "a-file" / "out.parquet")
    assert_refused(proc, "is not writable", "is not a folder")
    proc = run_cli("run", src, tmp_path)  # a folder where the output file should go
    assert_refused(proc, "is a folder; give a file name")


def test_bad_config_and_missing_model_path(tmp_path):
    src = write_rows(tmp_path / "in.parquet", document=["d"], question=["q"])
    bad = tmp_path / "bad.yaml"
    bad.write_text((ROOT / "cluster.yaml").read_text() + "\nsurprise: 1\n")
    proc = run_cli("run", src, tmp_path / "out.parquet", "--config", bad)
    assert proc.returncode == 2 and "surprise: unknown key" in proc.stderr and "Traceback" not in proc.stderr
    no_model = tmp_path / "no-model.yaml"
    no_model.write_text((ROOT / "cluster.yaml").read_text().replace("path: null", f"path: {tmp_path}/no/such/model"))
    proc = run_cli("run", src, tmp_path / "out.parquet", "--config", no_model, "--engine", "fake")
    assert_refused(proc, "model path does not exist", "no/such/model")
    assert not (tmp_path / "out.parquet").exists()


def test_duplicate_ids_refused_up_front(tmp_path):
    src = write_rows(tmp_path / "in.parquet", id=["a", "b", "a", "c", "c", "c"], document=["d"] * 6, question=["q"] * 6)
    proc = run_cli("run", src, tmp_path / "out.parquet")
    assert_refused(
        proc, "2 id value(s) used by more than one row", "'c' (3 times)", "'a' (2 times)", "--allow-duplicate-ids"
    )


def test_corrupt_or_disagreeing_files_in_a_folder(tmp_path):
    folder = tmp_path / "in"
    folder.mkdir()
    write_rows(folder / "a.parquet", document=["d"], question=["q"])
    write_rows(folder / "b.parquet", document=["d"], question=[1])
    proc = run_cli("run", folder, tmp_path / "out.parquet")
    assert_refused(proc, "input files disagree on their columns", "question (string)", "question (int64)")
    (folder / "b.parquet").write_bytes((folder / "a.parquet").read_bytes()[:-30])  # footer cut off
    proc = run_cli("run", folder, tmp_path / "out.parquet")
    assert_refused(proc, "cannot read", "b.parquet", "as Parquet")
    proc = run_cli("run", str(tmp_path / "nothing-*.parquet"), tmp_path / "out.parquet")
    assert_refused(proc, "input not found: no file matches")


def test_output_over_the_input_refused_and_input_intact(tmp_path):
    """The input file as OUTPUT, however spelled (a `./` in the path, a symlink): refused before
    anything is written (it once answered and then renamed the output over the input)."""
    src = write_rows(tmp_path / "in.parquet", document=["d"], question=["q"])
    before = src.read_bytes()
    (tmp_path / "link.parquet").symlink_to(src)
    for output in (src, f"{tmp_path}/./in.parquet", tmp_path / "link.parquet"):
        proc = run_cli("run", src, output, "--engine", "fake", "--quiet")
        assert_refused(proc, f"error: OUTPUT {output} is the job's input ({src})", "choose another output path")
    assert src.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.parquet", "link.parquet"]  # no OUTPUT.partial


def test_output_inside_an_input_folder_or_glob_refused(tmp_path):
    """An OUTPUT (or its OUTPUT.partial) inside the input folder, or where the input glob looks, would be
    read as input by the next run: refused, though it does not exist yet."""
    folder = tmp_path / "in"
    folder.mkdir()
    a = write_rows(folder / "a.parquet", document=["d"], question=["q"])
    before = a.read_bytes()
    proc = run_cli("run", folder, folder / "answers.parquet", "--engine", "fake", "--quiet")
    assert_refused(proc, f"OUTPUT {folder / 'answers.parquet'} is inside the input folder {folder}")
    proc = run_cli("run", str(tmp_path / "*" / "*.parquet"), folder / "answers.parquet", "--engine", "fake", "--quiet")
    assert_refused(proc, f"is matched by the input glob {tmp_path}/*/*.parquet", "choose another output path")
    proc = run_cli("run", folder, tmp_path / "in.parquet", "--engine", "fake", "--quiet")
    assert proc.returncode == 0, proc.stderr  # beside the folder (and OUTPUT.partial too), not in it: answered
    assert a.read_bytes() == before
    assert sorted(p.name for p in folder.iterdir()) == ["a.parquet"]


def test_output_apart_from_the_input_from_python(tmp_path):
    """prepare_job (and so run_job) refuses the same, and compares object-store URLs normalized;
    an OUTPUT next to the input, or out of the glob's reach, is fine."""
    from pipeline.config import load_config
    from pipeline.data.errors import JobError
    from pipeline.jobs.job import prepare_job

    config = load_config().replace(engine={"kind": "fake"})
    folder = tmp_path / "in"
    folder.mkdir()
    write_rows(folder / "a.parquet", document=["d"], question=["q"])
    cases = {
        (folder, tmp_path / "in" / "sub" / "answers.parquet"): "is inside the input folder",
        (folder / "a.parquet", tmp_path / "in" / ".." / "in" / "a.parquet"): "is the job's input",
        (str(folder / "*.parquet"), folder / "new.parquet"): "is matched by the input glob",
        (str(tmp_path / "**" / "*.parquet"), tmp_path / "out.parquet"): "is matched by the input glob",
        (
            str(tmp_path / "**" / "*.parquet"),
            tmp_path / "out.json",
        ): "partial results folder",  # its parts would be read as input
        (tmp_path / "out.parquet.partial", tmp_path / "out.parquet"): "holding the job's input",
    }
    (tmp_path / "out.parquet.partial").mkdir()
    write_rows(tmp_path / "out.parquet.partial" / "b.parquet", document=["d"], question=["q"])
    for (src, out), phrase in cases.items():
        try:
            prepare_job(src, out, config=config, notify=lambda _: None)
        except JobError as exc:
            assert phrase in str(exc), (src, out, exc)
        else:
            raise AssertionError(f"{src} -> {out} was not refused")
    assert sorted(p.name for p in folder.iterdir()) == ["a.parquet"]
    for src, out in ((folder, tmp_path / "answers.parquet"), (str(folder / "*.parquet"), folder / "sub" / "x.parquet")):
        if out.parent != tmp_path:
            out.parent.mkdir()
        prepare_job(src, out, config=config, notify=lambda _: None)  # refused only where they meet

    import fsspec

    with fsspec.open("memory://bucket42/in.parquet", "wb") as f:
        pq.write_table(pa.table({"document": ["d"], "question": ["q"]}), f)
    try:
        prepare_job(
            "memory://bucket42/in.parquet", "memory://bucket42/./in.parquet", config=config, notify=lambda _: None
        )
    except JobError as exc:
        assert "is the job's input (memory:///bucket42/in.parquet)" in str(exc)
    else:
        raise AssertionError("memory://bucket42/./in.parquet was not refused")
    finally:
        fsspec.filesystem("memory").rm("/bucket42", recursive=True)


def test_a_task_the_configured_model_cannot_serve_stops_before_any_engine_starts(tmp_path):
    src = tmp_path / "in.parquet"
    pq.write_table(pa.table({"document": ["d"], "question": ["q"]}), src)
    proc = run_cli("run", src, tmp_path / "out.parquet", "--task", "embed")  # (the default model generates)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "task embed needs an embedding model, and this cluster's engines run SmolLM2-135M-Instruct" in proc.stderr
    assert "engine ready" not in proc.stderr
    config = tmp_path / "embed.yaml"
    config.write_text("model:\n  path: all-MiniLM-L6-v2\n")
    proc = run_cli("run", src, tmp_path / "out2.parquet", "--config", config)
    assert proc.returncode == 2 and "an embedding model, which serves only task embed" in proc.stderr
    assert "(this job's task is document_question)" in proc.stderr and "engine ready" not in proc.stderr
    proc = run_cli("run", src, tmp_path / "out3.parquet", "--model", "all-MiniLM-L6-v2")  # (the same, as an option)
    assert proc.returncode == 2 and "an embedding model, which serves only task embed" in proc.stderr
