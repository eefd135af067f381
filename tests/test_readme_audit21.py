"""README audit 21 (a new user on a fresh machine, README top to bottom): `make install` with a Python that cannot
make the venv or is too old, and `make demo` interrupted with Ctrl-C or writing where it cannot. No training, no
network: the Makefile runs with stand-in Pythons and the demo's stages are stand-ins; seconds, CPU-only."""
from __future__ import annotations

import errno
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from albertlm import demo

ROOT = Path(__file__).resolve().parents[1]
MAKE = shutil.which("make")
# `make test` runs these tests: its own make flags (jobserver, -s, -n ...) must not reach the makes run here
ENV = {k: v for k, v in os.environ.items()
       if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL", "MAKEOVERRIDES", "TORCH_INDEX", "PY", "VENV")}
needs_make = pytest.mark.skipif(MAKE is None, reason="no make on this machine")


def _script(path: Path, text: str) -> Path:
    path.write_text("#!/bin/sh\n" + text)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def _stand_in_python(tmp_path: Path, version_ok: bool) -> tuple[Path, Path]:
    """A `PY` for the Makefile: `-c CHECK` answers as a Python that is (or is not) 3.10+, `-m venv DIR` records
    the call and makes DIR/bin/pip a pip that does nothing. (the script, the file the venv calls are recorded in)"""
    log = tmp_path / "venv_calls.txt"
    check = f'exec "{sys.executable}" "$@"' if version_ok else "exit 1"
    text = (f'if [ "$1" = "-c" ]; then {check}; fi\n'
            f'echo "$*" >> "{log}"\n'
            'mkdir -p "$3/bin" && printf "#!/bin/sh\\nexit 0\\n" > "$3/bin/pip" && chmod +x "$3/bin/pip"\n')
    return _script(tmp_path / "py", text), log


def _make_install(venv: Path, python: Path) -> subprocess.CompletedProcess:
    return subprocess.run([MAKE, "-s", "install", f"VENV={venv}", f"PY={python}"], cwd=ROOT, capture_output=True,
                          text=True, timeout=120, env=ENV)


# ------------------------------------------------------------------------------------------------ install
@needs_make
def test_make_install_finishes_a_venv_an_earlier_failed_venv_left_without_pip(tmp_path):
    """On Debian/Ubuntu without python3-venv, `python3 -m venv .venv` fails at ensurepip after making
    .venv/bin/python. The Makefile made the venv only where .venv/bin/python was missing, so every later
    `make install` / `make demo`, after the user installed python3-venv, failed on ".venv/bin/pip: No such file
    or directory" until .venv was deleted by hand. A venv without pip is now made again."""
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    _script(venv / "bin" / "python", "exit 0\n")            # what the failed `-m venv` left: a python, no pip
    python, log = _stand_in_python(tmp_path, version_ok=True)
    done = _make_install(venv, python)
    assert done.returncode == 0, done.stdout + done.stderr
    assert log.read_text().split() == ["-m", "venv", str(venv)]
    assert (venv / ".installed").is_file()


@needs_make
def test_make_install_refuses_a_python_older_than_the_package_needs_before_installing_anything(tmp_path):
    """`make install` with a python3 older than 3.10 (the package's requires-python) made the venv, upgraded pip
    and then failed on "Could not find a version that satisfies the requirement torch==2.13.0", which reads as a
    network or index problem. It now says in one line that PY is too old and how to give another."""
    python, log = _stand_in_python(tmp_path, version_ok=False)
    venv = tmp_path / "venv"
    done = _make_install(venv, python)
    assert done.returncode != 0
    assert "needs Python 3.10 or newer" in done.stderr and "PY=python3.11" in done.stderr, done.stderr
    assert not log.exists() and not venv.exists()           # nothing made, nothing downloaded


def test_readme_says_which_python_make_install_needs_and_how_to_pick_one():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert "Python 3.10" in readme and "PY=python3.11" in readme


# ------------------------------------------------------------------------------------------------ the demo
def _corpus_stand_in(path: Path, limit_chars: int = 0):
    path.mkdir(parents=True, exist_ok=True)
    sizes = {split: {"documents": 3, "MB": 0.1} for split in ("train", "heldout")}
    return path / "train.txt", path / "heldout.txt", sizes


def _one_line_error(capsys, prefix: str) -> str:
    err = capsys.readouterr().err
    assert err.startswith(prefix) and err.count("\n") == 1 and "Traceback" not in err, err
    return err


def test_demo_that_cannot_make_its_output_directory_says_so_in_one_line(tmp_path, capsys):
    """`make demo` in a checkout it cannot write (here: --out under a file) ended in a 40-line traceback of
    pathlib's mkdir; it is one `albertlm demo: error:` line and exit 2, as every command's errors are."""
    blocker = tmp_path / "a_file"
    blocker.write_text("not a directory")
    assert demo.main(["--quick", "--out", str(blocker / "demo_run")]) == 2
    _one_line_error(capsys, "albertlm demo: error: ")


def test_demo_on_a_full_disk_says_so_in_one_line(monkeypatch, tmp_path, capsys):
    def full(path: Path, limit_chars: int = 0):
        raise OSError(errno.ENOSPC, "No space left on device", str(path / "train.txt"))

    monkeypatch.setattr(demo, "write_corpus", full)
    assert demo.main(["--quick", "--out", str(tmp_path / "demo")]) == 2
    assert "No space left on device" in _one_line_error(capsys, "albertlm demo: error: ")


def test_demo_interrupted_before_pretraining_ends_with_one_line_and_130(monkeypatch, tmp_path, capsys):
    """Ctrl-C while the demo trained its tokenizer (or built its data, evaluated, plotted) printed Python's
    KeyboardInterrupt traceback; only pretraining's own stop was handled."""
    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(demo, "write_corpus", _corpus_stand_in)
    monkeypatch.setattr(demo, "train_tokenizer", interrupted)
    try:
        code = demo.main(["--quick", "--out", str(tmp_path / "demo")])
    except KeyboardInterrupt:   # let out, it would stop pytest itself
        pytest.fail("the demo let Ctrl-C out (a KeyboardInterrupt traceback)")
    assert code == 130
    assert "interrupted" in _one_line_error(capsys, "albertlm demo: interrupted")


class _InterruptedProbeLoop:
    """The training loop as the probe meets it when Ctrl-C comes at its third step: the loop takes the signal as a
    request to stop after that step, says so in a run's words, and returns "interrupted"."""

    def __init__(self) -> None:
        self.on_step = None
        self.save = None

    def run(self) -> str:
        for step in (1, 2, 3):
            self.on_step(step, {})
        print("stopped by SIGINT at step 3: saved None; `--resume` continues from there")
        return "interrupted"


def test_ctrl_c_while_the_demo_times_its_steps_stops_the_demo(monkeypatch, tmp_path, capsys):
    """Ctrl-C during the demo's few timed steps (stage 4's first seconds) printed "stopped by SIGINT ...: saved
    None; `--resume` continues from there" and the demo went on to pretrain for minutes, as if nothing had been
    pressed. The probe now passes the Ctrl-C on (the demo ends with exit 130), and its run's words are not shown."""
    from albertlm.training import pretrain

    monkeypatch.setattr(pretrain, "open_datasets", lambda run: None)
    monkeypatch.setattr(pretrain, "make_loop", lambda *args: _InterruptedProbeLoop())
    run = demo.run_config(demo.QUICK, 2000, tmp_path / "train", tmp_path / "heldout", demo.QUICK.max_steps)
    with pytest.raises(KeyboardInterrupt):
        demo.fit_steps(run, demo.QUICK, tmp_path / "probe")
    assert "--resume" not in capsys.readouterr().out
