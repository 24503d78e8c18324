"""Build the docker sandbox image `scalerl-sandbox:latest` (python3 on Debian bookworm, uid 65534).

Covered: a Dockerfile build when a registry answers, else `debootstrap --variant=minbase
--include=python3 bookworm` into a temp dir and `docker import` of its tar (no registry needed,
only a Debian mirror); idempotent (an existing image is kept unless `force`). Not covered: image
signing, pinning package versions, other distributions.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

IMAGE = "scalerl-sandbox:latest"
DOCKERFILE_DIR = Path(__file__).parent
REGISTRY = ("registry-1.docker.io", 443)
SUITE = "bookworm"
IMPORT_CHANGES = ("USER 65534:65534", "WORKDIR /work", "ENV PATH=/usr/local/bin:/usr/bin:/bin")


def registry_reachable(timeout_s: float = 3.0) -> bool:
    try:
        with socket.create_connection(REGISTRY, timeout=timeout_s):
            return True
    except OSError:
        return False


def image_exists(client, name: str = IMAGE) -> bool:
    import docker.errors

    try:
        client.images.get(name)
        return True
    except docker.errors.ImageNotFound:
        return False


def build_image(client, *, force: bool = False, log=print) -> str:
    """Make sure IMAGE exists; returns how: "exists", "dockerfile" or "debootstrap"."""
    if image_exists(client) and not force:
        return "exists"
    start = time.monotonic()
    if registry_reachable():
        log(f"building {IMAGE} from {DOCKERFILE_DIR / 'Dockerfile'}")
        client.images.build(path=str(DOCKERFILE_DIR), dockerfile="Dockerfile", tag=IMAGE, rm=True)
        how = "dockerfile"
    else:
        log("no registry reachable: debootstrap + docker import")
        _debootstrap_import()
        how = "debootstrap"
    log(f"built {IMAGE} ({how}) in {time.monotonic() - start:.0f} s")
    return how


def _debootstrap_import() -> None:
    if not shutil.which("debootstrap"):
        raise RuntimeError("no registry reachable and debootstrap is not installed "
                           "(apt-get install debootstrap)")
    root = Path(tempfile.mkdtemp(prefix="scalerl-rootfs-"))
    try:
        subprocess.run(["debootstrap", "--variant=minbase", "--include=python3", SUITE, str(root)],
                       check=True, stdout=subprocess.DEVNULL)
        root.chmod(0o755)  # mkdtemp made it 0700: "/" of the image must be traversable by 65534
        (root / "work").mkdir(mode=0o1777, exist_ok=True)
        (root / "work").chmod(0o1777)
        for cache in ("var/cache/apt/archives", "var/lib/apt/lists"):
            shutil.rmtree(root / cache, ignore_errors=True)
        changes = [a for c in IMPORT_CHANGES for a in ("--change", c)]
        tar = subprocess.Popen(["tar", "-C", str(root), "-c", "."], stdout=subprocess.PIPE)
        imp = subprocess.run(["docker", "import", *changes, "-", IMAGE], stdin=tar.stdout,
                             capture_output=True)
        tar.stdout.close()
        if tar.wait() != 0 or imp.returncode != 0:
            raise RuntimeError(f"docker import failed: {imp.stderr.decode()[-400:]}")
    finally:
        shutil.rmtree(root, ignore_errors=True)
