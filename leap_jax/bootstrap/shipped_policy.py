"""The SFT policy the repository ships (`artifacts/policies/`), unpacked where the configs expect it.

`configs/generated/*` start from `model.path: runs/gen/policy`, the policy of the LEAP headline. It
travels as a checksummed tarball; `ensure_shipped_policy` unpacks it the first time a run names that
folder and finds it missing, so a fresh clone trains with one command. Paths other than the shipped
one are left alone (a missing folder there is the user's to fill, and the model loader says so).

    python -m leap_jax.bootstrap.shipped_policy     # unpack now (what the GPU recipes do first)
"""
from __future__ import annotations

import hashlib
import sys
import tarfile
from collections.abc import Callable
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
ARTIFACT_DIR = REPO_ROOT / "artifacts" / "policies" / "gen-2026-12-04"
SHIPPED_PATH = Path("runs/gen/policy")  # what configs/generated name as model.path, relative to the run's cwd
_TARBALL = "policy.tar.gz"


class ShippedPolicyError(RuntimeError):
    """The shipped tarball is absent or does not match its recorded checksum."""


def _expected_sha256(artifact_dir: Path) -> str:
    sums = artifact_dir / "SHA256SUMS"
    for line in sums.read_text().splitlines():
        digest, _, name = line.partition("  ")
        if name.strip() == _TARBALL:
            return digest.strip()
    raise ShippedPolicyError(f"{sums} lists no checksum for {_TARBALL}")


def unpack_policy(dest: Path, artifact_dir: Path | None = None) -> Path:
    """Unpack the tarball's `policy/` folder into `dest` (which becomes that folder) after checking it.

    `artifact_dir` defaults to the shipped one (`ARTIFACT_DIR`, read at call time)."""
    artifact_dir = ARTIFACT_DIR if artifact_dir is None else artifact_dir
    tarball = artifact_dir / _TARBALL
    if not tarball.is_file():
        raise ShippedPolicyError(f"the shipped policy {tarball} is missing (a partial clone? "
                                 f"expected the file next to {artifact_dir / 'SHA256SUMS'})")
    digest = hashlib.sha256(tarball.read_bytes()).hexdigest()
    if digest != _expected_sha256(artifact_dir):
        raise ShippedPolicyError(f"{tarball} has sha256 {digest}, not the one in SHA256SUMS: "
                                 "re-fetch the file (git lfs pull, or a fresh clone)")
    staging = dest.parent / f".{dest.name}.unpacking"
    staging.mkdir(parents=True, exist_ok=True)
    with tarfile.open(tarball) as tar:
        tar.extractall(staging, filter="data")
    (staging / "policy").rename(dest)
    staging.rmdir()
    return dest


def ensure_shipped_policy(model_path: str | None, log: Callable[[str], None] = print) -> bool:
    """Unpack the shipped policy if `model_path` names its folder and the folder has no config.json.

    Returns True when it unpacked. A complete folder, another path, or None is left as is."""
    if model_path is None or Path(model_path) != SHIPPED_PATH:
        return False
    dest = Path(model_path)
    if (dest / "config.json").is_file():
        return False
    if dest.exists():
        raise ShippedPolicyError(f"model.path {model_path!r} exists but holds no config.json: remove it "
                                 "to have the shipped policy unpacked there")
    log(f"[leap_jax] unpacking the shipped SFT policy {ARTIFACT_DIR / _TARBALL} to {dest}")
    unpack_policy(dest)
    return True


def main() -> int:
    try:
        done = ensure_shipped_policy(str(SHIPPED_PATH))
    except ShippedPolicyError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    print(f"{SHIPPED_PATH}: {'unpacked' if done else 'already there'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
