"""`make install`'s system-package step (`make sysdeps`) on this machine, for real.

With bubblewrap on PATH it does nothing; without it, a user who is not root gets the exact
command to run and exit 2 (the Makefile is run as uid 65534 with a PATH that has no bwrap). The
root branch (apt-get update + install) was run by hand in a private mount namespace with bwrap
masked; it is not run here, as it would change the machine's packages.
"""

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
MAKE = shutil.which("make")
pytestmark = pytest.mark.skipif(MAKE is None, reason="make is not installed")


def test_sysdeps_is_a_no_op_when_bubblewrap_is_there():
    if shutil.which("bwrap") is None:
        pytest.skip("bubblewrap is not installed here: the no-op case cannot be run")
    done = subprocess.run([MAKE, "-s", "-C", str(ROOT), "sysdeps"], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "" and done.stderr == ""


@pytest.fixture
def open_dir():
    """A directory uid 65534 can read (pytest's tmp_path sits under a root-only folder)."""
    path = Path(tempfile.mkdtemp(prefix="scalerl-make-"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path)


def test_sysdeps_without_bubblewrap_and_not_root_prints_the_command(open_dir):
    tmp_path = open_dir
    shutil.copy(ROOT / "Makefile", tmp_path / "Makefile")
    (tmp_path / "Makefile").chmod(0o644)
    bin_dir = tmp_path / "bin"  # id, apt-get: everything the recipe may call but bwrap
    bin_dir.mkdir(mode=0o755)
    for tool in ("id", "apt-get"):
        if shutil.which(tool):
            (bin_dir / tool).symlink_to(shutil.which(tool))
    drop = ["setpriv", "--reuid", "65534", "--regid", "65534", "--clear-groups"]
    cmd = [*drop] if os.geteuid() == 0 else []
    done = subprocess.run([*cmd, "env", f"PATH={bin_dir}", MAKE, "-s", "-C", str(tmp_path),
                           "sysdeps"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert "bubblewrap (bwrap) is missing" in done.stderr
    assert "sudo apt-get install -y bubblewrap" in done.stderr
    assert "installing" not in done.stdout  # never tried apt-get without root
